//! Gemma 3 text (`model_type` `gemma3_text`: EmbeddingGemma-300m, with
//! `use_bidirectional_attention`). Like [`super::qwen3`] a decoder body
//! (grouped-query attention with per-head q/k RMSNorm, rotary positions, a
//! gated feed-forward, a final norm), with Gemma's own choices: embeddings
//! scaled by √hidden, RMSNorm scaling by (1 + weight), a norm after
//! attention and around the feed-forward as well as before, a tanh-GELU
//! gate, the scale 1/√query_pre_attn_scalar, and layers of two kinds:
//! global (every `sliding_window_pattern`-th, rotary base 1,000,000) and
//! sliding (rotary base 10,000), seeing only tokens within the window.
//! EmbeddingGemma attends both ways: a sliding layer sees tokens within
//! `sliding_window / 2` on either side, a global one all of them.
//! Causal Gemma 3 is refused: refscore scores with encoders.
//!
//! Every tap is `norm(h_N)`, as bert_score computes layer N. Runs as
//! Candle operations on padded batches; the linear maps in the run's
//! precision ([`super::padded::Dense`]).

use candle_core::{Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::Deserialize;
use serde_json::Value;

use super::padded::{
    self, linear, Dense, GateActivation, Padded, PaddedEncoder, RmsNorm, Rope, Rows, Span,
    SpanBatch,
};
use super::EncoderModel;
use crate::precision::Precision;

type Result<T> = candle_core::Result<T>;

/// The `config.json` keys of a `Gemma3TextConfig` that change the
/// arithmetic.
#[derive(Deserialize)]
struct Gemma3Config {
    vocab_size: usize,
    hidden_size: usize,
    intermediate_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    num_key_value_heads: Option<usize>,
    head_dim: Option<usize>,
    #[serde(default = "tanh_gelu")]
    hidden_activation: String,
    #[serde(default = "positions")]
    max_position_embeddings: usize,
    #[serde(default = "eps")]
    rms_norm_eps: f64,
    query_pre_attn_scalar: Option<f64>,
    #[serde(default = "window")]
    sliding_window: usize,
    sliding_window_pattern: Option<usize>,
    layer_types: Option<Vec<String>>,
    rope_parameters: Option<Value>,
    rope_theta: Option<f64>,
    rope_local_base_freq: Option<f64>,
    rope_scaling: Option<Value>,
    #[serde(default)]
    attention_bias: bool,
    attn_logit_softcapping: Option<f64>,
    #[serde(default)]
    use_bidirectional_attention: bool,
}

fn tanh_gelu() -> String {
    "gelu_pytorch_tanh".into()
}
fn positions() -> usize {
    131_072
}
fn eps() -> f64 {
    1e-6
}
fn window() -> usize {
    4096
}

impl Gemma3Config {
    fn refuse(what: &str) -> String {
        format!("config.json: {what} is not supported")
    }

    fn check(&self) -> std::result::Result<(), String> {
        if !self.use_bidirectional_attention {
            return Err(Self::refuse(
                "use_bidirectional_attention false (a causal Gemma 3; EmbeddingGemma sets it true)",
            ));
        }
        if self.attn_logit_softcapping.is_some() {
            return Err(Self::refuse("attn_logit_softcapping"));
        }
        if self.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
            return Err(Self::refuse("rope_scaling"));
        }
        if !matches!(
            self.hidden_activation.as_str(),
            "gelu_pytorch_tanh" | "gelu"
        ) {
            return Err(Self::refuse(&format!(
                "hidden_activation '{}'",
                self.hidden_activation
            )));
        }
        let heads = self.num_attention_heads;
        let kv = self.num_key_value_heads.unwrap_or(heads);
        if heads == 0 || kv == 0 || !heads.is_multiple_of(kv) {
            return Err(Self::refuse(
                "num_attention_heads not a multiple of num_key_value_heads",
            ));
        }
        Ok(())
    }

    fn kinds(&self) -> std::result::Result<Vec<Span>, String> {
        match &self.layer_types {
            Some(types) if types.len() == self.num_hidden_layers => types
                .iter()
                .map(|t| match t.as_str() {
                    "full_attention" => Ok(Span::Global),
                    "sliding_attention" => Ok(Span::Window),
                    other => Err(Self::refuse(&format!("layer_types '{other}'"))),
                })
                .collect(),
            Some(_) => Err("config.json: layer_types must name every layer".into()),
            None => {
                let every = self.sliding_window_pattern.unwrap_or(6).max(1);
                Ok((0..self.num_hidden_layers)
                    .map(|i| {
                        if (i + 1) % every == 0 {
                            Span::Global
                        } else {
                            Span::Window
                        }
                    })
                    .collect())
            }
        }
    }

    /// The rotary bases of global and sliding layers.
    fn thetas(&self) -> std::result::Result<(f64, f64), String> {
        let of = |kind: &str, original: Option<f64>, default: f64| {
            let p = self.rope_parameters.as_ref().and_then(|p| p.get(kind));
            if let Some(t) = p
                .and_then(|p| p.get("rope_type"))
                .and_then(Value::as_str)
                .filter(|t| *t != "default")
            {
                return Err(Self::refuse(&format!(
                    "rope_parameters.{kind}.rope_type '{t}'"
                )));
            }
            Ok(p.and_then(|p| p.get("rope_theta"))
                .and_then(Value::as_f64)
                .or(original)
                .unwrap_or(default))
        };
        Ok((
            of("full_attention", self.rope_theta, 1_000_000.0)?,
            of("sliding_attention", self.rope_local_base_freq, 10_000.0)?,
        ))
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
    post_attn_norm: RmsNorm,
    pre_ff_norm: RmsNorm,
    post_ff_norm: RmsNorm,
    /// Gate then up, stacked.
    gate_up: Dense,
    down: Dense,
    span: Span,
}

struct Gemma3 {
    words: Embedding,
    embed_scale: f64,
    layers: Vec<Layer>,
    norm: RmsNorm,
    global: Rope,
    sliding: Rope,
    shape: padded::Heads,
    hidden: usize,
    scale: f64,
    exact_gelu: bool,
    /// Tokens a sliding layer sees on each side.
    reach: usize,
    max_tokens: usize,
}

/// Gemma's RMSNorm scales by (1 + weight).
fn gemma_norm(vb: VarBuilder, size: usize, eps: f64) -> Result<RmsNorm> {
    let weight = (vb.get(size, "weight")? + 1.0)?;
    Ok(RmsNorm::new(weight, eps))
}

impl Gemma3 {
    fn load(
        vb: VarBuilder,
        c: &Gemma3Config,
        precision: Precision,
    ) -> std::result::Result<Gemma3, String> {
        c.check()?;
        let kinds = c.kinds()?;
        let (global, sliding) = c.thetas()?;
        let heads = c.num_attention_heads;
        let shape = padded::Heads {
            heads,
            kv_heads: c.num_key_value_heads.unwrap_or(heads),
            dim: c.head_dim.unwrap_or(c.hidden_size / heads),
        };
        let build = || -> Result<Gemma3> {
            let vb = if vb.contains_tensor("embed_tokens.weight") {
                vb.clone()
            } else {
                vb.pp("model")
            };
            let (h, eps) = (c.hidden_size, c.rms_norm_eps);
            let (q_width, kv_width) = (shape.heads * shape.dim, shape.kv_heads * shape.dim);
            let dense = |vb, inp, out, bias| Dense::load(vb, inp, out, bias, precision);
            let layers = kinds
                .iter()
                .enumerate()
                .map(|(i, &span)| {
                    let l = vb.pp(format!("layers.{i}"));
                    let att = l.pp("self_attn");
                    let mlp = l.pp("mlp");
                    let gate = linear(mlp.pp("gate_proj"), h, c.intermediate_size, false)?;
                    let up = linear(mlp.pp("up_proj"), h, c.intermediate_size, false)?;
                    Ok(Layer {
                        input_norm: gemma_norm(l.pp("input_layernorm"), h, eps)?,
                        q: dense(att.pp("q_proj"), h, q_width, c.attention_bias)?,
                        k: dense(att.pp("k_proj"), h, kv_width, c.attention_bias)?,
                        v: dense(att.pp("v_proj"), h, kv_width, c.attention_bias)?,
                        o: dense(att.pp("o_proj"), q_width, h, c.attention_bias)?,
                        q_norm: gemma_norm(att.pp("q_norm"), shape.dim, eps)?,
                        k_norm: gemma_norm(att.pp("k_norm"), shape.dim, eps)?,
                        post_attn_norm: gemma_norm(l.pp("post_attention_layernorm"), h, eps)?,
                        pre_ff_norm: gemma_norm(l.pp("pre_feedforward_layernorm"), h, eps)?,
                        post_ff_norm: gemma_norm(l.pp("post_feedforward_layernorm"), h, eps)?,
                        gate_up: Dense::new(
                            Linear::new(Tensor::cat(&[gate.weight(), up.weight()], 0)?, None),
                            precision,
                        )?,
                        down: dense(mlp.pp("down_proj"), c.intermediate_size, h, false)?,
                        span,
                    })
                })
                .collect::<Result<Vec<_>>>()?;
            Ok(Gemma3 {
                words: Embedding::new(vb.get((c.vocab_size, h), "embed_tokens.weight")?, h),
                // transformers keeps √hidden as an f32 tensor.
                embed_scale: f64::from((h as f32).sqrt()),
                layers,
                norm: gemma_norm(vb.pp("norm"), h, eps)?,
                global: Rope::new(global, shape.dim),
                sliding: Rope::new(sliding, shape.dim),
                shape,
                hidden: h,
                scale: 1.0 / c.query_pre_attn_scalar.unwrap_or(shape.dim as f64).sqrt(),
                exact_gelu: c.hidden_activation == "gelu",
                // transformers' exclusive bound (sliding_window / 2 + 1).
                reach: c.sliding_window / 2,
                max_tokens: c.max_position_embeddings,
            })
        };
        build().map_err(|e| e.to_string())
    }
}

impl Layer {
    fn forward(
        &self,
        x: &Tensor,
        m: &Gemma3,
        rope: &(Tensor, Tensor),
        mask: &Tensor,
        rows: &Rows,
    ) -> Result<Tensor> {
        let h = self.input_norm.forward(x)?;
        let q = m.shape.split(
            &self.q.forward(&h)?,
            m.shape.heads,
            Some(&self.q_norm),
            rope,
            rows,
        )?;
        let k = m.shape.split(
            &self.k.forward(&h)?,
            m.shape.kv_heads,
            Some(&self.k_norm),
            rope,
            rows,
        )?;
        let v = m
            .shape
            .split_plain(&self.v.forward(&h)?, m.shape.kv_heads, rows)?;
        let ctx = m.shape.attend(&q, &k, &v, mask, m.scale, rows)?;
        let x = (x + self.post_attn_norm.forward(&self.o.forward(&ctx)?)?)?;
        let gate_up = self.gate_up.forward(&self.pre_ff_norm.forward(&x)?)?;
        let act = if m.exact_gelu {
            GateActivation::GeluErf
        } else {
            GateActivation::GeluTanh
        };
        let inner = padded::gated(&gate_up, act, true)?;
        x + self.post_ff_norm.forward(&self.down.forward(&inner)?)?
    }
}

impl PaddedEncoder for Gemma3 {
    type Batch = SpanBatch;

    const NAME: &'static str = "Gemma 3";

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
    ) -> Result<(Tensor, SpanBatch)> {
        let (_, t) = ids.dims2()?;
        let device = ids.device();
        let x = (self.words.forward(ids)? * self.embed_scale)?;
        let batch = SpanBatch::new(&self.global, &self.sliding, lengths, t, self.reach, device)?;
        Ok((x, batch))
    }

    fn layer(&self, index: usize, x: &Tensor, batch: &SpanBatch, rows: &Rows) -> Result<Tensor> {
        let layer = &self.layers[index];
        let (rope, mask) = batch.of(layer.span);
        layer.forward(x, self, rope, mask, rows)
    }

    fn tap(&self, x: &Tensor) -> Result<Tensor> {
        self.norm.forward(x)
    }
}

/// The `gemma3_text` family's loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    let c: Gemma3Config = serde_json::from_str(config).map_err(|e| format!("config.json: {e}"))?;
    Ok(Box::new(Padded(Gemma3::load(weights, &c, precision)?)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(extra: &str) -> Gemma3Config {
        let text = format!(
            r#"{{"vocab_size": 50, "hidden_size": 32, "intermediate_size": 64,
                "num_hidden_layers": 6, "num_attention_heads": 4, "num_key_value_heads": 2
                {extra}}}"#
        );
        serde_json::from_str(&text).unwrap()
    }

    /// Without `layer_types`, every sixth layer is global (the old
    /// `sliding_window_pattern`).
    #[test]
    fn the_layer_pattern_defaults_as_transformers_does() {
        let kinds = config("").kinds().unwrap();
        assert_eq!(
            kinds.iter().filter(|k| **k == Span::Global).count(),
            1,
            "one global layer in six"
        );
        assert!(kinds[5] == Span::Global);
    }

    /// Settings the body does not run are refused by the key's name.
    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let on = r#", "use_bidirectional_attention": true"#;
        assert!(config("")
            .check()
            .unwrap_err()
            .contains("use_bidirectional_attention"));
        for (extra, key) in [
            (
                r#", "attn_logit_softcapping": 50.0"#,
                "attn_logit_softcapping",
            ),
            (
                r#", "rope_scaling": {"rope_type": "linear", "factor": 8.0}"#,
                "rope_scaling",
            ),
            (
                r#", "hidden_activation": "silu""#,
                "hidden_activation 'silu'",
            ),
        ] {
            let err = config(&format!("{on}{extra}")).check().unwrap_err();
            assert!(err.contains(key), "{extra}: {err}");
        }
        let c = config(&format!(
            r#"{on}, "rope_parameters": {{"full_attention": {{"rope_type": "yarn"}}}}"#
        ));
        assert!(c.thetas().unwrap_err().contains("rope_type 'yarn'"));
    }
}
