//! What a report says: every figure, serialised as the `--json` file and
//! rendered as the page. Field names are the JSON's public names.

use std::collections::BTreeMap;

use serde::Serialize;

use crate::bootstrap::Method;

/// Everything a report shows, for one run and optionally its baseline.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// refscore version that made the report.
    pub refscore_version: &'static str,
    /// The run being reported (tonight's).
    pub result: RunSummary,
    /// The run it is compared with (last night's), when given.
    pub baseline: Option<RunSummary>,
    /// How the two runs' rows were matched by id.
    pub join: Option<Join>,
    /// Per metric: distribution, lowest rows and the change.
    pub metrics: Vec<MetricReport>,
    /// The same figures per value of the `--by` column.
    pub slices: Option<Slices>,
    /// Judge accounting of the result.
    pub judge: Option<Judge>,
    /// How the confidence intervals were made (with a baseline).
    pub bootstrap: Option<Method>,
    /// The `--fail-on-regression` checks and their outcome.
    pub gates: Vec<GateResult>,
    /// The `--gate` checks on labelled verdicts' TPR and TNR bounds.
    pub rate_gates: Vec<crate::rate_gate::RateGateResult>,
    /// Where row texts came from: "result" (--keep columns), "input", or none.
    pub texts_from: Option<String>,
    /// Judge metrics the user defined whose definition differs between the
    /// result and the baseline, in words: their changes may be the rubric's,
    /// not the model's.
    pub rubric_changes: Vec<String>,
    /// Per labelled metric (`--gold`): its agreement with the human labels,
    /// its corrected run-wide figure and the rows where it disagrees.
    pub calibration: Vec<GoldReport>,
}

/// One labelled metric on the page.
#[derive(Debug, Clone, Serialize)]
pub struct GoldReport {
    /// Every agreement figure and the corrected estimate.
    #[serde(flatten)]
    pub figures: refscore_stats::gold::Calibration,
    /// The first labelled rows where metric and label disagree, with texts.
    pub disagreements: Vec<Disagreement>,
    /// Per tier of the chain (by source, `band:SCORE`): the values of the
    /// metric it decided over the whole result and their share of the
    /// metric's values, from its `<metric>_source` column.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub tier_volume: BTreeMap<String, TierVolume>,
}

/// What one tier decided of a metric over the whole result.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct TierVolume {
    /// Values it decided.
    pub decided: u64,
    /// decided / the metric's values with a source (rule, tier, cache or
    /// judge).
    pub share: f64,
}

/// A labelled row where the metric and the human label disagree.
#[derive(Debug, Clone, Serialize)]
pub struct Disagreement {
    /// The row, its id and texts, the metric's value and the judge's reasons.
    #[serde(flatten)]
    pub row: RowView,
    /// The human label.
    pub gold: f64,
    /// The judge's P(true), where it gave one.
    pub p: Option<f64>,
}

/// Row and status counts of one run.
#[derive(Debug, Clone, Serialize)]
pub struct RunSummary {
    /// The path or glob given.
    pub path: String,
    /// Rows in the run.
    pub rows: u64,
    /// Rows per `status` value.
    pub statuses: BTreeMap<String, u64>,
    /// Rows per distinct `error` text, most frequent first.
    pub errors: Vec<ErrorGroup>,
}

/// Rows that failed for one reason.
#[derive(Debug, Clone, Serialize)]
pub struct ErrorGroup {
    /// The `error` text (or "(other reasons)" past the first 1000 distinct).
    pub reason: String,
    /// Rows with it.
    pub rows: u64,
}

/// How rows of the two runs were paired.
#[derive(Debug, Clone, Serialize)]
pub struct Join {
    /// "aligned" (same ids in the same order, read side by side) or "hashed".
    pub method: &'static str,
    /// Ids present in both runs.
    pub rows_matched: u64,
    /// Rows of the result whose id the baseline lacks.
    pub only_in_result: u64,
    /// Rows of the baseline whose id the result lacks.
    pub only_in_baseline: u64,
    /// A few of those ids.
    pub only_in_result_examples: Vec<String>,
    /// A few of those ids.
    pub only_in_baseline_examples: Vec<String>,
    /// Baseline rows whose id an earlier baseline row already had (ignored).
    pub duplicate_baseline_ids: u64,
    /// Matched rows per (baseline status, result status).
    pub status_changes: Vec<StatusChange>,
}

/// Matched rows that went from one status to another.
#[derive(Debug, Clone, Serialize)]
pub struct StatusChange {
    /// Status in the baseline.
    pub from: String,
    /// Status in the result.
    pub to: String,
    /// Rows.
    pub rows: u64,
}

/// One metric's figures.
#[derive(Debug, Clone, Serialize)]
pub struct MetricReport {
    /// Column name.
    pub name: String,
    /// Pass threshold (value >= threshold passes), if the metric has one.
    pub threshold: Option<f64>,
    /// Distribution in the result.
    pub result: Distribution,
    /// Distribution in the baseline.
    pub baseline: Option<Distribution>,
    /// Whether lower values are the better ones (`nli_contradiction`), as
    /// the metric registry says: the report reads changes and lists rows
    /// that way round.
    pub lower_is_better: bool,
    /// The worst-scoring rows of the result, worst first: the lowest
    /// values, or the highest where lower is better.
    pub lowest: Vec<RowView>,
    /// Change against the baseline over rows valued in both.
    pub change: Option<Change>,
}

/// A metric's values in one run.
#[derive(Debug, Clone, Serialize)]
pub struct Distribution {
    /// Rows with a value.
    pub count: u64,
    /// Mean.
    pub mean: Option<f64>,
    /// Median, within 5e-5.
    pub median: Option<f64>,
    /// Share of valued rows at or above the threshold.
    pub pass_rate: Option<f64>,
    /// Counts in equal bins over [lo, hi] (the last bin includes hi).
    pub histogram: Histogram,
}

/// Equal-width bins for the chart.
#[derive(Debug, Clone, Serialize)]
pub struct Histogram {
    /// Lower edge of the first bin.
    pub lo: f64,
    /// Upper edge of the last bin.
    pub hi: f64,
    /// Rows per bin.
    pub counts: Vec<u64>,
}

/// A metric's change from baseline to result, over paired rows.
#[derive(Debug, Clone, Serialize)]
pub struct Change {
    /// Rows valued in both runs.
    pub pairs: u64,
    /// Baseline mean over those rows.
    pub mean_baseline: Option<f64>,
    /// Result mean over those rows.
    pub mean_result: Option<f64>,
    /// Mean of (result − baseline).
    pub diff: Option<f64>,
    /// Lower end of the 95% interval of `diff`.
    pub ci_low: Option<f64>,
    /// Upper end of the 95% interval of `diff`.
    pub ci_high: Option<f64>,
    /// "worse" (interval below 0), "better" (above 0) or "no clear change".
    pub verdict: &'static str,
    /// One line: "token_f1 −0.031 [−0.040, −0.022]: worse".
    pub line: String,
    /// Baseline pass rate over paired rows.
    pub pass_rate_baseline: Option<f64>,
    /// Result pass rate over paired rows.
    pub pass_rate_result: Option<f64>,
    /// Rows that passed in the baseline and fail now.
    pub pass_to_fail: u64,
    /// Rows that failed in the baseline and pass now.
    pub fail_to_pass: u64,
    /// The pass → fail rows with the largest drops.
    pub pass_to_fail_rows: Vec<RowView>,
    /// The fail → pass rows with the largest gains.
    pub fail_to_pass_rows: Vec<RowView>,
    /// With human labels on both nights: the change of the figure corrected
    /// for the judge's error. Where present, `verdict`, `line` and the
    /// regression gates use it rather than the paired change above.
    pub corrected: Option<CorrectedChange>,
}

/// The change of a labelled metric's corrected figure between two nights.
/// The two nights' labelled rows are independent samples, so the interval
/// of the difference is ±1.96 × √(se² + se²) of the two PPI++ estimates.
#[derive(Debug, Clone, Serialize)]
pub struct CorrectedChange {
    /// The baseline's corrected figure.
    pub baseline: f64,
    /// The result's corrected figure.
    pub result: f64,
    /// result − baseline.
    pub diff: f64,
    /// Lower end of the 95% interval of `diff`.
    pub ci_low: f64,
    /// Upper end of the 95% interval of `diff`.
    pub ci_high: f64,
}

/// One row with its texts.
#[derive(Debug, Clone, Serialize, Default)]
pub struct RowView {
    /// Row ordinal in the result.
    pub row: u64,
    /// The id, as text.
    pub id: String,
    /// The metric's value in the result.
    pub value: f64,
    /// Its value in the baseline (flips).
    pub baseline_value: Option<f64>,
    /// Question.
    pub input: Option<String>,
    /// Reference answer.
    pub reference: Option<String>,
    /// The result's output.
    pub output: Option<String>,
    /// The baseline's output (flips, when the baseline kept it).
    pub baseline_output: Option<String>,
    /// The judge's reasons in the result.
    pub reason: Option<String>,
    /// The judge's reasons in the baseline.
    pub baseline_reason: Option<String>,
}

/// Figures per slice.
#[derive(Debug, Clone, Serialize)]
pub struct Slices {
    /// The `--by` column.
    pub column: String,
    /// Where it was read: "result" or "input".
    pub source: &'static str,
    /// Distinct values (at most 1000 named, then "(other)").
    pub count: usize,
    /// Per metric, slices sorted by the largest change (without a
    /// baseline: lowest mean first).
    pub metrics: Vec<SliceMetric>,
}

/// One metric's slices.
#[derive(Debug, Clone, Serialize)]
pub struct SliceMetric {
    /// Metric name.
    pub name: String,
    /// Slices, sorted.
    pub slices: Vec<SliceRow>,
}

/// One slice of one metric.
#[derive(Debug, Clone, Serialize)]
pub struct SliceRow {
    /// The `--by` value.
    pub slice: String,
    /// Result rows in the slice.
    pub rows: u64,
    /// Result rows with a value.
    pub count: u64,
    /// Result mean.
    pub mean: Option<f64>,
    /// Result pass rate.
    pub pass_rate: Option<f64>,
    /// Change against the baseline (rows are sliced by the result's value).
    pub change: Option<SliceChange>,
}

/// A slice's change.
#[derive(Debug, Clone, Serialize)]
pub struct SliceChange {
    /// Paired rows.
    pub pairs: u64,
    /// Baseline mean over them.
    pub mean_baseline: Option<f64>,
    /// Result mean over them.
    pub mean_result: Option<f64>,
    /// Mean difference.
    pub diff: Option<f64>,
    /// 95% interval, low end.
    pub ci_low: Option<f64>,
    /// 95% interval, high end.
    pub ci_high: Option<f64>,
    /// As in [`Change::verdict`].
    pub verdict: &'static str,
    /// Pass → fail rows.
    pub pass_to_fail: u64,
    /// Fail → pass rows.
    pub fail_to_pass: u64,
}

/// What the judge did for the result, from its per-row columns.
#[derive(Debug, Clone, Serialize)]
pub struct Judge {
    /// Rows that asked for any judge metric.
    pub rows_requested: u64,
    /// Rows with at least one metric decided by a judge call.
    pub rows_judged: u64,
    /// Prompt tokens of the rows' calls.
    pub prompt_tokens: u64,
    /// Completion tokens of the rows' calls.
    pub completion_tokens: u64,
    /// Seconds spent in the rows' calls (retries included).
    pub call_seconds: f64,
    /// Per `<metric>_source` column: rows per source (rule, band, cache, judge).
    pub sources: BTreeMap<String, BTreeMap<String, u64>>,
    /// The run's own judge summary (calls, retries, reference fact
    /// extraction), when `RESULT.summary.json` lies beside a single file.
    pub summary: Option<serde_json::Value>,
}

/// One `--fail-on-regression` check.
#[derive(Debug, Clone, Serialize)]
pub struct GateResult {
    /// Metric.
    pub metric: String,
    /// Allowed drop: fails when the interval lies wholly below −delta.
    pub delta: f64,
    /// True when it failed.
    pub failed: bool,
    /// One line saying why.
    pub line: String,
}
