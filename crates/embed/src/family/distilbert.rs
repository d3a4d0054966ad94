//! DistilBERT (`model_type` `distilbert`: distilbert-base-uncased, which
//! bert_score ships baselines for, and the distilled multilingual
//! sentence-transformers such as distiluse-base-multilingual-cased, whose
//! Dense module follows the pooling). The layers are BERT's, post-norm with
//! an exact-GELU feed-forward, under other names (`transformer.layer.{i}`,
//! `q_lin`…), with absolute positions from 0 and no token types; the config
//! names its sizes `dim`, `n_layers`, `n_heads` and `hidden_dim`.

use candle_nn::VarBuilder;
use serde::Deserialize;

use super::transformer::{Config, LayerNames, Layout, Transformer};
use super::EncoderModel;
use crate::precision::Precision;

/// DistilBERT's layer names, under `transformer.layer.{i}`.
const LAYER: LayerNames = LayerNames {
    query: "attention.q_lin",
    key: "attention.k_lin",
    value: "attention.v_lin",
    attn_out: "attention.out_lin",
    attn_norm: "sa_layer_norm",
    ff_in: "ffn.lin1",
    ff_out: "ffn.lin2",
    ff_norm: "output_layer_norm",
};

/// The `config.json` keys of a DistilBERT (transformers' `DistilBertConfig`).
#[derive(Deserialize)]
struct DistilConfig {
    vocab_size: usize,
    dim: usize,
    n_layers: usize,
    n_heads: usize,
    hidden_dim: usize,
    #[serde(default = "gelu")]
    activation: String,
    max_position_embeddings: usize,
    #[serde(default)]
    pad_token_id: Option<u32>,
}

fn gelu() -> String {
    "gelu".into()
}

/// DistilBERT's config as the shared body's: its layer norms use 1e-12
/// (fixed in transformers' code, not in the config).
fn parse(text: &str) -> Result<Config, String> {
    let c: DistilConfig = serde_json::from_str(text).map_err(|e| format!("config.json: {e}"))?;
    if c.activation != "gelu" {
        return Err(format!(
            "config.json: activation '{}' is not supported (DistilBERT with GELU only)",
            c.activation
        ));
    }
    if c.n_heads == 0 || !c.dim.is_multiple_of(c.n_heads) {
        return Err("config.json: dim must be a multiple of n_heads".into());
    }
    Ok(Config {
        vocab_size: c.vocab_size,
        hidden_size: c.dim,
        num_hidden_layers: c.n_layers,
        num_attention_heads: c.n_heads,
        intermediate_size: c.hidden_dim,
        hidden_act: c.activation,
        max_position_embeddings: c.max_position_embeddings,
        type_vocab_size: 0,
        layer_norm_eps: 1e-12,
        pad_token_id: c.pad_token_id,
        position_embedding_type: None,
    })
}

/// The `distilbert` family's loader.
pub(super) fn load(
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> Result<Box<dyn EncoderModel>, String> {
    let layout = Layout {
        prefix: "distilbert",
        layers: "transformer.layer",
        layer: LAYER,
        first_position: 0,
        token_type: false,
        bias: None,
    };
    Transformer::boxed(weights, &parse(config)?, layout, precision)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::family::testing::Tiny;

    /// A small random DistilBERT under the `distilbert.` prefix, as
    /// transformers saves a masked-LM checkpoint.
    const TINY: Tiny = Tiny {
        prefix: "distilbert.",
        layers: "transformer.layer",
        names: LAYER,
        positions: 40,
        types: None,
        config: r#""model_type": "distilbert", "vocab_size": 50, "dim": 32, "n_layers": 2,
            "n_heads": 4, "hidden_dim": 64, "activation": "gelu",
            "max_position_embeddings": 40, "pad_token_id": 0"#,
        shared_config: false,
        extra: &[],
        seed: 0xd157,
    };

    #[test]
    fn the_fused_path_computes_distilbert() {
        TINY.check(load);
    }

    /// An activation the body does not run is refused by its key's name.
    #[test]
    fn another_activation_is_refused_by_name() {
        let text = r#"{"vocab_size": 50, "dim": 32, "n_layers": 2, "n_heads": 4,
            "hidden_dim": 64, "activation": "relu", "max_position_embeddings": 40}"#;
        let err = parse(text).expect_err("refused");
        assert!(err.contains("activation 'relu'"), "{err}");
    }
}
