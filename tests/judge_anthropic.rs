//! The judge through Anthropic's Messages API and Message Batches API
//! (`--judge-api anthropic`), against a scripted server on 127.0.0.1: the
//! headers and body the API wants, the sampled verdict deciding (no token
//! probabilities), the batch run giving the online run's output through
//! every round, a creation whose answer was lost found again, and
//! `--overwrite` cancelling.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use arrow::array::RecordBatch;
use common::anthropic_server::{self, Answer, Server};
use common::*;
use serde_json::Value;

/// The eight rows every test here scores.
fn input(dir: &Path) -> PathBuf {
    eight_judged_rows(dir)
}

/// The scripted Claude: the same answer to the same request, online or in
/// a batch; a request cut after the verdict (max_tokens 10) gets the cut
/// answer a real model would give.
fn scripted(params: &Value, _: usize) -> Answer {
    let system = params["system"].as_str().unwrap_or("");
    let user = params["messages"][0]["content"].as_str().unwrap_or("");
    let right = user.contains("right answer");
    let cut = params["max_tokens"] == 10;
    Ok(if system.contains("same core answer") {
        if cut {
            format!("{{\"meaning_match\": {right}")
        } else {
            format!("{{\"meaning_match\": {right}, \"reason\": \"scripted reason\"}}")
        }
    } else {
        let score = if right { 8 } else { 2 };
        if cut {
            format!("{{\"score\": {score}")
        } else {
            format!("{{\"score\": {score}, \"rationale\": \"scripted rationale\"}}")
        }
    })
}

fn args<'a>(input: &'a str, output: &'a str, url: &'a str) -> Vec<&'a str> {
    vec![
        "score",
        input,
        "-o",
        output,
        "--metrics",
        "meaning_match,similarity",
        "--judge-url",
        url,
        "--judge-api",
        "anthropic",
        "--judge-model",
        "claude-scripted",
        "--judge-api-key-env",
        "REFSCORE_TEST_ANTHROPIC_KEY",
        "--judge-timeout",
        "5",
        "--quiet",
    ]
}

/// Runs refscore with the test's API key in the environment.
fn run(args: &[&str]) -> std::process::Output {
    Command::new(bin())
        .args(args)
        .env("REFSCORE_TEST_ANTHROPIC_KEY", "sk-ant-test-key")
        .output()
        .unwrap()
}

fn online(dir: &Path) -> (RecordBatch, Value, Server) {
    let server = anthropic_server::start(scripted, None);
    let (i, o) = (input(dir), dir.join("online.parquet"));
    ok(&run(&args(
        i.to_str().unwrap(),
        o.to_str().unwrap(),
        &server.url,
    )));
    (read_parquet(&o), summary(&o), server)
}

#[test]
fn the_messages_api_judges_with_the_sampled_verdict() {
    let dir = tempfile::tempdir().unwrap();
    let (got, summary, server) = online(dir.path());
    let verdicts = bools(&got, "meaning_match");
    assert_eq!(
        verdicts,
        (0..8).map(|k| Some(k % 2 == 0)).collect::<Vec<_>>()
    );
    // No token probabilities: P(true) is null, the score the sampled one.
    assert_eq!(f32s(&got, "meaning_match_p"), vec![None; 8]);
    assert_eq!(f32s(&got, "similarity")[0], Some(0.8));
    // Reasons where the verdict fails, asked as online.
    let reasons = texts(&got, "meaning_match_reason");
    assert_eq!(reasons[1].as_deref(), Some("scripted reason"));
    assert_eq!(reasons[0], None);
    let j = &summary["judge"];
    assert_eq!(j["api"], "anthropic");
    assert!(j["token_probabilities"]
        .as_str()
        .is_some_and(|n| n.contains("sampled answer")));
    assert_eq!(j["response_format"], "plain");
    // The body as the Messages API wants it: the system prompt apart, no
    // OpenAI-only fields.
    let state = server.state.lock().unwrap();
    let first = &state.online[0];
    assert!(first["system"]
        .as_str()
        .unwrap()
        .contains("JSON object only"));
    assert_eq!(first["messages"][0]["role"], "user");
    assert!(first.get("logprobs").is_none() && first.get("response_format").is_none());
    assert_eq!(first["model"], "claude-scripted");
}

#[test]
fn the_url_chooses_the_protocol_and_a_missing_key_is_refused_at_the_probe() {
    let dir = tempfile::tempdir().unwrap();
    let server = anthropic_server::start(scripted, None);
    let (i, o) = (input(dir.path()), dir.path().join("o.parquet"));
    // Without the key the scripted API refuses authentication: 78 at the
    // probe, before any row.
    let out = Command::new(bin())
        .args(args(i.to_str().unwrap(), o.to_str().unwrap(), &server.url))
        .env_remove("REFSCORE_TEST_ANTHROPIC_KEY")
        .output()
        .unwrap();
    let err = fails(&out, 78);
    assert!(err.contains("refused authentication"), "{err}");
    assert!(server.state.lock().unwrap().online.is_empty());
    let bad = run(&[
        "score",
        i.to_str().unwrap(),
        "-o",
        o.to_str().unwrap(),
        "--judge-url",
        &server.url,
        "--judge-api",
        "gemini",
    ]);
    let err = fails(&bad, 64);
    assert!(
        err.contains("--judge-api") && err.contains("openai or anthropic"),
        "{err}"
    );
}

#[test]
fn message_batches_give_the_online_output_through_every_round() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, online_summary, _) = online(dir.path());
    let server = anthropic_server::start(scripted, None);
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let mut a = args(i.to_str().unwrap(), o.to_str().unwrap(), &server.url);
    a.extend(["--judge-batch", "api"]);
    let err = fails(&run(&a), 75);
    assert!(err.contains("submitted in batch msgbatch_01"), "{err}");
    resume_until_done(run, &a, 10);
    assert_same_results(&expected, &read_parquet(&o));
    // Verdicts and scores, then the failing rows' reasons: two batches,
    // every request paid once.
    let batches = server.batches();
    assert_eq!(batches.len(), 2, "{batches:?}");
    assert_eq!(server.most_paid(), 1);
    let (j, online_j) = (&summary(&o)["judge"], &online_summary["judge"]);
    for key in [
        "prompt_tokens",
        "completion_tokens",
        "rows_judged",
        "failures",
    ] {
        assert_eq!(j[key], online_j[key], "{key}");
    }
    assert_eq!(j["batch"]["batches"], 2);
}

#[test]
fn a_batch_whose_creation_was_never_acknowledged_is_found_not_made_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, _, _) = online(dir.path());
    let server = anthropic_server::start(scripted, Some("POST /v1/messages/batches"));
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let mut a = args(i.to_str().unwrap(), o.to_str().unwrap(), &server.url);
    a.extend(["--judge-batch", "api"]);
    // Killed (SIGKILL) while the server holds the creation it already made.
    let mut child = Command::new(bin())
        .args(&a)
        .env("REFSCORE_TEST_ANTHROPIC_KEY", "sk-ant-test-key")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while !server.state.lock().unwrap().faults.hung {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "never reached the creation"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    child.kill().unwrap();
    child.wait().unwrap();
    server.release();
    resume_until_done(run, &a, 10);
    assert_same_results(&expected, &read_parquet(&o));
    assert_eq!(
        server.batches().len(),
        2,
        "the lost creation was found, not repeated"
    );
    assert_eq!(server.most_paid(), 1);
}

#[test]
fn overwrite_cancels_a_message_batch_and_a_folder_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let server = anthropic_server::start(scripted, None);
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let mut a = args(i.to_str().unwrap(), o.to_str().unwrap(), &server.url);
    a.extend(["--judge-batch", "api"]);
    fails(&run(&a), 75);
    let mut over: Vec<&str> = a.iter().copied().filter(|x| *x != "--quiet").collect();
    over.push("--overwrite");
    let err = fails(&run(&over), 75);
    assert!(err.contains("cancelled judge batch msgbatch_01"), "{err}");
    assert!(server.called("POST /v1/messages/batches/msgbatch_01/cancel"));
    // Request files for another machine are OpenAI batch lines (what vllm
    // run-batch reads): refused for an Anthropic judge, before any work.
    let folder = format!("dir:{}", dir.path().join("box").display());
    let mut d = args(i.to_str().unwrap(), o.to_str().unwrap(), &server.url);
    d.extend(["--judge-batch", &folder, "--overwrite"]);
    let err = fails(&run(&d), 78);
    assert!(err.contains("--judge-batch api"), "{err}");
}

#[test]
fn an_escalating_panel_led_by_a_judge_without_probabilities_is_named_at_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let (first, second) = (
        anthropic_server::start(scripted, None),
        anthropic_server::start(scripted, None),
    );
    let (i, o) = (input(dir.path()), dir.path().join("panel.parquet"));
    let mut a = args(i.to_str().unwrap(), o.to_str().unwrap(), &first.url);
    a.retain(|w| *w != "--quiet");
    a.extend([
        "--judge-url",
        &second.url,
        "--judge-model",
        "claude-big",
        "--judge-panel",
        "escalate",
    ]);
    // Verdicts only: a score escalates by its sampled value.
    for w in a.iter_mut().filter(|w| **w == "meaning_match,similarity") {
        *w = "meaning_match";
    }
    let out = run(&a);
    ok(&out);
    let err = String::from_utf8_lossy(&out.stderr);
    let warning = err
        .lines()
        .find(|l| l.contains("gives no token probabilities"))
        .unwrap_or_else(|| panic!("no warning: {err}"));
    assert!(
        warning.starts_with("refscore: warning: judge ") && warning.contains("anthropic API"),
        "{warning}"
    );
    // It is said before any row is scored, and it is true: nothing escalated.
    assert!(err.find(warning).unwrap() < err.find("rows").unwrap_or(usize::MAX));
    assert!(second.state.lock().unwrap().online.is_empty());
}
