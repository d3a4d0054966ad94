//! `refscore report`: what a run's result files say, and what changed since
//! a baseline run.
//!
//! [`build`] reads the result (and the baseline) once, column by column, in
//! memory that does not grow with the rows: counts, sums and 1e-4-wide
//! histograms per metric and slice, bounded heaps of the lowest rows and of
//! flipped rows. Rows are paired by id, side by side when both runs list the
//! same ids in the same order (two runs over one input do), else through a
//! hash table of the baseline's scores. Intervals come from a paired
//! bootstrap over the histogram of differences ([`bootstrap`]). Only then
//! are the few rows shown fetched with their texts. [`Report::html`] renders
//! one self-contained page; the [`Report`] itself serialises as the JSON.

mod agg;
pub mod band;
pub mod bootstrap;
pub mod chain;
mod finish;
pub mod gold;
mod model;
mod pass;
pub mod rate_gate;
mod render;
mod run;
mod texts;

use refscore_core::Error;
use refscore_read::ColumnMapping;

pub use model::*;

/// What to report on; the CLI fills it from flags.
#[derive(Debug, Clone)]
pub struct Options {
    /// Result files of the run (file, directory or glob).
    pub result: String,
    /// Result files of the run to compare with.
    pub baseline: Option<String>,
    /// How the result is read: for a Delta table of nightly results, the
    /// version, or only the rows one commit appended (`--night`).
    pub result_source: refscore_read::SourceOptions,
    /// Likewise for the baseline (`--baseline-night`).
    pub baseline_source: refscore_read::SourceOptions,
    /// The scoring input, for texts (and `--by`) the result did not keep.
    pub input: Option<String>,
    /// How the input's columns map to roles.
    pub mapping: ColumnMapping,
    /// Slice column (in the result or the input).
    pub by: Option<String>,
    /// Pass thresholds given for this report (`--threshold`); they win over
    /// the thresholds the result records, which win over the registry's
    /// defaults.
    pub thresholds: Vec<(String, f64)>,
    /// Regression checks.
    pub gates: Vec<Gate>,
    /// `--gate`: labelled verdicts held to the lower bounds of their TPR
    /// and TNR.
    pub rate_gates: Vec<rate_gate::RateGate>,
    /// The confidence of those bounds (`--gate-confidence`).
    pub gate_confidence: f64,
    /// Lowest rows listed per metric.
    pub lowest: usize,
    /// Flipped rows listed per metric and direction.
    pub flips: usize,
    /// Bootstrap seed.
    pub seed: u64,
    /// Bootstrap replicates.
    pub replicates: usize,
    /// Human labels, metric → column (`--gold`); empty: the mapping the
    /// result's footer records, if any.
    pub gold: Vec<(String, String)>,
}

/// Default bootstrap seed: reports of the same runs are identical.
pub const DEFAULT_SEED: u64 = 20_240_601;
/// Default bootstrap replicates: the percentile's Monte Carlo error is
/// about 6% of the mean's standard error.
pub const DEFAULT_REPLICATES: usize = 2000;

/// A `--fail-on-regression` check: fail when the metric's interval lies
/// wholly below −delta.
#[derive(Debug, Clone, PartialEq)]
pub struct Gate {
    /// Metric name, or "all".
    pub metric: String,
    /// Tolerated drop (≥ 0).
    pub delta: f64,
}

impl Gate {
    /// Parses `METRIC[=DELTA]`.
    pub fn parse(text: &str) -> Result<Gate, Error> {
        let bad = |why: &str| Error::usage(format!("--fail-on-regression {text}: {why}"));
        let (metric, delta) = match text.split_once('=') {
            Some((m, d)) => {
                let d: f64 = d
                    .trim()
                    .parse()
                    .map_err(|_| bad("DELTA must be a number"))?;
                if !d.is_finite() || d < 0.0 {
                    return Err(bad("DELTA must be a finite number >= 0"));
                }
                (m.trim(), d)
            }
            None => (text.trim(), 0.0),
        };
        if metric.is_empty() {
            return Err(bad("expected METRIC[=DELTA]"));
        }
        Ok(Gate {
            metric: metric.to_string(),
            delta,
        })
    }
}

/// Reads the runs and computes every figure.
pub fn build(options: &Options) -> Result<Report, Error> {
    pass::build(options)
}

impl Report {
    /// The self-contained HTML page.
    pub fn html(&self) -> Result<String, Error> {
        render::page(self)
    }

    /// The JSON file (`--json`): every figure of the page.
    pub fn json(&self) -> String {
        serde_json::to_string_pretty(self).expect("serialisable") + "\n"
    }

    /// The lines of the checks that failed: regressions, then rate gates.
    pub fn failed_gates(&self) -> Vec<&str> {
        let regressions = self.gates.iter().filter(|g| g.failed).map(|g| &g.line);
        let rates = self.rate_gates.iter().filter(|g| g.failed).map(|g| &g.line);
        regressions.chain(rates).map(String::as_str).collect()
    }
}

/// "−0.031" with a real minus sign, 3 decimals (4 for small figures).
pub(crate) fn signed(v: f64, decimals: usize) -> String {
    let s = format!("{:+.*}", decimals, v);
    s.replacen('-', "\u{2212}", 1)
}
