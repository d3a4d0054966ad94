//! BERT (`model_type` `bert`, and folders without one): the shared encoder
//! body with absolute positions from 0 and the token-type row 0 added to
//! every token. all-MiniLM-L6-v2, bge, e5 and gte are BERTs.

use candle_nn::VarBuilder;

use super::transformer::{Config, Layout, Transformer, BERT_LAYER, ENCODER_LAYERS};
use super::EncoderModel;
use crate::precision::Precision;

/// BERT's layout of the shared body.
fn layout() -> Layout {
    Layout {
        prefix: "bert",
        layers: ENCODER_LAYERS,
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
    Transformer::boxed(weights, &Config::parse(config)?, layout(), precision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::testing::Tiny;

    /// A tiny random BERT with two token types.
    fn tiny() -> Tiny {
        Tiny {
            prefix: "",
            layers: ENCODER_LAYERS,
            names: BERT_LAYER,
            positions: 40,
            types: Some(2),
            config: r#""type_vocab_size": 2, "layer_norm_eps": 1e-12, "pad_token_id": 0"#,
            shared_config: true,
            extra: &[],
            seed: 0x5eed,
        }
    }

    /// The fused packed CPU path and the plain-Candle padded path (what
    /// other devices run) compute the same function, at every layer; bf16
    /// and int8 stay near fp32.
    #[test]
    fn the_fused_path_computes_bert() {
        tiny().check(load);
    }

    /// A pair's second text gets token type 1's row: BERT's cross-encoders
    /// (`[CLS] A [SEP] B [SEP]`) read the boundary from it.
    #[test]
    fn a_second_text_is_embedded_as_token_type_one() {
        let model = tiny().load(load, Precision::Fp32);
        let ids: Vec<u32> = (1..=9).collect();
        let run = |second: Option<&[usize]>| -> Vec<Vec<f32>> {
            let out = model.forward_packed(&ids, &[9], second, &[0]).unwrap();
            out[0].to_vec2().unwrap()
        };
        let (one, pair, at_end) = (run(None), run(Some(&[4])), run(Some(&[9])));
        // The first text's tokens are as before; the second's differ.
        assert_eq!(one[..4], pair[..4]);
        assert!(one[4..].iter().zip(&pair[4..]).all(|(a, b)| a != b));
        // A second text that starts at the end is no second text.
        assert_eq!(one, at_end);
    }
}
