//! RoBERTa and XLM-RoBERTa (`model_type` `roberta`, `xlm-roberta`;
//! bert_score's English default roberta-large, the multilingual
//! paraphrase-multilingual-mpnet-base-v2): BERT's layers under a `roberta.`
//! prefix or none, with positions from `pad_token_id + 1` and a single
//! token type.

use candle_nn::VarBuilder;

use super::transformer::{Config, Layout, Transformer, BERT_LAYER, ENCODER_LAYERS};
use super::EncoderModel;
use crate::precision::Precision;

/// The `roberta` and `xlm-roberta` families' loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> Result<Box<dyn EncoderModel>, String> {
    let c = Config::parse(config)?;
    let layout = Layout {
        prefix: "roberta",
        layers: ENCODER_LAYERS,
        layer: BERT_LAYER,
        first_position: super::after_padding(c.pad_token_id),
        token_type: true,
        bias: None,
    };
    Transformer::boxed(weights, &c, layout, precision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::testing::Tiny;

    /// A small random RoBERTa under the `roberta.` prefix.
    const TINY: Tiny = Tiny {
        prefix: "roberta.",
        layers: ENCODER_LAYERS,
        names: BERT_LAYER,
        positions: 42,
        types: Some(1),
        config: r#""model_type": "roberta", "type_vocab_size": 1, "layer_norm_eps": 1e-5,
            "pad_token_id": 1"#,
        shared_config: true,
        extra: &[],
        seed: 0x7eb,
    };

    #[test]
    fn the_fused_path_computes_roberta() {
        TINY.check(load);
    }

    /// Positions start at `pad_token_id + 1`: 40 tokens fit 42 positions,
    /// 41 do not.
    #[test]
    fn positions_start_after_the_padding_id() {
        let model = TINY.load(load, Precision::Fp32);
        let ids: Vec<u32> = (0..41).map(|k| k % 50).collect();
        assert!(model.forward_packed(&ids[..40], &[40], None, &[2]).is_ok());
        let err = model.forward_packed(&ids, &[41], None, &[2]).unwrap_err();
        assert!(err.to_string().contains("40 positions"), "{err}");
    }
}
