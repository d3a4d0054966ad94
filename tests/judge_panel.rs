//! A panel of judges against scripted local servers: escalation asks the
//! second judge only where the first was uncertain; a jury takes the
//! majority, with an agreement column and Fleiss' kappa; a judge that is
//! down leaves the run resumable (75), and the resumed run pays neither
//! judge twice.

mod common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::judge_server::{chat_with_logprobs, start, Reply};
use common::*;

/// A Meaning Match answer cut after its verdict, with P(true) = `p`.
fn verdict(p: f64) -> Reply {
    let word = if p >= 0.5 { " true" } else { " false" };
    chat_with_logprobs(
        &format!("{{\"meaning_match\":{word}"),
        &[
            ("{\"", &[("{\"", 1.0)]),
            ("meaning", &[("meaning", 1.0)]),
            ("_match", &[("_match", 1.0)]),
            ("\":", &[("\":", 1.0)]),
            (word, &[(" false", 1.0 - p), (" true", p)]),
        ],
    )
}

/// 30 rows: outputs "sure-yes i", "sure-no i" and "unsure i" in turn.
fn input(dir: &Path) -> PathBuf {
    input_of(dir, "in.parquet", ["sure-yes", "sure-no", "unsure"])
}

/// [`input`] with other words before each kind's ordinal.
fn input_of(dir: &Path, name: &str, kinds: [&str; 3]) -> PathBuf {
    let p = dir.join(name);
    let refs: Vec<String> = (0..30).map(|i| format!("answer {i}")).collect();
    let outs: Vec<String> = (0..30).map(|i| format!("{} {i}", kinds[i % 3])).collect();
    let r: Vec<&str> = refs.iter().map(String::as_str).collect();
    let o: Vec<&str> = outs.iter().map(String::as_str).collect();
    // Human labels: every unsure answer is in fact right.
    let human: arrow::array::ArrayRef = Arc::new(arrow::array::BooleanArray::from(
        (0..30).map(|i| Some(i % 3 != 1)).collect::<Vec<_>>(),
    ));
    write_parquet(
        &p,
        vec![("reference", s(&r)), ("output", s(&o)), ("human", human)],
    );
    p
}

/// The small judge: sure where the output says so, P(true) 0.5 elsewhere.
fn small() -> common::judge_server::Server {
    start(|req, _| {
        let c = req.candidate();
        verdict(if c.starts_with("sure-yes") {
            0.95
        } else if c.starts_with("sure-no") {
            0.05
        } else {
            0.5
        })
    })
}

fn panel_args<'a>(judges: &'a [(&'a str, &'a str)], mode: &'a str) -> Vec<&'a str> {
    let mut a = vec![
        "--metrics",
        "meaning_match",
        "--judge-reasons",
        "never",
        "--judge-panel",
        mode,
    ];
    for (url, model) in judges {
        a.extend(["--judge-url", url, "--judge-model", model]);
    }
    a.extend(["--judge-retries", "0", "--judge-timeout", "2"]);
    a
}

#[test]
fn escalation_asks_the_big_judge_only_where_the_small_one_was_unsure() {
    let small = small();
    let big = start(|_, _| verdict(0.9));
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let out = dir.path().join("o.parquet");
    let judges = [(small.url.as_str(), "small"), (big.url.as_str(), "big")];
    let mut args = panel_args(&judges, "escalate");
    args.extend(["--gold", "meaning_match=human"]);
    ok(&score(&inp, &out, &args));
    assert_eq!(small.requests().len(), 30);
    assert_eq!(big.requests().len(), 10, "only the unsure rows");
    assert!(big
        .requests()
        .iter()
        .all(|r| r.candidate().starts_with("unsure")));
    let b = read_parquet(&out);
    let sources = texts(&b, "meaning_match_source");
    let verdicts = bools(&b, "meaning_match");
    for i in 0..30 {
        let (source, v) = match i % 3 {
            0 => ("judge:small", true),
            1 => ("judge:small", false),
            _ => ("judge:big", true),
        };
        assert_eq!(
            (sources[i].as_deref(), verdicts[i]),
            (Some(source), Some(v)),
            "row {i}"
        );
    }
    // Each judge's own verdicts, for calibration.
    assert_eq!(bools(&b, "meaning_match__small")[2], Some(true)); // P 0.5 >= threshold
    assert_eq!(f32s(&b, "meaning_match__small_p")[2], Some(0.5));
    assert_eq!(bools(&b, "meaning_match__big")[0], None);
    assert_eq!(bools(&b, "meaning_match__big")[2], Some(true));
    let j = &summary(&out)["judge"];
    assert_eq!(j["calls"], 40);
    assert_eq!(j["panel"]["mode"], "escalate");
    assert_eq!(j["panel"]["judges"][0]["values_asked"], 30);
    assert_eq!(j["panel"]["judges"][1]["values_asked"], 10);
    assert_eq!(j["panel"]["judges"][1]["values_decided"], 10);
    assert_eq!(j["panel"]["judges"][0]["values_decided"], 20);
    // Calibration for the panel and for each judge over the rows it answered.
    let c = &summary(&out)["calibration"];
    let labels: Vec<(&str, u64, f64)> = c
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            (
                c["metric"].as_str().unwrap(),
                c["labels"].as_u64().unwrap(),
                c["verdict"]["agreement"].as_f64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        labels,
        [
            ("meaning_match", 30, 1.0),
            ("meaning_match__small", 30, 1.0),
            ("meaning_match__big", 10, 1.0)
        ]
    );
}

#[test]
fn a_jury_takes_the_majority_with_its_agreement_and_fleiss_kappa() {
    let yes = start(|_, _| verdict(0.9));
    let no = start(|_, _| verdict(0.1));
    // True for rows whose ordinal is even.
    let split = start(|req, _| {
        let i: usize = req.candidate().rsplit(' ').next().unwrap().parse().unwrap();
        verdict(if i.is_multiple_of(2) { 0.8 } else { 0.2 })
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let out = dir.path().join("o.parquet");
    let judges = [
        (yes.url.as_str(), "yes"),
        (no.url.as_str(), "no"),
        (split.url.as_str(), "split"),
    ];
    ok(&score(&inp, &out, &panel_args(&judges, "jury")));
    let b = read_parquet(&out);
    let verdicts = bools(&b, "meaning_match");
    let agreement = f32s(&b, "meaning_match_agreement");
    for i in 0..30 {
        assert_eq!(verdicts[i], Some(i.is_multiple_of(2)), "row {i}");
        assert!((agreement[i].unwrap() - 2.0 / 3.0).abs() < 1e-6);
    }
    assert!(texts(&b, "meaning_match_source")
        .iter()
        .all(|s| s.as_deref() == Some("jury")));
    // P(true) is the jurors' mean.
    assert!((f32s(&b, "meaning_match_p")[0].unwrap() - (0.9 + 0.1 + 0.8) / 3.0).abs() < 1e-5);
    // Every row splits 2-1 and half the votes are true: Fleiss' kappa is
    // (1/3 - 1/2) / (1 - 1/2) = -1/3.
    let a = &summary(&out)["judge"]["panel"]["agreement"]["meaning_match"];
    assert_eq!(a["rows"], 30);
    assert!(
        (a["fleiss_kappa"].as_f64().unwrap() + 1.0 / 3.0).abs() < 1e-12,
        "{a}"
    );
}

#[test]
fn a_tied_jury_fails_the_value_and_says_so() {
    let yes = start(|_, _| verdict(0.9));
    let no = start(|_, _| verdict(0.1));
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let out = dir.path().join("o.parquet");
    let judges = [(yes.url.as_str(), "yes"), (no.url.as_str(), "no")];
    ok(&score(&inp, &out, &panel_args(&judges, "jury")));
    let b = read_parquet(&out);
    assert!(bools(&b, "meaning_match").iter().all(Option::is_none));
    assert!(texts(&b, "status")
        .iter()
        .all(|s| s.as_deref() == Some("partial")));
    let errors = texts(&b, "error");
    assert!(
        errors[0]
            .as_deref()
            .unwrap()
            .contains("the jury tied (1 true, 1 false)"),
        "{errors:?}"
    );
    assert_eq!(summary(&out)["judge"]["panel"]["ties"], 30);
}

#[test]
fn a_judge_down_leaves_the_run_resumable_and_nothing_is_paid_twice() {
    let small = small();
    let up = Arc::new(AtomicBool::new(false));
    let flag = Arc::clone(&up);
    let big = start(move |_, _| {
        if flag.load(Ordering::SeqCst) {
            verdict(0.9)
        } else {
            Reply::Status(503, vec![], "down".into())
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let out = dir.path().join("o.parquet");
    let judges = [(small.url.as_str(), "small"), (big.url.as_str(), "big")];
    let args = panel_args(&judges, "escalate");
    let err = fails(&score(&inp, &out, &args), 75);
    assert!(err.contains("--resume"), "{err}");
    assert_eq!(small.requests().len(), 30);
    up.store(true, Ordering::SeqCst);
    let mut again = args.clone();
    again.push("--resume");
    ok(&score(&inp, &out, &again));
    assert_eq!(
        small.requests().len(),
        30,
        "the small judge's answers come from its journal"
    );
    let b = read_parquet(&out);
    assert!(texts(&b, "status")
        .iter()
        .all(|s| s.as_deref() == Some("ok")));
    assert_eq!(bools(&b, "meaning_match")[2], Some(true));
    assert_eq!(
        texts(&b, "meaning_match_source")[2].as_deref(),
        Some("judge:big")
    );
}

#[test]
fn a_panel_needs_its_mode_and_a_model_per_judge() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let out = dir.path().join("o.parquet");
    let u = "http://127.0.0.1:9/v1";
    let two = [
        "--metrics",
        "meaning_match",
        "--judge-url",
        u,
        "--judge-url",
        u,
    ];
    let err = fails(&score(&inp, &out, &two), 78);
    assert!(err.contains("--judge-panel escalate or jury"), "{err}");
    let mut one_model = two.to_vec();
    one_model.extend(["--judge-panel", "jury", "--judge-model", "a"]);
    let err = fails(&score(&inp, &out, &one_model), 78);
    assert!(err.contains("needs as many --judge-model"), "{err}");
    let err = fails(
        &score(
            &inp,
            &out,
            &[
                "--metrics",
                "meaning_match",
                "--judge-url",
                u,
                "--judge-panel",
                "jury",
            ],
        ),
        78,
    );
    assert!(err.contains("need a second --judge-url"), "{err}");
}

#[test]
fn a_config_files_judge_panel_table_is_the_panels_flags() {
    let small = small();
    let big = start(|_, _| verdict(0.9));
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let config = dir.path().join("refscore.toml");
    std::fs::write(
        &config,
        format!(
            "metrics = [\"meaning_match\"]\njudge_reasons = \"never\"\n\n[judge.panel]\nmode = \"escalate\"\nescalate_band = \"0.4..0.6\"\n\n[[judge.panel.judge]]\nurl = \"{}\"\nmodel = \"small\"\n\n[[judge.panel.judge]]\nurl = \"{}\"\nmodel = \"big\"\n",
            small.url, big.url
        ),
    )
    .unwrap();
    let by_file = dir.path().join("file.parquet");
    ok(&score(
        &inp,
        &by_file,
        &["--config", config.to_str().unwrap()],
    ));
    let by_flags = dir.path().join("flags.parquet");
    let judges = [(small.url.as_str(), "small"), (big.url.as_str(), "big")];
    let mut args = panel_args(&judges, "escalate");
    args.extend(["--judge-escalate-band", "0.4..0.6"]);
    ok(&score(&inp, &by_flags, &args));
    let (a, b) = (read_parquet(&by_file), read_parquet(&by_flags));
    assert_eq!(
        texts(&a, "meaning_match_source"),
        texts(&b, "meaning_match_source")
    );
    assert_eq!(
        bools(&a, "meaning_match__big"),
        bools(&b, "meaning_match__big")
    );
    assert_eq!(
        summary(&by_file)["judge"]["panel"]["escalate_band"],
        "0.4..0.6"
    );
    // Judges named twice are refused, with the file's line.
    std::fs::write(
        &config,
        format!(
            "judge_url = \"{}\"\n[judge.panel]\nmode = \"jury\"\n",
            small.url
        ),
    )
    .unwrap();
    let err = fails(
        &score(
            &inp,
            &by_file,
            &["--config", config.to_str().unwrap(), "--overwrite"],
        ),
        78,
    );
    assert!(
        err.contains("name the judges one way") && err.contains("refscore.toml:2"),
        "{err}"
    );
    // A judge on the command line does not silently stand for the file's
    // whole panel.
    std::fs::write(
        &config,
        format!(
            "metrics = [\"meaning_match\"]\n[judge.panel]\nmode = \"jury\"\n[[judge.panel.judge]]\nurl = \"{}\"\nmodel = \"a\"\n[[judge.panel.judge]]\nurl = \"{}\"\nmodel = \"b\"\n",
            small.url, big.url
        ),
    )
    .unwrap();
    let cli = dir.path().join("cli.parquet");
    for (flag, value) in [
        ("--judge-url", big.url.as_str()),
        ("--judge-model", "other"),
    ] {
        let args = ["--config", config.to_str().unwrap(), flag, value];
        let err = fails(&score(&inp, &cli, &args), 78);
        assert!(
            err.contains("[judge.panel]") && err.contains(flag) && err.contains("refscore.toml:2"),
            "{err}"
        );
        assert!(!cli.exists());
    }
}

#[test]
fn an_escalating_judge_that_sends_no_probabilities_is_named() {
    // The small judge answers without token probabilities: its verdicts
    // have no P(true) and none can be passed on.
    let small = start(|req, _| {
        let right = req.candidate().starts_with("sure-yes");
        common::judge_server::chat(&format!("{{\"meaning_match\": {right}"))
    });
    let big = start(|_, _| verdict(0.9));
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let out = dir.path().join("o.parquet");
    let judges = [(small.url.as_str(), "small"), (big.url.as_str(), "big")];
    let mut args = vec!["score", inp.to_str().unwrap(), "-o", out.to_str().unwrap()];
    args.extend(panel_args(&judges, "escalate"));
    let o = refscore(&args);
    ok(&o);
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains(
            "refscore: warning: judge small sent no token probabilities for 30 of 30 replies"
        ) && err.contains("judge big"),
        "{err}"
    );
    assert!(big.requests().is_empty());
}

/// A judge for the reasons tests: its verdict for a candidate from
/// `p_of`, cut after the verdict; asked in full (for a reason), the whole
/// answer with a reason naming the judge.
fn reasoning_judge(name: &'static str, p_of: fn(&str) -> f64) -> common::judge_server::Server {
    start(move |req, _| {
        let p = p_of(req.candidate());
        if req.body["max_tokens"] == 10 {
            verdict(p)
        } else {
            let v = p >= 0.5;
            common::judge_server::chat(&format!(
                r#"{{"meaning_match": {v}, "reason": "by {name}"}}"#
            ))
        }
    })
}

/// Requests a server got for a reason (the whole question).
fn reason_calls(server: &common::judge_server::Server) -> usize {
    server
        .requests()
        .iter()
        .filter(|r| r.body["max_tokens"] != 10)
        .count()
}

#[test]
fn a_panel_asks_each_failing_values_reason_once_of_the_judge_that_decided() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let reasons_args = |judges: &[(&str, &str)], mode: &str| -> Vec<String> {
        let mut a: Vec<String> = panel_args(judges, mode)
            .iter()
            .map(|s| s.to_string())
            .collect();
        let at = a.iter().position(|s| s == "never").unwrap();
        a[at] = "failures".into();
        a
    };

    // Escalation: the small judge is unsure and says false on the unsure
    // rows (P 0.3); the big one passes the even ones and fails the odd.
    let small = reasoning_judge("small", |c| {
        if c.starts_with("sure-yes") {
            0.95
        } else if c.starts_with("sure-no") {
            0.05
        } else {
            0.3
        }
    });
    let big = reasoning_judge("big", |c| {
        let i: usize = c.rsplit(' ').next().unwrap().parse().unwrap();
        if i.is_multiple_of(2) {
            0.9
        } else {
            0.1
        }
    });
    let out = dir.path().join("escalate.parquet");
    let judges = [(small.url.as_str(), "small"), (big.url.as_str(), "big")];
    let args = reasons_args(&judges, "escalate");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&score(&inp, &out, &args));
    // Ten sure-no rows fail by the small judge; of the ten unsure rows the
    // big judge fails the five odd ones. No reason for an escalated row is
    // asked of the small judge.
    assert_eq!(reason_calls(&small), 10);
    assert_eq!(reason_calls(&big), 5);
    let b = read_parquet(&out);
    let (verdicts, reasons) = (
        bools(&b, "meaning_match"),
        texts(&b, "meaning_match_reason"),
    );
    for i in 0..30 {
        let want = match (i % 3, i % 2) {
            (0, _) => None,
            (1, _) => Some("by small"),
            (_, 0) => None,
            _ => Some("by big"),
        };
        assert_eq!(reasons[i].as_deref(), want, "row {i}");
        assert_eq!(verdicts[i], Some(want.is_none()), "row {i}");
    }
    assert_eq!(summary(&out)["judge"]["reasons_asked"], 15);

    // A jury of three: sure-yes rows pass by all; sure-no rows fail by A
    // and B; unsure rows pass by B and C over A. Only the sure-no rows'
    // reasons are asked, each once, of A (the first juror in the majority).
    let a = reasoning_judge("a", |c| if c.starts_with("sure-yes") { 0.9 } else { 0.1 });
    let b_ = reasoning_judge("b", |c| if c.starts_with("sure-no") { 0.1 } else { 0.9 });
    let c_ = reasoning_judge("c", |_| 0.9);
    let out = dir.path().join("jury.parquet");
    let judges = [
        (a.url.as_str(), "a"),
        (b_.url.as_str(), "b"),
        (c_.url.as_str(), "c"),
    ];
    let args = reasons_args(&judges, "jury");
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    ok(&score(&inp, &out, &args));
    assert_eq!(
        (reason_calls(&a), reason_calls(&b_), reason_calls(&c_)),
        (10, 0, 0)
    );
    let b = read_parquet(&out);
    let reasons = texts(&b, "meaning_match_reason");
    for i in 0..30 {
        let want = (i % 3 == 1).then_some("by a");
        assert_eq!(reasons[i].as_deref(), want, "row {i}");
    }
}

#[test]
fn a_panel_whose_judge_is_down_at_the_start_leaves_nothing() {
    let small = small();
    // Down from the start: the probe itself gets a 503.
    let big = common::judge_server::start_all(|_, _| Reply::Status(503, vec![], "down".into()));
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let out = dir.path().join("o.parquet");
    let judges = [(small.url.as_str(), "small"), (big.url.as_str(), "big")];
    let args = panel_args(&judges, "escalate");
    let before = listing(dir.path());
    for _ in 0..2 {
        // The identical re-run fails the same way, not as an interrupted run.
        let err = fails(&score(&inp, &out, &args), 75);
        assert!(err.contains("503"), "{err}");
        assert_eq!(
            listing(dir.path()),
            before,
            "nothing committed, nothing left"
        );
    }
    assert!(small.requests().is_empty(), "no row was judged");
}

#[test]
fn calibrate_band_counts_a_panels_calls_by_the_judges_that_answered() {
    // token_f1 against "answer i" is 0.5 on the sure rows and 0.8 on the
    // unsure ones, which are all labelled true: the band decides the unsure
    // rows, and each of them cost two calls (the small judge, then the big
    // one).
    let small = small();
    let big = start(|_, _| verdict(0.9));
    let dir = tempfile::tempdir().unwrap();
    let inp = input_of(
        dir.path(),
        "in.parquet",
        ["sure-yes", "sure-no", "unsure answer"],
    );
    // Scores the rows with `judges` deciding as `mode`, then fits the band
    // on token_f1: what calibrate-band printed and wrote.
    let fitted = |judges: &[(&str, &str)], mode: &str| -> (String, serde_json::Value) {
        let mut args = panel_args(judges, mode);
        args[1] = "meaning_match,token_f1";
        args.extend(["--gold", "meaning_match=human"]);
        let out = dir.path().join(format!("{mode}.parquet"));
        ok(&score(&inp, &out, &args));
        let json = dir.path().join(format!("{mode}.band.json"));
        let printed = ok(&refscore(&[
            "calibrate-band",
            out.to_str().unwrap(),
            "--by",
            "token_f1",
            "--json",
            json.to_str().unwrap(),
        ]));
        let text = std::fs::read_to_string(&json).unwrap();
        (printed, serde_json::from_str(&text).unwrap())
    };
    let (printed, band) = fitted(
        &[(small.url.as_str(), "small"), (big.url.as_str(), "big")],
        "escalate",
    );
    assert_eq!(band["rows"], 30);
    assert_eq!(band["rows_inside"], 20, "{band}");
    assert_eq!(band["calls_saved"], 20, "{band}");
    assert!(
        printed.contains("judge calls saved at this result's volume: 20"),
        "{printed}"
    );

    // A jury of three: every juror answered each row.
    let (a, b, c) = (
        start(|_, _| verdict(0.1)),
        start(|_, _| verdict(0.9)),
        start(|_, _| verdict(0.9)),
    );
    let (_, band) = fitted(
        &[
            (a.url.as_str(), "a"),
            (b.url.as_str(), "b"),
            (c.url.as_str(), "c"),
        ],
        "jury",
    );
    assert_eq!(band["calls_saved"], 30, "{band}");
}

#[test]
fn a_jurys_rules_and_tiers_run_once_and_every_juror_holds_what_they_settled() {
    // An empty output (a rule: false), the reference's own answer (a rule:
    // true), an output sharing no word with it (the token_f1 band: false)
    // and one sharing some (asked of every juror).
    let dir = tempfile::tempdir().unwrap();
    let inp = dir.path().join("in.parquet");
    let outs = ["", "Red apple pie.", "blue sky", "red apple tart"];
    write_parquet(
        &inp,
        vec![
            ("reference", s(&["red apple pie"; 4])),
            ("output", s(&outs)),
        ],
    );
    let servers = [
        start(|_, _| verdict(0.9)),
        start(|_, _| verdict(0.1)),
        start(|_, _| verdict(0.8)),
    ];
    let judges: Vec<(&str, &str)> = servers
        .iter()
        .zip(["a", "b", "c"])
        .map(|(s, name)| (s.url.as_str(), name))
        .collect();
    let mut args = panel_args(&judges, "jury");
    args[1] = "meaning_match,token_f1";
    args.extend(["--judge-band", "token_f1:0.1..0.9"]);
    let out = dir.path().join("o.parquet");
    ok(&score(&inp, &out, &args));
    let b = read_parquet(&out);
    let sources: Vec<Option<String>> = ["rule", "rule", "band:token_f1", "jury"]
        .iter()
        .map(|s| Some(s.to_string()))
        .collect();
    assert_eq!(texts(&b, "meaning_match_source"), sources);
    let settled = [Some(false), Some(true), Some(false)];
    assert_eq!(
        bools(&b, "meaning_match"),
        [settled.as_slice(), &[Some(true)]].concat()
    );
    // What the shared steps settled is every juror's value.
    for (name, server) in ["a", "b", "c"].iter().zip(&servers) {
        let column = bools(&b, &format!("meaning_match__{name}"));
        assert_eq!(column[..3], settled, "juror {name}");
        assert_eq!(
            server.requests().len(),
            1,
            "juror {name} is asked the open row only"
        );
    }
    // And every juror's report counts them, as the first juror's does.
    let panel = &summary(&out)["judge"]["panel"];
    for j in panel["judges"].as_array().unwrap() {
        assert_eq!(j["values_asked"], 4, "{j}");
        assert_eq!(j["report"]["rows_requested"], 4, "{j}");
        assert_eq!(j["report"]["decided_by_rule"], 2, "{j}");
        assert_eq!(j["report"]["decided_by_band"], 1, "{j}");
        assert_eq!(j["report"]["tiers"][0]["decided"], 1, "{j}");
    }
}
