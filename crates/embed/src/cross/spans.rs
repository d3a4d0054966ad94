//! Span detectors: a token classifier (LettuceDetect's ModernBERT
//! detectors, label 1 = hallucinated) run the way LettuceDetect 0.2.3's
//! `TransformerDetector.predict(context=[reference], answer=output,
//! question=question)` runs it, so that its scores and spans are the
//! authors'. The input is the detector's English prompt around the
//! reference (one passage) and the question, paired with the answer;
//! truncation `only_first` at min(4096, the model's limit) cuts the
//! prompt's end and never the answer (an answer that leaves the prompt no
//! room is refused, as LettuceDetect's tokenizer call fails); the labelled
//! tokens are the answer's and the closing separator; a token is
//! hallucinated where label 1 is the argmax; consecutive hallucinated
//! tokens make one span, its confidence their largest label-1
//! probability; the row's score is the largest label-1 probability over
//! the labelled tokens (the per-example probability of LettuceDetect's
//! example-level evaluation).

use std::path::Path;

use rayon::prelude::*;
use refscore_core::Error;
use tokenizers::{
    EncodeInput, Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy,
};

use super::pairs::EncodedPair;
use super::tokens::TokenClassifier;
use super::{CrossOptions, CrossReport};
use crate::encoder::load_tokenizer;

/// LettuceDetect's `max_length` default: the input's tokens, whatever
/// more the model could read.
pub const DETECTOR_MAX_LENGTH: usize = 4096;

/// What the fingerprint and the pair store name this inference by, so a
/// change to it reads no earlier scores.
pub(crate) const DETECTOR: &str = "lettucedetect-0.2.3-transformer-en";

/// One unsupported span of an output.
#[derive(Debug, Clone, PartialEq)]
pub struct Span {
    /// First character (Unicode scalar, as Python counts) of the span,
    /// counted from the answer's first token as LettuceDetect counts it.
    pub start: u32,
    /// One past its last character.
    pub end: u32,
    /// The output's characters `start..end`.
    pub text: String,
    /// The largest label-1 probability of its tokens.
    pub confidence: f32,
}

/// One row's detection.
#[derive(Debug, Clone, PartialEq)]
pub struct Detection {
    /// Label 1's probability of each labelled token (the answer's tokens,
    /// then the closing separator).
    pub probabilities: Vec<f32>,
    /// The largest of them: the row's score.
    pub score: f32,
    /// The unsupported spans, in order.
    pub spans: Vec<Span>,
    /// Whether truncation cut the prompt (the reference's end).
    pub truncated: bool,
}

/// One row's outcome: a detection, or why the detector cannot read the
/// row (the answer's tokens, which LettuceDetect refuses to cut).
pub type Detected = Result<Detection, Refused>;

/// A row the detector cannot read: its answer leaves the prompt no room.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Refused {
    /// The answer's tokens.
    pub answer_tokens: usize,
    /// The input's limit.
    pub max_length: usize,
}

impl Refused {
    /// The row's one-line error.
    pub fn message(&self) -> String {
        format!(
            "cross_score: the output has {} tokens, which leave the reference no room in the span detector's {} (LettuceDetect cuts the reference, never the answer): not scored",
            self.answer_tokens, self.max_length
        )
    }
}

/// A token classifier run as LettuceDetect's span detector.
pub struct SpanDetector {
    classifier: TokenClassifier,
    /// The pair's template, truncating `only_first` at `max_length`.
    pairs: Tokenizer,
    /// Texts alone, untruncated, without special tokens.
    pieces: Tokenizer,
    max_length: usize,
    /// Special tokens the pair template adds.
    added: usize,
    /// Special tokens the single template adds.
    added_single: usize,
}

impl SpanDetector {
    /// Loads `dir` (a two-label `*ForTokenClassification` folder).
    pub fn load(dir: &Path, options: &CrossOptions) -> Result<SpanDetector, Error> {
        let classifier = TokenClassifier::load(dir, options)?;
        if classifier.labels().len() != 2 {
            return Err(Error::config(format!(
                "{}: {} has {} labels; LettuceDetect's inference reads two (0 supported, 1 hallucinated)",
                dir.join("config.json").display(),
                classifier.architecture(),
                classifier.labels().len()
            )));
        }
        let files = classifier.files();
        let max_length = detector_max_length(files.max_seq_length);
        let mut pairs = load_tokenizer(files, max_length)?;
        let bad = |e: tokenizers::Error| {
            Error::config(format!(
                "{}: {e}",
                files.dir.join("tokenizer.json").display()
            ))
        };
        pairs
            .with_truncation(Some(TruncationParams {
                direction: TruncationDirection::Right,
                max_length,
                strategy: TruncationStrategy::OnlyFirst,
                stride: 0,
            }))
            .map_err(bad)?;
        let mut pieces = pairs.clone();
        pieces.with_truncation(None).map_err(bad)?;
        let added = |pair| {
            pairs
                .get_post_processor()
                .map_or(0, |p| tokenizers::PostProcessor::added_tokens(p, pair))
        };
        let (added, added_single) = (added(true), added(false));
        Ok(SpanDetector {
            classifier,
            pairs,
            pieces,
            max_length,
            added,
            added_single,
        })
    }

    /// The input's limit in tokens.
    pub fn max_length(&self) -> usize {
        self.max_length
    }

    /// Detects the unsupported spans of each (prompt, answer) pair, the
    /// prompt built by [`prompt`]. A row the detector cannot read is a
    /// [`Refused`], not an error.
    pub fn detect(
        &self,
        rows: &[(&str, &str)],
        report: &mut CrossReport,
    ) -> Result<Vec<Detected>, Error> {
        let encoded: Vec<Result<Encoded, Refused>> = rows
            .par_iter()
            .map(|(prompt, answer)| self.encode(prompt, answer))
            .collect::<Result<_, _>>()?;
        let inputs: Vec<EncodedPair> = encoded
            .iter()
            .filter_map(|e| e.as_ref().ok().map(|e| e.pair.clone()))
            .collect();
        let mut probabilities = self.classifier.probabilities(&inputs, report)?.into_iter();
        Ok(encoded
            .into_iter()
            .zip(rows)
            .map(|(e, (_, answer))| {
                let e = e?;
                report.pairs += 1;
                report.truncated += u64::from(e.pair.truncated);
                let probs = probabilities.next().expect("one per input");
                Ok(spans_of(&e, &probs, answer))
            })
            .collect())
    }

    /// One pair as `tokenizer(prompt, answer, truncation="only_first",
    /// max_length=L, return_offsets_mapping=True)` gives it, with where
    /// the labelled tokens start.
    fn encode(&self, prompt: &str, answer: &str) -> Result<Result<Encoded, Refused>, Error> {
        let bad = |e: tokenizers::Error| Error::internal(format!("tokenising a pair: {e}"));
        let count = |t: &str| {
            self.pieces
                .encode_char_offsets(EncodeInput::Single(t.into()), false)
                .map(|e| e.len())
                .map_err(bad)
        };
        let (prompt_tokens, answer_tokens) = (count(prompt)?, count(answer)?);
        // transformers reads an empty second text as none: the prompt alone
        // in the single template.
        let input = match answer.is_empty() {
            true => EncodeInput::Single(prompt.into()),
            false => EncodeInput::Dual(prompt.into(), answer.into()),
        };
        let added = match answer.is_empty() {
            true => self.added_single,
            false => self.added,
        };
        let total = prompt_tokens + answer_tokens + added;
        // only_first cuts the prompt; it fails where the prompt would have
        // to lose all its tokens or more.
        if total > self.max_length && prompt_tokens <= total - self.max_length {
            return Ok(Err(Refused {
                answer_tokens,
                max_length: self.max_length,
            }));
        }
        let pair = self.pairs.encode_char_offsets(input, true).map_err(bad)?;
        let ids = pair.get_ids().to_vec();
        let answer_start = ids.len().saturating_sub(answer_tokens + 1);
        Ok(Ok(Encoded {
            pair: EncodedPair {
                second: ids.len(),
                truncated: total > self.max_length,
                ids,
            },
            offsets: pair.get_offsets().to_vec(),
            answer_start,
        }))
    }
}

/// The limit a detector reads its input at: LettuceDetect's 4096, or less
/// where the model reads less.
pub(crate) fn detector_max_length(model_limit: usize) -> usize {
    DETECTOR_MAX_LENGTH.min(model_limit)
}

/// One pair tokenised for the detector.
struct Encoded {
    pair: EncodedPair,
    /// Each token's character offsets in its own text.
    offsets: Vec<(usize, usize)>,
    /// The first labelled token: the answer's first.
    answer_start: usize,
}

/// LettuceDetect's spans from one pair's token probabilities.
fn spans_of(e: &Encoded, probs: &[Vec<f32>], answer: &str) -> Detection {
    let labelled = e.answer_start..probs.len();
    let probabilities: Vec<f32> = probs[labelled.clone()].iter().map(|p| p[1]).collect();
    let score = probabilities
        .iter()
        .copied()
        .fold(f32::NEG_INFINITY, f32::max);
    let base = match e.offsets.get(e.answer_start) {
        Some(&(start, _)) => start as i64,
        None => 0,
    };
    let chars: Vec<char> = answer.chars().collect();
    let text = |start: i64, end: i64| -> String {
        let clamp = |v: i64| v.clamp(0, chars.len() as i64) as usize;
        let (s, t) = (clamp(start), clamp(end));
        chars[s..t.max(s)].iter().collect()
    };
    let mut spans = Vec::new();
    let mut open: Option<(i64, i64, f32)> = None;
    for i in labelled {
        let (start, end) = e.offsets[i];
        if start == end {
            continue;
        }
        let (start, end) = (start as i64 - base, end as i64 - base);
        // torch.argmax over two labels: label 1 only where it is larger.
        if probs[i][1] > probs[i][0] {
            let p = probs[i][1];
            open = Some(match open {
                None => (start, end, p),
                Some((s, _, c)) => (s, end, c.max(p)),
            });
        } else if let Some((s, t, c)) = open.take() {
            spans.push(span(s, t, c, text(s, t)));
        }
    }
    if let Some((s, t, c)) = open {
        spans.push(span(s, t, c, text(s, t)));
    }
    Detection {
        probabilities,
        score,
        spans,
        truncated: e.pair.truncated,
    }
}

fn span(start: i64, end: i64, confidence: f32, text: String) -> Span {
    Span {
        start: start.max(0) as u32,
        end: end.max(0) as u32,
        text,
        confidence,
    }
}

/// LettuceDetect's English prompt around one passage, the reference: its
/// question-answering prompt where the row has a question (an empty one
/// included), its summary prompt where it has none. The prompt is the
/// model's input format (LettuceDetect's `qa_prompt_en.txt` and
/// `summary_prompt_en.txt`, filled as `PromptUtils.format_context` fills
/// them), so it is kept word for word.
pub fn prompt(reference: &str, question: Option<&str>) -> String {
    let context = format!("passage 1: {reference}");
    match question {
        None => format!("Summarize the following text:\n{context}\noutput:"),
        Some(q) => format!(
            "Briefly answer the following question:\n{q}\nBear in mind that your response should be strictly based on the following 1 passages:\n{context}\nIn case the passages do not contain the necessary information to answer the question, please reply with: \"Unable to answer based on given passages.\"\noutput:"
        ),
    }
}
