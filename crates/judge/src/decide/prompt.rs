//! Rendering a rubric's question about the row, as a decision step: the
//! steps after it look the question up and ask it, and a row whose
//! question cannot be rendered fails here.

use crate::stage::render;
use crate::JudgeStage;

use super::row::Prompted;
use super::{fail, DecisionStep, Pending, Row, Step};

/// Renders the question; settles nothing.
pub(crate) struct Render;

impl DecisionStep for Render {
    fn decide(&self, stage: &mut JudgeStage, row: &mut Row<'_>, work: &mut Pending) -> Step {
        let Some(rubric) = row.metric.rubric() else {
            return Step::Pass;
        };
        match render(rubric, row.batch, row.i, row.columns) {
            Ok(user) => {
                let texts = stage.ask_texts(rubric, &user);
                row.question = Some(Prompted { user, texts });
                Step::Pass
            }
            Err(e) => {
                let slot = &mut work.decided.errors[row.i];
                fail(slot, stage.counts(), rubric.name(), &e);
                Step::Taken
            }
        }
    }
}
