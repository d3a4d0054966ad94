//! Judge batches (`--judge-batch`) through the real binary: against a
//! scripted OpenAI Batch API on 127.0.0.1 (statuses, expired and failed
//! batches, error lines, answers out of order), a folder answered in
//! `vllm run-batch`'s format, and kill -9 at each step of a batch's life.
//! Every run's output must equal, column for column, what the same rows
//! and the same scripted answers give online (but the call latency).

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use arrow::array::RecordBatch;
use common::batch_server::{self, BatchServer};
use common::judge_server::{self, Reply};
use common::*;
use serde_json::{json, Value};

/// The eight rows every test here scores.
fn input(dir: &Path) -> PathBuf {
    eight_judged_rows(dir)
}

/// A chat completion body.
fn completion(content: &str, tokens: Option<Vec<Value>>) -> Value {
    let mut choice = json!({"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"});
    if let Some(t) = tokens {
        choice["logprobs"] = json!({"content": t});
    }
    json!({"id": "c", "object": "chat.completion", "model": "scripted", "choices": [choice],
           "usage": {"prompt_tokens": 40 + content.len(), "completion_tokens": content.len() / 4 + 1}})
}

fn token(text: &str, alternatives: &[(&str, f64)]) -> Value {
    let top: Vec<Value> = alternatives
        .iter()
        .map(|(t, p)| json!({"token": t, "logprob": p.ln()}))
        .collect();
    let own = alternatives
        .iter()
        .find(|(t, _)| *t == text)
        .map_or(-20.0, |(_, p)| p.ln());
    json!({"token": text, "logprob": own, "top_logprobs": top})
}

/// The scripted judge: the same answer to the same request, online or in
/// a batch. Verdicts carry token probabilities; a request cut after the
/// verdict (max_tokens 10) gets the cut answer a real server would give.
fn scripted(body: &Value) -> Value {
    let system = body["messages"][0]["content"].as_str().unwrap_or("");
    let user = body["messages"][1]["content"].as_str().unwrap_or("");
    let right = user.contains("right answer");
    let cut = body["max_tokens"] == 10;
    if system.contains("same core answer") {
        let word = if right { " true" } else { " false" };
        let p = if right { 0.9 } else { 0.15 };
        let tokens = vec![
            token("{\"", &[("{\"", 1.0)]),
            token("meaning", &[("meaning", 1.0)]),
            token("_match", &[("_match", 1.0)]),
            token("\":", &[("\":", 1.0)]),
            token(word, &[(" true", p), (" false", 1.0 - p)]),
        ];
        let content = if cut {
            format!("{{\"meaning_match\":{word}")
        } else {
            format!("{{\"meaning_match\":{word}, \"reason\": \"scripted reason\"}}")
        };
        completion(&content, Some(tokens))
    } else if system.contains("integer scale from 0 to 10") {
        let score = if right { 8 } else { 2 };
        let content = if cut {
            format!("{{\"similarity\": {score}")
        } else {
            format!("{{\"similarity\": {score}, \"reason\": \"scripted similarity\"}}")
        };
        completion(&content, None)
    } else if system.contains("into atomic facts") {
        let answer = user.rsplit('\n').next().unwrap_or("");
        completion(
            &json!({"facts": [format!("fact of {answer}")]}).to_string(),
            None,
        )
    } else {
        completion(if right { "yes" } else { "no" }, None)
    }
}

fn base_args<'a>(input: &'a str, output: &'a str, metrics: &'a str) -> Vec<&'a str> {
    vec![
        "score",
        input,
        "-o",
        output,
        "--metrics",
        metrics,
        "--judge-model",
        "scripted",
        "--judge-timeout",
        "5",
        "--quiet",
    ]
}

/// The output of an online run against the scripted judge.
fn online(dir: &Path, metrics: &str) -> (RecordBatch, Value) {
    let server =
        judge_server::start(|req, _| Reply::Status(200, vec![], scripted(&req.body).to_string()));
    let (i, o) = (input(dir), dir.join("online.parquet"));
    let mut args = base_args(i.to_str().unwrap(), o.to_str().unwrap(), metrics);
    args.extend(["--judge-url", &server.url]);
    ok(&refscore(&args));
    (read_parquet(&o), summary(&o))
}

fn api_args<'a>(base: &[&'a str], url: &'a str) -> Vec<&'a str> {
    let mut args = base.to_vec();
    args.extend(["--judge-url", url, "--judge-batch", "api"]);
    args
}

#[test]
fn a_batch_run_gives_the_online_output_through_every_round() {
    let dir = tempfile::tempdir().unwrap();
    let metrics = "meaning_match,similarity,fact_similarity";
    let (expected, online_summary) = online(dir.path(), metrics);
    let server = batch_server::start(|body, _, _| Ok(scripted(body)), |_| "completed", None);
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), metrics);
    let args = api_args(&base, &server.url);
    // The first run submits and exits 75, writing no output.
    let first = refscore(&args);
    let err = fails(&first, 75);
    assert!(err.contains("judge requests submitted in batch batch_1; run the same command with --resume to collect"), "{err}");
    assert!(!o.exists());
    // Rounds: verdicts, similarity scores and facts; then reasons for the
    // failing ones and the facts' checks.
    let runs = resume_until_done(refscore, &args, 12);
    assert!(runs >= 4, "{runs} runs: every round is polled to its end");
    let got = read_parquet(&o);
    assert_same_results(&expected, &got);
    let reasons = texts(&got, "meaning_match_reason");
    assert!(
        reasons
            .iter()
            .any(|r| r.as_deref() == Some("scripted reason")),
        "{reasons:?}"
    );
    assert!(f32s(&got, "meaning_match_p").iter().all(Option::is_some));
    // Every request paid once; as many answers as online calls.
    assert_eq!(server.most_paid(), 1);
    let s = summary(&o);
    let (j, online_j) = (&s["judge"], &online_summary["judge"]);
    for key in [
        "prompt_tokens",
        "completion_tokens",
        "rows_judged",
        "failures",
    ] {
        assert_eq!(j[key], online_j[key], "{key}");
    }
    assert_eq!(j["batch"]["mode"], "api");
    assert_eq!(j["batch"]["batches"], server.batches().len());
    assert_eq!(
        j["batch"]["requests"].as_u64().unwrap() as usize,
        server.answered()
    );
    // Every batch was created as the protocol wants, tagged by the run.
    for b in server.batches() {
        assert_eq!(b.status, "completed");
        assert!(b.metadata["refscore_tag"]
            .as_str()
            .is_some_and(|t| t.len() == 24));
    }
    // --resume on the finished output: nothing to do.
    let mut again = args.clone();
    again.push("--resume");
    ok(&refscore(&again));
}

#[test]
fn judge_batch_wait_polls_in_the_foreground_to_the_end() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, _) = online(dir.path(), "meaning_match");
    let server = batch_server::start(|body, _, _| Ok(scripted(body)), |_| "completed", None);
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    let mut args = api_args(&base, &server.url);
    args.extend(["--judge-batch-wait", "2m"]);
    ok(&refscore(&args));
    assert_same_results(&expected, &read_parquet(&o));
    // Verdicts, then reasons for the failing ones.
    assert_eq!(server.batches().len(), 2);
}

#[test]
fn expired_failed_and_refused_lines_are_sent_once_more_then_left_partial() {
    let dir = tempfile::tempdir().unwrap();
    // Batch 1 expires with rows 4 to 7 unanswered; batch 2 completes;
    // batches 3 and 4 fail whole. One request fails with a 500 the first
    // time it is run (sent again, then answered); one is refused with a
    // 400 (never sent again).
    let overloaded_once = std::sync::atomic::AtomicBool::new(false);
    // Times the refused request was run (lines go out in any order, so it
    // is counted here rather than found by its place in a batch).
    let refused_runs = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let refused_seen = std::sync::Arc::clone(&refused_runs);
    let server = batch_server::start(
        move |body, _, batch| {
            let user = body["messages"][1]["content"].as_str().unwrap_or("");
            let row: usize = user
                .rsplit(' ')
                .next()
                .and_then(|n| n.trim().parse().ok())
                .unwrap_or(0);
            if batch == 0 && row >= 4 {
                return Err((0, Value::Null));
            }
            if user.contains("right answer 2")
                && !overloaded_once.swap(true, std::sync::atomic::Ordering::SeqCst)
            {
                return Err((500, json!({"error": {"message": "scripted overload"}})));
            }
            if user.contains("wrong answer 3") {
                refused_seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                return Err((400, json!({"error": {"message": "scripted refusal"}})));
            }
            Ok(scripted(body))
        },
        |k| match k {
            0 => "expired",
            2 | 3 => "failed",
            _ => "completed",
        },
        None,
    );
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    let args = api_args(&base, &server.url);
    fails(&refscore(&args), 75);
    let mut resumed = args.clone();
    resumed.push("--resume");
    // Four batches: the last run reads the fourth's failure, gives rows 5
    // and 7 up for this invocation and writes the output, but exits 75:
    // the provider failed, not the requests, and rows still lack metrics.
    let mut last = String::new();
    for _ in 0..15 {
        last = fails(&refscore(&resumed), 75);
        if o.exists() {
            break;
        }
    }
    assert!(
        last.contains("2 rows lack judge metrics") && last.contains("no answer after 2 batches"),
        "{last}"
    );
    let got = read_parquet(&o);
    let (status, errors) = (texts(&got, "status"), texts(&got, "error"));
    let verdicts = bools(&got, "meaning_match");
    let batches = server.batches();
    let statuses: Vec<&str> = batches.iter().map(|b| b.status.as_str()).collect();
    assert_eq!(statuses, ["expired", "completed", "failed", "failed"]);
    let lines: Vec<usize> = batches.iter().map(|b| b.request_ids.len()).collect();
    // 8 verdicts; the expired four, the 500 and row 1's reason; then the
    // reasons of rows 5 and 7, twice.
    assert_eq!(lines, [8, 6, 2, 2]);
    for k in 0..8 {
        let e = errors[k].clone().unwrap_or_default();
        match k {
            3 => {
                assert_eq!(status[k].as_deref(), Some("partial"));
                assert!(
                    e.contains("HTTP 400") && e.contains("scripted refusal"),
                    "{e}"
                );
            }
            5 | 7 => {
                assert_eq!(status[k].as_deref(), Some("partial"), "row {k}");
                assert!(
                    e.contains("no answer after 2 batches")
                        && e.contains("scripted validation failure"),
                    "row {k}: {e}"
                );
                assert_eq!(verdicts[k], None);
            }
            _ => {
                assert_eq!(status[k].as_deref(), Some("ok"), "row {k}: {e}");
                assert_eq!(verdicts[k], Some(k % 2 == 0));
            }
        }
    }
    // Answered once each; the refused request was never sent again.
    assert_eq!(server.most_paid(), 1);
    assert_eq!(refused_runs.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The same command again, once the provider is back: the two requests
    // get a fifth batch (which completes) and the run ends 0.
    resume_until_done(refscore, &args, 4);
    let lines: Vec<usize> = server
        .batches()
        .iter()
        .map(|b| b.request_ids.len())
        .collect();
    assert_eq!(lines, [8, 6, 2, 2, 2]);
    let got = read_parquet(&o);
    let status = texts(&got, "status");
    for k in [5, 7] {
        assert_eq!(status[k].as_deref(), Some("ok"), "row {k}");
    }
    assert_eq!(status[3].as_deref(), Some("partial"));
    assert_eq!(server.most_paid(), 1);
    assert_eq!(refused_runs.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[test]
fn a_key_echoed_in_a_batch_result_is_kept_nowhere() {
    let dir = tempfile::tempdir().unwrap();
    let (key, body) = echoed_key();
    let refusal: Value = serde_json::from_str(&body).unwrap();
    let server = batch_server::start(
        move |body, _, _| {
            let user = body["messages"][1]["content"].as_str().unwrap_or("");
            if user.contains("wrong answer 3") {
                return Err((400, refusal.clone()));
            }
            Ok(scripted(body))
        },
        |_| "completed",
        None,
    );
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    let mut args = api_args(&base, &server.url);
    args.extend(["--judge-api-key-env", "REFSCORE_TEST_KEY"]);
    let run = |args: &[&str]| {
        Command::new(bin())
            .args(args)
            .env("REFSCORE_TEST_KEY", &key)
            .output()
            .unwrap()
    };
    fails(&run(&args), 75);
    args.push("--resume");
    let mut done = false;
    for _ in 0..6 {
        let out = run(&args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(&key[..8]), "{stderr}");
        // The run folder (ledger, answers, journal) between rounds too.
        assert_eq!(files_holding(dir.path(), &key, 8), Vec::<PathBuf>::new());
        match out.status.code() {
            Some(0) => {
                done = true;
                break;
            }
            Some(75) => {}
            other => panic!("exit {other:?}: {stderr}"),
        }
    }
    assert!(done, "not done after 6 rounds");
    let got = read_parquet(&o);
    let e = texts(&got, "error")[3].clone().unwrap();
    assert!(
        e.contains("HTTP 400") && e.contains("Incorrect API key provided: ***"),
        "{e}"
    );
    assert_eq!(files_holding(dir.path(), &key, 8), Vec::<PathBuf>::new());
}

#[test]
fn judge_batch_wait_waits_as_long_as_it_is_told() {
    let dir = tempfile::tempdir().unwrap();
    // A batch that never ends.
    let server = batch_server::start(|body, _, _| Ok(scripted(body)), |_| "in_progress", None);
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    let mut args = api_args(&base, &server.url);
    args.extend(["--judge-batch-wait", "5s"]);
    let start = std::time::Instant::now();
    let err = fails(&refscore(&args), 75);
    let took = start.elapsed();
    assert!(
        err.contains("still running") || err.contains("submitted"),
        "{err}"
    );
    assert!(
        took >= Duration::from_secs(5) && took < Duration::from_secs(30),
        "waited {took:?} of 5s"
    );
    // An overflowing wait is a bad value, not a panic.
    let mut args = api_args(&base, &server.url);
    args.extend(["--judge-batch-wait", "500000000000y"]);
    let err = fails(&refscore(&args), 64);
    assert!(err.contains("--judge-batch-wait"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "{err}");
}

#[test]
fn overwrite_cancels_the_discarded_runs_batches_whatever_the_new_run_does() {
    // The new run judges into a folder, online at another server, or not
    // at all: the discarded run's batch is cancelled through its own
    // provider each time.
    for new_run in ["dir", "online", "lexical"] {
        let dir = tempfile::tempdir().unwrap();
        let server = batch_server::start(|body, _, _| Ok(scripted(body)), |_| "completed", None);
        let online = judge_server::start(|req, _| {
            Reply::Status(200, vec![], scripted(&req.body).to_string())
        });
        let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
        let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
        fails(&refscore(&api_args(&base, &server.url)), 75);
        let folder = format!("dir:{}", dir.path().join("box").display());
        let mut over: Vec<&str> = base.iter().copied().filter(|a| *a != "--quiet").collect();
        over.push("--overwrite");
        let code = match new_run {
            "dir" => {
                over.extend(["--judge-batch", &folder]);
                75
            }
            "online" => {
                over.extend(["--judge-url", &online.url]);
                0
            }
            _ => {
                let m = over.iter().position(|a| *a == "meaning_match").unwrap();
                over[m] = "exact_match";
                0
            }
        };
        let out = refscore(&over);
        assert_eq!(
            out.status.code(),
            Some(code),
            "{new_run}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("cancelled judge batch batch_1"),
            "{new_run}: {err}"
        );
        assert_eq!(server.batches()[0].status, "cancelled", "{new_run}");
        assert_eq!(server.batches().len(), 1, "{new_run}");
        assert!(server.called("POST /v1/batches/batch_1/cancel"));
    }
}

#[test]
fn runs_sharing_a_request_folder_never_overwrite_each_others_files() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("box");
    let mode = format!("dir:{}", folder.display());
    // The eight rows in four row groups, so each shard has two.
    let whole = read_parquet(&input(dir.path()));
    let i = dir.path().join("groups.parquet");
    let props = parquet::file::properties::WriterProperties::builder()
        .set_max_row_group_row_count(Some(2))
        .build();
    let mut w = parquet::arrow::ArrowWriter::try_new(
        std::fs::File::create(&i).unwrap(),
        whole.schema(),
        Some(props),
    )
    .unwrap();
    w.write(&whole).unwrap();
    w.close().unwrap();
    // Four shards of one input started together, one folder for all.
    let outs: Vec<PathBuf> = (1..=4)
        .map(|k| dir.path().join(format!("shard{k}.parquet")))
        .collect();
    let shards: Vec<String> = (1..=4).map(|k| format!("{k}/4")).collect();
    let children: Vec<_> = outs
        .iter()
        .zip(&shards)
        .map(|(o, shard)| {
            let mut args = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
            args.extend([
                "--judge-batch",
                &mode,
                "--shard",
                shard,
                "--batch-size",
                "2",
            ]);
            Command::new(bin())
                .args(&args)
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(75),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every row's request is in a file of its own shard: eight requests,
    // four files, none lost to another shard's write.
    let mut ids = std::collections::HashSet::new();
    let mut files = 0;
    for entry in std::fs::read_dir(&folder).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if !name.starts_with("requests-") {
            continue;
        }
        files += 1;
        for line in std::fs::read_to_string(entry.path()).unwrap().lines() {
            let r: Value = serde_json::from_str(line).unwrap();
            ids.insert(r["custom_id"].as_str().unwrap().to_string());
        }
    }
    assert_eq!((files, ids.len()), (4, 8));
}

/// Runs the binary with `args` (again after each exit 75) until the server
/// hangs at the call it was told to, then kills it with SIGKILL there.
fn kill_at_hang(args: &[&str], server: &BatchServer) {
    for _ in 0..10 {
        let mut child = Command::new(bin())
            .args(args)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        loop {
            if server.state.lock().unwrap().faults.hung {
                child.kill().unwrap();
                child.wait().unwrap();
                server.release();
                return;
            }
            if let Some(status) = child.try_wait().unwrap() {
                let out = child.wait_with_output().unwrap();
                assert_eq!(
                    status.code(),
                    Some(75),
                    "{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    panic!("the runs never reached the call");
}

#[test]
fn kill_9_at_each_step_of_a_batch_neither_loses_nor_pays_twice() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, _) = online(dir.path(), "meaning_match");
    // (the call the run is killed in, runs with --resume before it)
    let steps = [
        ("POST /v1/files", 0),
        ("POST /v1/batches", 0),
        ("GET /v1/batches/", 1),
        ("GET /v1/files/", 1),
    ];
    for (step, before) in steps {
        let server =
            batch_server::start(|body, _, _| Ok(scripted(body)), |_| "completed", Some(step));
        let (i, o) = (
            input(dir.path()),
            dir.path().join(format!("k{}.parquet", step.len())),
        );
        let _ = std::fs::remove_file(&o);
        let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
        let args = api_args(&base, &server.url);
        let mut resumed = args.clone();
        resumed.push("--resume");
        let first: &[&str] = if before == 0 {
            &args
        } else {
            fails(&refscore(&args), 75);
            &resumed
        };
        kill_at_hang(first, &server);
        resume_until_done(refscore, &args, 12);
        assert_same_results(&expected, &read_parquet(&o));
        let batches = server.batches();
        assert_eq!(
            batches.len(),
            2,
            "{step}: verdicts and reasons, each one batch: {batches:?}"
        );
        assert_eq!(server.most_paid(), 1, "{step}");
        assert!(batches.iter().all(|b| b.status == "completed"), "{step}");
    }
}

#[test]
fn a_folder_answered_in_vllm_run_batch_format_round_trips() {
    let dir = tempfile::tempdir().unwrap();
    let (expected, _) = online(dir.path(), "meaning_match");
    let folder = dir.path().join("box");
    let (i, o) = (input(dir.path()), dir.path().join("dir.parquet"));
    let mode = format!("dir:{}", folder.display());
    let mut args = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    args.extend(["--judge-batch", &mode]);
    let err = fails(&refscore(&args), 75);
    assert!(err.contains("requests-001.jsonl"), "{err}");
    args.push("--resume");
    // Nothing answered yet: still waiting, nothing written.
    let err = fails(&refscore(&args), 75);
    assert!(
        err.contains("waiting for") && err.contains("results-001.jsonl"),
        "{err}"
    );
    let mut answered = 0;
    for _ in 0..6 {
        // What `vllm run-batch -i requests-NNN.jsonl -o results-NNN.jsonl`
        // writes: one line per request, in its own order.
        for entry in std::fs::read_dir(&folder).unwrap().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let results = folder.join(name.replace("requests-", "results-"));
            if !name.starts_with("requests-") || results.exists() {
                continue;
            }
            let mut lines: Vec<String> = std::fs::read_to_string(entry.path())
                .unwrap()
                .lines()
                .map(|l| {
                    let r: Value = serde_json::from_str(l).unwrap();
                    assert_eq!((r["method"].as_str(), r["url"].as_str()), (Some("POST"), Some("/v1/chat/completions")));
                    assert_eq!(r["body"]["model"], "scripted");
                    json!({"id": format!("vllm-{answered}"), "custom_id": r["custom_id"],
                           "response": {"status_code": 200, "request_id": "vllm-batch", "body": scripted(&r["body"])},
                           "error": null})
                    .to_string()
                })
                .collect();
            lines.reverse();
            answered += 1;
            std::fs::write(&results, lines.join("\n") + "\n").unwrap();
        }
        let out = refscore(&args);
        match out.status.code() {
            Some(0) => break,
            Some(75) => {}
            _ => panic!("{}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    assert_eq!(answered, 2, "verdicts, then reasons");
    assert_same_results(&expected, &read_parquet(&o));
    let s = summary(&o);
    assert_eq!(s["judge"]["batch"]["mode"], mode);
    assert_eq!(s["judge_endpoint"], Value::Null);
}

#[test]
fn overwrite_cancels_the_batches_of_the_run_it_discards() {
    let dir = tempfile::tempdir().unwrap();
    let server = batch_server::start(|body, _, _| Ok(scripted(body)), |_| "completed", None);
    let (i, o) = (input(dir.path()), dir.path().join("batch.parquet"));
    let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    let args = api_args(&base, &server.url);
    fails(&refscore(&args), 75);
    let mut over: Vec<&str> = args.iter().copied().filter(|a| *a != "--quiet").collect();
    over.push("--overwrite");
    let out = refscore(&over);
    let err = fails(&out, 75);
    assert!(err.contains("cancelled judge batch batch_1"), "{err}");
    let batches = server.batches();
    assert_eq!(batches[0].status, "cancelled");
    assert_eq!(batches.len(), 2);
    assert!(server.called("POST /v1/batches/batch_1/cancel"));
}

#[test]
fn judge_batch_flags_are_checked_before_anything_runs() {
    let dir = tempfile::tempdir().unwrap();
    let (i, o) = (input(dir.path()), dir.path().join("x.parquet"));
    let base = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    // `extra` after a judge URL where nothing listens (or none, `url` false).
    let with = |url: bool, extra: &[&str]| {
        let mut a = base.clone();
        if url {
            a.extend(["--judge-url", "http://127.0.0.1:9/v1"]);
        }
        a.extend(extra);
        refscore(&a)
    };
    let e = fails(&with(true, &["--judge-batch", "cloud"]), 64);
    assert!(
        e.contains("--judge-batch") && e.contains("api or dir:PATH"),
        "{e}"
    );
    let e = fails(&with(false, &["--judge-batch", "api"]), 78);
    assert!(e.contains("--judge-url"), "{e}");
    let e = fails(&with(true, &["--judge-batch-wait", "5m"]), 78);
    assert!(e.contains("--judge-batch-wait needs --judge-batch"), "{e}");
    let wait = ["--judge-batch", "api", "--judge-batch-wait", "soon"];
    let e = fails(&with(true, &wait), 64);
    assert!(e.contains("--judge-batch-wait"), "{e}");
    assert!(!o.exists());
    // The Batch API unreachable: a temporary failure, nothing lost.
    let e = fails(&with(true, &["--judge-batch", "api"]), 75);
    assert!(e.contains("Batch API") && e.contains("127.0.0.1:9"), "{e}");
}

/// Answers every request file in `folder` that has no results yet, with
/// `line(request)` per request (None: no line at all for it).
fn answer_folder(folder: &Path, line: &dyn Fn(&Value) -> Option<Value>) -> usize {
    let mut answered = 0;
    for entry in std::fs::read_dir(folder).unwrap().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let results = folder.join(name.replace("requests-", "results-"));
        if !name.starts_with("requests-") || results.exists() {
            continue;
        }
        let text: String = std::fs::read_to_string(entry.path())
            .unwrap()
            .lines()
            .filter_map(|l| line(&serde_json::from_str(l).unwrap()))
            .map(|v| format!("{v}\n"))
            .collect();
        std::fs::write(&results, text).unwrap();
        answered += 1;
    }
    answered
}

#[test]
fn a_folder_whose_results_fail_twice_ends_75_and_a_later_resume_retries() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("box");
    let (i, o) = (input(dir.path()), dir.path().join("dir.parquet"));
    let mode = format!("dir:{}", folder.display());
    let mut args = base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match");
    args.extend(["--judge-batch", &mode, "--judge-reasons", "never"]);
    fails(&refscore(&args), 75);
    args.push("--resume");
    // Twice: a 500 line for rows whose answer is right, no line at all for
    // the others (as a runner that crashed part way leaves it).
    let failing = |r: &Value| -> Option<Value> {
        let user = r["body"]["messages"][1]["content"].as_str().unwrap_or("");
        user.contains("right answer").then(|| {
            json!({"id": "x", "custom_id": r["custom_id"], "error": null,
                   "response": {"status_code": 500, "request_id": "q",
                                "body": {"error": {"message": "scripted crash"}}}})
        })
    };
    for round in 0..2 {
        assert_eq!(answer_folder(&folder, &failing), 1, "round {round}");
        fails(&refscore(&args), 75);
    }
    // The second failure wrote the output, every row lacking its verdict.
    let got = read_parquet(&o);
    assert_eq!(texts(&got, "status"), vec![Some("partial".to_string()); 8]);
    let errors = texts(&got, "error");
    assert!(
        errors
            .iter()
            .flatten()
            .all(|e| e.contains("no answer after 2 batches")),
        "{errors:?}"
    );
    assert!(errors
        .iter()
        .flatten()
        .any(|e| e.contains("scripted crash")));
    // Once the runner works: a third request file, answered, and exit 0.
    let good = |r: &Value| {
        Some(
            json!({"id": "y", "custom_id": r["custom_id"], "error": null,
                    "response": {"status_code": 200, "request_id": "q", "body": scripted(&r["body"])}}),
        )
    };
    for _ in 0..3 {
        answer_folder(&folder, &good);
        let out = refscore(&args);
        if out.status.success() {
            break;
        }
        assert_eq!(
            out.status.code(),
            Some(75),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let got = read_parquet(&o);
    assert_eq!(texts(&got, "status"), vec![Some("ok".to_string()); 8]);
    assert_eq!(bools(&got, "meaning_match")[0], Some(true));
}

/// A Meaning Match verdict cut after its word, with P(true) = `p`.
fn verdict_p(p: f64) -> Value {
    let word = if p >= 0.5 { " true" } else { " false" };
    let tokens = vec![
        token("{\"", &[("{\"", 1.0)]),
        token("meaning", &[("meaning", 1.0)]),
        token("_match", &[("_match", 1.0)]),
        token("\":", &[("\":", 1.0)]),
        token(word, &[(" true", p), (" false", 1.0 - p)]),
    ];
    completion(&format!("{{\"meaning_match\":{word}"), Some(tokens))
}

#[test]
fn a_panel_escalates_through_batches_as_it_does_online() {
    // The small judge is sure of right answers and unsure of the rest; the
    // big one is asked only about those, in a later round.
    let small = |body: &Value| {
        let user = body["messages"][1]["content"].as_str().unwrap_or("");
        verdict_p(if user.contains("right answer") {
            0.9
        } else {
            0.45
        })
    };
    let big = |_: &Value| verdict_p(0.1);
    let dir = tempfile::tempdir().unwrap();
    let i = input(dir.path());
    let panel = |o: &Path, urls: [&str; 2]| -> Vec<String> {
        let mut a: Vec<String> =
            base_args(i.to_str().unwrap(), o.to_str().unwrap(), "meaning_match")
                .into_iter()
                .filter(|w| *w != "--judge-model" && *w != "scripted")
                .map(String::from)
                .collect();
        for (url, model) in urls.iter().zip(["small", "big"]) {
            a.extend(["--judge-url", url, "--judge-model", model].map(String::from));
        }
        a.extend(["--judge-panel", "escalate", "--judge-reasons", "never"].map(String::from));
        a
    };
    let s_online =
        judge_server::start(move |req, _| Reply::Status(200, vec![], small(&req.body).to_string()));
    let b_online =
        judge_server::start(move |req, _| Reply::Status(200, vec![], big(&req.body).to_string()));
    let online = dir.path().join("online.parquet");
    let args = panel(&online, [&s_online.url, &b_online.url]);
    ok(&refscore(
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    ));
    let s_batch = batch_server::start(move |body, _, _| Ok(small(body)), |_| "completed", None);
    let b_batch = batch_server::start(move |body, _, _| Ok(big(body)), |_| "completed", None);
    let batched = dir.path().join("batch.parquet");
    let mut args = panel(&batched, [&s_batch.url, &b_batch.url]);
    args.extend(["--judge-batch", "api"].map(String::from));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    // Each judge numbers its own batches: the message says whose they are.
    let first = fails(&refscore(&args), 75);
    assert!(
        first.contains("judge small: 8 judge requests submitted in "),
        "{first}"
    );
    let runs = resume_until_done(refscore, &args, 12);
    assert!(
        runs >= 1,
        "{runs} runs: the big judge's round follows the small one's"
    );
    assert_same_results(&read_parquet(&online), &read_parquet(&batched));
    assert_eq!((s_batch.most_paid(), b_batch.most_paid()), (1, 1));
    let sources = texts(&read_parquet(&batched), "meaning_match_source");
    assert!(
        sources.iter().any(|s| s.as_deref() == Some("judge:big")),
        "{sources:?}"
    );
    assert!(
        sources.iter().any(|s| s.as_deref() == Some("judge:small")),
        "{sources:?}"
    );
}
