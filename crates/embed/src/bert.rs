//! Our own BERT encoder forward on Candle ops, tuned for batch inference on
//! CPU: one fused Q/K/V projection with the 1/√d attention scale folded into
//! the query weights at load time, Candle's fused softmax and layer norm, an
//! attention mask only when a batch actually has padding. On CPU (f32) each
//! layer is four matrix products (Candle's, i.e. gemm) with everything
//! between them fused into three one-pass kernels from [`crate::kernels`]:
//! attention straight off the Q/K/V product (no head split copies, padding
//! skipped), bias + GELU in place, and bias + residual + layer norm in
//! place. Other devices run the same function as plain Candle ops.
//! Numerically it is the same function as the reference BERT; the parity
//! tests hold it to the reference libraries within 1e-4.

use candle_core::{
    CpuStorage, CustomOp1, DType, InplaceOp1, InplaceOp2, Layout, Module, Shape, Tensor,
};
use candle_nn::{Embedding, Linear, VarBuilder};
use candle_transformers::models::bert::{Config, HiddenAct};
use rayon::prelude::*;

use crate::kernels::{self, AddNormParams, AttentionShape};

type Result<T> = candle_core::Result<T>;

struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

/// A layer's vectors (biases, norm scales) as plain host memory, for the
/// fused CPU kernels.
struct HostVectors {
    qkv_bias: Vec<f32>,
    attn_out_bias: Vec<f32>,
    attn_gamma: Vec<f32>,
    attn_beta: Vec<f32>,
    ff_in_bias: Vec<f32>,
    ff_out_bias: Vec<f32>,
    ff_gamma: Vec<f32>,
    ff_beta: Vec<f32>,
    eps: f32,
}

fn host(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec1()
}

fn bias_of(l: &Linear) -> &Tensor {
    l.bias().expect("loaded with bias")
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
    /// Present when the fused CPU path applies (CPU, f32, exact GELU).
    host: Option<HostVectors>,
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
        let bias = |l: &Linear| bias_of(l).clone();
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
        let mut layer = Layer {
            qkv: Linear::new(w, Some(b)),
            attn_out: linear(att.pp("output").pp("dense"), h, h)?,
            attn_norm: LayerNorm::load(att.pp("output").pp("LayerNorm"), h, c.layer_norm_eps)?,
            ff_in: linear(vb.pp("intermediate").pp("dense"), h, c.intermediate_size)?,
            ff_out: linear(vb.pp("output").pp("dense"), c.intermediate_size, h)?,
            ff_norm: LayerNorm::load(vb.pp("output").pp("LayerNorm"), h, c.layer_norm_eps)?,
            heads,
            head_dim,
            exact_gelu,
            host: None,
        };
        let weight = layer.qkv.weight();
        if weight.device().is_cpu() && weight.dtype() == DType::F32 && exact_gelu {
            layer.host = Some(HostVectors {
                qkv_bias: host(bias_of(&layer.qkv))?,
                attn_out_bias: host(bias_of(&layer.attn_out))?,
                attn_gamma: host(&layer.attn_norm.weight)?,
                attn_beta: host(&layer.attn_norm.bias)?,
                ff_in_bias: host(bias_of(&layer.ff_in))?,
                ff_out_bias: host(bias_of(&layer.ff_out))?,
                ff_gamma: host(&layer.ff_norm.weight)?,
                ff_beta: host(&layer.ff_norm.bias)?,
                eps: layer.ff_norm.eps,
            });
        }
        Ok(layer)
    }

    /// The fused CPU form of [`Layer::forward`]. `x`: `[b*t, hidden]`.
    fn forward_cpu(
        &self,
        p: &HostVectors,
        x: &Tensor,
        t: usize,
        lengths: &[usize],
    ) -> Result<Tensor> {
        let qkv = x.matmul(&self.qkv.weight().t()?)?;
        let ctx = qkv.apply_op1_no_bwd(&Attention {
            shape: AttentionShape {
                heads: self.heads,
                head_dim: self.head_dim,
                qkv_bias: &p.qkv_bias,
            },
            t,
            lengths,
        })?;
        let attn = ctx.matmul(&self.attn_out.weight().t()?)?;
        attn.inplace_op2(
            x,
            &AddNorm(AddNormParams {
                bias: &p.attn_out_bias,
                gamma: &p.attn_gamma,
                beta: &p.attn_beta,
                eps: self.attn_norm.eps,
            }),
        )?;
        let inner = attn.matmul(&self.ff_in.weight().t()?)?;
        inner.inplace_op1(&BiasGelu(&p.ff_in_bias))?;
        let out = inner.matmul(&self.ff_out.weight().t()?)?;
        out.inplace_op2(
            &attn,
            &AddNorm(AddNormParams {
                bias: &p.ff_out_bias,
                gamma: &p.ff_gamma,
                beta: &p.ff_beta,
                eps: p.eps,
            }),
        )?;
        Ok(out)
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
            inner.gelu_erf()?
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
        if self.layers.iter().all(|l| l.host.is_some()) {
            for layer in &self.layers {
                let p = layer.host.as_ref().expect("checked above");
                x = layer.forward_cpu(p, &x, t, lengths)?;
            }
            return Ok(x);
        }
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

/// Rows per parallel task in the row-wise kernels: enough work to amortise
/// the task, small enough to balance across threads.
const ROWS_PER_TASK: usize = 16;

/// The contiguous f32 data of a CPU tensor.
fn slice<'a>(storage: &'a CpuStorage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    let CpuStorage::F32(data) = storage else {
        candle_core::bail!("{what}: f32 only")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what}: contiguous input only")
    };
    Ok(&data[start..end])
}

/// Mutable form of [`slice`].
fn slice_mut<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    what: &str,
) -> Result<&'a mut [f32]> {
    let CpuStorage::F32(data) = storage else {
        candle_core::bail!("{what}: f32 only")
    };
    let Some((start, end)) = layout.contiguous_offsets() else {
        candle_core::bail!("{what}: contiguous input only")
    };
    Ok(&mut data[start..end])
}

/// Self-attention of a padded batch, from the `[b*t, 3h]` Q/K/V product
/// (biases not yet added) to the `[b*t, h]` context; one task per sequence.
struct Attention<'a> {
    shape: AttentionShape<'a>,
    t: usize,
    lengths: &'a [usize],
}

impl CustomOp1 for Attention<'_> {
    fn name(&self) -> &'static str {
        "refscore-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = slice(storage, layout, self.name())?;
        let h = self.shape.heads * self.shape.head_dim;
        let (t, b) = (self.t, self.lengths.len());
        if qkv.len() != b * t * 3 * h {
            candle_core::bail!(
                "attention: expected {b}×{t}×{} values, got {}",
                3 * h,
                qkv.len()
            );
        }
        let mut out = vec![0f32; b * t * h];
        out.par_chunks_mut(t * h)
            .zip(qkv.par_chunks(t * 3 * h))
            .zip(self.lengths.par_iter())
            .for_each_init(Vec::new, |scratch, ((o, q), &len)| {
                kernels::attend_sequence(q, len.min(t), o, &self.shape, scratch)
            });
        Ok((CpuStorage::F32(out), Shape::from((b * t, h))))
    }
}

/// `x ← LayerNorm(x + bias + residual)` in place, row by row.
struct AddNorm<'a>(AddNormParams<'a>);

impl InplaceOp2 for AddNorm<'_> {
    fn name(&self) -> &'static str {
        "refscore-add-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let x = slice_mut(s1, l1, self.name())?;
        let residual = slice(s2, l2, self.name())?;
        let h = self.0.bias.len();
        if x.len() != residual.len() || x.len() % h != 0 {
            candle_core::bail!("add-norm: shapes do not match");
        }
        x.par_chunks_mut(ROWS_PER_TASK * h)
            .zip(residual.par_chunks(ROWS_PER_TASK * h))
            .for_each(|(x, r)| kernels::add_norm_rows(x, r, &self.0));
        Ok(())
    }
}

/// `x ← GELU(x + bias)` in place, row by row.
struct BiasGelu<'a>(&'a [f32]);

impl InplaceOp1 for BiasGelu<'_> {
    fn name(&self) -> &'static str {
        "refscore-bias-gelu"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let x = slice_mut(storage, layout, self.name())?;
        let h = self.0.len();
        if x.len() % h != 0 {
            candle_core::bail!("bias-gelu: shapes do not match");
        }
        x.par_chunks_mut(ROWS_PER_TASK * h)
            .for_each(|x| kernels::bias_gelu_rows(x, self.0));
        Ok(())
    }
}
