//! The settings of one `score` run: command-line flags merged over an
//! optional TOML config file, then checked.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use refscore_batch::Error;
use refscore_read::ColumnMapping;
use serde::Deserialize;

use crate::args::ScoreArgs;
use crate::metrics::{self, MetricPlan};
use refscore_batch::metric;

/// The `--config` file: the same settings as the flags, by the flags' names
/// with `_` for `-`. Relative paths are taken from the file's directory.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct ConfigFile {
    input: Option<String>,
    output: Option<PathBuf>,
    overwrite: Option<bool>,
    id_col: Option<String>,
    input_col: Option<String>,
    reference_col: Option<String>,
    output_col: Option<String>,
    keep: Option<Vec<String>>,
    metrics: Option<Vec<String>>,
    thresholds: Option<BTreeMap<String, f64>>,
    batch_size: Option<usize>,
    threads: Option<usize>,
    quiet: Option<bool>,
    model: Option<String>,
    device: Option<String>,
    precision: Option<String>,
    idf: Option<bool>,
    rescale_baseline: Option<String>,
    max_seq_length: Option<usize>,
    embed_cache_mb: Option<usize>,
    embed_cache: Option<PathBuf>,
    embed_cache_outputs: Option<bool>,
    judge_url: Option<String>,
    judge_model: Option<String>,
    judge_api_key_env: Option<String>,
    judge_timeout: Option<f64>,
    judge_retries: Option<u32>,
    judge_concurrency: Option<usize>,
    judge_rpm: Option<u32>,
    judge_tpm: Option<u32>,
    judge_where: Option<String>,
    judge_band: Option<String>,
    judge_cache: Option<PathBuf>,
    judge_reasons: Option<String>,
    judge_threshold: Option<f64>,
    resume: Option<bool>,
    shard: Option<String>,
    max_judge_failures: Option<u64>,
}

/// Settings of the judge stage (present when a judge URL is given).
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    pub url: String,
    pub model: String,
    pub api_key_env: String,
    pub timeout: f64,
    pub retries: u32,
    pub concurrency: usize,
    pub rpm: Option<u32>,
    pub tpm: Option<u32>,
    pub band: Option<(f32, f32)>,
    pub cache: Option<PathBuf>,
    /// `--judge-reasons`.
    pub reasons: refscore_judge::Reasons,
    /// `--judge-threshold`.
    pub threshold: f32,
}

/// Parses `cosine:LO..HI` (the message names the value; [`parsed`] names
/// where it came from).
fn parse_band(spec: &str) -> Result<(f32, f32), String> {
    let bad = || format!("{spec}: expected cosine:LO..HI with 0 <= LO <= HI <= 1");
    let range = spec.strip_prefix("cosine:").ok_or_else(bad)?;
    let (lo, hi) = range.split_once("..").ok_or_else(bad)?;
    let (lo, hi): (f32, f32) = (
        lo.trim().parse().map_err(|_| bad())?,
        hi.trim().parse().map_err(|_| bad())?,
    );
    if !(0.0..=1.0).contains(&lo) || !(0.0..=1.0).contains(&hi) || lo > hi {
        return Err(bad());
    }
    Ok((lo, hi))
}

/// How BERTScore is rescaled.
#[derive(Debug, Clone, PartialEq)]
pub enum Rescale {
    /// Baselines given by the user.
    Given([f32; 3]),
    /// Baselines from random mismatched pairs of the input.
    Auto,
}

/// Settings of the embedding stage.
#[derive(Debug, Clone)]
pub struct EmbedSettings {
    pub model: Option<String>,
    pub device: String,
    /// `--precision`.
    pub precision: refscore_embed::Precision,
    pub idf: bool,
    pub rescale: Option<Rescale>,
    pub max_seq_length: Option<usize>,
    pub cache_mb: usize,
    /// `--embed-cache`.
    pub store: Option<PathBuf>,
    /// `--embed-cache-outputs`.
    pub store_outputs: bool,
    /// `REFSCORE_KERNELS`: the fused CPU kernels' path by name (None: auto).
    pub kernels: Option<String>,
    /// Where the model is looked for when none is named (`REFSCORE_MODEL_DIR`)
    /// and whether the hub may be called (`HF_HUB_OFFLINE`).
    pub lookup: refscore_embed::ModelLookup,
    /// True when `REFSCORE_MODEL_DIR` named the model: a model asked for,
    /// like `--model`, so its absence is an error.
    pub model_dir_named: bool,
}

/// Everything a `score` run needs to know, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub input: String,
    pub output: PathBuf,
    pub overwrite: bool,
    pub mapping: ColumnMapping,
    pub keep: Vec<String>,
    pub metrics: MetricPlan,
    pub thresholds: Vec<(String, f64)>,
    pub batch_size: usize,
    pub threads: Option<usize>,
    pub quiet: bool,
    pub embed: EmbedSettings,
    pub judge: Option<JudgeSettings>,
    /// `--judge-where`: the column that says which rows want judging.
    pub judge_where: Option<String>,
    /// `--resume`.
    pub resume: bool,
    /// `--shard K/N`.
    pub shard: Option<refscore_job::Shard>,
    /// `--max-judge-failures`.
    pub max_judge_failures: u64,
}

/// Forces the fused CPU kernels' path (`auto`, `avx512`, `avx2`, `portable`).
pub(crate) const KERNELS_ENV: &str = "REFSCORE_KERNELS";
/// The model folder used when `--model` is not given.
const MODEL_DIR_ENV: &str = "REFSCORE_MODEL_DIR";

/// An environment variable's value, when set and not blank. The settings
/// are the one place refscore reads the environment; the library crates
/// take what it says as typed settings.
fn env_text(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Takes a flag's value over the config file's, and fails when the value is
/// outside `ok`: exit 64 for a flag, 78 for a config-file entry.
fn ranged<T: Copy + std::fmt::Display>(
    flag: Option<T>,
    file: Option<T>,
    name: &str,
    ok: impl Fn(T) -> bool,
    expected: &str,
) -> Result<Option<T>, Error> {
    match (flag, file) {
        (Some(v), _) if !ok(v) => Err(Error::usage(format!(
            "--{} {v}: expected {expected}",
            name.replace('_', "-")
        ))),
        (None, Some(v)) if !ok(v) => Err(Error::config(format!(
            "config file: {name} = {v}: expected {expected}"
        ))),
        (f, g) => Ok(f.or(g)),
    }
}

/// A text setting from the flag or else the config file, parsed; a bad
/// flag is a usage error, a bad file value a configuration error, and the
/// message names whichever was given.
fn parsed<T>(
    flag: Option<String>,
    file: Option<String>,
    name: &str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, Error> {
    match (flag, file) {
        (Some(v), _) => parse(&v)
            .map(Some)
            .map_err(|e| Error::usage(format!("--{} {e}", name.replace('_', "-")))),
        (None, Some(v)) => parse(&v)
            .map(Some)
            .map_err(|e| Error::config(format!("config file: {name} = {e}"))),
        (None, None) => Ok(None),
    }
}

fn read_config(path: &Path) -> Result<ConfigFile, Error> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Error::io(format!("{}: cannot read config file: {e}", path.display())))?;
    toml::from_str(&text).map_err(|e| {
        let msg = e.message().to_string();
        let line = e.span().map(|s| text[..s.start].matches('\n').count() + 1);
        match line {
            Some(l) => Error::config(format!("{}:{l}: {msg}", path.display())),
            None => Error::config(format!("{}: {msg}", path.display())),
        }
    })
}

impl Settings {
    /// Merges flags over the config file (flags win) and fills defaults.
    pub fn resolve(args: ScoreArgs) -> Result<Settings, Error> {
        let (file, base) = match &args.config {
            Some(p) => (
                read_config(p)?,
                p.parent().map(Path::to_path_buf).unwrap_or_default(),
            ),
            None => (ConfigFile::default(), PathBuf::new()),
        };
        let rel = |p: String| -> String {
            if Path::new(&p).is_absolute() || base.as_os_str().is_empty() {
                p
            } else {
                base.join(p).to_string_lossy().into_owned()
            }
        };
        let input = args.input.or(file.input.map(rel)).ok_or_else(|| {
            Error::config("no input given: name a Parquet file, directory or glob (see --help)")
        })?;
        let output = args
            .output
            .or(file
                .output
                .map(|p| PathBuf::from(rel(p.to_string_lossy().into_owned()))))
            .ok_or_else(|| Error::config("no output given: pass -o FILE.parquet"))?;
        let mapping = ColumnMapping {
            id: args.mapping.id_col.or(file.id_col),
            input: args.mapping.input_col.or(file.input_col),
            reference: args.mapping.reference_col.or(file.reference_col),
            output: args.mapping.output_col.or(file.output_col),
        };
        let names_from_file = args.metrics.is_none() && file.metrics.is_some();
        let metric_names = args.metrics.or(file.metrics);
        let judge_url = parsed(args.judge_url, file.judge_url, "judge_url", |url| {
            refscore_judge::check_url(url).map(|()| url.to_string())
        })?;
        // A bad --metrics value is a usage error (64); the same in the
        // config file is a configuration error (78).
        let metrics = metrics::plan(metric_names.as_deref(), judge_url.is_some()).map_err(|e| {
            if names_from_file && e.class == refscore_batch::ErrorClass::Usage {
                Error::config(format!("config file: metrics: {}", e.message))
            } else {
                e
            }
        })?;
        let mut thresholds: BTreeMap<String, f64> =
            metrics::default_thresholds().into_iter().collect();
        for (k, v) in file.thresholds.unwrap_or_default() {
            metrics::check_known(&k)
                .map_err(|e| Error::config(format!("config file: threshold {k}: {}", e.message)))?;
            if !v.is_finite() {
                return Err(Error::config(format!(
                    "config file: threshold {k} = {v}: expected a finite number"
                )));
            }
            thresholds.insert(k, v);
        }
        for t in &args.threshold {
            let (k, v) = metrics::parse_threshold(t)?;
            thresholds.insert(k, v);
        }
        // Judged rows take seconds each: smaller batches keep progress and
        // the rows at risk in a crash small.
        // Slow stages get smaller batches, so that commits (every 30 s at
        // batch ends) bound what a crash loses: judged rows take seconds,
        // an embedded row milliseconds.
        let default_batch = if metrics.wants_judge() {
            64
        } else if metrics.wants_embedding() {
            1024
        } else {
            32 * 1024
        };
        let batch_size = ranged(
            args.batch_size,
            file.batch_size,
            "batch_size",
            |n| (1..=10_000_000).contains(&n),
            "1 to 10000000 rows",
        )?
        .unwrap_or(default_batch);
        let threads = ranged(
            args.threads,
            file.threads,
            "threads",
            |n| (1..=1024).contains(&n),
            "1 to 1024",
        )?;
        let rescale_from_flag = args.rescale_baseline.is_some();
        let rescale = match args.rescale_baseline.or(file.rescale_baseline) {
            None => None,
            Some(r) if r == "auto" => Some(Rescale::Auto),
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
                        let msg = format!(
                            "--rescale-baseline {r}: expected auto or three finite numbers below 1, as P,R,F"
                        );
                        return Err(if rescale_from_flag {
                            Error::usage(msg)
                        } else {
                            Error::config(msg)
                        });
                    }
                }
            }
        };
        let precision = parsed(args.precision, file.precision, "precision", parse_precision)?
            .unwrap_or_default();
        let embed = EmbedSettings {
            model: args.model.or(file.model),
            device: args.device.or(file.device).unwrap_or_else(|| "cpu".into()),
            precision,
            idf: args.idf || file.idf.unwrap_or(false),
            rescale,
            max_seq_length: ranged(
                args.max_seq_length,
                file.max_seq_length,
                "max_seq_length",
                |n| (2..=1_000_000).contains(&n),
                "2 or more word-pieces (at most the model's position limit)",
            )?,
            cache_mb: ranged(
                args.embed_cache_mb,
                file.embed_cache_mb,
                "embed_cache_mb",
                |n| n <= 1 << 20,
                "0 to 1048576 MiB",
            )?
            .unwrap_or(256),
            store: args.embed_cache.or(file.embed_cache),
            store_outputs: args.embed_cache_outputs || file.embed_cache_outputs.unwrap_or(false),
            kernels: env_text(KERNELS_ENV),
            lookup: refscore_embed::ModelLookup {
                default_dir: env_text(MODEL_DIR_ENV)
                    .map_or_else(|| refscore_embed::DEFAULT_MODEL_DIR.into(), PathBuf::from),
                offline: env_text("HF_HUB_OFFLINE").is_some_and(|v| v != "0"),
            },
            model_dir_named: env_text(MODEL_DIR_ENV).is_some(),
        };
        let band = parsed(args.judge_band, file.judge_band, "judge_band", parse_band)?;
        let in_run = |m| metrics.metrics.contains(m);
        if band.is_some()
            && !(in_run(&metric::MEANING_MATCH) && in_run(&metric::COSINE) && judge_url.is_some())
        {
            return Err(Error::config(
                "--judge-band needs the meaning_match and cosine metrics in the run",
            ));
        }
        let reasons = parsed(
            args.judge_reasons,
            file.judge_reasons,
            "judge_reasons",
            refscore_judge::Reasons::parse,
        )?
        .unwrap_or_default();
        let judge_threshold = ranged(
            args.judge_threshold,
            file.judge_threshold,
            "judge_threshold",
            |p| (0.0..=1.0).contains(&p),
            "a probability from 0 to 1",
        )?
        .unwrap_or(0.5) as f32;
        let judge = match judge_url {
            None => None,
            Some(url) => {
                let timeout = ranged(
                    args.judge_timeout,
                    file.judge_timeout,
                    "judge_timeout",
                    |t| t > 0.0 && t <= 86_400.0,
                    "seconds above 0 and at most 86400",
                )?
                .unwrap_or(60.0);
                let concurrency = ranged(
                    args.judge_concurrency,
                    file.judge_concurrency,
                    "judge_concurrency",
                    |n| (1..=256).contains(&n),
                    "1 to 256",
                )?
                .unwrap_or(4);
                let retries = ranged(
                    args.judge_retries,
                    file.judge_retries,
                    "judge_retries",
                    |n| n <= 100,
                    "0 to 100",
                )?
                .unwrap_or(4);
                let rpm = ranged(
                    args.judge_rpm,
                    file.judge_rpm,
                    "judge_rpm",
                    |n| n >= 1,
                    "at least 1 request per minute",
                )?;
                let tpm = ranged(
                    args.judge_tpm,
                    file.judge_tpm,
                    "judge_tpm",
                    |n| n >= 1,
                    "at least 1 token per minute",
                )?;
                Some(JudgeSettings {
                    url,
                    model: args
                        .judge_model
                        .or(file.judge_model)
                        .unwrap_or_else(|| "default".into()),
                    api_key_env: args
                        .judge_api_key_env
                        .or(file.judge_api_key_env)
                        .unwrap_or_else(|| "OPENAI_API_KEY".into()),
                    timeout,
                    retries,
                    concurrency,
                    rpm,
                    tpm,
                    band,
                    reasons,
                    threshold: judge_threshold,
                    cache: args.judge_cache.or(file
                        .judge_cache
                        .map(|p| PathBuf::from(rel(p.to_string_lossy().into_owned())))),
                })
            }
        };
        let shard = args
            .shard
            .or(file.shard)
            .map(|s| s.parse::<refscore_job::Shard>().map_err(Error::usage))
            .transpose()?;
        Ok(Settings {
            resume: args.resume || file.resume.unwrap_or(false),
            shard,
            max_judge_failures: args
                .max_judge_failures
                .or(file.max_judge_failures)
                .unwrap_or(0),
            judge,
            judge_where: args.judge_where.or(file.judge_where),
            embed,
            input,
            output,
            overwrite: args.overwrite || file.overwrite.unwrap_or(false),
            mapping,
            keep: args.keep.or(file.keep).unwrap_or_default(),
            metrics,
            thresholds: thresholds.into_iter().collect(),
            batch_size,
            threads,
            quiet: args.quiet || file.quiet.unwrap_or(false),
        })
    }
}

/// A `--precision` value.
fn parse_precision(name: &str) -> Result<refscore_embed::Precision, String> {
    refscore_embed::Precision::from_name(name.trim())
        .ok_or_else(|| format!("{name}: expected fp32, bf16 or int8"))
}
