//! What the judging of one batch has decided so far: per metric and row the
//! value and its source, per row its cost, error and whether a judge was
//! asked; and how a failure is written into a row's error.

use crate::transport::Usage;
use crate::JudgeReport;

use super::{Decisions, Source};

/// What the judging of one batch has decided so far.
#[derive(Clone)]
pub(crate) struct Decided {
    /// `verdicts[m][row]`, m indexing the stage's metrics.
    pub(crate) verdicts: Vec<Decisions>,
    /// What each row's answers cost.
    pub(crate) usage: Vec<Usage>,
    /// Why each row's failed metrics failed.
    pub(crate) errors: Vec<Option<String>>,
    /// Rows with a failure of the endpoint itself (see
    /// [`crate::JudgeStage::last_batch_rows_retryable`]).
    pub(crate) transient: Vec<bool>,
    /// Rows where at least one metric went to the model.
    pub(crate) judged: Vec<bool>,
}

impl Decided {
    /// Rows with a failed metric, of them the rows a later try may fix
    /// (the endpoint failed), and the first of those rows' error.
    pub(crate) fn failures(&self) -> (u64, u64, Option<String>) {
        let failed = self.errors.iter().filter(|e| e.is_some()).count() as u64;
        let mut retryable = self
            .errors
            .iter()
            .zip(&self.transient)
            .filter(|(e, t)| e.is_some() && **t)
            .map(|(e, _)| e.as_deref());
        let reason = retryable.next().flatten().map(String::from);
        let count = reason.is_some() as u64 + retryable.count() as u64;
        (failed, count, reason)
    }

    /// Rows a judge was asked about whose judge failed for good: a
    /// rejection or an unusable answer ([`fail`]'s errors), not the
    /// endpoint failing (which a later try may fix) nor a tied jury (where
    /// every judge answered); and the first such row's error.
    pub(crate) fn failures_for_good(&self) -> (u64, Option<String>) {
        let mut rows = self
            .errors
            .iter()
            .zip(self.transient.iter().zip(&self.judged))
            .filter_map(|(e, (t, judged))| {
                e.as_deref()
                    .filter(|e| !*t && *judged && e.contains(JUDGE_FAILED))
            });
        let first = rows.next().map(String::from);
        (u64::from(first.is_some()) + rows.count() as u64, first)
    }

    /// Metric values a judge answered usably (or the local NLI model
    /// decided), not a rule or a tier.
    pub(crate) fn values_answered(&self) -> u64 {
        self.verdicts
            .iter()
            .flatten()
            .filter(|v| matches!(v, Some((_, Source::Judge | Source::Cache | Source::Nli))))
            .count() as u64
    }

    /// Takes on the values the shared steps settled in `first` (a panel's
    /// first judge's decisions), where the steps ran once for every judge.
    pub(crate) fn adopt_shared(&mut self, first: &Decided) {
        for (mine, theirs) in self.verdicts.iter_mut().zip(&first.verdicts) {
            for (value, settled) in mine.iter_mut().zip(theirs) {
                if settled.as_ref().is_some_and(|(_, s)| s.shared()) {
                    value.clone_from(settled);
                }
            }
        }
    }

    /// Nothing decided yet for `rows` rows of `metrics` metrics.
    pub(crate) fn new(metrics: usize, rows: usize) -> Decided {
        Decided {
            verdicts: vec![vec![None; rows]; metrics],
            usage: vec![Usage::default(); rows],
            errors: vec![None; rows],
            transient: vec![false; rows],
            judged: vec![false; rows],
        }
    }
}

/// Adds one answer's cost to a row's.
pub(crate) fn add_usage(total: &mut Usage, u: Usage) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_tokens += u.cached_tokens;
    total.latency_ms += u.latency_ms;
}

/// What every error of a judge's failure says after the metric's name, so
/// that such rows can be told from a tied jury's.
const JUDGE_FAILED: &str = ": judge failed: ";

/// Counts a judge failure of `metric` and adds why to the row's error (a
/// row may fail for several metrics).
pub(crate) fn fail(slot: &mut Option<String>, report: &mut JudgeReport, metric: &str, why: &str) {
    report.failures += 1;
    let msg = format!("{metric}{JUDGE_FAILED}{why}");
    match slot {
        Some(s) => {
            s.push_str("; ");
            s.push_str(&msg);
        }
        None => *slot = Some(msg),
    }
}
