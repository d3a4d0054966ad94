//! The local models' options: one clap group ([`EmbedArgs`], flattened
//! into `refscore score`, so its flags, the config file's keys and Python's
//! keywords come from these definitions), their checks (a bad flag is a
//! usage error, 64; a bad config line a configuration error, 78: the
//! [`Given`] the CLI passes knows which), and the resolved settings
//! ([`EmbedSettings`]), which hold the embedding stage's [`EmbedOptions`]
//! and make the cross-encoder's [`CrossOptions`] from the same values.
//!
//! The crate still reads no environment variable: the CLI hands
//! [`resolve`] a reader, and the variables it asks for are named here.

use std::path::{Path, PathBuf};

use refscore_core::metric::MetricSet;
use refscore_core::{Error, Given};

use crate::{
    CrossCapability, CrossFolder, CrossOptions, CrossPlan, CrossStagePlan, EmbedOptions,
    EmbeddingPlan, ModelFiles, ModelLookup, NliLabels, Precision, Prompt, Recipe, Rescale,
};

/// The local models' options, as `refscore score` takes them: the
/// embedding model's and the cross-encoder's, which share the device,
/// the precision and the caches.
#[derive(Debug, Default, clap::Args)]
pub struct EmbedArgs {
    /// Embedding model: a sentence-transformers folder, a static model (a model2vec folder or
    /// a StaticEmbedding folder: a table lookup, no transformer, ~150x faster on a CPU), or
    /// ORG/NAME from the local Hugging Face cache (HF_HOME; downloaded only when
    /// HF_HUB_OFFLINE is unset) [default: $REFSCORE_MODEL_DIR, else models/all-MiniLM-L6-v2]
    #[arg(long, value_name = "PATH|ORG/NAME")]
    pub model: Option<String>,

    /// Cross-encoder for the `cross` metrics, reading reference and output together: a
    /// *ForSequenceClassification folder or ORG/NAME (BERT, RoBERTa, XLM-R, DistilBERT,
    /// DeBERTa v1/v2/v3, ModernBERT, GTE or NomicBERT), scored as sentence-transformers'
    /// CrossEncoder scores it, or T5 (HHEM-2.1-Open), scored as its own predict (its prompt; its
    /// folder needs flan-t5-base's tokenizer.json). A one-output model (STS, relevance) gives
    /// cross_score; an NLI model gives nli_precision, nli_recall, nli_equivalence (two-way
    /// entailment) and nli_contradiction (HHEM: --nli-labels entailment=1). A two-label
    /// *ForTokenClassification folder (LettuceDetect's span detectors) runs as LettuceDetect's
    /// inference: cross_score (the output's support: 1 - the largest hallucination probability
    /// over its tokens) and cross_spans (its unsupported spans). Runs on --device with --precision,
    /// like --model
    #[arg(long, value_name = "PATH|ORG/NAME")]
    pub cross_model: Option<String>,

    /// How --cross-model's input is built and its outputs read: nli (the plain pair, the
    /// folder's labels: sentence-transformers' CrossEncoder), factcg (FactCG-DeBERTa-v3-Large's
    /// template, NLTK-sentence chunks of 550 words, the best chunk's P(supported)), minicheck
    /// (MiniCheck-RoBERTa-L / DeBERTa-v3-L: chunk + eos + claim, 400-token chunks, the best
    /// chunk's P(supported)), hhem (HHEM-2.1-Open's prompt, P(consistent)), or a recipe FILE
    /// (JSON, docs/judges.md). A checker recipe gives cross_score, the support of the output
    /// given the reference [default: the folder's refscore_recipe.json, else nli]
    #[arg(long, value_name = "factcg|minicheck|hhem|nli|FILE")]
    pub cross_recipe: Option<String>,

    /// Which labels of an NLI --cross-model are entailment and contradiction, for models
    /// whose labels are LABEL_0, LABEL_1, ... (MiniCheck's: entailment=1) [default: found by
    /// name in the model's id2label]
    #[arg(long, value_name = "entailment=I[,contradiction=J]")]
    pub nli_labels: Option<String>,

    /// Where the encoder runs: cpu, cuda, cuda:N (needs the `cuda` build feature) or auto
    /// [default: cpu]
    #[arg(long, value_name = "DEVICE")]
    pub device: Option<String>,

    /// Number format of the linear maps inside the encoder's layers (Q/K/V, attention output,
    /// feed-forward; CPU); attention, activations, norms, pooling and BERTScore stay f32.
    /// fp32: the reference numbers. bf16: bf16 weights and activations, f32 sums; measured
    /// against fp32 on all-MiniLM-L6-v2: max |Δ| 2.7e-3, p99 1.5e-3. int8: s8 weights (a
    /// scale per output), u8 activations (a scale per row), exact integer sums; max |Δ|
    /// 2.5e-2, p99 1.6e-2 (other families: docs/performance.md). int8 is faster than fp32 with
    /// AMX, AVX512-VNNI or AVX2 (2.47x measured with AMX, 1.56x on an AVX2-only CPU); bf16
    /// only with AVX512-BF16 on some CPUs (half fp32's speed measured on an AMX Xeon);
    /// every CPU gives the same numbers (see docs/performance.md). On a GPU (--device cuda) bf16 and fp16 run the BERT-shaped
    /// families' layers in that format end to end (tensor-core products; layer norm and
    /// softmax sum in f32) and the other families' linear maps; fp16 is GPU-only, int8
    /// CPU-only. Recorded in the summary and the result file's footer
    /// [default: fp32]
    #[arg(long, value_name = "fp32|bf16|int8|fp16")]
    pub precision: Option<String>,

    /// Weight BERTScore tokens by IDF over the input's references (reads the reference
    /// column once more before scoring)
    #[arg(long)]
    pub idf: bool,

    /// Rescale BERTScore: X' = (X - b) / (1 - b) with baselines "P,R,F"; or a bert_score
    /// baseline FILE (CSV "LAYER,P,R,F", as the bert-score wheel ships them under
    /// rescale_baseline/<lang>/<model>.tsv), read at the row of the --layer in use; or "auto"
    /// to take them as the mean raw scores of 1,000 seeded random mismatched pairs of the input
    #[arg(long, value_name = "P,R,F|FILE|auto")]
    pub rescale_baseline: Option<String>,

    /// The layer whose token vectors BERTScore matches, as bert_score's num_layers: the
    /// output of layer N, 0 = the embeddings [default: the model's last layer]. Cosine
    /// always pools the last layer, as sentence-transformers does
    #[arg(long, value_name = "N")]
    pub layer: Option<usize>,

    /// Cut each sentence embedding to its first N values before the cosine, as
    /// sentence-transformers' truncate_dim does (Matryoshka models keep most of their
    /// quality in fewer dimensions); 1 to the embedding's width. BERTScore is unchanged
    #[arg(long, value_name = "N")]
    pub truncate_dim: Option<usize>,

    /// Put the model's prompt NAME (from its config_sentence_transformers.json, e.g. e5's
    /// "query") before every text, as sentence-transformers' encode(prompt_name=...) does
    /// [default: the folder's default_prompt_name, if any]
    #[arg(long, value_name = "NAME", conflicts_with = "prompt")]
    pub prompt_name: Option<String>,

    /// Put TEXT before every text (e.g. "query: "), as sentence-transformers'
    /// encode(prompt=...) does. Pooling leaves its tokens out when the model's pooling
    /// config says include_prompt: false; BERTScore always matches the texts' own tokens
    #[arg(long, value_name = "TEXT")]
    pub prompt: Option<String>,

    /// Truncate texts at this many word-pieces, [CLS]/[SEP] included [default: the
    /// model's max_seq_length, 256 for all-MiniLM-L6-v2]
    #[arg(long, value_name = "N")]
    pub max_seq_length: Option<usize>,

    /// Memory for remembering embeddings of texts seen earlier in the run, so repeated
    /// references are embedded once [default: 256]
    #[arg(long, value_name = "MIB")]
    pub embed_cache_mb: Option<usize>,

    /// Keep embeddings on disk in DIR between runs, so texts seen in an earlier run (the
    /// references of a nightly job) are not embedded again. Entries are keyed by a hash of
    /// the model files, truncation length and pooling plus the text; references' embeddings
    /// are stored (about 1.5 KiB per word-piece), outputs' too with --embed-cache-outputs.
    /// The folder can be deleted at any time
    #[arg(long, value_name = "DIR")]
    pub embed_cache: Option<PathBuf>,

    /// Also store outputs' embeddings in --embed-cache (for re-scoring the same outputs)
    #[arg(long)]
    pub embed_cache_outputs: bool,
}

/// Forces the fused CPU kernels' path (`auto`, `avx512`, `avx2`, `portable`).
pub const KERNELS_ENV: &str = "REFSCORE_KERNELS";
/// The model folder used when `--model` is not given.
pub const MODEL_DIR_ENV: &str = "REFSCORE_MODEL_DIR";
/// Set (and not `0`): the Hugging Face hub is not called for `ORG/NAME`.
pub const OFFLINE_ENV: &str = "HF_HUB_OFFLINE";

/// `--embed-cache-mb`'s default: enough for the distinct texts of a
/// nightly batch of short answers.
const DEFAULT_CACHE_MB: usize = 256;

/// The local models' settings, resolved from [`EmbedArgs`] once: what the
/// embedding stage, the cross-encoder's stages and the fingerprint read.
#[derive(Debug, Clone)]
pub struct EmbedSettings {
    /// The embedding stage's options as the flags set them; the run's
    /// metrics and the opened device are put in by
    /// [`EmbedSettings::stage_options`] (here: the defaults).
    pub options: EmbedOptions,
    /// `--device` as given (checked): opened only when a stage is planned,
    /// so a run without local models never touches a GPU.
    pub device: String,
    /// `REFSCORE_KERNELS`: the fused CPU kernels' path by name (None: auto).
    pub kernels: Option<String>,
    /// True when `REFSCORE_MODEL_DIR` named the model: a model asked for,
    /// like `--model`, so its absence is an error.
    pub model_dir_named: bool,
    /// `--cross-model`: the cross-encoder (it shares the device, the
    /// precision, the caches and the lookup with the embedding model).
    pub cross_model: Option<String>,
    /// `--nli-labels`.
    pub nli_labels: Option<String>,
    /// `--cross-recipe`: a shipped recipe's name or a recipe file (None:
    /// the folder's own, else `nli`).
    pub cross_recipe: Option<String>,
    /// `--cross-model`'s folder with its recipe, read and checked once,
    /// as the settings are resolved: the metrics' check, the cross stage
    /// and the fact check all take this one (None without a cross model).
    pub cross_folder: Option<CrossFolder>,
}

/// Reads the local models' settings out of `args`, a bad value named as
/// `given` says it was given; `env` reads an environment variable (set and
/// not blank), for [`MODEL_DIR_ENV`], [`KERNELS_ENV`] and [`OFFLINE_ENV`].
pub fn resolve(
    args: &mut EmbedArgs,
    given: &impl Given,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<EmbedSettings, Error> {
    let precision = given
        .parsed(args.precision.take(), "precision", parse_precision)?
        .unwrap_or_default();
    let model_dir = env(MODEL_DIR_ENV);
    let device = given
        .parsed(args.device.take(), "device", |d| {
            crate::device_ordinal(d).map(|_| d.to_string())
        })?
        .unwrap_or_else(|| "cpu".into());
    check_precision_on(precision, &device, given)?;
    let options = EmbedOptions {
        model: args.model.take(),
        precision,
        idf: args.idf,
        rescale: rescale(args.rescale_baseline.take(), given)?,
        layer: given.ranged(args.layer, "layer", |n| n <= 1000, "0 to 1000")?,
        truncate_dim: given.ranged(
            args.truncate_dim,
            "truncate_dim",
            |n| n >= 1,
            "1 to the embedding's width",
        )?,
        prompt: match (args.prompt_name.take(), args.prompt.take()) {
            (Some(name), _) => Some(Prompt::Named(name)),
            (None, Some(text)) => Some(Prompt::Text(text)),
            (None, None) => None,
        },
        max_seq_length: given.ranged(
            args.max_seq_length,
            "max_seq_length",
            |n| (2..=1_000_000).contains(&n),
            "2 or more word-pieces (at most the model's position limit)",
        )?,
        cache_bytes: given
            .ranged(
                args.embed_cache_mb,
                "embed_cache_mb",
                |n| n <= 1 << 20,
                "0 to 1048576 MiB",
            )?
            .unwrap_or(DEFAULT_CACHE_MB)
            << 20,
        store: args.embed_cache.take(),
        store_outputs: args.embed_cache_outputs,
        lookup: ModelLookup {
            default_dir: model_dir
                .clone()
                .map_or_else(|| crate::DEFAULT_MODEL_DIR.into(), PathBuf::from),
            offline: env(OFFLINE_ENV).is_some_and(|v| v != "0"),
        },
        ..EmbedOptions::default()
    };
    let cross_model = args.cross_model.take();
    let nli_labels = args.nli_labels.take();
    let cross_recipe = cross_recipe(args.cross_recipe.take(), given)?;
    let cross_folder = match cross_model.as_deref() {
        Some(spec) => {
            Some(CrossFolder::find(spec, &options.lookup)?.with_recipe(cross_recipe.as_deref())?)
        }
        None => None,
    };
    Ok(EmbedSettings {
        options,
        device,
        kernels: env(KERNELS_ENV),
        model_dir_named: model_dir.is_some(),
        cross_model,
        nli_labels,
        cross_recipe,
        cross_folder,
    })
}

impl EmbedSettings {
    /// The embedding stage's plan with `files` as its model, for the run's
    /// `metrics`, on the device opened (a GPU this build or machine lacks:
    /// exit 78).
    pub fn plan(&self, files: ModelFiles, metrics: MetricSet) -> Result<EmbeddingPlan, Error> {
        Ok(EmbeddingPlan {
            files,
            options: self.stage_options(metrics)?,
            device: self.device.clone(),
            footer: self.footer(),
            fitted_on_whole_input: self.fitted_on_whole_input(),
        })
    }

    /// The embedding stage's options for the run's `metrics`, on the
    /// device opened (a GPU this build or machine lacks: exit 78).
    pub fn stage_options(&self, metrics: MetricSet) -> Result<EmbedOptions, Error> {
        Ok(EmbedOptions {
            device: crate::parse_device(&self.device)?,
            metrics,
            ..self.options.clone()
        })
    }

    /// How the run's cross-encoders run: the embedding model's device,
    /// precision, batch size and caches.
    pub fn cross_options(&self) -> Result<CrossOptions, Error> {
        let o = &self.options;
        Ok(CrossOptions {
            device: crate::parse_device(&self.device)?,
            precision: o.precision,
            batch_tokens: o.batch_tokens,
            cache_bytes: o.cache_bytes,
            store: o.store.clone(),
        })
    }

    /// The result file's footer entries of a run that embeds: the
    /// precision, and the width `--truncate-dim` cut the embedding to
    /// (a report reads what the numbers were made with).
    pub fn footer(&self) -> Vec<(String, String)> {
        use refscore_core::schema::footer;
        let o = &self.options;
        let mut out = vec![(footer::PRECISION.into(), o.precision.name().into())];
        if let Some(dims) = o.truncate_dim {
            out.push((footer::TRUNCATE_DIM.into(), dims.to_string()));
        }
        out
    }

    /// The option (as its config key and Python keyword name it) whose
    /// figures are fitted on a pass over the whole input, if one is set
    /// (`idf`, `rescale_baseline auto`): a worker that sees only its part
    /// of the data would fit other figures than the CLI.
    pub fn fitted_on_whole_input(&self) -> Option<&'static str> {
        let o = &self.options;
        if o.idf {
            Some("idf")
        } else if matches!(o.rescale, Some(Rescale::Auto)) {
            Some("rescale_baseline auto")
        } else {
            None
        }
    }

    /// Whether a model was asked for (`--model`, or `REFSCORE_MODEL_DIR`):
    /// then a model that is not found is an error, not a warning.
    pub fn model_asked(&self) -> bool {
        self.options.model.is_some() || self.model_dir_named
    }

    /// The embedding model's files: `--model`, else the default folder.
    pub fn find_model(&self) -> Result<ModelFiles, Error> {
        crate::resolve(self.options.model.as_deref(), &self.options.lookup)
    }

    /// The settings checked against the model found: its layers, its
    /// sentence width, its position limit, and the kernels this machine has
    /// (the device is checked as the stage's options are built). A bad
    /// value is named as `given` says it was given.
    pub fn check_model(&self, files: &ModelFiles, given: &impl Given) -> Result<(), Error> {
        let o = &self.options;
        if let (Some(n), true) = (o.layer, files.is_static()) {
            return Err(given.bad(
                "layer",
                &n.to_string(),
                &format!(
                    "{} is a static embedding model ({}), which has no layers",
                    files.dir.display(),
                    files.family
                ),
            ));
        }
        if let Some(n) = o.layer.filter(|&n| n > files.layers) {
            return Err(given.bad(
                "layer",
                &n.to_string(),
                &format!("the model has {} layers (0 = the embeddings)", files.layers),
            ));
        }
        if let Some(width) = files.sentence_width() {
            if let Some(n) = o.truncate_dim.filter(|&n| n > width) {
                return Err(given.bad(
                    "truncate_dim",
                    &n.to_string(),
                    &format!("expected 1 to {width}, the model's sentence embedding width"),
                ));
            }
        }
        if let Some(n) = o
            .max_seq_length
            .filter(|&n| n < 2 || n > files.max_positions)
        {
            return Err(given.bad(
                "max_seq_length",
                &n.to_string(),
                &format!(
                    "must be between 2 and the model's position limit {}",
                    files.max_positions
                ),
            ));
        }
        let kernels = self.kernels.as_deref();
        crate::use_kernels(kernels).map_err(|err| {
            Error::config(format!("{KERNELS_ENV}={}: {err}", kernels.unwrap_or("")))
        })?;
        Ok(())
    }

    /// The cross-encoder stage's plan: the folder read with the settings,
    /// checked against the cross metrics of `metrics` (exit 78 for one it
    /// cannot give); `None` without a cross model or a cross metric.
    pub fn cross_plan(&self, metrics: &MetricSet) -> Result<Option<CrossStagePlan>, Error> {
        let Some(folder) = self.cross_folder.clone() else {
            return Ok(None);
        };
        if !metrics.has_group(refscore_core::metric::Group::Cross) {
            return Ok(None);
        }
        let plan = CrossPlan::new(folder, metrics, self.nli_labels.as_deref())?;
        Ok(Some(CrossStagePlan::new(plan, self.cross_options()?)))
    }

    /// What `--cross-model`'s model can give, read from its folder (exit
    /// 78 for a folder that is no cross-encoder); `None` without one.
    /// `--cross-recipe` or `--nli-labels` without it is refused, named as
    /// `given` says it was given.
    pub fn cross_capability(&self, given: &impl Given) -> Result<Option<CrossCapability>, Error> {
        let Some(folder) = &self.cross_folder else {
            if let Some(recipe) = &self.cross_recipe {
                return Err(given.bad(
                    "cross_recipe",
                    recipe,
                    "says how --cross-model's model reads its input: pass --cross-model too",
                ));
            }
            return match &self.nli_labels {
                Some(labels) => Err(given.bad(
                    "nli_labels",
                    labels,
                    "names labels of --cross-model's model: pass --cross-model too",
                )),
                None => Ok(None),
            };
        };
        if let Some(labels) = &self.nli_labels {
            NliLabels::parse(labels, folder.labels.len())
                .map_err(|why| given.bad("nli_labels", labels, &why))?;
        }
        CrossCapability::of(folder, self.nli_labels.as_deref()).map(Some)
    }
}

/// Whether a config file's value `value` of key `id` names a file, to be
/// taken from the file's folder: a `cross_recipe` that is no shipped
/// recipe's name.
pub fn names_file_in_config(id: &str, value: &str) -> bool {
    id == "cross_recipe" && Recipe::builtin(value).is_none()
}

/// A `--cross-recipe` value: a shipped recipe's name or an existing file
/// (what the file holds is read with the model, exit 78 naming the file).
fn cross_recipe(value: Option<String>, given: &impl Given) -> Result<Option<String>, Error> {
    if let Some(spec) = &value {
        if Recipe::builtin(spec).is_none() && !Path::new(spec).is_file() {
            let why = format!(
                "not a recipe's name ({}) and no such file",
                Recipe::names().join(", ")
            );
            return Err(given.bad("cross_recipe", spec, &why));
        }
    }
    Ok(value)
}

/// A `--rescale-baseline` value: `auto`, `P,R,F`, or a baseline file.
fn rescale(value: Option<String>, given: &impl Given) -> Result<Option<Rescale>, Error> {
    Ok(match value {
        None => None,
        Some(r) if r == "auto" => Some(Rescale::Auto),
        // Anything naming a file is a baseline file; it must exist.
        Some(r) if !r.contains(',') => {
            if !Path::new(&r).is_file() {
                return Err(given.bad(
                    "rescale_baseline",
                    &r,
                    "no such file (expected auto, P,R,F or a bert_score baseline file)",
                ));
            }
            Some(Rescale::File(PathBuf::from(r)))
        }
        Some(r) => {
            let parts: Vec<f32> = r
                .split(',')
                .map(|p| p.trim().parse().unwrap_or(f32::NAN))
                .collect();
            match parts.as_slice() {
                [p, rr, f] if [p, rr, f].iter().all(|b| b.is_finite() && **b < 1.0) => {
                    Some(Rescale::Given([*p, *rr, *f]))
                }
                _ => {
                    return Err(given.bad(
                        "rescale_baseline",
                        &r,
                        "expected auto or three finite numbers below 1, as P,R,F",
                    ))
                }
            }
        }
    })
}

/// A `--precision` value.
fn parse_precision(name: &str) -> Result<Precision, String> {
    Precision::from_name(name.trim())
        .ok_or_else(|| format!("{name}: expected fp32, bf16, int8 or fp16"))
}

/// Refuses, before any work, a precision the named device cannot run:
/// fp16 on the CPU, int8 on a GPU (`auto` is settled when the model loads).
fn check_precision_on(precision: Precision, device: &str, given: &impl Given) -> Result<(), Error> {
    let why = match precision {
        Precision::Fp16 if device == "cpu" => {
            "runs on a GPU only (--device cuda); on the CPU use bf16 or int8"
        }
        Precision::Int8 if device.starts_with("cuda") => {
            "runs on the CPU only; on a GPU use bf16 or fp16"
        }
        _ => return Ok(()),
    };
    Err(given.bad("precision", precision.name(), why))
}

#[cfg(test)]
mod tests {
    use super::*;
    use refscore_core::given::CommandLine;
    use refscore_core::ErrorClass;

    /// Every value came from the config file: a bad one is a configuration
    /// error at its line.
    struct InFile;

    impl Given for InFile {
        fn in_file(&self, _id: &str) -> bool {
            true
        }

        fn in_file_error(&self, _id: &str, _index: usize, msg: &str) -> Error {
            Error::config(format!("conf.toml:1: {msg}"))
        }

        fn file_values(&self, _id: &str) -> usize {
            1
        }
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn a_bad_value_is_a_usage_error_as_a_flag_and_a_config_error_in_the_file() {
        let args = || EmbedArgs {
            layer: Some(5000),
            ..EmbedArgs::default()
        };
        let flag = resolve(&mut args(), &CommandLine, &no_env).unwrap_err();
        assert_eq!(flag.class, ErrorClass::Usage);
        assert_eq!(flag.message, "--layer 5000: expected 0 to 1000");
        let file = resolve(&mut args(), &InFile, &no_env).unwrap_err();
        assert_eq!(file.class, ErrorClass::Config);
        assert_eq!(
            file.message,
            "conf.toml:1: layer = 5000: expected 0 to 1000"
        );
    }

    #[test]
    fn the_environment_names_the_model_folder_the_kernels_and_the_hubs_use() {
        let env = |name: &str| match name {
            MODEL_DIR_ENV => Some("/models/e5".to_string()),
            KERNELS_ENV => Some("portable".to_string()),
            OFFLINE_ENV => Some("0".to_string()),
            _ => None,
        };
        let s = resolve(&mut EmbedArgs::default(), &CommandLine, &env).unwrap();
        assert!(
            s.model_asked(),
            "a folder the environment names is asked for"
        );
        assert_eq!(s.options.lookup.default_dir, PathBuf::from("/models/e5"));
        assert!(!s.options.lookup.offline, "HF_HUB_OFFLINE=0 is online");
        assert_eq!(s.kernels.as_deref(), Some("portable"));
        let offline = |name: &str| (name == OFFLINE_ENV).then(|| "1".to_string());
        let s = resolve(&mut EmbedArgs::default(), &CommandLine, &offline).unwrap();
        assert!(s.options.lookup.offline);
        assert!(!s.model_asked());
        assert_eq!(
            s.options.lookup.default_dir,
            PathBuf::from(crate::DEFAULT_MODEL_DIR)
        );
    }

    #[test]
    fn the_cross_encoder_runs_with_the_embedding_models_precision_and_caches() {
        let mut args = EmbedArgs {
            precision: Some("bf16".into()),
            embed_cache_mb: Some(3),
            embed_cache: Some("cache".into()),
            ..EmbedArgs::default()
        };
        let s = resolve(&mut args, &CommandLine, &no_env).unwrap();
        let cross = s.cross_options().unwrap();
        assert_eq!(cross.precision, Precision::Bf16);
        assert_eq!(cross.cache_bytes, 3 << 20);
        assert_eq!(cross.cache_bytes, s.options.cache_bytes);
        assert_eq!(cross.store, Some(PathBuf::from("cache")));
        assert_eq!(cross.batch_tokens, s.options.batch_tokens);
    }

    #[test]
    fn idf_and_an_auto_baseline_are_fitted_on_the_whole_input() {
        let with = |idf: bool, rescale: Option<&str>| {
            let mut args = EmbedArgs {
                idf,
                rescale_baseline: rescale.map(String::from),
                ..EmbedArgs::default()
            };
            let s = resolve(&mut args, &CommandLine, &no_env).unwrap();
            s.fitted_on_whole_input()
        };
        assert_eq!(with(true, None), Some("idf"));
        assert_eq!(with(false, Some("auto")), Some("rescale_baseline auto"));
        assert_eq!(with(false, Some("0.1,0.2,0.3")), None);
    }

    #[test]
    fn the_cross_models_folder_is_read_once_as_the_settings_are_resolved() {
        let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/models/tiny-cross-roberta-nli");
        let dir = tempfile::tempdir().unwrap();
        let folder = dir.path().join("nli");
        std::fs::create_dir(&folder).unwrap();
        for entry in std::fs::read_dir(&fixture).unwrap() {
            let entry = entry.unwrap();
            std::fs::copy(entry.path(), folder.join(entry.file_name())).unwrap();
        }
        let mut args = EmbedArgs {
            cross_model: Some(folder.display().to_string()),
            ..EmbedArgs::default()
        };
        let s = resolve(&mut args, &CommandLine, &no_env).unwrap();
        // Gone after the settings were read: what checks the metrics and
        // plans the stage is the folder read then, not a second reading.
        std::fs::remove_dir_all(&folder).unwrap();
        let capability = s.cross_capability(&CommandLine).unwrap().unwrap();
        assert!(capability.gives("nli_precision"));
        let mut metrics = MetricSet::new();
        metrics.insert(&refscore_core::metric::NLI_PRECISION);
        let plan = s.cross_plan(&metrics).unwrap().expect("a cross stage");
        let names: Vec<String> = refscore_core::StagePlan::fields(&plan)
            .iter()
            .map(|f| f.name().clone())
            .collect();
        assert_eq!(names, ["nli_precision"]);
        assert!(
            s.cross_plan(&MetricSet::new()).unwrap().is_none(),
            "no cross stage without a cross metric"
        );
    }

    #[test]
    fn in_a_config_file_only_a_recipe_file_is_taken_from_the_files_folder() {
        assert!(names_file_in_config("cross_recipe", "recipes/mine.json"));
        assert!(!names_file_in_config("cross_recipe", "factcg"));
        assert!(!names_file_in_config("embed_cache", "cache"));
    }
}
