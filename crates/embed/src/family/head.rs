//! Sequence-classification heads: what a `*ForSequenceClassification`
//! checkpoint puts on top of its encoder to turn a pair of texts into
//! logits, one architecture at a time, exactly as transformers defines it.
//! The encoder body is the family's own ([`super::load`]); only the few
//! weights after its last layer live here, so a family gains a head without
//! its batching or kernels changing.

use candle_core::Tensor;
use candle_nn::{Linear, Module, VarBuilder};
use serde::Deserialize;

type Result<T> = std::result::Result<T, String>;

/// The nonlinearity between a head's two matrices.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Nonlinearity {
    Tanh,
    Relu,
    /// GELU with the error function (transformers' `gelu`).
    GeluErf,
    /// GELU's tanh approximation (`gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`).
    GeluTanh,
}

impl Nonlinearity {
    /// The function transformers' `ACT2FN[name]` is, where refscore has it.
    fn named(name: &str) -> Result<Nonlinearity> {
        match name {
            "tanh" => Ok(Nonlinearity::Tanh),
            "relu" => Ok(Nonlinearity::Relu),
            "gelu" => Ok(Nonlinearity::GeluErf),
            "gelu_new" | "gelu_pytorch_tanh" | "gelu_fast" => Ok(Nonlinearity::GeluTanh),
            other => Err(format!(
                "the classification head's activation '{other}' is not one refscore runs (tanh, relu, gelu, gelu_new, gelu_pytorch_tanh, gelu_fast)"
            )),
        }
    }

    fn apply(self, x: &Tensor) -> candle_core::Result<Tensor> {
        match self {
            Nonlinearity::Tanh => x.tanh(),
            Nonlinearity::Relu => x.relu(),
            Nonlinearity::GeluErf => x.gelu_erf(),
            Nonlinearity::GeluTanh => x.gelu(),
        }
    }
}

/// The config keys the heads read.
#[derive(Deserialize)]
struct HeadConfig {
    #[serde(alias = "dim")]
    hidden_size: usize,
    pooler_hidden_size: Option<usize>,
    pooler_hidden_act: Option<String>,
}

/// A classification head: the first token's last-layer state through a
/// dense layer, a nonlinearity and the output layer, giving one logit per
/// label. (Dropout, which transformers also applies in training, does
/// nothing at inference.)
pub(crate) struct ClassifierHead {
    dense: Linear,
    nonlinearity: Nonlinearity,
    out: Linear,
}

impl ClassifierHead {
    /// Loads the head of `model_type`'s `*ForSequenceClassification` with
    /// `labels` outputs from the checkpoint's top-level weights.
    pub(crate) fn load(
        model_type: &str,
        config: &str,
        weights: VarBuilder,
        labels: usize,
    ) -> Result<ClassifierHead> {
        let c: HeadConfig =
            serde_json::from_str(config).map_err(|e| format!("config.json: {e}"))?;
        let h = c.hidden_size;
        let linear = |name: &str, inp: usize, out: usize| {
            candle_nn::linear(inp, out, weights.pp(name))
                .map_err(|e| format!("the classification head's {name}: {e}"))
        };
        // (dense, its nonlinearity, output layer), as each architecture's
        // *ForSequenceClassification names and orders them.
        let (dense, nonlinearity, out) = match model_type {
            // BertPooler (tanh) then `classifier`.
            "bert" => (
                linear("bert.pooler.dense", h, h)?,
                Nonlinearity::Tanh,
                linear("classifier", h, labels)?,
            ),
            // RobertaClassificationHead: dense, tanh, out_proj.
            "roberta" | "xlm-roberta" => (
                linear("classifier.dense", h, h)?,
                Nonlinearity::Tanh,
                linear("classifier.out_proj", h, labels)?,
            ),
            // pre_classifier, ReLU, classifier.
            "distilbert" => (
                linear("pre_classifier", h, h)?,
                Nonlinearity::Relu,
                linear("classifier", h, labels)?,
            ),
            // ContextPooler (its `pooler_hidden_act`, GELU by default),
            // then `classifier`.
            "deberta" | "deberta-v2" => {
                let width = c.pooler_hidden_size.unwrap_or(h);
                let act = c.pooler_hidden_act.as_deref().unwrap_or("gelu");
                (
                    linear("pooler.dense", h, width)?,
                    Nonlinearity::named(act)?,
                    linear("classifier", width, labels)?,
                )
            }
            other => {
                return Err(format!(
                    "refscore has no sequence-classification head for model_type '{other}' yet (it has: {})",
                    SUPPORTED.join(", ")
                ))
            }
        };
        Ok(ClassifierHead {
            dense,
            nonlinearity,
            out,
        })
    }

    /// Logits `[b, labels]` from the first tokens' states `[b, hidden]`.
    pub(crate) fn logits(&self, first: &Tensor) -> candle_core::Result<Tensor> {
        let x = self.dense.forward(first)?;
        let x = self.nonlinearity.apply(&x)?;
        self.out.forward(&x)
    }
}

/// The `model_type`s with a head, for messages.
pub(crate) const SUPPORTED: &[&str] = &[
    "bert",
    "deberta",
    "deberta-v2",
    "distilbert",
    "roberta",
    "xlm-roberta",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn activations_are_transformers_functions() {
        assert_eq!(Nonlinearity::named("gelu").unwrap(), Nonlinearity::GeluErf);
        assert_eq!(
            Nonlinearity::named("gelu_pytorch_tanh").unwrap(),
            Nonlinearity::GeluTanh
        );
        let err = Nonlinearity::named("silu").unwrap_err();
        assert!(err.contains("'silu'"), "{err}");
    }
}
