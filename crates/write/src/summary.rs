//! Run statistics gathered while writing, in memory that does not grow with
//! the number of rows: counts and sums, plus a fixed histogram for medians.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Schema, UInt8Type};
use serde::Serialize;

/// Histogram resolution: bins are centred on multiples of 1e-4 over
/// [-1, 1]; values outside are clamped into the end bins. Medians of scores
/// in [0, 1] are exact to within half a bin (5e-5).
const BINS_PER_UNIT: f64 = 10_000.0;
const BINS: usize = 20_001;

#[derive(Debug, Clone)]
struct MetricStats {
    name: String,
    threshold: Option<f64>,
    count: u64,
    sum: f64,
    passed: u64,
    histogram: Vec<u64>,
}

impl MetricStats {
    fn add(&mut self, v: f64) {
        self.count += 1;
        self.sum += v;
        if self.threshold.is_some_and(|t| v >= t) {
            self.passed += 1;
        }
        let idx = ((v.clamp(-1.0, 1.0) + 1.0) * BINS_PER_UNIT).round() as usize;
        self.histogram[idx.min(BINS - 1)] += 1;
    }

    /// The value of the k-th smallest observation (0-based), as its bin centre.
    fn kth(&self, k: u64) -> f64 {
        let mut seen = 0u64;
        for (idx, &c) in self.histogram.iter().enumerate() {
            seen += c;
            if seen > k {
                return idx as f64 / BINS_PER_UNIT - 1.0;
            }
        }
        f64::NAN
    }

    fn summary(&self) -> MetricSummary {
        let (mean, median, pass_rate) = if self.count == 0 {
            (None, None, None)
        } else {
            let median = if self.count % 2 == 1 {
                self.kth(self.count / 2)
            } else {
                (self.kth(self.count / 2 - 1) + self.kth(self.count / 2)) / 2.0
            };
            (
                Some(self.sum / self.count as f64),
                Some(median),
                self.threshold
                    .map(|_| self.passed as f64 / self.count as f64),
            )
        };
        MetricSummary {
            name: self.name.clone(),
            count: self.count,
            mean,
            median,
            threshold: self.threshold,
            pass_rate,
        }
    }
}

/// Statistics of one metric column over the whole run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct MetricSummary {
    /// The metric's column name.
    pub name: String,
    /// Rows where the metric has a value (non-null).
    pub count: u64,
    /// Mean of the values.
    pub mean: Option<f64>,
    /// Median of the values (to within 5e-5 for scores in [-1, 1]).
    pub median: Option<f64>,
    /// The pass threshold (value >= threshold passes), if the metric has one.
    pub threshold: Option<f64>,
    /// Share of valued rows at or above the threshold.
    pub pass_rate: Option<f64>,
}

/// Accumulates statistics batch by batch; see [`SummaryBuilder::observe`].
#[derive(Debug, Clone)]
pub struct SummaryBuilder {
    metrics: Vec<(usize, MetricStats)>,
    rows: u64,
    statuses: BTreeMap<String, u64>,
}

impl SummaryBuilder {
    /// Tracks every Float32, UInt8-score and Boolean metric column of the
    /// result schema (everything between `id` and `status`).
    pub fn new(schema: &Schema, thresholds: &[(String, f64)]) -> SummaryBuilder {
        let mut metrics = Vec::new();
        for (idx, field) in schema.fields().iter().enumerate().skip(1) {
            if field.name() == "status" {
                break;
            }
            if !matches!(field.data_type(), DataType::Float32 | DataType::Boolean) {
                continue;
            }
            let threshold = thresholds
                .iter()
                .find(|(n, _)| n == field.name())
                .map(|(_, t)| *t);
            metrics.push((
                idx,
                MetricStats {
                    name: field.name().clone(),
                    threshold,
                    count: 0,
                    sum: 0.0,
                    passed: 0,
                    histogram: vec![0; BINS],
                },
            ));
        }
        SummaryBuilder {
            metrics,
            rows: 0,
            statuses: BTreeMap::new(),
        }
    }

    pub(crate) fn empty() -> SummaryBuilder {
        SummaryBuilder {
            metrics: Vec::new(),
            rows: 0,
            statuses: BTreeMap::new(),
        }
    }

    /// Adds one result batch.
    pub fn observe(&mut self, batch: &RecordBatch) {
        self.rows += batch.num_rows() as u64;
        for (idx, stats) in &mut self.metrics {
            let col = batch.column(*idx);
            match col.data_type() {
                DataType::Float32 => {
                    for v in col.as_primitive::<Float32Type>().iter().flatten() {
                        stats.add(v as f64);
                    }
                }
                DataType::Boolean => {
                    for v in col.as_boolean().iter().flatten() {
                        stats.add(if v { 1.0 } else { 0.0 });
                    }
                }
                DataType::UInt8 => {
                    for v in col.as_primitive::<UInt8Type>().iter().flatten() {
                        stats.add(v as f64);
                    }
                }
                _ => {}
            }
        }
        if let Some(status) = batch.column_by_name("status") {
            let status = status.as_string::<i32>();
            for s in status.iter().flatten() {
                match self.statuses.get_mut(s) {
                    Some(c) => *c += 1,
                    None => {
                        self.statuses.insert(s.to_string(), 1);
                    }
                }
            }
        }
    }

    /// The finished summary, given the run's wall time.
    pub fn finish(&self, seconds: f64) -> Summary {
        Summary {
            rows: self.rows,
            rows_ok: self.statuses.get("ok").copied().unwrap_or(0),
            rows_partial: self.statuses.get("partial").copied().unwrap_or(0),
            rows_error: self.statuses.get("error").copied().unwrap_or(0),
            seconds,
            rows_per_second: if seconds > 0.0 {
                self.rows as f64 / seconds
            } else {
                0.0
            },
            metrics: self.metrics.iter().map(|(_, m)| m.summary()).collect(),
            extra: BTreeMap::new(),
        }
    }
}

/// What a run did: printed as a table and written as `<output>.summary.json`.
#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    /// Rows written (= rows read).
    pub rows: u64,
    /// Rows with `status = ok`.
    pub rows_ok: u64,
    /// Rows with `status = partial`.
    pub rows_partial: u64,
    /// Rows with `status = error`.
    pub rows_error: u64,
    /// Wall time of the run.
    pub seconds: f64,
    /// Rows per second over the whole run.
    pub rows_per_second: f64,
    /// Per-metric statistics, in column order.
    pub metrics: Vec<MetricSummary>,
    /// Facts other stages add (model, peak memory, judge accounting).
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(values: &[f64]) -> MetricSummary {
        let mut s = MetricStats {
            name: "m".into(),
            threshold: Some(0.5),
            count: 0,
            sum: 0.0,
            passed: 0,
            histogram: vec![0; BINS],
        };
        values.iter().for_each(|&v| s.add(v));
        s.summary()
    }

    #[test]
    fn median_and_pass_rate() {
        let s = stats(&[0.1, 0.9, 0.5]);
        assert!((s.median.unwrap() - 0.5).abs() < 1e-9);
        assert!((s.pass_rate.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        let s = stats(&[0.0, 1.0, 1.0, 0.0]);
        assert!((s.median.unwrap() - 0.5).abs() < 1e-9);
        let s = stats(&[0.12345, 0.2]);
        assert!((s.median.unwrap() - 0.161725).abs() < 1e-4);
        assert!((s.mean.unwrap() - 0.161725).abs() < 1e-12);
        let s = stats(&[]);
        assert_eq!((s.count, s.mean, s.median), (0, None, None));
    }
}
