//! The `score` command: settings → job (output checks, resume, shard) →
//! stages → run → assemble → summary. The job crate owns the threads,
//! checkpoints and parts; this file only wires the pieces together.

use std::time::Instant;

use refscore_core::{Error, Stage};
use refscore_job::{Job, JobSpec, Prepared};
use refscore_judge::batch::{BatchMode, Collected};
use refscore_judge::{Endpoint, JudgeStage};
use refscore_lexical::{LexicalStage, Selection};
use refscore_read::Role;
use refscore_read::{Dataset, ReadOptions};
use refscore_write::{result_schema, summary_path, write_atomically, Summary};
use serde_json::json;

use crate::fingerprint::fingerprint;
use crate::progress::Progress;
use crate::settings::Settings;
use crate::stages::{
    judge_endpoint, load_embedding, load_judge, metric_fields, prepare_embedding, resolve_embedding,
};

/// How a `score` run ended.
pub enum Outcome {
    /// The output and summary are in place.
    Scored(Summary),
    /// `--resume` found the output already complete.
    AlreadyComplete,
}

/// Runs a whole scoring job; returns the summary after the output file and
/// its summary JSON are in place.
pub fn run(settings: &Settings) -> Result<Outcome, Error> {
    let start = Instant::now();
    let dataset = Dataset::open(&settings.input, &read_options(settings))?;
    let endpoint = judge_endpoint(settings)?;
    if let (Some(_), Some(column)) = (&endpoint, &settings.judge_where) {
        check_judge_where(&dataset, column, settings)?;
    }
    let model = resolve_embedding(settings)?;
    let judge_url = endpoint.as_ref().map(Endpoint::display_url);
    let metric_fields = metric_fields(settings, model.is_some(), endpoint.is_some());
    let schema = result_schema(dataset.id_field(), &metric_fields, dataset.keep_fields())?;
    let spec = JobSpec {
        output: settings.output.clone(),
        overwrite: settings.overwrite,
        resume: settings.resume,
        shard: settings.shard,
        settings: fingerprint(settings, &dataset, model.as_ref(), judge_url.as_deref())?,
        thresholds: settings.thresholds.clone(),
        footer: footer(settings, model.is_some(), endpoint.is_some()),
        commit_intervals: refscore_job::commit_intervals(settings.commit_seconds.as_deref()),
    };
    let batch = (settings.judge.as_ref())
        .and_then(|j| j.batch.clone())
        .filter(|_| endpoint.is_some());
    let prepared = Job::prepare_discarding(&dataset, spec.clone(), |old| {
        cancel_discarded_batches(old, endpoint.as_ref(), batch.as_ref(), settings);
    })?;
    let mut job = match prepared {
        Prepared::AlreadyComplete => return Ok(Outcome::AlreadyComplete),
        Prepared::Run(job) => job,
    };
    let mut lexical = LexicalStage(Selection::of(&settings.metrics.metrics));
    let mut embed = None;
    let wait_until = settings
        .judge
        .as_ref()
        .and_then(|j| j.batch_wait)
        .and_then(|w| Instant::now().checked_add(w));
    // Rows this session set out to score (a later pass scores some again).
    let mut rows_this_session = None;
    // A pass scores what is left; in batch mode it may end by submitting
    // the judge's requests, and with --judge-batch-wait the next pass
    // follows once they are answered.
    let judge = loop {
        let to_do = job.rows_to_do();
        let mut judge =
            match judge_for_pass(settings, endpoint.as_ref(), batch.as_ref(), &job, to_do) {
                Ok(judge) => judge,
                Err(e) => {
                    job.abandon();
                    return Err(e);
                }
            };
        // Before the model loads: a poll that finds batches still running
        // ends the run at once.
        if let Some(batches) = judge.as_mut().and_then(JudgeStage::batches) {
            let wait = wait_until.map(|t| t.saturating_duration_since(Instant::now()));
            let mut tell = |line: &str| {
                if !settings.quiet {
                    eprintln!("refscore: judge batches: {line}");
                }
            };
            if let Collected::Waiting(line) = batches.collect(wait, &mut tell)? {
                job.close(true)?;
                return Err(Error::temporary(format!(
                    "judge batches still running: {line}; run the same command with --resume to collect"
                )));
            }
        }
        if let (Some(_), true, None) = (&model, to_do > 0, &embed) {
            let loaded = load_embedding(settings).and_then(|mut stage| {
                prepare_embedding(
                    &mut stage,
                    settings,
                    &settings.input,
                    || {
                        Ok(dataset
                            .text_column(Role::Reference)?
                            .expect("reference column is always mapped"))
                    },
                    || refscore_job::fit::mismatched_pairs(&dataset, 1000),
                )
                .map(|()| stage)
            });
            match loaded {
                Ok(stage) => embed = Some(stage),
                Err(e) => {
                    job.abandon();
                    return Err(e);
                }
            }
        }
        if to_do > 0 {
            let mut progress = Progress::new(to_do, settings.quiet);
            let mut chain: Vec<&mut dyn Stage> = vec![&mut lexical];
            if let Some(s) = embed.as_mut() {
                chain.push(s);
            }
            if let Some(s) = judge.as_mut() {
                chain.push(s);
            }
            let outcome = job.run(&dataset, &schema, &mut chain, &mut |n| progress.advance(n));
            progress.finish();
            outcome?;
            rows_this_session.get_or_insert(to_do);
        }
        let submitted = match judge.as_mut().and_then(JudgeStage::batches) {
            Some(batches) => batches.submit()?,
            None => None,
        };
        let Some(submitted) = submitted else {
            break judge;
        };
        job.close(true)?;
        if wait_until.is_none_or(|t| Instant::now() >= t) {
            return Err(Error::temporary(submitted.message()));
        }
        if !settings.quiet {
            eprintln!("refscore: {}", submitted.message());
        }
        job = match Job::prepare(
            &dataset,
            JobSpec {
                resume: true,
                ..spec.clone()
            },
        )? {
            Prepared::Run(job) => job,
            Prepared::AlreadyComplete => {
                return Err(Error::internal(
                    "a run waiting for judge batches was complete",
                ))
            }
        };
    };
    let to_do = rows_this_session.unwrap_or(0);
    let finished = job.finish(&schema, settings.max_judge_failures)?;
    let mut summary = finished.stats.finish(start.elapsed().as_secs_f64(), to_do);
    let extra = &mut summary.extra;
    extra.insert("input".into(), settings.input.clone().into());
    extra.insert(
        "output".into(),
        settings.output.display().to_string().into(),
    );
    extra.insert("run_id".into(), job.run_id().into());
    if let Some(shard) = settings.shard {
        extra.insert("shard".into(), shard.to_string().into());
    }
    if finished.resumed_rows > 0 {
        extra.insert("rows_resumed".into(), finished.resumed_rows.into());
    }
    let done: [Option<&dyn Stage>; 2] = [
        embed.as_ref().map(|s| s as &dyn Stage),
        judge.as_ref().map(|s| s as &dyn Stage),
    ];
    for (key, value) in done.into_iter().flatten().filter_map(Stage::summary) {
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
    write_atomically(&summary_path(&settings.output), &text)?;
    let lacking = finished.retryable_rows > settings.max_judge_failures;
    job.close(lacking)?;
    if lacking {
        let n = finished.retryable_rows;
        return Err(Error::temporary(format!(
            "{n} {} judge metrics because the judge failed (first failure: {}); {} holds everything else; run the same command with --resume once the judge is back",
            if n == 1 { "row lacks" } else { "rows lack" },
            finished.retry_reason.as_deref().unwrap_or("unknown"),
            settings.output.display()
        )));
    }
    if let (Some(stage), false) = (&judge, settings.quiet) {
        let r = stage.report();
        if let Some(note) = &r.token_probabilities {
            eprintln!("refscore: note: token probabilities: {note}");
        }
        if r.replies_without_logprobs > 0 {
            eprintln!(
                "refscore: note: the judge sent no token probabilities for {} of {} replies; there, meaning_match_p is null and similarity is the sampled score",
                r.replies_without_logprobs,
                r.replies_with_logprobs + r.replies_without_logprobs
            );
        }
        if r.rows_failed > finished.retryable_rows {
            eprintln!(
                "refscore: warning: {} rows got judge answers that could not be used (see their error column); a retry would fail the same way",
                r.rows_failed - finished.retryable_rows
            );
        }
    }
    Ok(Outcome::Scored(summary))
}

/// The judge stage of one pass, when judge metrics are wanted and rows are
/// left: answering from the run's batches in batch mode, else calling an
/// endpoint that was just probed (so a wrong URL, key or model fails
/// before any work).
fn judge_for_pass(
    settings: &Settings,
    endpoint: Option<&Endpoint>,
    batch: Option<&BatchMode>,
    job: &Job,
    to_do: u64,
) -> Result<Option<JudgeStage>, Error> {
    let (Some(endpoint), true) = (endpoint, to_do > 0) else {
        return Ok(None);
    };
    let mut stage = load_judge(settings, endpoint.clone(), job.journal_dir())?;
    match batch {
        Some(mode) => stage.use_batches(job.batch_dir(), mode)?,
        None => refscore_judge::probe(endpoint)?,
    }
    Ok(Some(stage))
}

/// `--overwrite` discarding a run that left judge batches open: cancels
/// them through the provider the discarded run's ledger names, whatever
/// this run's own judge settings (what they answered would never be read),
/// saying so.
fn cancel_discarded_batches(
    run_folder: &std::path::Path,
    endpoint: Option<&Endpoint>,
    mode: Option<&BatchMode>,
    settings: &Settings,
) {
    let dir = refscore_job::batch_dir_in(run_folder);
    if !dir.exists() {
        return;
    }
    let current = endpoint.map(|e| (e, mode));
    match refscore_judge::batch::cancel_discarded(&dir, current, settings.batch_api_key()) {
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

/// The result file's footer beyond the run hash and thresholds: the
/// embedding precision, and the defined judge metrics with their versions
/// (so a report can tell that a rubric changed between two nights).
fn footer(settings: &Settings, embedding: bool, judge: bool) -> Vec<(String, String)> {
    use refscore_core::schema::footer;
    let mut out = Vec::new();
    if embedding {
        out.push((
            footer::PRECISION.into(),
            settings.embed.precision.name().into(),
        ));
    }
    let defined = settings.judge_metrics.record(&settings.metrics.metrics);
    if judge && !defined.is_empty() {
        out.push((footer::JUDGE_METRICS.into(), json!(defined).to_string()));
    }
    out
}

/// How the input is read: the column mapping, `--keep`, batch size and the
/// `--judge-where` column.
pub(crate) fn read_options(settings: &Settings) -> ReadOptions {
    ReadOptions {
        mapping: settings.mapping.clone(),
        keep: settings.keep.clone(),
        batch_size: settings.batch_size,
        row_filter: settings.judge_where.clone(),
        prompt_columns: settings
            .judge_metrics
            .columns_read(&settings.metrics.metrics),
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
