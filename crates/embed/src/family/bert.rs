//! BERT (`model_type` `bert`, and folders without one): the shared encoder
//! body with absolute positions from 0 and the token-type row 0 added to
//! every token. all-MiniLM-L6-v2, bge, e5 and gte are BERTs.

use candle_nn::VarBuilder;

use super::transformer::{Config, Layout, Transformer, BERT_LAYER};
use super::EncoderModel;
use crate::precision::Precision;

/// BERT's layout of the shared body.
fn layout() -> Layout {
    Layout {
        prefix: "bert",
        layer: BERT_LAYER,
        first_position: 0,
        token_type: true,
        bias: None,
    }
}

/// The `bert` family's loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> Result<Box<dyn EncoderModel>, String> {
    let config = Config::parse(config)?;
    let model =
        Transformer::load(weights, &config, layout(), precision).map_err(|e| e.to_string())?;
    Ok(Box::new(model))
}

#[cfg(test)]
mod tests {
    use candle_core::{DType, Device};
    use candle_nn::VarBuilder;

    use super::*;
    use crate::family::testing::{self, Weights};

    /// A small random BERT (2 layers, hidden 32, 4 heads) built in memory.
    fn tiny(precision: Precision) -> Box<dyn EncoderModel> {
        let config = r#"{"vocab_size": 50, "hidden_size": 32, "num_hidden_layers": 2,
                "num_attention_heads": 4, "intermediate_size": 64, "hidden_act": "gelu",
                "hidden_dropout_prob": 0.0, "max_position_embeddings": 40,
                "type_vocab_size": 2, "initializer_range": 0.02, "layer_norm_eps": 1e-12,
                "pad_token_id": 0}"#;
        let mut w = Weights::new(0x5eed);
        w.embeddings("embeddings.", 50, 40, Some(2), 32);
        for l in 0..2 {
            w.layer(&format!("encoder.layer.{l}."), &BERT_LAYER, 32, 64);
        }
        let vb = VarBuilder::from_tensors(w.into_tensors(), DType::F32, &Device::Cpu);
        load(config, vb, precision).unwrap()
    }

    /// The fused packed CPU path and the plain-Candle padded path (what
    /// other devices run) compute the same function, at every layer.
    #[test]
    fn packed_and_padded_forwards_agree() {
        testing::packed_matches_padded(tiny(Precision::Fp32).as_ref());
    }

    /// bf16 and int8 run the same model through the same packed path, off
    /// fp32 by a rounding-sized amount (and not by nothing: the products
    /// really changed).
    #[test]
    fn reduced_precisions_stay_near_fp32() {
        testing::reduced_precisions_near_fp32(tiny);
    }
}
