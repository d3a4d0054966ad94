//! T5's encoder (`model_type` `t5`), as transformers' `T5EncoderModel`
//! computes it: the encoder of T5, T5 v1.1 and Flan-T5 checkpoints
//! (sentence-T5's embeddings; HHEM-2.1-Open's body, read through its
//! `T5ForTokenClassification`). Pre-norm layers with T5's RMS norm (no
//! mean subtracted, no bias), attention without the 1/√d scale and with
//! one relative-position score bias, learned in the first layer and shared
//! by all ([`super::relative`]'s bidirectional buckets), a feed-forward
//! that is ReLU (the original T5) or gated (`gated-gelu`: GELU's tanh form
//! times a second projection, v1.1 and Flan-T5), no biases anywhere, and a
//! final norm. No absolute positions: a text may have any length.
//!
//! As bert_score computes layer N of a T5 (it drops the blocks past N and
//! keeps the final norm), every tap is `final_layer_norm(h_N)`; the last is
//! `T5EncoderModel`'s output. The stream between layers is the packed
//! rows; on the CPU attention runs on the fused kernel straight off them,
//! the relative bias added inside it; elsewhere as Candle operations on a
//! padded batch; the linear maps in the run's precision
//! ([`super::padded::Dense`]).

use candle_core::{Device, Module, Tensor};
use candle_nn::{Embedding, Linear, VarBuilder};
use serde::Deserialize;

use super::ops::Attention;
use super::padded::{self, linear, Dense, GateActivation, Padded, PaddedEncoder, RmsNorm, Rows};
use super::relative::RelativePositions;
use super::transformer::PositionBias;
use super::EncoderModel;
use crate::kernels::{AttentionShape, RelativeBias};
use crate::precision::Precision;

type Result<T> = candle_core::Result<T>;

/// The `config.json` keys of a `T5Config` that change the encoder's
/// arithmetic (transformers' defaults where absent).
#[derive(Deserialize)]
struct T5Config {
    vocab_size: usize,
    d_model: usize,
    d_kv: usize,
    d_ff: usize,
    num_layers: usize,
    num_heads: usize,
    #[serde(default = "buckets")]
    relative_attention_num_buckets: usize,
    #[serde(default = "distance")]
    relative_attention_max_distance: usize,
    #[serde(default = "eps")]
    layer_norm_epsilon: f64,
    #[serde(default = "relu")]
    feed_forward_proj: String,
    /// Written by transformers beside `feed_forward_proj`; when present it
    /// is what transformers runs (a saved key overrides the derived one).
    dense_act_fn: Option<String>,
    is_gated_act: Option<bool>,
}

fn buckets() -> usize {
    32
}
fn distance() -> usize {
    128
}
fn eps() -> f64 {
    1e-6
}
fn relu() -> String {
    "relu".into()
}

/// The feed-forward's activation, by transformers' `ACT2FN` name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Act {
    Relu,
    GeluErf,
    GeluTanh,
    Silu,
}

impl Act {
    fn named(name: &str) -> std::result::Result<Act, String> {
        Ok(match name {
            "relu" => Act::Relu,
            "gelu" => Act::GeluErf,
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Act::GeluTanh,
            "silu" | "swish" => Act::Silu,
            other => {
                return Err(format!(
                    "config.json: the feed-forward's activation '{other}' is not supported (relu, gelu, gelu_new, silu)"
                ))
            }
        })
    }

    fn apply(self, x: &Tensor) -> Result<Tensor> {
        match self {
            Act::Relu => x.relu(),
            Act::GeluErf => x.gelu_erf(),
            Act::GeluTanh => x.gelu(),
            Act::Silu => candle_nn::ops::silu(x),
        }
    }

    /// The fused gated kernel's form of it, where it has one.
    fn gate(self) -> Option<GateActivation> {
        match self {
            Act::Relu => None,
            Act::GeluErf => Some(GateActivation::GeluErf),
            Act::GeluTanh => Some(GateActivation::GeluTanh),
            Act::Silu => Some(GateActivation::Silu),
        }
    }
}

/// The feed-forward's shape: `wo(act(wi·x))`, or gated,
/// `wo(act(wi_0·x) · wi_1·x)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FeedForward {
    act: Act,
    gated: bool,
}

impl T5Config {
    fn parse(text: &str) -> std::result::Result<T5Config, String> {
        let c: T5Config = serde_json::from_str(text).map_err(|e| format!("config.json: {e}"))?;
        if c.num_heads == 0 || c.d_kv == 0 {
            return Err("config.json: num_heads and d_kv must be positive".into());
        }
        Ok(c)
    }

    /// As transformers' `T5Config` derives it: `feed_forward_proj` is
    /// `ACT` or `gated-ACT` (`gated-gelu` meaning GELU's tanh form); the
    /// saved `dense_act_fn` and `is_gated_act`, where present, win.
    fn feed_forward(&self) -> std::result::Result<FeedForward, String> {
        let parts: Vec<&str> = self.feed_forward_proj.split('-').collect();
        let (gated, act) = match parts.as_slice() {
            [act] => (false, *act),
            ["gated", act] => (true, *act),
            _ => {
                return Err(format!(
                    "config.json: feed_forward_proj '{}' is not ACT or gated-ACT",
                    self.feed_forward_proj
                ))
            }
        };
        let act = if self.feed_forward_proj == "gated-gelu" {
            "gelu_new"
        } else {
            act
        };
        Ok(FeedForward {
            act: Act::named(self.dense_act_fn.as_deref().unwrap_or(act))?,
            gated: self.is_gated_act.unwrap_or(gated),
        })
    }
}

struct Layer {
    attn_norm: RmsNorm,
    /// q, k and v stacked: `[3·inner, d_model]`, no bias.
    qkv: Dense,
    out: Dense,
    ff_norm: RmsNorm,
    /// `wi`, or `wi_0` (activated) and `wi_1` stacked.
    wi: Dense,
    wo: Dense,
}

impl Layer {
    fn load(vb: VarBuilder, c: &T5Config, ff: FeedForward, precision: Precision) -> Result<Layer> {
        let (h, inner) = (c.d_model, c.num_heads * c.d_kv);
        let att = vb.pp("layer.0");
        let sa = att.pp("SelfAttention");
        let plain = |name: &str, inp: usize, out: usize| linear(sa.pp(name), inp, out, false);
        let (q, k, v) = (
            plain("q", h, inner)?,
            plain("k", h, inner)?,
            plain("v", h, inner)?,
        );
        let qkv = Linear::new(Tensor::cat(&[q.weight(), k.weight(), v.weight()], 0)?, None);
        let mlp = vb.pp("layer.1");
        let dense = mlp.pp("DenseReluDense");
        let wi = if ff.gated {
            let w0 = linear(dense.pp("wi_0"), h, c.d_ff, false)?;
            let w1 = linear(dense.pp("wi_1"), h, c.d_ff, false)?;
            Linear::new(Tensor::cat(&[w0.weight(), w1.weight()], 0)?, None)
        } else {
            linear(dense.pp("wi"), h, c.d_ff, false)?
        };
        let eps = c.layer_norm_epsilon;
        Ok(Layer {
            attn_norm: RmsNorm::load(att.pp("layer_norm"), h, eps)?,
            qkv: Dense::new(qkv, precision)?,
            out: Dense::new(linear(sa.pp("o"), inner, h, false)?, precision)?,
            ff_norm: RmsNorm::load(mlp.pp("layer_norm"), h, eps)?,
            wi: Dense::new(wi, precision)?,
            wo: Dense::load(dense.pp("wo"), c.d_ff, h, false, precision)?,
        })
    }

    /// `x`: packed rows `[Σ lengths, d_model]`.
    fn forward(&self, x: &Tensor, m: &T5, batch: &Batch, rows: &Rows) -> Result<Tensor> {
        let qkv = self.qkv.forward(&self.attn_norm.forward(x)?)?;
        let ctx = match batch {
            Batch::Fused {
                lengths,
                table,
                span,
            } => m.attend_packed(&qkv, lengths, table, *span)?,
            Batch::Padded { bias } => m.attend_padded(&qkv, bias, rows)?,
        };
        let x = (x + self.out.forward(&ctx)?)?;
        let wi = self.wi.forward(&self.ff_norm.forward(&x)?)?;
        x + self.wo.forward(&m.ff_middle(&wi)?)?
    }
}

struct T5 {
    words: Embedding,
    layers: Vec<Layer>,
    final_norm: RmsNorm,
    positions: RelativePositions,
    heads: usize,
    d_kv: usize,
    hidden: usize,
    ff: FeedForward,
    /// Whether attention runs on the CPU's fused kernel (else as Candle
    /// operations on padded batches).
    fused: bool,
}

/// Where the encoder's weights sit: at the top (`T5EncoderModel`, and
/// `T5Model`'s encoder half), under `transformer.`
/// (`T5ForTokenClassification`) or `t5.transformer.` (HHEM-2.1-Open's
/// wrapper around one).
fn weights_root(vb: VarBuilder) -> std::result::Result<VarBuilder, String> {
    const FIRST: &str = "encoder.block.0.layer.0.SelfAttention.q.weight";
    for prefix in ["", "transformer", "t5.transformer"] {
        let root = if prefix.is_empty() {
            vb.clone()
        } else {
            vb.pp(prefix)
        };
        if root.contains_tensor(FIRST) {
            return Ok(root);
        }
    }
    Err(format!(
        "no T5 encoder in the weights ({FIRST}, at the top or under transformer. or t5.transformer.)"
    ))
}

impl T5 {
    fn load(vb: VarBuilder, c: &T5Config, precision: Precision) -> std::result::Result<T5, String> {
        let ff = c.feed_forward()?;
        let vb = weights_root(vb)?;
        let (heads, buckets) = (c.num_heads, c.relative_attention_num_buckets);
        let enc = vb.pp("encoder");
        let text = |e: candle_core::Error| e.to_string();
        let values = enc
            .get(
                (buckets, heads),
                "block.0.layer.0.SelfAttention.relative_attention_bias.weight",
            )
            .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
            .map_err(text)?;
        let positions =
            RelativePositions::new(values, buckets, heads, c.relative_attention_max_distance)?;
        // The embedding is tied: `shared`, or the encoder's own copy of it.
        let name = if vb.contains_tensor("shared.weight") {
            "shared.weight"
        } else {
            "encoder.embed_tokens.weight"
        };
        let words = vb.get((c.vocab_size, c.d_model), name).map_err(text)?;
        let layers = (0..c.num_layers)
            .map(|i| Layer::load(enc.pp(format!("block.{i}")), c, ff, precision))
            .collect::<Result<Vec<_>>>()
            .map_err(text)?;
        let final_norm = RmsNorm::load(enc.pp("final_layer_norm"), c.d_model, c.layer_norm_epsilon)
            .map_err(text)?;
        Ok(T5 {
            words: Embedding::new(words, c.d_model),
            layers,
            final_norm,
            positions,
            heads,
            d_kv: c.d_kv,
            hidden: c.d_model,
            ff,
            fused: vb.device().is_cpu(),
        })
    }

    fn inner(&self) -> usize {
        self.heads * self.d_kv
    }

    /// The feed-forward between `wi` and `wo`: the activation, or the gate.
    fn ff_middle(&self, wi: &Tensor) -> Result<Tensor> {
        if !self.ff.gated {
            return self.ff.act.apply(wi);
        }
        match self.ff.act.gate() {
            Some(act) => padded::gated(wi, act, true),
            None => {
                let inner = wi.dim(candle_core::D::Minus1)? / 2;
                let last = wi.rank() - 1;
                self.ff.act.apply(&wi.narrow(last, 0, inner)?)? * wi.narrow(last, inner, inner)?
            }
        }
    }

    /// Attention on the CPU's fused kernel: `qkv` `[Σ lengths, 3·inner]`
    /// to the context `[Σ lengths, inner]`, the relative bias `table`
    /// (sequences of up to `span` tokens) added to the unscaled scores.
    fn attend_packed(
        &self,
        qkv: &Tensor,
        lengths: &[usize],
        table: &[f32],
        span: usize,
    ) -> Result<Tensor> {
        let zeros = vec![0f32; 3 * self.inner()];
        qkv.contiguous()?.apply_op1_no_bwd(&Attention {
            shape: AttentionShape {
                heads: self.heads,
                head_dim: self.d_kv,
                qkv_bias: &zeros,
                reach: None,
            },
            lengths,
            bias: Some(RelativeBias {
                values: table,
                span,
            }),
            pairs: None,
        })
    }

    /// Attention as Candle operations on the padded batch: softmax(q·kᵀ +
    /// bias)·v, `bias` `[b, heads, t, t]` holding the relative bias and the
    /// key mask.
    fn attend_padded(&self, qkv: &Tensor, bias: &Tensor, rows: &Rows) -> Result<Tensor> {
        let inner = self.inner();
        let split = |part: usize| -> Result<Tensor> {
            let y = rows.pad(&qkv.narrow(1, part * inner, inner)?.contiguous()?)?;
            let (b, t, _) = y.dims3()?;
            y.reshape((b, t, self.heads, self.d_kv))?
                .transpose(1, 2)?
                .contiguous()
        };
        let (q, k, v) = (split(0)?, split(1)?, split(2)?);
        let scores = (q.matmul(&k.t()?)? + bias)?;
        let probs = candle_nn::ops::softmax_last_dim(&scores)?;
        let (b, _, t, _) = probs.dims4()?;
        rows.unpad(&probs.matmul(&v)?.transpose(1, 2)?.reshape((b, t, inner))?)
    }

    /// The relative bias of a padded batch of `t` tokens with the key mask
    /// of `lengths`: `[b, heads, t, t]`.
    fn padded_bias(&self, lengths: &[usize], t: usize, device: &Device) -> Result<Tensor> {
        let heads = self.heads;
        let mut bias = vec![0f32; heads * t * t];
        for h in 0..heads {
            for i in 0..t {
                for j in 0..t {
                    bias[(h * t + i) * t + j] = self.positions.value(j as i64 - i as i64, h);
                }
            }
        }
        let bias = Tensor::from_vec(bias, (1, heads, t, t), device)?;
        let mask = padded::key_mask(lengths, t, device)?;
        bias.broadcast_add(&mask)?.contiguous()
    }
}

/// What a batch's layers share.
enum Batch {
    /// The CPU's fused attention: the texts' lengths and the relative
    /// bias by offset ([`RelativeBias`]) for the longest.
    Fused {
        lengths: Vec<usize>,
        table: Vec<f32>,
        span: usize,
    },
    /// Candle operations on a padded batch: bias and mask together.
    Padded { bias: Tensor },
}

impl PaddedEncoder for T5 {
    type Batch = Batch;

    const NAME: &'static str = "T5";

    fn hidden(&self) -> usize {
        self.hidden
    }

    fn layers(&self) -> usize {
        self.layers.len()
    }

    /// Relative positions only: no limit of the model's own.
    fn max_tokens(&self) -> usize {
        usize::MAX
    }

    fn embed(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        _: Option<&Tensor>,
    ) -> Result<(Tensor, Batch)> {
        let (_, t) = ids.dims2()?;
        let x = self.words.forward(ids)?;
        let batch = if self.fused {
            let span = lengths.iter().copied().max().unwrap_or(0).max(1);
            Batch::Fused {
                lengths: lengths.to_vec(),
                table: self.positions.table(span),
                span,
            }
        } else {
            Batch::Padded {
                bias: self.padded_bias(lengths, t, ids.device())?,
            }
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

/// The `t5` family's loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, String> {
    let c = T5Config::parse(config)?;
    Ok(Box::new(Padded(T5::load(weights, &c, precision)?)))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use candle_core::DType;

    use super::*;

    fn config(extra: &str) -> T5Config {
        let text = format!(
            r#"{{"vocab_size": 50, "d_model": 32, "d_kv": 6, "d_ff": 48, "num_layers": 2,
                "num_heads": 4, "relative_attention_num_buckets": 8,
                "relative_attention_max_distance": 20 {extra}}}"#
        );
        T5Config::parse(&text).unwrap()
    }

    /// transformers' reading of `feed_forward_proj`, and of the saved keys
    /// beside it.
    #[test]
    fn the_feed_forward_is_read_as_transformers_reads_it() {
        let ff = |extra: &str| config(extra).feed_forward();
        assert_eq!(
            ff("").unwrap(),
            FeedForward {
                act: Act::Relu,
                gated: false
            }
        );
        assert_eq!(
            ff(r#", "feed_forward_proj": "gated-gelu""#).unwrap(),
            FeedForward {
                act: Act::GeluTanh,
                gated: true
            }
        );
        assert_eq!(
            ff(r#", "feed_forward_proj": "gated-silu""#).unwrap(),
            FeedForward {
                act: Act::Silu,
                gated: true
            }
        );
        // The saved dense_act_fn wins, as it does in transformers.
        assert_eq!(
            ff(r#", "feed_forward_proj": "gated-gelu", "dense_act_fn": "relu""#).unwrap(),
            FeedForward {
                act: Act::Relu,
                gated: true
            }
        );
        let err = ff(r#", "feed_forward_proj": "gated-mish""#).unwrap_err();
        assert!(err.contains("'mish'"), "{err}");
        let err = ff(r#", "feed_forward_proj": "very-gated-gelu""#).unwrap_err();
        assert!(err.contains("feed_forward_proj"), "{err}");
    }

    /// Seeded random weights of a 2-layer T5 encoder (`d_kv · heads` ≠
    /// `d_model`, as in Flan-T5-small) under `prefix`: the linear maps
    /// uniform in ±0.15 (wider ones make unscaled scores so large that
    /// attention picks one key, and any rounding flips which), the norms
    /// in 1 ± 0.5.
    fn weights(prefix: &str, gated: bool) -> HashMap<String, Tensor> {
        let mut state = 0x75u64;
        let mut next = |shape: &[usize], centre: f32| -> Tensor {
            let n: usize = shape.iter().product();
            let width = if centre == 0.0 && shape.len() == 2 {
                0.3
            } else {
                1.0
            };
            let v: Vec<f32> = (0..n)
                .map(|_| {
                    state = state
                        .wrapping_mul(6364136223846793005)
                        .wrapping_add(1442695040888963407);
                    ((state >> 40) as f32 / (1u64 << 24) as f32 - 0.5) * width + centre
                })
                .collect();
            Tensor::from_vec(v, shape, &Device::Cpu).unwrap()
        };
        let mut w = HashMap::new();
        let p = prefix;
        w.insert(format!("{p}shared.weight"), next(&[50, 32], 0.0));
        for l in 0..2 {
            let b = format!("{p}encoder.block.{l}.layer.");
            for m in ["q", "k", "v"] {
                w.insert(
                    format!("{b}0.SelfAttention.{m}.weight"),
                    next(&[24, 32], 0.0),
                );
            }
            w.insert(format!("{b}0.SelfAttention.o.weight"), next(&[32, 24], 0.0));
            w.insert(format!("{b}0.layer_norm.weight"), next(&[32], 1.0));
            w.insert(format!("{b}1.layer_norm.weight"), next(&[32], 1.0));
            let ins: &[&str] = if gated { &["wi_0", "wi_1"] } else { &["wi"] };
            for m in ins {
                w.insert(
                    format!("{b}1.DenseReluDense.{m}.weight"),
                    next(&[48, 32], 0.0),
                );
            }
            w.insert(
                format!("{b}1.DenseReluDense.wo.weight"),
                next(&[32, 48], 0.0),
            );
        }
        w.insert(
            format!("{p}encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight"),
            next(&[8, 4], 0.0),
        );
        w.insert(
            format!("{p}encoder.final_layer_norm.weight"),
            next(&[32], 1.0),
        );
        w
    }

    fn model(prefix: &str, gated: bool, fused: bool, precision: Precision) -> Padded<T5> {
        let proj = if gated { "gated-gelu" } else { "relu" };
        let c = config(&format!(r#", "feed_forward_proj": "{proj}""#));
        let vb = VarBuilder::from_tensors(weights(prefix, gated), DType::F32, &Device::Cpu);
        let mut t5 = T5::load(vb, &c, precision).unwrap();
        t5.fused = fused;
        Padded(t5)
    }

    fn run(m: &Padded<T5>, seqs: &[Vec<u32>]) -> Vec<f32> {
        let lengths: Vec<usize> = seqs.iter().map(Vec::len).collect();
        let t = *lengths.iter().max().unwrap();
        let mut ids = vec![0u32; seqs.len() * t];
        for (k, s) in seqs.iter().enumerate() {
            ids[k * t..k * t + s.len()].copy_from_slice(s);
        }
        let ids = Tensor::from_vec(ids, (seqs.len(), t), &Device::Cpu).unwrap();
        let taps: Vec<usize> = (0..=m.layers()).collect();
        m.forward_padded(&ids, &lengths, None, &taps)
            .unwrap()
            .iter()
            .flat_map(|x| x.flatten_all().unwrap().to_vec1::<f32>().unwrap())
            .collect()
    }

    fn worst(a: &[f32], b: &[f32]) -> f32 {
        assert_eq!(a.len(), b.len());
        a.iter()
            .zip(b)
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max)
    }

    /// The fused CPU attention (the bias by offset inside the kernel) and
    /// the padded Candle form (what other devices run, the bias a dense
    /// tensor) compute the same encoder, at every layer, for texts longer
    /// than the buckets' max distance; bf16 and int8 stay near fp32. The
    /// weights are found under every prefix the checkpoints use.
    #[test]
    fn the_fused_path_computes_the_padded_one() {
        let seqs: Vec<Vec<u32>> = vec![
            (1..=40).map(|i| i % 50).collect(),
            vec![7, 3, 9],
            (5..22).rev().collect(),
            vec![42],
        ];
        for gated in [true, false] {
            let fused = run(&model("", gated, true, Precision::Fp32), &seqs);
            let padded = run(&model("", gated, false, Precision::Fp32), &seqs);
            let w = worst(&fused, &padded);
            assert!(w < 1e-4, "gated {gated}: worst difference {w}");
            for prefix in ["transformer.", "t5.transformer."] {
                let other = run(&model(prefix, gated, true, Precision::Fp32), &seqs);
                assert_eq!(worst(&fused, &other), 0.0, "{prefix}");
            }
            // Off by a rounding-sized share of the states' scale.
            let scale = fused.iter().fold(0f32, |m, v| m.max(v.abs()));
            for (precision, bound) in [(Precision::Bf16, 0.02f32), (Precision::Int8, 0.06)] {
                let got = run(&model("", gated, true, precision), &seqs);
                let w = worst(&fused, &got) / scale;
                eprintln!("gated {gated} {precision:?}: worst {w:.2e} of the scale {scale}");
                assert!(w > 0.0 && w < bound, "{precision:?}: worst {w}");
            }
        }
    }

    /// A text alone and the same text in a batch beside longer ones give
    /// the same states: padding is masked, and the bias table covers the
    /// longest text.
    #[test]
    fn a_text_does_not_depend_on_its_batch() {
        let m = model("", true, true, Precision::Fp32);
        let long: Vec<u32> = (1..=30).collect();
        let short = vec![4u32, 8, 15, 16, 23];
        let alone = run(&m, std::slice::from_ref(&short));
        let batch = run(&m, &[long.clone(), short.clone()]);
        // Each tap's rows are the long text's, then the short one's.
        let per_tap = (long.len() + short.len()) * 32;
        let mine: Vec<f32> = batch
            .chunks(per_tap)
            .flat_map(|tap| tap[long.len() * 32..].to_vec())
            .collect();
        assert!(worst(&alone, &mine) < 1e-5);
    }
}
