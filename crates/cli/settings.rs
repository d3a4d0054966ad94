//! The settings of one `score` run: command-line flags merged over an
//! optional TOML config file, then checked.

mod judge;
mod origin;

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Arc;

use clap::{Args, FromArgMatches};
use refscore_core::metric;
use refscore_core::{Error, Given};
use refscore_embed::EmbedSettings;
use refscore_read::ColumnMapping;
use refscore_write::{DeltaTable, LocalFile, ObjectUpload, Sink};

use crate::args::ScoreArgs;
use crate::config;
use crate::metrics::{self, MetricPlan};
use origin::Origin;

pub(crate) use judge::api_key;
pub(crate) use refscore_judge::options::JudgeSettings;

/// Everything a `score` run needs to know, resolved.
#[derive(Debug, Clone)]
pub struct Settings {
    pub input: String,
    /// The local result file the run writes: `-o`, or the local copy of an
    /// object-store output (a Delta table's: `-o`, the run names its own).
    pub output: PathBuf,
    /// Where the finished result and summary go: `-o` and `--output-format`.
    pub sink: Arc<dyn Sink>,
    pub overwrite: bool,
    pub mapping: ColumnMapping,
    pub keep: Vec<String>,
    pub metrics: MetricPlan,
    pub thresholds: Vec<(String, f64)>,
    /// `--gold METRIC=COLUMN`: human labels, metric → input column (each
    /// column also kept in the result). The config file's `[gold]` entries
    /// come first; the command line's add to them, and replace a file's
    /// entry for the same metric.
    pub gold: Vec<(String, String)>,
    /// Where each `gold` entry was given, as messages name it:
    /// `--gold METRIC=COLUMN`, or the config file's line.
    pub gold_given: Vec<String>,
    /// `--gold-confidence`: the confidence of a verdict judge's TPR and TNR
    /// lower bounds (0.9 unless given).
    pub gold_confidence: f64,
    pub batch_size: usize,
    /// `--table-version`, `--store-retries`: how the input's source is read.
    pub source: refscore_read::SourceOptions,
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
    /// Whether `--max-judge-failures` was given: without it, rows whose
    /// judge failed for good fail the run only when they are every row
    /// the judge was asked about (a judge that rejects every request).
    pub judge_failures_limited: bool,
    /// `REFSCORE_COMMIT_SECONDS`: how often progress is committed (a test
    /// and benchmark knob; the job reads the text).
    pub commit_seconds: Option<String>,
    /// Which values came from the config file, for checks made later
    /// against the data or the model (see [`Settings::given`]).
    origin: Origin,
}

/// An environment variable's value, when set and not blank. The settings
/// are the one place refscore reads the environment; the library crates
/// take what it says as typed settings.
fn env_text(name: &str) -> Option<String> {
    std::env::var(name)
        .ok()
        .map(|v| v.trim().to_string())
        .filter(|v| !v.is_empty())
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
    /// Where each value was given, for a value found bad after the
    /// settings were read (out of the model's range, say): a usage error
    /// for a flag, a configuration error for a config-file key, as when the
    /// settings are read.
    pub(crate) fn given(&self) -> &impl Given {
        &self.origin
    }

    /// Reads the words after `score`, with the `--config` file's keys as
    /// more words before them (the command line wins), through one parser,
    /// then checks the values and fills defaults.
    pub fn from_words(words: &[OsString]) -> Result<Settings, Error> {
        Settings::read(words, score_command(), true).map(|(s, _)| s)
    }

    /// The settings of a `score` command line already parsed (`args` from
    /// `matches`, of the `words` after `score`): the command line is parsed
    /// again only when a config file's words go before it.
    pub(crate) fn from_parsed(
        args: ScoreArgs,
        matches: &clap::ArgMatches,
        words: &[OsString],
    ) -> Result<Settings, Error> {
        Settings::merge(args, matches, words, score_command(), true)
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
        let args = ScoreArgs::from_arg_matches(&cli).map_err(|e| Error::usage(first_line(&e)))?;
        let settings = Settings::merge(args, &cli, words, cmd, needs_output)?;
        Ok((settings, cli))
    }

    /// The settings of `args` (parsed from `words` as `cli`), with the
    /// `--config` file's words put before the command line's when one is
    /// named.
    fn merge(
        args: ScoreArgs,
        cli: &clap::ArgMatches,
        words: &[OsString],
        cmd: clap::Command,
        needs_output: bool,
    ) -> Result<Settings, Error> {
        let Some(path) = cli.get_one::<PathBuf>("config") else {
            return Settings::resolve(args, &Origin { file: None }, needs_output);
        };
        let on_command_line =
            |id: &str| cli.value_source(id) == Some(clap::parser::ValueSource::CommandLine);
        let file = config::ConfigFile::read(path)?;
        let file_words = config::read(&file, &cmd, &on_command_line)?;
        // The file's words alone first: a value no flag accepts is the
        // file's fault.
        cmd.clone()
            .try_get_matches_from(&file_words.words)
            .map_err(|e| Error::config(format!("{}: {}", file.path.display(), first_line(&e))))?;
        let all: Vec<OsString> = (file_words.words.iter().cloned())
            .chain(words.iter().cloned())
            .collect();
        let matches = cmd
            .try_get_matches_from(all)
            .map_err(|e| Error::usage(first_line(&e)))?;
        let args =
            ScoreArgs::from_arg_matches(&matches).map_err(|e| Error::usage(first_line(&e)))?;
        let origin = Origin {
            file: Some(file_words),
        };
        Settings::resolve(args, &origin, needs_output)
    }

    /// Checks the parsed arguments and fills defaults, stage by stage.
    fn resolve(
        mut args: ScoreArgs,
        origin: &Origin,
        needs_output: bool,
    ) -> Result<Settings, Error> {
        let input = args.input.take().ok_or_else(|| {
            Error::config("no input given: name a Parquet file, directory or glob (see --help)")
        })?;
        let output = match args.output.take() {
            Some(output) => output,
            None if !needs_output => PathBuf::new(),
            None => return Err(Error::config("no output given: pass -o FILE.parquet")),
        };
        let (output, sink) = destination(
            output,
            args.output_format.take(),
            args.run_dir.take(),
            source_options_in(&args.source, origin)?,
            origin,
        )?;
        let mapping = ColumnMapping {
            id: args.mapping.id_col.take(),
            input: args.mapping.input_col.take(),
            reference: args.mapping.reference_col.take(),
            output: args.mapping.output_col.take(),
        };
        let judge_metrics = read_judge_metrics(&args, origin)?;
        let catalog = judge_metrics.catalog();
        // Only judge-prompt reads settings without an output.
        let target = refscore_judge::options::target(&mut args.judge, origin, !needs_output)?;
        // A bad --metrics value is a usage error (64); the same in the
        // config file is a configuration error (78).
        let embed = refscore_embed::options::resolve(&mut args.embed, origin, &env_text)?;
        let configured = metrics::Configured {
            judge: target.url.is_some(),
            local_facts_only: target.local_facts_only,
            cross: embed.cross_capability(origin)?,
        };
        let metrics =
            metrics::plan(args.metrics.as_deref(), &configured, &catalog).map_err(|e| {
                if origin.in_file("metrics") && e.class == refscore_core::ErrorClass::Usage {
                    origin.in_file_error("metrics", 0, &format!("metrics: {}", e.message))
                } else {
                    e
                }
            })?;
        let thresholds = thresholds(&args, origin, &catalog, &metrics)?;
        let banded = judge_metrics.any_banded(&metrics.metrics);
        let judge = refscore_judge::options::resolve(
            &mut args.judge,
            origin,
            target,
            &metrics.metrics,
            banded,
        )?;
        // Slow stages get smaller batches, so that commits (every 30 s at
        // batch ends) bound what a crash loses: judged rows take seconds,
        // an embedded row milliseconds.
        // A batch waits for its slowest call, and a batch of 64 rows keeps at
        // most 64 calls open: with more concurrency, batches of four waves
        // (scripts/bench/judge-client.py: 256 at 200 ms went from 21% to
        // about two thirds of concurrency / latency).
        // A cross-encoder reads each pair in both directions, a few to a few
        // hundred pairs a second on a CPU (docs/performance.md): 256 rows
        // take seconds to a minute. A cross-only run used to get the
        // lexical 32,768, an hour or more between commits.
        let default_batch = match &judge {
            Some(j) if metrics.wants_judge() => 64.max(4 * j.concurrency),
            _ if metrics.wants_cross() => 256,
            _ if metrics.wants_embedding() => 1024,
            _ => 32 * 1024,
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
        let shard = args
            .shard
            .take()
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
        let (gold, gold_given) = gold_labels(&args.gold, origin)?;
        let gold_confidence = origin.ranged(
            args.gold_confidence,
            "gold_confidence",
            |c: f64| c > 0.0 && c < 1.0,
            "a probability between 0 and 1 (not included), e.g. 0.9",
        )?;
        if gold_confidence.is_some() && gold.is_empty() {
            return Err(Error::usage(
                "--gold-confidence sets the level of --gold's TPR and TNR bounds: give --gold METRIC=COLUMN too"
                    .to_string(),
            ));
        }
        let keep = args.keep.take().unwrap_or_default();
        Ok(Settings {
            commit_seconds: env_text("REFSCORE_COMMIT_SECONDS"),
            origin: origin.clone(),
            resume: args.resume,
            shard,
            max_judge_failures: args.max_judge_failures.unwrap_or(0),
            judge_failures_limited: args.max_judge_failures.is_some(),
            judge,
            judge_where: args.judge.judge_where.take(),
            judge_metrics,
            embed,
            input,
            output,
            sink,
            overwrite: args.overwrite,
            mapping,
            keep,
            gold,
            gold_given,
            gold_confidence: gold_confidence.unwrap_or(refscore_stats::agreement::RATE_CONFIDENCE),
            metrics,
            thresholds,
            batch_size,
            source: source_options_in(&args.source, origin)?,
            threads,
            quiet: args.quiet,
        })
    }

    /// The API key sent when `--overwrite` cancels a discarded run's
    /// batches at a server other than this run's judge: the default
    /// variable's (`OPENAI_API_KEY`), never a key this run named for its
    /// own judge.
    pub(crate) fn default_api_key(&self) -> Option<String> {
        judge::default_api_key()
    }
}

/// The judge metrics the run knows: the built-in ones, those the config
/// file defines, then those of each `--judge-metrics` file.
fn read_judge_metrics(
    args: &ScoreArgs,
    origin: &Origin,
) -> Result<refscore_judge::JudgeMetrics, Error> {
    let mut known = match &origin.file {
        Some(words) => words.file.judge_metrics.clone(),
        None => refscore_judge::JudgeMetrics::builtin(),
    };
    for path in &args.judge.judge_metrics {
        known.read(path, true)?;
    }
    Ok(known)
}

/// The pass thresholds: every built-in's default and the chosen defined
/// metrics' (a definition the run does not use changes nothing of it),
/// then the file's `[thresholds]`, then the command line's.
fn thresholds(
    args: &ScoreArgs,
    origin: &Origin,
    catalog: &metric::Catalog,
    metrics: &MetricPlan,
) -> Result<Vec<(String, f64)>, Error> {
    let mut thresholds: BTreeMap<String, f64> = metrics::default_thresholds(catalog)
        .into_iter()
        .filter(|(name, _)| {
            metric::find(name).is_some() || metrics.metrics.iter().any(|m| m.name == *name)
        })
        .collect();
    let from_file = origin.file_values("threshold");
    for (i, t) in args.threshold.iter().enumerate() {
        let known = |k: &str| metrics::check_known(k, catalog);
        let (k, v) = metrics::parse_threshold(t, &known).map_err(|e| {
            if i < from_file {
                origin.in_file_error("threshold", i, &format!("thresholds: {}", e.message))
            } else {
                e
            }
        })?;
        thresholds.insert(k, v);
    }
    Ok(thresholds.into_iter().collect())
}

/// The `--gold` mappings, the config file's first (see [`Settings::gold`]),
/// with where each was given. A mapping that does not parse is a usage
/// error naming the flag, or a configuration error at the file's line.
fn gold_labels(
    values: &[String],
    origin: &Origin,
) -> Result<(Vec<(String, String)>, Vec<String>), Error> {
    let from_file = origin.file_values("gold");
    let mut gold: Vec<(String, String)> = Vec::new();
    let mut given: Vec<String> = Vec::new();
    for (i, g) in values.iter().enumerate() {
        let (metric, column) = refscore_report::gold::parse_mapping(g).map_err(|e| {
            if i < from_file {
                origin.in_file_error("gold", i, &e.message)
            } else {
                e
            }
        })?;
        let shown = if i < from_file {
            origin
                .in_file_error("gold", i, &format!("[gold] {metric} = \"{column}\""))
                .message
        } else {
            format!("--gold {metric}={column}")
        };
        match gold.iter().position(|(m, _)| *m == metric) {
            // The command line's mapping for a metric replaces the file's.
            Some(at) if i >= from_file && at < from_file => {
                gold[at] = (metric, column);
                given[at] = shown;
            }
            _ => {
                gold.push((metric, column));
                given.push(shown);
            }
        }
    }
    Ok((gold, given))
}

/// The input's source options from `--table-version`, `--table-timestamp`
/// and `--store-retries`.
pub(crate) fn source_options(
    args: &crate::args::SourceArgs,
) -> Result<refscore_read::SourceOptions, Error> {
    source_options_in(args, &Origin { file: None })
}

/// [`source_options`], a bad value named as `origin` gave it (a flag, or
/// the config file's line).
fn source_options_in(
    args: &crate::args::SourceArgs,
    origin: &Origin,
) -> Result<refscore_read::SourceOptions, Error> {
    let defaults = refscore_read::SourceOptions::default();
    let table_timestamp_ms = origin.parsed(
        args.table_timestamp.clone(),
        "table_timestamp",
        timestamp_ms,
    )?;
    Ok(refscore_read::SourceOptions {
        table_version: args.table_version,
        table_timestamp_ms,
        store: refscore_read::StoreOptions {
            retries: args.store_retries.unwrap_or(defaults.store.retries),
        },
        table_commit_only: false,
    })
}

/// Milliseconds since the epoch of an RFC 3339 time, or of a date's
/// midnight UTC.
fn timestamp_ms(text: &str) -> Result<i64, String> {
    let full = if text.len() == 10 {
        format!("{text}T00:00:00Z")
    } else {
        text.to_string()
    };
    let at = humantime::parse_rfc3339_weak(&full).map_err(|e| {
        format!("{text}: not a time ({e}); give 2026-11-25T06:00:00Z or 2026-11-25")
    })?;
    let since = at
        .duration_since(std::time::UNIX_EPOCH)
        .map_err(|_| format!("{text}: before 1970"))?;
    Ok(since.as_millis() as i64)
}

/// The local result file and the sink that publishes it, by
/// `--output-format` (the registry of sinks): `parquet` (the default), a
/// local file or, for `-o URL`, an upload whose local copy lies in
/// `--run-dir` or under the cache folder, in a folder named after the URL,
/// so a re-run finds its run there; `delta`, a Delta table the run's rows
/// are appended to (a local table keeps its runs' local results in
/// `TABLE/_refscore/`, a store's in that cache folder).
fn destination(
    output: PathBuf,
    format: Option<String>,
    run_dir: Option<PathBuf>,
    source: refscore_read::SourceOptions,
    origin: &Origin,
) -> Result<(PathBuf, Arc<dyn Sink>), Error> {
    let table = match format.as_deref().map(str::trim) {
        None | Some("parquet") => false,
        Some("delta") => true,
        Some(other) => {
            return Err(origin.bad(
                "output_format",
                other,
                "not a format refscore writes; give parquet (one result file) or delta (rows \
                 appended to a Delta table)",
            ))
        }
    };
    let text = output.to_string_lossy().into_owned();
    if !refscore_read::source::is_url(&text) {
        if let Some(dir) = run_dir {
            return Err(Error::config(format!(
                "--run-dir {}: applies to an object-store output (-o s3://...); a local \
                 output's run folder lies beside it",
                dir.display()
            )));
        }
        if table {
            let sink = DeltaTable::local(&output)?;
            return Ok((output, Arc::new(sink)));
        }
        let sink = LocalFile::new(&output);
        return Ok((output, Arc::new(sink)));
    }
    let staging = match run_dir {
        Some(dir) => dir,
        None => {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(PathBuf::from)
                .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cache")))
                .ok_or_else(|| {
                    Error::config(format!(
                        "{}: no HOME or XDG_CACHE_HOME for the output's local copy; pass \
                         --run-dir DIR",
                        refscore_read::source::redact(&text)
                    ))
                })?;
            let shown = refscore_read::source::redact(&text);
            let name: String = shown
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || ".-".contains(c) {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            cache.join("refscore").join("outputs").join(name)
        }
    };
    if table {
        let sink = DeltaTable::remote(&text, &staging, source.store)?;
        return Ok((staging, Arc::new(sink)));
    }
    let publish = ObjectUpload::new(&text, &staging, source.store)?;
    Ok((publish.local_copy().to_path_buf(), Arc::new(publish)))
}
