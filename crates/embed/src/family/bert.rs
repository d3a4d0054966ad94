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

use super::EncoderModel;
use crate::kernels::{self, AddNormParams, AttentionShape};
use crate::precision::{Precision, Projection};

type Result<T> = candle_core::Result<T>;

struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

/// A layer's vectors (biases, norm scales) as plain host memory, for the
/// fused CPU kernels, and its four weights in the run's precision.
struct HostVectors {
    products: Products,
    qkv_bias: Vec<f32>,
    attn_norm: HostNorm,
    ff_in_bias: Vec<f32>,
    ff_norm: HostNorm,
}

/// The weights of a layer's four matrix products, in the run's precision.
struct Products {
    qkv: Projection,
    attn_out: Projection,
    ff_in: Projection,
    ff_out: Projection,
}

/// One "add bias and residual, then layer-normalise" step in host memory.
struct HostNorm {
    bias: Vec<f32>,
    gamma: Vec<f32>,
    beta: Vec<f32>,
    eps: f32,
}

impl HostNorm {
    fn new(bias: &Tensor, norm: &LayerNorm) -> Result<HostNorm> {
        Ok(HostNorm {
            bias: host(bias)?,
            gamma: host(&norm.weight)?,
            beta: host(&norm.bias)?,
            eps: norm.eps,
        })
    }

    fn params(&self) -> AddNormParams<'_> {
        AddNormParams {
            bias: &self.bias,
            gamma: &self.gamma,
            beta: &self.beta,
            eps: self.eps,
        }
    }
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
    fn load(vb: VarBuilder, c: &Config, precision: Precision) -> Result<Layer> {
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
                products: Products {
                    qkv: Projection::new(layer.qkv.weight(), precision)?,
                    attn_out: Projection::new(layer.attn_out.weight(), precision)?,
                    ff_in: Projection::new(layer.ff_in.weight(), precision)?,
                    ff_out: Projection::new(layer.ff_out.weight(), precision)?,
                },
                qkv_bias: host(bias_of(&layer.qkv))?,
                attn_norm: HostNorm::new(bias_of(&layer.attn_out), &layer.attn_norm)?,
                ff_in_bias: host(bias_of(&layer.ff_in))?,
                ff_norm: HostNorm::new(bias_of(&layer.ff_out), &layer.ff_norm)?,
            });
        }
        Ok(layer)
    }

    /// The fused CPU form of [`Layer::forward`], on packed sequences.
    /// `x`: `[Σ lengths, hidden]`, the sequences' tokens packed back to back.
    fn forward_cpu(&self, p: &HostVectors, x: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        let w = &p.products;
        let qkv = w.qkv.apply(x)?;
        let ctx = qkv.apply_op1_no_bwd(&Attention {
            shape: AttentionShape {
                heads: self.heads,
                head_dim: self.head_dim,
                qkv_bias: &p.qkv_bias,
            },
            lengths,
        })?;
        let attn = w.attn_out.apply(&ctx)?;
        attn.inplace_op2(x, &AddNorm(&p.attn_norm))?;
        let inner = w.ff_in.apply(&attn)?;
        inner.inplace_op1(&BiasGelu(&p.ff_in_bias))?;
        let out = w.ff_out.apply(&inner)?;
        out.inplace_op2(&attn, &AddNorm(&p.ff_norm))?;
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
    /// The embeddings' norm in host memory for the packed path, with the
    /// token-type row as its bias.
    embed_host: Option<HostNorm>,
}

impl Bert {
    /// Loads the weights; the matrix products of the packed CPU path run
    /// in `precision` (anything but f32 needs that path).
    pub(crate) fn load(vb: VarBuilder, c: &Config, precision: Precision) -> Result<Bert> {
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
            .map(|i| Layer::load(vb.pp(format!("encoder.layer.{i}")), c, precision))
            .collect::<Result<Vec<_>>>()?;
        let embed_host = if positions.device().is_cpu() && positions.dtype() == DType::F32 {
            Some(HostNorm::new(&token_type, &norm)?)
        } else {
            None
        };
        let bert = Bert {
            words,
            positions,
            token_type,
            norm,
            layers,
            hidden: h,
            embed_host,
        };
        if precision != Precision::Fp32 && !bert.packs() {
            candle_core::bail!(
                "--precision {} runs on the CPU only, with an exact-GELU model",
                precision.name()
            );
        }
        Ok(bert)
    }

    /// Whether [`Bert::forward_packed`] is available: sequences then go in
    /// back to back, with no padding at all (CPU, f32, exact GELU).
    pub(crate) fn packs(&self) -> bool {
        self.layers.iter().all(|l| l.host.is_some()) && self.embed_host.is_some()
    }

    /// `ids`: the token ids of all sequences back to back; `lengths`: each
    /// sequence's length. Returns `[Σ lengths, hidden]`. Only when
    /// [`Bert::packs`].
    pub(crate) fn forward_packed(&self, ids: &[u32], lengths: &[usize]) -> Result<Tensor> {
        let Some(norm) = &self.embed_host else {
            candle_core::bail!("packed forward: not available on this device")
        };
        let device = self.positions.device();
        let n = ids.len();
        let positions: Vec<u32> = lengths.iter().flat_map(|&l| 0..l as u32).collect();
        if positions.len() != n {
            candle_core::bail!(
                "packed forward: lengths add up to {}, not {n}",
                positions.len()
            );
        }
        let x = self.words.forward(&Tensor::from_slice(ids, n, device)?)?;
        let pos = self
            .positions
            .index_select(&Tensor::from_vec(positions, n, device)?, 0)?;
        // LayerNorm(word + position + token type), token type as the bias.
        x.inplace_op2(&pos, &AddNorm(norm))?;
        let mut x = x;
        for layer in &self.layers {
            let p = layer.host.as_ref().expect("packs() checked");
            x = layer.forward_cpu(p, &x, lengths)?;
        }
        Ok(x)
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

/// The `bert` family's loader: `config.json` as Candle's BERT config.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    let config: Config = serde_json::from_str(config).map_err(|e| format!("config.json: {e}"))?;
    Ok(Box::new(
        Bert::load(weights, &config, precision).map_err(|e| e.to_string())?,
    ))
}

impl EncoderModel for Bert {
    fn hidden(&self) -> usize {
        self.hidden
    }

    fn packs(&self) -> bool {
        Bert::packs(self)
    }

    fn forward_packed(&self, ids: &[u32], lengths: &[usize]) -> Result<Tensor> {
        Bert::forward_packed(self, ids, lengths)
    }

    fn forward_padded(&self, ids: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        Bert::forward(self, ids, lengths)
    }
}

/// Rows per parallel task in the row-wise kernels: enough work to amortise
/// the task, small enough to balance across threads.
const ROWS_PER_TASK: usize = 16;

/// Where a CPU tensor's data lies in its storage: f32 and contiguous only.
fn contiguous_f32(storage: &CpuStorage, layout: &Layout, what: &str) -> Result<(usize, usize)> {
    if !matches!(storage, CpuStorage::F32(_)) {
        candle_core::bail!("{what}: f32 only")
    }
    match layout.contiguous_offsets() {
        Some(range) => Ok(range),
        None => candle_core::bail!("{what}: contiguous input only"),
    }
}

/// The contiguous f32 data of a CPU tensor.
fn slice<'a>(storage: &'a CpuStorage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    let (start, end) = contiguous_f32(storage, layout, what)?;
    storage.as_slice::<f32>().map(|data| &data[start..end])
}

/// Mutable form of [`slice`].
fn slice_mut<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    what: &str,
) -> Result<&'a mut [f32]> {
    let (start, end) = contiguous_f32(storage, layout, what)?;
    match storage {
        CpuStorage::F32(data) => Ok(&mut data[start..end]),
        _ => unreachable!("checked by contiguous_f32"),
    }
}

/// Self-attention of packed sequences, from the `[n, 3h]` Q/K/V product
/// (biases not yet added) to the `[n, h]` context; one task per sequence.
struct Attention<'a> {
    shape: AttentionShape<'a>,
    lengths: &'a [usize],
}

impl CustomOp1 for Attention<'_> {
    fn name(&self) -> &'static str {
        "refscore-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = slice(storage, layout, self.name())?;
        let h = self.shape.heads * self.shape.head_dim;
        let n: usize = self.lengths.iter().sum();
        if qkv.len() != n * 3 * h {
            candle_core::bail!(
                "attention: expected {n}×{} values, got {}",
                3 * h,
                qkv.len()
            );
        }
        let mut out = vec![0f32; n * h];
        let mut tasks = Vec::with_capacity(self.lengths.len());
        let (mut q_rest, mut o_rest) = (qkv, out.as_mut_slice());
        for &len in self.lengths {
            let (q, qr) = q_rest.split_at(len * 3 * h);
            let (o, or) = o_rest.split_at_mut(len * h);
            tasks.push((q, o, len));
            (q_rest, o_rest) = (qr, or);
        }
        // Longest first, so a long sequence does not start last.
        tasks.sort_by_key(|t| std::cmp::Reverse(t.2));
        tasks.into_par_iter().for_each_init(
            kernels::AttentionScratch::default,
            // BERT's attention has no score bias.
            |scratch, (q, o, len)| kernels::attend_sequence(q, len, o, &self.shape, None, scratch),
        );
        Ok((CpuStorage::F32(out), Shape::from((n, h))))
    }
}

/// `x ← LayerNorm(x + bias + residual)` in place, row by row.
struct AddNorm<'a>(&'a HostNorm);

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
        let params = self.0.params();
        let h = params.bias.len();
        if x.len() != residual.len() || x.len() % h != 0 {
            candle_core::bail!("add-norm: shapes do not match");
        }
        x.par_chunks_mut(ROWS_PER_TASK * h)
            .zip(residual.par_chunks(ROWS_PER_TASK * h))
            .for_each(|(x, r)| kernels::add_norm_rows(x, r, &params));
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

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::{DType, Device, Tensor};
    use candle_nn::VarBuilder;

    use super::*;

    /// A small random BERT (2 layers, hidden 32, 4 heads) built in memory.
    fn tiny_weights() -> (Config, HashMap<String, Tensor>) {
        let config: Config = serde_json::from_str(
            r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
                "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
                "hidden_dropout_prob": 0.0, "max_position_embeddings": 40,
                "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
                "pad_token_id": 0}"#,
        )
        .unwrap();
        let dev = Device::Cpu;
        let mut tensors = HashMap::new();
        // Seeded, so every test run sees the same model.
        let mut state = 0x5eed_u64;
        let mut add = |name: String, shape: &[usize], centre: f32| {
            let n: usize = shape.iter().product();
            let values: Vec<f32> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    (state >> 40) as f32 / (1u64 << 24) as f32 - 0.5 + centre
                })
                .collect();
            tensors.insert(name, Tensor::from_vec(values, shape, &dev).unwrap());
        };
        let (h, i) = (32, 64);
        add("embeddings.word_embeddings.weight".into(), &[50, h], 0.0);
        add(
            "embeddings.position_embeddings.weight".into(),
            &[40, h],
            0.0,
        );
        add(
            "embeddings.token_type_embeddings.weight".into(),
            &[2, h],
            0.0,
        );
        add("embeddings.LayerNorm.weight".into(), &[h], 1.0);
        add("embeddings.LayerNorm.bias".into(), &[h], 0.0);
        for l in 0..2 {
            let p = format!("encoder.layer.{l}.");
            for m in ["query", "key", "value"] {
                add(format!("{p}attention.self.{m}.weight"), &[h, h], 0.0);
                add(format!("{p}attention.self.{m}.bias"), &[h], 0.0);
            }
            add(format!("{p}attention.output.dense.weight"), &[h, h], 0.0);
            add(format!("{p}attention.output.dense.bias"), &[h], 0.0);
            add(format!("{p}attention.output.LayerNorm.weight"), &[h], 1.0);
            add(format!("{p}attention.output.LayerNorm.bias"), &[h], 0.0);
            add(format!("{p}intermediate.dense.weight"), &[i, h], 0.0);
            add(format!("{p}intermediate.dense.bias"), &[i], 0.0);
            add(format!("{p}output.dense.weight"), &[h, i], 0.0);
            add(format!("{p}output.dense.bias"), &[h], 0.0);
            add(format!("{p}output.LayerNorm.weight"), &[h], 1.0);
            add(format!("{p}output.LayerNorm.bias"), &[h], 0.0);
        }
        (config, tensors)
    }

    fn tiny_bert(precision: Precision) -> Bert {
        let (config, tensors) = tiny_weights();
        Bert::load(
            VarBuilder::from_tensors(tensors, DType::F32, &Device::Cpu),
            &config,
            precision,
        )
        .unwrap()
    }

    /// The fused packed CPU path and the plain-Candle padded path (what
    /// other devices run) compute the same function.
    #[test]
    fn packed_and_padded_forwards_agree() {
        let bert = tiny_bert(Precision::Fp32);
        assert!(bert.packs());
        let seqs: Vec<Vec<u32>> = vec![
            (1..=23).collect(),
            vec![7, 3, 9],
            (5..22).rev().collect(),
            vec![42],
        ];
        let lengths: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let t = *lengths.iter().max().unwrap();
        let packed_ids: Vec<u32> = seqs.iter().flatten().copied().collect();
        let packed: Vec<f32> = bert
            .forward_packed(&packed_ids, &lengths)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let mut padded_ids = vec![0u32; seqs.len() * t];
        for (k, s) in seqs.iter().enumerate() {
            padded_ids[k * t..k * t + s.len()].copy_from_slice(s);
        }
        let ids = Tensor::from_vec(padded_ids, (seqs.len(), t), &Device::Cpu).unwrap();
        let padded: Vec<f32> = bert
            .forward(&ids, &lengths)
            .unwrap()
            .flatten_all()
            .unwrap()
            .to_vec1()
            .unwrap();
        let h = 32;
        let mut start = 0;
        let mut worst = 0f32;
        for (k, &len) in lengths.iter().enumerate() {
            for r in 0..len {
                for c in 0..h {
                    let a = packed[(start + r) * h + c];
                    let b = padded[(k * t + r) * h + c];
                    worst = worst.max((a - b).abs());
                }
            }
            start += len;
        }
        assert!(worst < 1e-4, "worst difference {worst}");
    }

    /// bf16 and int8 run the same model through the same packed path, off
    /// fp32 by a rounding-sized amount (and not by nothing: the products
    /// really changed).
    #[test]
    fn reduced_precisions_stay_near_fp32() {
        let (config, tensors) = tiny_weights();
        let load = |precision| {
            let vb = VarBuilder::from_tensors(tensors.clone(), DType::F32, &Device::Cpu);
            Bert::load(vb, &config, precision).unwrap()
        };
        let ids: Vec<u32> = (1..=23).chain([7, 3, 9]).collect();
        let lengths = [23, 3];
        let run = |bert: &Bert| -> Vec<f32> {
            let out = bert.forward_packed(&ids, &lengths).unwrap();
            out.flatten_all().unwrap().to_vec1().unwrap()
        };
        let reference = run(&load(Precision::Fp32));
        for (precision, bound) in [(Precision::Bf16, 0.1f32), (Precision::Int8, 0.3)] {
            let got = run(&load(precision));
            let worst = got
                .iter()
                .zip(&reference)
                .map(|(a, b)| (a - b).abs())
                .fold(0f32, f32::max);
            eprintln!("{precision:?}: worst {worst}");
            assert!(worst > 0.0 && worst < bound, "{precision:?}: worst {worst}");
        }
    }
}
