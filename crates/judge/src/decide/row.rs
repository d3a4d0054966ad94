//! The value a decision step looks at: one row of a batch and one of the
//! stage's metrics, with what the steps read of it.

use arrow::array::StringArray;
use refscore_core::RowBatch;

use crate::metric::JudgeMetric;
use crate::tiers::ChainValues;

use super::rules;

/// A row's answers as the rules see them, worked out once per row however
/// many metrics it asks for.
pub(crate) struct Answers<'a> {
    pub(crate) reference: &'a str,
    pub(crate) output: &'a str,
    /// The output is empty (only whitespace).
    pub(crate) empty: bool,
    /// The output is the reference's answer ([`rules::same_answer`]).
    pub(crate) same: bool,
}

impl<'a> Answers<'a> {
    /// Row `i`'s answers (a null is empty text).
    pub(crate) fn of(batch: &'a RowBatch, i: usize) -> Answers<'a> {
        let (reference, output) = (
            batch.reference().get(i).unwrap_or(""),
            batch.output().get(i).unwrap_or(""),
        );
        let empty = output.trim().is_empty();
        let same = !empty && rules::same_answer(reference, output);
        Answers {
            reference,
            output,
            empty,
            same,
        }
    }
}

/// A rubric's question about the row, rendered once for the steps that
/// look it up and ask it.
pub(crate) struct Prompted {
    /// The user message.
    pub(crate) user: String,
    /// The hash the journal and cache key it by (see
    /// [`crate::JudgeStage::key`]).
    pub(crate) texts: String,
}

/// One requested value: what every step may read of it.
pub(crate) struct Row<'a> {
    pub(crate) batch: &'a RowBatch,
    /// The row's index in the batch.
    pub(crate) i: usize,
    /// The metric's index among the stage's metrics.
    pub(crate) m: usize,
    pub(crate) metric: &'a JudgeMetric,
    pub(crate) answers: &'a Answers<'a>,
    /// The batch's values of the tiers' scores.
    pub(crate) values: &'a ChainValues,
    /// The batch's prompt columns as text.
    pub(crate) columns: &'a [(&'a str, StringArray)],
    /// The rubric's question, once a step rendered it.
    pub(crate) question: Option<Prompted>,
}
