//! Embedding metrics (docs/metrics.md#embedding-metrics) with a local
//! sentence-transformer run in Candle: `cosine` of pooled sentence vectors
//! and BERTScore precision/recall/F1 over the last layer's token vectors,
//! both from one forward pass per distinct text.
//!
//! A model is a [`text_model::TextModel`]: a transformer
//! (`transformer.rs`, whose architecture is a *family*: `family/`, one
//! module per `config.json` `model_type`, behind one trait) or a static
//! table (`static_model/`). Everything here (distinct texts, the caches,
//! IDF, baselines, the metrics) is written once for every model.
//!
//! Distinct texts are found per batch and remembered across batches in a
//! bounded cache, so a reference repeated across thousands of rows is
//! embedded once. Texts are tokenised in parallel, sorted by length and run
//! in token-budget batches so little work goes into padding.
//!
//! # Settings, not environment
//!
//! This crate reads no environment variable: the CLI reads
//! `REFSCORE_KERNELS`, `REFSCORE_MODEL_DIR` and `HF_HUB_OFFLINE` (named in
//! [`options`]) for [`options::resolve`], which turns them into
//! [`use_kernels`]' path and [`ModelLookup`]. The kernel path (`auto`, `avx512`,
//! `avx2`, `portable`) picks the compiled form of the fused CPU kernels
//! (attention, bias + GELU, add + layer norm); all paths give the same bits,
//! in every precision (checked on AMD EPYC Zen 5, where all run). See
//! [`KernelPath`].

mod baseline;
mod cross;
mod encoder;
mod family;
mod fingerprint;
mod idf;
mod kernels;
mod math;
mod model;
pub mod options;
mod outputs;
mod plan;
mod precision;
mod prepare;
mod readback;
mod sentence_head;
mod static_model;
mod store;
mod text_cache;
mod text_model;
mod tokens;
mod transformer;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, Float32Array};
use arrow::datatypes::{DataType, Field};
use candle_core::Device;
use rayon::prelude::*;
use refscore_core::metric::{Group, MetricSet};
use refscore_core::{Error, RowBatch, ScoreColumns};

pub use baseline::read_baseline;
pub use cross::recipe;
pub use cross::{
    cross_fields, span_prompt, spans_field, CrossCapability, CrossEncoder, CrossFolder, CrossHead,
    CrossInput, CrossOptions, CrossPlan, CrossReport, CrossStage, CrossStagePlan, Detected,
    Detection, FactReading, NliEntailment, NliLabels, NliScores, PairPrediction, PairPrompt,
    Recipe, Refused, ScoreActivation, Span, SpanDetector, SpanStage, Support, TokenClassifier,
    TokenPrediction, CROSS_SPANS, DEFAULT_RECIPE, FOLDER_RECIPE, HHEM_CONSISTENT, HHEM_PROMPT,
};
pub use encoder::{device_ordinal, parse_device};
pub use family::cross_families;
pub use idf::Idf;
pub use kernels::{kernel_path, use_kernels, KernelPath};
pub use math::{bertscore, cosine, Embedded, PromptSpan};
pub use model::{
    read_settings, resolve, Activation, AfterPooling, DenseFiles, ModelFiles, ModelKind,
    ModelLookup, Pooling, DEFAULT_MODEL_DIR,
};
pub use options::{EmbedArgs, EmbedSettings};
pub use outputs::fields;
pub use plan::EmbeddingPlan;
pub use precision::Precision;
pub use prepare::Rescale;
pub use static_model::{StaticLayout, StaticRules};

use outputs::{PairScores, OUTPUTS};
use store::EmbeddingStore;
use text_cache::TextCache;
use text_model::TextModel;
use tokens::Tokens;

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
    /// Time the host spent queuing forward passes (on the CPU, where a pass
    /// is computed as it is queued, nearly all of `forward`).
    pub forward_launch: Duration,
    /// Time the host waited for forward passes to finish and their states
    /// to arrive (on a GPU: where the device, not the host, sets the pace).
    pub forward_wait: Duration,
    /// Time tokenising.
    pub tokenize: Duration,
    /// Texts read from the persistent cache (`--embed-cache`).
    pub store_hits: u64,
    /// Texts written to the persistent cache.
    pub store_writes: u64,
}

impl EmbedReport {
    /// Time in the forward pass: queuing it plus waiting for it.
    pub fn forward(&self) -> Duration {
        self.forward_launch + self.forward_wait
    }
}

/// The loaded model plus run state (cache, IDF, baseline, counters).
pub struct EmbeddingStage {
    files: ModelFiles,
    model: Box<dyn TextModel>,
    options: EmbedOptions,
    cache: TextCache,
    idf: Option<Idf>,
    baseline: Option<Baseline>,
    /// Where the baseline came from (`given`, `auto` or a file), for the
    /// summary.
    baseline_source: String,
    report: EmbedReport,
    store: Option<EmbeddingStore>,
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
        let (model, store): (Box<dyn TextModel>, _) = match &files.kind {
            ModelKind::Static(layout) => (
                Box::new(static_model::StaticModel::load(&files, layout, &options)?),
                None,
            ),
            ModelKind::Transformer => {
                let model = transformer::TransformerModel::load(&files, &options)?;
                let store = match &options.store {
                    Some(root) => Some(model.open_store(root, &files)?),
                    None => None,
                };
                (Box::new(model), store)
            }
        };
        Ok(EmbeddingStage {
            files,
            model,
            cache: TextCache::new(options.cache_bytes),
            options,
            idf: None,
            baseline: None,
            baseline_source: String::new(),
            report: EmbedReport::default(),
            store,
        })
    }

    /// The model folder in use.
    pub fn model_files(&self) -> &ModelFiles {
        &self.files
    }

    /// The layer BERTScore matches (0 = the embeddings), for a baseline
    /// file's row.
    pub fn score_layer(&self) -> usize {
        self.model.score_layer()
    }

    /// The CPU kernel path in use (`REFSCORE_KERNELS`), for the summary.
    pub fn kernel_path(&self) -> KernelPath {
        kernels::kernel_path()
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
        let (tokens, _) = self.model.tokenize(texts)?;
        Ok(tokens.into_iter().map(|t| t.ids).collect())
    }

    /// Tokenises texts for the model (bounded: see [`tokens`]), counting the
    /// time and the bytes handed to the tokenizer.
    fn tokenize(&mut self, texts: &[&str]) -> Result<Vec<Tokens>, Error> {
        let t0 = Instant::now();
        let (tokens, bytes) = self.model.tokenize(texts)?;
        self.report.tokenize += t0.elapsed();
        self.report.tokenized_bytes += bytes;
        Ok(tokens)
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
                if self.model.special().contains(&id) {
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
        let special = self.model.special();
        let empty = |e: &Embedded| e.ids.iter().all(|id| special.contains(id));
        if empty(output) || empty(reference) {
            return [0.0; 3];
        }
        let (wc, wr) = (self.weights(&output.ids), self.weights(&reference.ids));
        let (best_c, best_r) = self.model.best_matches(output, reference);
        math::bertscore_of_best(&best_c, &best_r, &wc, &wr)
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

    /// Runs the model over the texts `which` (indexes into `ids`/`out`).
    fn run_model(
        &mut self,
        which: &[usize],
        ids: Vec<Option<Tokens>>,
        out: &mut [Option<Arc<Embedded>>],
    ) -> Result<(), Error> {
        self.model.embed(which, ids, out, &mut self.report)
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
                batch.reference().get(i).expect("scorable"),
                batch.output().get(i).expect("scorable"),
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
            texts.iter().map(|t| self.cache.get(t)).collect();
        if let Some(store) = &self.store {
            let missing: Vec<usize> = (0..texts.len()).filter(|&k| slots[k].is_none()).collect();
            let found: Vec<(usize, Embedded)> = missing
                .par_iter()
                .filter_map(|&k| store.get(texts[k]).map(|e| (k, e)))
                .collect();
            self.report.store_hits += found.len() as u64;
            for (k, e) in found {
                let e = Arc::new(e);
                self.cache.put(texts[k], &e);
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
        let chunk_budget = self.model.chunk_tokens();
        let mut scores: Vec<Option<PairScores>> = vec![None; n];
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
                    self.cache.put(texts[k], &e);
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
        for o in OUTPUTS
            .iter()
            .filter(|o| self.options.metrics.contains(o.metric))
        {
            let array: Float32Array = scores.iter().map(|s| s.as_ref().map(o.value)).collect();
            out.push(
                Field::new(o.metric.name.clone(), DataType::Float32, true),
                Arc::new(array) as ArrayRef,
            );
        }
        Ok(out)
    }

    fn score_rows(
        &self,
        pairs: &[Option<(usize, usize)>],
        slots: &[Option<Arc<Embedded>>],
        out: &mut [Option<PairScores>],
    ) {
        let want_bert = OUTPUTS
            .iter()
            .any(|o| o.bertscore && self.options.metrics.contains(o.metric));
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
            *o = Some(PairScores {
                cosine: cos,
                bertscore: [pr, rc, f],
            });
        });
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

/// The embedding metrics as a pipeline stage.
impl refscore_core::Stage for EmbeddingStage {
    fn fields(&self) -> Vec<Field> {
        EmbeddingStage::fields(self)
    }

    fn score(&mut self, batch: &RowBatch, _: &ScoreColumns) -> Result<ScoreColumns, Error> {
        self.score_batch(batch)
    }

    fn fit(&mut self, input: &dyn refscore_core::FitInput) -> Result<(), Error> {
        self.fit_to(input)
    }

    /// The model, its settings and the run's counters and timings.
    fn summary(&self) -> Option<(&'static str, serde_json::Value)> {
        let r = &self.report;
        let files = &self.files;
        let forward = r.forward().as_secs_f64();
        let serde_json::Value::Object(mut summary) = serde_json::json!({
            "model": files.dir.display().to_string(),
            "family": files.family,
            "idf_rows": self.idf().map(|i| i.rows()),
            "baseline": self.baseline(),
            "baseline_source": self.baseline.is_some().then_some(&self.baseline_source),
            "texts_embedded": r.texts_embedded,
            "texts_reused": r.texts_reused,
            "texts_truncated": r.texts_truncated,
            "tokenized_bytes": r.tokenized_bytes,
            "tokens": r.tokens,
            "padded_tokens": r.padded_tokens,
            "tokenize_seconds": r.tokenize.as_secs_f64(),
            "forward_seconds": forward,
            "forward_launch_seconds": r.forward_launch.as_secs_f64(),
            "forward_wait_seconds": r.forward_wait.as_secs_f64(),
            "tokens_per_second": if forward > 0.0 { r.tokens as f64 / forward } else { 0.0 },
            "embed_cache": self.store_dir().map(|d| serde_json::json!({
                "dir": d.display().to_string(),
                "hits": r.store_hits,
                "writes": r.store_writes,
            })),
        }) else {
            unreachable!("an object")
        };
        summary.extend(self.model.describe());
        Some(("embedding", serde_json::Value::Object(summary)))
    }
}
