//! Model families: one module per architecture, each implementing
//! [`EncoderModel`], chosen by `config.json`'s `model_type` (the shape of
//! text-embeddings-inference). Adding a family is adding its module and one
//! line in [`FAMILIES`]; tokenisation, pooling, batching, the store and the
//! metrics do not change.

use candle_core::Tensor;
use candle_nn::VarBuilder;
use refscore_core::Error;

use crate::precision::Precision;

mod accelerator;
mod bert;
mod deberta;
mod distilbert;
mod gemma3;
mod head;
mod modernbert;
mod mpnet;
mod ops;
mod padded;
mod qwen3;
mod roberta;
mod rotary;
#[cfg(test)]
mod testing;
mod transformer;

pub use head::CROSS_FAMILIES;
pub(crate) use head::{ClassifierHead, SUPPORTED as HEAD_FAMILIES};

type Result<T> = candle_core::Result<T>;

/// One loaded encoder: token ids in, hidden states of chosen layers out.
/// Exists so that the batching around it ([`crate::encoder::Encoder`]) is
/// written once for every architecture.
pub(crate) trait EncoderModel: Send + Sync {
    /// Width of the hidden states.
    fn hidden(&self) -> usize;

    /// Number of layers: the deepest tap.
    fn layers(&self) -> usize;

    /// Whether [`EncoderModel::forward_packed`] runs on this device and
    /// precision: sequences then go in back to back, with no padding.
    fn packs(&self) -> bool;

    /// `ids`: all sequences back to back; `lengths`: each one's length;
    /// `taps`: the layers whose output to return, ascending (0 = the
    /// embeddings, [`EncoderModel::layers`] = the last); `second`: for a
    /// pair of texts (a cross-encoder's input), each sequence's first token
    /// of the second text, whose token type is 1 (`None`: type 0 for all).
    /// Returns one `[Σ lengths, hidden]` per tap; layers past the last tap
    /// are not run. Only when [`EncoderModel::packs`].
    fn forward_packed(
        &self,
        ids: &[u32],
        lengths: &[usize],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Vec<Tensor>>;

    /// `ids`: `[b, t]` u32, each row padded after its `lengths` entry.
    /// Returns one `[Σ lengths, hidden]` per tap, padding removed, as
    /// [`EncoderModel::forward_packed`].
    fn forward_padded(
        &self,
        ids: &Tensor,
        lengths: &[usize],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Vec<Tensor>>;
}

/// Whether `second` puts any token in a second segment: a pair whose
/// second text starts before its sequence ends.
pub(crate) fn has_second_segment(lengths: &[usize], second: Option<&[usize]>) -> bool {
    second.is_some_and(|s| s.iter().zip(lengths).any(|(s, l)| s < l))
}

/// Builds a family's model from `config.json`'s text and the weights.
pub(crate) type Loader =
    fn(&str, VarBuilder, Precision) -> std::result::Result<Box<dyn EncoderModel>, String>;

/// The families refscore runs, by `model_type`.
const FAMILIES: &[(&str, Loader)] = &[
    ("bert", bert::load),
    ("deberta", deberta::load_v1),
    ("deberta-v2", deberta::load_v2),
    ("distilbert", distilbert::load),
    ("gemma3_text", gemma3::load),
    ("gte", rotary::load_gte),
    ("modernbert", modernbert::load),
    ("mpnet", mpnet::load),
    ("new", rotary::load_new),
    ("nomic_bert", rotary::load_nomic),
    ("qwen3", qwen3::load),
    ("roberta", roberta::load),
    ("xlm-roberta", roberta::load),
];

/// The position id of a sequence's first token in a `model_type`'s
/// family (BERT counts from 0; RoBERTa, XLM-R and MPNet from
/// `pad_token_id + 1`), so a folder's usable length is known before the
/// weights load.
pub(crate) fn first_position(model_type: Option<&str>, pad_token_id: Option<u32>) -> usize {
    match model_type {
        Some("mpnet" | "roberta" | "xlm-roberta") => after_padding(pad_token_id),
        _ => 0,
    }
}

/// The first position of families that count positions past the padding
/// id (fairseq's convention; the id is 1 when the config names none).
fn after_padding(pad_token_id: Option<u32>) -> usize {
    pad_token_id.unwrap_or(1) as usize + 1
}

/// The `model_type` values refscore runs, for messages.
pub(crate) fn supported() -> Vec<&'static str> {
    FAMILIES.iter().map(|(name, _)| *name).collect()
}

/// Whether refscore has a family for `model_type`.
pub(crate) fn has(model_type: &str) -> bool {
    FAMILIES.iter().any(|(name, _)| *name == model_type)
}

/// Loads the family `model_type` names ([`crate::ModelFiles::family`]: a
/// folder whose config names none is taken as BERT there).
pub(crate) fn load(
    model_type: &str,
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, Error> {
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
