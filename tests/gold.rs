//! `score --gold`: human labels checked before any work, carried into the
//! result, and the judge's agreement with them and its corrected pass rate
//! in the summary, the same as `report` computes from the result, and the
//! same when shards' summaries are merged. (Each figure is checked against
//! scikit-learn, SciPy, statsmodels and ppi-python in
//! tests/python/test_calibration.py.)

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float64Array};
use common::judge_server::{chat, start};
use common::*;

const ROWS: usize = 80;

/// The scripted judge says true where the output starts with "good"; rows
/// whose ordinal is a multiple of 3 are "bad". Even rows are labelled; the
/// label disagrees with the judge on every tenth row.
fn judge_verdict(i: usize) -> bool {
    !i.is_multiple_of(3)
}

fn label(i: usize) -> Option<bool> {
    i.is_multiple_of(2)
        .then(|| judge_verdict(i) ^ i.is_multiple_of(10))
}

/// Two files of 40 rows (so that two shards each get one).
fn input(dir: &Path, labels: ArrayRef) -> PathBuf {
    let p = dir.join("in");
    std::fs::create_dir_all(&p).unwrap();
    for (name, from) in [("a.parquet", 0), ("b.parquet", ROWS / 2)] {
        let rows = from..from + ROWS / 2;
        let refs: Vec<String> = rows.clone().map(|i| format!("answer {i}")).collect();
        let outs: Vec<String> = rows
            .map(|i| format!("{} {i}", if judge_verdict(i) { "good" } else { "bad" }))
            .collect();
        let r: Vec<&str> = refs.iter().map(String::as_str).collect();
        let o: Vec<&str> = outs.iter().map(String::as_str).collect();
        write_parquet(
            &p.join(name),
            vec![
                ("reference", s(&r)),
                ("output", s(&o)),
                ("human", labels.slice(from, ROWS / 2)),
            ],
        );
    }
    p
}

fn labels() -> ArrayRef {
    Arc::new(BooleanArray::from((0..ROWS).map(label).collect::<Vec<_>>()))
}

fn run(url: &str, inp: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec!["--gold", "meaning_match=human"];
    args.extend_from_slice(extra);
    judged(url, inp, out, &args)
}

/// Scores token_f1 and Meaning Match (verdicts only) with the judge at
/// `url`, and `extra` flags: no labels unless `extra` names them.
fn judged(url: &str, inp: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut all = vec![
        "score",
        inp.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--judge-url",
        url,
        "--judge-model",
        "scripted",
        "--metrics",
        "token_f1,meaning_match",
        "--judge-reasons",
        "never",
    ];
    all.extend_from_slice(extra);
    refscore(&all)
}

fn scripted() -> common::judge_server::Server {
    start(|req, _| {
        let verdict = req.candidate().starts_with("good");
        chat(&format!(r#"{{"meaning_match": {verdict}}}"#))
    })
}

#[test]
fn the_summary_holds_the_judges_agreement_and_corrected_rate() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), labels());
    let out = dir.path().join("o.parquet");
    let printed = ok(&run(&server.url, &inp, &out, &[]));
    assert!(
        printed.contains("meaning_match vs labels in 'human': 40 labels"),
        "{printed}"
    );
    assert!(
        printed.contains("corrected for the judge's error"),
        "{printed}"
    );
    // The labels travel into the result.
    let result = read_parquet(&out);
    assert_eq!(
        bools(&result, "human"),
        (0..ROWS).map(label).collect::<Vec<_>>()
    );
    let s = summary(&out);
    let c = &s["calibration"][0];
    assert_eq!(c["metric"], "meaning_match");
    assert_eq!(c["labels"], 40);
    // Counted here from the definitions above.
    let (mut tn, mut fp, mut fn_, mut tp) = (0, 0, 0, 0);
    for i in (0..ROWS).filter(|i| i % 2 == 0) {
        match (label(i).unwrap(), judge_verdict(i)) {
            (false, false) => tn += 1,
            (false, true) => fp += 1,
            (true, false) => fn_ += 1,
            (true, true) => tp += 1,
        }
    }
    let m = &c["verdict"]["confusion"];
    assert_eq!(
        [
            &m["true_negative"],
            &m["false_positive"],
            &m["false_negative"],
            &m["true_positive"]
        ],
        [tn, fp, fn_, tp]
            .map(serde_json::Value::from)
            .iter()
            .collect::<Vec<_>>()[..]
    );
    // Every tenth row (8 of the 40 labelled) disagrees.
    assert_eq!(c["verdict"]["agreement"], (tn + tp) as f64 / 40.0);
    assert_eq!(tn + tp, 32);
    // TPR 21/24 and TNR 11/16 with their one-sided 90% lower bounds:
    // statsmodels 0.15.0 proportion_confint(21, 24, alpha=0.2,
    // method='beta')[0] and the same of 11 in 16. Both rest on fewer than
    // 150 labels, which the printed lines say.
    assert_eq!((tp, fn_, tn, fp), (21, 3, 11, 5));
    let v = &c["verdict"];
    let close = |k: &str, want: f64| (v[k].as_f64().unwrap() - want).abs() < 1e-9;
    assert!(close("sensitivity_low", 0.7424618231614926), "{v}");
    assert!(close("specificity_low", 0.4964900596647858), "{v}");
    assert!(
        printed.contains(
            "TPR 87.5% (lower 90% bound 74.2%, 24 label-true rows), TNR 68.8% (lower bound 49.6%, 16 label-false rows)"
        ) && printed.contains("warning: TPR rests on 24 labels and TNR on 16: below 150 per rate"),
        "{printed}"
    );
    let k = &c["corrected"];
    let raw = (0..ROWS).filter(|i| judge_verdict(*i)).count() as f64 / ROWS as f64;
    assert!((k["raw"].as_f64().unwrap() - raw).abs() < 1e-12, "{k}");
    assert!(k["low"].as_f64().unwrap() < k["estimate"].as_f64().unwrap());
    assert!(k["estimate"].as_f64().unwrap() < k["high"].as_f64().unwrap());
    // token_f1 stands in for the judge beside it.
    assert_eq!(c["stand_ins"][0]["metric"], "token_f1");
    // report finds the labels through the result's footer and agrees.
    let json = dir.path().join("r.json");
    ok(&refscore(&[
        "report",
        out.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--quiet",
    ]));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let mut on_page = r["calibration"].clone();
    for c in on_page.as_array_mut().unwrap() {
        // The page also lists the disagreeing rows: the 8 flipped labels.
        let rows = c.as_object_mut().unwrap().remove("disagreements").unwrap();
        assert_eq!(rows.as_array().unwrap().len(), 8);
        assert_eq!(rows[0]["id"], "0");
    }
    assert_eq!(on_page, s["calibration"]);
}

/// `--gold-confidence C` sets the level of the TPR and TNR lower bounds:
/// the summary, its printed line and `report` (through the result's
/// footer) give them at C; a value outside (0, 1), or the flag without
/// --gold, is a usage error. TPR 21/24 and TNR 11/16 (the run above) at
/// 95%: scipy 1.17.1 beta.ppf(0.05, 21, 4) and beta.ppf(0.05, 11, 6).
#[test]
fn gold_confidence_sets_the_level_of_the_rate_bounds() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), labels());
    let out = dir.path().join("o.parquet");
    let printed = ok(&run(
        &server.url,
        &inp,
        &out,
        &["--gold-confidence", "0.95"],
    ));
    let v = &summary(&out)["calibration"][0]["verdict"];
    let close = |k: &str, want: f64| (v[k].as_f64().unwrap() - want).abs() < 1e-9;
    assert!(close("sensitivity_low", 0.7077268034920106), "{v}");
    assert!(close("specificity_low", 0.4516529191512526), "{v}");
    assert_eq!(v["rates_confidence"], 0.95, "{v}");
    assert!(
        printed.contains(
            "TPR 87.5% (lower 95% bound 70.8%, 24 label-true rows), TNR 68.8% (lower bound 45.2%"
        ),
        "{printed}"
    );
    let json = dir.path().join("r.json");
    ok(&refscore(&[
        "report",
        out.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "--quiet",
    ]));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["calibration"][0]["verdict"], *v);
    // The default stays 0.9.
    ok(&run(&server.url, &inp, &out, &["--overwrite"]));
    assert_eq!(
        summary(&out)["calibration"][0]["verdict"]["rates_confidence"],
        0.9
    );
    for (value, extra) in [("1", true), ("0", true), ("0.9", false)] {
        let err = if extra {
            fails(
                &run(
                    &server.url,
                    &inp,
                    &out,
                    &["--overwrite", "--gold-confidence", value],
                ),
                64,
            )
        } else {
            fails(
                &judged(
                    &server.url,
                    &inp,
                    &out,
                    &["--overwrite", "--gold-confidence", value],
                ),
                64,
            )
        };
        assert!(err.contains("--gold-confidence"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
}

#[test]
fn one_class_labels_and_perfect_agreement_show_no_interval_and_say_why() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    // Every labelled row true, while the judge says true on two rows in three.
    let all_true: ArrayRef = Arc::new(BooleanArray::from(
        (0..ROWS)
            .map(|i| i.is_multiple_of(2).then_some(true))
            .collect::<Vec<_>>(),
    ));
    let inp = input(dir.path(), all_true);
    let out = dir.path().join("o.parquet");
    let printed = ok(&run(&server.url, &inp, &out, &[]));
    assert!(
        printed.contains("kappa 0.000 (no interval: the labels have one class (all true))"),
        "{printed}"
    );
    // statsmodels 0.15.0 proportion_confint(40, 40, method="wilson") =
    // (0.9123783988027134, 1.0).
    assert!(
        printed.contains(
            "corrected for the judge's error 100.0% (no PPI++ interval: the 40 labels are all \
             true, so PPI++'s variance estimate is zero; Wilson 95% of the labels alone \
             [91.2%, 100.0%])"
        ),
        "{printed}"
    );
    let s = summary(&out);
    let c = &s["calibration"][0];
    assert!(c["verdict"]["kappa_low"].is_null(), "{c}");
    assert!(c["verdict"]["kappa_no_interval"].is_string(), "{c}");
    assert!(c["corrected"]["low"].is_null() && c["corrected"]["high"].is_null());
    let w = &c["corrected"]["labels_wilson"];
    assert!(
        (w[0].as_f64().unwrap() - 0.9123783988027134).abs() < 1e-12,
        "{w}"
    );
    // The page says the same.
    let page = dir.path().join("r.html");
    ok(&refscore(&[
        "report",
        out.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
        "--quiet",
    ]));
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("none: the labels have one class (all true)"),
        "{html}"
    );
    assert!(html.contains("Wilson 95% of the labels alone [91.2%, 100.0%]"));

    // Labels that agree with the judge on every row: kappa 1, no interval.
    let dir = tempfile::tempdir().unwrap();
    let agreeing: ArrayRef = Arc::new(BooleanArray::from(
        (0..ROWS)
            .map(|i| i.is_multiple_of(2).then(|| judge_verdict(i)))
            .collect::<Vec<_>>(),
    ));
    let inp = input(dir.path(), agreeing);
    let out = dir.path().join("o.parquet");
    let printed = ok(&run(&server.url, &inp, &out, &[]));
    assert!(
        printed.contains(
            "kappa 1.000 (no interval: verdicts and labels agree on every row, so the variance \
             estimate is zero)"
        ),
        "{printed}"
    );
}

#[test]
fn shards_merge_into_the_unsharded_figures_exactly() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), labels());
    let whole = dir.path().join("whole.parquet");
    ok(&run(&server.url, &inp, &whole, &[]));
    let mut summaries = Vec::new();
    for k in [2, 1] {
        let out = dir.path().join(format!("s{k}.parquet"));
        let shard = format!("{k}/2");
        ok(&run(
            &server.url,
            &inp,
            &out,
            &["--shard", &shard, "--batch-size", "16"],
        ));
        summaries.push(format!("{}.summary.json", out.display()));
    }
    let merged = dir.path().join("merged.json");
    let mut args = vec!["merge-summaries", "-o", merged.to_str().unwrap(), "--quiet"];
    args.extend(summaries.iter().map(String::as_str));
    ok(&refscore(&args));
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let whole = summary(&whole);
    assert_eq!(merged["calibration"], whole["calibration"]);
    assert_eq!(merged["gold_state"], whole["gold_state"]);
}

#[test]
fn bad_labels_stop_the_run_before_any_call() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.parquet");
    // Numbers where a verdict needs booleans.
    let numbers: ArrayRef = Arc::new(Float64Array::from(vec![Some(1.0); ROWS]));
    let inp = input(dir.path(), numbers);
    let err = fails(&run(&server.url, &inp, &out, &[]), 65);
    assert!(
        err.contains("column 'human'") && err.contains("must be boolean"),
        "{err}"
    );
    // No labels at all.
    let none: ArrayRef = Arc::new(BooleanArray::from(vec![None::<bool>; ROWS]));
    let inp = input(dir.path(), none);
    let err = fails(&run(&server.url, &inp, &out, &[]), 78);
    assert!(err.contains("holds no labels"), "{err}");
    // A metric the run does not compute.
    let inp = input(dir.path(), labels());
    let err = fails(
        &run(&server.url, &inp, &out, &["--gold", "similarity=human"]),
        78,
    );
    assert!(err.contains("no metric 'similarity'"), "{err}");
    // A score's label off its 0-1 scale (a 0-10 score given as is).
    let tens: ArrayRef = Arc::new(Float64Array::from(
        (0..ROWS).map(|i| Some((i % 11) as f64)).collect::<Vec<_>>(),
    ));
    let inp = input(dir.path(), tens);
    let (i, o) = (inp.to_str().unwrap(), out.to_str().unwrap());
    let err = fails(
        &refscore(&[
            "score",
            i,
            "-o",
            o,
            "--judge-url",
            &server.url,
            "--metrics",
            "similarity",
            "--gold",
            "similarity=human",
        ]),
        65,
    );
    assert!(
        err.contains("column 'human', row 2") && err.contains("0-1 scale"),
        "{err}"
    );
    let inp = input(dir.path(), labels());
    // A column the input lacks.
    let err = fails(
        &run(&server.url, &inp, &out, &["--gold", "cosine=nope"]),
        65,
    );
    assert!(err.contains("nope"), "{err}");
    assert_eq!(
        server.requests().len(),
        0,
        "no judge call before the labels are checked"
    );
    assert!(!out.exists());
}

#[test]
fn a_band_on_token_f1_decides_outside_it_and_the_summary_measures_it() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), labels());
    let out = dir.path().join("o.parquet");
    // token_f1 of "good i" / "bad i" against "answer i" is 0.5 on every row:
    // a band above it decides every row false, one below it true.
    ok(&run(
        &server.url,
        &inp,
        &out,
        &["--judge-band", "token_f1:0.6..0.9"],
    ));
    assert_eq!(server.requests().len(), 0, "the band decided every row");
    let result = read_parquet(&out);
    assert!(texts(&result, "meaning_match_source")
        .iter()
        .all(|s| s.as_deref() == Some("band:token_f1")));
    assert!(bools(&result, "meaning_match")
        .iter()
        .all(|v| *v == Some(false)));
    let c = &summary(&out)["calibration"][0];
    // The band's own error on the 40 labelled rows it decided: the labels
    // that say true.
    let trues = (0..ROWS).filter(|i| label(*i) == Some(true)).count() as f64;
    assert_eq!(c["band"]["n"], 40);
    assert_eq!(c["band"]["agreement"], 1.0 - trues / 40.0);
    // Only embedding and lexical scores can carry a band.
    let err = fails(
        &run(
            &server.url,
            &inp,
            &out,
            &["--judge-band", "meaning_match_p:0.1..0.9"],
        ),
        78,
    );
    assert!(
        err.contains("lexical, embedding or cross-encoder score")
            && err.contains("nli_equivalence"),
        "{err}"
    );
}

#[test]
fn gold_mistakes_are_named_as_gold_not_keep() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("o.parquet");
    let inp = input(dir.path(), labels());
    let o = out.to_str().unwrap();
    let with = |extra: &[&str]| judged(&server.url, &inp, &out, extra);
    // A label column the input lacks.
    let err = fails(&with(&["--gold", "meaning_match=nope"]), 65);
    assert!(
        err.contains("--gold meaning_match=nope: column 'nope' not found")
            && !err.contains("--keep"),
        "{err}"
    );
    // A label column named like a result column.
    let status_dir = dir.path().join("status");
    std::fs::create_dir(&status_dir).unwrap();
    let p = status_dir.join("in.parquet");
    write_parquet(
        &p,
        vec![
            ("reference", s(&["a"])),
            ("output", s(&["a"])),
            ("status", labels().slice(0, 1)),
        ],
    );
    let err = fails(
        &refscore(&[
            "score",
            p.to_str().unwrap(),
            "-o",
            o,
            "--metrics",
            "token_f1",
            "--gold",
            "token_f1=status",
        ]),
        78,
    );
    assert!(
        err.contains("--gold token_f1=status: the label column 'status'")
            && !err.contains("--keep"),
        "{err}"
    );
    // A config file's [gold] entry that is no column name: its file and line.
    let config = dir.path().join("refscore.toml");
    std::fs::write(
        &config,
        "metrics = [\"token_f1\"]\n\n[gold]\ntoken_f1 = true\n",
    )
    .unwrap();
    let err = fails(&with(&["--config", config.to_str().unwrap()]), 78);
    assert!(
        err.contains("refscore.toml:4")
            && err.contains("[gold] token_f1")
            && err.contains("string"),
        "{err}"
    );
    // ... and one naming a column the input lacks.
    std::fs::write(&config, "[gold]\nmeaning_match = \"nope\"\n").unwrap();
    let err = fails(&with(&["--config", config.to_str().unwrap()]), 65);
    assert!(
        err.contains("refscore.toml:2") && err.contains("'nope' not found"),
        "{err}"
    );
    assert_eq!(server.requests().len(), 0);
    assert!(!out.exists());
}

#[test]
fn gold_flags_add_to_the_config_files_gold_table() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), labels());
    let config = dir.path().join("refscore.toml");
    std::fs::write(&config, "[gold]\nmeaning_match = \"human\"\n").unwrap();
    let out = dir.path().join("o.parquet");
    ok(&judged(
        &server.url,
        &inp,
        &out,
        &[
            "--config",
            config.to_str().unwrap(),
            "--gold",
            "token_f1=human",
        ],
    ));
    let calibration = &summary(&out)["calibration"];
    let metrics: Vec<&str> = calibration
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["metric"].as_str().unwrap())
        .collect();
    assert_eq!(metrics, ["meaning_match", "token_f1"], "{calibration}");
}

#[test]
fn resuming_with_gold_added_names_gold() {
    // The judge fails every other row: the run stops with parts committed.
    let flaky = start(|req, _| {
        let n: usize = req.candidate().rsplit(' ').next().unwrap().parse().unwrap();
        if n >= ROWS / 2 {
            common::judge_server::Reply::Status(503, vec![], "down".into())
        } else {
            chat(&format!(
                r#"{{"meaning_match": {}}}"#,
                req.candidate().starts_with("good")
            ))
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), labels());
    let out = dir.path().join("o.parquet");
    fails(
        &judged(&flaky.url, &inp, &out, &["--judge-retries", "0"]),
        75,
    );
    let resumed = [
        "--judge-retries",
        "0",
        "--resume",
        "--gold",
        "meaning_match=human",
    ];
    let err = fails(&judged(&flaky.url, &inp, &out, &resumed), 78);
    assert!(err.contains("the setting 'gold' differs"), "{err}");
}

#[test]
fn a_label_off_a_one_to_five_rubrics_scale_gets_that_rubrics_hint() {
    let server = scripted();
    let dir = tempfile::tempdir().unwrap();
    let rubric = dir.path().join("rubric.toml");
    std::fs::write(
        &rubric,
        "[judge.metric.helpful]\nanswer = \"score\"\nscale = [1, 5]\ninstructions = \"Rate how helpful the answer is.\"\nprompt = \"{{ output }}\"\n",
    )
    .unwrap();
    let fives: ArrayRef = Arc::new(Float64Array::from(
        (0..ROWS)
            .map(|i| Some((1 + i % 5) as f64))
            .collect::<Vec<_>>(),
    ));
    let inp = input(dir.path(), fives);
    let out = dir.path().join("o.parquet");
    let err = fails(
        &refscore(&[
            "score",
            inp.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--judge-url",
            &server.url,
            "--judge-metrics",
            rubric.to_str().unwrap(),
            "--metrics",
            "helpful",
            "--gold",
            "helpful=human",
        ]),
        65,
    );
    assert!(
        err.contains("0-1 scale") && err.contains("(s - 1)/4") && !err.contains("s/10"),
        "{err}"
    );
}
