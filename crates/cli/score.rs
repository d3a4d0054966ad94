//! The `score` command: settings → job (output checks, resume, shard) →
//! stages → run → assemble → summary. The job crate owns the threads,
//! checkpoints and parts; this file only wires the pieces together.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

use refscore_batch::metric::Group;
use refscore_batch::{Error, Stage};
use refscore_embed::{EmbedOptions, EmbeddingStage};
use refscore_job::{Job, JobSpec, Prepared};
use refscore_judge::{Endpoint, JudgeOptions, JudgeStage};
use refscore_lexical::{LexicalStage, Selection};
use refscore_read::Role;
use refscore_read::{Dataset, ReadOptions};
use refscore_write::{result_schema, summary_path, write_atomically, Summary};
use serde_json::{json, Value};

use crate::progress::Progress;
use crate::settings::{Rescale, Settings, KERNELS_ENV};

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
        check_judge_where(&dataset, column)?;
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
        footer: match &model {
            Some(_) => vec![(
                refscore_batch::schema::footer::PRECISION.into(),
                settings.embed.precision.name().into(),
            )],
            None => Vec::new(),
        },
        // Read here, not in the job crate: only the binary's layer reads
        // the environment.
        commit_intervals: refscore_job::commit_intervals(
            std::env::var("REFSCORE_COMMIT_SECONDS").ok().as_deref(),
        ),
    };
    let mut job = match Job::prepare(&dataset, spec)? {
        Prepared::AlreadyComplete => return Ok(Outcome::AlreadyComplete),
        Prepared::Run(job) => job,
    };
    let to_do = job.rows_to_do();
    let mut lexical = LexicalStage(Selection::of(&settings.metrics.metrics));
    let loaded = (|| -> Result<_, Error> {
        if let (Some(endpoint), true) = (&endpoint, to_do > 0) {
            // Fail loudly before any work when the judge cannot answer.
            refscore_judge::probe(endpoint)?;
        }
        let embed = match (&model, to_do > 0) {
            (Some(_), true) => {
                let mut stage = load_embedding(settings)?;
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
                )?;
                Some(stage)
            }
            _ => None,
        };
        let judge = match (&endpoint, to_do > 0) {
            (Some(endpoint), true) => {
                Some(load_judge(settings, endpoint.clone(), job.journal_dir())?)
            }
            _ => None,
        };
        Ok((embed, judge))
    })();
    let (mut embed, mut judge) = match loaded {
        Ok(stages) => stages,
        Err(e) => {
            job.abandon();
            return Err(e);
        }
    };
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
    }
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

/// How the input is read: the column mapping, `--keep`, batch size and the
/// `--judge-where` column.
pub(crate) fn read_options(settings: &Settings) -> ReadOptions {
    ReadOptions {
        mapping: settings.mapping.clone(),
        keep: settings.keep.clone(),
        batch_size: settings.batch_size,
        row_filter: settings.judge_where.clone(),
    }
}

/// The metric columns of the result, in order, for the stages that run.
pub(crate) fn metric_fields(
    settings: &Settings,
    embedding: bool,
    judge: bool,
) -> Vec<arrow::datatypes::Field> {
    let metrics = &settings.metrics.metrics;
    let mut fields = refscore_lexical::fields(Selection::of(metrics));
    if embedding {
        fields.extend(refscore_embed::fields(metrics));
    }
    if judge {
        fields.extend(refscore_judge::fields(metrics));
    }
    fields
}

/// Reads every value of the `--judge-where` column before the first paid
/// call, so a bad value in the last row cannot end a run that already paid.
fn check_judge_where(dataset: &Dataset, column: &str) -> Result<(), Error> {
    for batch in dataset.row_filter_column().into_iter().flatten() {
        let batch = batch?;
        check_row_filter(
            &batch.array,
            &batch.source.display().to_string(),
            batch.first_row_in_source,
            column,
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
) -> Result<(), Error> {
    refscore_judge::check_requests(array, &|i| {
        format!(
            "{source}: column '{column}', row {}",
            first_row_in_source + i as u64
        )
    })
}

/// Everything that changes a result value, for the run's fingerprint: a
/// resumed run must match it.
fn fingerprint(
    settings: &Settings,
    dataset: &Dataset,
    model: Option<&refscore_embed::ModelFiles>,
    judge_url: Option<&str>,
) -> Result<BTreeMap<String, Value>, Error> {
    let mut f = BTreeMap::new();
    let plan = &settings.metrics;
    // Explicit text, not a type's Debug form, so that changing a Debug
    // impl never breaks --resume; it is the text that form gave, so runs
    // started by earlier versions still resume.
    // Selections as the flags per registry metric of each group that
    // earlier versions stored.
    let flags = |g: Group| {
        let b = plan.metrics.flags(g);
        b.iter().map(bool::to_string).collect::<Vec<_>>().join(", ")
    };
    f.insert(
        "lexical".into(),
        json!(format!("Selection([{}])", flags(Group::Lexical))),
    );
    let cols = dataset.columns();
    f.insert(
        "columns".into(),
        json!([cols.id, cols.input, cols.reference, cols.output]),
    );
    f.insert("keep".into(), json!(settings.keep));
    f.insert("batch_size".into(), json!(settings.batch_size));
    if let Some(files) = model {
        let e = &settings.embed;
        f.insert(
            "embedding".into(),
            json!(plan.metrics.flags(Group::Embedding)),
        );
        f.insert("model_files".into(), json!(files.content_sha256()?));
        // Kernel paths give the same bits (tests/precision.rs); the path is
        // kept so that a run resumes only as it started.
        f.insert(
            "kernels".into(),
            json!(refscore_embed::kernel_path().name()),
        );
        f.insert(
            "embed".into(),
            json!({
                "device": e.device,
                "precision": e.precision.name(),
                "idf": e.idf,
                "rescale": match &e.rescale {
                    None => "None".to_string(),
                    Some(Rescale::Auto) => "Some(Auto)".to_string(),
                    Some(Rescale::Given([p, r, f])) => format!("Some(Given([{p:?}, {r:?}, {f:?}]))"),
                },
                "max_seq_length": e.max_seq_length,
            }),
        );
    }
    if let (Some(url), Some(j)) = (judge_url, &settings.judge) {
        // The URL as shown (credentials redacted): the fingerprint is stored.
        f.insert("judge".into(), json!(plan.metrics.flags(Group::Judge)));
        f.insert(
            "judge_endpoint".into(),
            json!({"url": url, "model": j.model, "band": j.band, "where": settings.judge_where,
                   "reasons": j.reasons.name(), "threshold": j.threshold}),
        );
        f.insert(
            "judge_templates".into(),
            json!(refscore_judge::template_versions()),
        );
    }
    Ok(f)
}

/// The embedding model when embedding metrics are wanted. When the user
/// asked for none by name (and named no model) and none is found, the run
/// goes on without them, with a warning.
pub(crate) fn resolve_embedding(
    settings: &Settings,
) -> Result<Option<refscore_embed::ModelFiles>, Error> {
    let plan = &settings.metrics;
    if !plan.wants_embedding() {
        return Ok(None);
    }
    let model = settings.embed.model.as_deref();
    // A model named by the environment is a model asked for, like --model.
    let named = model.is_some() || settings.embed.model_dir_named;
    match refscore_embed::resolve(model, &settings.embed.lookup) {
        Ok(files) => {
            if let Some(n) = settings.embed.max_seq_length {
                if n < 2 || n > files.max_positions {
                    return Err(settings.bad_value(
                        "max_seq_length",
                        &n.to_string(),
                        &format!(
                            "must be between 2 and the model's position limit {}",
                            files.max_positions
                        ),
                    ));
                }
            }
            refscore_embed::parse_device(&settings.embed.device)?;
            let kernels = settings.embed.kernels.as_deref();
            refscore_embed::use_kernels(kernels).map_err(|e| {
                Error::config(format!("{KERNELS_ENV}={}: {e}", kernels.unwrap_or("")))
            })?;
            Ok(Some(files))
        }
        Err(e) if plan.explicit || named => Err(e),
        Err(e) => {
            if settings.judge.as_ref().is_some_and(|j| j.band.is_some()) {
                return Err(Error::config(format!(
                    "--judge-band needs cosine, but the embedding model is missing: {e}"
                )));
            }
            if !settings.quiet {
                eprintln!("refscore: warning: embedding metrics skipped: {e}");
            }
            Ok(None)
        }
    }
}

pub(crate) fn load_embedding(settings: &Settings) -> Result<EmbeddingStage, Error> {
    let options = EmbedOptions {
        model: settings.embed.model.clone(),
        device: refscore_embed::parse_device(&settings.embed.device)?,
        metrics: settings.metrics.metrics.clone(),
        max_seq_length: settings.embed.max_seq_length,
        cache_bytes: settings.embed.cache_mb << 20,
        store: settings.embed.store.clone(),
        store_outputs: settings.embed.store_outputs,
        precision: settings.embed.precision,
        lookup: settings.embed.lookup.clone(),
        ..EmbedOptions::default()
    };
    EmbeddingStage::load(options)
}

/// The judge endpoint when judge metrics are wanted.
pub(crate) fn judge_endpoint(settings: &Settings) -> Result<Option<Endpoint>, Error> {
    let (Some(j), true) = (&settings.judge, settings.metrics.wants_judge()) else {
        return Ok(None);
    };
    let api_key = std::env::var(&j.api_key_env).ok().filter(|k| !k.is_empty());
    Ok(Some(Endpoint {
        url: j.url.clone(),
        model: j.model.clone(),
        api_key,
        timeout: Endpoint::timeout_from_secs(j.timeout)?,
        retries: j.retries,
        concurrency: j.concurrency,
        requests_per_minute: j.rpm,
        tokens_per_minute: j.tpm,
        backoff: std::time::Duration::from_millis(500),
    }))
}

fn load_judge(
    settings: &Settings,
    endpoint: Endpoint,
    journal: PathBuf,
) -> Result<JudgeStage, Error> {
    let mut stage = new_judge(settings, endpoint)?;
    // Answers paid for in this job, kept with its progress: a part scored
    // again after a crash or a judge failure never pays twice.
    stage.set_journal_dir(journal)?;
    Ok(stage)
}

/// The judge stage for `endpoint` with the run's metrics, band and cache.
pub(crate) fn new_judge(settings: &Settings, endpoint: Endpoint) -> Result<JudgeStage, Error> {
    let j = settings
        .judge
        .as_ref()
        .expect("endpoint implies judge settings");
    // The run's thresholds hold every default, similarity's included.
    let similarity_pass = settings
        .thresholds
        .iter()
        .find(|(m, _)| m == "similarity")
        .map(|(_, t)| *t as f32)
        .expect("the thresholds hold every metric's default");
    JudgeStage::new(JudgeOptions {
        endpoint,
        metrics: settings.metrics.metrics.clone(),
        band: j.band,
        cache_dir: j.cache.clone(),
        reasons: j.reasons,
        threshold: j.threshold,
        similarity_pass,
        where_column: settings.judge_where.clone(),
    })
}

/// The passes some embedding settings need before scoring: IDF over the
/// input's references, and an automatic rescaling baseline from mismatched
/// pairs of its rows. `input` names the input in messages.
pub(crate) fn prepare_embedding<R>(
    stage: &mut EmbeddingStage,
    settings: &Settings,
    input: &str,
    references: impl FnOnce() -> Result<R, Error>,
    pairs: impl FnOnce() -> Result<Vec<(String, String)>, Error>,
) -> Result<(), Error>
where
    R: Iterator<Item = Result<refscore_batch::TextColumn, Error>>,
{
    if settings.embed.idf {
        stage.fit_idf(references()?)?;
    }
    match settings.embed.rescale {
        Some(Rescale::Given(b)) => stage.set_baseline(b),
        Some(Rescale::Auto) => {
            let pairs = pairs()?;
            if pairs.len() < 2 {
                return Err(Error::bad_input(format!(
                    "{input}: --rescale-baseline auto needs at least 2 scorable rows with different texts"
                )));
            }
            let b = stage.fit_baseline(&pairs)?;
            stage.set_baseline(b);
        }
        None => {}
    }
    Ok(())
}

/// Peak resident memory of this process so far (Linux: VmHWM).
fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}
