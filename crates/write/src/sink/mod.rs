//! Where a run's finished result goes: a [`Sink`] per kind of destination.
//!
//! Every run writes its result as one local Parquet file first (the job's
//! parts, then [`crate::assemble`]), with its run folder beside it, so
//! resume and shards work the same whatever the destination. A sink says
//! which local file that is, checks its destination before any work, and
//! then publishes the finished result whole or not at all:
//! - [`LocalFile`]: `-o night.parquet`, the local file is the result;
//! - [`ObjectUpload`]: `-o s3://…/night.parquet`, uploaded from a local copy;
//! - [`DeltaTable`]: `-o TABLE --output-format delta`, the rows appended to
//!   a Delta table in one commit that records the run's identity.
//!
//! A new kind of destination is one module here plus its line in the
//! settings' choice of sink (`crates/cli/settings.rs`, `destination`).

mod delta_table;
mod local;
mod object;

use std::path::PathBuf;

use arrow::datatypes::SchemaRef;
use refscore_core::Error;

pub use delta_table::DeltaTable;
pub use local::LocalFile;
pub use object::{ObjectUpload, StoredResult};

/// Which run a result is, as a sink needs to know it: to name the run's
/// local copy and summary, and to tell its result from another run's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunKey {
    /// The fingerprint hash a finished result's footer records.
    pub hash: String,
    /// The run id its summary records (the fingerprint without the shard).
    pub run_id: String,
    /// `--shard K/N` as `K-of-N`, where the run is one shard of a job.
    pub shard: Option<String>,
}

impl RunKey {
    /// The run id, with the shard where there is one: a name that differs
    /// between nights and between the shards of one night.
    pub fn name(&self) -> String {
        match &self.shard {
            Some(shard) => format!("{}.shard-{shard}", self.run_id),
            None => self.run_id.clone(),
        }
    }
}

/// What the destination already holds of a run, found before its work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Settled {
    /// This run's finished result is there already: nothing to do. Its
    /// summary's text (empty where the destination lacks the summary) and
    /// the line that says so.
    Already { summary: String, note: String },
}

/// A destination of a run's result (see the module's documentation).
pub trait Sink: std::fmt::Debug + Send + Sync {
    /// The destination as messages and the summary's `output` show it.
    fn shown(&self) -> String;

    /// The local result file the run writes (its run folder lies beside it).
    fn local(&self, run: &RunKey) -> PathBuf;

    /// Where the run's summary ends up, as messages show it.
    fn summary_shown(&self, run: &RunKey) -> String;

    /// Whether the local file is named after the run ([`RunKey`]), so one
    /// found there finished is this very run's, to publish without
    /// `--resume`.
    fn local_names_the_run(&self) -> bool {
        false
    }

    /// Refuses, before the input is opened, a destination the run could
    /// not publish to (or would replace without `--overwrite`); finds
    /// refused credentials and unreachable stores now, not after the work.
    fn check(&self, overwrite: bool, resume: bool) -> Result<(), Error>;

    /// Refuses, before any row is scored, result columns the destination
    /// cannot take (a Delta table's column of another type).
    fn check_columns(&self, _schema: &SchemaRef) -> Result<(), Error> {
        Ok(())
    }

    /// Whether the destination already holds this run's finished result,
    /// found before the job starts: `held_here` says whether this machine
    /// holds something of the run (its run folder or local result).
    fn settled(
        &self,
        run: &RunKey,
        held_here: bool,
        overwrite: bool,
        resume: bool,
    ) -> Result<Option<Settled>, Error>;

    /// Publishes the finished local result and its summary (written at
    /// [`crate::summary_path`] of [`Sink::local`]), each whole or not at all.
    fn publish(&self, run: &RunKey) -> Result<(), Error>;

    /// After `--resume` found the local result complete: publishes it where
    /// the destination lacks it (an upload or commit cut short); whether it
    /// did.
    fn publish_if_missing(&self, run: &RunKey) -> Result<bool, Error>;

    /// The line saying that [`Sink::publish_if_missing`] published now.
    fn published_note(&self, run: &RunKey) -> String {
        format!(
            "{} was complete in {}; uploaded it and its summary",
            self.shown(),
            self.local(run).display()
        )
    }
}
