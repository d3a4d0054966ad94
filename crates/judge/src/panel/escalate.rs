//! Escalation: each later judge of a panel is asked only the values the
//! judge before it answered unsurely (P(true), or a score's expected value,
//! inside the escalation band), and its answer replaces the unsure one.

use refscore_core::{Error, RowBatch};

use crate::decide::{add_usage, Decided, Source};
use crate::endpoint::Endpoint;
use crate::where_column::Wanted;

use super::{level, note, JudgePanel, Judged, PanelMode};

/// Default `--judge-escalate-band`: P(true) or the expected score between
/// a fifth and four fifths of the scale.
pub const DEFAULT_ESCALATE_BAND: (f32, f32) = (0.2, 0.8);

/// What to say before an escalating panel runs: a judge (but the last)
/// whose API offers no token probabilities has no P(true), so it is never
/// unsure of a verdict and no verdict it gives goes on to the next judge. One line per
/// such judge, naming it; none for a jury or a single judge.
pub fn escalation_warnings(mode: Option<PanelMode>, judges: &[(String, Endpoint)]) -> Vec<String> {
    if !matches!(mode, Some(PanelMode::Escalate { .. })) || judges.len() < 2 {
        return Vec::new();
    }
    judges
        .windows(2)
        .filter(|w| !w[0].1.api.protocol().token_probabilities())
        .map(|w| {
            format!(
                "judge {} speaks the {} API, which gives no token probabilities: escalation \
                 reads a verdict's P(true), so no verdict it gives goes on to judge {} (scores \
                 go on by their sampled value; put a judge with probabilities first, or use \
                 --judge-panel jury)",
                w[0].0,
                w[0].1.api.name(),
                w[1].0
            )
        })
        .collect()
}

impl JudgePanel {
    /// Escalation reads each judge's P(true): the judges (all but the last)
    /// whose replies came without token probabilities in this run, and
    /// so could not be found unsure, each as a line naming the judge.
    pub fn escalation_gaps(&self) -> Vec<String> {
        if !matches!(self.mode, Some(PanelMode::Escalate { .. })) {
            return Vec::new();
        }
        let last = self.members.len() - 1;
        self.members[..last]
            .iter()
            .enumerate()
            .filter_map(|(k, (name, stage))| {
                let r = stage.report();
                (r.replies_without_logprobs > 0).then(|| {
                    format!(
                        "judge {name} sent no token probabilities for {} of {} replies: \
                         escalation reads a verdict's P(true), so a verdict among them was \
                         never passed to judge {}",
                        r.replies_without_logprobs,
                        r.replies_with_logprobs + r.replies_without_logprobs,
                        self.members[k + 1].0
                    )
                })
            })
            .collect()
    }

    /// An escalating panel's batch, after its first judge's decisions
    /// `first`: each later judge answers what the one before was unsure of.
    pub(super) fn escalate(
        &mut self,
        batch: &RowBatch,
        requested: &[Wanted],
        first: Decided,
        mut decider: Vec<Vec<Option<usize>>>,
        band: (f32, f32),
    ) -> Result<Judged, Error> {
        self.asked[0] += self.requested_values(requested);
        let mut fin = first;
        let mut each = vec![fin.clone()];
        for k in 1..self.members.len() {
            let ask = self.wanted(requested.len(), |m, i| {
                self.metrics[m].rubric().is_some()
                    && matches!(
                    &fin.verdicts[m][i],
                    Some((o, Source::Judge | Source::Cache))
                        if level(&self.metrics[m], o).is_some_and(|l| band.0 <= l && l <= band.1)
                )
            });
            let d = self.ask(k, batch, &ask)?;
            for (i, w) in ask.iter().enumerate() {
                for (m, jm) in self.metrics.iter().enumerate() {
                    if !w.asks(jm.metric()) {
                        continue;
                    }
                    // The next judge's answer replaces the uncertain one;
                    // where it failed, the value fails (a resumed run asks
                    // again, the answers already paid for replayed from the
                    // journals).
                    fin.verdicts[m][i] = d.verdicts[m][i].clone();
                    decider[m][i] = d.verdicts[m][i].as_ref().map(|_| k);
                    if d.verdicts[m][i].is_none() {
                        let why = d.errors[i].clone().unwrap_or_else(|| {
                            format!("{}: judge {} gave no answer", jm.name(), self.members[k].0)
                        });
                        note(&mut fin.errors[i], why);
                        fin.transient[i] |= d.transient[i];
                    }
                }
                fin.judged[i] |= d.judged[i];
                add_usage(&mut fin.usage[i], d.usage[i]);
            }
            each.push(d);
        }
        Ok((fin, each, decider))
    }

    /// Asks judge `k` the values `ask` lists, counted as asked of it; none
    /// asked, nothing is run.
    fn ask(&mut self, k: usize, batch: &RowBatch, ask: &[Wanted]) -> Result<Decided, Error> {
        let count = self.requested_values(ask);
        self.asked[k] += count;
        if count == 0 {
            return Ok(Decided::new(self.metrics.len(), batch.len()));
        }
        self.members[k].1.decide_asking(batch, ask)
    }
}
