//! The judge metrics as a pipeline stage: which rows ask for which metric
//! (`--judge-where`), the cascade's cosine from the embedding stage before
//! it, and the judge's accounting for the run summary.

use arrow::datatypes::Field;
use refscore_core::{Error, RowBatch, ScoreColumns, Stage};
use serde_json::json;

use crate::tiers::ChainValues;
use crate::{report_json, where_column, JudgeStage};

impl Stage for JudgeStage {
    fn fields(&self) -> Vec<Field> {
        JudgeStage::fields(self)
    }

    fn score(&mut self, batch: &RowBatch, earlier: &ScoreColumns) -> Result<ScoreColumns, Error> {
        let requested = where_column::requested_rows(batch, self.where_column(), self.known())?;
        let values = self.tier_values(earlier);
        let mut scores = self.score_batch(batch, &requested, &values)?;
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
    /// The scores the chain's tiers read, among the columns of the stages
    /// before.
    pub(crate) fn tier_values(&self, earlier: &ScoreColumns) -> ChainValues {
        self.options().tiers.values(earlier)
    }

    /// Whether the run's judge metrics need no judge at all: a fact ratio
    /// alone, its facts the answers' sentences, checked by the local NLI
    /// model.
    fn asks_no_judge(&self) -> bool {
        let o = self.options();
        o.facts == crate::FactSource::Sentences
            && o.fact_check.is_some()
            && self
                .metrics()
                .iter()
                .all(|m| matches!(m, crate::metric::JudgeMetric::FactRatio))
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
        let o = self.options();
        if let Some(check) = &o.fact_check {
            let mut described = check.described.clone();
            described["threshold"] = json!(check.threshold);
            v["fact_check"] = described;
        }
        if self.asks_no_judge() {
            // Nothing went to a judge: no template, output format or
            // reasons setting was used, and none is reported.
            if let Some(m) = v.as_object_mut() {
                for key in ["templates", "response_format", "reasons"] {
                    m.remove(key);
                }
            }
            v["judge_asked"] = json!(false);
        }
        Some(("judge", v))
    }
}
