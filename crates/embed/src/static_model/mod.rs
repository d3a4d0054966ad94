//! Static embedding models (model2vec, sentence-transformers'
//! `StaticEmbedding`): each token's vector is looked up in a table and the
//! text's vector is their mean, with no transformer at all. BERTScore then
//! matches the tokens' own table rows: the word-level variant, without
//! context (docs/metrics.md#static-models).

mod layout;
mod table;

use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use refscore_core::Error;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

pub(crate) use layout::detect;
pub use layout::{StaticLayout, StaticRules};

use crate::math::{normalize, Embedded};
use crate::model::{AfterPooling, ModelFiles};
use crate::sentence_head::SentenceHead;
use crate::text_model::TextModel;
use crate::tokens::Tokens;
use crate::{EmbedOptions, EmbedReport};
use table::Table;

/// A loaded static model and the rules its vectors follow.
pub(crate) struct StaticModel {
    rules: StaticRules,
    tokenizer: Tokenizer,
    table: Table,
    /// model2vec drops its unknown token from every text.
    unknown: Option<u32>,
    /// model2vec cuts a text to this many characters before tokenising
    /// (`max_length` × the median token length).
    char_cut: Option<usize>,
    /// Tokens kept per text (`None`: all).
    max_length: Option<usize>,
    /// model2vec's `normalize`.
    normalize: bool,
    /// The modules after the embedding (sentence-transformers' Normalize,
    /// Dense) and `--truncate-dim`.
    head: SentenceHead,
    after: Vec<AfterPooling>,
    truncate_dim: Option<usize>,
}

impl StaticModel {
    /// Loads the static folder `files` with the settings of `options`;
    /// settings that only a transformer has are refused.
    pub(crate) fn load(
        files: &ModelFiles,
        layout: &StaticLayout,
        options: &EmbedOptions,
    ) -> Result<StaticModel, Error> {
        refuse_transformer_settings(files, options)?;
        let path = &layout.tokenizer;
        let mut tokenizer = Tokenizer::from_file(path)
            .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
        tokenizer.with_padding(None);
        let max_length = match options.max_seq_length {
            Some(0) => return Err(Error::usage("--max-seq-length 0: must be at least 1")),
            Some(n) => Some(n),
            None => layout.max_length,
        };
        if layout.rules == StaticRules::Model2Vec || options.max_seq_length.is_some() {
            // model2vec sets the truncation of each call itself;
            // sentence-transformers keeps the saved tokenizer's, unless
            // the user asks for another limit.
            tokenizer
                .with_truncation(max_length.map(|n| TruncationParams {
                    direction: TruncationDirection::Right,
                    max_length: n,
                    strategy: TruncationStrategy::LongestFirst,
                    stride: 0,
                }))
                .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
        }
        let vocab = tokenizer.get_vocab_size(true);
        let table = Table::load(layout, vocab)?;
        let (unknown, char_cut) = match layout.rules {
            StaticRules::Model2Vec => (
                unknown_id(&tokenizer),
                max_length.map(|n| n.saturating_mul(median_token_chars(&tokenizer))),
            ),
            StaticRules::SentenceTransformers => (None, None),
        };
        let mut head = SentenceHead::load(files, layout.width)?;
        if let Some(dims) = options.truncate_dim {
            head.truncate(dims)?;
        }
        Ok(StaticModel {
            rules: layout.rules,
            tokenizer,
            table,
            unknown,
            char_cut,
            max_length,
            normalize: layout.normalize,
            head,
            after: files.after_pooling.clone(),
            truncate_dim: options.truncate_dim,
        })
    }

    /// The sentence vector of one text as its library computes it, at unit
    /// length for the cosine.
    fn sentence(&self, ids: &[u32]) -> Vec<f32> {
        let width = self.table.width;
        let mut mean = vec![0f32; width];
        if !ids.is_empty() {
            let mut sum = vec![0f64; width];
            for &id in ids {
                sum.iter_mut()
                    .zip(self.table.row(id))
                    .for_each(|(s, v)| *s += *v as f64);
            }
            let n = ids.len() as f64;
            mean = sum.iter().map(|s| (s / n) as f32).collect();
        }
        // A half-precision table gives a half-precision mean (numpy's and
        // torch's result type), normalised in single precision and rounded
        // again.
        let round = |v: &mut [f32]| {
            if self.table.half {
                v.iter_mut()
                    .for_each(|x| *x = half::f16::from_f32(*x).to_f32());
            }
        };
        round(&mut mean);
        if self.normalize {
            let norm = mean.iter().map(|x| x * x).sum::<f32>().sqrt() + 1e-32;
            mean.iter_mut().for_each(|x| *x /= norm);
            round(&mut mean);
        }
        let mut pooled = self.head.apply(mean);
        normalize(&mut pooled);
        pooled
    }

    /// The ids of one text as its library keeps them, and the bytes
    /// handed to the tokenizer.
    fn encode(&self, text: &str) -> Result<(Tokens, u64), Error> {
        let (text, cut) = match self.char_cut {
            Some(n) => match text.char_indices().nth(n) {
                Some((at, _)) => (&text[..at], true),
                None => (text, false),
            },
            None => (text, false),
        };
        // No offsets: nothing here reads them, and skipping them is
        // model2vec's own `encode_batch_fast`.
        let enc = self
            .tokenizer
            .encode_fast(text, false)
            .map_err(|e| Error::internal(format!("tokenizing: {e}")))?;
        let mut ids = enc.get_ids().to_vec();
        if let Some(unk) = self.unknown {
            ids.retain(|&id| id != unk);
        }
        let tokens = Tokens {
            ids,
            truncated: cut || !enc.get_overflowing().is_empty(),
            score: None,
        };
        Ok((tokens, text.len() as u64))
    }
}

impl TextModel for StaticModel {
    fn tokenize(&self, texts: &[&str]) -> Result<(Vec<Tokens>, u64), Error> {
        let encoded = texts
            .par_iter()
            .map(|t| self.encode(t))
            .collect::<Result<Vec<_>, _>>()?;
        let bytes = encoded.iter().map(|(_, b)| b).sum();
        let tokens = encoded.into_iter().map(|(t, _)| t).collect();
        Ok((tokens, bytes))
    }

    fn embed(
        &mut self,
        which: &[usize],
        mut tokens: Vec<Option<Tokens>>,
        out: &mut [Option<Arc<Embedded>>],
        report: &mut EmbedReport,
    ) -> Result<(), Error> {
        let t0 = Instant::now();
        let work: Vec<(usize, Tokens)> = which
            .iter()
            .map(|&k| (k, tokens[k].take().unwrap_or_default()))
            .collect();
        for (_, t) in &work {
            report.texts_truncated += u64::from(t.truncated);
            report.tokens += t.ids.len() as u64;
        }
        report.padded_tokens += work.iter().map(|(_, t)| t.ids.len() as u64).sum::<u64>();
        let built: Vec<(usize, Embedded)> = work
            .into_par_iter()
            .map(|(k, t)| {
                let pooled = self.sentence(&t.ids);
                (
                    k,
                    Embedded {
                        ids: t.ids,
                        pooled,
                        tokens: Vec::new(),
                    },
                )
            })
            .collect();
        report.texts_embedded += built.len() as u64;
        for (k, e) in built {
            out[k] = Some(Arc::new(e));
        }
        report.forward_launch += t0.elapsed();
        Ok(())
    }

    /// A token's vector is its id's alone: a token the other text also has
    /// is its own best match (cosine 1; 0 for a zero row, which matches
    /// nothing), and a repeated id is matched once. Only the ids one text
    /// has and the other lacks go through the similarity matrix: most of
    /// a paraphrase's tokens are shared.
    fn best_matches(&self, c: &Embedded, r: &Embedded) -> (Vec<f32>, Vec<f32>) {
        let distinct = |ids: &[u32]| {
            let mut v = ids.to_vec();
            v.sort_unstable();
            v.dedup();
            v
        };
        let (uc, ur) = (distinct(&c.ids), distinct(&r.ids));
        // The best of each distinct id of `one` against all of `other`.
        let best_of = |one: &[u32], other: &[u32]| -> Vec<f32> {
            let missing: Vec<u32> = one
                .iter()
                .copied()
                .filter(|id| other.binary_search(id).is_err())
                .collect();
            // The rows gathered into the matrices gemm multiplies.
            let rows = |ids: &[u32]| -> Vec<f32> {
                ids.iter()
                    .flat_map(|&id| self.table.unit_row(id))
                    .copied()
                    .collect()
            };
            let (found, _) =
                crate::math::best_matches(&rows(&missing), &rows(other), self.table.width);
            one.iter()
                .map(|id| match missing.binary_search(id) {
                    Ok(k) => found[k],
                    Err(_) if self.table.is_zero(*id) => 0.0,
                    Err(_) => 1.0,
                })
                .collect()
        };
        let (bc, br) = (best_of(&uc, &ur), best_of(&ur, &uc));
        let spread = |ids: &[u32], distinct: &[u32], best: &[f32]| -> Vec<f32> {
            ids.iter()
                .map(|id| best[distinct.binary_search(id).expect("a distinct id")])
                .collect()
        };
        (spread(&c.ids, &uc, &bc), spread(&r.ids, &ur, &br))
    }

    fn special(&self) -> &[u32] {
        &[]
    }

    fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    fn score_layer(&self) -> usize {
        0
    }

    fn describe(&self) -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(map) = serde_json::json!({
            "pooling": "mean",
            "after_pooling": self.after.iter().map(AfterPooling::describe).collect::<Vec<_>>(),
            "static": {
                "rules": self.rules.name(),
                "vocabulary": self.tokenizer.get_vocab_size(true),
                "width": self.table.width,
                "normalize": self.normalize,
                "half_precision": self.table.half,
                "weights": self.table.weighted,
                "mapping": self.table.mapped,
            },
            "max_seq_length": self.max_length,
            "truncate_dim": self.truncate_dim,
            "precision": "fp32",
        }) else {
            unreachable!("an object")
        };
        map
    }
}

/// Settings that mean something only for a transformer: refused by name
/// rather than ignored.
fn refuse_transformer_settings(files: &ModelFiles, options: &EmbedOptions) -> Result<(), Error> {
    let name = files.family.as_str();
    let refused = [
        (options.layer.is_some(), "--layer", "has no layers"),
        (
            options.prompt.is_some(),
            "--prompt/--prompt-name",
            "takes no prompt",
        ),
        (
            options.precision != crate::Precision::Fp32,
            "--precision",
            "has no matrix products to run in another precision",
        ),
        (
            !options.device.is_cpu(),
            "--device",
            "runs on the CPU: its lookups are memory-bound, with no matrix products for a GPU",
        ),
        (
            options.store.is_some(),
            "--embed-cache",
            "looks vectors up faster than a cache reads them back",
        ),
        (
            matches!(options.rescale, Some(crate::Rescale::File(_))),
            "--rescale-baseline FILE",
            "has no bert_score baseline file (use auto or three numbers)",
        ),
    ];
    match refused.iter().find(|(asked, _, _)| *asked) {
        Some((_, flag, why)) => Err(Error::usage(format!(
            "{flag}: {} is a static embedding model ({name}), which {why}",
            files.dir.display()
        ))),
        None => Ok(()),
    }
}

/// model2vec's unknown token: the model's `unk_token` (WordPiece, BPE,
/// WordLevel) or `unk_id` (Unigram).
fn unknown_id(tokenizer: &Tokenizer) -> Option<u32> {
    let model = serde_json::to_value(tokenizer.get_model()).ok()?;
    if let Some(token) = model.get("unk_token").and_then(|t| t.as_str()) {
        return tokenizer.token_to_id(token);
    }
    model
        .get("unk_id")
        .and_then(|v| v.as_u64())
        .map(|v| v as u32)
}

/// model2vec's `median_token_length`: the median length in characters of
/// the vocabulary's tokens (the mean of the two middle ones, floored, for
/// an even count).
fn median_token_chars(tokenizer: &Tokenizer) -> usize {
    let mut lengths: Vec<usize> = tokenizer
        .get_vocab(true)
        .keys()
        .map(|t| t.chars().count())
        .collect();
    lengths.sort_unstable();
    match lengths.len() {
        0 => 0,
        n if n % 2 == 1 => lengths[n / 2],
        n => (lengths[n / 2 - 1] + lengths[n / 2]) / 2,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A WordPiece tokenizer over `words`, `[UNK]` first.
    fn word_piece(words: &[&str]) -> Tokenizer {
        let vocab: serde_json::Map<String, serde_json::Value> = std::iter::once("[UNK]")
            .chain(words.iter().copied())
            .enumerate()
            .map(|(k, w)| (w.to_string(), serde_json::json!(k)))
            .collect();
        let json = serde_json::json!({
            "version": "1.0",
            "truncation": null, "padding": null, "added_tokens": [],
            "normalizer": null,
            "pre_tokenizer": {"type": "Whitespace"},
            "post_processor": null, "decoder": null,
            "model": {"type": "WordPiece", "unk_token": "[UNK]",
                      "continuing_subword_prefix": "##", "max_input_chars_per_word": 100,
                      "vocab": vocab},
        });
        Tokenizer::from_bytes(json.to_string().as_bytes()).unwrap()
    }

    #[test]
    fn the_unknown_token_is_the_models_own() {
        let t = word_piece(&["cat", "sat"]);
        assert_eq!(unknown_id(&t), Some(0));
    }

    #[test]
    fn the_median_token_length_is_numpys_floored() {
        // Lengths 5 ([UNK]), 1, 2, 3: numpy's median 2.5, floored to 2.
        assert_eq!(median_token_chars(&word_piece(&["a", "bb", "ccc"])), 2);
        // Lengths 5, 1, 2: the middle one.
        assert_eq!(median_token_chars(&word_piece(&["a", "bb"])), 2);
        // Characters, not bytes.
        assert_eq!(median_token_chars(&word_piece(&["éé", "ü"])), 2);
    }
}
