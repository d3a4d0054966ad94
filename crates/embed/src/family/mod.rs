//! Model families: one module per architecture, each implementing
//! [`EncoderModel`], chosen by `config.json`'s `model_type` (the shape of
//! text-embeddings-inference). Adding a family is adding its module and one
//! line in [`FAMILIES`]; tokenisation, pooling, batching, the store and the
//! metrics do not change.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use refscore_batch::Error;

use crate::precision::Precision;

pub(crate) mod bert;

type Result<T> = candle_core::Result<T>;

/// One loaded encoder: token ids in, the last layer's hidden states out.
/// Exists so that the batching around it ([`crate::encoder::Encoder`]) is
/// written once for every architecture.
pub(crate) trait EncoderModel: Send + Sync {
    /// Width of the hidden states.
    fn hidden(&self) -> usize;

    /// Whether [`EncoderModel::forward_packed`] runs on this device and
    /// precision: sequences then go in back to back, with no padding.
    fn packs(&self) -> bool;

    /// `ids`: all sequences back to back; `lengths`: each one's length.
    /// Returns `[Σ lengths, hidden]`. Only when [`EncoderModel::packs`].
    fn forward_packed(&self, ids: &[u32], lengths: &[usize]) -> Result<Tensor>;

    /// `ids`: `[b, t]` u32, each row padded after its `lengths` entry.
    /// Returns `[b·t, hidden]`.
    fn forward_padded(&self, ids: &Tensor, lengths: &[usize]) -> Result<Tensor>;
}

/// Builds a family's model from `config.json`'s text and the weights.
type Loader = fn(&str, VarBuilder, Precision) -> std::result::Result<Box<dyn EncoderModel>, String>;

/// The families refscore runs, by `model_type`.
const FAMILIES: &[(&str, Loader)] = &[("bert", bert::load)];

/// The `model_type` values refscore runs, for messages.
pub(crate) fn supported() -> Vec<&'static str> {
    FAMILIES.iter().map(|(name, _)| *name).collect()
}

/// Whether refscore has a family for `model_type`.
pub(crate) fn has(model_type: &str) -> bool {
    FAMILIES.iter().any(|(name, _)| *name == model_type)
}

/// Loads the family `model_type` names (a model folder without one is
/// taken as BERT, as sentence-transformers' oldest folders are).
pub(crate) fn load(
    model_type: Option<&str>,
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, Error> {
    let model_type = model_type.unwrap_or("bert");
    let (_, loader) = FAMILIES
        .iter()
        .find(|(name, _)| *name == model_type)
        .ok_or_else(|| {
            Error::config(format!(
                "model_type '{model_type}' has no model family in refscore (it runs: {})",
                supported().join(", ")
            ))
        })?;
    loader(config, weights, precision).map_err(Error::config)
}
