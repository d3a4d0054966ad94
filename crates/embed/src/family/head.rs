//! Sequence-classification heads: what a `*ForSequenceClassification`
//! checkpoint puts on top of its encoder to turn a pair of texts into
//! logits, one architecture at a time, exactly as transformers defines it.
//! The encoder body is the family's own ([`super::load`]); only the few
//! weights after its last layer live here, so a family gains a head without
//! its batching or kernels changing.

use candle_core::Tensor;
use candle_nn::{LayerNorm, Linear, Module, VarBuilder};
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
    #[serde(alias = "dim", alias = "n_embd", alias = "d_model")]
    hidden_size: usize,
    pooler_hidden_size: Option<usize>,
    pooler_hidden_act: Option<String>,
    // ModernBERT's.
    classifier_pooling: Option<String>,
    classifier_activation: Option<String>,
    #[serde(default)]
    classifier_bias: bool,
    #[serde(default)]
    norm_bias: bool,
    norm_eps: Option<f64>,
}

/// How a family's `*ForSequenceClassification` puts its head together
/// (the dense layer, its nonlinearity, the output layer), named after the
/// transformers class each shape follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadShape {
    /// BertPooler (tanh) then `classifier`, the pooler under the first of
    /// these prefixes whose weights the checkpoint holds. GTE's and
    /// NomicBERT's classifiers are BERT's (transformers' classes subclass
    /// it; new-impl's and nomic-ai's own code has the same pooler).
    BertPooler(&'static [&'static str]),
    /// RobertaClassificationHead: dense, tanh, out_proj.
    RobertaHead,
    /// DistilBERT's pre_classifier, ReLU, classifier.
    PreClassifier,
    /// DeBERTa's ContextPooler (its `pooler_hidden_act`, GELU by default),
    /// then `classifier`.
    ContextPooler,
    /// ModernBertPredictionHead (dense, its activation, a norm), then
    /// `classifier`, on the pooled state.
    ModernBert,
    /// A `*ForTokenClassification`'s `classifier` (one linear map on each
    /// token's last-layer state), under the first of these prefixes whose
    /// weights the checkpoint holds. As a sequence head it is read at the
    /// first token: what HHEM-2.1-Open's `HHEMv2ForSequenceClassification`
    /// returns from the `T5ForTokenClassification` it wraps (its prompt
    /// starts with `<pad>`, whose position is read).
    TokenClassifier(&'static [&'static str]),
}

/// Which of the last layer's token states a head reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum HeadPooling {
    /// The first token's ([CLS], `<s>`).
    First,
    /// The mean over the sequence's tokens (ModernBERT's `mean`).
    Mean,
    /// Every token's: a token classifier's logits, one row per token.
    Tokens,
}

/// A classification head: the pooled last-layer state through a dense
/// layer, a nonlinearity (and a norm, for ModernBERT) and the output layer,
/// giving one logit per label; a token classifier's has the output layer
/// alone. (Dropout, which transformers also applies in training, does
/// nothing at inference.)
pub(crate) struct ClassifierHead {
    pooling: HeadPooling,
    /// The dense layer and its nonlinearity, where the head has them.
    dense: Option<(Linear, Nonlinearity)>,
    norm: Option<LayerNorm>,
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
        let Some(shape) = super::find(model_type)
            .and_then(|f| f.head)
            .map(|h| h.shape)
        else {
            return Err(format!(
                "refscore has no sequence-classification head for model_type '{model_type}' yet (it has: {})",
                super::with_heads().join(", ")
            ));
        };
        ClassifierHead::of_shape(shape, config, weights, labels)
    }

    /// Loads the head of `model_type`'s `*ForTokenClassification` with
    /// `labels` outputs: logits for every token.
    pub(crate) fn load_tokens(
        model_type: &str,
        config: &str,
        weights: VarBuilder,
        labels: usize,
    ) -> Result<ClassifierHead> {
        let Some(shape) = super::find(model_type).and_then(|f| f.token_head) else {
            return Err(format!(
                "refscore has no token-classification head for model_type '{model_type}' yet (it has: {})",
                super::with_token_heads().join(", ")
            ));
        };
        let mut head = ClassifierHead::of_shape(shape, config, weights, labels)?;
        head.pooling = HeadPooling::Tokens;
        Ok(head)
    }

    fn of_shape(
        shape: HeadShape,
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
        let mut pooling = HeadPooling::First;
        let mut norm = None;
        // (dense, its nonlinearity, output layer), as each architecture's
        // *ForSequenceClassification names and orders them.
        let (dense, out) = match shape {
            HeadShape::BertPooler(prefixes) => {
                let pooler = prefixes
                    .iter()
                    .map(|p| format!("{p}.pooler.dense"))
                    .find(|name| weights.contains_tensor(&format!("{name}.weight")))
                    .unwrap_or_else(|| format!("{}.pooler.dense", prefixes[0]));
                (
                    Some((linear(&pooler, h, h)?, Nonlinearity::Tanh)),
                    linear("classifier", h, labels)?,
                )
            }
            HeadShape::RobertaHead => (
                Some((linear("classifier.dense", h, h)?, Nonlinearity::Tanh)),
                linear("classifier.out_proj", h, labels)?,
            ),
            HeadShape::PreClassifier => (
                Some((linear("pre_classifier", h, h)?, Nonlinearity::Relu)),
                linear("classifier", h, labels)?,
            ),
            HeadShape::ContextPooler => {
                let width = c.pooler_hidden_size.unwrap_or(h);
                let act = c.pooler_hidden_act.as_deref().unwrap_or("gelu");
                (
                    Some((linear("pooler.dense", h, width)?, Nonlinearity::named(act)?)),
                    linear("classifier", width, labels)?,
                )
            }
            HeadShape::ModernBert => {
                pooling = match c.classifier_pooling.as_deref().unwrap_or("cls") {
                    "cls" => HeadPooling::First,
                    "mean" => HeadPooling::Mean,
                    other => {
                        return Err(format!("classifier_pooling '{other}' is not cls or mean"))
                    }
                };
                let dense = if c.classifier_bias {
                    linear("head.dense", h, h)?
                } else {
                    candle_nn::linear_no_bias(h, h, weights.pp("head.dense"))
                        .map_err(|e| format!("the classification head's head.dense: {e}"))?
                };
                let eps = c.norm_eps.unwrap_or(1e-5);
                let missing =
                    |e: candle_core::Error| format!("the classification head's head.norm: {e}");
                let weight = weights.get(h, "head.norm.weight").map_err(missing)?;
                norm = Some(if c.norm_bias {
                    LayerNorm::new(
                        weight,
                        weights.get(h, "head.norm.bias").map_err(missing)?,
                        eps,
                    )
                } else {
                    LayerNorm::new_no_bias(weight, eps)
                });
                let act = c.classifier_activation.as_deref().unwrap_or("gelu");
                (
                    Some((dense, Nonlinearity::named(act)?)),
                    linear("classifier", h, labels)?,
                )
            }
            HeadShape::TokenClassifier(prefixes) => {
                let name = prefixes
                    .iter()
                    .find(|p| weights.contains_tensor(&format!("{p}.weight")))
                    .unwrap_or(&prefixes[0]);
                (None, linear(name, h, labels)?)
            }
        };
        Ok(ClassifierHead {
            pooling,
            dense,
            norm,
            out,
        })
    }

    /// Each sequence's pooled state `[b, hidden]` from the last layer's
    /// token states `[Σ lengths, hidden]` (sequence after sequence), as the
    /// head reads it (a token classifier's: every state, as given). Runs where `states` are, so that on a GPU only the
    /// pooled rows, not every token's state, reach the host.
    pub(crate) fn pool(&self, states: &Tensor, lengths: &[usize]) -> candle_core::Result<Tensor> {
        let starts: Vec<usize> = lengths
            .iter()
            .scan(0, |next, &len| {
                let start = *next;
                *next += len;
                Some(start)
            })
            .collect();
        match self.pooling {
            HeadPooling::Tokens => Ok(states.clone()),
            HeadPooling::First => {
                let rows: Vec<u32> = starts.iter().map(|&s| s as u32).collect();
                let rows = Tensor::from_vec(rows, starts.len(), states.device())?;
                states.index_select(&rows, 0)
            }
            HeadPooling::Mean => {
                let means = starts
                    .iter()
                    .zip(lengths)
                    .map(|(&start, &len)| states.narrow(0, start, len.max(1))?.mean_keepdim(0))
                    .collect::<candle_core::Result<Vec<_>>>()?;
                Tensor::cat(&means, 0)
            }
        }
    }

    /// Logits `[b, labels]` from the pooled states `[b, hidden]` (or each
    /// token's, `[Σ lengths, labels]`, from every state).
    pub(crate) fn logits(&self, pooled: &Tensor) -> candle_core::Result<Tensor> {
        let mut x = match &self.dense {
            Some((dense, nonlinearity)) => nonlinearity.apply(&dense.forward(pooled)?)?,
            None => pooled.clone(),
        };
        if let Some(norm) = &self.norm {
            x = norm.forward(&x)?;
        }
        self.out.forward(&x)
    }
}

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
