//! A job scored in passes. A pass scores every row left; a stage may set
//! work aside for an asynchronous provider (judge batches), send it out
//! after the pass, and answer it in the next pass. Between passes the run
//! either ends with a temporary failure (exit 75: run again with `--resume`
//! to collect) or, given time to wait, waits and scores again. That loop is
//! the job's, so no caller writes it again.

use std::time::{Duration, Instant};

use arrow::datatypes::SchemaRef;
use refscore_core::{Error, Stage};
use refscore_read::Dataset;

use crate::{Job, JobSpec, Prepared};

/// What the job needs of the stages of a run scored in passes.
pub trait Passes {
    /// Sets the stages up for a pass over `to_do` rows of `job` (none may
    /// be left when only collecting or assembling remains). An error
    /// abandons the job.
    fn set_up(&mut self, job: &Job, to_do: u64) -> Result<(), Error>;

    /// Waits up to `wait` (none: only looks) for work sent out after an
    /// earlier pass; `Some(message)` says what is still out and how to
    /// collect it, which ends the run before anything heavy loads.
    fn still_out(&mut self, wait: Option<Duration>) -> Result<Option<String>, Error>;

    /// Loads what scoring rows needs (a model), once rows are left to
    /// score. An error abandons the job.
    fn load(&mut self) -> Result<(), Error>;

    /// The stages of the pass, in order.
    fn stages(&mut self) -> Vec<&mut dyn Stage>;

    /// After a pass: sends out the work set aside; `Some(message)` says
    /// what was sent, and a later pass answers it.
    fn send_out(&mut self) -> Result<Option<String>, Error>;
}

/// What [`run_passes`] tells its caller as it goes.
pub enum Tick<'a> {
    /// A pass over this many rows starts.
    Pass(u64),
    /// Rows written.
    Rows(u64),
    /// The pass has ended.
    PassDone,
    /// Work was sent out and the run waits for it.
    Waiting(&'a str),
}

/// Scores what is left of `job` in passes until no work is out; returns
/// the job, ready to finish, and the rows this session set out to score.
/// With no time to wait (`wait` none or spent) a pass that sends work out
/// ends the run with a temporary error saying so, the job kept for
/// `--resume`.
pub fn run_passes(
    dataset: &Dataset,
    spec: &JobSpec,
    schema: &SchemaRef,
    mut job: Box<Job>,
    passes: &mut dyn Passes,
    wait: Option<Duration>,
    tick: &mut (dyn FnMut(Tick) + Send),
) -> Result<(Box<Job>, u64), Error> {
    let deadline = wait.and_then(|w| Instant::now().checked_add(w));
    // Rows this session set out to score (a later pass scores some again).
    let mut rows_this_session = None;
    loop {
        let to_do = job.rows_to_do();
        if let Err(e) = passes.set_up(&job, to_do) {
            job.abandon();
            return Err(e);
        }
        let left = deadline.map(|t| t.saturating_duration_since(Instant::now()));
        if let Some(message) = passes.still_out(left)? {
            job.close(true)?;
            return Err(Error::temporary(message));
        }
        if to_do > 0 {
            if let Err(e) = passes.load() {
                job.abandon();
                return Err(e);
            }
            tick(Tick::Pass(to_do));
            let outcome = job.run(dataset, schema, &mut passes.stages(), &mut |n| {
                tick(Tick::Rows(n))
            });
            tick(Tick::PassDone);
            outcome?;
            rows_this_session.get_or_insert(to_do);
        }
        let Some(sent) = passes.send_out()? else {
            return Ok((job, rows_this_session.unwrap_or(0)));
        };
        job.close(true)?;
        if deadline.is_none_or(|t| Instant::now() >= t) {
            return Err(Error::temporary(sent));
        }
        tick(Tick::Waiting(&sent));
        job = match Job::prepare(
            dataset,
            JobSpec {
                resume: true,
                ..spec.clone()
            },
        )? {
            Prepared::Run(job) => job,
            Prepared::AlreadyComplete => {
                return Err(Error::internal(
                    "a run waiting for work sent out was complete",
                ))
            }
        };
    }
}
