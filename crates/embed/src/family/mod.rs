//! Model families: one module per architecture, each implementing
//! [`EncoderModel`], chosen by `config.json`'s `model_type` (the shape of
//! text-embeddings-inference). Adding a family is adding its module and one
//! [`Family`] entry in [`FAMILIES`], which says everything the code around
//! the encoder asks of a family (where positions start, how bert_score
//! tokenises it, whether it is a decoder, its classification head);
//! tokenisation, pooling, batching, the store and the metrics do not
//! change.

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
mod packed_attention;
mod padded;
mod qwen3;
mod relative;
mod roberta;
mod rotary;
mod t5;
#[cfg(test)]
mod testing;
mod transformer;

pub(crate) use head::ClassifierHead;
use head::HeadShape;

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

/// What refscore knows of one `model_type`, in one place: how to load its
/// encoder and what the code around the encoder asks of it.
pub(crate) struct Family {
    /// `config.json`'s `model_type`.
    pub model_type: &'static str,
    /// Builds the encoder.
    pub load: Loader,
    /// Where its position ids start.
    pub positions: Positions,
    /// Whether bert_score takes its tokenizer for GPT-2's class (or a
    /// subclass) when `tokenizer_config.json` names no class: DeBERTa v1's
    /// subclassed GPT-2's in the transformers releases bert_score's
    /// baselines were measured with.
    pub gpt2_tokenizer: bool,
    /// Whether it is a decoder: its sequence classifiers read the last
    /// token, with padding rules of their own, so it has no head here.
    pub decoder: bool,
    /// Its `*ForSequenceClassification` head, where refscore has one.
    pub head: Option<Head>,
    /// Its `*ForTokenClassification` head, where refscore has one.
    pub token_head: Option<HeadShape>,
}

/// A family's sequence-classification head.
#[derive(Clone, Copy)]
pub(crate) struct Head {
    /// The family's name in `--cross-model`'s help.
    pub name: &'static str,
    /// How the head is built ([`ClassifierHead::load`]).
    pub shape: HeadShape,
}

/// Where a family's position ids start.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Positions {
    /// At 0 (BERT; families with rotary positions, which have no table).
    FromZero,
    /// Past the padding id (fairseq's convention: RoBERTa, XLM-R, MPNet).
    AfterPadding,
    /// Nowhere: only relative positions, so a text may have any length
    /// (T5; `n_positions` in its configs limits nothing).
    Relative,
}

const fn family(model_type: &'static str, load: Loader) -> Family {
    Family {
        model_type,
        load,
        positions: Positions::FromZero,
        gpt2_tokenizer: false,
        decoder: false,
        head: None,
        token_head: None,
    }
}

/// A `*ForTokenClassification`'s `classifier` alone (BERT, RoBERTa, XLM-R,
/// DistilBERT, DeBERTa, T5).
const LINEAR_TOKENS: Option<HeadShape> = Some(HeadShape::TokenClassifier(&["classifier"]));

const fn head(name: &'static str, shape: HeadShape) -> Option<Head> {
    Some(Head { name, shape })
}

/// The families refscore runs, by `model_type`.
const FAMILIES: &[Family] = &[
    Family {
        head: head("BERT", HeadShape::BertPooler(&["bert"])),
        token_head: LINEAR_TOKENS,
        ..family("bert", bert::load)
    },
    Family {
        gpt2_tokenizer: true,
        head: head("DeBERTa", HeadShape::ContextPooler),
        token_head: LINEAR_TOKENS,
        ..family("deberta", deberta::load_v1)
    },
    Family {
        head: head("DeBERTa", HeadShape::ContextPooler),
        token_head: LINEAR_TOKENS,
        ..family("deberta-v2", deberta::load_v2)
    },
    Family {
        head: head("DistilBERT", HeadShape::PreClassifier),
        token_head: LINEAR_TOKENS,
        ..family("distilbert", distilbert::load)
    },
    Family {
        decoder: true,
        ..family("gemma3_text", gemma3::load)
    },
    Family {
        head: head("GTE", HeadShape::BertPooler(&["gte", "new"])),
        ..family("gte", rotary::load_gte)
    },
    Family {
        head: head("ModernBERT", HeadShape::ModernBert),
        // ModernBertForTokenClassification: its prediction head on every
        // token (LettuceDetect's span detector).
        token_head: Some(HeadShape::ModernBert),
        ..family("modernbert", modernbert::load)
    },
    Family {
        positions: Positions::AfterPadding,
        ..family("mpnet", mpnet::load)
    },
    Family {
        head: head("GTE", HeadShape::BertPooler(&["gte", "new"])),
        ..family("new", rotary::load_new)
    },
    Family {
        head: head("NomicBERT", HeadShape::BertPooler(&["nomic_bert", "bert"])),
        ..family("nomic_bert", rotary::load_nomic)
    },
    Family {
        decoder: true,
        ..family("qwen3", qwen3::load)
    },
    Family {
        positions: Positions::AfterPadding,
        gpt2_tokenizer: true,
        head: head("RoBERTa", HeadShape::RobertaHead),
        token_head: LINEAR_TOKENS,
        ..family("roberta", roberta::load)
    },
    Family {
        positions: Positions::Relative,
        head: head(
            "T5 (HHEM-2.1-Open)",
            HeadShape::TokenClassifier(&["t5.classifier", "classifier"]),
        ),
        token_head: LINEAR_TOKENS,
        ..family("t5", t5::load)
    },
    Family {
        positions: Positions::AfterPadding,
        head: head("XLM-R", HeadShape::RobertaHead),
        token_head: LINEAR_TOKENS,
        ..family("xlm-roberta", roberta::load)
    },
];

/// Decoder `model_type`s refscore has no family for, named so that a
/// decoder's classifier is refused as one.
const OTHER_DECODERS: &[&str] = &["gemma3", "llama", "mistral", "qwen2"];

/// The family of `model_type`, if refscore has one.
pub(crate) fn find(model_type: &str) -> Option<&'static Family> {
    FAMILIES.iter().find(|f| f.model_type == model_type)
}

/// Whether `model_type` is a decoder (with a family here or not).
pub(crate) fn is_decoder(model_type: &str) -> bool {
    find(model_type).map_or(OTHER_DECODERS.contains(&model_type), |f| f.decoder)
}

/// The `model_type`s with a sequence-classification head, for messages.
pub(crate) fn with_heads() -> Vec<&'static str> {
    FAMILIES
        .iter()
        .filter(|f| f.head.is_some())
        .map(|f| f.model_type)
        .collect()
}

/// The `model_type`s with a token-classification head, for messages.
pub(crate) fn with_token_heads() -> Vec<&'static str> {
    FAMILIES
        .iter()
        .filter(|f| f.token_head.is_some())
        .map(|f| f.model_type)
        .collect()
}

/// Each `model_type` with a head and the family name `--cross-model`'s help
/// gives it, so that a test can check the help names every family the code
/// accepts (a family given a head and missing from the help fails it).
pub fn cross_families() -> Vec<(&'static str, &'static str)> {
    FAMILIES
        .iter()
        .filter_map(|f| f.head.map(|h| (f.model_type, h.name)))
        .collect()
}

/// The position id of a sequence's first token in a `model_type`'s
/// family (BERT counts from 0; RoBERTa, XLM-R and MPNet from
/// `pad_token_id + 1`), so a folder's usable length is known before the
/// weights load.
pub(crate) fn first_position(model_type: Option<&str>, pad_token_id: Option<u32>) -> usize {
    match model_type.and_then(find).map(|f| f.positions) {
        Some(Positions::AfterPadding) => after_padding(pad_token_id),
        _ => 0,
    }
}

/// How many tokens a text may have in a `model_type`'s family, from
/// `config.json`'s `max_position_embeddings` (512 where it names none):
/// those past the first position, or any number where the family has only
/// relative positions.
pub(crate) fn usable_positions(
    model_type: Option<&str>,
    max_position_embeddings: Option<usize>,
    pad_token_id: Option<u32>,
) -> usize {
    if model_type.and_then(find).map(|f| f.positions) == Some(Positions::Relative) {
        return usize::MAX;
    }
    max_position_embeddings
        .unwrap_or(512)
        .saturating_sub(first_position(model_type, pad_token_id))
}

/// The most tokens `files`' model reads: its usable positions
/// ([`usable_positions`]: any number for a relative-only family such as T5),
/// except for a DeBERTa with relative positions only, which has no position
/// table and reads longer sequences ([`deberta::RELATIVE_ONLY_LIMIT`]) though
/// its `max_positions` stay those of its config for every other use.
pub(crate) fn token_limit(files: &crate::model::ModelFiles) -> usize {
    match files.family.as_str() {
        "deberta" | "deberta-v2" => deberta::token_limit(&files.config)
            .unwrap_or(files.max_positions)
            .max(files.max_positions),
        _ => files.max_positions,
    }
}

/// The first position of families that count positions past the padding
/// id (fairseq's convention; the id is 1 when the config names none).
fn after_padding(pad_token_id: Option<u32>) -> usize {
    pad_token_id.unwrap_or(1) as usize + 1
}

/// The `model_type` values refscore runs, for messages.
pub(crate) fn supported() -> Vec<&'static str> {
    FAMILIES.iter().map(|f| f.model_type).collect()
}

/// Whether refscore has a family for `model_type`.
pub(crate) fn has(model_type: &str) -> bool {
    find(model_type).is_some()
}

/// Loads the family `model_type` names ([`crate::ModelFiles::family`]: a
/// folder whose config names none is taken as BERT there).
pub(crate) fn load(
    model_type: &str,
    config: &str,
    weights: VarBuilder,
    precision: Precision,
) -> std::result::Result<Box<dyn EncoderModel>, Error> {
    let family = find(model_type).ok_or_else(|| {
        Error::config(format!(
            "model_type '{model_type}' has no model family in refscore (it runs: {})",
            supported().join(", ")
        ))
    })?;
    (family.load)(config, weights, precision).map_err(Error::config)
}

#[cfg(test)]
mod registry_tests {
    use super::*;

    /// One entry a `model_type`; a decoder has no encoder head; the
    /// decoders without a family are not families.
    #[test]
    fn the_registry_is_consistent() {
        let types = supported();
        let mut unique = types.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(
            unique.len(),
            types.len(),
            "a model_type listed twice: {types:?}"
        );
        for f in FAMILIES.iter().filter(|f| f.decoder) {
            assert!(
                f.head.is_none() && f.token_head.is_none(),
                "{} is a decoder with an encoder head",
                f.model_type
            );
        }
        for t in OTHER_DECODERS {
            assert!(
                find(t).is_none(),
                "{t} has a family: mark it a decoder there"
            );
            assert!(is_decoder(t));
        }
        assert!(is_decoder("qwen3") && !is_decoder("bert"));
        assert_eq!(first_position(Some("xlm-roberta"), None), 2);
        assert_eq!(first_position(Some("bert"), Some(0)), 0);
        assert_eq!(first_position(None, None), 0);
        assert_eq!(usable_positions(Some("roberta"), Some(514), None), 512);
        assert_eq!(usable_positions(Some("t5"), Some(512), None), usize::MAX);
        assert_eq!(usable_positions(None, None, None), 512);
    }
}
