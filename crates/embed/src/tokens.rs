//! Tokenisation bounded by the truncation limit, of texts prepared as the
//! reference libraries prepare them: for the sentence embedding as
//! sentence-transformers 6 does (the prompt prepended, lower-cased when the
//! folder says so, never stripped); for BERTScore as bert_score does
//! (stripped, a prefix space for byte-level BPE). The tokenizers library
//! normalises and splits a whole text before it truncates, so one 52 MB
//! answer cost 3.9 GB and 26 s to use its first 256 word-pieces. Here a
//! long text is handed over as a prefix cut at a word boundary, grown
//! (doubled) until the prefix alone yields more word-pieces than the limit
//! keeps; the kept word-pieces are then exactly those of the whole text.
//!
//! Why a cut cannot change the kept pieces: the cut falls right before an
//! ASCII whitespace byte that follows a non-whitespace character, i.e. at
//! the start of a run of whitespace. Every pre-tokenizer allowed here ends
//! a word there: BERT's and the whitespace splitters split on whitespace;
//! byte-level BPE's pattern (RoBERTa, GPT-2) ends letters, digits and
//! punctuation at whitespace and starts a new piece with it; Metaspace
//! (SentencePiece: XLM-R, T5) starts a word at each space. Every normalizer
//! step allowed here maps characters (or graphemes, which never span
//! whitespace) one by one, or only rewrites runs of spaces, which lie
//! wholly after the cut. So the words before the cut, and each word's
//! pieces, are the same in the prefix and the whole text. Once the prefix
//! has more pieces than the limit keeps, the whole text's first pieces are
//! the prefix's first pieces and the text is truncated. Tokenizers for which
//! this does not hold (other pre-tokenizers or normalizers, added tokens
//! containing whitespace) get the whole text, and the summary's
//! `tokenized_bytes` shows it.

use rayon::prelude::*;
use refscore_core::Error;
use tokenizers::normalizers::NormalizerWrapper;
use tokenizers::pre_tokenizers::PreTokenizerWrapper;
use tokenizers::Tokenizer;

/// The word-pieces of one text as the model sees them (truncated,
/// [CLS]/[SEP] included).
#[derive(Debug, Clone, Default)]
pub(crate) struct Tokens {
    /// Word-piece ids.
    pub ids: Vec<u32>,
    /// Whether the text had more word-pieces than the truncation limit.
    pub truncated: bool,
    /// BERTScore's own ids, where it encodes the text otherwise than the
    /// sentence embedding does (no prompt; byte-level BPE's prefix space).
    pub score: Option<Vec<u32>>,
}

impl Tokens {
    /// The ids BERTScore matches and weights.
    pub(crate) fn scored(&self) -> &[u32] {
        self.score.as_deref().unwrap_or(&self.ids)
    }

    /// Tokens run through the model for this text.
    pub(crate) fn len(&self) -> usize {
        self.ids.len() + self.score.as_ref().map_or(0, Vec::len)
    }
}

/// How to hand a tokenizer set up for truncation at `max_len` only a
/// bounded prefix of long texts.
#[derive(Debug, Clone)]
pub(crate) struct Bounds {
    /// Bytes handed over first; also the length below which a text goes
    /// whole.
    first_cut: usize,
    /// Whether cutting at ASCII whitespace provably keeps the first pieces.
    can_cut: bool,
    /// Put before every text (a model's prompt, e5's `query: `).
    prompt: String,
    /// Lower-case texts first (`do_lower_case`).
    lower_case: bool,
    /// Whether an empty text gets the prompt too (sentence-transformers'
    /// prompts do; BERTScore's prefix space does not).
    prompt_on_empty: bool,
    /// Strip texts first (bert_score does; sentence-transformers 6 does not).
    strip: bool,
}

/// Bytes per word-piece assumed for the first prefix (English averages about
/// 4-5); only a starting point: a prefix that turns out too short is
/// doubled, so no text depends on the guess.
const FIRST_CUT_BYTES_PER_PIECE: usize = 8;

impl Bounds {
    /// The bounds for a tokenizer whose truncation is set to `max_len`,
    /// for texts that get `prompt` in front and are lower-cased when
    /// `lower_case`.
    pub(crate) fn new(
        tokenizer: &Tokenizer,
        max_len: usize,
        prompt: &str,
        lower_case: bool,
    ) -> Bounds {
        Bounds {
            first_cut: max_len.max(16) * FIRST_CUT_BYTES_PER_PIECE,
            can_cut: cuts_are_safe(tokenizer),
            prompt: prompt.to_string(),
            lower_case,
            prompt_on_empty: true,
            strip: false,
        }
    }

    /// The bounds BERTScore encodes texts with when that can differ from
    /// these (see [`Tokens::score`]): bert_score strips the text, puts no
    /// prompt, and gives byte-level BPE tokenizers (RoBERTa, GPT-2) a
    /// prefix space, so a text's first word is encoded as every later one.
    /// `None` when BERTScore surely shares the sentence embedding's ids (no
    /// prompt, and a tokenizer that ignores whitespace at the ends: BERT's).
    /// `gpt2_class`: whether bert_score's tokenizer is GPT-2's class or a
    /// subclass ([`gpt2_class`]), the only ones it gives the prefix space.
    pub(crate) fn for_bertscore(&self, tokenizer: &Tokenizer, gpt2_class: bool) -> Option<Bounds> {
        let pre = tokenizer.get_pre_tokenizer();
        let space = gpt2_class && pre.is_some_and(byte_level_without_prefix_space);
        let ends_matter = !pre.is_some_and(|p| {
            matches!(
                p,
                PreTokenizerWrapper::BertPreTokenizer(_)
                    | PreTokenizerWrapper::Whitespace(_)
                    | PreTokenizerWrapper::WhitespaceSplit(_)
            )
        });
        (ends_matter || !self.prompt.is_empty()).then(|| Bounds {
            prompt: if space { " ".into() } else { String::new() },
            prompt_on_empty: false,
            strip: true,
            ..self.clone()
        })
    }

    /// Tokenises texts in parallel. Returns their tokens and the bytes of
    /// text handed to the tokenizer in all.
    pub(crate) fn encode(
        &self,
        tokenizer: &Tokenizer,
        texts: &[&str],
    ) -> Result<(Vec<Tokens>, u64), Error> {
        let done: Vec<(Tokens, u64)> = texts
            .par_iter()
            .map(|t| self.encode_one(tokenizer, t))
            .collect::<Result<_, _>>()?;
        let bytes = done.iter().map(|(_, b)| b).sum();
        Ok((done.into_iter().map(|(t, _)| t).collect(), bytes))
    }

    /// One text: its tokens and the bytes handed to the tokenizer.
    fn encode_one(&self, tokenizer: &Tokenizer, text: &str) -> Result<(Tokens, u64), Error> {
        // bert_score strips every text (Python's whitespace).
        let text = if self.strip {
            text.trim_matches(is_python_space)
        } else {
            text
        };
        let mut handed = 0u64;
        let mut bound = self.first_cut;
        while self.can_cut && bound < text.len() {
            let Some(cut) = cut_at_or_after(text, bound) else {
                break;
            };
            let tokens = self.encode_whole(tokenizer, &text[..cut])?;
            handed += cut as u64;
            if tokens.truncated {
                return Ok((tokens, handed));
            }
            bound = cut.saturating_mul(2);
        }
        handed += text.len() as u64;
        Ok((self.encode_whole(tokenizer, text)?, handed))
    }

    /// The tokens of a whole (stripped) text, prepared; truncated when the
    /// tokenizer put pieces past the limit into overflowing encodings.
    fn encode_whole(&self, tokenizer: &Tokenizer, text: &str) -> Result<Tokens, Error> {
        let head = if self.prompt_on_empty || !text.is_empty() {
            self.prompt.as_str()
        } else {
            ""
        };
        let prepared: std::borrow::Cow<str> = match (head.is_empty(), self.lower_case) {
            (true, false) => text.into(),
            (false, false) => format!("{head}{text}").into(),
            (_, true) => format!("{head}{text}").to_lowercase().into(),
        };
        let enc = tokenizer
            .encode_fast(prepared.as_ref(), true)
            .map_err(|e| Error::internal(format!("tokenizer: {e}")))?;
        Ok(Tokens {
            truncated: !enc.get_overflowing().is_empty(),
            ids: enc.get_ids().to_vec(),
            score: None,
        })
    }
}

/// A byte-level pre-tokenizer that leaves the first word without the space
/// every later word carries.
/// Whether bert_score encodes with GPT-2's tokenizer class or a subclass
/// (it checks `isinstance(tokenizer, (GPT2Tokenizer, RobertaTokenizer))`):
/// by `tokenizer_config.json`'s class when it names one, else by family
/// ([`crate::family::Family::gpt2_tokenizer`]: DeBERTa v1's tokenizer
/// subclassed GPT-2's in the transformers releases bert_score's baselines
/// were measured with, 4.6 to 4.20). Qwen's and ModernBERT's byte-level
/// tokenizers never did: no prefix space for them.
pub(crate) fn gpt2_class(tokenizer_class: Option<&str>, family: &str) -> bool {
    match tokenizer_class.map(|c| c.strip_suffix("Fast").unwrap_or(c)) {
        Some(class) => matches!(
            class,
            "GPT2Tokenizer"
                | "RobertaTokenizer"
                | "DebertaTokenizer"
                | "BartTokenizer"
                | "LongformerTokenizer"
        ),
        None => crate::family::find(family).is_some_and(|f| f.gpt2_tokenizer),
    }
}

/// Whether the tokenizer is a byte-level BPE that adds no prefix space
/// itself (GPT-2's, RoBERTa's, Qwen's).
pub(crate) fn byte_level_bpe(tokenizer: &Tokenizer) -> bool {
    tokenizer
        .get_pre_tokenizer()
        .is_some_and(byte_level_without_prefix_space)
}

fn byte_level_without_prefix_space(p: &PreTokenizerWrapper) -> bool {
    match p {
        PreTokenizerWrapper::ByteLevel(b) => !b.add_prefix_space,
        PreTokenizerWrapper::Sequence(s) => s.as_ref().iter().any(byte_level_without_prefix_space),
        _ => false,
    }
}

/// Python's `str.isspace`, which `str.strip()` removes: Unicode
/// whitespace and the separators U+001C..U+001F.
fn is_python_space(c: char) -> bool {
    c.is_whitespace() || ('\u{1c}'..='\u{1f}').contains(&c)
}

/// The ids BERTScore gives no weight: bert_score zeroes the tokenizer's
/// `cls_token` and `sep_token` (`cls_sep`, from `tokenizer_config.json`;
/// Qwen's names neither, so its appended `<|endoftext|>` keeps its
/// weight). Without that file, the ids the post-processor adds around
/// every text, found by encoding an empty one.
pub(crate) fn bertscore_specials(
    tokenizer: &Tokenizer,
    cls_sep: Option<&[String]>,
) -> Result<Vec<u32>, Error> {
    match cls_sep {
        Some(names) => Ok(names
            .iter()
            .filter_map(|n| tokenizer.token_to_id(n))
            .collect()),
        None => special_ids(tokenizer),
    }
}

/// The ids the tokenizer's own post-processor adds around every text
/// (`[CLS]` and `[SEP]` for BERT, `<s>` and `</s>` for RoBERTa), found by
/// encoding an empty text rather than by name.
pub(crate) fn special_ids(tokenizer: &Tokenizer) -> Result<Vec<u32>, Error> {
    let empty = tokenizer
        .encode("", true)
        .map_err(|e| Error::config(format!("tokenizer: cannot encode an empty text: {e}")))?;
    Ok(empty.get_ids().to_vec())
}

/// The first ASCII whitespace byte at or after byte `from` that follows a
/// non-whitespace character (the start of a run of whitespace), if any.
fn cut_at_or_after(text: &str, from: usize) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut at = from;
    loop {
        let k = at
            + bytes
                .get(at..)?
                .iter()
                .position(|b| matches!(b, b' ' | b'\t' | b'\n' | b'\r'))?;
        // An ASCII byte is a char boundary, so the text before it is whole.
        match text[..k].chars().next_back() {
            Some(c) if !c.is_whitespace() => return Some(k),
            _ => at = k + 1,
        }
    }
}

/// Whether cutting a text right before ASCII whitespace leaves the pieces
/// before the cut unchanged for this tokenizer: it splits words at
/// whitespace, normalises character by character, and has no added token
/// that contains whitespace (which a cut could split).
fn cuts_are_safe(tokenizer: &Tokenizer) -> bool {
    let splits_at_whitespace = tokenizer
        .get_pre_tokenizer()
        .is_some_and(pre_tokenizer_ends_words_at_whitespace);
    let local = tokenizer.get_normalizer().is_none_or(normalizer_is_local);
    let added_ok = tokenizer
        .get_added_tokens_decoder()
        .values()
        .all(|t| !t.content.chars().any(char::is_whitespace));
    splits_at_whitespace && local && added_ok
}

/// Pre-tokenizers that end a word where a run of whitespace starts.
fn pre_tokenizer_ends_words_at_whitespace(p: &PreTokenizerWrapper) -> bool {
    match p {
        PreTokenizerWrapper::BertPreTokenizer(_)
        | PreTokenizerWrapper::Whitespace(_)
        | PreTokenizerWrapper::WhitespaceSplit(_) => true,
        // Its pattern (GPT-2's) splits letters, digits and punctuation
        // from the whitespace that follows.
        PreTokenizerWrapper::ByteLevel(b) => b.use_regex,
        PreTokenizerWrapper::Metaspace(m) => m.get_split(),
        // Each step only splits the pieces further (none joins them), so
        // one step that ends words there is enough (transformers 5 saves
        // XLM-R's as WhitespaceSplit, then Metaspace).
        PreTokenizerWrapper::Sequence(s) => s
            .as_ref()
            .iter()
            .any(pre_tokenizer_ends_words_at_whitespace),
        _ => false,
    }
}

/// Normalizers that map characters one by one (Unicode normalisation only
/// reorders marks between starters, and whitespace is a starter), or
/// only rewrite runs of spaces (XLM-R's).
fn normalizer_is_local(n: &NormalizerWrapper) -> bool {
    match n {
        NormalizerWrapper::Precompiled(_) => true,
        NormalizerWrapper::Replace(r) => replaces_only_spaces(r),
        NormalizerWrapper::BertNormalizer(_)
        | NormalizerWrapper::StripAccents(_)
        | NormalizerWrapper::NFC(_)
        | NormalizerWrapper::NFD(_)
        | NormalizerWrapper::NFKC(_)
        | NormalizerWrapper::NFKD(_)
        | NormalizerWrapper::Lowercase(_)
        | NormalizerWrapper::Nmt(_) => true,
        NormalizerWrapper::Sequence(s) => s.as_ref().iter().all(normalizer_is_local),
        _ => false,
    }
}

/// Whether a Replace normalizer can only match runs of spaces (XLM-R's
/// `" {2,}"` → `" "`), so that every match lies wholly on one side of a cut
/// at the start of a whitespace run. Its pattern is private: read from its
/// serialised form.
fn replaces_only_spaces(r: &tokenizers::normalizers::Replace) -> bool {
    let Ok(value) = serde_json::to_value(r) else {
        return false;
    };
    match (&value["pattern"]["String"], &value["pattern"]["Regex"]) {
        (serde_json::Value::String(s), _) => !s.is_empty() && s.chars().all(|c| c == ' '),
        (_, serde_json::Value::String(re)) => matches!(re.as_str(), " {2,}" | " +" | "  +"),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_fall_before_ascii_whitespace_only() {
        let text = "ab\u{3000}cd\u{a0}é f\tg";
        assert_eq!(cut_at_or_after(text, 0), Some(text.find(' ').unwrap()));
        let tab = text.find('\t').unwrap();
        assert_eq!(cut_at_or_after(text, tab), Some(tab));
        assert_eq!(cut_at_or_after(text, tab + 1), None);
        assert_eq!(cut_at_or_after(text, text.len() + 5), None);
        // Never inside a run of whitespace: its start, or the next run's.
        let text = "word  \t next  x";
        assert_eq!(cut_at_or_after(text, 0), Some(4));
        assert_eq!(cut_at_or_after(text, 5), Some(12));
        assert_eq!(cut_at_or_after(text, 13), None);
    }
}
