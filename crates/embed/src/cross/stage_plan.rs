//! The cross-encoder stage as the pipeline plans it: the folder checked
//! against the metrics asked of it, with the options it runs with, and the
//! weights when another user of the same model (the judge's fact check)
//! loaded them already.

use std::sync::Arc;

use arrow::datatypes::Field;
use refscore_core::{Error, Stage, StagePlan};
use serde_json::Value;

use super::{CrossEncoder, CrossOptions, CrossPlan};

/// The cross-encoder stage of a run, resolved
/// ([`crate::EmbedSettings::cross_plan`]).
#[derive(Clone)]
pub struct CrossStagePlan {
    plan: CrossPlan,
    options: CrossOptions,
    /// The weights, loaded at planning to be shared ([`Self::share_model`]).
    shared: Option<Arc<CrossEncoder>>,
}

impl CrossStagePlan {
    /// The plan of `plan`'s stage, run with `options`.
    pub fn new(plan: CrossPlan, options: CrossOptions) -> CrossStagePlan {
        CrossStagePlan {
            plan,
            options,
            shared: None,
        }
    }

    /// The options the stage runs with.
    pub fn options(&self) -> &CrossOptions {
        &self.options
    }

    /// Loads the weights now, for another user of the same `--cross-model`
    /// (the fact ratio's `--fact-check nli`); the stage scores with them.
    pub fn share_model(&mut self) -> Result<Arc<CrossEncoder>, Error> {
        let model = self.plan.load_model(&self.options)?;
        self.shared = Some(model.clone());
        Ok(model)
    }
}

impl StagePlan for CrossStagePlan {
    fn fields(&self) -> Vec<Field> {
        self.plan.fields()
    }

    fn fingerprint(&self) -> Result<Vec<(String, Value)>, Error> {
        Ok(vec![self.plan.fingerprint(&self.options)?])
    }

    fn load(&self) -> Result<Option<Box<dyn Stage>>, Error> {
        Ok(Some(match &self.shared {
            Some(model) => Box::new(self.plan.stage(model.clone(), &self.options)?),
            None => self.plan.load(&self.options)?,
        }))
    }
}
