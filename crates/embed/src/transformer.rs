//! A transformer embedding model run in Candle: its tokenizer set up as
//! sentence-transformers and bert_score use it, the forward pass in
//! token-budget batches of texts sorted by length, the pooling and the
//! modules after it.

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rayon::prelude::*;
use refscore_core::Error;
use tokenizers::Tokenizer;

use crate::encoder::{self, Encoder, HostStates, Launched};
use crate::math::{Embedded, PromptSpan};
use crate::model::{AfterPooling, ModelFiles, Pooling};
use crate::sentence_head::SentenceHead;
use crate::store::{self, EmbeddingStore};
use crate::text_model::TextModel;
use crate::tokens::{self, Bounds, Tokens};
use crate::{kernels, EmbedOptions, EmbedReport, Precision, Prompt};

/// A loaded transformer folder and the settings its vectors depend on.
pub(crate) struct TransformerModel {
    tokenizer: Tokenizer,
    bounds: Bounds,
    /// How BERTScore encodes texts, where not as `bounds` does.
    score_bounds: Option<Bounds>,
    encoder: Encoder,
    pooling: Pooling,
    after_pooling: Vec<AfterPooling>,
    /// The folder's modules after the pooling (Dense, Normalize).
    head: SentenceHead,
    /// The layers run for every text, ascending: the last (pooled for
    /// cosine) and BERTScore's layer when that is another.
    taps: Vec<usize>,
    /// The layer BERTScore matches token states of.
    score_layer: usize,
    /// The prompt put before every text ("" for none), and where its
    /// tokens lie.
    prompt: String,
    prompt_span: PromptSpan,
    max_len: usize,
    special: Vec<u32>,
    precision: Precision,
    batch_tokens: usize,
    /// Settings beyond the folder that change the vectors, for the
    /// persistent cache's key.
    variant: String,
    truncate_dim: Option<usize>,
}

impl TransformerModel {
    /// Loads the tokenizer and weights of `files` with the settings of
    /// `options`.
    pub(crate) fn load(files: &ModelFiles, options: &EmbedOptions) -> Result<Self, Error> {
        let max_len = match options.max_seq_length {
            // Out of range for this model: a usage error (64), like any
            // out-of-range flag value.
            Some(n) if n < 2 || n > files.max_positions => {
                return Err(Error::usage(format!(
                    "--max-seq-length {n}: must be between 2 and the model's position limit {}",
                    files.max_positions
                )))
            }
            Some(n) => n,
            None => files.max_seq_length,
        };
        let tokenizer = encoder::load_tokenizer(files, max_len)?;
        let special = tokens::bertscore_specials(&tokenizer, files.cls_sep_tokens.as_deref())?;
        let prompt = resolve_prompt(files, options.prompt.as_ref())?;
        let bounds = Bounds::new(&tokenizer, max_len, &prompt, files.lower_case);
        let prompt_span = if prompt.is_empty() {
            PromptSpan::default()
        } else {
            // sentence-transformers' prompt_length: the prompt's tokens
            // with the special ones, less the closing one.
            let enc = tokenizer
                .encode(prompt.as_str(), true)
                .map_err(|e| Error::config(format!("prompt {prompt:?}: {e}")))?;
            PromptSpan {
                tokens: enc.get_ids().len().saturating_sub(1),
                pooled: files.include_prompt,
            }
        };
        let encoder = Encoder::load(files, &options.device, options.precision)?;
        let mut head = SentenceHead::load(files, encoder.hidden)?;
        if let Some(dims) = options.truncate_dim {
            head.truncate(dims)?;
        }
        let last = encoder.layers();
        let score_layer = match options.layer {
            Some(n) if n > last => {
                return Err(Error::usage(format!(
                    "--layer {n}: the model has {last} layers (0 = the embeddings)"
                )))
            }
            Some(n) => n,
            None => last,
        };
        let mut taps = vec![score_layer, last];
        taps.dedup();
        // Settings that change the vectors beyond the model's defaults.
        let mut variant = String::new();
        if score_layer != last {
            variant.push_str(&format!(";bertscore_layer={score_layer}"));
        }
        if !prompt.is_empty() {
            variant.push_str(&format!(";prompt={prompt:?}"));
        }
        if let Some(dims) = options.truncate_dim {
            variant.push_str(&format!(";truncate_dim={dims}"));
        }
        let gpt2 = tokens::gpt2_class(files.tokenizer_class.as_deref(), &files.family);
        let score_bounds = bounds.for_bertscore(&tokenizer, gpt2);
        if score_bounds.is_some() {
            // BERTScore's own encoding (stripped, prefix space) is newer
            // than entries a Unigram-tokenized BERT may have written.
            variant.push_str(";bertscore_encoding=bert_score");
        }
        if !gpt2 && tokens::byte_level_bpe(&tokenizer) {
            // Byte-level BPE outside GPT-2's classes once got the prefix
            // space too: entries written then are not these.
            variant.push_str(";bertscore_prefix_space=no");
        }
        Ok(TransformerModel {
            tokenizer,
            bounds,
            score_bounds,
            encoder,
            pooling: files.pooling,
            after_pooling: files.after_pooling.clone(),
            head,
            taps,
            score_layer,
            prompt,
            prompt_span,
            max_len,
            special,
            precision: options.precision,
            batch_tokens: options.batch_tokens,
            variant,
            truncate_dim: options.truncate_dim,
        })
    }

    /// Opens this model's part of the persistent cache under `root`.
    pub(crate) fn open_store(
        &self,
        root: &Path,
        files: &ModelFiles,
    ) -> Result<EmbeddingStore, Error> {
        EmbeddingStore::open(
            root,
            files,
            self.max_len,
            store::Widths {
                tokens: self.encoder.hidden,
                sentence: self.head.width(),
            },
            store::Numerics::of(self.precision),
            &self.variant,
        )
    }
}

impl TransformerModel {
    /// Pools a batch read back from the encoder into its texts'
    /// [`Embedded`] (in parallel), filling `out`.
    fn pool(
        &self,
        group: Vec<usize>,
        tokens: Vec<Tokens>,
        states: HostStates,
        out: &mut [Option<Arc<Embedded>>],
        report: &mut EmbedReport,
    ) {
        let hidden = self.encoder.hidden;
        let pooling = self.pooling;
        let span = self.prompt_span;
        let head = &self.head;
        // Where each text's sequences sit in the batch: its model input,
        // then BERTScore's own where it has one.
        let mut work = Vec::with_capacity(group.len());
        let mut seq = 0;
        for (k, t) in group.into_iter().zip(tokens) {
            report.texts_truncated += u64::from(t.truncated);
            report.tokens += t.len() as u64;
            let own = t.score.is_some().then_some(seq + 1);
            work.push((k, t, seq, own));
            seq += 1 + usize::from(own.is_some());
        }
        debug_assert_eq!(seq, states.len(), "one state per sequence");
        let last_tap = states.taps() - 1;
        let built: Vec<(usize, Embedded)> = work
            .into_par_iter()
            .map(|(k, t, main, own)| {
                // The last layer pooled; BERTScore's layer (the first
                // tap) from its own sequence, or from the same one when
                // it is another layer.
                let last = states.get(main, last_tap).to_vec();
                let scored = match own {
                    Some(own) => Some(states.get(own, 0).to_vec()),
                    None => (last_tap > 0).then(|| states.get(main, 0).to_vec()),
                };
                let ids = t.score.unwrap_or(t.ids);
                (
                    k,
                    Embedded::from_states(ids, last, scored, hidden, pooling, span, Some(head)),
                )
            })
            .collect();
        for (k, e) in built {
            report.texts_embedded += 1;
            out[k] = Some(Arc::new(e));
        }
    }
}

impl TextModel for TransformerModel {
    fn tokenize(&self, texts: &[&str]) -> Result<(Vec<Tokens>, u64), Error> {
        let (mut tokens, mut bytes) = self.bounds.encode(&self.tokenizer, texts)?;
        if let Some(bounds) = &self.score_bounds {
            // A second sequence only for texts BERTScore encodes otherwise.
            let (scored, more) = bounds.encode(&self.tokenizer, texts)?;
            for (t, s) in tokens.iter_mut().zip(scored) {
                if s.ids != t.ids {
                    t.score = Some(s.ids);
                }
            }
            bytes += more;
        }
        Ok((tokens, bytes))
    }

    /// Runs the texts sorted by length, grouped into token-budget batches.
    /// Each batch is queued on the device before the previous one is read
    /// back and pooled, so on a GPU the host's reading and pooling overlap
    /// the next batch's forward pass instead of leaving the GPU idle (on
    /// the CPU a batch is computed as it is queued: the same work in the
    /// same order).
    fn embed(
        &mut self,
        which: &[usize],
        mut ids: Vec<Option<Tokens>>,
        out: &mut [Option<Arc<Embedded>>],
        report: &mut EmbedReport,
    ) -> Result<(), Error> {
        let mut order: Vec<usize> = which.to_vec();
        order.sort_by_key(|&k| std::cmp::Reverse(ids[k].as_ref().map_or(0, Tokens::len)));
        let plan = self.encoder.batch_plan(self.batch_tokens, self.max_len);
        let packs = self.encoder.packs();
        let mut start = 0;
        // The batch queued last (its texts, their tokens, its states on
        // the device), and the one read back before it, still to pool.
        let mut queued: Option<(Vec<usize>, Vec<Tokens>, Launched)> = None;
        let mut read: Option<(Vec<usize>, Vec<Tokens>, HostStates)> = None;
        loop {
            let next = if start < order.len() {
                let len_of = |k: usize| ids[k].as_ref().map_or(0, Tokens::len);
                let count = plan.next(order[start..].iter().map(|&k| len_of(k)));
                let group: Vec<usize> = order[start..start + count].to_vec();
                start += count;
                let tokens: Vec<Tokens> = group
                    .iter()
                    .map(|&k| ids[k].take().unwrap_or_default())
                    .collect();
                // Each text's model input, then BERTScore's own where it has one.
                let seqs: Vec<&[u32]> = tokens
                    .iter()
                    .flat_map(|t| std::iter::once(t.ids.as_slice()).chain(t.score.as_deref()))
                    .collect();
                let t0 = Instant::now();
                let launched = self.encoder.launch(&seqs, None, &self.taps)?;
                report.forward_launch += t0.elapsed();
                report.padded_tokens += if packs {
                    seqs.iter().map(|s| s.len() as u64).sum()
                } else {
                    (seqs.iter().map(|s| s.len()).max().unwrap_or(0) * seqs.len()) as u64
                };
                Some((group, tokens, launched))
            } else {
                None
            };
            // The host's part of the batch read last, while the device
            // runs the one just queued.
            if let Some((group, tokens, states)) = read.take() {
                self.pool(group, tokens, states, out, report);
            }
            // The batch queued before this one, read back (on a GPU its
            // copy runs beside the kernels of the one just queued).
            if let Some((group, tokens, launched)) = queued.take() {
                let t0 = Instant::now();
                let states = self.encoder.read(launched)?;
                report.forward_wait += t0.elapsed();
                read = Some((group, tokens, states));
            }
            match next {
                Some(batch) => queued = Some(batch),
                None if read.is_none() => break,
                None => {}
            }
        }
        Ok(())
    }

    fn chunk_tokens(&self) -> usize {
        self.encoder.chunk_tokens(self.batch_tokens, self.max_len)
    }

    /// The token states are one contiguous matrix already: no copy.
    fn best_matches(&self, c: &Embedded, r: &Embedded) -> (Vec<f32>, Vec<f32>) {
        crate::math::best_matches(&c.tokens, &r.tokens, self.encoder.hidden)
    }

    fn special(&self) -> &[u32] {
        &self.special
    }

    fn vocab_size(&self) -> usize {
        self.tokenizer.get_vocab_size(true)
    }

    fn score_layer(&self) -> usize {
        self.score_layer
    }

    fn describe(&self) -> serde_json::Map<String, serde_json::Value> {
        let serde_json::Value::Object(map) = serde_json::json!({
            "pooling": self.pooling.name(),
            "after_pooling": self.after_pooling.iter().map(AfterPooling::describe).collect::<Vec<_>>(),
            "prompt": (!self.prompt.is_empty()).then_some(&self.prompt),
            "max_seq_length": self.max_len,
            "bertscore_layer": self.score_layer,
            "truncate_dim": self.truncate_dim,
            "layers": self.encoder.layers(),
            "kernels": kernels::kernel_path().name(),
            "precision": self.precision.name(),
            // Which instruction summed int8's products (AMX, VNNI, AVX2 or
            // gemm): every one gives the same numbers, at its own speed.
            "int8_tiles": (self.precision == Precision::Int8)
                .then(|| kernels::int8::Layout::here().name()),
        }) else {
            unreachable!("an object")
        };
        map
    }
}

/// The prompt text a run uses: the one asked for, else the folder's
/// default (`default_prompt_name`), else none ("").
fn resolve_prompt(files: &ModelFiles, asked: Option<&Prompt>) -> Result<String, Error> {
    let named = |name: &str, flag: &str| {
        files.prompts.get(name).cloned().ok_or_else(|| {
            let known: Vec<&str> = files.prompts.keys().map(String::as_str).collect();
            Error::config(format!(
                "{flag} {name}: {} has no such prompt (it has: {})",
                files
                    .dir
                    .join("config_sentence_transformers.json")
                    .display(),
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ))
        })
    };
    match (asked, &files.default_prompt) {
        (Some(Prompt::Text(text)), _) => Ok(text.clone()),
        (Some(Prompt::Named(name)), _) => named(name, "--prompt-name"),
        (None, Some(name)) => named(name, "default_prompt_name"),
        (None, None) => Ok(String::new()),
    }
}
