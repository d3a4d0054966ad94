//! The `score` command: settings → pipeline → job (output checks, resume,
//! shard) → passes → assemble → summary. The job crate owns the threads,
//! checkpoints, parts and passes, the pipeline builds the stages; this file
//! only wires the pieces together.

use std::time::Instant;

use refscore_core::{Error, Stage};
use refscore_job::{run_passes, Job, Prepared, Tick};
use refscore_read::Dataset;
use refscore_write::{result_schema, summary_path, write_atomically, RunKey, Settled, Summary};
use serde_json::json;

use crate::pipeline::{read_options, Pipeline};
use crate::progress::Progress;
use crate::settings::Settings;

/// How a `score` run ended.
pub enum Outcome {
    /// The output and summary are in place; where the summary is, as
    /// messages show it.
    Scored {
        summary: Summary,
        summary_at: String,
    },
    /// `--resume` found the output already complete.
    AlreadyComplete,
    /// The destination already holds this run's finished result (a
    /// store's result whose footer and summary say so, a table whose log
    /// records the run); the summary's text and the line that says so.
    AlreadyPublished { summary: String, note: String },
    /// `--resume` found the output complete here and published it (an
    /// upload or commit cut short); its local summary (where it was, and
    /// its text read before publishing, which may remove it) and the line
    /// that says so.
    Published {
        summary_at: std::path::PathBuf,
        summary: Option<String>,
        note: String,
    },
}

/// Runs a whole scoring job; returns the summary after the output file and
/// its summary JSON are in place.
pub fn run(settings: &Settings) -> Result<Outcome, Error> {
    let start = Instant::now();
    let sink = settings.sink.as_ref();
    sink.check(settings.overwrite, settings.resume)?;
    let dataset = Dataset::open(&settings.input, &read_options(settings))?;
    let pipeline = Pipeline::plan(settings)?;
    if !settings.quiet {
        for w in pipeline.warnings() {
            eprintln!("refscore: warning: {w}");
        }
    }
    if let (Some(_), Some(column)) = (pipeline.endpoint(), &settings.judge_where) {
        check_judge_where(&dataset, column, settings)?;
    }
    let metric_fields = pipeline.metric_fields();
    let id_field = dataset.id_field();
    {
        let mut result_columns = vec![
            id_field.name().as_str(),
            refscore_core::schema::STATUS,
            refscore_core::schema::ERROR,
        ];
        result_columns.extend(metric_fields.iter().map(|f| f.name().as_str()));
        crate::gold::check_names(settings, &result_columns)?;
    }
    let schema = result_schema(id_field, &metric_fields, dataset.keep_fields())?;
    sink.check_columns(&schema)?;
    let gold = refscore_report::gold::resolve(&schema, &settings.gold, &settings.input)?;
    crate::gold::check_input(&dataset, &gold, &settings.judge_metrics)?;
    let mut spec = pipeline.job_spec(&dataset)?;
    // The sink names the local result (a table's names the run), and may
    // hold this run's finished result already.
    let run = {
        let identity = refscore_job::identity(&dataset, &spec);
        RunKey {
            hash: identity.hash,
            run_id: identity.run_id,
            shard: settings.shard.map(|s| s.to_string().replace('/', "-of-")),
        }
    };
    spec.output = sink.local(&run);
    if sink.local_names_the_run() && !settings.overwrite {
        // The local result is this run's by its name: one found finished
        // is published, one interrupted is finished (--overwrite discards
        // it and starts again).
        spec.resume = true;
    }
    let output = spec.output.clone();
    let held_here = refscore_job::identity(&dataset, &spec).held_here;
    if let Some(Settled::Already { summary, note }) =
        sink.settled(&run, held_here, settings.overwrite, settings.resume)?
    {
        return Ok(Outcome::AlreadyPublished { summary, note });
    }
    let prepared = Job::prepare_discarding(&dataset, spec.clone(), |old| {
        cancel_discarded_batches(old, &pipeline, settings);
    })?;
    let job = match prepared {
        Prepared::AlreadyComplete => {
            // Finished here; its upload may have been cut short.
            let summary_at = summary_path(&output);
            let summary = std::fs::read_to_string(&summary_at).ok();
            if sink.publish_if_missing(&run)? {
                return Ok(Outcome::Published {
                    summary_at,
                    summary,
                    note: sink.published_note(&run),
                });
            }
            return Ok(Outcome::AlreadyComplete);
        }
        Prepared::Run(job) => job,
    };
    let mut stages = pipeline.for_job(&dataset);
    let wait = settings.judge.as_ref().and_then(|j| j.batch_wait);
    let mut progress = None;
    let quiet = settings.quiet;
    let mut tick = |t: Tick| match t {
        Tick::Pass(to_do) => progress = Some(Progress::new(to_do, quiet)),
        Tick::Rows(n) => progress.iter_mut().for_each(|p| p.advance(n)),
        Tick::PassDone => progress.take().iter().for_each(Progress::finish),
        Tick::Waiting(message) if !quiet => eprintln!("refscore: {message}"),
        Tick::Waiting(_) => {}
    };
    let (mut job, to_do) = run_passes(&dataset, &spec, &schema, job, &mut stages, wait, &mut tick)?;
    let finished = job.finish(&schema, settings.max_judge_failures)?;
    let mut summary = finished.stats.finish(start.elapsed().as_secs_f64(), to_do);
    crate::gold::summarise(&output, &gold, &mut summary)?;
    let extra = &mut summary.extra;
    // A URL's credentials never reach the summary.
    extra.insert(
        "input".into(),
        refscore_read::source::redact(&settings.input).into(),
    );
    if let Some(version) = dataset.table_version() {
        extra.insert("table_version".into(), version.into());
    }
    extra.insert("output".into(), sink.shown().into());
    extra.insert("run_id".into(), job.run_id().into());
    if let Some(shard) = settings.shard {
        extra.insert("shard".into(), shard.to_string().into());
    }
    if finished.resumed_rows > 0 {
        extra.insert("rows_resumed".into(), finished.resumed_rows.into());
    }
    for (key, value) in stages.ran().into_iter().filter_map(Stage::summary) {
        extra.insert(key.into(), value);
    }
    if let Some(judge) = extra.get_mut("judge") {
        // A fact of the job (rows a resumed run would judge again).
        judge["rows_lacking_judge_metrics"] = json!(finished.retryable_rows);
    }
    if let Some(rss) = peak_rss_bytes() {
        extra.insert("peak_rss_bytes".into(), rss.into());
    }
    let text = serde_json::to_string_pretty(&summary).expect("summary serialises");
    write_atomically(&summary_path(&output), &text)?;
    let allowed = settings.max_judge_failures;
    let lacking = finished.retryable_rows > allowed;
    job.close(lacking)?;
    // Only a result with nothing left to do goes to the store; one that
    // lacks judge metrics goes up when --resume completes it.
    if lacking {
        return Err(refscore_judge::lacking_for_now(
            finished.retryable_rows,
            finished.retry_reason.as_deref(),
            &output,
        ));
    }
    sink.publish(&run)?;
    if let Some(judge) = stages.judge() {
        let limit = refscore_judge::FailureLimit {
            allowed,
            given: settings.judge_failures_limited,
        };
        // One report for the verdict and the notes.
        let report = judge.report();
        if let Some(e) = report.failed_for_good(limit, &output) {
            return Err(e);
        }
        if !settings.quiet {
            for line in judge.closing_lines(&report, finished.retryable_rows) {
                eprintln!("refscore: {line}");
            }
        }
    }
    Ok(Outcome::Scored {
        summary,
        summary_at: sink.summary_shown(&run),
    })
}

/// `--overwrite` discarding a run that left judge batches open: cancels
/// them through the provider the discarded run's ledger names, whatever
/// this run's own judge settings (what they answered would never be read),
/// saying so.
fn cancel_discarded_batches(
    run_folder: &std::path::Path,
    pipeline: &Pipeline,
    settings: &Settings,
) {
    let dir = refscore_job::batch_dir_in(run_folder);
    if !dir.exists() {
        return;
    }
    let mode = settings.judge.as_ref().and_then(|j| j.batch.as_ref());
    let current = pipeline.endpoint().map(|e| (e, mode));
    match refscore_judge::batch::cancel_discarded(&dir, current, settings.default_api_key()) {
        Ok((cancelled, failed)) => {
            for name in cancelled.iter().filter(|_| !settings.quiet) {
                eprintln!("refscore: --overwrite: cancelled judge {name}");
            }
            for line in failed {
                eprintln!("refscore: warning: --overwrite could not cancel judge {line}");
            }
        }
        Err(e) => eprintln!(
            "refscore: warning: --overwrite could not read the discarded run's judge batches: {}",
            e.message
        ),
    }
}

/// Reads every value of the `--judge-where` column before the first paid
/// call, so a bad value in the last row cannot end a run that already paid.
fn check_judge_where(dataset: &Dataset, column: &str, settings: &Settings) -> Result<(), Error> {
    for batch in dataset.row_filter_column().into_iter().flatten() {
        let batch = batch?;
        check_row_filter(
            &batch.array,
            &batch.source.display().to_string(),
            batch.first_row_in_source,
            column,
            &settings.judge_metrics,
        )?;
    }
    Ok(())
}

/// Checks one batch of `--judge-where` values (see [`check_judge_where`]).
pub(crate) fn check_row_filter(
    array: &arrow::array::ArrayRef,
    source: &str,
    first_row_in_source: u64,
    column: &str,
    known: &refscore_judge::JudgeMetrics,
) -> Result<(), Error> {
    refscore_judge::check_requests(array, known, &|i| {
        format!(
            "{source}: column '{column}', row {}",
            first_row_in_source + i as u64
        )
    })
}

/// Peak resident memory of this process so far (Linux: VmHWM).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
