//! Command-line arguments (clap). Every `score` setting is optional here so
//! that a `--config` file can supply it: `config.rs` turns the file into
//! more words for this same parser, and `settings.rs` checks the result.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use refscore_core::{metric, ErrorClass};

/// Score LLM outputs against reference answers, in bulk, offline.
#[derive(Debug, Parser)]
#[command(name = "refscore", version, about, long_about = None, after_help = exit_codes())]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

/// The exit codes, shown in `--help` of `refscore` and of `refscore score`:
/// made from [`ErrorClass`], the one table of codes.
pub(crate) fn exit_codes() -> String {
    let mut text = String::from(
        "Exit codes:\n  0   success (rows that could not be scored are marked status=error in the output)\n",
    );
    for class in ErrorClass::ALL {
        let head = format!("  {:<3}", class.exit_code());
        text.push_str(&wrapped(&head, class.meaning(), 5));
    }
    text
}

/// `head` then `words`, wrapped at 88 columns with later lines indented by
/// `indent` (wrapped here: clap's own wrapping would drop the indent).
fn wrapped(head: &str, words: &str, indent: usize) -> String {
    let mut text = String::new();
    let mut line = head.to_string();
    for word in words.split(' ') {
        if line.len() + 1 + word.len() > 88 {
            text.push_str(&line);
            text.push('\n');
            line = " ".repeat(indent);
        }
        line.push(' ');
        line.push_str(word);
    }
    text.push_str(&line);
    text.push('\n');
    text
}

/// The `--metrics` table of `score --help`, made from the metric registry:
/// each group and family with its members and what it needs.
fn metrics_help() -> String {
    let mut text =
        String::from("Metrics (--metrics, comma-separated; groups expand to their members):\n");
    for name in metric::group_names() {
        let members = metric::Catalog::builtin()
            .named(name)
            .expect("a group has members");
        let group = members[0].group;
        let names: Vec<&str> = members.iter().map(|m| m.name.as_str()).collect();
        let mut words = names.join(", ");
        if group.name() == name && !group.needs().is_empty() {
            words.push_str(&format!(" ({})", group.needs()));
        }
        if name == "judge" {
            words.push_str(
                "; each metric adds its value, explanation and _source columns, plus judge_* accounting; metrics you define (--judge-metrics) join this group",
            );
        }
        text.push_str(&wrapped(&format!("  {name:<9} "), &words, 12));
    }
    text.push_str(&wrapped(
        "  all       ",
        "every metric that can run (the default; embedding metrics are skipped with a \
         warning when no model is found and none was asked for by name; judge metrics run \
         only when --judge-url is given)",
        12,
    ));
    text
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Score a Parquet dataset and write one result row per input row.
    #[command(after_help = format!("{}{SCORE_HELP}{}", metrics_help(), exit_codes()))]
    Score(Box<ScoreArgs>),
    /// Show a dataset's files, schema, row count and how its columns would be mapped.
    Inspect(InspectArgs),
    /// Add up the summaries of shards (`score --shard K/N`) into the summary of the
    /// whole run: the same counts, means and pass rates an unsharded run prints.
    MergeSummaries(MergeArgs),
    /// Write one self-contained HTML page (and optionally JSON) about a result: per
    /// metric distribution, pass rate, lowest rows; with --baseline, what changed.
    #[command(after_help = format!("{REPORT_HELP}{}", exit_codes()))]
    Report(Box<ReportArgs>),
    /// Fit the cascade's band from human labels: the --judge-band LO..HI whose sides,
    /// decided by an embedding or lexical score alone, disagree with the labels at most
    /// --max-error each, leaving as few rows as possible to the judge.
    #[command(after_help = format!("{CALIBRATE_BAND_HELP}{}", exit_codes()))]
    CalibrateBand(CalibrateBandArgs),
    /// List the judge metrics a run can ask for (built-in and yours), or print one's
    /// definition as TOML to start a rubric of your own from.
    JudgeMetrics(JudgeMetricsArgs),
    /// Print the exact request the judge would get for one metric and one row, without
    /// sending anything. Takes the flags of `score` (the output is not needed).
    #[command(after_help = JUDGE_PROMPT_HELP)]
    JudgePrompt(Box<JudgePromptArgs>),
}

const JUDGE_PROMPT_HELP: &str = "\
Example:
  refscore judge-prompt --metric concise --row q-17 data.parquet --config refscore.toml
The request is the first one sent: with --judge-reasons failures (the default) it is cut
after the verdict, and a failing verdict is asked again uncut. A server that refuses the
JSON schema is sent the same messages with JSON mode, then plain text.
";

#[derive(Debug, Args)]
pub struct JudgeMetricsArgs {
    /// Print this metric's definition as TOML ([judge.metric.NAME] table)
    #[arg(long, value_name = "NAME")]
    pub show: Option<String>,

    /// A config file whose [judge.metric.NAME] tables define metrics
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// A file of [judge.metric.NAME] tables (repeatable)
    #[arg(long, value_name = "FILE")]
    pub judge_metrics: Vec<PathBuf>,
}

#[derive(Debug, Args)]
pub struct JudgePromptArgs {
    /// The judge metric whose request to show
    #[arg(long, value_name = "NAME", required = true)]
    pub metric: String,

    /// The row, by its id (the id column's value, else its 0-based ordinal)
    #[arg(long, value_name = "ID", required = true)]
    pub row: String,

    #[command(flatten)]
    pub score: ScoreArgs,
}

const REPORT_HELP: &str = "\
With --baseline, rows are paired by id; each metric gets the mean difference with a
95% paired bootstrap interval (fixed seed), the rows that flipped pass -> fail and
fail -> pass, and a verdict: worse (interval below 0), better (above 0) or no clear
change. Texts come from --keep columns of the result, else from --input joined by id.

Example (a nightly CI gate):
  refscore report tonight.parquet --baseline last-night.parquet --by category \\
      --fail-on-regression token_f1=0.01,exact_match -o report.html --json report.json

Exit codes: as for `score`, and
  1   a metric named in --fail-on-regression regressed, or a --gate failed (the report
      is written)

";

const CALIBRATE_BAND_HELP: &str = "
Reads a result scored with human labels (score --gold meaning_match=COL, or --gold COL
here) and the stand-in score (--by, a metric of the same run). HI is the lowest cut-off
whose rows above, decided true, are labelled false at most --max-error of the time; LO
the highest, up to HI, whose rows below, decided false, are labelled true at most
--max-error of the time. Each side's error is printed with its Wilson 95% interval: with
few labels on a side the interval is wide, and the fit is only as good as the labels. A
side no cut-off can fit is left open (-inf or inf: it decides nothing). With --confidence
the printed band carries its guarantee (e.g. cosine:0.4..0.9,max_error=0.05,confidence=0.9,
sides=both), which the runs that use it check against their labelled rows.

Example:
  refscore calibrate-band tonight.parquet --metric meaning_match --by cosine --max-error 0.02

";

/// `refscore calibrate-band`.
#[derive(Debug, Args)]
pub struct CalibrateBandArgs {
    /// Result of `refscore score` with human labels for --metric
    #[arg(value_name = "RESULT")]
    pub result: String,

    /// The verdict the band decides
    #[arg(long, value_name = "METRIC", default_value = "meaning_match")]
    pub metric: String,

    /// The score the band reads: a lexical, embedding or cross-encoder score
    /// column of the result (cosine, bertscore_f1, token_f1, nli_equivalence, ...).
    /// Several, comma-separated, fit a chain of tiers in that order: each band on the
    /// labelled rows the ones before it leave
    #[arg(
        long,
        value_name = "METRIC[,METRIC...]",
        default_value = "cosine",
        value_delimiter = ','
    )]
    pub by: Vec<String>,

    /// Largest share of the labelled rows on each side that may disagree with their label
    #[arg(long, value_name = "SHARE", default_value_t = 0.02)]
    pub max_error: f64,

    /// Hold each side's upper Clopper-Pearson bound of its error, at this confidence
    /// (1 - delta, e.g. 0.9), to --max-error rather than its observed error: a side
    /// decides only where the labels show, with that confidence, that its error is
    /// within it, and says how many more labels it needs where they cannot
    #[arg(long, value_name = "C")]
    pub confidence: Option<f64>,

    /// The column holding the human labels [default: the one `score --gold` recorded]
    #[arg(long, value_name = "COLUMN")]
    pub gold: Option<String>,

    /// Write every figure as JSON here as well
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// Print only the --judge-band line
    #[arg(short, long)]
    pub quiet: bool,
}

/// `refscore report`.
#[derive(Debug, Args)]
pub struct ReportArgs {
    /// Result of `refscore score`: a Parquet file, a directory of part files or a
    /// quoted glob
    #[arg(value_name = "RESULT")]
    pub result: String,

    /// A previous result to compare with (same forms as RESULT)
    #[arg(long, value_name = "PREVIOUS")]
    pub baseline: Option<String>,

    /// RESULT is a Delta table `score --output-format delta` appends to: report the rows
    /// one run appended, named by its commit's table version or its run id [default: every
    /// row of the table]
    #[arg(long, value_name = "VERSION|RUN_ID")]
    pub night: Option<String>,

    /// The same for PREVIOUS: e.g. --baseline TABLE --baseline-night 41 --night 42
    #[arg(long, value_name = "VERSION|RUN_ID")]
    pub baseline_night: Option<String>,

    /// The scoring input, for texts (and --by) the result did not keep; joined by id
    #[arg(long, value_name = "INPUT")]
    pub input: Option<String>,

    #[command(flatten)]
    pub mapping: MappingArgs,

    /// Category column (kept in the result, or in --input): the same figures per value,
    /// sorted by the largest change
    #[arg(long, value_name = "COL")]
    pub by: Option<String>,

    /// Exit 1 when a metric's 95% interval lies wholly below -DELTA (default 0);
    /// `all` checks every metric. Needs --baseline
    #[arg(long, value_name = "METRIC[=DELTA],...", value_delimiter = ',')]
    pub fail_on_regression: Vec<String>,

    /// Exit 1 unless a labelled verdict's TPR (or TNR) is proven at least MIN: its
    /// one-sided lower Clopper-Pearson bound at --gate-confidence, on the rows labelled
    /// true (false). METRIC defaults to every labelled verdict, e.g. 'tpr>=0.9,tnr>=0.9'
    #[arg(long, value_name = "[METRIC.]tpr|tnr>=MIN,...", value_delimiter = ',')]
    pub gate: Vec<String>,

    /// The confidence of --gate's lower bounds (1 - delta)
    #[arg(long, value_name = "LEVEL", default_value_t = 0.9)]
    pub gate_confidence: f64,

    /// Pass threshold for a metric, e.g. token_f1=0.6 (repeatable) [default: the one the
    /// result records, i.e. what its summary used, else `score`'s default]
    #[arg(long, value_name = "METRIC=VALUE")]
    pub threshold: Vec<String>,

    /// Human labels for a metric, as `score --gold` takes them (repeatable) [default: the
    /// mapping the result records]
    #[arg(long, value_name = "METRIC=COLUMN")]
    pub gold: Vec<String>,

    /// Worst-scoring rows listed per metric (the lowest values; the highest
    /// for a lower-is-better metric such as nli_contradiction)
    #[arg(long, value_name = "N", default_value_t = 10)]
    pub lowest: usize,

    /// Flipped rows listed per metric and direction
    #[arg(long, value_name = "N", default_value_t = 20)]
    pub flips: usize,

    /// Bootstrap replicates, 100 to 100000
    #[arg(long, value_name = "N", default_value_t = refscore_report::DEFAULT_REPLICATES)]
    pub replicates: usize,

    /// Bootstrap seed
    #[arg(long, value_name = "N", default_value_t = refscore_report::DEFAULT_SEED)]
    pub seed: u64,

    /// Write every figure as JSON here
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,

    /// The HTML page to write
    #[arg(short, long, value_name = "FILE.html")]
    pub output: Option<PathBuf>,

    /// Do not print the verdicts
    #[arg(short, long)]
    pub quiet: bool,
}

/// `refscore merge-summaries`.
#[derive(Debug, Args)]
#[command(after_help = "\
Medians come from the shards' histograms (bins of 1e-4), so they equal the unsharded
run's to within 5e-5, like every refscore median. Wall time is the longest shard's.")]
pub struct MergeArgs {
    /// The shards' summary files (<OUTPUT>.summary.json), in any order
    #[arg(required = true, value_name = "SUMMARY.json")]
    pub summaries: Vec<PathBuf>,

    /// Write the merged summary here (JSON) as well as printing it
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// What -o names: parquet (one result file, the default) or delta (a Delta table's
    /// folder or URL: the run's rows are appended in one commit that records the run, so a
    /// run is appended at most once; the table is created on first use, and new result
    /// columns are added to it)
    #[arg(long, value_name = "FORMAT")]
    pub output_format: Option<String>,

    /// Do not print the table
    #[arg(short, long)]
    pub quiet: bool,
}

const SCORE_HELP: &str = "
Output: Parquet (zstd) with `id`, the metric columns, `status` (ok | partial | error),
`error`, then any --keep columns; plus <OUTPUT>.summary.json. The file appears only
when complete. Metric definitions: docs/metrics.md in the refscore repository.

Crashes and nightly runs: progress is committed to a hidden folder beside the output
(.<OUTPUT>.refscore-run/) at least every 30 s and at the end of each input row group
(at most every 2 s), so a crash (kill -9, OOM, reboot) loses at most about 30 s of work
or one row group, whichever is less, plus the batch in progress (commits come at batch
ends; default batches take seconds: 32,768 rows lexical, 1,024 with embedding, 64
with judge metrics); judge answers are journaled as they arrive and never paid twice. `--resume` finishes the run; without it a leftover run is
reported (exit 78) and never reused or deleted silently.

Example:
  refscore score examples/qa.parquet -o scores.parquet --input-col question

";

/// Where the input is read from: a Delta table's version, and how hard to
/// try an object store.
#[derive(Debug, Args, Default, Clone)]
pub struct SourceArgs {
    /// A table's version to read: a Delta Lake table's version (the input holds
    /// _delta_log/) or an Iceberg table's snapshot id (it holds metadata/) [default: the
    /// latest]
    #[arg(long, value_name = "N")]
    pub table_version: Option<u64>,
    /// A table's version (Delta) or snapshot (Iceberg) that was current at this time: RFC 3339
    /// (2026-11-25T06:00:00Z) or a date (2026-11-25, its midnight UTC)
    #[arg(long, value_name = "TIME", conflicts_with = "table_version")]
    pub table_timestamp: Option<String>,
    /// Object-store input (s3://, gs://, az://, https://): retries of a failed request, with
    /// exponential backoff, within 3 minutes [default: 10]
    #[arg(long, value_name = "N")]
    pub store_retries: Option<usize>,
}

/// Which input columns play which role.
#[derive(Debug, Args, Default, Clone)]
pub struct MappingArgs {
    /// Column with the row id [default: `id`, or an alias: row_id, example_id, uuid;
    /// the row ordinal when absent]
    #[arg(long, value_name = "COL")]
    pub id_col: Option<String>,
    /// Column with the question/prompt [default: `input`, or: question, prompt, query]
    #[arg(long, value_name = "COL")]
    pub input_col: Option<String>,
    /// Column with the reference (ground-truth) answer [default: `reference`, or:
    /// ground_truth, expected_output, expected_answer, gold_answer, target]
    #[arg(long, value_name = "COL")]
    pub reference_col: Option<String>,
    /// Column with the model's answer [default: `output`, or: actual_output, response,
    /// prediction, model_output, completion]
    #[arg(long, value_name = "COL")]
    pub output_col: Option<String>,
}

#[derive(Debug, Args)]
pub struct ScoreArgs {
    /// Input: a Parquet file, a directory of them, or a quoted glob ("data/*.parquet"); local,
    /// or an s3://, gs://, az:// or https:// URL (credentials from AWS_*, GOOGLE_*, AZURE_*); or
    /// a Delta Lake or Iceberg table's folder or URL (its current version, or --table-version)
    pub input: Option<String>,

    /// Result file to write (Parquet): a local path, or an s3://, gs://, az:// URL (written
    /// locally first, then uploaded whole with its summary: a reader never sees part of it)
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// What -o names: parquet (one result file, the default) or delta (a Delta table's
    /// folder or URL: the run's rows are appended in one commit that records the run, so a
    /// run is appended at most once; the table is created on first use, and new result
    /// columns are added to it)
    #[arg(long, value_name = "FORMAT")]
    pub output_format: Option<String>,

    /// For an object-store output: the local folder for its copy and run folder (--resume)
    /// [default: ~/.cache/refscore/outputs/<the URL>]
    #[arg(long, value_name = "DIR")]
    pub run_dir: Option<PathBuf>,

    /// Replace the output file if it exists, or discard an interrupted run of it and start
    /// again. Never replaces an input file
    #[arg(long)]
    pub overwrite: bool,

    /// Finish an interrupted run of the same command: scores only the rows its committed
    /// progress lacks (and rows whose judge calls failed), then writes the output an
    /// uninterrupted run would have written. Refused (exit 78) when the input files,
    /// settings, model files or judge prompt versions changed. With nothing left over,
    /// starts a normal run, or exits 0 when the output is already complete
    #[arg(long)]
    pub resume: bool,

    /// Score only the K-th of N disjoint parts of the input (whole row groups, split
    /// by rows), e.g. 2/8, so N processes or machines share one dataset. The N outputs
    /// in shard order hold exactly the unsharded output's rows; add their summaries up
    /// with `refscore merge-summaries`
    #[arg(long, value_name = "K/N")]
    pub shard: Option<String>,

    /// Rows allowed to lack judge metrics because the judge failed: N down (more exits 75,
    /// for --resume) and N rejected or answered unusably (more exits 78) [default: 0 down;
    /// rejected or unusable: any number while some judged value came back usable]. The
    /// output is written either way
    #[arg(long, value_name = "N")]
    pub max_judge_failures: Option<u64>,

    #[command(flatten)]
    pub mapping: MappingArgs,

    /// Input columns to copy into the result unchanged (comma-separated)
    #[arg(long, value_name = "COL,...", value_delimiter = ',')]
    pub keep: Option<Vec<String>>,

    /// Metrics to compute (comma-separated names or groups; see below) [default: all]
    #[arg(long, value_name = "NAME,...", value_delimiter = ',')]
    pub metrics: Option<Vec<String>>,

    /// The local models' options (`--model` ... `--embed-cache-outputs`:
    /// the embedding model, the cross-encoder, their device, precision and
    /// caches), defined in the embed crate.
    #[command(flatten)]
    pub embed: refscore_embed::EmbedArgs,

    /// The judge's options (`--judge-url` ... `--judge-threshold`, the judge
    /// modes'), defined in the judge crate.
    #[command(flatten)]
    pub judge: refscore_judge::JudgeArgs,

    /// Pass threshold for a metric in the summary, e.g. token_f1=0.6 (repeatable)
    #[arg(long, value_name = "METRIC=VALUE")]
    pub threshold: Vec<String>,

    /// Human labels for a metric: an input column holding a label on some rows (null
    /// elsewhere), e.g. meaning_match=human_label (repeatable; config: a [gold] table, to
    /// which the flags add, a flag replacing the table's entry for the same metric). A
    /// verdict's labels are booleans, a judge score's numbers on its 0-1 scale (a score s of
    /// a LO-HI rubric is labelled (s-LO)/(HI-LO): 7 on 0-10 is 0.7, 4 on 1-5 is 0.75); an
    /// embedding or lexical metric is read as a verdict against boolean labels. The column travels
    /// into the result; the summary gets the metric's agreement with the labels and, for a
    /// judge metric, its run-wide mean corrected for the judge's error with a 95% interval
    #[arg(long, value_name = "METRIC=COLUMN")]
    pub gold: Vec<String>,

    /// The confidence of the lower Clopper-Pearson bounds --gold gives a verdict judge's TPR
    /// and TNR (1 - delta, between 0 and 1, not included) [default: 0.9]
    #[arg(long, value_name = "C")]
    pub gold_confidence: Option<f64>,

    /// Rows per record batch read from the input
    #[arg(long, value_name = "N")]
    pub batch_size: Option<usize>,

    #[command(flatten)]
    pub source: SourceArgs,

    /// Worker threads, 1 to 1024 [default: all cores]
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,

    /// TOML file of more arguments: keys are these flags' names with _ for - (input,
    /// reference_col = "gold", metrics = ["lexical"], [thresholds] token_f1 = 0.6, ...),
    /// and [judge.metric.NAME] tables define judge metrics (see --judge-metrics); flags win
    /// over the file
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,

    /// No progress and no summary table (errors are still printed)
    #[arg(short, long)]
    pub quiet: bool,
}

#[derive(Debug, Args)]
pub struct InspectArgs {
    /// A Parquet file, a directory of them, or a quoted glob; local, or an s3://, gs://,
    /// az:// or https:// URL; or a Delta Lake or Iceberg table's folder or URL
    pub input: String,

    #[command(flatten)]
    pub mapping: MappingArgs,

    #[command(flatten)]
    pub source: SourceArgs,
}
