//! The judge metrics as a pipeline stage: which rows ask for which metric
//! (`--judge-where`), the cascade's cosine from the embedding stage before
//! it, and the judge's accounting for the run summary.

use arrow::array::{AsArray, Float32Array};
use arrow::datatypes::{Field, Float32Type};
use refscore_core::{Error, RowBatch, ScoreColumns, Stage};
use serde_json::json;

use crate::{report_json, where_column, JudgeStage};

impl Stage for JudgeStage {
    fn fields(&self) -> Vec<Field> {
        JudgeStage::fields(self)
    }

    fn score(&mut self, batch: &RowBatch, earlier: &ScoreColumns) -> Result<ScoreColumns, Error> {
        let requested = where_column::requested_rows(batch, self.where_column(), self.known())?;
        let stand_in = self.stand_in(earlier);
        let mut scores = self.score_batch(batch, &requested, stand_in.as_ref())?;
        // Rows whose judge endpoint failed (down, timing out, 429, 5xx): a
        // resumed run tries them again. Bad answers would only fail again.
        scores.retryable_rows = self.last_batch_rows_retryable();
        scores.retry_reason = self.last_batch_retry_reason();
        Ok(scores)
    }

    /// The judge's report, with the seconds of calls per judged row.
    fn summary(&self) -> Option<(&'static str, serde_json::Value)> {
        self.summary_of(&self.report())
    }
}

impl JudgeStage {
    /// The values of the band's metric among the columns of the stages
    /// before (the cascade reads them), when the run has a band.
    pub(crate) fn stand_in(&self, earlier: &ScoreColumns) -> Option<Float32Array> {
        self.options()
            .band
            .as_ref()
            .and_then(|b| earlier.column(&b.metric))
            .map(|c| c.as_primitive::<Float32Type>().clone())
    }

    /// The summary's judge entry for report `r` (this stage's, or a
    /// panel's totals).
    pub(crate) fn summary_of(
        &self,
        r: &crate::JudgeReport,
    ) -> Option<(&'static str, serde_json::Value)> {
        let mut v = report_json(r);
        v["seconds_per_judged_row"] = json!(if r.rows_judged > 0 {
            r.call_seconds / r.rows_judged as f64
        } else {
            0.0
        });
        let defined = self.defined();
        if !defined.is_empty() {
            v["defined_metrics"] = json!(defined);
        }
        Some(("judge", v))
    }
}
