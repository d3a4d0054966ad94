//! MPNet (`model_type` `mpnet`; all-mpnet-base-v2, sentence-transformers'
//! recommended quality model): the shared encoder body with positions from
//! `pad_token_id + 1`, no token types, `attention.attn.{q,k,v,o}` weight
//! names, and one relative-position score bias shared by every layer: T5's
//! buckets ([`super::relative`]), `relative_attention_num_buckets` of them
//! up to 128 tokens, each with a learned value per head.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::relative::RelativePositions;
use super::transformer::{self, Config, LayerNames, Layout, Transformer, ENCODER_LAYERS};
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
    let positions = RelativePositions::new(values, buckets, heads, MAX_DISTANCE)?;
    let layout = Layout {
        prefix: "mpnet",
        layers: ENCODER_LAYERS,
        layer: MPNET_LAYER,
        first_position: super::after_padding(c.pad_token_id),
        token_type: false,
        bias: Some(Box::new(positions)),
    };
    Transformer::boxed(weights, &c, layout, precision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::testing::Tiny;

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
