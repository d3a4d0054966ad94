//! MPNet (`model_type` `mpnet`; all-mpnet-base-v2, sentence-transformers'
//! recommended quality model): the shared encoder body with positions from
//! `pad_token_id + 1`, no token types, `attention.attn.{q,k,v,o}` weight
//! names, and one relative-position score bias shared by every layer: the
//! offset between key and query falls into one of
//! `relative_attention_num_buckets` buckets (half for each direction; exact
//! below a quarter of them, logarithmic up to 128 tokens), and each bucket
//! has a learned value per head.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::transformer::{
    self, Config, LayerNames, Layout, PositionBias, Transformer, ENCODER_LAYERS,
};
use super::EncoderModel;
use crate::precision::Precision;

/// MPNet's layer names.
const MPNET_LAYER: LayerNames = LayerNames {
    query: "attention.attn.q",
    key: "attention.attn.k",
    value: "attention.attn.v",
    attn_out: "attention.attn.o",
    attn_norm: "attention.LayerNorm",
    ff_in: "intermediate.dense",
    ff_out: "output.dense",
    ff_norm: "output.LayerNorm",
};

/// Offsets at and beyond this many tokens share the last bucket (the
/// reference implementation's `max_distance`).
const MAX_DISTANCE: usize = 128;

/// The config keys MPNet adds to the shared ones.
#[derive(Deserialize)]
struct MpnetConfig {
    #[serde(default = "default_buckets")]
    relative_attention_num_buckets: usize,
}

fn default_buckets() -> usize {
    32
}

/// The learned bucket values and how offsets map to buckets.
struct RelativePositions {
    /// `buckets × heads`, as stored.
    values: Vec<f32>,
    buckets: usize,
    heads: usize,
}

/// The bucket of a key `offset` tokens after the query (negative: before),
/// computed in f32 as the reference does, so that the logarithmic
/// boundaries fall on the same offsets.
fn bucket(offset: i64, buckets: usize) -> usize {
    let half = (buckets / 2) as i64;
    let n = -offset;
    let side = if n < 0 { half } else { 0 };
    let n = n.abs();
    let exact = half / 2;
    if n < exact {
        return (side + n) as usize;
    }
    let scale = ((MAX_DISTANCE as f64) / (exact as f64)).ln() as f32;
    let log = ((n as f32) / (exact as f32)).ln() / scale * ((half - exact) as f32);
    (side + (exact + log as i64).min(half - 1)) as usize
}

impl PositionBias for RelativePositions {
    fn table(&self, span: usize) -> Vec<f32> {
        let width = 2 * span - 1;
        let mut out = vec![0f32; self.heads * width];
        for k in 0..width {
            let offset = k as i64 - (span as i64 - 1);
            let row = &self.values[bucket(offset, self.buckets) * self.heads..][..self.heads];
            for (head, &v) in row.iter().enumerate() {
                out[head * width + k] = v;
            }
        }
        out
    }
}

/// The `mpnet` family's loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> Result<Box<dyn EncoderModel>, String> {
    let c = Config::parse(config)?;
    let extra: MpnetConfig =
        serde_json::from_str(config).map_err(|e| format!("config.json: {e}"))?;
    let weights = transformer::weights_root(weights, "mpnet");
    let (buckets, heads) = (extra.relative_attention_num_buckets, c.num_attention_heads);
    if buckets < 4 {
        return Err(format!(
            "config.json: relative_attention_num_buckets {buckets} is below 4"
        ));
    }
    let values = weights
        .get((buckets, heads), "encoder.relative_attention_bias.weight")
        .and_then(|t| t.flatten_all()?.to_vec1::<f32>())
        .map_err(|e| e.to_string())?;
    let layout = Layout {
        prefix: "mpnet",
        layers: ENCODER_LAYERS,
        layer: MPNET_LAYER,
        first_position: super::after_padding(c.pad_token_id),
        token_type: false,
        bias: Some(Box::new(RelativePositions {
            values,
            buckets,
            heads,
        })),
    };
    Transformer::boxed(weights, &c, layout, precision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::testing::Tiny;

    /// The buckets of offsets −200..=200 for 32 buckets, as the reference
    /// (transformers' `MPNetEncoder.relative_position_bucket`, torch 2.15
    /// on CPU) gives them, as runs: (first offset, bucket).
    #[test]
    fn buckets_match_the_reference() {
        let got: Vec<usize> = (-200..=200).map(|o| bucket(o, 32)).collect();
        // Runs of equal buckets, walking the offsets upward.
        let mut runs: Vec<(i64, usize)> = Vec::new();
        for (k, &b) in got.iter().enumerate() {
            if runs.last().is_none_or(|r| r.1 != b) {
                runs.push((k as i64 - 200, b));
            }
        }
        let want: Vec<(i64, usize)> = vec![
            (-200, 15),
            (-90, 14),
            (-63, 13),
            (-45, 12),
            (-31, 11),
            (-22, 10),
            (-15, 9),
            (-11, 8),
            (-7, 7),
            (-6, 6),
            (-5, 5),
            (-4, 4),
            (-3, 3),
            (-2, 2),
            (-1, 1),
            (0, 0),
            (1, 17),
            (2, 18),
            (3, 19),
            (4, 20),
            (5, 21),
            (6, 22),
            (7, 23),
            (8, 24),
            (12, 25),
            (16, 26),
            (23, 27),
            (32, 28),
            (46, 29),
            (64, 30),
            (91, 31),
        ];
        assert_eq!(runs, want);
    }

    /// The relative bias inside the fused attention gives what the padded
    /// Candle path gives with the bias as a dense tensor; bf16 and int8
    /// stay near fp32.
    #[test]
    fn the_fused_path_computes_mpnet() {
        Tiny {
            prefix: "",
            layers: ENCODER_LAYERS,
            names: MPNET_LAYER,
            positions: 60,
            types: None,
            config: r#""model_type": "mpnet", "layer_norm_eps": 1e-5, "pad_token_id": 1,
                "relative_attention_num_buckets": 8"#,
            shared_config: true,
            extra: &[("encoder.relative_attention_bias.weight", &[8, 4])],
            seed: 0x3e7,
        }
        .check(load);
    }
}
