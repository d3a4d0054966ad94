//! Qwen3 (`model_type` `qwen3`: Qwen3-Embedding-0.6B/4B/8B, the top of
//! MTEB's leaderboard in 2025-26): a causal decoder. Pre-norm layers with
//! RMSNorm, grouped-query attention with RMSNorm on each head's queries
//! and keys, rotary positions, a SwiGLU feed-forward, and a final norm.
//! Qwen3-Embedding pools the last token (its tokenizer appends
//! `<|endoftext|>`), read from the folder like any pooling.
//!
//! A token's state depends only on the tokens before it, so padding after
//! a text (refscore pads on the right) changes nothing, and rotary
//! positions are relative, so sentence-transformers' left padding gives
//! the same states. As bert_score computes a decoder's layer N (it drops
//! the layers past N and keeps the final norm), every tap here is
//! `norm(h_N)`; the last is the model's output, which sentence-transformers
//! pools.
//!
//! Runs as Candle operations on padded batches (Candle's fused `rope` and
//! `rms_norm`); the linear maps in the run's precision ([`super::padded::Dense`]).

use candle_core::{Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::Deserialize;
use serde_json::Value;

use super::padded::{
    self, linear, Dense, GateActivation, Heads, Padded, PaddedEncoder, RmsNorm, Rope, Rows,
};
use super::EncoderModel;
use crate::precision::Precision;

type Result<T> = candle_core::Result<T>;

/// The `config.json` keys of a `Qwen3Config` that change the arithmetic.
#[derive(Deserialize)]
struct Qwen3Config {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "silu")]
    hidden_act: String,
    #[serde(default = "positions")]
    max_position_embeddings: usize,
    #[serde(default = "eps")]
    rms_norm_eps: f64,
    rope_parameters: Option<Value>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
    #[serde(default)]
    attention_bias: bool,
    #[serde(default)]
    use_sliding_window: bool,
    layer_types: Option<Vec<String>>,
}

fn silu() -> String {
    "silu".into()
}
fn positions() -> usize {
    32_768
}
fn eps() -> f64 {
    1e-6
}

impl Qwen3Config {
    /// The rotary base; `Err` names a field whose setting is not run.
    fn check(&self) -> std::result::Result<f64, String> {
        let refuse = |what: &str| Err(format!("config.json: {what} is not supported"));
        if self.hidden_act != "silu" {
            return refuse(&format!("hidden_act '{}'", self.hidden_act));
        }
        if self.use_sliding_window {
            return refuse("use_sliding_window true");
        }
        if let Some(kind) = self
            .layer_types
            .iter()
            .flatten()
            .find(|k| *k != "full_attention")
        {
            return refuse(&format!("layer_types '{kind}'"));
        }
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return refuse("rope_scaling");
        }
        let heads = self.num_attention_heads;
        let kv = self.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv == 0 || !heads.is_multiple_of(kv) {
            return refuse("num_attention_heads not a multiple of num_key_value_heads");
        }
        let params = self.rope_parameters.as_ref().filter(|v| !v.is_null());
        if let Some(kind) = params
            .and_then(|p| p.get("rope_type"))
            .and_then(Value::as_str)
            .filter(|k| *k != "default")
        {
            return refuse(&format!("rope_parameters.rope_type '{kind}'"));
        }
        Ok(params
            .and_then(|p| p.get("rope_theta"))
            .and_then(Value::as_f64)
            .or(self.rope_theta)
            .unwrap_or(10_000.0))
    }
}

struct Layer {
    input_norm: RmsNorm,
    q: Dense,
    k: Dense,
    v: Dense,
    o: Dense,
    q_norm: RmsNorm,
    k_norm: RmsNorm,
    post_norm: RmsNorm,
    /// Gate then up, stacked.
    gate_up: Dense,
    down: Dense,
}

/// Sizes every layer shares.
struct Dims {
    hidden: usize,
    heads: Heads,
    inner: usize,
}

impl Layer {
    fn load(vb: VarBuilder, d: &Dims, eps: f64, bias: bool, precision: Precision) -> Result<Layer> {
        let att = vb.pp("self_attn");
        let mlp = vb.pp("mlp");
        let gate = linear(mlp.pp("gate_proj"), d.hidden, d.inner, false)?;
        let up = linear(mlp.pp("up_proj"), d.hidden, d.inner, false)?;
        let q_width = d.heads.heads * d.heads.dim;
        let kv_width = d.heads.kv_heads * d.heads.dim;
        Ok(Layer {
            input_norm: RmsNorm::load(vb.pp("input_layernorm"), d.hidden, eps)?,
            q: Dense::load(att.pp("q_proj"), d.hidden, q_width, bias, precision)?,
            k: Dense::load(att.pp("k_proj"), d.hidden, kv_width, bias, precision)?,
            v: Dense::load(att.pp("v_proj"), d.hidden, kv_width, bias, precision)?,
            o: Dense::load(att.pp("o_proj"), q_width, d.hidden, bias, precision)?,
            q_norm: RmsNorm::load(att.pp("q_norm"), d.heads.dim, eps)?,
            k_norm: RmsNorm::load(att.pp("k_norm"), d.heads.dim, eps)?,
            post_norm: RmsNorm::load(vb.pp("post_attention_layernorm"), d.hidden, eps)?,
            gate_up: Dense::new(
                Linear::new(Tensor::cat(&[gate.weight(), up.weight()], 0)?, None),
                precision,
            )?,
            down: Dense::load(mlp.pp("down_proj"), d.inner, d.hidden, false, precision)?,
        })
    }

    /// `x`: packed rows `[Σ lengths, hidden]`; `mask`: additive
    /// `[b, 1, t, t]` (causal and padding).
    fn forward(
        &self,
        x: &Tensor,
        d: &Dims,
        rope: &(Tensor, Tensor),
        mask: &Tensor,
        rows: &Rows,
    ) -> Result<Tensor> {
        let h = self.input_norm.forward(x)?;
        let heads = &d.heads;
        let q = heads.split(
            &self.q.forward(&h)?,
            heads.heads,
            Some(&self.q_norm),
            rope,
            rows,
        )?;
        let k = heads.split(
            &self.k.forward(&h)?,
            heads.kv_heads,
            Some(&self.k_norm),
            rope,
            rows,
        )?;
        let v = heads.split_plain(&self.v.forward(&h)?, heads.kv_heads, rows)?;
        let scale = 1.0 / (heads.dim as f64).sqrt();
        let ctx = heads.attend(&q, &k, &v, mask, scale, rows)?;
        let x = (x + self.o.forward(&ctx)?)?;
        let gate_up = self.gate_up.forward(&self.post_norm.forward(&x)?)?;
        let inner = padded::gated(&gate_up, GateActivation::Silu, true)?;
        x + self.down.forward(&inner)?
    }
}

struct Qwen3 {
    words: Embedding,
    layers: Vec<Layer>,
    norm: RmsNorm,
    dims: Dims,
    rope: Rope,
    max_tokens: usize,
}

impl Qwen3 {
    fn load(vb: VarBuilder, c: &Qwen3Config, theta: f64, precision: Precision) -> Result<Qwen3> {
        let vb = if vb.contains_tensor("embed_tokens.weight") {
            vb
        } else {
            vb.pp("model")
        };
        let heads = c.num_attention_heads;
        let dims = Dims {
            hidden: c.hidden_size,
            heads: Heads {
                heads,
                kv_heads: c.num_key_value_heads.unwrap_or(heads),
                dim: c.head_dim.unwrap_or(c.hidden_size / heads),
            },
            inner: c.intermediate_size,
        };
        let words = Embedding::new(
            vb.get((c.vocab_size, c.hidden_size), "embed_tokens.weight")?,
            c.hidden_size,
        );
        let layers = (0..c.num_hidden_layers)
            .map(|i| {
                Layer::load(
                    vb.pp(format!("layers.{i}")),
                    &dims,
                    c.rms_norm_eps,
                    c.attention_bias,
                    precision,
                )
            })
            .collect::<Result<Vec<_>>>()?;
        let norm = RmsNorm::load(vb.pp("norm"), c.hidden_size, c.rms_norm_eps)?;
        let rope = Rope::new(theta, dims.heads.dim);
        Ok(Qwen3 {
            words,
            layers,
            norm,
            dims,
            rope,
            max_tokens: c.max_position_embeddings,
        })
    }
}

impl PaddedEncoder for Qwen3 {
    /// The rotary tables and the causal mask.
    type Batch = ((Tensor, Tensor), Tensor);

    const NAME: &'static str = "Qwen3";

    fn hidden(&self) -> usize {
        self.dims.hidden
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
    ) -> Result<(Tensor, Self::Batch)> {
        let (b, t) = ids.dims2()?;
        let device = ids.device();
        let x = self.words.forward(ids)?;
        // Causal, and no key past a text's end.
        let mut mask = vec![0f32; b * t * t];
        for (row, &len) in lengths.iter().enumerate() {
            for i in 0..t {
                for j in 0..t {
                    // A text's token sees those up to itself; a padding
                    // row, the text's tokens.
                    let seen = if i < len {
                        j <= i
                    } else {
                        padded::visible(j, len)
                    };
                    if !seen {
                        mask[(row * t + i) * t + j] = padded::MASKED;
                    }
                }
            }
        }
        let mask = Tensor::from_vec(mask, (b, 1, t, t), device)?.to_dtype(x.dtype())?;
        Ok((x, (self.rope.tables(t, device)?, mask)))
    }

    fn layer(
        &self,
        index: usize,
        x: &Tensor,
        (rope, mask): &Self::Batch,
        rows: &Rows,
    ) -> Result<Tensor> {
        self.layers[index].forward(x, &self.dims, rope, mask, rows)
    }

    fn tap(&self, x: &Tensor) -> Result<Tensor> {
        self.norm.forward(x)
    }
}

/// The `qwen3` family's loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    let c: Qwen3Config = serde_json::from_str(config).map_err(|e| format!("config.json: {e}"))?;
    let theta = c.check()?;
    Ok(Box::new(Padded(
        Qwen3::load(weights, &c, theta, precision).map_err(|e| e.to_string())?,
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Attention variants and position settings the body does not run are
    /// refused by the key's name.
    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let base = r#""vocab_size": 50, "hidden_size": 32, "intermediate_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2"#;
        for (extra, key) in [
            (r#""use_sliding_window": true"#, "use_sliding_window"),
            (
                r#""layer_types": ["full_attention", "sliding_attention"]"#,
                "layer_types 'sliding_attention'",
            ),
            (
                r#""rope_scaling": {"rope_type": "yarn", "factor": 4.0}"#,
                "rope_scaling",
            ),
            (
                r#""rope_parameters": {"rope_type": "linear", "factor": 2.0}"#,
                "rope_type 'linear'",
            ),
            (r#""hidden_act": "gelu""#, "hidden_act 'gelu'"),
            (r#""num_key_value_heads": 3"#, "num_key_value_heads"),
        ] {
            let text = format!("{{{base}, {extra}}}").replace(
                r#""num_key_value_heads": 2, "num_key_value_heads": 3"#,
                r#""num_key_value_heads": 3"#,
            );
            let c: Qwen3Config = serde_json::from_str(&text).unwrap();
            let err = c.check().expect_err(extra);
            assert!(err.contains(key), "{extra}: {err}");
        }
    }
}
