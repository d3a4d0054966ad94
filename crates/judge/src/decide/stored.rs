//! Stored answers as a decision step: a rubric's question answered before,
//! from the paid-answers journal (replayed as the judge's, with its cost)
//! or the on-disk cache.

use crate::JudgeStage;

use super::{add_usage, DecisionStep, Pending, Row, Source, Step};

/// The journal, then the cache.
pub(crate) struct Stored;

impl DecisionStep for Stored {
    fn decide(&self, stage: &mut JudgeStage, row: &mut Row<'_>, work: &mut Pending) -> Step {
        let (Some(rubric), Some(question)) = (row.metric.rubric(), &row.question) else {
            return Step::Pass;
        };
        let Some((v, u, source)) = stage.lookup(&rubric.template, &question.texts) else {
            return Step::Pass;
        };
        let Ok(verdict) = stage.verdict(rubric, &v) else {
            return Step::Pass;
        };
        if source == Source::Judge {
            stage.count_replay(u);
            add_usage(&mut work.decided.usage[row.i], u);
            work.decided.judged[row.i] = true;
        } else {
            stage.counts().cached += 1;
        }
        Step::Settled(verdict, source)
    }
}
