//! The embedding stage as the pipeline plans it: the model found and
//! checked, the options built, not loaded; loading and fitting to the
//! input come when rows are first left to score.

use arrow::datatypes::Field;
use refscore_core::{Error, Stage, StagePlan};
use serde_json::Value;

use crate::{EmbedOptions, EmbeddingStage, ModelFiles};

/// The embedding stage of a run, resolved ([`crate::EmbedSettings::plan`]).
#[derive(Clone)]
pub struct EmbeddingPlan {
    pub(crate) files: ModelFiles,
    pub(crate) options: EmbedOptions,
    /// `--device` as the user named it (the fingerprint keeps the name).
    pub(crate) device: String,
    pub(crate) footer: Vec<(String, String)>,
    pub(crate) fitted_on_whole_input: Option<&'static str>,
}

impl StagePlan for EmbeddingPlan {
    fn fields(&self) -> Vec<Field> {
        crate::fields(&self.options.metrics)
    }

    fn fingerprint(&self) -> Result<Vec<(String, Value)>, Error> {
        self.options.fingerprint(&self.files, &self.device)
    }

    fn footer(&self) -> Vec<(String, String)> {
        self.footer.clone()
    }

    fn load(&self) -> Result<Option<Box<dyn Stage>>, Error> {
        let stage = EmbeddingStage::load_found(self.files.clone(), self.options.clone())?;
        Ok(Some(Box::new(stage)))
    }

    fn fitted_on_whole_input(&self) -> Option<&'static str> {
        self.fitted_on_whole_input
    }
}
