//! The post-norm encoders with rotary positions and a gated feed-forward:
//! GTE (`model_type` `new` as gte-*-v1.5 and gte-multilingual-base ship it,
//! `gte` as transformers names it) and NomicBERT (`nomic_bert`:
//! nomic-embed-text v1/v1.5, arctic-embed-m-long). One body, four weight
//! and config layouts: the checkpoints users download keep Q/K/V in one
//! matrix (`qkv_proj`, `Wqkv`) and the gate with the up projection
//! (`up_gate_proj`) or apart (`fc11`/`fc12`); transformers' ports split
//! them (`self_attn.q_proj`, `mlp.gate_proj`). Rotary positions are
//! applied to queries and keys (half rotation, no interleaving), no
//! absolute position embeddings; under `new`'s config, with new-impl's fixed
//! NTK scaling where `rope_scaling` asks for it (gte-*-en-v1.5).
//!
//! The stream between layers is the packed rows; on the CPU attention runs
//! on the fused kernel straight off them, elsewhere as Candle operations on
//! a padded batch (rotary by Candle's fused `rope` kernel either way); the
//! linear maps in the run's precision ([`super::padded::Dense`]).

use candle_core::{Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::Deserialize;
use serde_json::Value;

use super::accelerator::spread_mask;
use super::padded::{
    self, linear, Dense, GateActivation, Heads, LayerNorm as Norm, PackedRope, Padded,
    PaddedEncoder, Rope, Rows, TokenTypes,
};
use super::EncoderModel;
use crate::precision::Precision;

type Result<T> = candle_core::Result<T>;
type Loaded = std::result::Result<Box<dyn EncoderModel>, String>;

/// The feed-forward's activation (applied to the gate) a config names.
fn activation(key: &str, name: &str) -> std::result::Result<GateActivation, String> {
    Ok(match name {
        "gelu" => GateActivation::GeluErf,
        "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => GateActivation::GeluTanh,
        "silu" | "swish" | "swiglu" => GateActivation::Silu,
        other => return Err(format!("config.json: {key} '{other}' is not supported")),
    })
}

/// Weight names of one layout.
struct Names {
    /// The encoder's prefix in masked-LM and classification checkpoints
    /// (`new`, `gte`…); the loader looks for every layout of a family
    /// under each of its layouts' prefixes.
    prefix: &'static str,
    embed_norm: &'static str,
    layers: &'static str,
    /// Fused Q/K/V, or (q, k, v) apart.
    qkv: Qkv,
    out: &'static str,
    attn_norm: &'static str,
    /// Fused up+gate (up first), or (up, gate) apart.
    mlp: Mlp,
    down: &'static str,
    mlp_norm: &'static str,
}

enum Qkv {
    Fused(&'static str),
    Apart([&'static str; 3]),
}

enum Mlp {
    UpGate(&'static str),
    Apart(&'static str, &'static str),
}

const NATIVE_NAMES: Qkv = Qkv::Apart(["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"]);
const NATIVE_MLP: Mlp = Mlp::Apart("mlp.up_proj", "mlp.gate_proj");

/// What the body needs, whichever layout the config is in.
struct Shape {
    vocab: usize,
    hidden: usize,
    layers: usize,
    heads: usize,
    inner: usize,
    types: usize,
    positions: usize,
    eps: f64,
    theta: f64,
    /// new-impl's fixed NTK factor, where `rope_scaling` asks for it.
    ntk: Option<f64>,
    act: GateActivation,
    /// Biases on Q/K/V and the output, and on the down projection.
    attn_bias: bool,
    down_bias: bool,
}

/// transformers' layout (`gte`, and `nomic_bert` with `hidden_size`).
#[derive(Deserialize)]
struct NativeConfig {
    vocab_size: usize,
    hidden_size: usize,
    num_hidden_layers: usize,
    num_attention_heads: usize,
    intermediate_size: usize,
    hidden_act: Option<String>,
    max_position_embeddings: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_eps: Option<f64>,
    head_dim: Option<usize>,
    rope_parameters: Option<Value>,
    rope_theta: Option<f64>,
    rope_scaling: Option<Value>,
}

/// The rotary base of a transformers config: `rope_parameters` (or the
/// older top-level `rope_theta`), default rope only.
fn native_theta(c: &NativeConfig, default: f64) -> std::result::Result<f64, String> {
    if c.rope_scaling.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(
            "config.json: rope_scaling is not supported (plain rotary positions only)".into(),
        );
    }
    let Some(p) = c.rope_parameters.as_ref().filter(|v| !v.is_null()) else {
        return Ok(c.rope_theta.unwrap_or(default));
    };
    match p
        .get("rope_type")
        .and_then(Value::as_str)
        .unwrap_or("default")
    {
        "default" => {}
        other => {
            return Err(format!(
                "config.json: rope_parameters.rope_type '{other}' is not supported (default only)"
            ))
        }
    }
    Ok(p.get("rope_theta")
        .and_then(Value::as_f64)
        .or(c.rope_theta)
        .unwrap_or(default))
}

fn parse<T: for<'de> Deserialize<'de>>(text: &str) -> std::result::Result<T, String> {
    serde_json::from_str(text).map_err(|e| format!("config.json: {e}"))
}

impl NativeConfig {
    fn shape(
        &self,
        act: &str,
        default_theta: f64,
        biases: bool,
    ) -> std::result::Result<Shape, String> {
        if let Some(d) = self.head_dim {
            if d * self.num_attention_heads != self.hidden_size {
                return Err("config.json: head_dim other than hidden_size / num_attention_heads is not supported".into());
            }
        }
        let act_name = self.hidden_act.as_deref().unwrap_or(act);
        Ok(Shape {
            vocab: self.vocab_size,
            hidden: self.hidden_size,
            layers: self.num_hidden_layers,
            heads: self.num_attention_heads,
            inner: self.intermediate_size,
            types: self.type_vocab_size.unwrap_or(0),
            positions: self.max_position_embeddings.unwrap_or(512),
            eps: self.layer_norm_eps.unwrap_or(1e-12),
            theta: native_theta(self, default_theta)?,
            ntk: None,
            act: activation("hidden_act", act_name)?,
            attn_bias: biases,
            down_bias: biases,
        })
    }
}

/// `new`'s own config (Alibaba-NLP/new-impl).
#[derive(Deserialize)]
struct NewConfig {
    #[serde(flatten)]
    native: NativeConfig,
    position_embedding_type: Option<String>,
    layer_norm_type: Option<String>,
    #[serde(default)]
    logn_attention_scale: bool,
    #[serde(default)]
    logn_attention_clip1: bool,
}

/// nomic-ai's own config (contrastors' NomicBertConfig, GPT-2 key names).
#[derive(Deserialize)]
struct NomicConfig {
    vocab_size: usize,
    n_embd: usize,
    n_layer: usize,
    n_head: usize,
    n_inner: Option<usize>,
    n_positions: Option<usize>,
    type_vocab_size: Option<usize>,
    layer_norm_epsilon: Option<f64>,
    activation_function: Option<String>,
    rotary_emb_base: Option<f64>,
    rotary_emb_fraction: Option<f64>,
    #[serde(default)]
    rotary_emb_interleaved: bool,
    rotary_scaling_factor: Option<Value>,
    #[serde(default)]
    prenorm: bool,
    #[serde(default)]
    qkv_proj_bias: bool,
    #[serde(default)]
    mlp_fc1_bias: bool,
    #[serde(default)]
    mlp_fc2_bias: bool,
}

impl NomicConfig {
    fn shape(&self) -> std::result::Result<Shape, String> {
        let refuse = |key: &str| Err(format!("config.json: {key} is not supported"));
        if self.rotary_emb_fraction.is_some_and(|f| f != 1.0) {
            return refuse("rotary_emb_fraction other than 1.0");
        }
        if self.rotary_emb_interleaved {
            return refuse("rotary_emb_interleaved true");
        }
        if self
            .rotary_scaling_factor
            .as_ref()
            .is_some_and(|v| !v.is_null())
        {
            return refuse("rotary_scaling_factor");
        }
        if self.prenorm {
            return refuse("prenorm true");
        }
        if self.mlp_fc1_bias {
            return refuse("mlp_fc1_bias true");
        }
        if self.qkv_proj_bias != self.mlp_fc2_bias {
            return refuse("qkv_proj_bias unlike mlp_fc2_bias");
        }
        if !self.n_embd.is_multiple_of(self.n_head.max(1)) {
            return refuse("n_embd not a multiple of n_head");
        }
        Ok(Shape {
            vocab: self.vocab_size,
            hidden: self.n_embd,
            layers: self.n_layer,
            heads: self.n_head,
            inner: self.n_inner.unwrap_or(4 * self.n_embd),
            types: self.type_vocab_size.unwrap_or(2),
            positions: self.n_positions.unwrap_or(2048),
            eps: self.layer_norm_epsilon.unwrap_or(1e-12),
            theta: self.rotary_emb_base.unwrap_or(10_000.0),
            ntk: None,
            act: activation(
                "activation_function",
                self.activation_function.as_deref().unwrap_or("swiglu"),
            )?,
            attn_bias: self.qkv_proj_bias,
            down_bias: self.mlp_fc2_bias,
        })
    }
}

/// Several linear maps of one input as one (rows stacked).
fn stacked(parts: &[Linear]) -> Result<Linear> {
    let w = Tensor::cat(
        &parts.iter().map(|l| l.weight().clone()).collect::<Vec<_>>(),
        0,
    )?;
    let b = if parts.iter().all(|l| l.bias().is_some()) {
        let biases: Vec<Tensor> = parts
            .iter()
            .map(|l| l.bias().expect("checked").clone())
            .collect();
        Some(Tensor::cat(&biases, 0)?)
    } else {
        None
    };
    Ok(Linear::new(w, b))
}

struct Layer {
    /// Q, K, V stacked; the 1/√d scale folded into Q.
    qkv: Dense,
    out: Dense,
    attn_norm: Norm,
    /// Up then gate, stacked.
    up_gate: Dense,
    down: Dense,
    mlp_norm: Norm,
}

impl Layer {
    fn load(vb: VarBuilder, s: &Shape, n: &Names, precision: Precision) -> Result<Layer> {
        let h = s.hidden;
        let qkv = match n.qkv {
            Qkv::Fused(name) => linear(vb.pp(name), h, 3 * h, s.attn_bias)?,
            Qkv::Apart(names) => stacked(
                &names
                    .iter()
                    .map(|name| linear(vb.pp(name), h, h, s.attn_bias))
                    .collect::<Result<Vec<_>>>()?,
            )?,
        };
        // Fold the attention scale into the query rows.
        let scale = 1.0 / ((h / s.heads) as f64).sqrt();
        let rows = Tensor::cat(
            &[
                (qkv.weight().narrow(0, 0, h)? * scale)?,
                qkv.weight().narrow(0, h, 2 * h)?,
            ],
            0,
        )?;
        let bias = match qkv.bias() {
            Some(b) => Some(Tensor::cat(
                &[(b.narrow(0, 0, h)? * scale)?, b.narrow(0, h, 2 * h)?],
                0,
            )?),
            None => None,
        };
        let up_gate = match n.mlp {
            Mlp::UpGate(name) => linear(vb.pp(name), h, 2 * s.inner, false)?,
            Mlp::Apart(up, gate) => stacked(&[
                linear(vb.pp(up), h, s.inner, false)?,
                linear(vb.pp(gate), h, s.inner, false)?,
            ])?,
        };
        Ok(Layer {
            qkv: Dense::new(Linear::new(rows, bias), precision)?,
            out: Dense::load(vb.pp(n.out), h, h, s.attn_bias, precision)?,
            attn_norm: Norm::load(vb.pp(n.attn_norm), h, s.eps)?,
            up_gate: Dense::new(up_gate, precision)?,
            down: Dense::load(vb.pp(n.down), s.inner, h, s.down_bias, precision)?,
            mlp_norm: Norm::load(vb.pp(n.mlp_norm), h, s.eps)?,
        })
    }

    fn forward(&self, x: &Tensor, s: &Shape, batch: &Batch, rows: &Rows) -> Result<Tensor> {
        let heads = Heads {
            heads: s.heads,
            kv_heads: s.heads,
            dim: s.hidden / s.heads,
        };
        let qkv = self.qkv.forward(x)?;
        // The 1/√d scale is in the query rows already.
        let ctx = match batch {
            Batch::Fused { lengths, rope } => heads.attend_packed(&qkv, rope, lengths, None)?,
            Batch::Padded { rope, mask } => {
                let (q, k, v) = heads.split_fused(&qkv, rope, rows)?;
                heads.attend(&q, &k, &v, mask, 1.0, rows)?
            }
        };
        let x = self.attn_norm.forward(&(x + self.out.forward(&ctx)?)?)?;
        let up_gate = self.up_gate.forward(&x)?;
        // Up first, then the gate.
        let inner = padded::gated(&up_gate, s.act, false)?;
        self.mlp_norm.forward(&(x + self.down.forward(&inner)?)?)
    }
}

/// What a batch's layers share: on the CPU, the rotary tables by packed
/// row for the fused attention kernel; elsewhere, a padded batch's tables
/// and key mask for Candle's operations.
enum Batch {
    Fused {
        lengths: Vec<usize>,
        rope: PackedRope,
    },
    Padded {
        rope: (Tensor, Tensor),
        mask: Tensor,
    },
}

struct RotaryEncoder {
    words: Embedding,
    token_type: Option<TokenTypes>,
    norm: Norm,
    layers: Vec<Layer>,
    rope: Rope,
    shape: Shape,
}

impl RotaryEncoder {
    /// Loads the weights under whichever of `layouts` the checkpoint uses
    /// (found by its first layer's output projection).
    fn load(
        vb: VarBuilder,
        s: Shape,
        layouts: &[Names],
        precision: Precision,
    ) -> Result<RotaryEncoder> {
        // The encoder at the top level, or under any of the family's
        // prefixes: transformers' *ForSequenceClassification saves the
        // shipped layout under its own prefix (`gte.encoder.layer…`).
        let roots: Vec<VarBuilder> = if vb.contains_tensor("embeddings.word_embeddings.weight") {
            vec![vb.clone()]
        } else {
            layouts.iter().map(|n| vb.pp(n.prefix)).collect()
        };
        let found = layouts.iter().find_map(|n| {
            let weight = format!("{}.0.{}.weight", n.layers, n.out);
            roots
                .iter()
                .find(|root| root.contains_tensor(&weight))
                .map(|root| (root.clone(), n))
        });
        let Some((vb, n)) = found else {
            let expected: Vec<String> = layouts
                .iter()
                .map(|n| format!("{}.0.{}.weight", n.layers, n.out))
                .collect();
            candle_core::bail!("the weights have none of {}", expected.join(", "))
        };
        let h = s.hidden;
        let emb = vb.pp("embeddings");
        let words = Embedding::new(emb.get((s.vocab, h), "word_embeddings.weight")?, h);
        let token_type = TokenTypes::load(&emb, s.types, h)?;
        let norm = Norm::load(vb.pp(n.embed_norm), h, s.eps)?;
        let layers = (0..s.layers)
            .map(|i| Layer::load(vb.pp(format!("{}.{i}", n.layers)), &s, n, precision))
            .collect::<Result<Vec<_>>>()?;
        let rope = match s.ntk {
            Some(factor) => Rope::ntk(s.theta, h / s.heads, factor),
            None => Rope::new(s.theta, h / s.heads),
        };
        Ok(RotaryEncoder {
            words,
            token_type,
            norm,
            layers,
            rope,
            shape: s,
        })
    }
}

impl PaddedEncoder for RotaryEncoder {
    type Batch = Batch;

    const NAME: &'static str = "This family";

    fn hidden(&self) -> usize {
        self.shape.hidden
    }

    fn layers(&self) -> usize {
        self.layers.len()
    }

    fn max_tokens(&self) -> usize {
        self.shape.positions
    }

    fn token_types(&self) -> usize {
        self.shape.types
    }

    fn embed(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        types: Option<&Tensor>,
    ) -> Result<(Tensor, Self::Batch)> {
        let (b, t) = ids.dims2()?;
        let device = ids.device();
        let mut x = self.words.forward(ids)?;
        if let Some(token_type) = &self.token_type {
            x = token_type.add(&x, types)?;
        }
        let x = self.norm.forward(&x)?;
        if device.is_cpu() {
            // The scale is in the query rows: the tables rotate only.
            let rope = PackedRope::new(&self.rope, lengths, 1.0, device)?;
            let lengths = lengths.to_vec();
            return Ok((x, Batch::Fused { lengths, rope }));
        }
        let mask = padded::key_mask(lengths, t, device)?.to_dtype(x.dtype())?;
        let mask = spread_mask(mask, b, self.shape.heads, t)?;
        let rope = self.rope.tables(t, device)?;
        Ok((x, Batch::Padded { rope, mask }))
    }

    fn layer(&self, index: usize, x: &Tensor, batch: &Batch, rows: &Rows) -> Result<Tensor> {
        self.layers[index].forward(x, &self.shape, batch, rows)
    }
}

fn boxed(vb: VarBuilder, s: Shape, layouts: &[Names], precision: Precision) -> Loaded {
    Ok(Box::new(Padded(
        RotaryEncoder::load(vb, s, layouts, precision).map_err(|e| e.to_string())?,
    )))
}

/// GTE's weights as gte-*-v1.5 ship them (and transformers saves them).
const GTE_OWN: Names = Names {
    prefix: "new",
    embed_norm: "embeddings.LayerNorm",
    layers: "encoder.layer",
    qkv: Qkv::Fused("attention.qkv_proj"),
    out: "attention.o_proj",
    attn_norm: "attn_ln",
    mlp: Mlp::UpGate("mlp.up_gate_proj"),
    down: "mlp.down_proj",
    mlp_norm: "mlp_ln",
};

/// NomicBERT's weights as nomic-ai ship them (and transformers saves them).
const NOMIC_OWN: Names = Names {
    prefix: "bert",
    embed_norm: "emb_ln",
    layers: "encoder.layers",
    qkv: Qkv::Fused("attn.Wqkv"),
    out: "attn.out_proj",
    attn_norm: "norm1",
    mlp: Mlp::Apart("mlp.fc11", "mlp.fc12"),
    down: "mlp.fc2",
    mlp_norm: "norm2",
};

/// The names transformers' classes hold in memory (GTE and NomicBERT
/// alike), under the family's prefix.
const fn native(prefix: &'static str) -> Names {
    Names {
        prefix,
        embed_norm: "embeddings.LayerNorm",
        layers: "layers",
        qkv: NATIVE_NAMES,
        out: "self_attn.o_proj",
        attn_norm: "post_attention_layernorm",
        mlp: NATIVE_MLP,
        down: "mlp.down_proj",
        mlp_norm: "post_mlp_layernorm",
    }
}

/// The factor of new-impl's `rope_scaling` (`{"type": "ntk", "factor":
/// F}`, as gte-*-en-v1.5 ship), if any; another kind, a missing factor,
/// or the mixed form (`mixed_b`) is refused by name.
fn ntk_factor(scaling: Option<Value>) -> std::result::Result<Option<f64>, String> {
    let Some(scaling) = scaling.filter(|v| !v.is_null()) else {
        return Ok(None);
    };
    let kind = scaling
        .get("type")
        .or_else(|| scaling.get("rope_type"))
        .and_then(Value::as_str)
        .unwrap_or("");
    if kind != "ntk" {
        return Err(format!(
            "config.json: rope_scaling type '{kind}' is not supported (ntk only)"
        ));
    }
    if scaling.get("mixed_b").is_some_and(|v| !v.is_null()) {
        return Err("config.json: rope_scaling.mixed_b is not supported (fixed NTK only)".into());
    }
    match scaling.get("factor").and_then(Value::as_f64) {
        Some(factor) if factor > 0.0 => Ok(Some(factor)),
        _ => Err("config.json: rope_scaling.factor must be a positive number".into()),
    }
}

/// The `new` family's loader (gte-*-v1.5, gte-multilingual-base).
pub(super) fn load_new(config: &str, vb: VarBuilder, precision: Precision) -> Loaded {
    let mut c: NewConfig = parse(config)?;
    check_new(&c)?;
    let ntk = ntk_factor(c.native.rope_scaling.take())?;
    // new-impl's own default base.
    let mut shape = c.native.shape("gelu", 10_000.0, true)?;
    shape.ntk = ntk;
    boxed(vb, shape, &[GTE_OWN, native("gte")], precision)
}

/// Refuses the `new` config fields the body does not run, each by the name
/// of the field that is set.
fn check_new(c: &NewConfig) -> std::result::Result<(), String> {
    let refuse =
        |key: &str, value: &str| Err(format!("config.json: {key} {value} is not supported"));
    if let Some(kind) = c
        .position_embedding_type
        .as_deref()
        .filter(|k| *k != "rope")
    {
        return refuse("position_embedding_type", &format!("'{kind}'"));
    }
    if let Some(kind) = c.layer_norm_type.as_deref().filter(|k| *k != "layer_norm") {
        return refuse("layer_norm_type", &format!("'{kind}'"));
    }
    if c.logn_attention_scale {
        return refuse("logn_attention_scale", "true");
    }
    if c.logn_attention_clip1 {
        return refuse("logn_attention_clip1", "true");
    }
    Ok(())
}

/// The `gte` family's loader (transformers' port of `new`).
pub(super) fn load_gte(config: &str, vb: VarBuilder, precision: Precision) -> Loaded {
    let c: NativeConfig = parse(config)?;
    boxed(
        vb,
        c.shape("gelu", 160_000.0, true)?,
        &[GTE_OWN, native("gte")],
        precision,
    )
}

/// The `nomic_bert` family's loader: nomic-ai's own config keys
/// (`n_embd`…) or transformers' (`hidden_size`…), over either weight layout.
pub(super) fn load_nomic(config: &str, vb: VarBuilder, precision: Precision) -> Loaded {
    let own = serde_json::from_str::<Value>(config)
        .map_err(|e| format!("config.json: {e}"))?
        .get("n_embd")
        .is_some();
    let shape = if own {
        parse::<NomicConfig>(config)?.shape()?
    } else {
        parse::<NativeConfig>(config)?.shape("silu", 1_000.0, false)?
    };
    boxed(vb, shape, &[NOMIC_OWN, native("nomic_bert")], precision)
}

#[cfg(test)]
mod tests {
    use super::*;

    const SIZES: &str = r#""vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 4, "intermediate_size": 64"#;

    /// Position and scaling settings the body does not run are refused by
    /// the key's name, in each config layout.
    #[test]
    fn unsupported_fields_are_refused_by_name() {
        let native = |extra: &str| {
            parse::<NativeConfig>(&format!("{{{SIZES}, {extra}}}"))
                .and_then(|c| c.shape("gelu", 1e4, true).map(|_| ()))
        };
        for (extra, key) in [
            (
                r#""rope_scaling": {"type": "ntk", "factor": 2.0}"#,
                "rope_scaling",
            ),
            (
                r#""rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4}"#,
                "rope_type 'yarn'",
            ),
            (r#""head_dim": 16"#, "head_dim"),
            (r#""hidden_act": "relu""#, "hidden_act 'relu'"),
        ] {
            let err = native(extra).expect_err(extra);
            assert!(err.contains(key), "{extra}: {err}");
        }
        let own = |extra: &str| {
            let text = format!(
                r#"{{"vocab_size": 50, "n_embd": 32, "n_layer": 2, "n_head": 4, {extra}}}"#
            );
            parse::<NomicConfig>(&text).and_then(|c| c.shape().map(|_| ()))
        };
        for (extra, key) in [
            (r#""rotary_emb_fraction": 0.5"#, "rotary_emb_fraction"),
            (
                r#""rotary_emb_interleaved": true"#,
                "rotary_emb_interleaved",
            ),
            (r#""rotary_scaling_factor": 2.0"#, "rotary_scaling_factor"),
            (r#""prenorm": true"#, "prenorm"),
            (r#""mlp_fc1_bias": true"#, "mlp_fc1_bias"),
        ] {
            let err = own(extra).expect_err(extra);
            assert!(err.contains(key), "{extra}: {err}");
        }
        assert!(own(r#""rotary_emb_base": 1000"#).is_ok());
    }

    /// new-impl's attention options are refused by the name of the one set.
    #[test]
    fn new_impl_options_are_refused_by_their_own_name() {
        let check =
            |extra: &str| check_new(&parse::<NewConfig>(&format!("{{{SIZES}, {extra}}}")).unwrap());
        assert_eq!(check(r#""logn_attention_scale": false"#), Ok(()));
        for (extra, key) in [
            (
                r#""logn_attention_clip1": true"#,
                "logn_attention_clip1 true",
            ),
            (
                r#""logn_attention_scale": true"#,
                "logn_attention_scale true",
            ),
            (
                r#""layer_norm_type": "rms_norm""#,
                "layer_norm_type 'rms_norm'",
            ),
        ] {
            let err = check(extra).expect_err(extra);
            assert!(err.contains(key), "{extra}: {err}");
        }
    }

    /// new-impl's fixed NTK scaling is read from either key naming its
    /// kind; other kinds, the mixed form and a missing factor are refused
    /// by name.
    #[test]
    fn new_impl_ntk_scaling_is_read_and_its_other_forms_refused() {
        let factor = |text: &str| ntk_factor(Some(serde_json::from_str(text).unwrap()));
        assert_eq!(factor(r#"{"type": "ntk", "factor": 2.0}"#), Ok(Some(2.0)));
        assert_eq!(
            factor(r#"{"rope_type": "ntk", "factor": 4}"#),
            Ok(Some(4.0))
        );
        assert_eq!(ntk_factor(None), Ok(None));
        assert_eq!(ntk_factor(Some(Value::Null)), Ok(None));
        for (text, key) in [
            (r#"{"type": "linear", "factor": 2.0}"#, "type 'linear'"),
            (
                r#"{"type": "ntk", "factor": 2.0, "mixed_b": 0.75}"#,
                "mixed_b",
            ),
            (r#"{"type": "ntk"}"#, "rope_scaling.factor"),
        ] {
            let err = factor(text).expect_err(text);
            assert!(err.contains(key), "{text}: {err}");
        }
    }
}
