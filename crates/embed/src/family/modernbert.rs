//! ModernBERT (`model_type` `modernbert`: gte-modernbert-base,
//! modernbert-embed-base, and ModernBERT-base/large themselves): a
//! pre-norm encoder with no absolute positions. Each layer normalises
//! before attention (except the first, whose input is the normalised
//! embedding) and before its GeGLU feed-forward; attention is global every
//! `global_attn_every_n_layers` layers (rotary base `global_rope_theta`)
//! and local elsewhere, each token seeing those within `local_attention / 2`
//! on either side (rotary base `local_rope_theta`); a final norm closes
//! the stack. Both config layouts are read: the original keys
//! (`global_rope_theta`…) and transformers' (`layer_types`,
//! `rope_parameters` by layer type).
//!
//! As bert_score computes layer N of a model with a final norm (it drops
//! the layers past N), every tap is `final_norm(h_N)`; the last is the
//! model's output. The stream between layers is the packed rows; on the CPU
//! attention runs on the fused kernel straight off them (a local layer
//! scoring only the keys in its window), elsewhere as Candle operations on
//! a padded batch; the linear maps in the run's precision
//! ([`super::padded::Dense`]).

use candle_core::{Module, Tensor};
use candle_nn::{Embedding, VarBuilder};
use serde::Deserialize;
use serde_json::Value;

use super::padded::{
    self, Dense, GateActivation, Heads, LayerNorm, PackedRope, Padded, PaddedEncoder, Rope, Rows,
    Span, SpanBatch,
};
use super::EncoderModel;
use crate::precision::Precision;

type Result<T> = candle_core::Result<T>;

/// The `config.json` keys of a ModernBERT that change the arithmetic.
#[derive(Deserialize)]
struct ModernBertConfig {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    #[serde(default = "gelu")]
    hidden_activation: String,
    #[serde(default = "positions")]
    max_position_embeddings: usize,
    #[serde(default = "eps")]
    norm_eps: f64,
    #[serde(default)]
    norm_bias: bool,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    mlp_bias: bool,
    #[serde(default = "window")]
    local_attention: usize,
    #[serde(default = "every")]
    global_attn_every_n_layers: usize,
    global_rope_theta: Option<f64>,
    local_rope_theta: Option<f64>,
    layer_types: Option<Vec<String>>,
    rope_parameters: Option<Value>,
    rope_scaling: Option<Value>,
}

fn gelu() -> String {
    "gelu".into()
}
fn positions() -> usize {
    8192
}
fn eps() -> f64 {
    1e-5
}
fn window() -> usize {
    128
}
fn every() -> usize {
    3
}

impl ModernBertConfig {
    fn kinds(&self) -> std::result::Result<Vec<Span>, String> {
        match &self.layer_types {
            Some(types) => {
                if types.len() != self.num_hidden_layers {
                    return Err("config.json: layer_types must name every layer".into());
                }
                types
                    .iter()
                    .map(|t| match t.as_str() {
                        "full_attention" => Ok(Span::Global),
                        "sliding_attention" => Ok(Span::Window),
                        other => Err(format!(
                            "config.json: layer_types '{other}' is not supported"
                        )),
                    })
                    .collect()
            }
            None => {
                let every = self.global_attn_every_n_layers.max(1);
                Ok((0..self.num_hidden_layers)
                    .map(|i| {
                        if i % every == 0 {
                            Span::Global
                        } else {
                            Span::Window
                        }
                    })
                    .collect())
            }
        }
    }

    /// The rotary base of each kind: `rope_parameters` by layer type, or
    /// the original keys, else ModernBERT's defaults (160,000 and 10,000).
    fn thetas(&self) -> std::result::Result<(f64, f64), String> {
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err("config.json: rope_scaling is not supported".into());
        }
        let of = |kind: &str, original: Option<f64>, default: f64| {
            let p = self.rope_parameters.as_ref().and_then(|p| p.get(kind));
            if let Some(t) = p
                .and_then(|p| p.get("rope_type"))
                .and_then(Value::as_str)
                .filter(|t| *t != "default")
            {
                return Err(format!(
                    "config.json: rope_parameters.{kind}.rope_type '{t}' is not supported"
                ));
            }
            Ok(p.and_then(|p| p.get("rope_theta"))
                .and_then(Value::as_f64)
                .or(original)
                .unwrap_or(default))
        };
        Ok((
            of("full_attention", self.global_rope_theta, 160_000.0)?,
            of("sliding_attention", self.local_rope_theta, 10_000.0)?,
        ))
    }

    /// GeGLU's activation, on the input half.
    fn act(&self) -> std::result::Result<GateActivation, String> {
        match self.hidden_activation.as_str() {
            "gelu" => Ok(GateActivation::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(GateActivation::GeluTanh),
            other => Err(format!(
                "config.json: hidden_activation '{other}' is not supported"
            )),
        }
    }
}

/// A layer norm with the bias ModernBERT may leave out.
fn norm(vb: VarBuilder, size: usize, eps: f64, bias: bool) -> Result<LayerNorm> {
    if bias {
        LayerNorm::load(vb, size, eps)
    } else {
        let zeros = Tensor::zeros(size, candle_core::DType::F32, vb.device())?;
        Ok(LayerNorm::new(vb.get(size, "weight")?, zeros, eps))
    }
}

struct Layer {
    /// None for the first layer, whose input is the normalised embedding.
    attn_norm: Option<LayerNorm>,
    qkv: Dense,
    out: Dense,
    mlp_norm: LayerNorm,
    /// Input half then gate half.
    wi: Dense,
    wo: Dense,
    span: Span,
}

struct ModernBert {
    words: Embedding,
    embed_norm: LayerNorm,
    layers: Vec<Layer>,
    final_norm: LayerNorm,
    global: Rope,
    local: Rope,
    hidden: usize,
    heads: usize,
    /// Tokens a local layer sees on each side.
    reach: usize,
    act: GateActivation,
    max_tokens: usize,
}

impl ModernBert {
    fn load(
        vb: VarBuilder,
        c: &ModernBertConfig,
        precision: Precision,
    ) -> std::result::Result<ModernBert, String> {
        if c.num_attention_heads == 0 || !c.hidden_size.is_multiple_of(c.num_attention_heads) {
            return Err(
                "config.json: hidden_size must be a multiple of num_attention_heads".into(),
            );
        }
        let kinds = c.kinds()?;
        let (global, local) = c.thetas()?;
        let act = c.act()?;
        let build = || -> Result<ModernBert> {
            let vb = if vb.contains_tensor("embeddings.tok_embeddings.weight") {
                vb.clone()
            } else {
                vb.pp("model")
            };
            let h = c.hidden_size;
            let eps = c.norm_eps;
            let dense = |vb, inp, out, bias| Dense::load(vb, inp, out, bias, precision);
            let layers = kinds
                .iter()
                .enumerate()
                .map(|(i, &span)| {
                    let l = vb.pp(format!("layers.{i}"));
                    Ok(Layer {
                        attn_norm: (i > 0)
                            .then(|| norm(l.pp("attn_norm"), h, eps, c.norm_bias))
                            .transpose()?,
                        qkv: dense(l.pp("attn.Wqkv"), h, 3 * h, c.attention_bias)?,
                        out: dense(l.pp("attn.Wo"), h, h, c.attention_bias)?,
                        mlp_norm: norm(l.pp("mlp_norm"), h, eps, c.norm_bias)?,
                        wi: dense(l.pp("mlp.Wi"), h, 2 * c.intermediate_size, c.mlp_bias)?,
                        wo: dense(l.pp("mlp.Wo"), c.intermediate_size, h, c.mlp_bias)?,
                        span,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            let dim = h / c.num_attention_heads;
            Ok(ModernBert {
                words: Embedding::new(
                    vb.get((c.vocab_size, h), "embeddings.tok_embeddings.weight")?,
                    h,
                ),
                embed_norm: norm(vb.pp("embeddings.norm"), h, eps, c.norm_bias)?,
                layers,
                final_norm: norm(vb.pp("final_norm"), h, eps, c.norm_bias)?,
                global: Rope::new(global, dim),
                local: Rope::new(local, dim),
                hidden: h,
                heads: c.num_attention_heads,
                reach: c.local_attention / 2,
                act,
                max_tokens: c.max_position_embeddings,
            })
        };
        build().map_err(|e| e.to_string())
    }
}

/// What a batch's layers share: on the CPU, rotary tables by packed row
/// for the fused attention kernel; elsewhere, a padded batch's tables and
/// masks for Candle's operations.
enum Batch {
    Fused {
        lengths: Vec<usize>,
        global: PackedRope,
        local: PackedRope,
    },
    Padded(SpanBatch),
}

impl ModernBert {
    fn heads(&self) -> Heads {
        Heads {
            heads: self.heads,
            kv_heads: self.heads,
            dim: self.hidden / self.heads,
        }
    }

    /// Attention's scale, 1/√dim.
    fn scale(&self) -> f64 {
        1.0 / ((self.hidden / self.heads) as f64).sqrt()
    }
}

impl Layer {
    fn forward(&self, x: &Tensor, m: &ModernBert, batch: &Batch, rows: &Rows) -> Result<Tensor> {
        let normed = match &self.attn_norm {
            Some(n) => n.forward(x)?,
            None => x.clone(),
        };
        let heads = m.heads();
        let qkv = self.qkv.forward(&normed)?;
        let ctx = match batch {
            Batch::Fused {
                lengths,
                global,
                local,
            } => match self.span {
                Span::Global => heads.attend_packed(&qkv, global, lengths, None)?,
                Span::Window => heads.attend_packed(&qkv, local, lengths, Some(m.reach))?,
            },
            Batch::Padded(spans) => {
                let (rope, mask) = spans.of(self.span);
                let (q, k, v) = heads.split_fused(&qkv, rope, rows)?;
                heads.attend(&q, &k, &v, mask, m.scale(), rows)?
            }
        };
        let x = (x + self.out.forward(&ctx)?)?;
        let wi = self.wi.forward(&self.mlp_norm.forward(&x)?)?;
        x + self.wo.forward(&padded::gated(&wi, m.act, true)?)?
    }
}

impl PaddedEncoder for ModernBert {
    type Batch = Batch;

    const NAME: &'static str = "ModernBERT";

    fn hidden(&self) -> usize {
        self.hidden
    }

    fn layers(&self) -> usize {
        self.layers.len()
    }

    fn max_tokens(&self) -> usize {
        self.max_tokens
    }

    fn embed(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        _: Option<&Tensor>,
    ) -> Result<(Tensor, Batch)> {
        let (_, t) = ids.dims2()?;
        let device = ids.device();
        let x = self.embed_norm.forward(&self.words.forward(ids)?)?;
        let batch = if device.is_cpu() {
            let scale = self.scale();
            Batch::Fused {
                lengths: lengths.to_vec(),
                global: PackedRope::new(&self.global, lengths, scale, device)?,
                local: PackedRope::new(&self.local, lengths, scale, device)?,
            }
        } else {
            Batch::Padded(SpanBatch::new(
                &self.global,
                &self.local,
                lengths,
                t,
                self.reach,
                device,
            )?)
        };
        Ok((x, batch))
    }

    fn layer(&self, index: usize, x: &Tensor, batch: &Batch, rows: &Rows) -> Result<Tensor> {
        self.layers[index].forward(x, self, batch, rows)
    }

    fn tap(&self, x: &Tensor) -> Result<Tensor> {
        self.final_norm.forward(x)
    }
}

/// The `modernbert` family's loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    let c: ModernBertConfig =
        serde_json::from_str(config).map_err(|e| format!("config.json: {e}"))?;
    Ok(Box::new(Padded(ModernBert::load(weights, &c, precision)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> ModernBertConfig {
        let text = format!(
            r#"{{"vocab_size": 50, "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 4, "num_attention_heads": 4 {extra}}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    /// The original keys and transformers' give the same layer kinds and
    /// bases.
    #[test]
    fn both_config_layouts_are_read() {
        let original = config(
            r#", "global_attn_every_n_layers": 2, "global_rope_theta": 1000.0,
                "local_rope_theta": 100.0"#,
        );
        let ported = config(
            r#", "layer_types": ["full_attention", "sliding_attention", "full_attention",
                "sliding_attention"], "rope_parameters": {
                "full_attention": {"rope_type": "default", "rope_theta": 1000.0},
                "sliding_attention": {"rope_type": "default", "rope_theta": 100.0}}"#,
        );
        for c in [&original, &ported] {
            let kinds = c.kinds().unwrap();
            assert!(kinds == [Span::Global, Span::Window, Span::Global, Span::Window]);
            assert_eq!(c.thetas().unwrap(), (1000.0, 100.0));
        }
    }

    /// Settings the body does not run are refused by the key's name.
    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let c = config(r#", "hidden_activation": "silu""#);
        assert!(c.act().unwrap_err().contains("hidden_activation 'silu'"));
        let c = config(r#", "rope_scaling": {"rope_type": "yarn"}"#);
        assert!(c.thetas().unwrap_err().contains("rope_scaling"));
        let c = config(
            r#", "layer_types": ["full_attention", "chunked_attention", "full_attention",
                "full_attention"]"#,
        );
        assert!(c
            .kinds()
            .unwrap_err()
            .contains("layer_types 'chunked_attention'"));
    }
}
