//! Judge metrics against a scripted local server: rules before calls, the
//! requests we send, retries on transient failures, explicit row errors on
//! permanent ones, the response-format fallback, the cache, per-row
//! selection and the fact ratio computed by our code.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arrow::array::{Array, ArrayRef, AsArray, BooleanArray, StringArray};
use arrow::datatypes::UInt32Type;
use common::judge_server::{chat, start, start_all, Reply};
use common::*;

fn input(dir: &Path, rows: &[(&str, Option<&str>, Option<&str>)]) -> std::path::PathBuf {
    let p = dir.join("in.parquet");
    let q: Vec<&str> = rows.iter().map(|r| r.0).collect();
    let r: Vec<Option<&str>> = rows.iter().map(|r| r.1).collect();
    let o: Vec<Option<&str>> = rows.iter().map(|r| r.2).collect();
    write_parquet(
        &p,
        vec![
            ("question", s(&q)),
            ("reference", strs(&r)),
            ("output", strs(&o)),
        ],
    );
    p
}

fn judge_args<'a>(url: &'a str, metrics: &'a str) -> Vec<&'a str> {
    vec![
        "--judge-url",
        url,
        "--judge-model",
        "scripted",
        "--metrics",
        metrics,
        "--judge-timeout",
        "2",
        // One call per judged metric, its reason included: these tests count
        // calls and read reasons (the verdict-first modes have their own
        // tests in the judge crate and in judge_real.rs).
        "--judge-reasons",
        "always",
    ]
}

fn mm(verdict: bool) -> Reply {
    chat(&format!(
        r#"{{"meaning_match": {verdict}, "reason": "scripted"}}"#
    ))
}

#[test]
fn rules_decide_first_and_only_the_rest_is_judged() {
    let server = start(|req, _| match req.kind() {
        "meaning_match" => mm(false),
        _ => chat(r#"{"score": 3, "rationale": "Little overlap."}"#),
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(
        dir.path(),
        &[
            ("Capital?", Some("Paris"), Some("paris.")),
            ("Capital?", Some("Paris"), Some("  ")),
            ("Capital?", Some("Paris"), Some("Lyon")),
            ("Capital?", None, Some("Lyon")),
        ],
    );
    let out = dir.path().join("o.parquet");
    let secret = "sk-test-secret-123";
    let mut cmd = std::process::Command::new(bin());
    cmd.args([
        "score",
        inp.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "-q",
    ])
    .args(judge_args(
        &server.url,
        "meaning_match,similarity,exact_match",
    ))
    .args(["--judge-api-key-env", "REFSCORE_TEST_KEY"])
    .env("REFSCORE_TEST_KEY", secret);
    let o = cmd.output().unwrap();
    ok(&o);
    let b = read_parquet(&out);
    assert_eq!(
        bools(&b, "meaning_match"),
        vec![Some(true), Some(false), Some(false), None]
    );
    let src = texts(&b, "meaning_match_source");
    assert_eq!(
        src,
        vec![
            Some("rule".into()),
            Some("rule".into()),
            Some("judge".into()),
            None
        ]
    );
    let score = b
        .column_by_name("similarity_score")
        .unwrap()
        .as_primitive::<arrow::datatypes::UInt8Type>()
        .clone();
    assert_eq!(
        (
            score.value(0),
            score.value(1),
            score.value(2),
            score.is_null(3)
        ),
        (3, 0, 3, true)
    );
    assert_eq!(
        f32s(&b, "similarity"),
        vec![Some(0.3), Some(0.0), Some(0.3), None]
    );
    assert_eq!(
        texts(&b, "status"),
        vec![
            Some("ok".into()),
            Some("ok".into()),
            Some("ok".into()),
            Some("error".into())
        ]
    );
    let prompt = b
        .column_by_name("judge_prompt_tokens")
        .unwrap()
        .as_primitive::<UInt32Type>()
        .clone();
    assert_eq!(
        (prompt.value(0), prompt.value(2)),
        (50, 100),
        "row 2 made two calls"
    );

    let reqs = server.requests();
    assert_eq!(
        reqs.len(),
        3,
        "similarity for rows 0 and 2, meaning match for row 2"
    );
    for r in &reqs {
        assert_eq!(r.body["temperature"], 0);
        assert_eq!(r.body["model"], "scripted");
        assert!(r.body["max_tokens"].as_u64().unwrap() <= 1024);
        assert_eq!(r.body["response_format"]["type"], "json_schema");
        assert!(
            r.headers.contains(&format!("Bearer {secret}"))
                || r.headers
                    .to_ascii_lowercase()
                    .contains(&format!("bearer {secret}"))
        );
        assert!(
            r.user().contains("Capital?"),
            "the question is in the prompt"
        );
    }
    // The key is never written or printed.
    let written = std::fs::read(&out).unwrap();
    assert!(!written
        .windows(secret.len())
        .any(|w| w == secret.as_bytes()));
    let summary_text = std::fs::read_to_string(format!("{}.summary.json", out.display())).unwrap();
    assert!(!summary_text.contains(secret));
    assert!(!String::from_utf8_lossy(&o.stderr).contains(secret));
    let j = &summary(&out)["judge"];
    assert_eq!(j["decided_by_rule"], 3);
    assert_eq!(j["rows_judged"], 2);
    assert_eq!(j["calls"], 3);
    assert_eq!(j["prompt_tokens"], 150);
}

#[test]
fn transient_failures_are_retried_until_they_pass() {
    let server = start(|req, seen| {
        let first = seen == 0;
        match req.candidate() {
            "r429" if first => Reply::Status(
                429,
                vec![("Retry-After", "1".into())],
                r#"{"error":"slow down"}"#.into(),
            ),
            "r500" if first => Reply::Status(500, vec![], "oops".into()),
            "r503" if seen < 2 => Reply::Status(503, vec![], "busy".into()),
            "rdrop" if first => Reply::Drop,
            "rslow" if first => Reply::After(Duration::from_millis(3500), Box::new(mm(true))),
            "rgarbage" if first => chat("I think they match!"),
            "rfenced" => chat(
                "```json\n{\"meaning_match\": \"true\", \"reason\": [\"same\", \"answer\"]}\n```",
            ),
            "rprose" => {
                chat("Verdict follows. {\"meaning_match\": false, \"reason\": \"no\"} Done.")
            }
            _ => mm(true),
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let kinds = [
        "r429", "r500", "r503", "rdrop", "rslow", "rgarbage", "rfenced", "rprose",
    ];
    let rows: Vec<(&str, Option<&str>, Option<&str>)> = kinds
        .iter()
        .map(|k| ("Q?", Some("reference"), Some(*k)))
        .collect();
    let inp = input(dir.path(), &rows);
    let out = dir.path().join("o.parquet");
    ok(&score(
        &inp,
        &out,
        &judge_args(&server.url, "meaning_match"),
    ));
    let b = read_parquet(&out);
    assert_eq!(
        bools(&b, "meaning_match"),
        vec![
            Some(true),
            Some(true),
            Some(true),
            Some(true),
            Some(true),
            Some(true),
            Some(true),
            Some(false)
        ]
    );
    assert!(texts(&b, "status")
        .iter()
        .all(|s| s.as_deref() == Some("ok")));
    let reasons = texts(&b, "meaning_match_reason");
    assert_eq!(
        reasons[6].as_deref(),
        Some("same answer"),
        "a list reason is joined"
    );
    let j = &summary(&out)["judge"];
    assert!(j["retries"].as_u64().unwrap() >= 7, "{j}");
    assert_eq!(j["parse_failures"], 1);
    let latency = b
        .column_by_name("judge_latency_ms")
        .unwrap()
        .as_primitive::<UInt32Type>()
        .clone();
    assert!(
        latency.value(0) >= 1000,
        "Retry-After: 1 was honoured ({} ms)",
        latency.value(0)
    );
}

#[test]
fn a_key_echoed_in_an_answer_body_is_never_shown_whole_or_in_part() {
    let (key, body) = echoed_key();
    // The gateway answers the start-up probe with a 401 that echoes the key
    // across the 120-character cut of the excerpt.
    let refusing = start_all({
        let body = body.clone();
        move |_, _| Reply::Status(401, vec![], body.clone())
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(
        dir.path(),
        &[
            ("Q?", Some("ref"), Some("leak")),
            ("Q?", Some("ref"), Some("fine")),
        ],
    );
    let run = |url: &str, out: &Path, extra: &[&str]| {
        let mut cmd = std::process::Command::new(bin());
        cmd.args(["score", inp.to_str().unwrap(), "-o", out.to_str().unwrap()])
            .args(judge_args(url, "meaning_match"))
            .args(["--judge-api-key-env", "REFSCORE_TEST_KEY"])
            .args(extra)
            .env("REFSCORE_TEST_KEY", &key);
        cmd.output().unwrap()
    };
    let out = dir.path().join("refused.parquet");
    let err = fails(&run(&refusing.url, &out, &[]), 78);
    assert!(err.contains("HTTP 401") && err.contains("***"), "{err}");
    assert!(
        !err.contains(&key[..8]),
        "a part of the key on stderr: {err}"
    );

    // A row's 400 echoes it too: the error column, stderr, the summary,
    // the report and every file the runs leave hold none of it.
    let echoing = start({
        let body = body.clone();
        move |req, _| match req.candidate() {
            "leak" => Reply::Status(400, vec![], body.clone()),
            _ => mm(true),
        }
    });
    let out = dir.path().join("o.parquet");
    let o = run(&echoing.url, &out, &["--max-judge-failures", "1"]);
    ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains(&key[..8]), "{stderr}");
    let b = read_parquet(&out);
    let e = texts(&b, "error")[0].clone().unwrap();
    assert!(
        e.contains("HTTP 400") && e.contains("Incorrect API key provided: ***"),
        "{e}"
    );
    let html = dir.path().join("report.html");
    ok(&refscore(&[
        "report",
        out.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
    ]));
    assert!(html.exists());
    assert_eq!(
        files_holding(dir.path(), &key, 8),
        Vec::<std::path::PathBuf>::new()
    );
}

#[test]
fn permanent_failures_become_explicit_row_errors_and_the_run_goes_on() {
    let server = start(|req, _| match req.candidate() {
        "garbage" => chat("no json at all"),
        "truncated" => chat(r#"{"meaning_match": tr"#),
        "wrongtype" => chat(r#"{"meaning_match": "perhaps", "reason": "?"}"#),
        "e401" => Reply::Status(401, vec![], r#"{"error":"bad key"}"#.into()),
        "always500" => Reply::Status(500, vec![], "down".into()),
        "outofrange" => chat(r#"{"score": 12, "rationale": "too high"}"#),
        _ => mm(true),
    });
    let dir = tempfile::tempdir().unwrap();
    let kinds = [
        "garbage",
        "truncated",
        "wrongtype",
        "e401",
        "always500",
        "fine",
    ];
    let rows: Vec<(&str, Option<&str>, Option<&str>)> = kinds
        .iter()
        .map(|k| ("Q?", Some("ref"), Some(*k)))
        .collect();
    let inp = input(dir.path(), &rows);
    let out = dir.path().join("o.parquet");
    let mut args = judge_args(&server.url, "meaning_match,token_f1");
    args.extend(["--judge-retries", "2"]);
    // A row left without judge metrics because the endpoint failed (the
    // 500s) makes the run exit 75, loud, with everything else written; the
    // four bad answers would fail the same way again, so they do not.
    let err = fails(&score(&inp, &out, &args), 75);
    assert!(err.contains("1 row lacks judge metrics"), "{err}");
    let b = read_parquet(&out);
    assert_eq!(b.num_rows(), 6);
    let mmv = bools(&b, "meaning_match");
    assert_eq!(&mmv[..5], &[None, None, None, None, None]);
    assert_eq!(mmv[5], Some(true));
    let status = texts(&b, "status");
    let errors = texts(&b, "error");
    for i in 0..5 {
        assert_eq!(status[i].as_deref(), Some("partial"), "row {i}");
        let e = errors[i].as_deref().unwrap();
        assert!(e.starts_with("meaning_match: judge failed:"), "{e}");
        assert!(f32s(&b, "token_f1")[i].is_some(), "other metrics survive");
    }
    assert!(errors[0].as_deref().unwrap().contains("no JSON object"));
    assert!(
        errors[3].as_deref().unwrap().contains("HTTP 401")
            && errors[3].as_deref().unwrap().contains("after 1 attempt")
    );
    assert!(
        errors[4].as_deref().unwrap().contains("HTTP 500")
            && errors[4].as_deref().unwrap().contains("after 3 attempts")
    );
    assert_eq!(status[5].as_deref(), Some("ok"));
    let per_row = |k: &str| {
        server
            .requests()
            .iter()
            .filter(|r| r.candidate() == k)
            .count()
    };
    assert_eq!(per_row("e401"), 1, "no retry on 401");
    assert_eq!(per_row("always500"), 3);
    assert_eq!(per_row("garbage"), 3, "unparseable replies are retried");
    assert_eq!(summary(&out)["judge"]["failures"], 5);
    // A user who accepts that many failures gets exit 0.
    let tolerant = dir.path().join("tolerant.parquet");
    args.extend(["--max-judge-failures", "5"]);
    ok(&score(&inp, &tolerant, &args));

    // An out-of-range similarity score is rejected, not clamped.
    let out2 = dir.path().join("o2.parquet");
    let inp2 = dir.path().join("in2.parquet");
    write_parquet(
        &inp2,
        vec![("reference", s(&["ref"])), ("output", s(&["outofrange"]))],
    );
    let mut args2 = judge_args(&server.url, "similarity");
    args2.extend(["--max-judge-failures", "1"]);
    ok(&score(&inp2, &out2, &args2));
    let b = read_parquet(&out2);
    assert!(b.column_by_name("similarity_score").unwrap().is_null(0));
    assert!(texts(&b, "error")[0]
        .as_deref()
        .unwrap()
        .contains("outside 0..10"));
}

#[test]
fn a_judge_that_rejects_every_request_fails_the_run() {
    // The probe passes; every question is refused with a 400 (a context
    // limit, a model a gateway does not serve). A retry would fail the
    // same way, so the run is not one to resume (75): it is a failed run
    // (78), with everything else written, unless --max-judge-failures
    // accepts that many rows.
    let server = start(|_, _| {
        Reply::Status(
            400,
            vec![],
            r#"{"error":{"message":"model 'scripted' is not served here"}}"#.into(),
        )
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(
        dir.path(),
        &[
            ("Q?", Some("Paris"), Some("Lyon")),
            ("Q?", Some("red"), Some("blue")),
            ("Q?", Some("one"), Some("two")),
        ],
    );
    let out = dir.path().join("o.parquet");
    let args = judge_args(&server.url, "meaning_match,token_f1");
    let err = fails(&score(&inp, &out, &args), 78);
    assert!(
        err.contains("3 rows lack judge metrics") && err.contains("HTTP 400"),
        "{err}"
    );
    assert!(err.contains("not served here"), "the first reason: {err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert_eq!(server.requests().len(), 3, "no retry of a rejection");
    let b = read_parquet(&out);
    assert_eq!(b.num_rows(), 3, "the output is written either way");
    assert!(f32s(&b, "token_f1").iter().all(|v| v.is_some()));
    assert_eq!(summary(&out)["judge"]["rows_failed"], 3);

    // Up to --max-judge-failures rows are accepted; one more fails.
    let mut two = args.clone();
    two.extend(["--max-judge-failures", "2"]);
    fails(&score(&inp, &dir.path().join("two.parquet"), &two), 78);
    // Not --quiet: the warning that stands in for the failure is printed.
    let three_out = dir.path().join("three.parquet");
    let mut three = vec![
        "score",
        inp.to_str().unwrap(),
        "-o",
        three_out.to_str().unwrap(),
    ];
    three.extend(args.iter().copied());
    three.extend(["--max-judge-failures", "3"]);
    let o = refscore(&three);
    ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("warning: 3 rows"), "{stderr}");
}

#[test]
fn structured_output_falls_back_to_json_mode_then_plain_text() {
    let server = start(
        |req, _| match req.body["response_format"]["type"].as_str() {
            Some("json_schema") => Reply::Status(
                400,
                vec![],
                r#"{"error":"response_format json_schema is not supported"}"#.into(),
            ),
            Some("json_object") => Reply::Status(
                400,
                vec![],
                r#"{"error":"unknown response_format type"}"#.into(),
            ),
            _ => mm(true),
        },
    );
    let dir = tempfile::tempdir().unwrap();
    let inp = input(
        dir.path(),
        &[("Q", Some("a"), Some("b")), ("Q", Some("c"), Some("d"))],
    );
    let out = dir.path().join("o.parquet");
    ok(&score(
        &inp,
        &out,
        &judge_args(&server.url, "meaning_match"),
    ));
    assert_eq!(
        bools(&read_parquet(&out), "meaning_match"),
        vec![Some(true), Some(true)]
    );
    assert_eq!(summary(&out)["judge"]["response_format"], "plain");
    let plain = server
        .requests()
        .into_iter()
        .find(|r| r.body.get("response_format").is_none())
        .unwrap();
    assert!(plain.system().contains("JSON object only"));
}

#[test]
fn the_disk_cache_makes_a_rerun_free() {
    let server = start(|_, _| mm(false));
    let dir = tempfile::tempdir().unwrap();
    let inp = input(
        dir.path(),
        &[("Q", Some("a"), Some("b")), ("Q", Some("c"), Some("d"))],
    );
    let cache = dir.path().join("cache");
    let mut args = judge_args(&server.url, "meaning_match");
    args.extend(["--judge-cache", cache.to_str().unwrap()]);
    ok(&score(&inp, &dir.path().join("1.parquet"), &args));
    assert_eq!(server.requests().len(), 2);
    let out = dir.path().join("2.parquet");
    ok(&score(&inp, &out, &args));
    assert_eq!(server.requests().len(), 2, "nothing asked twice");
    let b = read_parquet(&out);
    assert_eq!(
        texts(&b, "meaning_match_source"),
        vec![Some("cache".into()), Some("cache".into())]
    );
    assert_eq!(bools(&b, "meaning_match"), vec![Some(false), Some(false)]);
    assert!(texts(&b, "judge_templates")[0]
        .as_deref()
        .unwrap()
        .starts_with("meaning_match-v1-"));
    assert_eq!(summary(&out)["judge"]["cached"], 2);
}

#[test]
fn a_column_chooses_which_rows_and_metrics_are_judged() {
    let server = start(|req, _| match req.kind() {
        "meaning_match" => mm(true),
        _ => chat(r#"{"score": 9, "rationale": "Close."}"#),
    });
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("in.parquet");
    write_parquet(
        &p,
        vec![
            ("reference", s(&["a", "b", "c", "d"])),
            ("output", s(&["w", "x", "y", "z"])),
            (
                "flag",
                Arc::new(BooleanArray::from(vec![
                    Some(true),
                    Some(false),
                    None,
                    Some(true),
                ])) as ArrayRef,
            ),
            (
                "which",
                Arc::new(StringArray::from(vec![
                    Some("similarity"),
                    Some("meaning_match, similarity"),
                    None,
                    Some(""),
                ])) as ArrayRef,
            ),
            ("bad", s(&["meaning_match", "vibes", "", ""])),
        ],
    );
    let out = dir.path().join("flag.parquet");
    let mut args = judge_args(&server.url, "meaning_match,similarity");
    args.extend(["--judge-where", "flag"]);
    ok(&score(&p, &out, &args));
    let b = read_parquet(&out);
    assert_eq!(
        bools(&b, "meaning_match"),
        vec![Some(true), None, None, Some(true)]
    );
    let out = dir.path().join("which.parquet");
    let mut args = judge_args(&server.url, "meaning_match,similarity");
    args.extend(["--judge-where", "which"]);
    ok(&score(&p, &out, &args));
    let b = read_parquet(&out);
    assert_eq!(
        bools(&b, "meaning_match"),
        vec![None, Some(true), None, None]
    );
    assert_eq!(
        f32s(&b, "similarity"),
        vec![Some(0.9), Some(0.9), None, None]
    );
    assert_eq!(
        texts(&b, "status"),
        vec![Some("ok".into()); 4],
        "not requested is not an error"
    );

    let mut args = judge_args(&server.url, "meaning_match");
    args.extend(["--judge-where", "bad"]);
    let err = fails(&score(&p, &dir.path().join("bad.parquet"), &args), 65);
    assert!(
        err.contains("column 'bad', row 1") && err.contains("'vibes'"),
        "{err}"
    );
    assert!(!dir.path().join("bad.parquet").exists());
}

#[test]
fn fact_ratio_is_computed_by_code_from_reused_reference_facts() {
    // Extraction splits on "," and "and"; a fact holds where its fruit is
    // named in the other answer.
    let server = start(|req, _| {
        let user = req.user();
        match req.kind() {
            "fact_extract" => {
                let text = user.strip_prefix("Text:\n").unwrap().trim_end_matches('.');
                let facts: Vec<String> = text
                    .replace(" and ", ", ")
                    .split(", ")
                    .map(|f| f.rsplit(' ').next().unwrap().to_lowercase())
                    .map(|fruit| format!("Amy likes {fruit}"))
                    .collect();
                chat(&serde_json::json!({ "facts": facts }).to_string())
            }
            _ => {
                let (rest, fact) = user.split_once("\n\nFact:\n").unwrap();
                let answer = rest.split_once("Answer:\n").unwrap().1.to_lowercase();
                let fruit = fact.rsplit(' ').next().unwrap();
                chat(if answer.contains(fruit) { "yes" } else { "no" })
            }
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let q = "Which fruits does Amy like?";
    let inp = input(
        dir.path(),
        &[
            (
                q,
                Some("Amy likes apples and bananas"),
                Some("Amy likes apples, berries and plums"),
            ),
            (
                q,
                Some("Amy likes apples and bananas"),
                Some("Apples and bananas."),
            ),
        ],
    );
    let out = dir.path().join("o.parquet");
    ok(&score(
        &inp,
        &out,
        &judge_args(&server.url, "fact_similarity"),
    ));
    let b = read_parquet(&out);
    let close = |v: Option<f32>, want: f32| (v.unwrap() - want).abs() < 1e-6;
    let (sim, rec, prec) = (
        f32s(&b, "fact_similarity"),
        f32s(&b, "fact_recall"),
        f32s(&b, "fact_precision"),
    );
    assert!(close(sim[0], 1.0 / 3.0) && close(rec[0], 0.5) && close(prec[0], 1.0 / 3.0));
    assert!(
        close(sim[1], 1.0) && close(rec[1], 1.0) && close(prec[1], 1.0),
        "two facts held on each side"
    );
    let counts = b.column_by_name("fact_counts").unwrap().as_struct().clone();
    let matched = counts
        .column_by_name("matched")
        .unwrap()
        .as_primitive::<UInt32Type>()
        .clone();
    let outputs = counts
        .column_by_name("output")
        .unwrap()
        .as_primitive::<UInt32Type>()
        .clone();
    assert_eq!((matched.value(0), outputs.value(0)), (1, 3));
    let extracts = server
        .requests()
        .iter()
        .filter(|r| r.kind() == "fact_extract")
        .count();
    assert_eq!(
        extracts, 3,
        "one extraction per distinct text: the reference's is reused"
    );
    let checks = server
        .requests()
        .iter()
        .filter(|r| r.kind() == "fact_check")
        .count();
    // Per row, one check per reference fact and per output fact; a check
    // two rows share (row 1's "Amy likes apples" against the reference,
    // asked for row 0 already) is asked once.
    assert_eq!(checks, (2 + 3) + (2 + 2) - 1);
}
