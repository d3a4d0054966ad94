//! A scoring job around the metric stages: which rows it covers (all, or a
//! shard), where its progress is kept, how an interrupted run resumes, and
//! how the committed parts become the one result file.
//!
//! A run keeps its progress in a hidden folder beside the output,
//! `.<output name>.refscore-run/`:
//! - `run.json`: the run's fingerprint (input files, every setting that
//!   changes a result, model files, judge prompt versions, shard); a resumed
//!   run must match it;
//! - `part-<first row>.parquet`: committed results, each made durable before
//!   the next part begins, carrying its own summary statistics;
//! - `journal/`: judge answers already paid for, so a re-done part never pays
//!   twice.
//!
//! Parts are committed at least every [`MAX_UNCOMMITTED`] and at the end of
//! each input row group (no more often than every [`MIN_COMMIT_INTERVAL`]), so
//! a crash loses at most about 30 s of work or one row group, whichever is
//! less. When every row is scored the parts are joined into the output, the
//! summary is the sum of the parts' statistics, and the folder is removed.

pub mod fit;
mod passes;
mod plan;
mod record;
mod rundir;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use crossbeam_channel::bounded;
use parquet::file::metadata::KeyValue;
use refscore_core::{Error, ErrorClass, RowBatch, ScoreColumns, Stage};
use refscore_read::Dataset;
use refscore_write::{PartInfo, PartWriter, SummaryBuilder};

pub use passes::{run_passes, Passes, Tick};
pub use plan::{remaining, shard_units, Range, Shard};
use rundir::RunDir;

/// Longest stretch of work a crash can lose: a part is committed once this
/// much time has passed since the last commit.
pub const MAX_UNCOMMITTED: Duration = Duration::from_secs(30);
/// Row groups end parts, but no more often than this, so inputs with tiny
/// row groups do not pay for a commit per row group.
pub const MIN_COMMIT_INTERVAL: Duration = Duration::from_secs(2);

/// Commit intervals from `MIN,MAX` seconds (e.g. `0.05,5`, the binary's
/// `REFSCORE_COMMIT_SECONDS`): for tests that kill runs of a second, and for
/// operators who trade commit overhead against what a crash loses. Anything
/// else gives the defaults ([`MIN_COMMIT_INTERVAL`], [`MAX_UNCOMMITTED`]).
pub fn commit_intervals(spec: Option<&str>) -> (Duration, Duration) {
    let parsed = spec.and_then(|v| {
        let (a, b) = v.split_once(',')?;
        let (a, b): (f64, f64) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
        (a.is_finite() && b.is_finite() && a >= 0.0 && b > 0.0 && b < 1e6)
            .then(|| (Duration::from_secs_f64(a), Duration::from_secs_f64(b)))
    });
    parsed.unwrap_or((MIN_COMMIT_INTERVAL, MAX_UNCOMMITTED))
}

/// The judge batches' folder inside a run folder.
pub fn batch_dir_in(run_folder: &std::path::Path) -> PathBuf {
    run_folder.join("judge-batch")
}

/// Footer key of the result file holding the run's fingerprint hash, so a
/// later `--resume` can tell a finished run from another one.
pub const RUN_KEY: &str = refscore_core::schema::footer::RUN;

/// What identifies a job's result before any work is done, so a caller can
/// compare it with a result kept elsewhere (an object store's copy, which
/// `--resume` must not replace when it is another run's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Identity {
    /// The fingerprint hash a finished result's footer records ([`RUN_KEY`]).
    pub hash: String,
    /// The run id its summary records (the fingerprint without the shard).
    pub run_id: String,
    /// Whether this machine holds something of the job to resume: its run
    /// folder or its finished local result.
    pub held_here: bool,
}

/// The [`Identity`] of the job `spec` describes over `dataset`.
pub fn identity(dataset: &Dataset, spec: &JobSpec) -> Identity {
    let fingerprint = rundir::fingerprint(dataset, spec);
    let hash = rundir::hash(&fingerprint);
    let mut whole = fingerprint;
    whole["shard"] = serde_json::Value::Null;
    Identity {
        hash,
        run_id: rundir::hash(&whole),
        held_here: rundir::path_for(&spec.output).exists() || spec.output.exists(),
    }
}

/// What the caller decides about a job.
#[derive(Debug, Clone)]
pub struct JobSpec {
    /// The result file.
    pub output: PathBuf,
    /// `--overwrite`: replace an existing output, or discard an interrupted
    /// run of it and start again.
    pub overwrite: bool,
    /// `--resume`: finish an interrupted run of the same job.
    pub resume: bool,
    /// `--shard K/N`.
    pub shard: Option<Shard>,
    /// The chosen metrics by name, in output order. The run record names
    /// them (rather than flagging each built-in by position), so a metric
    /// added to refscore later changes nothing of a run that does not
    /// choose it, and an upgrade between a crash and `--resume` is harmless.
    pub metrics: Vec<String>,
    /// Every setting that can change a result value, by name (model files
    /// and judge prompt versions included). A resumed run must match.
    pub settings: BTreeMap<String, serde_json::Value>,
    /// Summary pass thresholds (the run record keeps those of `metrics`:
    /// the others change nothing).
    pub thresholds: Vec<(String, f64)>,
    /// Footer metadata of the result file beyond the run hash, so a reader
    /// of the file alone can tell how it was made (e.g. `refscore.precision`).
    pub footer: Vec<(String, String)>,
    /// (row-group minimum, maximum) time between commits
    /// ([`commit_intervals`]).
    pub commit_intervals: (Duration, Duration),
}

/// The outcome of [`Job::prepare`].
pub enum Prepared {
    /// Work to do (possibly none left, when only assembly remains).
    Run(Box<Job>),
    /// `--resume` found the output already complete for this very job.
    AlreadyComplete,
}

/// A prepared job: its run folder, the rows left to score and the parts
/// already committed.
pub struct Job {
    dir: RunDir,
    spec: JobSpec,
    hash: String,
    units_rows: u64,
    first_row: u64,
    ranges: Vec<Range>,
    parts: Vec<(PathBuf, PartInfo)>,
    resumed_rows: u64,
    run_id: String,
}

/// A finished job: the statistics of every row of the output.
pub struct Finished {
    /// Statistics of every row, merged from the parts.
    pub stats: SummaryBuilder,
    /// Rows still lacking a metric for a reason worth retrying (judge down).
    pub retryable_rows: u64,
    /// The first such failure.
    pub retry_reason: Option<String>,
    /// Rows taken from an earlier, interrupted session.
    pub resumed_rows: u64,
}

impl Job {
    /// Checks the output and any interrupted run of it, and works out what is
    /// left to do. Nothing is scored yet.
    pub fn prepare(dataset: &Dataset, spec: JobSpec) -> Result<Prepared, Error> {
        Job::prepare_discarding(dataset, spec, |_| {})
    }

    /// [`Job::prepare`], calling `before_discard` with an interrupted run's
    /// folder that `--overwrite` is about to delete, once its lock is held
    /// (to cancel what the run left running elsewhere: judge batches).
    pub fn prepare_discarding(
        dataset: &Dataset,
        spec: JobSpec,
        before_discard: impl FnOnce(&std::path::Path),
    ) -> Result<Prepared, Error> {
        rundir::check_output(&spec.output, dataset)?;
        let units = shard_units(&dataset.units(), spec.shard);
        let fingerprint = rundir::fingerprint(dataset, &spec);
        let Identity { hash, run_id, .. } = identity(dataset, &spec);
        let dir_path = rundir::path_for(&spec.output);
        let existing = dir_path.exists();
        let dir = if existing {
            if spec.resume {
                let dir = RunDir::open(&dir_path)?;
                dir.check_fingerprint(&fingerprint)?;
                dir
            } else if spec.overwrite {
                // Locked first: a run still writing there is never deleted
                // under its feet.
                let old = RunDir::open(&dir_path)?;
                before_discard(&dir_path);
                RunDir::discard(&dir_path)?;
                drop(old);
                RunDir::create(&dir_path, &fingerprint)?
            } else {
                let done = RunDir::committed_rows(&dir_path);
                return Err(Error::config(format!(
                    "{}: an interrupted run of this output is left in {} ({done} rows committed); use --resume, or --overwrite to start again",
                    spec.output.display(),
                    dir_path.display()
                )));
            }
        } else {
            if spec.output.exists() {
                if spec.resume && rundir::output_hash(&spec.output).as_deref() == Some(&hash) {
                    return Ok(Prepared::AlreadyComplete);
                }
                if !spec.overwrite {
                    return Err(Error::config(format!(
                        "{}: output already exists; pass --overwrite to replace it",
                        spec.output.display()
                    )));
                }
            }
            RunDir::create(&dir_path, &fingerprint)?
        };
        // Only now, holding the run's lock: leftovers of a killed run of
        // this output are no one else's.
        rundir::remove_stale_temporaries(&spec.output);
        let parts = dir.load_parts()?;
        let done: Vec<(u64, u64)> = parts
            .iter()
            .map(|(_, p)| (p.first_row, p.first_row + p.rows))
            .collect();
        let ranges = remaining(&units, &done);
        let resumed_rows = parts.iter().map(|(_, p)| p.rows).sum();
        Ok(Prepared::Run(Box::new(Job {
            dir,
            hash,
            units_rows: units.iter().map(|u| u.rows).sum(),
            first_row: units.first().map_or(0, |u| u.first_row),
            ranges,
            parts,
            resumed_rows,
            spec,
            run_id,
        })))
    }

    /// Rows this session has to score.
    pub fn rows_to_do(&self) -> u64 {
        self.ranges.iter().map(Range::rows).sum()
    }

    /// Where the judge keeps the answers this job has paid for.
    pub fn journal_dir(&self) -> PathBuf {
        self.dir.path().join("journal")
    }

    /// Where the judge keeps this job's batches (`--judge-batch`).
    pub fn batch_dir(&self) -> PathBuf {
        batch_dir_in(self.dir.path())
    }

    /// Scores the remaining rows: a reader thread, the stages on this thread,
    /// a writer thread committing parts; `progress` hears of every batch
    /// written. On an error the parts committed so far stay for `--resume`.
    pub fn run(
        &mut self,
        dataset: &Dataset,
        schema: &SchemaRef,
        stages: &mut [&mut dyn Stage],
        progress: &mut (dyn FnMut(u64) + Send),
    ) -> Result<(), Error> {
        let ranges = std::mem::take(&mut self.ranges);
        let dir = self.dir.path().to_path_buf();
        let thresholds = self.spec.thresholds.clone();
        let (min_commit, max_uncommitted) = self.spec.commit_intervals;
        let (read_tx, read_rx) = bounded::<Result<(RowBatch, bool), Error>>(2);
        let (score_tx, score_rx) = bounded::<(RowBatch, ScoreColumns, bool)>(2);
        let outcome = std::thread::scope(|s| {
            s.spawn(move || {
                for r in &ranges {
                    let mut batches = match dataset.read_unit(&r.unit, r.from, r.to) {
                        Ok(b) => b.peekable(),
                        Err(e) => {
                            let _ = read_tx.send(Err(e));
                            return;
                        }
                    };
                    while let Some(b) = batches.next() {
                        let ends_unit = r.to == r.unit.rows && batches.peek().is_none();
                        let failed = b.is_err();
                        if read_tx.send(b.map(|b| (b, ends_unit))).is_err() || failed {
                            return;
                        }
                    }
                }
            });
            let writer = s.spawn(|| -> Result<Vec<(PathBuf, PartInfo)>, Error> {
                let mut committed = Vec::new();
                let mut part: Option<PartWriter> = None;
                let mut next_row = 0u64;
                let mut last_commit = Instant::now();
                for (batch, scores, ends_unit) in score_rx {
                    if part.is_some() && next_row != batch.first_row {
                        // The rows that follow are already committed: a part
                        // never spans a gap.
                        committed.push(part.take().expect("open").commit()?);
                        last_commit = Instant::now();
                    }
                    let p = match part.as_mut() {
                        Some(p) => p,
                        None => part.insert(PartWriter::create(
                            &dir,
                            schema.clone(),
                            &thresholds,
                            batch.first_row,
                        )?),
                    };
                    let n = batch.len() as u64;
                    p.write(&batch, scores)?;
                    next_row = batch.first_row + n;
                    progress(n);
                    let age = last_commit.elapsed();
                    if age >= max_uncommitted || (ends_unit && age >= min_commit) {
                        committed.push(part.take().expect("open").commit()?);
                        last_commit = Instant::now();
                    }
                }
                if let Some(p) = part {
                    committed.push(p.commit()?);
                }
                Ok(committed)
            });
            let mut result = Ok(());
            for item in read_rx.iter() {
                let (batch, ends_unit) = match item {
                    Ok(b) => b,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                };
                let scores = match refscore_core::score_stages(stages, &batch) {
                    Ok(scores) => scores,
                    Err(e) => {
                        result = Err(e);
                        break;
                    }
                };
                if score_tx.send((batch, scores, ends_unit)).is_err() {
                    break;
                }
            }
            drop(score_tx);
            drop(read_rx);
            let written = writer.join().expect("writer thread panicked");
            match (result, written) {
                (Ok(()), Ok(parts)) => Ok(parts),
                (Err(e), Ok(parts)) => {
                    self.parts.extend(parts);
                    Err(e)
                }
                (_, Err(e)) => Err(e),
            }
        });
        match outcome {
            Ok(parts) => {
                self.parts.extend(parts);
                Ok(())
            }
            Err(e) => {
                // Bad input or settings cannot be resumed: leave nothing.
                // Anything else (a full disk, a flaky mount, a crash) keeps
                // the committed parts and paid answers for --resume.
                if matches!(
                    e.class,
                    ErrorClass::BadInput | ErrorClass::Config | ErrorClass::Usage
                ) {
                    let _ = RunDir::discard(self.dir.path());
                }
                Err(e)
            }
        }
    }

    /// Joins the committed parts into the output and adds up their
    /// statistics. The run folder stays until [`Job::close`], so a crash
    /// before the summary is written can still resume.
    /// `allowed_retryable` rows may lack metrics (judge failures) for the
    /// output to count as complete; only a complete output records the run's
    /// fingerprint, so `--resume` never takes an incomplete one as finished.
    pub fn finish(
        &mut self,
        schema: &SchemaRef,
        allowed_retryable: u64,
    ) -> Result<Finished, Error> {
        if !self.ranges.is_empty() {
            return Err(Error::internal("finish called before every row was scored"));
        }
        self.parts.sort_by_key(|(_, p)| p.first_row);
        let mut row = self.first_row;
        for (path, p) in &self.parts {
            if p.first_row != row {
                return Err(Error::internal(format!(
                    "{}: the committed parts do not join up at row {row}",
                    path.display()
                )));
            }
            row += p.rows;
        }
        if row - self.first_row != self.units_rows {
            return Err(Error::internal(format!(
                "the committed parts hold {} rows, the input {}",
                row - self.first_row,
                self.units_rows
            )));
        }
        let mut stats = SummaryBuilder::new(schema, &self.spec.thresholds);
        let mut retryable_rows = 0;
        let mut retry_reason = None;
        for (path, p) in &self.parts {
            stats
                .merge(&p.stats)
                .map_err(|e| Error::internal(format!("{}: {e}", path.display())))?;
            retryable_rows += p.retryable_rows;
            if retry_reason.is_none() {
                retry_reason = p.retry_reason.clone();
            }
        }
        let paths: Vec<PathBuf> = self.parts.iter().map(|(p, _)| p.clone()).collect();
        let mut extra = Vec::new();
        if retryable_rows <= allowed_retryable {
            extra.push(KeyValue::new(RUN_KEY.to_string(), self.hash.clone()));
        }
        extra.push(KeyValue::new(
            refscore_core::schema::footer::THRESHOLDS.to_string(),
            refscore_stats::thresholds_to_json(&stats.thresholds()),
        ));
        for (key, value) in &self.spec.footer {
            extra.push(KeyValue::new(key.clone(), value.clone()));
        }
        if let Some(shard) = self.spec.shard {
            extra.push(KeyValue::new(
                refscore_core::schema::footer::SHARD.to_string(),
                shard.to_string(),
            ));
        }
        refscore_write::assemble(&paths, schema, &self.spec.output, extra)?;
        Ok(Finished {
            stats,
            retryable_rows,
            retry_reason,
            resumed_rows: self.resumed_rows,
        })
    }

    /// Ends the job. `keep` leaves the run folder for a later `--resume`
    /// (rows still lack judge metrics); otherwise it is removed.
    pub fn close(self, keep: bool) -> Result<(), Error> {
        if keep {
            Ok(())
        } else {
            RunDir::discard(self.dir.path())
        }
    }

    /// Gives up before scoring (a stage could not be set up): the run folder
    /// is removed when it holds nothing committed, so no leftover is
    /// reported next time; committed progress is kept for `--resume`.
    pub fn abandon(self) {
        let paid = holds_data(&self.journal_dir());
        // Request files written may be batches a provider is running.
        let submitted = std::fs::read_dir(self.batch_dir()).is_ok_and(|d| {
            d.flatten()
                .any(|e| e.file_name().to_string_lossy().starts_with("requests-"))
        });
        if self.parts.is_empty() && !paid && !submitted {
            let _ = RunDir::discard(self.dir.path());
        }
    }

    /// Identifies the run across its shards: the fingerprint without the
    /// shard, so `merge-summaries` can tell shards of one run from others.
    pub fn run_id(&self) -> &str {
        &self.run_id
    }
}

/// Whether any file under `dir` (a panel keeps one journal folder per
/// judge) holds data: empty journals opened before a judge answered are no
/// paid answers, and must not keep a run folder that committed nothing.
fn holds_data(dir: &std::path::Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|d| {
        d.flatten().any(|e| {
            e.metadata().is_ok_and(|m| {
                if m.is_dir() {
                    holds_data(&e.path())
                } else {
                    m.len() > 0
                }
            })
        })
    })
}
