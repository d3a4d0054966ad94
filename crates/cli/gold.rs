//! `--gold` in a `score` run: every label checked before any work, the
//! labelled metrics gathered from the finished result into the summary, and
//! their lines in the printed table. The statistics themselves live in
//! `refscore_stats`, the reading of a result in `refscore_report::gold`.

use refscore_core::Error;
use refscore_read::{Dataset, Table};
use refscore_report::gold::{self, GoldColumn};
use refscore_stats::gold::{Calibration, GoldState};
use refscore_write::Summary;
use serde_json::Value;

/// Summary key of the figures.
pub(crate) const CALIBRATION: &str = "calibration";
/// Summary key of the mergeable states they come from.
pub(crate) const STATE: &str = "gold_state";

/// Refuses a label column named like a column of the result (`status`,
/// a metric's): kept in the result, it would clash with it. The message
/// names the `--gold` mapping (or the config file's line), not `--keep`.
pub(crate) fn check_names(
    settings: &crate::settings::Settings,
    result_columns: &[&str],
) -> Result<(), Error> {
    for ((_, column), given) in settings.gold.iter().zip(&settings.gold_given) {
        if !settings.keep.contains(column) && result_columns.contains(&column.as_str()) {
            return Err(Error::config(format!(
                "{given}: the label column '{column}' has the same name as a column of the \
                 result; rename it in the input"
            )));
        }
    }
    Ok(())
}

/// Reads every label of the input before the first row is scored: a label
/// of the wrong kind or off the scale names its file, column and row (exit
/// 65); a label column that is null throughout names the column (exit 78).
pub(crate) fn check_input(
    dataset: &Dataset,
    columns: &[GoldColumn],
    judge_metrics: &refscore_judge::JudgeMetrics,
) -> Result<(), Error> {
    for g in columns {
        let mut labels = 0u64;
        for batch in dataset.column(&g.column) {
            let batch = batch?;
            for i in 0..batch.array.len() {
                let label = gold::label(&batch.array, i, g.kind).map_err(|why| {
                    Error::bad_input(format!(
                        "{}: column '{}', row {}: {why}{}",
                        batch.source.display(),
                        g.column,
                        batch.first_row_in_source + i as u64,
                        scale_hint(&g.metric, judge_metrics)
                    ))
                })?;
                labels += label.is_some() as u64;
            }
        }
        if labels == 0 {
            return Err(Error::config(format!(
                "--gold {}={}: column '{}' holds no labels (every value is null)",
                g.metric, g.column, g.column
            )));
        }
    }
    Ok(())
}

/// How a score's label is made from the rubric's own scale, for a label
/// off the 0–1 scale: a 1–5 rubric's s is (s − 1)/4, not s/10.
fn scale_hint(metric: &str, judge_metrics: &refscore_judge::JudgeMetrics) -> String {
    match judge_metrics.score_scale(metric) {
        Some((min, max)) => {
            let span = max - min;
            format!(
                " (labels of {metric} are on 0-1: a score s on its {min}-{max} scale is labelled \
                 (s - {min})/{span}, so {min} is 0 and {max} is 1)"
            )
        }
        None => String::new(),
    }
}

/// Gathers the labelled metrics of the finished `output` and adds their
/// figures and states to the summary.
pub(crate) fn summarise(
    output: &std::path::Path,
    columns: &[GoldColumn],
    summary: &mut Summary,
) -> Result<(), Error> {
    if columns.is_empty() {
        return Ok(());
    }
    let table = Table::open(&output.display().to_string())?;
    let states = gold::gather(&table, columns)?;
    insert(summary, &states);
    Ok(())
}

/// Adds `states` and the figures computed from them to the summary.
pub(crate) fn insert(summary: &mut Summary, states: &[GoldState]) {
    let figures: Vec<Calibration> = states.iter().map(gold::calibration).collect();
    summary.extra.insert(
        CALIBRATION.into(),
        serde_json::to_value(figures).expect("figures serialise"),
    );
    summary.extra.insert(
        STATE.into(),
        serde_json::to_value(states).expect("states serialise"),
    );
}

/// The gold states a summary file holds (none where the run had no labels).
pub(crate) fn states_of(json: &Value, shown: &str) -> Result<Vec<GoldState>, Error> {
    match json.get(STATE) {
        None => Ok(Vec::new()),
        Some(v) => serde_json::from_value(v.clone())
            .map_err(|e| Error::bad_input(format!("{shown}: unreadable '{STATE}': {e}"))),
    }
}

/// Adds the states of another shard, metric by metric.
pub(crate) fn merge(into: &mut Vec<GoldState>, theirs: Vec<GoldState>) -> Result<(), String> {
    if into.is_empty() {
        *into = theirs;
        return Ok(());
    }
    if into.len() != theirs.len() {
        return Err("the parts have different --gold labels".into());
    }
    for (mine, other) in into.iter_mut().zip(&theirs) {
        mine.merge(other)?;
    }
    Ok(())
}

/// One tier against the labels: its agreement and each side's error; a
/// side its band guarantees with its Clopper-Pearson bounds at the band's
/// confidence and whether the labelled rows bear the guarantee out, a side
/// without one with its Wilson 95% interval, as before guarantees.
fn tier_line(t: &Value) -> String {
    let pct = |v: &Value| {
        v.as_f64()
            .map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
    };
    let side = |s: &Value| {
        let g = &s["guarantee"];
        if !g.is_object() {
            return format!(
                "{} of {} against their label ({} [{}, {}])",
                s["errors"],
                s["labels"],
                pct(&s["error"]),
                pct(&s["error_low"]),
                pct(&s["error_high"])
            );
        }
        let asked = pct(&g["max_error"]);
        let c = pct(&g["confidence"]);
        let needed = g["labels_needed"]["side_labels"].as_u64();
        match g["status"].as_str() {
            Some("no_labels") => format!(
                "no labels: it decided no labelled row, so its guarantee (error at most {asked} at {c}) is not checked{}",
                needed.map_or(String::new(), |n| format!(
                    " (a check needs at least {n} labelled rows on this side, none wrong)"
                ))
            ),
            status => {
                let verdict = match status {
                    Some("held") => format!("guarantee held (upper bound within {asked})"),
                    Some("not_enough_labels") => format!(
                        "not enough labels to show the guarantee (upper bound above {asked}{})",
                        needed.map_or(String::new(), |n| format!(
                            "; at this error it needs {n} labelled rows on this side"
                        ))
                    ),
                    _ => format!("guarantee NOT held (error at or above {asked})"),
                };
                format!(
                    "{} of {} against their label ({}, Clopper-Pearson [{}, {}], each end {c} one-sided): {verdict}",
                    s["errors"],
                    s["labels"],
                    pct(&s["error"]),
                    pct(&g["error_low"]),
                    pct(&g["error_high"]),
                )
            }
        }
    };
    let a = &t["agreement"];
    let head = if a.is_object() {
        format!(
            "{} labelled rows, agreement {}",
            a["n"],
            pct(&a["agreement"])
        )
    } else {
        "no labelled rows".to_string()
    };
    format!(
        "    {}: {head}; decided false: {}; decided true: {}\n",
        t["source"].as_str().unwrap_or("?"),
        side(&t["decided_false"]),
        side(&t["decided_true"])
    )
}

/// A verdict judge's TPR and TNR with their lower Clopper-Pearson bounds,
/// and a warning where either rests on fewer labels than a gate on it
/// should (150 per rate).
fn rates(v: &Value) -> String {
    use refscore_stats::agreement::{MIN_RATE_LABELS, RATE_CONFIDENCE};
    let confidence = v["rates_confidence"].as_f64().unwrap_or(RATE_CONFIDENCE);
    let c = &v["confusion"];
    let count = |a: &str, b: &str| c[a].as_u64().unwrap_or(0) + c[b].as_u64().unwrap_or(0);
    let (trues, falses) = (
        count("true_positive", "false_negative"),
        count("true_negative", "false_positive"),
    );
    let pct = |v: &Value| {
        v.as_f64()
            .map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
    };
    let mut out = format!(
        "  TPR {} (lower {} bound {}, {trues} label-true rows), TNR {} (lower bound {}, {falses} label-false rows)\n",
        pct(&v["sensitivity"]),
        shown_confidence(confidence),
        pct(&v["sensitivity_low"]),
        pct(&v["specificity"]),
        pct(&v["specificity_low"]),
    );
    if trues.min(falses) < MIN_RATE_LABELS {
        out += &format!(
            "  warning: TPR rests on {trues} labels and TNR on {falses}: below {MIN_RATE_LABELS} per rate their bounds are too loose to gate a judge on; label more rows\n"
        );
    }
    out
}

/// A confidence as a percentage, with as many decimals as it needs
/// (90%, 97.5%).
fn shown_confidence(c: f64) -> String {
    let p = c * 100.0;
    if (p - p.round()).abs() < 1e-9 {
        format!("{p:.0}%")
    } else {
        format!("{}%", (p * 1e6).round() / 1e6)
    }
}

/// The summary table's lines for the labelled metrics.
pub(crate) fn lines(summary: &Summary) -> String {
    let Some(figures) = summary.extra.get(CALIBRATION).and_then(Value::as_array) else {
        return String::new();
    };
    let mut out = String::new();
    let pct = |v: &Value| {
        v.as_f64()
            .map_or("-".into(), |x| format!("{:.1}%", x * 100.0))
    };
    let num = |v: &Value| v.as_f64().map_or("-".into(), |x| format!("{x:.3}"));
    for c in figures {
        let mut line = format!(
            "{} vs labels in '{}': {} labels",
            c["metric"].as_str().unwrap_or("?"),
            c["gold_column"].as_str().unwrap_or("?"),
            c["labels"]
        );
        let v = &c["verdict"];
        if v.is_object() {
            let interval = match v["kappa_no_interval"].as_str() {
                Some(why) => format!("(no interval: {why})"),
                None => format!("[{}, {}]", num(&v["kappa_low"]), num(&v["kappa_high"])),
            };
            line += &format!(
                ", agreement {}, kappa {} {interval}",
                pct(&v["agreement"]),
                num(&v["kappa"]),
            );
        }
        let s = &c["score"];
        if s.is_object() {
            line += &format!(
                ", Spearman {}, Kendall {}, MAE {}, weighted kappa {}",
                num(&s["spearman"]),
                num(&s["kendall"]),
                num(&s["mae"]),
                num(&s["qwk"])
            );
        }
        let sep = &c["separation"];
        if sep.is_object() {
            line += &format!(
                ", AUC {}, best cut-off {} ({} agreement)",
                num(&sep["auc"]),
                num(&sep["best_threshold"]["value"]),
                pct(&sep["best_threshold"]["agreement"])
            );
        }
        out += &line;
        out.push('\n');
        if v.is_object() {
            out += &rates(v);
        }
        let k = &c["corrected"];
        if k.is_object() {
            let what = if v.is_object() { "pass rate" } else { "mean" };
            let interval = match (k["note"].as_str(), k["labels_wilson"].as_array()) {
                (Some(note), Some(w)) if w.len() == 2 => format!(
                    "(no PPI++ interval: {note}; Wilson 95% of the labels alone [{}, {}])",
                    pct(&w[0]),
                    pct(&w[1])
                ),
                (Some(note), _) => format!("(no interval: {note})"),
                (None, _) => format!("[{}, {}] (95%, PPI++)", pct(&k["low"]), pct(&k["high"])),
            };
            out += &format!(
                "  {what} as judged {}, corrected for the judge's error {} {interval}\n",
                pct(&k["raw"]),
                pct(&k["estimate"])
            );
        }
        let p = &c["probability"];
        let pc = &c["probability_calibration"];
        if p.is_object() && pc.is_object() {
            out += &format!(
                "  P(true): AUC {}, Brier {}, ECE {}; --judge-threshold {} would have agreed on {}\n",
                num(&p["auc"]),
                num(&pc["brier"]),
                num(&pc["ece"]),
                num(&p["best_threshold"]["value"]),
                pct(&p["best_threshold"]["agreement"])
            );
        }
        if let Some(stand_ins) = c["stand_ins"].as_array() {
            let parts: Vec<String> = stand_ins
                .iter()
                .map(|s| {
                    format!(
                        "{}{} AUC {} (cut-off {}: {})",
                        s["metric"].as_str().unwrap_or("?"),
                        if s["lower_is_better"] == true {
                            " (lower is better)"
                        } else {
                            ""
                        },
                        num(&s["separation"]["auc"]),
                        num(&s["separation"]["best_threshold"]["value"]),
                        pct(&s["separation"]["best_threshold"]["agreement"])
                    )
                })
                .collect();
            out += &format!("  stand-ins for the judge: {}\n", parts.join(", "));
        }
        let b = &c["band"];
        if b.is_object() {
            out += &format!(
                "  the tiers (--judge-band) decided {} labelled rows: agreement {}\n",
                b["n"],
                pct(&b["agreement"])
            );
        }
        for t in c["tiers"].as_array().into_iter().flatten() {
            out += &tier_line(t);
        }
    }
    out
}
