//! The fact ratio as a decision step: it takes its values on, asking for
//! the facts of the row's reference and output; the stage's fact checks
//! settle them once the facts are in (`stage/facts.rs`).

use crate::cache::DiskCache;
use crate::metric::JudgeMetric;
use crate::JudgeStage;

use super::{DecisionStep, Pending, Row, Step};

/// The fact ratio's path: extraction now, checks after the batch's calls.
pub(crate) struct FactRatio;

impl DecisionStep for FactRatio {
    fn decide(&self, stage: &mut JudgeStage, row: &mut Row<'_>, work: &mut Pending) -> Step {
        if !matches!(row.metric, JudgeMetric::FactRatio) {
            return Step::Pass;
        }
        let answers = [row.answers.reference, row.answers.output];
        let [ref_key, out_key] = answers.map(|answer| {
            let texts = DiskCache::key(&[answer]);
            stage.want_facts(&texts, answer, &mut work.extracting, &mut work.jobs);
            texts
        });
        work.fact_rows.push((row.i, row.m, ref_key, out_key));
        Step::Taken
    }
}
