//! The call to the judge as the last decision step: the rubric's question
//! is queued, asked with the batch's other calls on worker threads, and
//! its answer settles the value (`stage/work.rs`).

use std::sync::Arc;

use crate::stage::Work;
use crate::JudgeStage;

use super::{DecisionStep, Pending, Row, Step};

/// Queues the rendered question for the judge.
pub(crate) struct AskJudge;

impl DecisionStep for AskJudge {
    fn decide(&self, _: &mut JudgeStage, row: &mut Row<'_>, work: &mut Pending) -> Step {
        let (Some(rubric), Some(question)) = (row.metric.rubric(), row.question.take()) else {
            return Step::Pass;
        };
        work.jobs.push(Work::Ask {
            row: row.i,
            metric: row.m,
            rubric: Arc::clone(rubric),
            texts: question.texts,
            user: question.user,
        });
        Step::Taken
    }
}
