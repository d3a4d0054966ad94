//! The summary table printed at the end of a run.

use refscore_write::Summary;

/// Renders the summary as an aligned plain-text table.
pub fn table(summary: &Summary) -> String {
    let mut out = String::new();
    out.push_str(&format!(
        "rows {}  (ok {}, partial {}, error {})  in {:.2}s  = {:.0} rows/s\n",
        summary.rows,
        summary.rows_ok,
        summary.rows_partial,
        summary.rows_error,
        summary.seconds,
        summary.rows_per_second
    ));
    out.push_str(&format!(
        "{:<22} {:>9} {:>8} {:>8} {:>9} {:>9}\n",
        "metric", "rows", "mean", "median", "threshold", "pass rate"
    ));
    let num = |v: Option<f64>, digits: usize| {
        v.map(|x| format!("{x:.digits$}"))
            .unwrap_or_else(|| "-".into())
    };
    for m in &summary.metrics {
        out.push_str(&format!(
            "{:<22} {:>9} {:>8} {:>8} {:>9} {:>9}\n",
            m.name,
            m.count,
            num(m.mean, 4),
            num(m.median, 4),
            num(m.threshold, 2),
            m.pass_rate
                .map(|p| format!("{:.1}%", p * 100.0))
                .unwrap_or_else(|| "-".into())
        ));
    }
    out.push_str(&format!(
        "(medians are exact to within ±{:.0e}: bins of {:.0e})\n",
        summary.median_resolution / 2.0,
        summary.median_resolution
    ));
    out
}
