//! The encoder body the BERT-like families share (BERT, RoBERTa/XLM-R,
//! MPNet): embeddings, then post-norm layers of self-attention and a GELU
//! feed-forward. Families differ only in what [`Layout`] gives: weight
//! names, where position ids start, whether there is a token-type row, and
//! an optional relative-position score bias. Tuned for batch inference on
//! CPU: one fused Q/K/V projection with the 1/√d attention scale folded
//! into the query weights at load time; on CPU (f32) each layer is four
//! matrix products with everything between them fused into three one-pass
//! kernels ([`super::ops`]), sequences packed with no padding. Other devices
//! run the same function as plain Candle ops on padded batches, the layers
//! in f32 or, with `--precision bf16|fp16`, in that half format end to end
//! (the embeddings stay f32; see [`crate::precision`]). The parity tests
//! hold fp32 to the reference libraries within 1e-4.

use candle_core::{DType, Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::Deserialize;

use super::accelerator::{spread_mask, Affine};
use super::ops::{host, AddNorm, Attention, BiasGelu, HostNorm};
use super::packed_attention::{self, Packing};
use super::padded::{self, Rows};
use super::EncoderModel;
use crate::kernels::{AttentionShape, RelativeBias};
use crate::precision::{Precision, Projection};

type Result<T> = candle_core::Result<T>;

/// The `config.json` keys the shared body reads (the Hugging Face names).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct Config {
    pub vocab_size: usize,
    pub hidden_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub intermediate_size: usize,
    #[serde(default = "default_act")]
    pub hidden_act: String,
    pub max_position_embeddings: usize,
    #[serde(default)]
    pub type_vocab_size: usize,
    #[serde(default = "default_eps")]
    pub layer_norm_eps: f64,
    #[serde(default)]
    pub pad_token_id: Option<u32>,
    #[serde(default)]
    pub position_embedding_type: Option<String>,
}

fn default_act() -> String {
    "gelu".into()
}

fn default_eps() -> f64 {
    1e-12
}

impl Config {
    /// Parses `config.json`'s text.
    pub(super) fn parse(text: &str) -> std::result::Result<Config, String> {
        let c: Config = serde_json::from_str(text).map_err(|e| format!("config.json: {e}"))?;
        if let Some(kind) = c.position_embedding_type.as_deref() {
            if kind != "absolute" {
                return Err(format!(
                    "config.json: position_embedding_type '{kind}' is not supported (absolute only)"
                ));
            }
        }
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return Err(
                "config.json: hidden_size must be a multiple of num_attention_heads".into(),
            );
        }
        Ok(c)
    }

    /// Whether `hidden_act` is the exact (erf) GELU; `Err` for activations
    /// refscore does not run.
    fn exact_gelu(&self) -> Result<bool> {
        match self.hidden_act.as_str() {
            "gelu" => Ok(true),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" | "geluapproximate" => Ok(false),
            other => candle_core::bail!("hidden_act '{other}' is not supported (GELU only)"),
        }
    }
}

/// Weight names of one layer, under [`Layout::layers`]`.{i}`.
pub(super) struct LayerNames {
    pub query: &'static str,
    pub key: &'static str,
    pub value: &'static str,
    pub attn_out: &'static str,
    pub attn_norm: &'static str,
    pub ff_in: &'static str,
    pub ff_out: &'static str,
    pub ff_norm: &'static str,
}

/// Where BERT, RoBERTa, XLM-R and MPNet keep their layers.
pub(super) const ENCODER_LAYERS: &str = "encoder.layer";

/// BERT's layer names, which RoBERTa and XLM-R share.
pub(super) const BERT_LAYER: LayerNames = LayerNames {
    query: "attention.self.query",
    key: "attention.self.key",
    value: "attention.self.value",
    attn_out: "attention.output.dense",
    attn_norm: "attention.output.LayerNorm",
    ff_in: "intermediate.dense",
    ff_out: "output.dense",
    ff_norm: "output.LayerNorm",
};

/// A family's relative-position score bias, shared by all layers.
pub(super) trait PositionBias: Send + Sync {
    /// The table of [`RelativeBias`] for sequences of up to `span` tokens:
    /// `heads × (2·span − 1)` values.
    fn table(&self, span: usize) -> Vec<f32>;
}

/// What a family gives the shared body beyond `config.json`.
pub(super) struct Layout {
    /// The prefix the weights may sit under (`bert`, `roberta`, `mpnet`),
    /// tried when they are not at the top level.
    pub prefix: &'static str,
    /// Where layer `i` sits under the root: `{layers}.{i}`
    /// (`encoder.layer` for BERT's descendants, `transformer.layer` for
    /// DistilBERT).
    pub layers: &'static str,
    pub layer: LayerNames,
    /// The position id of a sequence's first token (0 for BERT;
    /// `pad_token_id + 1` for RoBERTa and MPNet).
    pub first_position: usize,
    /// Whether the embeddings add the token-type row 0.
    pub token_type: bool,
    pub bias: Option<Box<dyn PositionBias>>,
}

struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
        let (weight, bias) = super::padded::norm_params(&vb, size)?;
        Ok(LayerNorm {
            weight,
            bias,
            eps: eps as f32,
        })
    }

    /// This norm with its scale and shift in `dtype`.
    fn in_dtype(self, dtype: DType) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: self.weight.to_dtype(dtype)?,
            bias: self.bias.to_dtype(dtype)?,
            eps: self.eps,
        })
    }

    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps)
    }

    /// This norm in host memory, after adding `bias` and a residual.
    fn host(&self, bias: &Tensor) -> Result<HostNorm> {
        Ok(HostNorm {
            bias: host(bias)?,
            gamma: host(&self.weight)?,
            beta: host(&self.bias)?,
            eps: self.eps,
        })
    }
}

fn bias_of(l: &Linear) -> &Tensor {
    l.bias().expect("loaded with bias")
}

fn linear(vb: VarBuilder, inp: usize, out: usize) -> Result<Linear> {
    Ok(Linear::new(
        vb.get((out, inp), "weight")?,
        Some(vb.get(out, "bias")?),
    ))
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

struct Layer {
    qkv: Affine,
    attn_out: Affine,
    attn_norm: LayerNorm,
    ff_in: Affine,
    ff_out: Affine,
    ff_norm: LayerNorm,
    heads: usize,
    head_dim: usize,
    exact_gelu: bool,
    /// Present when the fused CPU path applies (CPU, f32, exact GELU).
    host: Option<HostVectors>,
}

impl Layer {
    fn load(vb: VarBuilder, c: &Config, names: &LayerNames, precision: Precision) -> Result<Layer> {
        let h = c.hidden_size;
        let heads = c.num_attention_heads;
        let head_dim = h / heads;
        // Fold the 1/sqrt(head_dim) scale into the query projection.
        let scale = 1.0 / (head_dim as f64).sqrt();
        let q = linear(vb.pp(names.query), h, h)?;
        let k = linear(vb.pp(names.key), h, h)?;
        let v = linear(vb.pp(names.value), h, h)?;
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
        let exact_gelu = c.exact_gelu()?;
        let eps = c.layer_norm_eps;
        // f32 on the CPU (its reduced precisions are the host products
        // below); the half format asked for on an accelerator.
        let dtype = precision.device_dtype(vb.device())?;
        let affine = |l: Linear| Affine::new(padded::in_dtype(&l, dtype)?);
        let norm = |vb, size| LayerNorm::load(vb, size, eps)?.in_dtype(dtype);
        let mut layer = Layer {
            qkv: affine(Linear::new(w, Some(b)))?,
            attn_out: affine(linear(vb.pp(names.attn_out), h, h)?)?,
            attn_norm: norm(vb.pp(names.attn_norm), h)?,
            ff_in: affine(linear(vb.pp(names.ff_in), h, c.intermediate_size)?)?,
            ff_out: affine(linear(vb.pp(names.ff_out), c.intermediate_size, h)?)?,
            ff_norm: norm(vb.pp(names.ff_norm), h)?,
            heads,
            head_dim,
            exact_gelu,
            host: None,
        };
        let weight = layer.qkv.linear().weight();
        if weight.device().is_cpu() && weight.dtype() == DType::F32 && exact_gelu {
            layer.host = Some(HostVectors {
                products: Products {
                    qkv: Projection::new(layer.qkv.linear().weight(), precision)?,
                    attn_out: Projection::new(layer.attn_out.linear().weight(), precision)?,
                    ff_in: Projection::new(layer.ff_in.linear().weight(), precision)?,
                    ff_out: Projection::new(layer.ff_out.linear().weight(), precision)?,
                },
                qkv_bias: host(bias_of(layer.qkv.linear()))?,
                attn_norm: layer.attn_norm.host(bias_of(layer.attn_out.linear()))?,
                ff_in_bias: host(bias_of(layer.ff_in.linear()))?,
                ff_norm: layer.ff_norm.host(bias_of(layer.ff_out.linear()))?,
            });
        }
        Ok(layer)
    }

    /// The fused CPU form of [`Layer::forward`], on packed sequences.
    /// `x`: `[Σ lengths, hidden]`, the sequences' tokens packed back to back.
    fn forward_cpu(
        &self,
        p: &HostVectors,
        x: &Tensor,
        lengths: &[usize],
        bias: Option<&RelativeBias<'_>>,
    ) -> Result<Tensor> {
        let w = &p.products;
        let qkv = w.qkv.apply(x)?;
        let ctx = qkv.apply_op1_no_bwd(&Attention {
            shape: AttentionShape {
                heads: self.heads,
                head_dim: self.head_dim,
                qkv_bias: &p.qkv_bias,
                reach: None,
            },
            lengths,
            bias: bias.map(|b| RelativeBias {
                values: b.values,
                span: b.span,
            }),
            pairs: None,
        })?;
        let attn = w.attn_out.apply(&ctx)?;
        attn.inplace_op2(x, &AddNorm(&p.attn_norm))?;
        let inner = w.ff_in.apply(&attn)?;
        inner.inplace_op1(&BiasGelu(&p.ff_in_bias))?;
        let out = w.ff_out.apply(&inner)?;
        out.inplace_op2(&attn, &AddNorm(&p.ff_norm))?;
        Ok(out)
    }

    /// The form of the padded path: `x` holds the batch's real tokens
    /// packed (`[Σ lengths, hidden]`), so no product, norm or activation is
    /// spent on padding; attention sees them as `batch` says.
    fn forward(&self, x: &Tensor, batch: &Batch) -> Result<Tensor> {
        let qkv = self.qkv.forward(x)?; // [Σ lengths, 3·hidden]
        let ctx = match batch {
            Batch::Padded { rows, mask } => self.padded_attention(&qkv, rows, *mask)?,
            Batch::Packed { packing, bias } => {
                packed_attention::attend(&qkv, packing, self.heads, self.head_dim, *bias)?
            }
        };
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

    /// Attention through Candle's operations: `qkv` padded to `[b, t]`
    /// (`rows` moves it), `mask` additive, broadcast to `[b, heads, t, t]`
    /// (padding, plus the relative bias where a family has one).
    fn padded_attention(&self, qkv: &Tensor, rows: &Rows, mask: Option<&Tensor>) -> Result<Tensor> {
        let h = self.heads * self.head_dim;
        let qkv = rows.pad(qkv)?; // [b, t, 3·hidden]
        let (b, t, _) = qkv.dims3()?;
        let qkv = qkv.reshape((b, t, 3, self.heads, self.head_dim))?;
        let qkv = qkv.permute((2, 0, 3, 1, 4))?; // [3, b, heads, t, dim]
        let q = qkv.get(0)?.contiguous()?;
        let k = qkv.get(1)?.contiguous()?;
        let v = qkv.get(2)?.contiguous()?;
        let mut scores = q.matmul(&k.t()?)?; // [b, heads, t, t]
        if let Some(mask) = mask {
            scores = scores.broadcast_add(mask)?;
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        rows.unpad(&probs.matmul(&v)?.transpose(1, 2)?.reshape((b * t, h))?)
    }
}

/// How the padded path's layers see a batch's sequences in attention.
enum Batch<'a> {
    /// Padded to `[b, t]` for Candle's products (`mask`: additive,
    /// `[b, heads, t, t]`).
    Padded {
        rows: &'a Rows,
        mask: Option<&'a Tensor>,
    },
    /// Packed for the GPU kernel ([`packed_attention`]); `bias`: the
    /// relative terms `[heads, 2·span − 1]` and their span.
    Packed {
        packing: &'a Packing,
        bias: Option<(&'a Tensor, usize)>,
    },
}

/// Word, position and (where the family has one) token-type embeddings,
/// summed and layer-normalised.
struct Embeddings {
    words: Embedding,
    positions: Tensor,
    first_position: usize,
    token_type: Option<Tensor>,
    /// Token type 1's row less type 0's, where the family has a second
    /// row: added to the tokens of a pair's second text.
    second_type: Option<Tensor>,
    norm: LayerNorm,
    /// The norm in host memory for the packed path, with the token-type
    /// row (or zeros) as its bias.
    host: Option<HostNorm>,
}

impl Embeddings {
    fn load(vb: VarBuilder, c: &Config, layout: &Layout) -> Result<Embeddings> {
        let h = c.hidden_size;
        let words = Embedding::new(vb.get((c.vocab_size, h), "word_embeddings.weight")?, h);
        let positions = vb.get((c.max_position_embeddings, h), "position_embeddings.weight")?;
        let (token_type, second_type) = if layout.token_type {
            let rows = c.type_vocab_size.max(1);
            let table = vb.get((rows, h), "token_type_embeddings.weight")?;
            let second = (rows > 1)
                .then(|| table.get(1)?.sub(&table.get(0)?))
                .transpose()?;
            (Some(table.get(0)?), second)
        } else {
            (None, None)
        };
        let norm = LayerNorm::load(vb.pp("LayerNorm"), h, c.layer_norm_eps)?;
        let host = if positions.device().is_cpu() && positions.dtype() == DType::F32 {
            let zeros;
            let bias = match &token_type {
                Some(row) => row,
                None => {
                    zeros = Tensor::zeros(h, DType::F32, positions.device())?;
                    &zeros
                }
            };
            Some(norm.host(bias)?)
        } else {
            None
        };
        Ok(Embeddings {
            words,
            positions,
            first_position: layout.first_position,
            token_type,
            second_type,
            norm,
            host,
        })
    }

    /// Token type 1's difference from type 0, one row per token (zeros in
    /// first texts and padding), where `second` starts second texts and the
    /// family has such a row; `None` otherwise. Rows are packed, or `padded`
    /// to that width per sequence.
    fn second_rows(
        &self,
        lengths: &[usize],
        second: Option<&[usize]>,
        padded: Option<usize>,
    ) -> Result<Option<Tensor>> {
        let (Some(row), Some(second)) = (&self.second_type, second) else {
            return Ok(None);
        };
        if !super::has_second_segment(lengths, Some(second)) {
            return Ok(None);
        }
        let mut mask = Vec::new();
        for (&len, &start) in lengths.iter().zip(second) {
            let width = padded.unwrap_or(len);
            mask.extend((0..width).map(|i| f32::from(u8::from(i >= start && i < len))));
        }
        let n = mask.len();
        let mask = Tensor::from_vec(mask, (n, 1), row.device())?.to_dtype(row.dtype())?;
        Ok(Some(mask.broadcast_mul(&row.unsqueeze(0)?)?))
    }

    /// Packed sequences: `[Σ lengths, hidden]`.
    fn packed(&self, ids: &[u32], lengths: &[usize], second: Option<&[usize]>) -> Result<Tensor> {
        let Some(norm) = &self.host else {
            candle_core::bail!("packed forward: not available on this device")
        };
        let device = self.positions.device();
        let n = ids.len();
        let first = self.first_position as u32;
        let positions: Vec<u32> = lengths
            .iter()
            .flat_map(|&l| first..first + l as u32)
            .collect();
        if positions.len() != n {
            candle_core::bail!(
                "packed forward: lengths add up to {}, not {n}",
                positions.len()
            );
        }
        let x = self.words.forward(&Tensor::from_slice(ids, n, device)?)?;
        let mut pos = self
            .positions
            .index_select(&Tensor::from_vec(positions, n, device)?, 0)?;
        if let Some(rows) = self.second_rows(lengths, second, None)? {
            pos = pos.add(&rows)?;
        }
        // LayerNorm(word + position + token type), token type as the bias.
        x.inplace_op2(&pos, &AddNorm(norm))?;
        Ok(x)
    }

    /// Padded sequences `[b, t]`: `[b·t, hidden]`.
    fn padded(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        second: Option<&[usize]>,
        hidden: usize,
    ) -> Result<Tensor> {
        let (b, t) = ids.dims2()?;
        let words = self
            .words
            .forward(&ids.flatten_all()?)?
            .reshape((b, t, hidden))?;
        let pos = self.positions.narrow(0, self.first_position, t)?;
        let mut x = words.broadcast_add(&pos)?;
        if let Some(row) = &self.token_type {
            x = x.broadcast_add(row)?;
        }
        let mut x = x.reshape((b * t, hidden))?;
        if let Some(rows) = self.second_rows(lengths, second, Some(t))? {
            x = x.add(&rows)?;
        }
        self.norm.forward(&x)
    }
}

/// An encoder of the shared shape: embeddings, then the layers.
pub(super) struct Transformer {
    embeddings: Embeddings,
    layers: Vec<Layer>,
    bias: Option<Box<dyn PositionBias>>,
    hidden: usize,
    heads: usize,
    /// Tokens a sequence may have (positions past the first one).
    max_tokens: usize,
    /// The number format of the layers on the padded path (f32, or a
    /// half format on an accelerator).
    dtype: DType,
}

impl Transformer {
    /// Loads the weights; the matrix products of the packed CPU path run
    /// in `precision` (on the CPU anything but f32 needs that path), the
    /// padded path's layers on an accelerator in its half format.
    pub(super) fn load(
        vb: VarBuilder,
        c: &Config,
        layout: Layout,
        precision: Precision,
    ) -> Result<Transformer> {
        let vb = weights_root(vb, layout.prefix);
        let embeddings = Embeddings::load(vb.pp("embeddings"), c, &layout)?;
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                Layer::load(
                    vb.pp(format!("{}.{i}", layout.layers)),
                    c,
                    &layout.layer,
                    precision,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let model = Transformer {
            embeddings,
            layers,
            bias: layout.bias,
            hidden: c.hidden_size,
            heads: c.num_attention_heads,
            max_tokens: c
                .max_position_embeddings
                .saturating_sub(layout.first_position),
            dtype: precision.device_dtype(vb.device())?,
        };
        if precision != Precision::Fp32 && vb.device().is_cpu() && !model.packs() {
            candle_core::bail!(
                "--precision {} runs on the CPU only, with an exact-GELU model",
                precision.name()
            );
        }
        Ok(model)
    }

    /// [`Transformer::load`] as a family's loader returns it.
    pub(super) fn boxed(
        vb: VarBuilder,
        c: &Config,
        layout: Layout,
        precision: Precision,
    ) -> std::result::Result<Box<dyn EncoderModel>, String> {
        let model = Transformer::load(vb, c, layout, precision).map_err(|e| e.to_string())?;
        Ok(Box::new(model))
    }

    fn check(&self, longest: usize, taps: &[usize]) -> Result<()> {
        if longest > self.max_tokens {
            candle_core::bail!(
                "a sequence of {longest} tokens is longer than the model's {} positions",
                self.max_tokens
            );
        }
        if taps.windows(2).any(|w| w[0] >= w[1]) || taps.last() > Some(&self.layers.len()) {
            candle_core::bail!(
                "layers {taps:?}: expected ascending, at most {}",
                self.layers.len()
            );
        }
        Ok(())
    }
}

/// Runs `step` over the layers up to the last tap, keeping the states of
/// each tap (0 = the embeddings).
fn tapped(
    x: Tensor,
    taps: &[usize],
    layers: &[Layer],
    mut step: impl FnMut(&Layer, &Tensor) -> Result<Tensor>,
) -> Result<Vec<Tensor>> {
    let mut out = Vec::with_capacity(taps.len());
    let mut x = x;
    let last = taps.last().copied().unwrap_or(0);
    for depth in 0..=last {
        if depth > 0 {
            x = step(&layers[depth - 1], &x)?;
        }
        if taps.contains(&depth) {
            out.push(x.clone());
        }
    }
    Ok(out)
}

impl EncoderModel for Transformer {
    fn hidden(&self) -> usize {
        self.hidden
    }

    fn layers(&self) -> usize {
        self.layers.len()
    }

    fn packs(&self) -> bool {
        self.layers.iter().all(|l| l.host.is_some()) && self.embeddings.host.is_some()
    }

    fn forward_packed(
        &self,
        ids: &[u32],
        lengths: &[usize],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Vec<Tensor>> {
        let span = lengths.iter().copied().max().unwrap_or(0);
        self.check(span, taps)?;
        let x = self.embeddings.packed(ids, lengths, second)?;
        let table = self.bias.as_ref().map(|b| b.table(span.max(1)));
        let bias = table.as_deref().map(|values| RelativeBias {
            values,
            span: span.max(1),
        });
        tapped(x, taps, &self.layers, |layer, x| {
            let p = layer.host.as_ref().expect("packs() checked");
            layer.forward_cpu(p, x, lengths, bias.as_ref())
        })
    }

    fn forward_padded(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Vec<Tensor>> {
        let (b, t) = ids.dims2()?;
        self.check(t, taps)?;
        let x = self
            .embeddings
            .padded(ids, lengths, second, self.hidden)?
            .to_dtype(self.dtype)?;
        let device = ids.device();
        let dtype = self.dtype;
        let rows = Rows::new(lengths, t, device)?;
        if packed_attention::serves(device, dtype, self.hidden / self.heads) {
            // No padding past the embeddings: the kernel reads each
            // sequence's rows where they lie.
            let packing = Packing::new(lengths, device)?;
            let table = match &self.bias {
                Some(bias) => Some(Tensor::from_vec(
                    bias.table(t),
                    (self.heads, 2 * t - 1),
                    device,
                )?),
                None => None,
            };
            let batch = Batch::Packed {
                packing: &packing,
                bias: table.as_ref().map(|table| (table, t)),
            };
            return tapped(rows.unpad(&x)?, taps, &self.layers, |layer, x| {
                layer.forward(x, &batch)
            });
        }
        let mut mask = if lengths.iter().all(|&l| l == t) {
            None
        } else {
            Some(padded::key_mask(lengths, t, device)?.to_dtype(dtype)?)
        };
        if let Some(bias) = &self.bias {
            // The relative table spread out to [1, heads, t, t].
            let table = bias.table(t);
            let width = 2 * t - 1;
            let mut full = vec![0f32; self.heads * t * t];
            for (head, rows) in full.chunks_exact_mut(t * t).enumerate() {
                for (i, row) in rows.chunks_exact_mut(t).enumerate() {
                    row.copy_from_slice(&table[head * width + t - 1 - i..][..t]);
                }
            }
            let full = Tensor::from_vec(full, (1, self.heads, t, t), device)?.to_dtype(dtype)?;
            // A masked key stays masked (-inf plus a bias).
            mask = Some(match mask {
                Some(m) => full.broadcast_add(&m)?,
                None => full,
            });
        }
        let mask = mask.map(|m| spread_mask(m, b, self.heads, t)).transpose()?;
        let x = rows.unpad(&x)?;
        let batch = Batch::Padded {
            rows: &rows,
            mask: mask.as_ref(),
        };
        tapped(x, taps, &self.layers, |layer, x| layer.forward(x, &batch))
    }
}

/// The weights' root: the top level, or the family's `prefix` when the
/// checkpoint keeps its encoder under one (`bert.`, `roberta.`, `mpnet.`).
pub(super) fn weights_root<'a>(vb: VarBuilder<'a>, prefix: &str) -> VarBuilder<'a> {
    if vb.contains_tensor("embeddings.word_embeddings.weight") {
        vb
    } else {
        vb.pp(prefix)
    }
}
