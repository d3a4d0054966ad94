//! Judge metrics the user defines, end to end through the binary against a
//! scripted server: definitions in the config file and in a
//! `--judge-metrics` file, their columns, summary, footer and report,
//! `--judge-where` naming them, `--resume` refusing a changed rubric,
//! `judge-metrics --show`, `judge-prompt`, and bad definitions failing
//! with exit 78 before any call.

mod common;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, AsArray, StringArray};
use arrow::datatypes::UInt8Type;
use common::judge_server::{chat, start, Reply};
use common::*;

const RUBRICS: &str = r#"
[judge.metric.concise]
answer = "score"
scale = [1, 5]
threshold = 4
instructions = "Rate how concise the answer is."
prompt = "Section {{ row.section }}\nQuestion: {{ input }}\nAnswer: {{ output }}"

[judge.metric.cites]
answer = "verdict"
prompt = "Does it cite a section? {{ output }}"
"#;

fn input(dir: &Path) -> PathBuf {
    let p = dir.join("in.parquet");
    write_parquet(
        &p,
        vec![
            ("id", s(&["a", "b", "c"])),
            ("question", s(&["Capital?", "Boiling point?", "Colour?"])),
            ("reference", s(&["Paris", "100 C", "Blue"])),
            ("output", s(&["Paris, see 4.2", "It boils at 90 C", ""])),
            (
                "section",
                Arc::new(StringArray::from(vec![Some("4.2"), None, Some("1.1")])) as ArrayRef,
            ),
            ("which", s(&["concise,cites", "concise", "cites"])),
        ],
    );
    p
}

/// Answers both rubrics: concise 5 for the first row, 2 otherwise; cites
/// true where the answer names a section.
fn rubric_judge() -> common::judge_server::Server {
    start(|req, _| {
        if req.system().contains("concise") {
            let score = if req.user().contains("Paris") { 5 } else { 2 };
            chat(&format!(
                r#"{{"score": {score}, "reason": "scored {score}"}}"#
            ))
        } else if req.user().contains("see 4.2") {
            chat(r#"{"verdict": true, "reason": "cites 4.2"}"#)
        } else {
            chat(r#"{"verdict": false, "reason": "no section"}"#)
        }
    })
}

fn args<'a>(url: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut a = vec![
        "--judge-url",
        url,
        "--judge-model",
        "scripted",
        "--judge-timeout",
        "2",
        "--judge-reasons",
        "always",
    ];
    a.extend_from_slice(extra);
    a
}

fn u8s(batch: &arrow::array::RecordBatch, name: &str) -> Vec<Option<u8>> {
    batch
        .column_by_name(name)
        .unwrap()
        .as_primitive::<UInt8Type>()
        .iter()
        .collect()
}

#[test]
fn defined_metrics_run_like_built_in_ones() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let config = dir.path().join("refscore.toml");
    std::fs::write(&config, format!("metrics = [\"judge\"]\n{RUBRICS}")).unwrap();
    let server = rubric_judge();
    let out = dir.path().join("out.parquet");
    let config_arg = config.to_str().unwrap();
    ok(&score(
        &inp,
        &out,
        &args(
            &server.url,
            &["--config", config_arg, "--judge-where", "which"],
        ),
    ));
    let b = read_parquet(&out);
    let names = column_names(&b);
    let at = |n: &str| names.iter().position(|x| x == n).unwrap();
    assert!(
        at("fact_similarity_source") < at("cites"),
        "built-ins first: {names:?}"
    );
    assert!(
        at("cites_source") < at("concise_score"),
        "defined ones by name: {names:?}"
    );
    assert_eq!(u8s(&b, "concise_score"), [Some(5), Some(2), None]);
    assert_eq!(f32s(&b, "concise"), [Some(1.0), Some(0.25), None]);
    assert_eq!(bools(&b, "cites"), [Some(true), None, Some(false)]);
    assert_eq!(
        texts(&b, "cites_source"),
        [Some("judge".into()), None, Some("rule".into())],
        "the empty output fails by rule"
    );
    assert_eq!(texts(&b, "concise_reason")[1].as_deref(), Some("scored 2"));
    assert!(texts(&b, "judge_templates")[0]
        .as_deref()
        .unwrap()
        .contains("concise-def-"));
    let concise: Vec<_> = server
        .requests()
        .into_iter()
        .filter(|r| r.system().contains("concise"))
        .collect();
    assert_eq!(concise.len(), 2);
    assert!(
        concise
            .iter()
            .any(|r| r.user() == "Section 4.2\nQuestion: Capital?\nAnswer: Paris, see 4.2"),
        "row.section read without --keep"
    );
    let sum = summary(&out);
    let metric = |name: &str| {
        sum["metrics"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == name)
            .cloned()
            .unwrap_or_else(|| panic!("{name} in the summary"))
    };
    assert_eq!(metric("concise")["threshold"], 0.75);
    assert_eq!(metric("concise")["pass_rate"], 0.5);
    assert_eq!(metric("cites")["pass_rate"], 0.5);
    let defined = &sum["judge"]["defined_metrics"];
    assert_eq!(defined["concise"]["scale"], serde_json::json!([1, 5]));
    assert!(defined["cites"]["version"]
        .as_str()
        .unwrap()
        .starts_with("cites-def-"));

    // The report finds their sources and reasons, and says when a rubric
    // changed between two runs.
    let changed = dir.path().join("changed.toml");
    std::fs::write(
        &changed,
        format!(
            "metrics = [\"judge\"]\n{}",
            RUBRICS.replace("Rate how concise", "Rate how short")
        ),
    )
    .unwrap();
    let out2 = dir.path().join("out2.parquet");
    ok(&score(
        &inp,
        &out2,
        &args(
            &server.url,
            &[
                "--config",
                changed.to_str().unwrap(),
                "--judge-where",
                "which",
            ],
        ),
    ));
    let json = dir.path().join("report.json");
    let html = dir.path().join("report.html");
    ok(&refscore(&[
        "report",
        out2.to_str().unwrap(),
        "--baseline",
        out.to_str().unwrap(),
        "-o",
        html.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
    ]));
    let report: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let changes = report["rubric_changes"].as_array().unwrap();
    assert_eq!(changes.len(), 1, "{changes:?}");
    assert!(
        changes[0]
            .as_str()
            .unwrap()
            .contains("judge metric concise"),
        "{changes:?}"
    );
    assert!(std::fs::read_to_string(&html)
        .unwrap()
        .contains("judge metric concise"));
    let sources = &report["judge"]["sources"];
    assert!(sources.to_string().contains("concise_source"), "{sources}");
    // A report threshold names a metric of the result, defined ones included.
    let page = |t: &str| {
        refscore(&[
            "report",
            out.to_str().unwrap(),
            "--threshold",
            t,
            "-o",
            html.to_str().unwrap(),
        ])
    };
    ok(&page("concise=0.9"));
    let err = fails(&page("concsie=0.9"), 64);
    assert!(err.contains("no metric 'concsie'"), "{err}");
}

#[test]
fn the_band_decides_a_defined_verdict_that_asks_for_it() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let rubrics = dir.path().join("rubrics.toml");
    let server = rubric_judge();
    let out = dir.path().join("out.parquet");
    let run = |text: &str| {
        std::fs::write(&rubrics, text).unwrap();
        score(
            &inp,
            &out,
            &args(
                &server.url,
                &[
                    "--judge-metrics",
                    rubrics.to_str().unwrap(),
                    "--metrics",
                    "cosine,cites",
                    "--model",
                    model.to_str().unwrap(),
                    "--judge-band",
                    "cosine:0.9999..1.0",
                    "--overwrite",
                ],
            ),
        )
    };
    let err = fails(&run(RUBRICS), 78);
    assert!(err.contains("needs the cosine metric"), "{err}");
    ok(&run(&RUBRICS.replace(
        "answer = \"verdict\"\n",
        "answer = \"verdict\"\nband = true\n",
    )));
    let b = read_parquet(&out);
    assert_eq!(
        texts(&b, "cites_source"),
        [
            Some("band:cosine".into()),
            Some("band:cosine".into()),
            Some("rule".into())
        ]
    );
    assert_eq!(bools(&b, "cites"), [Some(false), Some(false), Some(false)]);
    assert!(
        server.requests().iter().all(|r| !r.user().contains("cite")),
        "the band decided every row"
    );
}

#[test]
fn a_changed_rubric_stops_resume_and_is_named() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let rubrics = dir.path().join("rubrics.toml");
    std::fs::write(&rubrics, RUBRICS).unwrap();
    // The endpoint fails for the second row: the run ends lacking it.
    let server = start(|req, _| {
        if req.user().contains("90 C") {
            Reply::Status(503, vec![], "busy".into())
        } else {
            chat(r#"{"score": 5, "reason": "fine"}"#)
        }
    });
    let out = dir.path().join("out.parquet");
    let base = args(
        &server.url,
        &[
            "--judge-metrics",
            rubrics.to_str().unwrap(),
            "--metrics",
            "concise",
            "--judge-retries",
            "0",
        ],
    );
    fails(&score(&inp, &out, &base), 75);
    let mut again = base.clone();
    again.push("--resume");
    for (from, to, what) in [
        (
            "threshold = 4",
            "threshold = 3",
            "its threshold changed (4.0 then, 3.0 now)",
        ),
        (
            "Rate how concise",
            "Rate how short",
            "its prompt changed (concise-def-",
        ),
        // Every request of the rubric would change: paid answers would be
        // asked again.
        (
            "threshold = 4",
            "threshold = 4\nmax_tokens = 64",
            "its max_tokens changed (512 then, 64 now)",
        ),
    ] {
        std::fs::write(&rubrics, RUBRICS.replace(from, to)).unwrap();
        let err = fails(&score(&inp, &out, &again), 78);
        assert!(
            err.contains("judge metric 'concise'") && err.contains(what),
            "{err}"
        );
    }
}

#[test]
fn show_lists_and_prompt_print_without_calling() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let rubrics = dir.path().join("rubrics.toml");
    std::fs::write(&rubrics, RUBRICS).unwrap();
    let r = rubrics.to_str().unwrap();
    let listing = ok(&refscore(&["judge-metrics", "--judge-metrics", r]));
    for name in [
        "meaning_match",
        "similarity",
        "fact_similarity",
        "concise",
        "cites",
    ] {
        assert!(listing.contains(name), "{listing}");
    }
    // A built-in's definition, copied under a new name, is a working rubric.
    let shown = ok(&refscore(&["judge-metrics", "--show", "similarity"]));
    assert!(
        shown.starts_with("[judge.metric.similarity]\nanswer = \"score\"\nscale = [0, 10]"),
        "{shown}"
    );
    let mine = dir.path().join("mine.toml");
    std::fs::write(
        &mine,
        shown.replace("metric.similarity]", "metric.my_similarity]"),
    )
    .unwrap();
    let listing = ok(&refscore(&[
        "judge-metrics",
        "--judge-metrics",
        mine.to_str().unwrap(),
    ]));
    assert!(listing.contains("my_similarity"), "{listing}");
    fails(&refscore(&["judge-metrics", "--show", "vibes"]), 64);

    // The request for one row, nothing sent.
    let server = start(|_, _| chat("{}"));
    let out = ok(&refscore(&[
        "judge-prompt",
        "--metric",
        "concise",
        "--row",
        "a",
        inp.to_str().unwrap(),
        "--judge-metrics",
        r,
        "--judge-url",
        &server.url,
        "--judge-model",
        "m1",
    ]));
    assert!(server.requests().is_empty(), "judge-prompt calls nothing");
    let body: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(body["model"], "m1");
    assert_eq!(
        body["messages"][1]["content"],
        "Section 4.2\nQuestion: Capital?\nAnswer: Paris, see 4.2"
    );
    assert!(body["messages"][0]["content"]
        .as_str()
        .unwrap()
        .starts_with("Rate how concise the answer is.\nReply with a JSON object only"));
    assert_eq!(body["response_format"]["type"], "json_schema");
    let err = fails(
        &refscore(&[
            "judge-prompt",
            "--metric",
            "concise",
            "--row",
            "zz",
            inp.to_str().unwrap(),
            "--judge-metrics",
            r,
        ]),
        65,
    );
    assert!(err.contains("no row has id 'zz'"), "{err}");
    // Without --judge-url the protocol and model named still shape the request.
    let out = ok(&refscore(&[
        "judge-prompt",
        "--metric",
        "concise",
        "--row",
        "a",
        inp.to_str().unwrap(),
        "--judge-metrics",
        r,
        "--judge-api",
        "anthropic",
        "--judge-model",
        "claude-x",
    ]));
    let body: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(body["model"], "claude-x");
    assert!(body.get("response_format").is_none(), "{body}");
    assert!(body["system"]
        .as_str()
        .is_some_and(|s| s.starts_with("Rate how concise the answer is.")));
}

#[test]
fn bad_definitions_fail_before_any_call() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let server = start(|_, _| chat("{}"));
    let out = dir.path().join("out.parquet");
    let cases = [
        (RUBRICS.replace("scale = [1, 5]", "scale = [5, 1]"), "scale"),
        (
            RUBRICS.replace("threshold = 4", "threshold = 9"),
            "outside the scale",
        ),
        (
            RUBRICS.replace("{{ input }}", "{{ question }}"),
            "unknown slot 'question'",
        ),
        (
            RUBRICS.replace("row.section", "row.chapter"),
            "reads column 'chapter'",
        ),
        (
            RUBRICS.replace("metric.cites]", "metric.cosine]"),
            "already a built-in",
        ),
        (
            RUBRICS.replace("{{ output }}\"\n\n", "{% if %}\"\n\n"),
            "does not compile",
        ),
    ];
    for (text, want) in cases {
        for how in ["config", "file"] {
            let f = dir.path().join(format!("{how}.toml"));
            std::fs::write(&f, &text).unwrap();
            let flag = if how == "config" {
                "--config"
            } else {
                "--judge-metrics"
            };
            let err = fails(
                &score(
                    &inp,
                    &out,
                    &args(
                        &server.url,
                        &[flag, f.to_str().unwrap(), "--metrics", "judge"],
                    ),
                ),
                78,
            );
            assert!(err.contains(want), "{how}: {want}: {err}");
            assert!(
                err.contains(f.to_str().unwrap()),
                "{how}: names the file: {err}"
            );
            assert!(!out.exists());
        }
    }
    assert!(server.requests().is_empty(), "no call was made");
}

#[test]
fn judge_prompt_says_when_a_rule_decides_the_row() {
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let rubrics = dir.path().join("rubrics.toml");
    std::fs::write(&rubrics, RUBRICS).unwrap();
    let prompt = |metric: &str, row: &str| {
        ok(&refscore(&[
            "judge-prompt",
            "--metric",
            metric,
            "--row",
            row,
            inp.to_str().unwrap(),
            "--judge-metrics",
            rubrics.to_str().unwrap(),
        ]))
    };
    // Row c's output is empty: every judge metric fails by rule.
    assert_eq!(
        prompt("cites", "c"),
        "row c: cites is decided by a rule without a call: the output is empty, so it fails\n"
    );
    assert!(prompt("meaning_match", "c").contains("decided by a rule without a call"));
    // A row the judge is asked about still prints its request.
    let body: serde_json::Value = serde_json::from_str(&prompt("cites", "a")).unwrap();
    assert_eq!(
        body["messages"][1]["content"],
        "Does it cite a section? Paris, see 4.2"
    );
    // The same answer as the reference decides Meaning Match by rule.
    let same = dir.path().join("same.parquet");
    write_parquet(
        &same,
        vec![
            ("id", s(&["x"])),
            ("reference", s(&["Paris"])),
            ("output", s(&["paris."])),
        ],
    );
    let out = ok(&refscore(&[
        "judge-prompt",
        "--metric",
        "meaning_match",
        "--row",
        "x",
        same.to_str().unwrap(),
    ]));
    assert!(
        out.contains("the output is the reference's answer, so it passes"),
        "{out}"
    );
}

#[test]
fn show_prints_toml_refscore_reads_back_whatever_the_instructions_hold() {
    let dir = tempfile::tempdir().unwrap();
    let rubric = dir.path().join("bell.toml");
    // A control character (BEL), a tab and a newline in the instructions.
    std::fs::write(
        &rubric,
        "[judge.metric.bell]\nanswer = \"verdict\"\ninstructions = \"Ring\\u0007 the\\tbell.\\nThen judge.\"\nprompt = \"{{ output }}\"\n",
    )
    .unwrap();
    let shown = ok(&refscore(&[
        "judge-metrics",
        "--judge-metrics",
        rubric.to_str().unwrap(),
        "--show",
        "bell",
    ]));
    let again = dir.path().join("again.toml");
    std::fs::write(&again, shown.replace("metric.bell]", "metric.bell2]")).unwrap();
    let listing = ok(&refscore(&[
        "judge-metrics",
        "--judge-metrics",
        again.to_str().unwrap(),
    ]));
    assert!(listing.contains("bell2"), "{shown}\n{listing}");
    let shown2 = ok(&refscore(&[
        "judge-metrics",
        "--judge-metrics",
        again.to_str().unwrap(),
        "--show",
        "bell2",
    ]));
    assert_eq!(shown2, shown.replace("metric.bell]", "metric.bell2]"));
}

/// A rubric reading one input column of any type as `{{ row.value }}`.
const READS_VALUE: &str = r#"
[judge.metric.dated]
answer = "verdict"
prompt = "On {{ row.value }}: {{ output }}"
"#;

#[test]
fn prompt_columns_render_named_time_zones_and_refuse_binary_that_is_not_text() {
    use arrow::array::{BinaryArray, TimestampMicrosecondArray};
    let dir = tempfile::tempdir().unwrap();
    let rubric = dir.path().join("dated.toml");
    std::fs::write(&rubric, READS_VALUE).unwrap();
    let server = start(|_, _| chat(r#"{"verdict": true, "reason": "ok"}"#));
    let out = dir.path().join("out.parquet");
    let run = |value: ArrayRef| {
        let inp = dir.path().join("in.parquet");
        write_parquet(
            &inp,
            vec![
                ("id", s(&["a", "b"])),
                ("reference", s(&["Paris", "Rome"])),
                ("output", s(&["Lyon", "Milan"])),
                ("value", value),
            ],
        );
        score(
            &inp,
            &out,
            &args(
                &server.url,
                &[
                    "--judge-metrics",
                    rubric.to_str().unwrap(),
                    "--metrics",
                    "dated",
                    "--overwrite",
                ],
            ),
        )
    };
    // 2024-05-01T12:00:00Z in a column with a named zone.
    let ts = TimestampMicrosecondArray::from(vec![1_714_564_800_000_000i64, 0])
        .with_timezone("Europe/Paris");
    ok(&run(Arc::new(ts)));
    let users: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.user().to_string())
        .collect();
    assert!(
        users
            .iter()
            .any(|u| u.starts_with("On 2024-05-01T14:00:00+02:00: Lyon")),
        "{users:?}"
    );
    // Row b's bytes are not UTF-8: bad input naming the column and row, not
    // an empty value in the prompt.
    let bytes: Vec<&[u8]> = vec![b"fine", b"\xff\xfe"];
    let err = fails(&run(Arc::new(BinaryArray::from(bytes))), 65);
    assert!(
        err.contains("column 'value'") && err.contains("row 1"),
        "{err}"
    );
}

#[test]
fn a_config_file_read_from_a_pipe_keeps_its_definitions() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path());
    let server = rubric_judge();
    let out = dir.path().join("out.parquet");
    let mut child = std::process::Command::new(bin())
        .args([
            "score",
            inp.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-q",
        ])
        .args(args(
            &server.url,
            &["--config", "/dev/stdin", "--metrics", "cites"],
        ))
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(RUBRICS.as_bytes())
        .unwrap();
    ok(&child.wait_with_output().unwrap());
    let b = read_parquet(&out);
    assert_eq!(
        texts(&b, "cites_source"),
        vec![
            Some("judge".into()),
            Some("judge".into()),
            Some("rule".into())
        ]
    );
}
