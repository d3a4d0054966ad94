//! What refscore reads from a judge's reply, through the real binary and a
//! scripted server on 127.0.0.1: the verdict or score and the reason, under
//! any spelling the rubric accepts, and nothing else. Probabilities come
//! from the server's token probabilities alone, never from a field the
//! judge (or an injection inside the judged output) wrote.

mod common;

use std::path::{Path, PathBuf};

use arrow::array::AsArray;
use arrow::datatypes::UInt8Type;
use common::judge_server::{chat, start};
use common::*;

fn input(dir: &Path) -> PathBuf {
    let p = dir.join("in.parquet");
    write_parquet(
        &p,
        vec![
            ("id", s(&["a", "b"])),
            ("question", s(&["Capital of France?", "Boiling point?"])),
            ("reference", s(&["Paris", "100 C"])),
            ("output", s(&["Lyon", "90 C"])),
        ],
    );
    p
}

fn run(dir: &Path, url: &str, extra: &[&str]) -> (arrow::array::RecordBatch, serde_json::Value) {
    let out = dir.join("out.parquet");
    let mut args = vec![
        "--judge-url",
        url,
        "--judge-model",
        "scripted",
        "--judge-timeout",
        "2",
    ];
    args.extend_from_slice(extra);
    ok(&score(&input(dir), &out, &args));
    (read_parquet(&out), summary(&out))
}

#[test]
fn fields_the_judge_writes_beside_its_answer_are_ignored() {
    // A server without token probabilities whose judge adds its own
    // "probability" and "expected score".
    let server = start(|req, _| match req.kind() {
        "meaning_match" => chat(r#"{"meaning_match": false, "p_true": 0.99, "reason": "differs"}"#),
        _ => chat(r#"{"score": 5, "expected": 10, "rationale": "half"}"#),
    });
    let dir = tempfile::tempdir().unwrap();
    let (b, summary) = run(
        dir.path(),
        &server.url,
        &["--metrics", "meaning_match,similarity"],
    );
    assert_eq!(bools(&b, "meaning_match"), vec![Some(false); 2]);
    assert_eq!(f32s(&b, "meaning_match_p"), vec![None; 2]);
    let sampled: Vec<Option<u8>> = b
        .column_by_name("similarity_score")
        .unwrap()
        .as_primitive::<UInt8Type>()
        .iter()
        .collect();
    assert_eq!(sampled, vec![Some(5); 2]);
    assert_eq!(f32s(&b, "similarity"), vec![Some(0.5); 2]);
    // The summary says no probabilities came, and the values agree.
    assert_eq!(summary["judge"]["replies_with_logprobs"], 0);
}

#[test]
fn a_user_score_ignores_an_expected_field_in_the_reply() {
    let dir = tempfile::tempdir().unwrap();
    let rubric = dir.path().join("acc.toml");
    std::fs::write(
        &rubric,
        "[judge.metric.acc]\nanswer = \"score\"\nscale = [0, 10]\nprompt = \"{{ output }}\"\n",
    )
    .unwrap();
    let server = start(|_, _| chat(r#"{"score": 5, "expected": 10, "reason": "half"}"#));
    let (b, _) = run(
        dir.path(),
        &server.url,
        &[
            "--judge-metrics",
            rubric.to_str().unwrap(),
            "--metrics",
            "acc",
        ],
    );
    assert_eq!(f32s(&b, "acc"), vec![Some(0.5); 2]);
}

#[test]
fn a_reason_under_an_accepted_alias_is_kept_in_every_reasons_mode() {
    // The similarity rubric asks for "rationale"; this judge writes
    // "reason", which the rubric accepts.
    let server = start(|_, _| chat(r#"{"score": 2, "reason": "little overlap"}"#));
    for mode in ["failures", "always"] {
        let dir = tempfile::tempdir().unwrap();
        let (b, summary) = run(
            dir.path(),
            &server.url,
            &["--metrics", "similarity", "--judge-reasons", mode],
        );
        assert_eq!(
            texts(&b, "similarity_rationale"),
            vec![Some("little overlap".to_string()); 2],
            "{mode}"
        );
        if mode == "failures" {
            assert_eq!(summary["judge"]["reasons_asked"], 2);
        }
    }
}
