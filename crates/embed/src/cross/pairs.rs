//! Pairs of texts as a cross-encoder reads them: the tokenizer's pair
//! template (`[CLS] A [SEP] B [SEP]`, RoBERTa's `<s> A </s></s> B </s>`...)
//! with its token types, truncated `longest_first` at the model's limit as
//! transformers' fast tokenizers do, and whether anything was cut.

use refscore_core::Error;
use tokenizers::{EncodeInput, Tokenizer};

use crate::encoder::load_tokenizer;
use crate::model::ModelFiles;

/// One pair, tokenised.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct EncodedPair {
    /// The ids, special tokens included.
    pub ids: Vec<u32>,
    /// The first token of token type 1 (the second text's), or the length
    /// where the template gives every token type 0.
    pub second: usize,
    /// Whether truncation cut either text.
    pub truncated: bool,
}

/// Tokenises pairs of texts for one cross-encoder.
pub(crate) struct PairTokenizer {
    /// Each text alone, untruncated, without special tokens.
    pieces: Tokenizer,
    /// The pair's truncation and template.
    pairs: Tokenizer,
    /// Whether the model is given the template's token types; without
    /// them every token is type 0 ([`super::CrossFolder::token_types`]).
    token_types: bool,
}

impl PairTokenizer {
    /// The folder's tokenizer, truncating pairs at `max_len` tokens, giving
    /// the model the template's token types where `token_types` says.
    pub(crate) fn new(
        files: &ModelFiles,
        max_len: usize,
        token_types: bool,
    ) -> Result<PairTokenizer, Error> {
        let pairs = load_tokenizer(files, max_len)?;
        let mut pieces = pairs.clone();
        pieces
            .with_truncation(None)
            .map_err(|e| Error::config(format!("{}: {e}", files.dir.display())))?;
        Ok(PairTokenizer {
            pieces,
            pairs,
            token_types,
        })
    }

    /// The number of tokens `text` has alone, without special tokens.
    pub(crate) fn count(&self, text: &str) -> Result<usize, Error> {
        self.pieces
            .encode(EncodeInput::Single(text.into()), false)
            .map(|e| e.len())
            .map_err(|e| Error::internal(format!("tokenising a text: {e}")))
    }

    /// Tokenises one text (a recipe's template, or a pair filled into a
    /// folder's prompt) with the single template, truncated at its end as
    /// `tokenizer(text, truncation=True, max_length=L)` truncates it; every
    /// token is type 0.
    pub(crate) fn encode_single(&self, text: &str) -> Result<EncodedPair, Error> {
        let bad = |e: tokenizers::Error| Error::internal(format!("tokenising a text: {e}"));
        let a = self
            .pieces
            .encode(EncodeInput::Single(text.into()), false)
            .map_err(bad)?;
        let length = a.len();
        let one = self.pairs.post_process(a, None, true).map_err(bad)?;
        // The template's own special tokens (a special token written in
        // the text, as MiniCheck's eos between chunk and claim, is the
        // text's).
        let added = self
            .pairs
            .get_post_processor()
            .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, false));
        Ok(EncodedPair {
            ids: one.get_ids().to_vec(),
            second: one.len(),
            truncated: one.len().saturating_sub(added) < length,
        })
    }

    /// Tokenises (`first`, `second`) as the tokenizer's pair template says.
    pub(crate) fn encode(&self, first: &str, second: &str) -> Result<EncodedPair, Error> {
        let bad = |e: tokenizers::Error| Error::internal(format!("tokenising a pair: {e}"));
        let piece = |text: &str| self.pieces.encode(EncodeInput::Single(text.into()), false);
        let (a, b) = (piece(first).map_err(bad)?, piece(second).map_err(bad)?);
        let lengths = (a.len(), b.len());
        // Truncation (longest_first, room left for the template's special
        // tokens) and the template, as `encode((first, second), true)`.
        let pair = self.pairs.post_process(a, Some(b), true).map_err(bad)?;
        // Whatever is not a special token the template added came from the
        // texts: fewer such tokens than the texts had means a cut.
        let specials: usize = pair
            .get_special_tokens_mask()
            .iter()
            .map(|&m| m as usize)
            .sum();
        let truncated = pair.len() - specials < lengths.0 + lengths.1;
        let second = match self.token_types {
            true => pair.get_type_ids().iter().position(|&t| t == 1),
            false => None,
        }
        .unwrap_or(pair.len());
        Ok(EncodedPair {
            ids: pair.get_ids().to_vec(),
            second,
            truncated,
        })
    }
}
