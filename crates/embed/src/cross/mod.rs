//! Cross-encoders: a sequence-classification model reads a pair of texts
//! together and scores it (an STS or relevance score, or NLI's entailment,
//! neutral and contradiction). The encoder body is a family's, batched the
//! same way as for embeddings ([`crate::encoder::Encoder`]); the head is
//! the architecture's own ([`crate::family::ClassifierHead`]); the scores
//! are what sentence-transformers' `CrossEncoder.predict` returns.

mod entailment;
mod folder;
mod hhem;
mod nli;
mod pair_store;
mod pairs;
mod stage;
mod tokens;

use std::time::{Duration, Instant};

use candle_core::{DType, Device};
use candle_nn::VarBuilder;
use rayon::prelude::*;
use refscore_core::Error;

pub use entailment::NliEntailment;
pub use folder::{CrossFolder, CrossInput, ScoreActivation};
pub use hhem::{PairPrompt, HHEM_CONSISTENT, HHEM_PROMPT};
pub use nli::{NliLabels, NliScores};
use pairs::{EncodedPair, PairTokenizer};
pub use stage::{cross_fields, CrossCapability, CrossPlan, CrossStage};
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

/// Counters of the work done, for the summary.
#[derive(Debug, Clone, Default)]
pub struct CrossReport {
    /// Pairs run through the model.
    pub pairs: u64,
    /// Of them, pairs truncated at the model's limit.
    pub truncated: u64,
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
}

impl CrossEncoder {
    /// Loads `folder`'s tokenizer, encoder and head.
    pub fn load(folder: CrossFolder, options: &CrossOptions) -> Result<CrossEncoder, Error> {
        let files = &folder.files;
        let max_len = files.max_seq_length;
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

    /// Scores each (first, second) pair as `CrossEncoder.predict` does: the
    /// logits through the folder's activation, then with `softmax` (and
    /// more than one label) a softmax over the labels.
    pub fn predict(
        &self,
        pairs: &[(&str, &str)],
        softmax: bool,
        report: &mut CrossReport,
    ) -> Result<Vec<PairPrediction>, Error> {
        let encoded: Vec<EncodedPair> = pairs
            .par_iter()
            .map(|(a, b)| match &self.folder.input {
                CrossInput::Pair => self.tokenizer.encode(a, b),
                CrossInput::Prompt(prompt) => self.tokenizer.encode_one(&prompt.fill(a, b)),
            })
            .collect::<Result<_, _>>()?;
        if let Some(k) = encoded.iter().position(|e| e.ids.is_empty()) {
            return Err(Error::config(format!(
                "{}: the tokenizer gives no token at all for pair {k} (two empty texts and no special tokens): a cross-encoder needs one",
                self.folder.files.dir.display()
            )));
        }
        let labels = self.folder.labels.len();
        forward_in_length_groups(
            &self.encoder,
            self.batch_tokens,
            self.max_len,
            &encoded,
            report,
            |group, states, lengths| {
                let logits: Vec<Vec<f32>> = self
                    .head
                    .pool(states, lengths)
                    .and_then(|pooled| self.head.logits(&pooled))
                    .and_then(|l| l.to_vec2())
                    .map_err(|e| Error::internal(format!("classification head: {e}")))?;
                Ok(group
                    .iter()
                    .zip(logits)
                    .map(|(&k, logits)| PairPrediction {
                        values: self.scores(&logits, softmax && labels > 1),
                        truncated: encoded[k].truncated,
                    })
                    .collect())
            },
        )
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
/// the group's order. Counts pairs, truncations, tokens and forward time in
/// `report`; the values come back in `encoded`'s order. One loop for every
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
            let e = &encoded[k];
            report.pairs += 1;
            report.truncated += u64::from(e.truncated);
            report.tokens += e.ids.len() as u64;
            out[k] = Some(value);
        }
        start += count;
    }
    Ok(out
        .into_iter()
        .map(|v| v.expect("every pair through the head"))
        .collect())
}
