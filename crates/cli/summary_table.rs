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
    if let Some(precision) = summary
        .extra
        .get("embedding")
        .and_then(|e| e["precision"].as_str())
    {
        if precision != "fp32" {
            out.push_str(&format!(
                "embedding metrics in {precision}, not fp32: they differ from fp32 by the \
                 deviation in docs/performance.md#precision\n"
            ));
        }
    }
    if let Some(j) = summary.extra.get("judge") {
        out.push_str(&refscore_judge::summary_lines(j));
    }
    out.push_str(&crate::gold::lines(summary));
    out.push_str(&format!(
        "(medians are exact to within ±{:.0e}: bins of {:.0e})\n",
        summary.median_resolution / 2.0,
        summary.median_resolution
    ));
    out
}
