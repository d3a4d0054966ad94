//! Run statistics gathered while writing, in memory that does not grow with
//! the number of rows: counts, exact sums and a histogram for medians.
//!
//! The statistics of two parts of a run (two resumed sessions, two shards)
//! merge by addition into exactly what one uninterrupted run would have
//! gathered: sums are kept in fixed point, so the order in which values were
//! added never changes the mean, and histograms add bin by bin.

use std::collections::BTreeMap;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::datatypes::{DataType, Float32Type, Schema, UInt8Type};
use refscore_core::schema::{self, status};
use refscore_stats::{Histogram, Tally};
use serde::{Deserialize, Serialize};

/// Width of a histogram bin. Medians are bin centres, so they are exact to
/// within half a bin: [`MEDIAN_RESOLUTION`] / 2.
pub const MEDIAN_RESOLUTION: f64 = refscore_stats::BIN_WIDTH;

/// One metric column's statistics, under its name.
#[derive(Debug, Clone)]
struct MetricStats {
    name: String,
    stats: refscore_stats::MetricStats,
}

impl MetricStats {
    fn new(name: &str, threshold: Option<f64>) -> MetricStats {
        MetricStats {
            name: name.to_string(),
            stats: refscore_stats::MetricStats::new(threshold),
        }
    }

    fn add(&mut self, v: f64) {
        self.stats.add(v);
    }

    fn summary(&self) -> MetricSummary {
        let s = &self.stats;
        MetricSummary {
            name: self.name.clone(),
            count: s.tally().count(),
            mean: s.mean(),
            median: s.median(),
            threshold: s.threshold(),
            pass_rate: s.pass_rate(),
        }
    }

    fn state(&self) -> MetricState {
        let (count, sum, passed) = self.stats.tally().parts();
        MetricState {
            name: self.name.clone(),
            threshold: self.stats.threshold(),
            count,
            sum: sum.to_string(),
            passed,
            bins: self.stats.histogram().bins(),
        }
    }

    fn merge(&mut self, s: &MetricState) -> Result<(), String> {
        let sum: i128 = s
            .sum
            .parse()
            .map_err(|_| format!("metric '{}': bad sum '{}'", s.name, s.sum))?;
        let mut histogram = Histogram::new();
        for (bin, c) in &s.bins {
            histogram.add_bin(*bin, *c);
        }
        let theirs = refscore_stats::MetricStats::from_parts(
            s.threshold,
            Tally::from_parts(s.count, sum, s.passed),
            histogram,
        );
        self.stats
            .merge(&theirs)
            .map_err(|e| format!("metric '{}' has {e}", self.name))
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
    /// Median of the values, to within [`MEDIAN_RESOLUTION`] / 2.
    pub median: Option<f64>,
    /// The pass threshold (value >= threshold passes), if the metric has one.
    pub threshold: Option<f64>,
    /// Share of valued rows at or above the threshold.
    pub pass_rate: Option<f64>,
}

/// One metric's statistics in a form that can be stored and added up.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct MetricState {
    /// Column name.
    pub name: String,
    /// Pass threshold.
    pub threshold: Option<f64>,
    /// Valued rows.
    pub count: u64,
    /// Exact sum, fixed point (value × 2^64), as a decimal string.
    pub sum: String,
    /// Rows at or above the threshold.
    pub passed: u64,
    /// Non-empty histogram bins: (round(value / 1e-4), rows).
    pub bins: Vec<(i64, u64)>,
}

/// Everything a summary is computed from, stored with each committed part
/// of a run and in `<output>.summary.json`, so parts and shards add up to
/// the summary of the whole run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Default)]
pub struct SummaryState {
    /// Rows seen.
    pub rows: u64,
    /// Rows per status value.
    pub statuses: BTreeMap<String, u64>,
    /// Per-metric statistics, in column order.
    pub metrics: Vec<MetricState>,
}

/// Accumulates statistics batch by batch; see [`SummaryBuilder::observe`].
#[derive(Debug, Clone)]
pub struct SummaryBuilder {
    metrics: Vec<(usize, MetricStats)>,
    rows: u64,
    statuses: BTreeMap<String, u64>,
}

impl SummaryBuilder {
    /// Tracks every Float32, UInt8 and Boolean metric column of the result
    /// schema (everything between `id` and `status`).
    pub fn new(schema: &Schema, thresholds: &[(String, f64)]) -> SummaryBuilder {
        let mut metrics = Vec::new();
        for (idx, field) in schema.fields().iter().enumerate().skip(1) {
            if field.name() == schema::STATUS {
                break;
            }
            if !matches!(
                field.data_type(),
                DataType::Float32 | DataType::Boolean | DataType::UInt8
            ) {
                continue;
            }
            let threshold = thresholds
                .iter()
                .find(|(n, _)| n == field.name())
                .map(|(_, t)| *t);
            metrics.push((idx, MetricStats::new(field.name(), threshold)));
        }
        SummaryBuilder {
            metrics,
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
        if let Some(status) = batch.column_by_name(schema::STATUS) {
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

    /// The pass threshold of each tracked metric that has one, in column
    /// order: what the result file records for `report`.
    pub fn thresholds(&self) -> Vec<(String, f64)> {
        self.metrics
            .iter()
            .filter_map(|(_, m)| Some((m.name.clone(), m.stats.threshold()?)))
            .collect()
    }

    /// The statistics so far, in storable form.
    pub fn state(&self) -> SummaryState {
        SummaryState {
            rows: self.rows,
            statuses: self.statuses.clone(),
            metrics: self.metrics.iter().map(|(_, m)| m.state()).collect(),
        }
    }

    /// Adds the statistics of another part of the same run. Fails when the
    /// part tracked other metrics or thresholds.
    pub fn merge(&mut self, state: &SummaryState) -> Result<(), String> {
        let names: Vec<&str> = self.metrics.iter().map(|(_, m)| m.name.as_str()).collect();
        let theirs: Vec<&str> = state.metrics.iter().map(|m| m.name.as_str()).collect();
        if names != theirs {
            return Err(format!(
                "the parts track different metrics: [{}] and [{}]",
                names.join(", "),
                theirs.join(", ")
            ));
        }
        for ((_, mine), theirs) in self.metrics.iter_mut().zip(&state.metrics) {
            mine.merge(theirs)?;
        }
        self.rows += state.rows;
        for (k, v) in &state.statuses {
            *self.statuses.entry(k.clone()).or_default() += v;
        }
        Ok(())
    }

    /// A builder holding exactly the given state (for merging summaries of
    /// shards without a schema at hand).
    pub fn from_state(state: &SummaryState) -> Result<SummaryBuilder, String> {
        let mut b = SummaryBuilder {
            metrics: state
                .metrics
                .iter()
                .enumerate()
                .map(|(i, m)| (i, MetricStats::new(&m.name, m.threshold)))
                .collect(),
            rows: 0,
            statuses: BTreeMap::new(),
        };
        b.merge(state)?;
        Ok(b)
    }

    /// The finished summary: `seconds` is this session's wall time and
    /// `rows_this_session` the rows it scored (a resumed run reuses others).
    pub fn finish(&self, seconds: f64, rows_this_session: u64) -> Summary {
        Summary {
            rows: self.rows,
            rows_ok: self.statuses.get(status::OK).copied().unwrap_or(0),
            rows_partial: self.statuses.get(status::PARTIAL).copied().unwrap_or(0),
            rows_error: self.statuses.get(status::ERROR).copied().unwrap_or(0),
            seconds,
            rows_per_second: if seconds > 0.0 {
                rows_this_session as f64 / seconds
            } else {
                0.0
            },
            median_resolution: MEDIAN_RESOLUTION,
            metrics: self.metrics.iter().map(|(_, m)| m.summary()).collect(),
            extra: BTreeMap::new(),
            state: self.state(),
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
    /// Wall time of this session.
    pub seconds: f64,
    /// Rows scored per second in this session.
    pub rows_per_second: f64,
    /// Medians are histogram bin centres: exact to within half this.
    pub median_resolution: f64,
    /// Per-metric statistics, in column order.
    pub metrics: Vec<MetricSummary>,
    /// Facts other stages add (model, peak memory, judge accounting).
    #[serde(flatten)]
    pub extra: BTreeMap<String, serde_json::Value>,
    /// The statistics the figures above come from, so the summaries of shards
    /// can be added up (`refscore merge-summaries`).
    pub state: SummaryState,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(values: &[f64]) -> MetricStats {
        let mut s = MetricStats::new("m", Some(0.5));
        values.iter().for_each(|&v| s.add(v));
        s
    }

    #[test]
    fn median_and_pass_rate() {
        let s = stats(&[0.1, 0.9, 0.5]).summary();
        assert!((s.median.unwrap() - 0.5).abs() < 1e-9);
        assert!((s.pass_rate.unwrap() - 2.0 / 3.0).abs() < 1e-9);
        let s = stats(&[0.0, 1.0, 1.0, 0.0]).summary();
        assert!((s.median.unwrap() - 0.5).abs() < 1e-9);
        let s = stats(&[0.12345, 0.2]).summary();
        assert!((s.median.unwrap() - 0.161725).abs() < 1e-4);
        assert!((s.mean.unwrap() - 0.161725).abs() < 1e-12);
        let s = stats(&[]).summary();
        assert_eq!((s.count, s.mean, s.median), (0, None, None));
    }

    #[test]
    fn values_outside_minus_one_to_one_are_not_clamped() {
        // Rescaled BERTScore goes below -1; similarity scores reach 10.
        let s = stats(&[-3.25, -2.5, -2.0]).summary();
        assert!((s.median.unwrap() + 2.5).abs() < 1e-9, "{:?}", s.median);
        let s = stats(&[7.0, 8.0, 10.0, 10.0]).summary();
        assert!((s.median.unwrap() - 9.0).abs() < 1e-9, "{:?}", s.median);
        let s = stats(&[-1.5, 0.25, 2.0]).summary();
        assert!((s.median.unwrap() - 0.25).abs() < 1e-9);
    }

    #[test]
    fn merged_parts_equal_one_pass_exactly() {
        let values: Vec<f64> = (0..10_000)
            .map(|i| ((i * 7919 % 10007) as f64 / 10007.0 * 1.3 - 0.15) as f32 as f64)
            .collect();
        let whole = stats(&values);
        for cut in [1, 17, 5000, 9999] {
            let (a, b) = values.split_at(cut);
            // Added in the other order, as a later shard merged first.
            let mut merged = stats(b);
            merged.merge(&stats(a).state()).unwrap();
            assert_eq!(merged.state(), whole.state());
            assert_eq!(merged.summary(), whole.summary());
        }
    }

    #[test]
    fn non_finite_values_are_not_counted() {
        let s = stats(&[0.5, f64::NAN, f64::INFINITY]).summary();
        assert_eq!(s.count, 1);
    }
}
