//! A jury: every judge of the panel answers the values the shared decision
//! steps (rules, tiers) passed on, and the majority (verdicts; a tie fails
//! the value) or the mean (scores) decides. The shared steps run once, at
//! the first juror; the others are asked only what those steps left open.

use arrow::array::Float32Array;
use refscore_core::{Error, RowBatch};
use refscore_stats::agreement::FleissTally;

use crate::decide::{add_usage, Decided, Outcome, Source};
use crate::definition::Answer;
use crate::metric::JudgeMetric;
use crate::where_column::Wanted;
use crate::JudgeReport;

use super::{level, note, JudgePanel, Judged};

impl JudgePanel {
    /// A jury's batch, after its first juror's decisions `first` (where
    /// the shared steps ran): the other jurors answer what those steps
    /// passed on, and the answers are combined.
    pub(super) fn jury(
        &mut self,
        batch: &RowBatch,
        requested: &[Wanted],
        first: Decided,
        mut decider: Vec<Vec<Option<usize>>>,
    ) -> Result<Judged, Error> {
        let open = self.wanted(requested.len(), |m, i| {
            requested[i].asks(self.metrics[m].metric())
                && !first.verdicts[m][i]
                    .as_ref()
                    .is_some_and(|(_, s)| s.shared())
        });
        let mut each = vec![first];
        for k in 1..self.members.len() {
            let mut d = self.members[k].1.decide_asking(batch, &open)?;
            // What the shared steps settled is every juror's value (its
            // column shows it, as a single judge's would).
            d.adopt_shared(&each[0]);
            each.push(d);
        }
        let values = self.requested_values(requested);
        self.asked.iter_mut().for_each(|a| *a += values);
        let fin = self.vote(&each, &mut decider);
        Ok((fin, each, decider))
    }

    /// The jury's decisions: majority of verdicts (a tie fails the value),
    /// mean of scores; a juror that failed fails the value.
    // Row i indexes every juror's decisions and the combined ones alike.
    #[allow(clippy::needless_range_loop)]
    fn vote(&mut self, each: &[Decided], decider: &mut [Vec<Option<usize>>]) -> Decided {
        let n = each[0].usage.len();
        let jurors = each.len();
        let mut fin = Decided::new(self.metrics.len(), n);
        for i in 0..n {
            for d in each {
                add_usage(&mut fin.usage[i], d.usage[i]);
                fin.judged[i] |= d.judged[i];
            }
            for (m, jm) in self.metrics.iter().enumerate() {
                let answers: Vec<&Option<(Outcome, Source)>> =
                    each.iter().map(|d| &d.verdicts[m][i]).collect();
                if answers.iter().all(|a| a.is_none()) {
                    // Not requested, or every juror failed.
                    if let Some(k) = (0..jurors).find(|&k| each[k].errors[i].is_some()) {
                        if fin.errors[i].is_none() {
                            fin.errors[i] = each[k].errors[i].clone();
                        }
                        fin.transient[i] |= each.iter().any(|d| d.transient[i]);
                    }
                    continue;
                }
                if let Some(k) = answers.iter().position(|a| a.is_none()) {
                    note(
                        &mut fin.errors[i],
                        format!(
                            "{}: juror {} gave no answer: {}",
                            jm.name(),
                            self.members[k].0,
                            each[k].errors[i].as_deref().unwrap_or("no reason")
                        ),
                    );
                    fin.transient[i] |= each[k].transient[i];
                    continue;
                }
                let decided: Vec<&(Outcome, Source)> =
                    answers.iter().filter_map(|a| a.as_ref()).collect();
                // The shared steps and the local NLI model decide alike for
                // every juror.
                if !matches!(decided[0].1, Source::Judge | Source::Cache) {
                    fin.verdicts[m][i] = Some(decided[0].clone());
                    continue;
                }
                let combined = match &decided[0].0 {
                    Outcome::Verdict { .. } => match majority(jm, &decided, &mut self.fleiss[m]) {
                        Ok(verdict) => Some((verdict, Source::Judge)),
                        Err(trues) => {
                            self.ties += 1;
                            let falses = jurors - trues;
                            let why = format!(
                                "{}: the jury tied ({trues} true, {falses} false)",
                                jm.name()
                            );
                            note(&mut fin.errors[i], why);
                            None
                        }
                    },
                    Outcome::Score { .. } => mean(jm, &decided).map(|s| (s, Source::Judge)),
                    Outcome::Facts(_) => Some(decided[0].clone()),
                };
                let Some(value) = combined else { continue };
                fin.verdicts[m][i] = Some(value);
                for k in 0..jurors {
                    self.decided[k] += 1;
                }
                decider[m][i] = None;
            }
        }
        fin
    }
}

/// The jurors' verdicts' majority, its P(true) the mean of theirs (where
/// every juror gave one) and its reason the first of a juror on its side;
/// the votes are tallied for Fleiss' kappa. `Err(trues)` when they tie.
fn majority(
    jm: &JudgeMetric,
    decided: &[&(Outcome, Source)],
    tally: &mut FleissTally,
) -> Result<Outcome, usize> {
    let jurors = decided.len();
    let trues = decided
        .iter()
        .filter(|(o, _)| matches!(o, Outcome::Verdict { verdict: true, .. }))
        .count();
    tally.add(trues as u64);
    if trues * 2 == jurors {
        return Err(trues);
    }
    let verdict = trues * 2 > jurors;
    let ps: Vec<f32> = decided.iter().filter_map(|(o, _)| level(jm, o)).collect();
    let p_true = (ps.len() == jurors).then(|| ps.iter().sum::<f32>() / jurors as f32);
    let reason = decided.iter().find_map(|(o, _)| match o {
        Outcome::Verdict {
            verdict: v, reason, ..
        } if *v == verdict => reason.clone(),
        _ => None,
    });
    Ok(Outcome::Verdict {
        verdict,
        p_true,
        reason,
    })
}

/// The jurors' scores' mean: the sampled scores' mean, rounded, and as the
/// expected score the mean of their levels on the rubric's own scale (so
/// that the normalised column is the jurors' mean).
fn mean(jm: &JudgeMetric, decided: &[&(Outcome, Source)]) -> Option<Outcome> {
    let Some(Answer::Score { min, max }) = jm.rubric().map(|r| r.answer) else {
        return None;
    };
    let levels: Vec<f32> = decided.iter().filter_map(|(o, _)| level(jm, o)).collect();
    let scores: Vec<f32> = decided
        .iter()
        .filter_map(|(o, _)| match o {
            Outcome::Score { score, .. } => Some(*score as f32),
            _ => None,
        })
        .collect();
    let mean = levels.iter().sum::<f32>() / levels.len() as f32;
    let expected = min as f32 + mean * (max - min) as f32;
    let score = (scores.iter().sum::<f32>() / scores.len() as f32).round() as u8;
    Some(Outcome::Score {
        score,
        expected: Some(expected),
        reason: None,
    })
}

/// `<metric>_agreement` for metric `m` over `n` rows: where every juror
/// answered, the share siding with the majority (a verdict) or 1 − the
/// spread of their levels (a score).
pub(super) fn agreement(jm: &JudgeMetric, m: usize, n: usize, each: &[Decided]) -> Float32Array {
    let answer = jm.rubric().map(|r| r.answer);
    (0..n)
        .map(|i| {
            let answers: Vec<&Outcome> = each
                .iter()
                .filter_map(|d| d.verdicts[m][i].as_ref())
                .filter(|(_, s)| matches!(s, Source::Judge | Source::Cache))
                .map(|(o, _)| o)
                .collect();
            if answers.len() != each.len() || answers.is_empty() {
                return None;
            }
            Some(match answer {
                Some(Answer::Verdict) => {
                    let t = answers
                        .iter()
                        .filter(|o| matches!(o, Outcome::Verdict { verdict: true, .. }))
                        .count();
                    t.max(answers.len() - t) as f32 / answers.len() as f32
                }
                _ => {
                    let l: Vec<f32> = answers.iter().filter_map(|o| level(jm, o)).collect();
                    let (lo, hi) = l
                        .iter()
                        .fold((f32::MAX, f32::MIN), |(a, b), v| (a.min(*v), b.max(*v)));
                    1.0 - (hi - lo)
                }
            })
        })
        .collect()
}

/// A juror's report as the summary shows it: the shared steps ran once, at
/// the first juror, so the rows requested and what the rules and tiers
/// settled are the first juror's counts (every juror was asked those rows).
pub(super) fn with_shared_counts(own: JudgeReport, first: &JudgeReport) -> JudgeReport {
    JudgeReport {
        rows_requested: first.rows_requested,
        decided_by_rule: first.decided_by_rule,
        decided_by_band: first.decided_by_band,
        tiers: first.tiers.clone(),
        ..own
    }
}
