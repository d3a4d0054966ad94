//! Cross-encoders: a sequence-classification model reads a pair of texts
//! together and scores it (an STS or relevance score, or NLI's entailment,
//! neutral and contradiction). The encoder body is a family's, batched the
//! same way as for embeddings ([`crate::encoder::Encoder`]); the head is
//! the architecture's own ([`crate::family::ClassifierHead`]); the scores
//! are what sentence-transformers' `CrossEncoder.predict` returns.

mod entailment;
mod folder;
mod hhem;
mod memo;
mod nli;
mod pair_store;
mod pairs;
pub mod recipe;
mod span_stage;
mod spans;
mod stage;
mod stage_plan;
mod tokens;

use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use rayon::prelude::*;
use refscore_core::Error;

pub use entailment::{FactReading, NliEntailment};
pub use folder::{CrossFolder, CrossHead, CrossInput, ScoreActivation};
pub use hhem::{PairPrompt, HHEM_CONSISTENT, HHEM_PROMPT};
pub use nli::{NliLabels, NliScores};
use pairs::{EncodedPair, PairTokenizer};
use recipe::{Input, Piece, ScoreLabels};
pub use recipe::{Recipe, DEFAULT_RECIPE, FOLDER_RECIPE};
pub use span_stage::{spans_field, SpanStage, CROSS_SPANS};
pub use spans::{prompt as span_prompt, Detected, Detection, Refused, Span, SpanDetector};
pub use stage::{cross_fields, CrossCapability, CrossPlan, CrossStage};
pub use stage_plan::CrossStagePlan;
pub use tokens::{TokenClassifier, TokenPrediction};

use crate::encoder::Encoder;
use crate::family::ClassifierHead;
use crate::precision::Precision;

/// How to run a cross-encoder.
#[derive(Debug, Clone)]
pub struct CrossOptions {
    /// Where the forward runs.
    pub device: Device,
    /// `--precision`: the number format of the encoder's matrix products.
    pub precision: Precision,
    /// Tokens per forward batch, as for embeddings.
    pub batch_tokens: usize,
    /// Bytes of recent pairs' scores kept across batches (`--embed-cache-mb`),
    /// so a pair repeated in the run is scored once per direction.
    pub cache_bytes: usize,
    /// `--embed-cache`: a folder keeping pair scores between runs.
    pub store: Option<std::path::PathBuf>,
}

impl Default for CrossOptions {
    /// The CPU, fp32, and the embedding stage's batch size.
    fn default() -> Self {
        CrossOptions {
            device: Device::Cpu,
            precision: Precision::Fp32,
            batch_tokens: crate::EmbedOptions::default().batch_tokens,
            cache_bytes: crate::EmbedOptions::default().cache_bytes,
            store: None,
        }
    }
}

/// One pair's scores: the activation applied, and with `softmax` a
/// distribution over the labels.
#[derive(Debug, Clone, PartialEq)]
pub struct PairPrediction {
    /// One value per label, in label order.
    pub values: Vec<f32>,
    /// Whether truncation at the model's limit cut either text.
    pub truncated: bool,
}

/// One pair's support under a recipe with a one-value score: the score of
/// each chunk of the premise against the hypothesis, aggregated.
#[derive(Debug, Clone, PartialEq)]
pub struct Support {
    /// The aggregated score.
    pub score: f32,
    /// The premise's chunks.
    pub chunks: usize,
    /// Whether truncation at the limit still cut an input (a hypothesis,
    /// or with it the template's end, longer than the room left).
    pub truncated: bool,
}

/// Counters of the work done, for the summary.
#[derive(Debug, Clone, Default)]
pub struct CrossReport {
    /// Pairs run through the model.
    pub pairs: u64,
    /// Of them, pairs truncated at the model's limit.
    pub truncated: u64,
    /// Pairs whose premise the recipe cut into more than one chunk.
    pub chunked: u64,
    /// Inputs run through the model (a pair's chunks; one per pair
    /// without chunking).
    pub inputs: u64,
    /// Pairs (per direction) answered from the cache of earlier batches.
    pub reused: u64,
    /// Pairs (per direction) answered from `--embed-cache`, written by an
    /// earlier run.
    pub from_store: u64,
    /// Tokens run, padding excluded.
    pub tokens: u64,
    /// Time in the encoder's forward pass and head.
    pub forward: Duration,
}

/// A loaded cross-encoder.
pub struct CrossEncoder {
    folder: CrossFolder,
    tokenizer: PairTokenizer,
    encoder: Encoder,
    head: ClassifierHead,
    max_len: usize,
    batch_tokens: usize,
    /// The special tokens the recipe's template names, by key.
    specials: Vec<(&'static str, String)>,
    /// The value a one-value score reads.
    score: Option<ScoreLabels>,
}

impl CrossEncoder {
    /// Loads `folder`'s tokenizer, encoder and head.
    pub fn load(folder: CrossFolder, options: &CrossOptions) -> Result<CrossEncoder, Error> {
        let files = &folder.files;
        let max_len = folder.max_length();
        let specials = folder
            .recipe
            .specials()
            .into_iter()
            .map(|k| {
                folder::special_token(&files.dir, k)
                    .map(|t| (k, t))
                    .ok_or_else(|| {
                        Error::config(format!(
                            "{}: tokenizer_config.json sets no {k}",
                            files.dir.display()
                        ))
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let score = folder
            .recipe
            .score_labels(&folder.labels)
            .map_err(|why| Error::config(format!("{}: {why}", files.dir.display())))?;
        let tokenizer = PairTokenizer::new(files, max_len, folder.token_types)?;
        let encoder = Encoder::load(files, &options.device, options.precision)?;
        let weights = files.dir.join("model.safetensors");
        // SAFETY: as for the encoder's weights: mapped read-only, never
        // written by refscore.
        // The head sits beside the encoder, on its device, so the last
        // layer's states never leave it whole.
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, &options.device)
        }
        .map_err(|e| Error::config(format!("{}: {e}", weights.display())))?;
        let head = ClassifierHead::load(&files.family, &files.config, vb, folder.labels.len())
            .map_err(|e| Error::config(format!("{}: {e}", weights.display())))?;
        Ok(CrossEncoder {
            folder,
            tokenizer,
            encoder,
            head,
            max_len,
            batch_tokens: options.batch_tokens,
            specials,
            score,
        })
    }

    /// The folder and what it says of itself.
    pub fn folder(&self) -> &CrossFolder {
        &self.folder
    }

    /// Tokens a pair may have, special tokens included.
    pub fn max_len(&self) -> usize {
        self.max_len
    }

    /// The model's input for (premise, hypothesis) as the recipe builds it:
    /// `"pair"` is the folder's own reading of a pair (the tokenizer's pair
    /// template, or the prompt the folder names: HHEM-2.1-Open's).
    fn encode_input(&self, premise: &str, hypothesis: &str) -> Result<EncodedPair, Error> {
        match &self.folder.recipe.input {
            Input::Pair => match &self.folder.input {
                CrossInput::Pair => self.tokenizer.encode(premise, hypothesis),
                CrossInput::Prompt(prompt) => self
                    .tokenizer
                    .encode_single(&prompt.fill(premise, hypothesis)),
            },
            Input::Template(pieces) => {
                let mut text = String::new();
                for p in pieces {
                    match p {
                        Piece::Text(t) => text.push_str(t),
                        Piece::Premise => text.push_str(premise),
                        Piece::Hypothesis => text.push_str(hypothesis),
                        Piece::Special(k) => text.push_str(
                            &self
                                .specials
                                .iter()
                                .find(|(key, _)| key == k)
                                .expect("checked at load")
                                .1,
                        ),
                    }
                }
                self.tokenizer.encode_single(&text)
            }
        }
    }

    /// Each input's logits, in order: sorted by length into forward
    /// batches. Counts the tokens and the forward time.
    fn logits(
        &self,
        encoded: &[EncodedPair],
        report: &mut CrossReport,
    ) -> Result<Vec<Vec<f32>>, Error> {
        if let Some(k) = encoded.iter().position(|e| e.ids.is_empty()) {
            return Err(Error::config(format!(
                "{}: the tokenizer gives no token at all for pair {k} (two empty texts and no special tokens): a cross-encoder needs one",
                self.folder.files.dir.display()
            )));
        }
        forward_in_length_groups(
            &self.encoder,
            self.batch_tokens,
            self.max_len,
            encoded,
            report,
            |_, states, lengths| {
                self.head
                    .pool(states, lengths)
                    .and_then(|pooled| self.head.logits(&pooled))
                    .and_then(|l| l.to_vec2())
                    .map_err(|e| Error::internal(format!("classification head: {e}")))
            },
        )
    }

    /// Scores each (first, second) pair as `CrossEncoder.predict` does: the
    /// logits through the folder's activation, then with `softmax` (and
    /// more than one label) a softmax over the labels. The input is the
    /// recipe's (the plain pair by default).
    pub fn predict(
        &self,
        pairs: &[(&str, &str)],
        softmax: bool,
        report: &mut CrossReport,
    ) -> Result<Vec<PairPrediction>, Error> {
        let encoded: Vec<EncodedPair> = pairs
            .par_iter()
            .map(|(a, b)| self.encode_input(a, b))
            .collect::<Result<_, _>>()?;
        let labels = self.folder.labels.len();
        let logits = self.logits(&encoded, report)?;
        Ok(encoded
            .iter()
            .zip(logits)
            .map(|(e, logits)| {
                report.pairs += 1;
                report.truncated += u64::from(e.truncated);
                PairPrediction {
                    values: self.scores(&logits, softmax && labels > 1),
                    truncated: e.truncated,
                }
            })
            .collect())
    }

    /// Whether the recipe reads one value (a checker's support) rather
    /// than the folder's labels.
    pub fn scores_support(&self) -> bool {
        self.score.is_some()
    }

    /// Each (premise, hypothesis) pair's support under the recipe: the
    /// premise cut into the recipe's chunks, each chunk with the whole
    /// hypothesis built into one input, each input's logits read as the
    /// recipe says, the chunks' values aggregated. Refused for a recipe
    /// whose score is the folder's labels.
    pub fn support(
        &self,
        pairs: &[(&str, &str)],
        report: &mut CrossReport,
    ) -> Result<Vec<Support>, Error> {
        let Some(score) = self.score else {
            return Err(Error::internal(format!(
                "recipe '{}' reads the folder's labels, not one support score",
                self.folder.recipe.name()
            )));
        };
        let recipe = &self.folder.recipe;
        let max_len = self.max_len;
        let count = |t: &str| self.tokenizer.count(t).unwrap_or(0).min(max_len);
        // Each distinct premise is cut once (a reference shared by many
        // outputs is common).
        let mut distinct: Vec<&str> = pairs.iter().map(|(p, _)| *p).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let cut: std::collections::HashMap<&str, Vec<String>> = distinct
            .par_iter()
            .map(|&premise| {
                let chunks = match recipe.chunking() {
                    Some(c) => c.chunks(premise, &count),
                    None => vec![premise.to_string()],
                };
                (premise, chunks)
            })
            .collect();
        let chunks: Vec<&Vec<String>> = pairs.iter().map(|(p, _)| &cut[p]).collect();
        let inputs: Vec<(usize, &str, &str)> = chunks
            .iter()
            .zip(pairs)
            .enumerate()
            .flat_map(|(k, (cs, (_, h)))| cs.iter().map(move |c| (k, c.as_str(), *h)))
            .collect();
        let encoded: Vec<EncodedPair> = inputs
            .par_iter()
            .map(|(_, c, h)| self.encode_input(c, h))
            .collect::<Result<_, _>>()?;
        let logits = self.logits(&encoded, report)?;
        let mut values: Vec<Vec<f64>> = vec![Vec::new(); pairs.len()];
        let mut truncated = vec![false; pairs.len()];
        for (((k, _, _), e), l) in inputs.iter().zip(&encoded).zip(&logits) {
            values[*k].push(score.apply(l));
            truncated[*k] |= e.truncated;
        }
        Ok(values
            .into_iter()
            .zip(truncated)
            .map(|(v, truncated)| {
                report.pairs += 1;
                report.chunked += u64::from(v.len() > 1);
                report.truncated += u64::from(truncated);
                Support {
                    score: recipe.aggregate().of(&v) as f32,
                    chunks: v.len(),
                    truncated,
                }
            })
            .collect())
    }

    /// One pair's logits through the activation (and softmax), in f64 as
    /// the last step before the f32 result.
    fn scores(&self, logits: &[f32], softmax: bool) -> Vec<f32> {
        let activated: Vec<f64> = logits
            .iter()
            .map(|&x| self.folder.activation.apply(f64::from(x)))
            .collect();
        if !softmax {
            return activated.iter().map(|&v| v as f32).collect();
        }
        let top = activated.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let exp: Vec<f64> = activated.iter().map(|v| (v - top).exp()).collect();
        let sum: f64 = exp.iter().sum();
        exp.iter().map(|v| (v / sum) as f32).collect()
    }
}

/// Runs `encoded` through `encoder` longest first, in the groups its batch
/// plan sizes, and gives each group's last-layer states (padding removed)
/// and lengths to `head`, which returns one value per pair of the group, in
/// the group's order. Counts inputs, tokens and forward time in `report`
/// (pairs and truncations are the caller's: a pair may be several inputs);
/// the values come back in `encoded`'s order. One loop for every
/// head on a cross-encoder's body (sequence and token classifiers).
pub(crate) fn forward_in_length_groups<T>(
    encoder: &Encoder,
    batch_tokens: usize,
    max_len: usize,
    encoded: &[EncodedPair],
    report: &mut CrossReport,
    mut head: impl FnMut(&[usize], &candle_core::Tensor, &[usize]) -> Result<Vec<T>, Error>,
) -> Result<Vec<T>, Error> {
    let mut order: Vec<usize> = (0..encoded.len()).collect();
    order.sort_by_key(|&k| std::cmp::Reverse(encoded[k].ids.len()));
    let plan = encoder.batch_plan(batch_tokens, max_len);
    let mut out: Vec<Option<T>> = (0..encoded.len()).map(|_| None).collect();
    let last = encoder.layers();
    let mut start = 0;
    while start < order.len() {
        let count = plan.next(order[start..].iter().map(|&k| encoded[k].ids.len()));
        let group = &order[start..start + count];
        let seqs: Vec<&[u32]> = group.iter().map(|&k| encoded[k].ids.as_slice()).collect();
        let second: Vec<usize> = group.iter().map(|&k| encoded[k].second).collect();
        let lengths: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        let t0 = Instant::now();
        let states = encoder.forward_on_device(&seqs, Some(&second), &[last])?;
        let values = head(group, &states[0], &lengths)?;
        report.forward += t0.elapsed();
        for (&k, value) in group.iter().zip(values) {
            report.inputs += 1;
            report.tokens += encoded[k].ids.len() as u64;
            out[k] = Some(value);
        }
        start += count;
    }
    Ok(out
        .into_iter()
        .map(|v| v.expect("every pair through the head"))
        .collect())
}
