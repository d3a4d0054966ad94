//! A stage before it runs: what the pipeline needs of every stage between
//! reading the settings and scoring the first row (its columns, its part of
//! the run's fingerprint and of the result's footer, and how its runtime
//! loads), so that the pipeline is one loop over the stages' plans and a
//! new stage is its own crate plus one line in the CLI's registry.

use std::sync::Arc;

use arrow::datatypes::Field;
use serde_json::Value;

use crate::{Error, Stage, TextColumn};

/// A stage resolved from the run's settings (its model found and checked,
/// its options built) but not loaded: planning stays cheap and fails before
/// any work, and the model loads once, when rows are first left to score.
pub trait StagePlan {
    /// The columns its stage adds to the result, in order.
    fn fields(&self) -> Vec<Field>;

    /// Its entries in the run's fingerprint: everything beside the chosen
    /// metrics that changes its values. Keys and values are stored with
    /// unfinished runs, so they must not change for a resume to match.
    fn fingerprint(&self) -> Result<Vec<(String, Value)>, Error> {
        Ok(Vec::new())
    }

    /// Its entries in the result file's footer (what a report reads of how
    /// the numbers were made).
    fn footer(&self) -> Vec<(String, String)> {
        Vec::new()
    }

    /// Loads its runtime (the model), once per run. `None`: the stage is
    /// built per job pass through its plan's own type (the judge: its
    /// journal, its batches and the probe of its endpoints).
    fn load(&self) -> Result<Option<Box<dyn Stage>>, Error>;

    /// The option (as its config key names it) whose figures this stage
    /// fits on a pass over the whole input, if one is set: a worker that
    /// sees only part of the data would fit other figures.
    fn fitted_on_whole_input(&self) -> Option<&'static str> {
        None
    }
}

/// A plan shared with the typed hooks of its own crate (the judge's).
impl<T: StagePlan + ?Sized> StagePlan for Arc<T> {
    fn fields(&self) -> Vec<Field> {
        (**self).fields()
    }
    fn fingerprint(&self) -> Result<Vec<(String, Value)>, Error> {
        (**self).fingerprint()
    }
    fn footer(&self) -> Vec<(String, String)> {
        (**self).footer()
    }
    fn load(&self) -> Result<Option<Box<dyn Stage>>, Error> {
        (**self).load()
    }
    fn fitted_on_whole_input(&self) -> Option<&'static str> {
        (**self).fitted_on_whole_input()
    }
}

/// What a stage fitted to its input (IDF weights, an `auto` baseline)
/// reads of the whole input before it scores, read only when asked: a
/// file job and an in-memory scorer hand the same stage their own.
pub trait FitInput {
    /// The input as messages name it.
    fn name(&self) -> &str;

    /// The reference column, batch by batch.
    fn references(&self)
        -> Result<Box<dyn Iterator<Item = Result<TextColumn, Error>> + '_>, Error>;

    /// Up to `k` seeded random pairs of a reference and another row's
    /// output, the same for the same input.
    fn mismatched_pairs(&self, k: usize) -> Result<Vec<(String, String)>, Error>;
}
