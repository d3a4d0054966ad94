//! DeBERTa (`model_type` `deberta`: bert_score's best-ranked
//! deberta-xlarge-mnli and DeepEval's deberta-large-mnli) and DeBERTa-v2/v3
//! (`deberta-v2`). Disentangled attention: besides content·content, each
//! query meets the relative position's key (c2p) and each key the relative
//! position's query (p2c), from one table of relative-position embeddings
//! shared by the layers; no absolute positions unless
//! `position_biased_input`. v1 fuses Q/K/V into one `in_proj` (rows
//! interleaved by head) with separate query and value biases and its own
//! position projections; v2 has separate projections, log-bucketed
//! relative positions, may reuse the content projections for positions
//! (`share_att_key`), normalises the table, and may add a convolution
//! after the first layer.
//!
//! The relative terms depend on the content. On the CPU each sequence's
//! terms are computed from its own queries and keys, only at the table rows
//! its offsets reach ([`crate::kernels::Disentangled`]), and added as a
//! per-pair bias inside the fused attention kernel, on packed rows; on an
//! accelerator the layers run as plain Candle operations on padded batches.
//! Either way the linear maps run in the run's precision
//! ([`super::padded::Dense`]).

use candle_core::{DType, Device, Module, Tensor, D};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::Deserialize;

use super::accelerator::spread_mask;
use super::ops::Attention;
use super::padded::{
    self, linear, Dense, LayerNorm as Norm, Padded, PaddedEncoder, Rows, TokenTypes,
};
use super::transformer::weights_root;
use super::EncoderModel;
use crate::kernels::{AttentionShape, Disentangled};
use crate::precision::Precision;

type Result<T> = candle_core::Result<T>;

/// Which of the two checkpoints' layouts.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The `config.json` keys of `DebertaConfig` / `DebertaV2Config` that
/// change the arithmetic (transformers' defaults where absent).
#[derive(Deserialize)]
struct DebertaConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    #[serde(default = "gelu")]
    hidden_act: String,
    #[serde(default = "max_positions")]
    max_position_embeddings: usize,
    #[serde(default)]
    type_vocab_size: usize,
    #[serde(default = "eps")]
    layer_norm_eps: f64,
    #[serde(default)]
    relative_attention: bool,
    #[serde(default = "minus_one")]
    max_relative_positions: i64,
    #[serde(default = "minus_one")]
    position_buckets: i64,
    #[serde(default = "yes")]
    position_biased_input: bool,
    #[serde(default)]
    pos_att_type: Option<serde_json::Value>,
    #[serde(default)]
    share_att_key: bool,
    #[serde(default)]
    norm_rel_ebd: Option<String>,
    #[serde(default)]
    conv_kernel_size: usize,
    #[serde(default = "one")]
    conv_groups: usize,
    #[serde(default)]
    conv_act: Option<String>,
    #[serde(default)]
    embedding_size: Option<usize>,
    #[serde(default)]
    attention_head_size: Option<usize>,
    #[serde(default)]
    talking_head: bool,
}

fn gelu() -> String {
    "gelu".into()
}
fn max_positions() -> usize {
    512
}

/// The longest sequence a DeBERTa without absolute positions
/// (`position_biased_input` false: relative terms only) runs: transformers
/// puts no limit on it (the relative offsets are bucketed and clamped to the
/// table), and FactCG and MiniCheck-DeBERTa read up to 2048 tokens. Twice
/// that bounds the offsets precomputed per layer.
pub(crate) const RELATIVE_ONLY_LIMIT: usize = 4096;

impl DebertaConfig {
    /// The most tokens the model reads: its position table's rows, or
    /// [`RELATIVE_ONLY_LIMIT`] where it has none.
    fn token_limit(&self) -> usize {
        if self.position_biased_input {
            self.max_position_embeddings
        } else {
            self.max_position_embeddings.max(RELATIVE_ONLY_LIMIT)
        }
    }
}

/// The most tokens a `deberta` / `deberta-v2` model of `config.json`'s text
/// reads (`None` for a config that does not parse as one).
pub(crate) fn token_limit(config: &str) -> Option<usize> {
    serde_json::from_str::<DebertaConfig>(config)
        .ok()
        .map(|c| c.token_limit())
}
fn eps() -> f64 {
    1e-7
}
fn minus_one() -> i64 {
    -1
}
fn yes() -> bool {
    true
}
fn one() -> usize {
    1
}

/// An activation by transformers' name: exact GELU, its tanh form, tanh.
#[derive(Clone, Copy)]
enum Act {
    Gelu,
    GeluTanh,
    Tanh,
}

impl Act {
    fn named(key: &str, name: &str) -> std::result::Result<Act, String> {
        Ok(match name {
            "gelu" => Act::Gelu,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Act::GeluTanh,
            "tanh" => Act::Tanh,
            other => return Err(format!("config.json: {key} '{other}' is not supported")),
        })
    }

    fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Act::Gelu => x.gelu_erf(),
            Act::GeluTanh => x.gelu(),
            Act::Tanh => x.tanh(),
        }
    }
}

/// What the config asks of the attention, checked.
struct Settings {
    c2p: bool,
    p2c: bool,
    /// The queries' scale: 1/√(head_dim · (1 + relative terms)).
    scale: f64,
    /// Rows of the relative table on each side (`att_span`), when the
    /// relative terms are on.
    span: Option<usize>,
    /// Log buckets: (bucket_size, max_position), v2 only.
    buckets: Option<(i64, i64)>,
    act: Act,
}

impl DebertaConfig {
    fn parse(text: &str, version: Version) -> std::result::Result<DebertaConfig, String> {
        let c: DebertaConfig =
            serde_json::from_str(text).map_err(|e| format!("config.json: {e}"))?;
        let refuse = |key: &str, why: &str| Err(format!("config.json: {key} {why}"));
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return refuse("hidden_size", "must be a multiple of num_attention_heads");
        }
        if let Some(size) = c.attention_head_size {
            if size * c.num_attention_heads != c.hidden_size {
                return refuse(
                    "attention_head_size",
                    "other than hidden_size / num_attention_heads is not supported",
                );
            }
        }
        if c.talking_head {
            return refuse("talking_head", "true is not supported");
        }
        // Only odd kernels keep the length ((k − 1)/2 on each side); v1
        // has no convolution (transformers ignores the key there too).
        if version == Version::V2 && c.conv_kernel_size > 0 && c.conv_kernel_size.is_multiple_of(2)
        {
            return refuse("conv_kernel_size", "must be odd");
        }
        Ok(c)
    }

    fn pos_att_types(&self) -> std::result::Result<Vec<String>, String> {
        let kinds: Vec<String> = match &self.pos_att_type {
            None | Some(serde_json::Value::Null) => Vec::new(),
            Some(serde_json::Value::String(s)) => s
                .to_lowercase()
                .split('|')
                .map(|k| k.trim().to_string())
                .collect(),
            Some(serde_json::Value::Array(a)) => a
                .iter()
                .map(|k| k.as_str().map(str::to_string))
                .collect::<Option<_>>()
                .ok_or("config.json: pos_att_type must name c2p and/or p2c")?,
            Some(other) => {
                return Err(format!(
                    "config.json: pos_att_type {other} is not supported"
                ))
            }
        };
        if let Some(other) = kinds.iter().find(|k| *k != "c2p" && *k != "p2c") {
            return Err(format!(
                "config.json: pos_att_type '{other}' is not supported (c2p and p2c only)"
            ));
        }
        Ok(kinds)
    }

    fn settings(&self, version: Version) -> std::result::Result<Settings, String> {
        let kinds = self.pos_att_types()?;
        let c2p = kinds.iter().any(|k| k == "c2p");
        let p2c = kinds.iter().any(|k| k == "p2c");
        let head_dim = self.hidden_size / self.num_attention_heads;
        // transformers counts the listed terms even when relative attention
        // is off.
        let factor = 1 + kinds.len();
        let max_relative = if self.max_relative_positions < 1 {
            self.max_position_embeddings as i64
        } else {
            self.max_relative_positions
        };
        let bucketed = version == Version::V2 && self.position_buckets > 0;
        let span = self.relative_attention.then_some(if bucketed {
            self.position_buckets as usize
        } else {
            max_relative as usize
        });
        Ok(Settings {
            c2p: self.relative_attention && c2p,
            p2c: self.relative_attention && p2c,
            scale: 1.0 / ((head_dim * factor) as f64).sqrt(),
            span,
            buckets: bucketed.then_some((self.position_buckets, max_relative)),
            act: Act::named("hidden_act", &self.hidden_act)?,
        })
    }
}

/// transformers' `make_log_bucket_position` for one relative position,
/// in f32 as torch computes it.
fn log_bucket(rel: i64, bucket_size: i64, max_position: i64) -> i64 {
    let mid = bucket_size / 2;
    let abs = rel.abs();
    if abs <= mid {
        return rel;
    }
    let ratio = ((max_position - 1) as f64 / mid as f64) as f32;
    let log = ((abs as f32 / mid as f32).ln() / ratio.ln() * (mid - 1) as f32).ceil() as i64 + mid;
    log * rel.signum()
}

/// A linear map with its output scaled by `s` (weights and bias).
fn scaled(l: &Linear, s: f64) -> Result<Linear> {
    let b = match l.bias() {
        Some(b) => Some((b * s)?),
        None => None,
    };
    Ok(Linear::new((l.weight() * s)?, b))
}

/// `[rows, heads·dim]` → `[heads, rows, dim]`.
fn by_head(x: &Tensor, heads: usize) -> Result<Tensor> {
    let (rows, width) = x.dims2()?;
    x.reshape((rows, heads, width / heads))?
        .transpose(0, 1)?
        .contiguous()
}

struct Layer {
    /// Query projection, scaled by [`Settings::scale`].
    q: Dense,
    k: Dense,
    v: Dense,
    /// The relative table through the position-key projection
    /// (`[heads, 2·span, dim]`), for c2p on an accelerator.
    pos_key: Option<Tensor>,
    /// The same through the position-query projection, scaled, for p2c on
    /// an accelerator.
    pos_query: Option<Tensor>,
    attn_out: Dense,
    attn_norm: Norm,
    ff_in: Dense,
    ff_out: Dense,
    ff_norm: Norm,
    heads: usize,
    act: Act,
    /// The relative tables in host memory for the fused CPU attention;
    /// `None` on an accelerator or without relative attention.
    pairs: Option<Disentangled>,
}

impl Layer {
    fn load(
        vb: VarBuilder,
        c: &DebertaConfig,
        s: &Settings,
        version: Version,
        table: Option<&Tensor>,
        precision: Precision,
    ) -> Result<Layer> {
        let h = c.hidden_size;
        let heads = c.num_attention_heads;
        let dim = h / heads;
        let att = vb.pp("attention.self");
        let (q, k, v, pos_k, pos_q) = match version {
            Version::V1 => {
                // in_proj rows: for each head, its query, key and value rows.
                let w = att.get((3 * h, h), "in_proj.weight")?;
                let w = w.reshape((heads, 3, dim, h))?;
                let part = |i: usize| -> Result<Tensor> {
                    w.narrow(1, i, 1)?.contiguous()?.reshape((h, h))
                };
                let q = Linear::new(part(0)?, Some(att.get(h, "q_bias")?));
                let k = Linear::new(part(1)?, None);
                let v = Linear::new(part(2)?, Some(att.get(h, "v_bias")?));
                let pos_k = s
                    .c2p
                    .then(|| linear(att.pp("pos_proj"), h, h, false))
                    .transpose()?;
                let pos_q = s
                    .p2c
                    .then(|| linear(att.pp("pos_q_proj"), h, h, true))
                    .transpose()?;
                (q, k, v, pos_k, pos_q)
            }
            Version::V2 => {
                let q = linear(att.pp("query_proj"), h, h, true)?;
                let k = linear(att.pp("key_proj"), h, h, true)?;
                let v = linear(att.pp("value_proj"), h, h, true)?;
                let (pos_k, pos_q) = if c.share_att_key {
                    (s.c2p.then(|| k.clone()), s.p2c.then(|| q.clone()))
                } else {
                    (
                        s.c2p
                            .then(|| linear(att.pp("pos_key_proj"), h, h, true))
                            .transpose()?,
                        s.p2c
                            .then(|| linear(att.pp("pos_query_proj"), h, h, true))
                            .transpose()?,
                    )
                };
                (q, k, v, pos_k, pos_q)
            }
        };
        let project = |l: Option<Linear>, scale: f64| -> Result<Option<Tensor>> {
            match (l, table) {
                (Some(l), Some(table)) => {
                    Ok(Some(by_head(&scaled(&l, scale)?.forward(table)?, heads)?))
                }
                _ => Ok(None),
            }
        };
        let eps = c.layer_norm_eps;
        let dense = |vb, inp, out| Dense::load(vb, inp, out, true, precision);
        let (pos_key, pos_query) = (project(pos_k, 1.0)?, project(pos_q, s.scale)?);
        let host = |t: &Option<Tensor>| -> Result<Option<Vec<f32>>> {
            t.as_ref()
                .map(|t| t.to_dtype(DType::F32)?.flatten_all()?.to_vec1())
                .transpose()
        };
        let pairs = match (s.span, vb.device().is_cpu()) {
            (Some(span), true) => Some(Disentangled {
                heads,
                head_dim: dim,
                rows: 2 * span,
                pos_key: host(&pos_key)?,
                pos_query: host(&pos_query)?,
                row_of_offset: row_of_offset(span, s.buckets, c.token_limit()),
                max: c.token_limit(),
            }),
            _ => None,
        };
        // The CPU reads the host copies only.
        let (pos_key, pos_query) = match pairs {
            Some(_) => (None, None),
            None => (pos_key, pos_query),
        };
        Ok(Layer {
            q: Dense::new(scaled(&q, s.scale)?, precision)?,
            k: Dense::new(k, precision)?,
            v: Dense::new(v, precision)?,
            pos_key,
            pos_query,
            attn_out: dense(vb.pp("attention.output.dense"), h, h)?,
            attn_norm: Norm::load(vb.pp("attention.output.LayerNorm"), h, eps)?,
            ff_in: dense(vb.pp("intermediate.dense"), h, c.intermediate_size)?,
            ff_out: dense(vb.pp("output.dense"), c.intermediate_size, h)?,
            ff_norm: Norm::load(vb.pp("output.LayerNorm"), h, eps)?,
            heads,
            act: s.act,
            pairs,
        })
    }

    /// `x`: packed rows `[Σ lengths, hidden]`, through attention (the
    /// batch's form of it) and the feed-forward block.
    fn forward(&self, x: &Tensor, batch: &Batch, rows: &Rows) -> Result<Tensor> {
        let ctx = match &batch.padded {
            Some(p) => self.attend_padded(x, &p.mask, p.index.as_ref(), rows)?,
            None => self.attend_packed(x, &batch.lengths)?,
        };
        let attn = self
            .attn_norm
            .forward(&(self.attn_out.forward(&ctx)? + x)?)?;
        let inner = self.act.apply(&self.ff_in.forward(&attn)?)?;
        self.ff_norm
            .forward(&(self.ff_out.forward(&inner)? + attn)?)
    }

    /// Attention on the CPU's fused kernel: packed rows in, packed context
    /// out, the relative terms as a per-pair bias.
    fn attend_packed(&self, x: &Tensor, lengths: &[usize]) -> Result<Tensor> {
        let qkv = Tensor::cat(
            &[self.q.forward(x)?, self.k.forward(x)?, self.v.forward(x)?],
            1,
        )?;
        let h = x.dim(1)?;
        let zeros = vec![0f32; 3 * h];
        qkv.apply_op1_no_bwd(&Attention {
            shape: AttentionShape {
                heads: self.heads,
                head_dim: h / self.heads,
                qkv_bias: &zeros,
                reach: None,
            },
            lengths,
            bias: None,
            pairs: self.pairs.as_ref(),
        })
    }

    /// Attention as Candle operations on the padded batch (an
    /// accelerator's form). `mask`: additive `[b, 1, 1, t]`; `index`: each
    /// (query, key) pair's row of the relative table, `[b, heads, t, t]`.
    fn attend_padded(
        &self,
        x: &Tensor,
        mask: &Tensor,
        index: Option<&Tensor>,
        rows: &Rows,
    ) -> Result<Tensor> {
        let split = |l: &Dense| -> Result<Tensor> {
            let y = rows.pad(&l.forward(x)?)?;
            let (b, t, h) = y.dims3()?;
            y.reshape((b, t, self.heads, h / self.heads))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (q, k, v) = (split(&self.q)?, split(&self.k)?, split(&self.v)?);
        let mut scores = q.matmul(&k.t()?)?;
        if let Some(index) = index {
            if let Some(pos_key) = &self.pos_key {
                // c2p[i, j] = q_i · pos_key[row(i, j)]
                let all = q.broadcast_matmul(&pos_key.t()?)?;
                scores = (scores + all.contiguous()?.gather(index, D::Minus1)?)?;
            }
            if let Some(pos_query) = &self.pos_query {
                // p2c[i, j] = k_j · pos_query[row(i, j)]: pos_query · kᵀ
                // is `[b, heads, 2·span, t]`; gathered along dimension 2 at
                // the index itself, it is p2c in [query, key] order, so the
                // addition below reads both operands in order (a transposed
                // one is several times slower to add on a GPU,
                // docs/performance.md#gpu).
                let p2c = pos_query.broadcast_matmul(&k.t()?)?.gather(index, 2)?;
                scores = (scores + p2c)?;
            }
        }
        let probs = candle_nn::ops::softmax_last_dim(&scores.broadcast_add(mask)?)?;
        let (b, _, t, _) = probs.dims4()?;
        rows.unpad(&probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, ()))?)
    }
}

/// v2's convolution over the embeddings, added after the first layer.
struct Conv {
    weight: Tensor,
    bias: Tensor,
    groups: usize,
    act: Act,
    norm: Norm,
}

impl Conv {
    /// `embedded`: `[b, t, hidden]`, zero past each text's end; `layer`:
    /// the first layer's packed rows, `[Σ lengths, hidden]`.
    fn forward(&self, embedded: &Tensor, layer: &Tensor, rows: &Rows) -> Result<Tensor> {
        let k = self.weight.dim(2)?;
        let out = embedded
            .transpose(1, 2)?
            .contiguous()?
            .conv1d(&self.weight, (k - 1) / 2, 1, 1, self.groups)?
            .broadcast_add(&self.bias.reshape((1, (), 1))?)?
            .transpose(1, 2)?;
        let out = self.act.apply(&rows.unpad(&out)?)?;
        self.norm.forward(&(layer + out)?)
    }
}

struct Deberta {
    words: Embedding,
    positions: Option<Tensor>,
    token_type: Option<TokenTypes>,
    /// Rows of the token-type table.
    types: usize,
    embed_proj: Option<Linear>,
    norm: Norm,
    layers: Vec<Layer>,
    conv: Option<Conv>,
    /// Rows of the relative table on each side, and v2's log buckets.
    span: Option<usize>,
    buckets: Option<(i64, i64)>,
    hidden: usize,
    heads: usize,
    max_tokens: usize,
}

impl Deberta {
    fn load(
        vb: VarBuilder,
        config: &str,
        version: Version,
        precision: Precision,
    ) -> std::result::Result<Deberta, String> {
        let c = DebertaConfig::parse(config, version)?;
        let s = c.settings(version)?;
        let conv_act = match (&c.conv_act, version, c.conv_kernel_size) {
            (_, Version::V1, _) | (_, _, 0) => None,
            (act, _, _) => Some(Act::named("conv_act", act.as_deref().unwrap_or("tanh"))?),
        };
        Deberta::build(
            weights_root(vb, "deberta"),
            &c,
            &s,
            version,
            conv_act,
            precision,
        )
        .map_err(|e| e.to_string())
    }

    fn build(
        vb: VarBuilder,
        c: &DebertaConfig,
        s: &Settings,
        version: Version,
        conv_act: Option<Act>,
        precision: Precision,
    ) -> Result<Deberta> {
        let h = c.hidden_size;
        let e = c.embedding_size.unwrap_or(h);
        let emb = vb.pp("embeddings");
        let words = Embedding::new(emb.get((c.vocab_size, e), "word_embeddings.weight")?, e);
        let positions = c
            .position_biased_input
            .then(|| emb.get((c.max_position_embeddings, e), "position_embeddings.weight"))
            .transpose()?;
        let token_type = TokenTypes::load(&emb, c.type_vocab_size, e)?;
        let embed_proj = (e != h)
            .then(|| linear(emb.pp("embed_proj"), e, h, false))
            .transpose()?;
        let norm = Norm::load(emb.pp("LayerNorm"), h, c.layer_norm_eps)?;
        let enc = vb.pp("encoder");
        let table = match s.span {
            Some(span) => {
                let rows = enc.get((2 * span, h), "rel_embeddings.weight")?;
                let normed = version == Version::V2
                    && c.norm_rel_ebd
                        .as_deref()
                        .unwrap_or("none")
                        .to_lowercase()
                        .split('|')
                        .any(|k| k.trim() == "layer_norm");
                Some(if normed {
                    Norm::load(enc.pp("LayerNorm"), h, c.layer_norm_eps)?.forward(&rows)?
                } else {
                    rows
                })
            }
            None => None,
        };
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                Layer::load(
                    enc.pp(format!("layer.{i}")),
                    c,
                    s,
                    version,
                    table.as_ref(),
                    precision,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let conv = match conv_act {
            Some(act) => {
                let k = c.conv_kernel_size;
                let groups = c.conv_groups.max(1);
                Some(Conv {
                    weight: enc.get((h, h / groups, k), "conv.conv.weight")?,
                    bias: enc.get(h, "conv.conv.bias")?,
                    groups,
                    act,
                    norm: Norm::load(enc.pp("conv.LayerNorm"), h, c.layer_norm_eps)?,
                })
            }
            None => None,
        };
        Ok(Deberta {
            words,
            positions,
            token_type,
            types: c.type_vocab_size,
            embed_proj,
            norm,
            layers,
            conv,
            span: s.span,
            buckets: s.buckets,
            hidden: h,
            heads: c.num_attention_heads,
            max_tokens: c.token_limit(),
        })
    }

    /// Each (query, key) pair's row of the relative table for `t` tokens,
    /// `[b, heads, t, t]`.
    fn relative_index(&self, b: usize, t: usize, device: &Device) -> Result<Option<Tensor>> {
        let Some(span) = self.span else {
            return Ok(None);
        };
        let offsets = row_of_offset(span, self.buckets, t.max(1));
        let mut rows = vec![0u32; t * t];
        for i in 0..t {
            for j in 0..t {
                rows[i * t + j] = offsets[i + t - 1 - j];
            }
        }
        let index = Tensor::from_vec(rows, (1, 1, t, t), device)?;
        Ok(Some(
            index.broadcast_as((b, self.heads, t, t))?.contiguous()?,
        ))
    }
}

/// The relative table's row for each offset `i − j` from `−(max − 1)` to
/// `max − 1` (at `i − j + max − 1`): the offset itself, or v2's log bucket
/// of it, moved by `span` and clamped to the table's `2·span` rows.
fn row_of_offset(span: usize, buckets: Option<(i64, i64)>, max: usize) -> Vec<u32> {
    let (span, max) = (span as i64, max as i64);
    (-(max - 1)..max)
        .map(|rel| {
            let rel = match buckets {
                Some((size, max_position)) => log_bucket(rel, size, max_position),
                None => rel,
            };
            (rel + span).clamp(0, 2 * span - 1) as u32
        })
        .collect()
}

/// What a batch's layers share.
struct Batch {
    /// The texts' lengths, for the fused attention on packed rows.
    lengths: Vec<usize>,
    /// The padded batch's mask and relative index, on an accelerator only.
    padded: Option<PaddedAttention>,
    /// The embedding, which the convolution reads after the first layer.
    embedded: Tensor,
}

/// What attention on a padded batch needs.
struct PaddedAttention {
    /// Additive key mask, `[b, heads, t, t]` in memory.
    mask: Tensor,
    /// Each pair's row of the relative table.
    index: Option<Tensor>,
}

impl PaddedEncoder for Deberta {
    type Batch = Batch;

    const NAME: &'static str = "DeBERTa";

    fn hidden(&self) -> usize {
        self.hidden
    }

    fn layers(&self) -> usize {
        self.layers.len()
    }

    fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn token_types(&self) -> usize {
        self.types
    }

    fn embed(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        types: Option<&Tensor>,
    ) -> Result<(Tensor, Batch)> {
        let (b, t) = ids.dims2()?;
        let device = ids.device();
        let mut x = self.words.forward(ids)?;
        if let Some(positions) = &self.positions {
            x = x.broadcast_add(&positions.narrow(0, 0, t)?)?;
        }
        if let Some(token_type) = &self.token_type {
            x = token_type.add(&x, types)?;
        }
        if let Some(proj) = &self.embed_proj {
            x = proj.forward(&x)?;
        }
        let keep: Vec<f32> = lengths
            .iter()
            .flat_map(|&l| (0..t).map(move |k| if k < l { 1.0 } else { 0.0 }))
            .collect();
        let keep = Tensor::from_vec(keep, (b, t, 1), device)?.to_dtype(x.dtype())?;
        let x = self.norm.forward(&x)?.broadcast_mul(&keep)?;
        let padded = if device.is_cpu() {
            None
        } else {
            let heads = self.layers.first().map_or(1, |l| l.heads);
            let mask = padded::key_mask(lengths, t, device)?.to_dtype(x.dtype())?;
            Some(PaddedAttention {
                mask: spread_mask(mask, b, heads, t)?,
                index: self.relative_index(b, t, device)?,
            })
        };
        let batch = Batch {
            lengths: lengths.to_vec(),
            padded,
            embedded: x.clone(),
        };
        Ok((x, batch))
    }

    fn layer(&self, index: usize, x: &Tensor, batch: &Batch, rows: &Rows) -> Result<Tensor> {
        let x = self.layers[index].forward(x, batch, rows)?;
        match (&self.conv, index) {
            (Some(conv), 0) => conv.forward(&batch.embedded, &x, rows),
            _ => Ok(x),
        }
    }
}

fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
    version: Version,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    Ok(Box::new(Padded(Deberta::load(
        weights, config, version, precision,
    )?)))
}

/// The `deberta` family's loader.
pub(super) fn load_v1(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    load(config, weights, precision, Version::V1)
}

/// The `deberta-v2` family's loader.
pub(super) fn load_v2(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    load(config, weights, precision, Version::V2)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// transformers' buckets for bucket_size 256 and 512 positions: exact
    /// within ±128, then log-spaced, odd-symmetric (values from
    /// `make_log_bucket_position`).
    #[test]
    fn log_buckets_as_transformers_computes_them() {
        for rel in -128..=128 {
            assert_eq!(log_bucket(rel, 256, 512), rel);
        }
        for rel in 129..600 {
            assert_eq!(log_bucket(-rel, 256, 512), -log_bucket(rel, 256, 512));
            assert!(log_bucket(rel, 256, 512) >= log_bucket(rel - 1, 256, 512));
        }
        assert_eq!(log_bucket(511, 256, 512), 255);
    }

    /// Fields that would change the arithmetic and are not run are refused
    /// by name.
    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let base = r#""vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
            "num_attention_heads": 4, "intermediate_size": 64"#;
        for (extra, key) in [
            (r#""talking_head": true"#, "talking_head"),
            (r#""pos_att_type": ["c2p", "p2p"]"#, "pos_att_type 'p2p'"),
            (r#""attention_head_size": 16"#, "attention_head_size"),
        ] {
            let text = format!("{{{base}, {extra}}}");
            let err = DebertaConfig::parse(&text, Version::V2)
                .and_then(|c| c.settings(Version::V2).map(|_| ()))
                .expect_err(extra);
            assert!(err.contains(key), "{extra}: {err}");
        }
        let text = format!(r#"{{{base}, "hidden_act": "relu"}}"#);
        let err = DebertaConfig::parse(&text, Version::V1)
            .and_then(|c| c.settings(Version::V1).map(|_| ()))
            .expect_err("relu");
        assert!(err.contains("hidden_act 'relu'"), "{err}");
    }
}
