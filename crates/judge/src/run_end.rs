//! What the judge says of a run as a whole once its rows are scored: the
//! error that fails a run the judge left short (for now or for good), and
//! the notes and warnings for stderr. They are the judge's facts, so they
//! live with the judge; the CLI only decides when to ask.

use std::path::Path;

use refscore_core::Error;

use crate::{JudgePanel, JudgeReport};

/// `--max-judge-failures`: how many rows may lack judge metrics for good
/// before the run fails, and whether the user set it (unset, a run fails
/// only when no value it asked for came back usable).
#[derive(Debug, Clone, Copy)]
pub struct FailureLimit {
    /// Rows allowed to lack judge metrics.
    pub allowed: u64,
    /// Whether `allowed` was given rather than defaulted.
    pub given: bool,
}

/// The error (exit 75) of a run that left `rows` without judge metrics
/// because the judge failed for now: `output` holds everything else, and
/// `--resume` completes it once the judge is back.
pub fn lacking_for_now(rows: u64, first_failure: Option<&str>, output: &Path) -> Error {
    Error::temporary(format!(
        "{rows} {} judge metrics because the judge failed (first failure: {}); {} holds everything else; run the same command with --resume once the judge is back",
        if rows == 1 { "row lacks" } else { "rows lack" },
        first_failure.unwrap_or("unknown"),
        output.display()
    ))
}

impl JudgeReport {
    /// The error (exit 78) of a run whose judge rejected rows or answered
    /// them unusably beyond `limit`: a retry would fail the same way, so
    /// `--resume` does not ask again, but such a run is a failed one, not
    /// one that exits 0 with a warning. `None` when the run stands.
    pub fn failed_for_good(&self, limit: FailureLimit, output: &Path) -> Option<Error> {
        let for_good = self.rows_failed_for_good;
        let failed = if limit.given {
            for_good > limit.allowed
        } else {
            for_good > 0 && self.values_answered == 0
        };
        if !failed {
            return None;
        }
        let which = if limit.given {
            format!("more than --max-judge-failures {} accepts", limit.allowed)
        } else {
            "and no value it was asked for came back usable".to_string()
        };
        Some(Error::config(format!(
            "{for_good} {} judge metrics because the judge rejected the request or answered unusably, {which} (first failure: {}); a retry would fail the same way: check the judge's model, key and context limit; {} holds everything else",
            if for_good == 1 { "row lacks" } else { "rows lack" },
            self.first_failure_for_good.as_deref().unwrap_or("unknown"),
            output.display()
        )))
    }
}

impl JudgePanel {
    /// The notes and warnings a finished run prints about its judge (the
    /// lines after `refscore: `), `retryable_rows` being the rows a resumed
    /// run would judge again.
    pub fn closing_lines(&self, r: &JudgeReport, retryable_rows: u64) -> Vec<String> {
        let mut out = Vec::new();
        if let Some(note) = &r.token_probabilities {
            out.push(format!("note: token probabilities: {note}"));
        }
        out.extend(
            self.escalation_gaps()
                .into_iter()
                .map(|gap| format!("warning: {gap}")),
        );
        if r.replies_without_logprobs > 0 {
            out.push(format!(
                "note: the judge sent no token probabilities for {} of {} replies; there, meaning_match_p is null and similarity is the sampled score",
                r.replies_without_logprobs,
                r.replies_with_logprobs + r.replies_without_logprobs
            ));
        }
        if r.fact_checks_nli_truncated > 0 {
            out.push(format!(
                "warning: {} of {} fact checks by the NLI model (--fact-check nli) cut the answer at the model's token limit: a fact stated past the cut counts as unsupported",
                r.fact_checks_nli_truncated, r.fact_checks_nli
            ));
        }
        if r.rows_failed > retryable_rows {
            out.push(format!(
                "warning: {} rows got judge answers that could not be used (see their error column); a retry would fail the same way",
                r.rows_failed - retryable_rows
            ));
        }
        out
    }
}
