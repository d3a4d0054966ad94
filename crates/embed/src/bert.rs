//! Our own BERT encoder forward on Candle ops, tuned for batch inference on
//! CPU: one fused Q/K/V projection with the 1/√d attention scale folded into
//! the query weights at load time, Candle's fused softmax and layer norm, an
//! attention mask only when a batch actually has padding, and a GELU (exact,
//! erf-based) that runs as one vectorisable pass instead of libm calls.
//! Numerically it is the same function as the reference BERT; the parity
//! tests hold it to the reference libraries within 1e-4.

use candle_core::{CpuStorage, CustomOp1, DType, Device, Layout, Module, Shape, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};
use rayon::prelude::*;

type Result<T> = candle_core::Result<T>;

struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: vb.get(size, "weight")?,
            bias: vb.get(size, "bias")?,
            eps: eps as f32,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps)
    }
}

fn linear(vb: VarBuilder, inp: usize, out: usize) -> Result<Linear> {
    Ok(Linear::new(
        vb.get((out, inp), "weight")?,
        Some(vb.get(out, "bias")?),
    ))
}

struct Layer {
    qkv: Linear,
    attn_out: Linear,
    attn_norm: LayerNorm,
    ff_in: Linear,
    ff_out: Linear,
    ff_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
    exact_gelu: bool,
}

impl Layer {
    fn load(vb: VarBuilder, c: &Config) -> Result<Layer> {
        let h = c.hidden_size;
        let heads = c.num_attention_heads;
        let head_dim = h / heads;
        let att = vb.pp("attention");
        let sa = att.pp("self");
        // Fold the 1/sqrt(head_dim) scale into the query projection.
        let scale = 1.0 / (head_dim as f64).sqrt();
        let q = linear(sa.pp("query"), h, h)?;
        let k = linear(sa.pp("key"), h, h)?;
        let v = linear(sa.pp("value"), h, h)?;
        let bias = |l: &Linear| l.bias().expect("loaded with bias").clone();
        let w = Tensor::cat(
            &[
                (q.weight() * scale)?,
                k.weight().clone(),
                v.weight().clone(),
            ],
            0,
        )?;
        let b = Tensor::cat(&[(bias(&q) * scale)?, bias(&k), bias(&v)], 0)?;
        let exact_gelu = match c.hidden_act {
            HiddenAct::Gelu => true,
            HiddenAct::GeluApproximate => false,
            ref other => candle_core::bail!("hidden_act {other:?} is not supported (gelu only)"),
        };
        Ok(Layer {
            qkv: Linear::new(w, Some(b)),
            attn_out: linear(att.pp("output").pp("dense"), h, h)?,
            attn_norm: LayerNorm::load(att.pp("output").pp("LayerNorm"), h, c.layer_norm_eps)?,
            ff_in: linear(vb.pp("intermediate").pp("dense"), h, c.intermediate_size)?,
            ff_out: linear(vb.pp("output").pp("dense"), c.intermediate_size, h)?,
            ff_norm: LayerNorm::load(vb.pp("output").pp("LayerNorm"), h, c.layer_norm_eps)?,
            heads,
            head_dim,
            exact_gelu,
        })
    }

    /// `x`: `[b*t, hidden]`, contiguous. `mask`: additive `[b, 1, 1, t]`.
    fn forward(&self, x: &Tensor, b: usize, t: usize, mask: Option<&Tensor>) -> Result<Tensor> {
        let h = self.heads * self.head_dim;
        let qkv = self
            .qkv
            .forward(x)?
            .reshape((b, t, 3, self.heads, self.head_dim))?;
        let qkv = qkv.permute((2, 0, 3, 1, 4))?; // [3, b, heads, t, dim]
        let q = qkv.get(0)?.contiguous()?;
        let k = qkv.get(1)?.contiguous()?;
        let v = qkv.get(2)?.contiguous()?;
        let mut scores = q.matmul(&k.t()?)?; // [b, heads, t, t]
        if let Some(mask) = mask {
            scores = scores.broadcast_add(mask)?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let ctx = probs.matmul(&v)?.transpose(1, 2)?.reshape((b * t, h))?;
        let attn = self
            .attn_norm
            .forward(&(self.attn_out.forward(&ctx)? + x)?)?;
        let inner = self.ff_in.forward(&attn)?;
        let inner = if self.exact_gelu {
            gelu_erf(&inner)?
        } else {
            inner.gelu()?
        };
        self.ff_norm
            .forward(&(self.ff_out.forward(&inner)? + attn)?)
    }
}

/// A BERT encoder that returns the last layer's hidden states.
pub(crate) struct Bert {
    words: Embedding,
    positions: Tensor,
    token_type: Tensor,
    norm: LayerNorm,
    layers: Vec<Layer>,
    hidden: usize,
}

impl Bert {
    pub(crate) fn load(vb: VarBuilder, c: &Config) -> Result<Bert> {
        // Some checkpoints put everything under a `bert.` prefix.
        let vb = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vb
        } else {
            vb.pp("bert")
        };
        let e = vb.pp("embeddings");
        let h = c.hidden_size;
        let words = Embedding::new(e.get((c.vocab_size, h), "word_embeddings.weight")?, h);
        let positions = e.get((c.max_position_embeddings, h), "position_embeddings.weight")?;
        let token_type = e
            .get((c.type_vocab_size, h), "token_type_embeddings.weight")?
            .get(0)?;
        let norm = LayerNorm::load(e.pp("LayerNorm"), h, c.layer_norm_eps)?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), c))
            .collect::<Result<Vec<_>>>()?;
        Ok(Bert {
            words,
            positions,
            token_type,
            norm,
            layers,
            hidden: h,
        })
    }

    /// `ids`: `[b, t]` u32; `lengths`: the real length of each row. Returns
    /// `[b*t, hidden]`.
    pub(crate) fn forward(&self, ids: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let words = self
            .words
            .forward(&ids.flatten_all()?)?
            .reshape((b, t, self.hidden))?;
        let pos = self.positions.narrow(0, 0, t)?;
        let x = words.broadcast_add(&pos)?.broadcast_add(&self.token_type)?;
        let mut x = self.norm.forward(&x.reshape((b * t, self.hidden))?)?;
        let mask = if lengths.iter().all(|&l| l == t) {
            None
        } else {
            let mut m = vec![0f32; b * t];
            for (row, &len) in lengths.iter().enumerate() {
                m[row * t + len..(row + 1) * t]
                    .iter_mut()
                    .for_each(|v| *v = f32::MIN);
            }
            Some(Tensor::from_vec(m, (b, 1, 1, t), ids.device())?.to_dtype(x.dtype())?)
        };
        for layer in &self.layers {
            x = layer.forward(&x, b, t, mask.as_ref())?;
        }
        Ok(x)
    }
}

/// Exact GELU, x·Φ(x), on CPU as a single vectorisable pass; on other
/// devices Candle's own `gelu_erf`.
fn gelu_erf(x: &Tensor) -> Result<Tensor> {
    match (x.device(), x.dtype()) {
        (Device::Cpu, DType::F32) => x.apply_op1_no_bwd(&GeluErf),
        _ => x.gelu_erf(),
    }
}

struct GeluErf;

impl CustomOp1 for GeluErf {
    fn name(&self) -> &'static str {
        "refscore-gelu-erf"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let CpuStorage::F32(data) = storage else {
            candle_core::bail!("gelu: f32 only")
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("gelu: contiguous input only")
        };
        let src = &data[start..end];
        let mut dst = vec![0f32; src.len()];
        dst.par_chunks_mut(16 * 1024)
            .zip(src.par_chunks(16 * 1024))
            .for_each(|(d, s)| {
                for (o, &v) in d.iter_mut().zip(s) {
                    *o = gelu_scalar(v);
                }
            });
        Ok((CpuStorage::F32(dst), layout.shape().clone()))
    }
}

/// 0.5·x·erfc(−x/√2), with erfc from the Chebyshev-fitted formula of
/// Numerical Recipes (fractional error < 1.2e-7) and a branch-free exp, so
/// the loop vectorises.
#[inline(always)]
fn gelu_scalar(x: f32) -> f32 {
    let u = -x * std::f32::consts::FRAC_1_SQRT_2;
    let z = u.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let ans = t * exp_approx(-z * z + poly);
    let erfc = if u >= 0.0 { ans } else { 2.0 - ans };
    0.5 * x * erfc
}

/// e^x for x ≤ 0 (clamped below at −87), relative error ~2e-7:
/// 2^n · p(r) with n = round(x/ln2), |r| ≤ ln2/2.
#[inline(always)]
fn exp_approx(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.max(-87.0);
    let n = (x * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erf_ref(x: f64) -> f64 {
        // erf by its Taylor series (converges well for |x| < 4 in f64).
        let mut sum: f64 = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs().max(1e-300) && n < 200.0 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    }

    #[test]
    fn gelu_matches_the_exact_function() {
        let mut worst: f64 = 0.0;
        for k in -2000..=2000 {
            let x = k as f64 * 0.005; // [-10, 10]
            let exact = if x.abs() < 5.0 {
                0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
            } else if x > 0.0 {
                x
            } else {
                0.0
            };
            let got = gelu_scalar(x as f32) as f64;
            worst = worst.max((got - exact).abs() / exact.abs().max(1.0));
        }
        assert!(worst < 3e-6, "worst error {worst}");
    }

    #[test]
    fn exp_is_accurate() {
        for k in 0..=870 {
            let x = -(k as f32) * 0.1;
            let want = (x as f64).exp();
            let got = exp_approx(x) as f64;
            assert!(
                ((got - want) / want).abs() < 1e-6,
                "exp({x}) = {got}, want {want}"
            );
        }
    }
}
