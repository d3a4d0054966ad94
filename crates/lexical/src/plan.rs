//! The lexical stage as the pipeline plans it: nothing to load, nothing
//! beside the chosen metrics (the run's record) that changes its values.

use arrow::datatypes::Field;
use refscore_core::{Error, Stage, StagePlan};

use crate::LexicalStage;

/// The lexical stage is its own plan: its selection is all it needs.
impl StagePlan for LexicalStage {
    fn fields(&self) -> Vec<Field> {
        crate::fields(self.0)
    }

    fn load(&self) -> Result<Option<Box<dyn Stage>>, Error> {
        Ok(Some(Box::new(*self)))
    }
}
