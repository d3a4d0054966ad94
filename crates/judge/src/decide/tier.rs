//! The chain of tiers as a decision step: the first tier sure of a banded
//! verdict's row decides it, counted per tier.

use crate::JudgeStage;

use super::{DecisionStep, Outcome, Pending, Row, Source, Step};

/// The `--judge-band` tiers, for verdicts defined with a band.
pub(crate) struct ByTier;

impl DecisionStep for ByTier {
    fn decide(&self, stage: &mut JudgeStage, row: &mut Row<'_>, _: &mut Pending) -> Step {
        if !row.metric.band() {
            return Step::Pass;
        }
        let tiers = &stage.options().tiers;
        let Some((k, verdict, why)) = tiers.decide(row.values, row.i) else {
            return Step::Pass;
        };
        let source = tiers.source(k);
        let report = stage.counts();
        report.decided_by_band += 1;
        let count = &mut report.tiers[k];
        count.decided += 1;
        count.decided_true += u64::from(verdict);
        let outcome = Outcome::Verdict {
            verdict,
            p_true: None,
            reason: Some(why),
        };
        Step::Settled(outcome, Source::Tier(source))
    }
}
