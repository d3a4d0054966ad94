//! `refscore report` through the real binary: a report of a real `score`
//! result, and bad input — runs that cannot be compared, files that are
//! not results, bad flags — each a one-line message with the documented
//! exit code and no file written.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array, Int64Array};
use common::*;

fn f32s_col(v: &[Option<f32>]) -> ArrayRef {
    Arc::new(Float32Array::from(v.to_vec()))
}

/// A result file as `score --metrics exact_match,token_f1` writes it.
fn result(dir: &Path, name: &str, ids: ArrayRef, metrics: &[&str]) -> PathBuf {
    let n = ids.len();
    let mut cols: Vec<(&str, ArrayRef)> = vec![("id", ids)];
    for m in metrics {
        cols.push((m, f32s_col(&vec![Some(0.5); n])));
    }
    cols.push(("status", s(&vec!["ok"; n])));
    cols.push(("error", strs(&vec![None; n])));
    let p = dir.join(name);
    write_parquet(&p, cols);
    p
}

fn int_ids(v: &[i64]) -> ArrayRef {
    Arc::new(Int64Array::from(v.to_vec()))
}

/// Runs a failing report and checks the exit code, that the message is one
/// line holding every needle, and that no file was written.
fn check(dir: &Path, args: &[&str], code: i32, needles: &[&str]) {
    let before = listing(dir);
    let html = dir.join("report.html");
    let json = dir.join("report.json");
    let mut all = vec!["report"];
    all.extend_from_slice(args);
    all.extend_from_slice(&["-o", html.to_str().unwrap()]);
    all.extend_from_slice(&["--json", json.to_str().unwrap()]);
    let err = fails(&refscore(&all), code);
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
    assert_eq!(err.trim_end().lines().count(), 1, "one-line message: {err}");
    assert_eq!(listing(dir), before, "nothing written");
}

fn p(path: &Path) -> &str {
    path.to_str().unwrap()
}

#[test]
fn a_baseline_with_other_metrics_is_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let cur = result(
        d.path(),
        "cur.parquet",
        int_ids(&[1, 2]),
        &["exact_match", "token_f1"],
    );
    let base = result(
        d.path(),
        "base.parquet",
        int_ids(&[1, 2]),
        &["exact_match", "cosine"],
    );
    check(
        d.path(),
        &[p(&cur), "--baseline", p(&base)],
        65,
        &[
            "different metrics",
            "only the result has token_f1",
            "only the baseline has cosine",
        ],
    );
}

#[test]
fn ids_of_another_type_are_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let cur = result(d.path(), "cur.parquet", int_ids(&[1, 2]), &["token_f1"]);
    let base = result(d.path(), "base.parquet", s(&["1", "2"]), &["token_f1"]);
    check(
        d.path(),
        &[p(&cur), "--baseline", p(&base)],
        65,
        &["base.parquet", "'id' has type Utf8", "Int64", "same kind"],
    );
}

#[test]
fn runs_without_a_common_id_are_bad_input() {
    let d = tempfile::tempdir().unwrap();
    let cur = result(d.path(), "cur.parquet", int_ids(&[1, 2, 3]), &["token_f1"]);
    let base = result(d.path(), "base.parquet", int_ids(&[7, 8]), &["token_f1"]);
    check(
        d.path(),
        &[p(&cur), "--baseline", p(&base)],
        65,
        &["no id is in both runs"],
    );
}

#[test]
fn files_that_are_not_results() {
    let d = tempfile::tempdir().unwrap();
    check(
        d.path(),
        &[p(&example())],
        65,
        &["qa.parquet", "not a refscore result file"],
    );
    let text = d.path().join("notes.parquet");
    std::fs::write(&text, "id,token_f1\n").unwrap();
    check(d.path(), &[p(&text)], 65, &["not a Parquet file"]);
    std::fs::remove_file(&text).unwrap();
    check(
        d.path(),
        &[p(&d.path().join("missing.parquet"))],
        74,
        &["missing.parquet", "no such file"],
    );
}

#[test]
fn bad_flags() {
    let d = tempfile::tempdir().unwrap();
    let cur = result(d.path(), "cur.parquet", int_ids(&[1, 2]), &["token_f1"]);
    check(
        d.path(),
        &[p(&cur), "--fail-on-regression", "token_f1"],
        64,
        &["needs --baseline"],
    );
    check(
        d.path(),
        &[
            p(&cur),
            "--baseline",
            p(&cur),
            "--fail-on-regression",
            "cosine=0.1",
        ],
        78,
        &["no metric 'cosine'"],
    );
    check(
        d.path(),
        &[
            p(&cur),
            "--baseline",
            p(&cur),
            "--fail-on-regression",
            "token_f1=-1",
        ],
        64,
        &[">= 0"],
    );
    check(
        d.path(),
        &[p(&cur), "--by", "category"],
        78,
        &["no column 'category'", "--keep category"],
    );
    let err = fails(&refscore(&["report", p(&cur)]), 64);
    assert!(err.contains("nothing to write"), "{err}");
}

#[test]
fn a_real_score_result_reports_and_gates() {
    let d = tempfile::tempdir().unwrap();
    let scored = d.path().join("scores.parquet");
    ok(&score(
        &example(),
        &scored,
        &["--metrics", "lexical", "--keep", "category,question"],
    ));
    let html = d.path().join("r.html");
    let json = d.path().join("r.json");
    let out = ok(&refscore(&[
        "report",
        p(&scored),
        "--baseline",
        p(&scored),
        "--by",
        "category",
        "--fail-on-regression",
        "all",
        "-o",
        p(&html),
        "--json",
        p(&json),
    ]));
    assert!(
        out.contains("token_f1 +0.0000 [+0.0000, +0.0000]: no clear change"),
        "{out}"
    );
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(page.contains("<svg") && !page.to_lowercase().contains("<script"));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let summary = summary(&scored);
    assert_eq!(r["result"]["rows"], summary["rows"]);
    for (m, s) in r["metrics"]
        .as_array()
        .unwrap()
        .iter()
        .zip(summary["metrics"].as_array().unwrap())
    {
        assert_eq!(m["name"], s["name"]);
        let (a, b) = (
            m["result"]["mean"].as_f64().unwrap(),
            s["mean"].as_f64().unwrap(),
        );
        assert!((a - b).abs() < 1e-9, "{}: {a} vs {b}", m["name"]);
        assert_eq!(m["result"]["pass_rate"], s["pass_rate"]);
    }
    assert_eq!(r["texts_from"], "result");
    assert_eq!(r["join"]["method"], "aligned");
}

/// The summary written with a run and `report` on its result are computed by
/// one statistics module from the same thresholds: every figure agrees
/// exactly, also for a threshold given to `score` only.
#[test]
fn summary_and_report_agree_on_every_figure() {
    let d = tempfile::tempdir().unwrap();
    let scored = d.path().join("scores.parquet");
    ok(&score(
        &example(),
        &scored,
        &["--metrics", "lexical", "--threshold", "token_f1=0.6"],
    ));
    let json = d.path().join("r.json");
    // `report` on the result (with extra flags) as JSON: its metrics.
    let metrics = |extra: &[&str]| -> Vec<serde_json::Value> {
        let mut args = vec!["report", p(&scored), "--json", p(&json)];
        args.extend_from_slice(extra);
        ok(&refscore(&args));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        r["metrics"].as_array().unwrap().clone()
    };
    let named = |metrics: &[serde_json::Value], name: &str| {
        metrics.iter().find(|m| m["name"] == name).cloned()
    };
    let summary = summary(&scored);
    let summarised = summary["metrics"].as_array().unwrap();
    let reported = metrics(&[]);
    assert!(reported.len() >= 5, "{reported:?}");
    for m in &reported {
        let name = m["name"].as_str().unwrap();
        let s = named(summarised, name).unwrap_or_else(|| panic!("{name} not in the summary"));
        for figure in ["count", "mean", "median", "pass_rate"] {
            assert_eq!(m["result"][figure], s[figure], "{name} {figure}");
        }
    }
    let token_f1 = named(&reported, "token_f1").unwrap();
    assert!(token_f1["result"]["pass_rate"].as_f64().is_some());
    // A threshold given to the report wins over the recorded one.
    let token_f1 = named(&metrics(&["--threshold", "token_f1=0.0"]), "token_f1").unwrap();
    assert_eq!(token_f1["result"]["pass_rate"], 1.0);
}

/// `refscore report RESULT FLAGS --json …`, run to success, its JSON.
fn report_json(result: &Path, flags: &[&str]) -> serde_json::Value {
    let json = result.with_extension("report.json");
    let mut args = vec!["report", p(result)];
    args.extend_from_slice(flags);
    args.extend(["--json", p(&json)]);
    ok(&refscore(&args));
    serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap()
}

/// The worst rows listed for a lower-is-better metric are its highest
/// values (the rows that contradict their references most), worst first;
/// a higher-is-better metric beside it still lists its lowest.
#[test]
fn the_worst_rows_of_contradiction_are_its_highest() {
    let d = tempfile::tempdir().unwrap();
    let n = 30usize;
    let ids: Vec<i64> = (0..n as i64).collect();
    let values: Vec<Option<f32>> = (0..n).map(|i| Some(i as f32 / 100.0)).collect();
    let path = d.path().join("r.parquet");
    write_parquet(
        &path,
        vec![
            ("id", int_ids(&ids)),
            ("token_f1", f32s_col(&values)),
            ("nli_contradiction", f32s_col(&values)),
            ("status", s(&vec!["ok"; n])),
            ("error", strs(&vec![None; n])),
        ],
    );
    let r = report_json(&path, &["--lowest", "3"]);
    let listed = |metric: &str| -> (Vec<u64>, bool) {
        let m = r["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == metric)
            .unwrap();
        let rows = m["lowest"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v["row"].as_u64().unwrap())
            .collect();
        (rows, m["lower_is_better"].as_bool().unwrap())
    };
    assert_eq!(listed("nli_contradiction"), (vec![29, 28, 27], true));
    assert_eq!(listed("token_f1"), (vec![0, 1, 2], false));
}

/// `nli_contradiction` is lower-is-better (the metric registry says so): a
/// rise in it is "worse" and trips `--fail-on-regression`; a fall is
/// "better" and passes it. Token F1 beside it keeps higher-is-better.
#[test]
fn a_rise_in_contradiction_is_a_regression() {
    let d = tempfile::tempdir().unwrap();
    let n = 40;
    let ids: Vec<i64> = (0..n).collect();
    let run = |name: &str, contradiction: f32, f1: f32| {
        let path = d.path().join(name);
        write_parquet(
            &path,
            vec![
                ("id", int_ids(&ids)),
                ("token_f1", f32s_col(&vec![Some(f1); n as usize])),
                (
                    "nli_contradiction",
                    f32s_col(
                        &(0..n)
                            .map(|i| Some(contradiction + i as f32 * 0.001))
                            .collect::<Vec<_>>(),
                    ),
                ),
                ("status", s(&vec!["ok"; n as usize])),
                ("error", strs(&vec![None; n as usize])),
            ],
        );
        path
    };
    let calm = run("calm.parquet", 0.1, 0.5);
    let contradicting = run("contradicting.parquet", 0.8, 0.6);
    let json = d.path().join("r.json");
    let report = |cur: &Path, base: &Path| {
        refscore(&[
            "report",
            p(cur),
            "--baseline",
            p(base),
            "--fail-on-regression",
            "nli_contradiction=0.05,token_f1=0.05",
            "--json",
            p(&json),
        ])
    };
    let verdicts = || -> Vec<(String, String)> {
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        r["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| {
                (
                    m["name"].as_str().unwrap().to_string(),
                    m["change"]["verdict"].as_str().unwrap().to_string(),
                )
            })
            .collect()
    };
    // Contradiction rose 0.7: worse, and the gate fails (exit 1).
    let err = fails(&report(&contradicting, &calm), 1);
    assert!(
        err.contains("nli_contradiction") && err.contains("regression"),
        "{err}"
    );
    assert!(!err.contains("token_f1"), "token F1 rose: {err}");
    let got = verdicts();
    assert!(
        got.contains(&("nli_contradiction".into(), "worse".into())),
        "{got:?}"
    );
    assert!(
        got.contains(&("token_f1".into(), "better".into())),
        "{got:?}"
    );
    // The other way round: contradiction fell, better; token F1 fell, the
    // only regression.
    let err = fails(&report(&calm, &contradicting), 1);
    assert!(
        err.contains("token_f1") && !err.contains("nli_contradiction"),
        "{err}"
    );
    let got = verdicts();
    assert!(
        got.contains(&("nli_contradiction".into(), "better".into())),
        "{got:?}"
    );
}

/// `--gold`'s stand-in figures read a lower-is-better score the right way
/// round: labels true exactly where the contradiction is low separate
/// perfectly (AUC 1, not 0), and the best cut-off says so.
#[test]
fn contradiction_stands_in_the_right_way_round() {
    let d = tempfile::tempdir().unwrap();
    let n = 20usize;
    let contradiction: Vec<Option<f32>> = (0..n).map(|i| Some(i as f32 / 20.0)).collect();
    let human: Vec<Option<bool>> = (0..n).map(|i| Some(i < 10)).collect();
    let path = d.path().join("labelled.parquet");
    write_parquet(
        &path,
        vec![
            ("id", int_ids(&(0..n as i64).collect::<Vec<_>>())),
            ("nli_contradiction", f32s_col(&contradiction)),
            (
                "meaning_match",
                Arc::new(arrow::array::BooleanArray::from(human.clone())),
            ),
            ("meaning_match_source", s(&vec!["judge"; n])),
            (
                "human",
                Arc::new(arrow::array::BooleanArray::from(human.clone())),
            ),
            ("status", s(&vec!["ok"; n])),
            ("error", strs(&vec![None; n])),
        ],
    );
    let r = report_json(&path, &["--gold", "meaning_match=human"]);
    let figures = r["calibration"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "meaning_match")
        .unwrap();
    let stand_in = figures["stand_ins"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["metric"] == "nli_contradiction")
        .unwrap();
    assert_eq!(stand_in["separation"]["auc"], 1.0, "{stand_in}");
    assert_eq!(
        stand_in["separation"]["best_threshold"]["agreement"], 1.0,
        "{stand_in}"
    );
    let cut = stand_in["separation"]["best_threshold"]["value"]
        .as_f64()
        .unwrap();
    assert!((0.45..0.5).contains(&cut), "{stand_in}");
    assert_eq!(stand_in["lower_is_better"], true, "{stand_in}");
}

/// A labelled result: 200 rows labelled true of which the judge calls 190
/// true (TPR 95%), 160 labelled false of which it calls 150 false (TNR
/// 93.75%).
fn judged_against_labels(dir: &Path) -> PathBuf {
    let (trues, falses) = (200usize, 160usize);
    let n = trues + falses;
    let human: Vec<Option<bool>> = (0..n).map(|i| Some(i < trues)).collect();
    let verdict: Vec<Option<bool>> = (0..n)
        .map(|i| Some(if i < trues { i >= 10 } else { i < trues + 10 }))
        .collect();
    let path = dir.join("judged.parquet");
    write_parquet(
        &path,
        vec![
            ("id", int_ids(&(0..n as i64).collect::<Vec<_>>())),
            (
                "meaning_match",
                Arc::new(arrow::array::BooleanArray::from(verdict)),
            ),
            ("meaning_match_source", s(&vec!["judge"; n])),
            ("human", Arc::new(arrow::array::BooleanArray::from(human))),
            ("status", s(&vec!["ok"; n])),
            ("error", strs(&vec![None; n])),
        ],
    );
    path
}

/// `--gate` holds a judge to the lower Clopper-Pearson bounds of its TPR and
/// TNR, not the raw shares: TNR 93.75% on 160 rows is proven only to 90.5%
/// at 90%, so `tnr>=0.92` fails (exit 1, the report still written) while
/// `tpr>=0.9` passes; at 99% confidence the TPR bound drops below 0.91. The
/// bounds equal SciPy's `beta.ppf(1 - c, k, n - k + 1)`.
#[test]
fn a_gate_on_tpr_and_tnr_reads_their_lower_bounds() {
    let d = tempfile::tempdir().unwrap();
    let path = judged_against_labels(d.path());
    let json = d.path().join("r.json");
    let run = |extra: &[&str]| {
        let mut args = vec![
            "report",
            p(&path),
            "--gold",
            "meaning_match=human",
            "--json",
            p(&json),
        ];
        args.extend_from_slice(extra);
        let out = refscore(&args);
        let report: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        std::fs::remove_file(&json).unwrap();
        (out, report)
    };
    let (out, r) = run(&["--gate", "tpr>=0.9"]);
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    let g = &r["rate_gates"][0];
    assert_eq!(
        (g["rate"].as_str(), g["labels"].as_u64()),
        (Some("tpr"), Some(200))
    );
    let low = g["lower_bound"].as_f64().unwrap();
    assert!((low - 0.9240102118265292).abs() < 1e-9, "{g}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("gate passed: meaning_match: TPR 95.0%"));

    let html = d.path().join("r.html");
    let (out, r) = run(&["--gate", "meaning_match.tpr>=0.9,tnr>=0.92", "-o", p(&html)]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    let page = std::fs::read_to_string(&html).unwrap();
    assert!(
        page.contains(r#"<div class="gate-failed" data-table="rate-gates">"#),
        "{page}"
    );
    assert!(
        page.contains("lower 90% bound 90.5% &lt; 92.0%"),
        "the failed gate on the page"
    );
    let tnr = &r["rate_gates"][1];
    assert_eq!(
        (tnr["failed"].as_bool(), tnr["labels"].as_u64()),
        (Some(true), Some(160))
    );
    assert!((tnr["lower_bound"].as_f64().unwrap() - 0.9053397710169372).abs() < 1e-9);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("TNR 93.8% on 160 label-false rows") && err.contains("< 92.0%"),
        "{err}"
    );
    assert!(
        !err.contains("TPR"),
        "only the failed gate on stderr: {err}"
    );

    let (out, r) = run(&["--gate", "tpr>=0.91", "--gate-confidence", "0.99"]);
    assert_eq!(out.status.code(), Some(1), "{out:?}");
    assert!(
        (r["rate_gates"][0]["lower_bound"].as_f64().unwrap() - 0.9018180833967022).abs() < 1e-9
    );
}

/// A gate that would check nothing is refused before anything is written:
/// a metric with no labelled verdict (exit 78), a bad term or confidence
/// (exit 64).
#[test]
fn a_gate_that_checks_nothing_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let path = judged_against_labels(d.path());
    let path = p(&path);
    check(
        d.path(),
        &[path, "--gate", "tpr>=0.9"],
        78,
        &["--gate tpr>=0.9", "no labelled verdict", "none"],
    );
    let labelled = [path, "--gold", "meaning_match=human", "--gate"];
    for (gate, code, needles) in [
        (
            &["similarity.tnr>=0.9"][..],
            78,
            &["'similarity'", "labelled verdicts: meaning_match"][..],
        ),
        (&["kappa>=0.9"], 64, &["not a rate"]),
        (
            &["tpr>=0.9", "--gate-confidence", "1"],
            64,
            &["--gate-confidence 1"],
        ),
    ] {
        check(d.path(), &[&labelled[..], gate].concat(), code, needles);
    }
}
