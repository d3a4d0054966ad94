//! Token classifiers (`*ForTokenClassification`): a model that reads a
//! (context, answer) pair together, as a cross-encoder does, and labels
//! every token (LettuceDetect's span detectors: ModernBERT, label 1 =
//! hallucinated). The encoder body is the family's, batched as for the
//! cross-encoders; the head is the architecture's own
//! ([`crate::family::ClassifierHead::load_tokens`]), on every token's
//! last-layer state; the result is each token's softmax over the labels, as
//! `torch.softmax(model(**tokenizer(context, answer)).logits, -1)` gives
//! it. How a detector turns those into a score or spans is its own
//! aggregation, not this module's.

use std::path::Path;

use candle_core::DType;
use candle_nn::VarBuilder;
use rayon::prelude::*;
use refscore_core::Error;

use super::folder::{gives_token_types, labels, ClassifierConfig};
use super::pairs::{EncodedPair, PairTokenizer};
use super::{CrossOptions, CrossReport};
use crate::encoder::Encoder;
use crate::family::ClassifierHead;
use crate::model::{read_folder, ModelFiles, ModelKind};

/// One pair's token labels.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenPrediction {
    /// The ids the model read, special tokens included.
    pub ids: Vec<u32>,
    /// Each token's probabilities over the labels, in label order.
    pub probabilities: Vec<Vec<f32>>,
    /// Whether truncation at the model's limit cut either text.
    pub truncated: bool,
}

/// A loaded token classifier.
pub struct TokenClassifier {
    files: ModelFiles,
    architecture: String,
    labels: Vec<String>,
    tokenizer: PairTokenizer,
    encoder: Encoder,
    head: ClassifierHead,
    batch_tokens: usize,
}

impl TokenClassifier {
    /// Reads `dir` (a `*ForTokenClassification` folder of a family with a
    /// token head; exit 78 naming the reason for anything else) and loads
    /// its tokenizer, encoder and head.
    pub fn load(dir: &Path, options: &CrossOptions) -> Result<TokenClassifier, Error> {
        let config_path = dir.join("config.json");
        let refuse = |why: String| Error::config(format!("{}: {why}", config_path.display()));
        let text = std::fs::read_to_string(&config_path).map_err(|e| {
            Error::config(format!(
                "{}: not a usable token-classifier folder: {e}",
                config_path.display()
            ))
        })?;
        let c: ClassifierConfig = serde_json::from_str(&text).map_err(|e| refuse(e.to_string()))?;
        let architecture = c.architectures.first().cloned().unwrap_or_default();
        if !architecture.ends_with("ForTokenClassification") {
            return Err(refuse(format!(
                "'{architecture}' is not a *ForTokenClassification checkpoint"
            )));
        }
        let labels = labels(&c).map_err(refuse)?;
        let files = read_folder(dir, false)?;
        if files.kind != ModelKind::Transformer {
            return Err(refuse("a static embedding table has no token head".into()));
        }
        let token_types = gives_token_types(dir, files.tokenizer_class.as_deref())?;
        let tokenizer = PairTokenizer::new(&files, files.max_seq_length, token_types)?;
        let encoder = Encoder::load(&files, &options.device, options.precision)?;
        let weights = files.dir.join("model.safetensors");
        // SAFETY: as for the encoder's weights: mapped read-only, never
        // written by refscore.
        let vb = unsafe {
            VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, &options.device)
        }
        .map_err(|e| Error::config(format!("{}: {e}", weights.display())))?;
        let head = ClassifierHead::load_tokens(&files.family, &files.config, vb, labels.len())
            .map_err(|e| Error::config(format!("{}: {e}", weights.display())))?;
        Ok(TokenClassifier {
            files,
            architecture,
            labels,
            tokenizer,
            encoder,
            head,
            batch_tokens: options.batch_tokens,
        })
    }

    /// The label names, in order.
    pub fn labels(&self) -> &[String] {
        &self.labels
    }

    /// `config.json`'s `architectures` entry.
    pub fn architecture(&self) -> &str {
        &self.architecture
    }

    /// Tokens a pair may have, special tokens included.
    pub fn max_len(&self) -> usize {
        self.files.max_seq_length
    }

    /// Each (first, second) pair's tokens and their label probabilities:
    /// the pair in the tokenizer's template, truncated `longest_first` at
    /// the model's limit.
    pub fn predict(
        &self,
        pairs: &[(&str, &str)],
        report: &mut CrossReport,
    ) -> Result<Vec<TokenPrediction>, Error> {
        let encoded: Vec<EncodedPair> = pairs
            .par_iter()
            .map(|(a, b)| self.tokenizer.encode(a, b))
            .collect::<Result<_, _>>()?;
        report.pairs += encoded.len() as u64;
        report.truncated += encoded.iter().filter(|e| e.truncated).count() as u64;
        let probabilities = self.probabilities(&encoded, report)?;
        Ok(encoded
            .into_iter()
            .zip(probabilities)
            .map(|(e, probabilities)| TokenPrediction {
                ids: e.ids,
                probabilities,
                truncated: e.truncated,
            })
            .collect())
    }

    /// The folder's files and settings.
    pub(crate) fn files(&self) -> &ModelFiles {
        &self.files
    }

    /// Each input's per-token label probabilities, in `encoded`'s order,
    /// for inputs a caller tokenised its own way (a span detector's
    /// prompt and answer). Counts inputs, tokens and forward time; pairs
    /// and truncations are the caller's.
    pub(crate) fn probabilities(
        &self,
        encoded: &[EncodedPair],
        report: &mut CrossReport,
    ) -> Result<Vec<Vec<Vec<f32>>>, Error> {
        if let Some(k) = encoded.iter().position(|e| e.ids.is_empty()) {
            return Err(Error::config(format!(
                "{}: the tokenizer gives no token at all for pair {k}: a token classifier needs one",
                self.files.dir.display()
            )));
        }
        super::forward_in_length_groups(
            &self.encoder,
            self.batch_tokens,
            self.files.max_seq_length,
            encoded,
            report,
            |group, states, _| {
                let logits: Vec<Vec<f32>> = self
                    .head
                    .logits(states)
                    .and_then(|l| l.to_vec2())
                    .map_err(|e| Error::internal(format!("token-classification head: {e}")))?;
                let mut rows = logits.into_iter();
                Ok(group
                    .iter()
                    .map(|&k| {
                        rows.by_ref()
                            .take(encoded[k].ids.len())
                            .map(softmax)
                            .collect()
                    })
                    .collect())
            },
        )
    }
}

/// One token's logits as probabilities, in f64 as the last step before the
/// f32 result.
fn softmax(logits: Vec<f32>) -> Vec<f32> {
    let top = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let exp: Vec<f64> = logits.iter().map(|&v| f64::from(v - top).exp()).collect();
    let sum: f64 = exp.iter().sum();
    exp.iter().map(|v| (v / sum) as f32).collect()
}
