//! The settings of one `score` run: command-line flags merged over an
//! optional TOML config file, then checked.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

use clap::{Args, FromArgMatches};
use refscore_core::Error;
use refscore_read::ColumnMapping;

use crate::args::ScoreArgs;
use crate::config::{self, ConfigWords};
use crate::metrics::{self, MetricPlan};
use refscore_core::metric;

/// Settings of the judge stage (present when a judge URL is given).
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    pub url: String,
    /// `--judge-api`, or the protocol the URL implies.
    pub api: refscore_judge::Api,
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
    /// `--judge-batch`.
    pub batch: Option<refscore_judge::batch::BatchMode>,
    /// `--judge-batch-wait`.
    pub batch_wait: Option<std::time::Duration>,
}

impl Settings {
    /// The API key sent when `--overwrite` cancels a discarded run's
    /// batches: this run's judge key, or, for a run without a judge, the
    /// default variable's (`OPENAI_API_KEY`).
    pub(crate) fn batch_api_key(&self) -> Option<String> {
        match &self.judge {
            Some(j) => j.api_key(),
            None => env_text(DEFAULT_KEY_ENV),
        }
    }
}

/// The variable the judge's API key is read from unless
/// `--judge-api-key-env` names another.
const DEFAULT_KEY_ENV: &str = "OPENAI_API_KEY";

impl JudgeSettings {
    /// The API key, from the variable `--judge-api-key-env` names (none when
    /// unset or blank). Read when the endpoint is built, never stored in
    /// the settings, so no printout of them can show it.
    pub(crate) fn api_key(&self) -> Option<String> {
        env_text(&self.api_key_env)
    }
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
    /// A bert_score baseline file, read at the row of the layer in use.
    File(PathBuf),
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
    /// `--layer`: BERTScore's layer (None: the model's last).
    pub layer: Option<usize>,
    /// `--prompt-name` / `--prompt`.
    pub prompt: Option<refscore_embed::Prompt>,
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
    /// The judge metrics the run knows: built-in, and defined in the config
    /// file or `--judge-metrics` files.
    pub judge_metrics: refscore_judge::JudgeMetrics,
    /// `--resume`.
    pub resume: bool,
    /// `--shard K/N`.
    pub shard: Option<refscore_job::Shard>,
    /// `--max-judge-failures`.
    pub max_judge_failures: u64,
    /// `REFSCORE_COMMIT_SECONDS`: how often progress is committed (a test
    /// and benchmark knob; the job reads the text).
    pub commit_seconds: Option<String>,
    /// Which values came from the config file, for checks made later
    /// against the data or the model (see [`Settings::bad_value`]).
    origin: Origin,
}

/// The longest `--judge-batch-wait`: a week, well past any provider's
/// completion window (24 hours), and far from where adding it to the clock
/// would overflow.
const MAX_BATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

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

/// Where each setting's value came from: the `--config` file (whose
/// words come before the command line's) or the command line. A bad value
/// is a usage error (64) on the command line and a configuration error (78)
/// in the file, and the message names whichever was given.
#[derive(Debug, Clone)]
struct Origin {
    file: Option<ConfigWords>,
}

impl Origin {
    /// Whether the value of argument `id` came from the file.
    fn in_file(&self, id: &str) -> bool {
        self.file.as_ref().is_some_and(|f| f.lines.contains_key(id))
    }

    /// How many of argument `id`'s values came from the file (they come
    /// first).
    fn file_values(&self, id: &str) -> usize {
        self.file
            .as_ref()
            .and_then(|f| f.lines.get(id).map(Vec::len))
            .unwrap_or(0)
    }

    /// A configuration error about the `index`-th value of `id` in the
    /// file, naming the file and the value's line.
    fn in_file_error(&self, id: &str, index: usize, msg: &str) -> Error {
        match &self.file {
            Some(f) => f.file.error_at(f.line_of(id, index), msg),
            None => Error::config(format!("config file: {msg}")),
        }
    }

    /// The error for a bad value of `id`: the flag's or the file's.
    fn bad(&self, id: &str, shown: &str, why: &str) -> Error {
        if self.in_file(id) {
            self.in_file_error(id, 0, &format!("{id} = {shown}: {why}"))
        } else {
            Error::usage(format!("--{} {shown}: {why}", id.replace('_', "-")))
        }
    }

    /// Checks a value against `ok` (see [`Origin::bad`]).
    fn ranged<T: Copy + std::fmt::Display>(
        &self,
        value: Option<T>,
        id: &str,
        ok: impl Fn(T) -> bool,
        expected: &str,
    ) -> Result<Option<T>, Error> {
        match value {
            Some(v) if !ok(v) => Err(self.bad(id, &v.to_string(), &format!("expected {expected}"))),
            v => Ok(v),
        }
    }

    /// Parses a text value (see [`Origin::bad`]; `parse`'s message starts
    /// with the value).
    fn parsed<T>(
        &self,
        value: Option<String>,
        id: &str,
        parse: impl Fn(&str) -> Result<T, String>,
    ) -> Result<Option<T>, Error> {
        let Some(v) = value else { return Ok(None) };
        parse(&v).map(Some).map_err(|e| {
            if self.in_file(id) {
                self.in_file_error(id, 0, &format!("{id} = {e}"))
            } else {
                Error::usage(format!("--{} {e}", id.replace('_', "-")))
            }
        })
    }
}

/// The `score` arguments alone, as the parser the command line and the
/// config file share.
fn score_command() -> clap::Command {
    ScoreArgs::augment_args(clap::Command::new("score").no_binary_name(true))
}

/// clap's first line, as refscore's message.
pub(crate) fn first_line(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let first = text.lines().next().unwrap_or("bad options").trim();
    first.strip_prefix("error: ").unwrap_or(first).to_string()
}

impl Settings {
    /// The error for a value found bad after the settings were read (out of
    /// the model's range, say): a usage error for a flag, a configuration
    /// error for a config-file key, as when the settings are read.
    pub(crate) fn bad_value(&self, id: &str, shown: &str, why: &str) -> Error {
        self.origin.bad(id, shown, why)
    }

    /// Reads the words after `score`, with the `--config` file's keys as
    /// more words before them (the command line wins), through one parser,
    /// then checks the values and fills defaults.
    pub fn from_words(words: &[OsString]) -> Result<Settings, Error> {
        Settings::read(words, score_command(), true).map(|(s, _)| s)
    }

    /// Reads the words after a command that takes `score`'s flags and
    /// `extra` ones of its own (`judge-prompt`), as [`Settings::from_words`]
    /// does but with the output optional; returns the matches too, for the
    /// extra flags' values.
    pub(crate) fn with_extra(
        words: &[OsString],
        extra: Vec<clap::Arg>,
    ) -> Result<(Settings, clap::ArgMatches), Error> {
        Settings::read(words, score_command().args(extra), false)
    }

    fn read(
        words: &[OsString],
        cmd: clap::Command,
        needs_output: bool,
    ) -> Result<(Settings, clap::ArgMatches), Error> {
        let cli = cmd
            .clone()
            .try_get_matches_from(words)
            .map_err(|e| Error::usage(first_line(&e)))?;
        let file = match cli.get_one::<PathBuf>("config") {
            None => None,
            Some(path) => {
                let on_command_line =
                    |id: &str| cli.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
                let file = config::ConfigFile::read(path)?;
                let words = config::read(&file, &cmd, &on_command_line)?;
                // The file's words alone first: a value no flag accepts is
                // the file's fault.
                cmd.clone()
                    .try_get_matches_from(&words.words)
                    .map_err(|e| {
                        Error::config(format!("{}: {}", file.path.display(), first_line(&e)))
                    })?;
                Some(words)
            }
        };
        let all: Vec<OsString> = file
            .iter()
            .flat_map(|f| f.words.iter().cloned())
            .chain(words.iter().cloned())
            .collect();
        let matches = cmd
            .try_get_matches_from(all)
            .map_err(|e| Error::usage(first_line(&e)))?;
        let args =
            ScoreArgs::from_arg_matches(&matches).map_err(|e| Error::usage(first_line(&e)))?;
        let settings = Settings::resolve(args, &Origin { file }, needs_output)?;
        Ok((settings, cli))
    }

    /// Checks the parsed arguments and fills defaults.
    fn resolve(args: ScoreArgs, origin: &Origin, needs_output: bool) -> Result<Settings, Error> {
        let input = args.input.ok_or_else(|| {
            Error::config("no input given: name a Parquet file, directory or glob (see --help)")
        })?;
        let output = match args.output {
            Some(output) => output,
            None if !needs_output => PathBuf::new(),
            None => return Err(Error::config("no output given: pass -o FILE.parquet")),
        };
        let mapping = ColumnMapping {
            id: args.mapping.id_col,
            input: args.mapping.input_col,
            reference: args.mapping.reference_col,
            output: args.mapping.output_col,
        };
        let mut judge_metrics = refscore_judge::JudgeMetrics::builtin();
        if let Some(words) = origin.file.as_ref().filter(|f| f.defines_judge_metrics) {
            judge_metrics.read_text(&words.file.path, &words.file.text, false)?;
        }
        for path in &args.judge_metrics {
            judge_metrics.read(path, true)?;
        }
        let catalog = judge_metrics.catalog();
        let names_from_file = origin.in_file("metrics");
        let metric_names = args.metrics;
        let judge_url = origin.parsed(args.judge_url, "judge_url", |url| {
            refscore_judge::check_url(url).map(|()| url.to_string())
        })?;
        let batch = origin.parsed(
            args.judge_batch,
            "judge_batch",
            refscore_judge::batch::BatchMode::parse,
        )?;
        let batch_wait = origin.parsed(args.judge_batch_wait, "judge_batch_wait", |t| {
            match humantime::parse_duration(t) {
                Ok(d) if d <= MAX_BATCH_WAIT => Ok(d),
                Ok(_) => Err(format!(
                    "'{t}': longer than a batch can run (at most {})",
                    humantime::format_duration(MAX_BATCH_WAIT)
                )),
                Err(e) => Err(format!("'{t}': {e} (expected e.g. 90s, 45m, 2h 30m)")),
            }
        })?;
        if batch_wait.is_some() && batch.is_none() {
            return Err(Error::config(
                "--judge-batch-wait needs --judge-batch (api or dir:PATH)",
            ));
        }
        if batch == Some(refscore_judge::batch::BatchMode::Api) && judge_url.is_none() {
            return Err(Error::config(
                "--judge-batch api needs --judge-url: the Batch API is found under it",
            ));
        }
        // Request files for another machine name no server: the judge is
        // whatever answers them.
        let judge_url = match (&batch, judge_url) {
            (Some(refscore_judge::batch::BatchMode::Dir(_)), None) => {
                Some(refscore_judge::batch::OFFLINE_URL.to_string())
            }
            (_, url) => url,
        };
        // A bad --metrics value is a usage error (64); the same in the
        // config file is a configuration error (78).
        let metrics = metrics::plan(metric_names.as_deref(), judge_url.is_some(), &catalog)
            .map_err(|e| {
                if names_from_file && e.class == refscore_core::ErrorClass::Usage {
                    origin.in_file_error("metrics", 0, &format!("metrics: {}", e.message))
                } else {
                    e
                }
            })?;
        // Every built-in's default, and the chosen defined metrics': a
        // definition the run does not use changes nothing of it.
        let mut thresholds: BTreeMap<String, f64> = metrics::default_thresholds(&catalog)
            .into_iter()
            .filter(|(name, _)| {
                metric::find(name).is_some() || metrics.metrics.iter().any(|m| m.name == *name)
            })
            .collect();
        // The file's thresholds come first; the command line's add to them.
        let from_file = origin.file_values("threshold");
        for (i, t) in args.threshold.iter().enumerate() {
            let known = |k: &str| metrics::check_known(k, &catalog);
            let (k, v) = metrics::parse_threshold(t, &known).map_err(|e| {
                if i < from_file {
                    origin.in_file_error("threshold", i, &format!("thresholds: {}", e.message))
                } else {
                    e
                }
            })?;
            thresholds.insert(k, v);
        }
        // Slow stages get smaller batches, so that commits (every 30 s at
        // batch ends) bound what a crash loses: judged rows take seconds,
        // an embedded row milliseconds.
        // A batch waits for its slowest call, and a batch of 64 rows keeps at
        // most 64 calls open: with more concurrency, batches of four waves
        // (scripts/bench_judge_client.py: 256 at 200 ms went from 21% to
        // about two thirds of concurrency / latency).
        let default_batch = if metrics.wants_judge() {
            let concurrency = args.judge_concurrency.unwrap_or(4).clamp(1, 256);
            64.max(4 * concurrency)
        } else if metrics.wants_embedding() {
            1024
        } else {
            32 * 1024
        };
        let batch_size = origin
            .ranged(
                args.batch_size,
                "batch_size",
                |n| (1..=10_000_000).contains(&n),
                "1 to 10000000 rows",
            )?
            .unwrap_or(default_batch);
        let threads = origin.ranged(
            args.threads,
            "threads",
            |n| (1..=1024).contains(&n),
            "1 to 1024",
        )?;
        let rescale = match args.rescale_baseline {
            None => None,
            Some(r) if r == "auto" => Some(Rescale::Auto),
            // Anything naming a file is a baseline file; it must exist.
            Some(r) if !r.contains(',') => {
                if !Path::new(&r).is_file() {
                    return Err(origin.bad(
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
                        return Err(origin.bad(
                            "rescale_baseline",
                            &r,
                            "expected auto or three finite numbers below 1, as P,R,F",
                        ))
                    }
                }
            }
        };
        let precision = origin
            .parsed(args.precision, "precision", parse_precision)?
            .unwrap_or_default();
        let model_dir = env_text(MODEL_DIR_ENV);
        let embed = EmbedSettings {
            model: args.model,
            device: origin
                .parsed(args.device, "device", |d| {
                    refscore_embed::device_ordinal(d).map(|_| d.to_string())
                })?
                .unwrap_or_else(|| "cpu".into()),
            precision,
            idf: args.idf,
            rescale,
            layer: origin.ranged(args.layer, "layer", |n| n <= 1000, "0 to 1000")?,
            prompt: match (args.prompt_name, args.prompt) {
                (Some(name), _) => Some(refscore_embed::Prompt::Named(name)),
                (None, Some(text)) => Some(refscore_embed::Prompt::Text(text)),
                (None, None) => None,
            },
            max_seq_length: origin.ranged(
                args.max_seq_length,
                "max_seq_length",
                |n| (2..=1_000_000).contains(&n),
                "2 or more word-pieces (at most the model's position limit)",
            )?,
            cache_mb: origin
                .ranged(
                    args.embed_cache_mb,
                    "embed_cache_mb",
                    |n| n <= 1 << 20,
                    "0 to 1048576 MiB",
                )?
                .unwrap_or(256),
            store: args.embed_cache,
            store_outputs: args.embed_cache_outputs,
            kernels: env_text(KERNELS_ENV),
            lookup: refscore_embed::ModelLookup {
                default_dir: model_dir
                    .clone()
                    .map_or_else(|| refscore_embed::DEFAULT_MODEL_DIR.into(), PathBuf::from),
                offline: env_text("HF_HUB_OFFLINE").is_some_and(|v| v != "0"),
            },
            model_dir_named: model_dir.is_some(),
        };
        let band = origin.parsed(args.judge_band, "judge_band", parse_band)?;
        let in_run = |m| metrics.metrics.contains(m);
        let banded = judge_metrics.banded(&metrics.metrics);
        if band.is_some() && !(!banded.is_empty() && in_run(&metric::COSINE) && judge_url.is_some())
        {
            return Err(Error::config(
                "--judge-band needs the cosine metric and a judge metric the band decides (meaning_match, or one defined with band = true) in the run",
            ));
        }
        let reasons = origin
            .parsed(
                args.judge_reasons,
                "judge_reasons",
                refscore_judge::Reasons::parse,
            )?
            .unwrap_or_default();
        let judge_threshold = origin
            .ranged(
                args.judge_threshold,
                "judge_threshold",
                |p| (0.0..=1.0).contains(&p),
                "a probability from 0 to 1",
            )?
            .unwrap_or(0.5) as f32;
        let judge_api = origin.parsed(args.judge_api, "judge_api", refscore_judge::Api::parse)?;
        let judge = match judge_url {
            None => None,
            Some(url) => {
                let api = judge_api.unwrap_or_else(|| refscore_judge::Api::for_url(&url));
                if let (
                    Some(refscore_judge::batch::BatchMode::Dir(_)),
                    refscore_judge::Api::Anthropic,
                ) = (&batch, api)
                {
                    return Err(Error::config(
                        "--judge-batch dir: writes OpenAI Batch API lines (for vllm run-batch); \
                         a judge speaking --judge-api anthropic takes --judge-batch api",
                    ));
                }
                let timeout = origin
                    .ranged(
                        args.judge_timeout,
                        "judge_timeout",
                        |t| t > 0.0 && t <= 86_400.0,
                        "seconds above 0 and at most 86400",
                    )?
                    .unwrap_or(60.0);
                let concurrency = origin
                    .ranged(
                        args.judge_concurrency,
                        "judge_concurrency",
                        |n| (1..=256).contains(&n),
                        "1 to 256",
                    )?
                    .unwrap_or(4);
                let retries = origin
                    .ranged(
                        args.judge_retries,
                        "judge_retries",
                        |n| n <= 100,
                        "0 to 100",
                    )?
                    .unwrap_or(4);
                let rpm = origin.ranged(
                    args.judge_rpm,
                    "judge_rpm",
                    |n| n >= 1,
                    "at least 1 request per minute",
                )?;
                let tpm = origin.ranged(
                    args.judge_tpm,
                    "judge_tpm",
                    |n| n >= 1,
                    "at least 1 token per minute",
                )?;
                Some(JudgeSettings {
                    url,
                    api,
                    model: args.judge_model.unwrap_or_else(|| "default".into()),
                    api_key_env: args
                        .judge_api_key_env
                        .unwrap_or_else(|| DEFAULT_KEY_ENV.into()),
                    timeout,
                    retries,
                    concurrency,
                    rpm,
                    tpm,
                    band,
                    reasons,
                    threshold: judge_threshold,
                    cache: args.judge_cache,
                    batch,
                    batch_wait,
                })
            }
        };
        let shard = args
            .shard
            .map(|s| {
                s.parse::<refscore_job::Shard>().map_err(|e| {
                    if origin.in_file("shard") {
                        origin.in_file_error("shard", 0, &e)
                    } else {
                        Error::usage(e)
                    }
                })
            })
            .transpose()?;
        Ok(Settings {
            commit_seconds: env_text("REFSCORE_COMMIT_SECONDS"),
            origin: origin.clone(),
            resume: args.resume,
            shard,
            max_judge_failures: args.max_judge_failures.unwrap_or(0),
            judge,
            judge_where: args.judge_where,
            judge_metrics,
            embed,
            input,
            output,
            overwrite: args.overwrite,
            mapping,
            keep: args.keep.unwrap_or_default(),
            metrics,
            thresholds: thresholds.into_iter().collect(),
            batch_size,
            threads,
            quiet: args.quiet,
        })
    }
}

/// A `--precision` value.
fn parse_precision(name: &str) -> Result<refscore_embed::Precision, String> {
    refscore_embed::Precision::from_name(name.trim())
        .ok_or_else(|| format!("{name}: expected fp32, bf16 or int8"))
}
