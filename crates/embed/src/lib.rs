//! Embedding metrics (docs/metrics.md#embedding-metrics) with a local
//! sentence-transformer run in Candle: `cosine` of pooled sentence vectors
//! and BERTScore precision/recall/F1 over the last layer's token vectors,
//! both from one forward pass per distinct text.
//!
//! The model's architecture is a *family* (`family/`: one module per
//! `config.json` `model_type`, behind one trait); BERT is the one family so
//! far. Everything else here (tokenising, batching, pooling, the store, the
//! metrics) is written once for every family.
//!
//! Distinct texts are found per batch and remembered across batches in a
//! bounded cache, so a reference repeated across thousands of rows is
//! embedded once. Texts are tokenised in parallel, sorted by length and run
//! in token-budget batches so little work goes into padding.
//!
//! # Settings, not environment
//!
//! This crate reads no environment variable: the CLI turns
//! `REFSCORE_KERNELS`, `REFSCORE_MODEL_DIR` and `HF_HUB_OFFLINE` into
//! [`use_kernels`] and [`ModelLookup`]. The kernel path (`auto`, `avx512`,
//! `avx2`, `portable`) picks the compiled form of the fused CPU kernels
//! (attention, bias + GELU, add + layer norm); all paths give the same bits,
//! in every precision (checked on AMD EPYC Zen 5, where all run). See
//! [`KernelPath`].

mod baseline;
mod encoder;
mod family;
mod fingerprint;
mod kernels;
mod math;
mod model;
mod precision;
mod prepare;
mod sentence_head;
mod store;
mod tokens;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float32Array};
use arrow::datatypes::{DataType, Field};
use candle_core::Device;
use lru::LruCache;
use rayon::prelude::*;
use refscore_core::metric::{self, Group, MetricSet};
use refscore_core::{Error, RowBatch, ScoreColumns, TextColumn};
use tokenizers::Tokenizer;

pub use baseline::read_baseline;
pub use encoder::{device_ordinal, parse_device};
pub use kernels::{kernel_path, use_kernels, KernelPath};
pub use math::{bertscore, cosine, Embedded, PromptSpan};
pub use model::{
    read_settings, resolve, Activation, AfterPooling, DenseFiles, ModelFiles, ModelLookup, Pooling,
    DEFAULT_MODEL_DIR,
};
pub use precision::Precision;
pub use prepare::Rescale;
use sentence_head::SentenceHead;

use encoder::Encoder;
use store::EmbeddingStore;
use tokens::{Bounds, Tokens};

/// Most texts in one padded forward batch on the CPU (a model the fused
/// kernels do not cover): with texts sorted by length, a small group keeps
/// the lengths in a batch close, so little work goes to padding, while 64 ×
/// tens of tokens still makes matrices large enough for the matrix
/// products. The fused CPU path packs texts without padding and fills
/// `batch_tokens` instead.
const MAX_BATCH_TEXTS: usize = 64;

/// Tokens (padding included) and texts per forward batch on a GPU, at the
/// least: a GPU needs matrices far larger than the CPU's cache-sized
/// batches to be busy, and holds them easily (MiniLM's attention scores for
/// 32,768 tokens of 512-token texts take 800 MB). Chosen, not yet measured
/// on a GPU (docs/performance.md#gpu).
const GPU_BATCH_TOKENS: usize = 32 * 1024;
const GPU_MAX_BATCH_TEXTS: usize = 512;

/// The embedding metrics, in the order of a row's scores (cosine, then
/// BERTScore precision, recall, F1) and of the output columns.
static OUTPUTS: [&metric::Builtin; 4] = [
    &metric::COSINE,
    &metric::BERTSCORE_PRECISION,
    &metric::BERTSCORE_RECALL,
    &metric::BERTSCORE_F1,
];

/// Settings of the embedding stage.
#[derive(Debug, Clone)]
pub struct EmbedOptions {
    /// `--model`: a folder or a Hugging Face id; `None` = the default folder.
    pub model: Option<String>,
    /// Where the forward runs.
    pub device: Device,
    /// The embedding metrics to output (others in the set are ignored).
    pub metrics: MetricSet,
    /// Truncation length override (default: the model's max_seq_length).
    pub max_seq_length: Option<usize>,
    /// Byte budget of the cross-batch embedding cache.
    pub cache_bytes: usize,
    /// Tokens (padding included, where a device pads) per forward batch
    /// (at least one longest text; on a GPU at least 32,768). The default,
    /// 2,048, keeps a layer's
    /// activations (12 MiB for the 1,536-wide feed-forward of MiniLM) within
    /// the CPU's caches between one op and the next: on the nightly bench set
    /// it ran the forward ~14-18% faster than 8,192, with no gain below it.
    pub batch_tokens: usize,
    /// `--embed-cache`: a folder keeping embeddings between runs.
    pub store: Option<PathBuf>,
    /// Also keep outputs' embeddings there, not only references'.
    pub store_outputs: bool,
    /// `--precision`: the number format of the encoder's matrix products.
    pub precision: Precision,
    /// `--layer`: the layer whose token states BERTScore matches
    /// (bert_score's `num_layers`: 0 = the embeddings); `None` = the last.
    /// Cosine always pools the last layer, as sentence-transformers does.
    pub layer: Option<usize>,
    /// `--prompt-name` / `--prompt`: text put before every text, as
    /// sentence-transformers' prompts; `None` = the folder's default
    /// prompt, if it names one.
    pub prompt: Option<Prompt>,
    /// Where the model is looked for when `model` is `None`, and whether
    /// the hub may be called.
    pub lookup: ModelLookup,
    /// `--idf`: weigh BERTScore's tokens by their IDF over the input's
    /// references ([`EmbeddingStage::prepare`]).
    pub idf: bool,
    /// `--rescale-baseline`: how BERTScore is rescaled, if at all.
    pub rescale: Option<Rescale>,
    /// `--truncate-dim`: the sentence embedding cut to its first N values
    /// before the cosine (sentence-transformers' `truncate_dim`, for
    /// Matryoshka models); `None` = the whole vector. BERTScore's token
    /// vectors are not cut.
    pub truncate_dim: Option<usize>,
}

impl Default for EmbedOptions {
    fn default() -> Self {
        EmbedOptions {
            model: None,
            device: Device::Cpu,
            metrics: refscore_core::metric::Catalog::builtin().of_groups(&[Group::Embedding]),
            max_seq_length: None,
            cache_bytes: 256 << 20,
            batch_tokens: 2048,
            store: None,
            store_outputs: false,
            precision: Precision::Fp32,
            layer: None,
            prompt: None,
            lookup: ModelLookup::default(),
            idf: false,
            rescale: None,
            truncate_dim: None,
        }
    }
}

/// A prompt asked for: by its name in the model folder's
/// `config_sentence_transformers.json`, or as text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// `--prompt-name NAME`.
    Named(String),
    /// `--prompt TEXT`.
    Text(String),
}

/// BERTScore rescaling baselines for P, R and F: X' = (X − b) / (1 − b).
pub type Baseline = [f32; 3];

/// IDF weights over word-pieces, from the references of the whole input.
#[derive(Debug, Clone)]
pub struct Idf {
    rows: u64,
    df: Vec<u32>,
}

impl Idf {
    /// idf(w) = ln((M+1)/(df(w)+1)); unseen pieces get ln(M+1).
    fn weight(&self, id: u32) -> f32 {
        let df = self.df.get(id as usize).copied().unwrap_or(0) as f64;
        ((self.rows as f64 + 1.0) / (df + 1.0)).ln() as f32
    }

    /// Rows counted (M).
    pub fn rows(&self) -> u64 {
        self.rows
    }
}

/// What the stage did over the run, for the summary.
#[derive(Debug, Clone, Default)]
pub struct EmbedReport {
    /// Texts run through the model.
    pub texts_embedded: u64,
    /// Texts found in the cache or earlier in the same batch.
    pub texts_reused: u64,
    /// Real (unpadded) tokens run through the model.
    pub tokens: u64,
    /// Padded tokens run through the model.
    pub padded_tokens: u64,
    /// Texts embedded that had more word-pieces than the truncation limit
    /// ([CLS]/[SEP] included); a text of exactly the limit is not truncated.
    pub texts_truncated: u64,
    /// Bytes of text handed to the tokenizer (scoring and the `--idf`
    /// pass): each distinct text once, and a long text only up to a prefix
    /// that surely fills the truncation limit.
    pub tokenized_bytes: u64,
    /// Time in the forward pass.
    pub forward: Duration,
    /// Time tokenising.
    pub tokenize: Duration,
    /// Texts read from the persistent cache (`--embed-cache`).
    pub store_hits: u64,
    /// Texts written to the persistent cache.
    pub store_writes: u64,
}

/// The loaded model plus run state (cache, IDF, baseline, counters).
pub struct EmbeddingStage {
    files: ModelFiles,
    tokenizer: Tokenizer,
    bounds: Bounds,
    /// How BERTScore encodes texts, where not as `bounds` does.
    score_bounds: Option<Bounds>,
    encoder: Encoder,
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
    options: EmbedOptions,
    cache: LruCache<String, Arc<Embedded>>,
    cache_bytes: usize,
    idf: Option<Idf>,
    baseline: Option<Baseline>,
    /// Where the baseline came from (`given`, `auto` or a file), for the
    /// summary.
    baseline_source: String,
    report: EmbedReport,
    store: Option<EmbeddingStore>,
    kernels: KernelPath,
}

impl EmbeddingStage {
    /// Finds and loads the model and tokenizer.
    pub fn load(options: EmbedOptions) -> Result<EmbeddingStage, Error> {
        let files = model::resolve(options.model.as_deref(), &options.lookup)?;
        EmbeddingStage::load_found(files, options)
    }

    /// Loads the model and tokenizer of `files`, found already (by
    /// [`resolve`], from the same options), so its folder is not read
    /// again.
    pub fn load_found(files: ModelFiles, options: EmbedOptions) -> Result<EmbeddingStage, Error> {
        let kernels = kernels::kernel_path();
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
        let tokenizer = encoder::load_tokenizer(&files, max_len)?;
        let special = tokens::bertscore_specials(&tokenizer, files.cls_sep_tokens.as_deref())?;
        let prompt = resolve_prompt(&files, options.prompt.as_ref())?;
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
        let encoder = Encoder::load(&files, &options.device, options.precision)?;
        let mut head = SentenceHead::load(&files, encoder.hidden)?;
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
        let store = match &options.store {
            Some(root) => Some(EmbeddingStore::open(
                root,
                &files,
                max_len,
                store::Widths {
                    tokens: encoder.hidden,
                    sentence: head.width(),
                },
                store::Numerics::of(options.precision),
                &variant,
            )?),
            None => None,
        };
        Ok(EmbeddingStage {
            score_bounds,
            bounds,
            prompt,
            prompt_span,
            files,
            tokenizer,
            encoder,
            head,
            taps,
            score_layer,
            max_len,
            special,
            options,
            cache: LruCache::unbounded(),
            cache_bytes: 0,
            idf: None,
            baseline: None,
            baseline_source: String::new(),
            report: EmbedReport::default(),
            store,
            kernels,
        })
    }

    /// The model folder in use.
    pub fn model_files(&self) -> &ModelFiles {
        &self.files
    }

    /// The truncation length in use.
    pub fn max_seq_length(&self) -> usize {
        self.max_len
    }

    /// The prompt put before every text ("" for none), for the summary.
    pub fn prompt(&self) -> &str {
        &self.prompt
    }

    /// The layer BERTScore matches (0 = the embeddings), for the summary.
    pub fn score_layer(&self) -> usize {
        self.score_layer
    }

    /// The precision of the encoder's matrix products, for the summary.
    pub fn precision(&self) -> Precision {
        self.options.precision
    }

    /// The CPU kernel path in use (`REFSCORE_KERNELS`), for the summary.
    pub fn kernel_path(&self) -> KernelPath {
        self.kernels
    }

    /// The folder of this model's entries in the persistent cache, if any.
    pub fn store_dir(&self) -> Option<&std::path::Path> {
        self.store.as_ref().map(EmbeddingStore::dir)
    }

    /// Counters so far.
    pub fn report(&self) -> &EmbedReport {
        &self.report
    }

    /// The output fields of the selected metrics (Float32, nullable).
    pub fn fields(&self) -> Vec<Field> {
        fields(&self.options.metrics)
    }

    /// Word-piece ids of a text, truncated like the model input.
    pub fn token_ids(&self, texts: &[&str]) -> Result<Vec<Vec<u32>>, Error> {
        let (tokens, _) = self.bounds.encode(&self.tokenizer, texts)?;
        Ok(tokens.into_iter().map(|t| t.ids).collect())
    }

    /// Tokenises texts for the model (bounded: see [`tokens`]), counting the
    /// time and the bytes handed to the tokenizer.
    fn tokenize(&mut self, texts: &[&str]) -> Result<Vec<Tokens>, Error> {
        let t0 = Instant::now();
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
        self.report.tokenize += t0.elapsed();
        self.report.tokenized_bytes += bytes;
        Ok(tokens)
    }

    /// Computes IDF weights from every non-null reference of the input
    /// (`--idf`); call before scoring.
    pub fn fit_idf(
        &mut self,
        references: impl Iterator<Item = Result<TextColumn, Error>>,
    ) -> Result<&Idf, Error> {
        let mut df = vec![0u32; self.tokenizer.get_vocab_size(true)];
        let mut rows = 0u64;
        for column in references {
            let column = column?;
            // Each distinct text is tokenised once and counted once per row
            // holding it: a reference repeated over thousands of rows (a
            // dictionary-encoded column) is not tokenised thousands of times.
            let mut counts: HashMap<&str, u32> = HashMap::new();
            for text in (0..column.len()).filter_map(|i| column.get(i)) {
                *counts.entry(text).or_insert(0) += 1;
                rows += 1;
            }
            let (texts, counts): (Vec<&str>, Vec<u32>) = counts.into_iter().unzip();
            for (tokens, count) in self.tokenize(&texts)?.into_iter().zip(counts) {
                let mut ids = tokens.scored().to_vec();
                ids.sort_unstable();
                ids.dedup();
                for id in ids {
                    if let Some(c) = df.get_mut(id as usize) {
                        *c += count;
                    }
                }
            }
        }
        Ok(self.idf.insert(Idf { rows, df }))
    }

    /// The IDF weights, when fitted.
    pub fn idf(&self) -> Option<&Idf> {
        self.idf.as_ref()
    }

    /// The rescaling baseline, when set.
    pub fn baseline(&self) -> Option<Baseline> {
        self.baseline
    }

    /// Sets the rescaling baseline; `source` says where it came from
    /// (`given`, `auto`, a file's path) in the summary.
    pub fn set_baseline(&mut self, baseline: Baseline, source: &str) {
        self.baseline = Some(baseline);
        self.baseline_source = source.to_string();
    }

    /// Computes a baseline as the mean raw P, R, F over mismatched pairs
    /// (`--rescale-baseline auto`).
    pub fn fit_baseline(&mut self, pairs: &[(String, String)]) -> Result<Baseline, Error> {
        let texts: Vec<&str> = pairs
            .iter()
            .flat_map(|(r, o)| [r.as_str(), o.as_str()])
            .collect();
        let embedded = self.embed_distinct(&texts)?;
        let mut sums = [0f64; 3];
        for k in 0..pairs.len() {
            let (r, o) = (&embedded[2 * k], &embedded[2 * k + 1]);
            let s = self.bertscore_raw(o, r);
            for (sum, v) in sums.iter_mut().zip(s) {
                *sum += v as f64;
            }
        }
        let n = pairs.len().max(1) as f64;
        Ok(sums.map(|s| (s / n) as f32))
    }

    fn weights(&self, ids: &[u32]) -> Vec<f32> {
        ids.iter()
            .map(|&id| {
                if self.special.contains(&id) {
                    0.0
                } else {
                    self.idf.as_ref().map_or(1.0, |idf| idf.weight(id))
                }
            })
            .collect()
    }

    fn bertscore_raw(&self, output: &Embedded, reference: &Embedded) -> [f32; 3] {
        // bert_score's empty text: nothing but its cls and sep tokens
        // (its own test, "exactly two tokens", also catches a one-word text
        // of a tokenizer that adds one special token; refscore does not
        // follow it there: docs/metrics.md).
        let empty = |e: &Embedded| e.ids.iter().all(|id| self.special.contains(id));
        if empty(output) || empty(reference) {
            return [0.0; 3];
        }
        let (wc, wr) = (self.weights(&output.ids), self.weights(&reference.ids));
        math::bertscore(output, reference, &wc, &wr, self.encoder.hidden)
    }

    /// Embeds texts through the model (no cache), in order; sorted and
    /// batched like a scoring run. For benchmarks and baselines.
    pub fn embed(&mut self, texts: &[&str]) -> Result<Vec<Arc<Embedded>>, Error> {
        self.embed_distinct(texts)
    }

    /// Embeds texts that are all distinct (no cache), in order.
    fn embed_distinct(&mut self, texts: &[&str]) -> Result<Vec<Arc<Embedded>>, Error> {
        let ids = self.tokenize(texts)?;
        let mut out: Vec<Option<Arc<Embedded>>> = vec![None; texts.len()];
        let order: Vec<usize> = (0..texts.len()).collect();
        self.run_model(&order, ids.into_iter().map(Some).collect(), &mut out)?;
        Ok(out.into_iter().map(|e| e.expect("embedded")).collect())
    }

    /// Runs the model over the texts `which` (indexes into `ids`/`out`),
    /// sorted by length and grouped into token-budget batches.
    fn run_model(
        &mut self,
        which: &[usize],
        mut ids: Vec<Option<Tokens>>,
        out: &mut [Option<Arc<Embedded>>],
    ) -> Result<(), Error> {
        let mut order: Vec<usize> = which.to_vec();
        order.sort_by_key(|&k| std::cmp::Reverse(ids[k].as_ref().map_or(0, Tokens::len)));
        let on_cpu = self.options.device.is_cpu();
        let (budget, max_texts) = if on_cpu {
            (self.options.batch_tokens, MAX_BATCH_TEXTS)
        } else {
            (
                self.options.batch_tokens.max(GPU_BATCH_TOKENS),
                GPU_MAX_BATCH_TEXTS,
            )
        };
        let budget = budget.max(self.max_len);
        let packs = self.encoder.packs();
        let mut start = 0;
        while start < order.len() {
            let len_of = |k: usize| ids[k].as_ref().map_or(0, Tokens::len).max(1);
            let longest = len_of(order[start]);
            let count = if packs {
                // No padding: fill the token budget, whatever the lengths.
                let mut used = 0;
                order[start..]
                    .iter()
                    .take_while(|&&k| {
                        used += len_of(k);
                        used <= budget
                    })
                    .count()
                    .max(1)
            } else {
                (budget / longest)
                    .clamp(1, max_texts)
                    .min(order.len() - start)
            };
            let group = &order[start..start + count];
            // Each text's model input, then BERTScore's own where it has one.
            let seqs: Vec<&[u32]> = group
                .iter()
                .flat_map(|&k| {
                    let t = ids[k].as_ref();
                    let main = t.map_or(&[][..], |t| t.ids.as_slice());
                    std::iter::once(main).chain(t.and_then(|t| t.score.as_deref()))
                })
                .collect();
            let t0 = Instant::now();
            let states = self.encoder.forward(&seqs, &self.taps)?;
            self.report.forward += t0.elapsed();
            self.report.padded_tokens += if packs {
                seqs.iter().map(|s| s.len() as u64).sum()
            } else {
                (seqs.iter().map(|s| s.len()).max().unwrap_or(0) * seqs.len()) as u64
            };
            let hidden = self.encoder.hidden;
            let pooling = self.files.pooling;
            let span = self.prompt_span;
            let head = &self.head;
            let mut states = states.into_iter();
            let mut work = Vec::with_capacity(group.len());
            for &k in group {
                let t = ids[k].take().unwrap_or_default();
                self.report.texts_truncated += u64::from(t.truncated);
                self.report.tokens += t.len() as u64;
                let main = states.next().expect("one state per sequence");
                let own = t
                    .score
                    .is_some()
                    .then(|| states.next().expect("BERTScore's sequence"));
                work.push((k, t, main, own));
            }
            let built: Vec<(usize, Embedded)> = work
                .into_par_iter()
                .map(|(k, t, mut main, own)| {
                    // The last layer pooled; BERTScore's layer (the first
                    // tap) from its own sequence, or from the same one when
                    // it is another layer.
                    let last = main.pop().expect("one state per tap");
                    let scored = match own {
                        Some(mut own) => Some(own.swap_remove(0)),
                        None => main.pop(),
                    };
                    let ids = t.score.unwrap_or(t.ids);
                    (
                        k,
                        Embedded::from_states(ids, last, scored, hidden, pooling, span, Some(head)),
                    )
                })
                .collect();
            for (k, e) in built {
                self.report.texts_embedded += 1;
                out[k] = Some(Arc::new(e));
            }
            start += count;
        }
        Ok(())
    }

    fn cache_put(&mut self, text: &str, e: &Arc<Embedded>) {
        if self.options.cache_bytes == 0 {
            return;
        }
        self.cache_bytes += e.bytes() + text.len();
        if let Some((k, old)) = self.cache.push(text.to_string(), Arc::clone(e)) {
            self.cache_bytes -= old.bytes() + k.len();
        }
        while self.cache_bytes > self.options.cache_bytes {
            match self.cache.pop_lru() {
                Some((k, old)) => self.cache_bytes -= old.bytes() + k.len(),
                None => break,
            }
        }
    }

    /// Scores every row of a batch. Rows that cannot be scored (see
    /// [`RowBatch::unscorable`]) get nulls.
    pub fn score_batch(&mut self, batch: &RowBatch) -> Result<ScoreColumns, Error> {
        let n = batch.len();
        // Distinct texts of the batch, in first-seen order.
        let mut index: HashMap<&str, usize> = HashMap::new();
        let mut texts: Vec<&str> = Vec::new();
        let mut last_use: Vec<usize> = Vec::new();
        let mut is_reference: Vec<bool> = Vec::new();
        let mut pairs: Vec<Option<(usize, usize)>> = Vec::with_capacity(n);
        for i in 0..n {
            if batch.unscorable(i).is_some() {
                pairs.push(None);
                continue;
            }
            let (r, o) = (
                batch.reference.get(i).expect("scorable"),
                batch.output.get(i).expect("scorable"),
            );
            let mut slot = |t| -> usize {
                *index.entry(t).or_insert_with(|| {
                    texts.push(t);
                    last_use.push(0);
                    is_reference.push(false);
                    texts.len() - 1
                })
            };
            let (ri, oi) = (slot(r), slot(o));
            is_reference[ri] = true;
            last_use[ri] = i;
            last_use[oi] = i;
            pairs.push(Some((ri, oi)));
        }
        let mut slots: Vec<Option<Arc<Embedded>>> =
            texts.iter().map(|t| self.cache.get(*t).cloned()).collect();
        if let Some(store) = &self.store {
            let missing: Vec<usize> = (0..texts.len()).filter(|&k| slots[k].is_none()).collect();
            let found: Vec<(usize, Embedded)> = missing
                .par_iter()
                .filter_map(|&k| store.get(texts[k]).map(|e| (k, e)))
                .collect();
            self.report.store_hits += found.len() as u64;
            for (k, e) in found {
                let e = Arc::new(e);
                self.cache_put(texts[k], &e);
                slots[k] = Some(e);
            }
        }
        let misses: Vec<usize> = (0..texts.len()).filter(|&k| slots[k].is_none()).collect();
        let miss_texts: Vec<&str> = misses.iter().map(|&k| texts[k]).collect();
        let miss_ids = self.tokenize(&miss_texts)?;
        let mut ids: Vec<Option<Tokens>> = vec![None; texts.len()];
        for (k, v) in misses.iter().zip(miss_ids) {
            ids[*k] = Some(v);
        }
        let scorable_rows = pairs.iter().filter(|p| p.is_some()).count() as u64;
        self.report.texts_reused += 2 * scorable_rows - misses.len() as u64;

        // Walk the rows in chunks bounded by the tokens still to embed, so
        // the token vectors held at once stay bounded.
        let chunk_budget = 64 * 1024;
        let mut scores: Vec<Option<[f32; 4]>> = vec![None; n];
        let mut chunk_start = 0;
        let mut pending: Vec<usize> = Vec::new();
        let mut pending_tokens = 0usize;
        let mut queued = vec![false; texts.len()];
        for i in 0..=n {
            let flush = i == n || pending_tokens >= chunk_budget;
            if flush && chunk_start < i {
                self.run_model(&pending, ids_subset(&mut ids, &pending), &mut slots)?;
                for &k in &pending {
                    let e = slots[k].clone().expect("embedded");
                    self.cache_put(texts[k], &e);
                    if let Some(store) = self.store.as_mut() {
                        if (is_reference[k] || self.options.store_outputs)
                            && store.put(texts[k], &e)
                        {
                            self.report.store_writes += 1;
                        }
                    }
                }
                self.score_rows(&pairs[chunk_start..i], &slots, &mut scores[chunk_start..i]);
                // Release what no later row of this batch needs.
                for (k, s) in slots.iter_mut().enumerate() {
                    if last_use[k] < i {
                        *s = None;
                    }
                }
                pending.clear();
                pending_tokens = 0;
                chunk_start = i;
            }
            if i == n {
                break;
            }
            if let Some((ri, oi)) = pairs[i] {
                for k in [ri, oi] {
                    if slots[k].is_none() && !queued[k] {
                        queued[k] = true;
                        pending_tokens += ids[k].as_ref().map_or(0, Tokens::len);
                        pending.push(k);
                    }
                }
            }
        }
        let mut out = ScoreColumns::default();
        for (k, m) in OUTPUTS.iter().enumerate() {
            if !self.options.metrics.contains(m) {
                continue;
            }
            let array: Float32Array = scores.iter().map(|s| s.map(|v| v[k])).collect();
            out.push(
                Field::new(m.name.clone(), DataType::Float32, true),
                Arc::new(array) as ArrayRef,
            );
        }
        Ok(out)
    }

    fn score_rows(
        &self,
        pairs: &[Option<(usize, usize)>],
        slots: &[Option<Arc<Embedded>>],
        out: &mut [Option<[f32; 4]>],
    ) {
        let want_bert = OUTPUTS[1..]
            .iter()
            .any(|m| self.options.metrics.contains(m));
        out.par_iter_mut().zip(pairs.par_iter()).for_each(|(o, p)| {
            let Some((ri, oi)) = *p else { return };
            let (r, c) = (
                slots[ri].as_ref().expect("embedded"),
                slots[oi].as_ref().expect("embedded"),
            );
            let cos = math::cosine(r, c);
            let [mut pr, mut rc, mut f] = if want_bert {
                self.bertscore_raw(c, r)
            } else {
                [0.0; 3]
            };
            if let Some(b) = self.baseline {
                pr = (pr - b[0]) / (1.0 - b[0]);
                rc = (rc - b[1]) / (1.0 - b[1]);
                f = (f - b[2]) / (1.0 - b[2]);
            }
            *o = Some([cos, pr, rc, f]);
        });
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

/// Moves the tokens of `which` out of `ids` into a vector indexed like `ids`.
fn ids_subset(ids: &mut [Option<Tokens>], which: &[usize]) -> Vec<Option<Tokens>> {
    let mut out = vec![None; ids.len()];
    for &k in which {
        out[k] = ids[k].take();
    }
    out
}

/// The output fields of the selected embedding metrics.
pub fn fields(metrics: &MetricSet) -> Vec<Field> {
    OUTPUTS
        .iter()
        .filter(|m| metrics.contains(m))
        .map(|m| Field::new(m.name.clone(), DataType::Float32, true))
        .collect()
}

/// The embedding metrics as a pipeline stage.
impl refscore_core::Stage for EmbeddingStage {
    fn fields(&self) -> Vec<Field> {
        EmbeddingStage::fields(self)
    }

    fn score(&mut self, batch: &RowBatch, _: &ScoreColumns) -> Result<ScoreColumns, Error> {
        self.score_batch(batch)
    }

    /// The model, its settings and the run's counters and timings.
    fn summary(&self) -> Option<(&'static str, serde_json::Value)> {
        let r = &self.report;
        let files = &self.files;
        let forward = r.forward.as_secs_f64();
        Some((
            "embedding",
            serde_json::json!({
                "model": files.dir.display().to_string(),
                "family": files.family,
                "pooling": files.pooling.name(),
                "after_pooling": files.after_pooling.iter().map(AfterPooling::describe).collect::<Vec<_>>(),
                "prompt": (!self.prompt.is_empty()).then_some(&self.prompt),
                "max_seq_length": self.max_len,
                "bertscore_layer": self.score_layer,
                "truncate_dim": self.options.truncate_dim,
                "layers": self.encoder.layers(),
                "idf_rows": self.idf().map(|i| i.rows()),
                "baseline": self.baseline(),
                "baseline_source": self.baseline.is_some().then_some(&self.baseline_source),
                "texts_embedded": r.texts_embedded,
                "texts_reused": r.texts_reused,
                "texts_truncated": r.texts_truncated,
                "tokenized_bytes": r.tokenized_bytes,
                "kernels": self.kernel_path().name(),
                "precision": self.precision().name(),
                "tokens": r.tokens,
                "padded_tokens": r.padded_tokens,
                "tokenize_seconds": r.tokenize.as_secs_f64(),
                "forward_seconds": forward,
                "tokens_per_second": if forward > 0.0 { r.tokens as f64 / forward } else { 0.0 },
                "embed_cache": self.store_dir().map(|d| serde_json::json!({
                    "dir": d.display().to_string(),
                    "hits": r.store_hits,
                    "writes": r.store_writes,
                })),
            }),
        ))
    }
}
