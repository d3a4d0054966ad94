//! Unattended runs through the real binary: kill -9 at seeded random moments
//! then `--resume` gives the uninterrupted output value by value; resume is
//! refused when inputs or settings changed; shards add up to the unsharded
//! run; a failing judge makes the run exit 75 and a resume repairs it; the
//! output may never replace an input; damaged pages are refused.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use common::judge_server::{chat, start, Reply};
use common::*;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

/// Commit at every row group (no less than 20 ms apart) so that runs of a
/// second have something to resume.
const FAST_COMMITS: (&str, &str) = ("REFSCORE_COMMIT_SECONDS", "0.02,1");

/// A deterministic generator (xorshift64*), seeded per test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

const WORDS: &[&str] = &[
    "Paris",
    "the",
    "capital",
    "is",
    "one",
    "hundred",
    "Leonardo",
    "da",
    "Vinci",
    "42",
    "blue",
    "sky",
    "mitochondria",
    "produce",
    "ATP",
    "a",
    "of",
    "France",
    "painted",
    "it",
];

fn sentence(rng: &mut Rng, words: u64) -> String {
    (0..1 + rng.below(words))
        .map(|_| WORDS[rng.below(WORDS.len() as u64) as usize])
        .collect::<Vec<_>>()
        .join(" ")
}

/// Writes `rows` generated rows (id, question, reference, output, category)
/// in row groups of `group` rows.
fn generate(path: &Path, rows: u64, group: usize, seed: u64, words: u64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("question", DataType::Utf8, true),
        Field::new("reference", DataType::Utf8, true),
        Field::new("output", DataType::Utf8, true),
    ]));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(group))
        .build();
    let mut w =
        ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), Some(props)).unwrap();
    let mut rng = Rng(seed);
    let chunk = 50_000u64;
    let mut start = 0;
    while start < rows {
        let n = chunk.min(rows - start);
        let mut q = Vec::with_capacity(n as usize);
        let mut r = Vec::with_capacity(n as usize);
        let mut o = Vec::with_capacity(n as usize);
        for _ in 0..n {
            q.push(Some(sentence(&mut rng, 6)));
            let reference = sentence(&mut rng, words);
            r.push((rng.below(50) != 0).then(|| reference.clone()));
            o.push(Some(if rng.below(3) == 0 {
                reference
            } else {
                sentence(&mut rng, words)
            }));
        }
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(UInt64Array::from_iter_values(start..start + n)) as ArrayRef,
                Arc::new(StringArray::from(q)),
                Arc::new(StringArray::from(r)),
                Arc::new(StringArray::from(o)),
            ],
        )
        .unwrap();
        w.write(&batch).unwrap();
        w.flush().unwrap();
        start += n;
    }
    w.close().unwrap();
}

fn run_dir(output: &Path) -> PathBuf {
    output.with_file_name(format!(
        ".{}.refscore-run",
        output.file_name().unwrap().to_string_lossy()
    ))
}

fn command(args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(bin());
    c.args(args).env_remove("REFSCORE_COMMIT_SECONDS");
    for (k, v) in env {
        c.env(k, v);
    }
    c
}

fn run(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    command(args, env).output().unwrap()
}

/// Starts a run and kills it with SIGKILL after `after`.
fn kill_after(args: &[&str], env: &[(&str, &str)], after: Duration) {
    let mut child = command(args, env)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let _ = child.kill(); // SIGKILL on Unix
    let _ = child.wait();
}

/// Compares two result files value by value, ignoring `skip` columns.
fn assert_same_results(a: &Path, b: &Path, skip: &[&str]) {
    let (x, y) = (read_parquet(a), read_parquet(b));
    assert_eq!(x.schema(), y.schema(), "same schema");
    assert_eq!(x.num_rows(), y.num_rows(), "same rows");
    for (i, field) in x.schema().fields().iter().enumerate() {
        if skip.contains(&field.name().as_str()) {
            continue;
        }
        assert!(
            x.column(i).to_data() == y.column(i).to_data(),
            "column {} differs between {} and {}",
            field.name(),
            a.display(),
            b.display()
        );
    }
}

fn score_args<'a>(input: &'a str, output: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let mut v = vec!["score", input, "-o", output, "--quiet"];
    v.extend_from_slice(extra);
    v
}

/// Kills a run at `moments` seeded random points in its duration, resumes
/// each to completion and compares with the uninterrupted output. Returns
/// how many of the resumed runs reused committed rows.
fn kill_and_resume(
    dir: &Path,
    input: &Path,
    extra: &[&str],
    moments: usize,
    seed: u64,
    skip: &[&str],
) -> usize {
    let input_s = input.to_str().unwrap();
    let clean = dir.join("clean.parquet");
    let t0 = Instant::now();
    ok(&run(
        &score_args(input_s, clean.to_str().unwrap(), extra),
        &[FAST_COMMITS],
    ));
    let duration = t0.elapsed();
    let mut rng = Rng(seed);
    let mut reused = 0;
    for k in 0..moments {
        let out = dir.join(format!("killed-{k}.parquet"));
        let out_s = out.to_str().unwrap();
        // A moment between 5% and 95% of an uninterrupted run.
        let at = duration.mul_f64(0.05 + 0.9 * rng.below(1000) as f64 / 1000.0);
        kill_after(&score_args(input_s, out_s, extra), &[FAST_COMMITS], at);
        if out.exists() {
            // The run finished before the kill: nothing to resume.
            continue;
        }
        if run_dir(&out).exists() {
            // Without --resume the leftover is reported, not reused.
            let left = run(&score_args(input_s, out_s, extra), &[FAST_COMMITS]);
            let err = fails(&left, 78);
            assert!(err.contains("--resume"), "{err}");
        }
        let mut resume = score_args(input_s, out_s, extra);
        resume.push("--resume");
        ok(&run(&resume, &[FAST_COMMITS]));
        assert!(
            !run_dir(&out).exists(),
            "the run folder is removed when done"
        );
        let hidden: Vec<String> = listing(dir)
            .into_iter()
            .filter(|n| n.starts_with('.'))
            .collect();
        assert!(hidden.is_empty(), "temporaries left behind: {hidden:?}");
        assert_same_results(&clean, &out, skip);
        let s = summary(&out);
        assert_eq!(
            s["rows"],
            summary(&clean)["rows"],
            "the summary covers every row"
        );
        assert_eq!(
            s["metrics"],
            summary(&clean)["metrics"],
            "and the same figures"
        );
        if s["rows_resumed"].as_u64().unwrap_or(0) > 0 {
            reused += 1;
        }
    }
    reused
}

#[test]
fn kill_9_of_a_million_row_lexical_run_then_resume_gives_the_same_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.parquet");
    generate(&input, 1_200_000, 40_000, 7, 8);
    let reused = kill_and_resume(
        dir.path(),
        &input,
        &["--metrics", "lexical", "--keep", "question"],
        10,
        0x5EED,
        &[],
    );
    assert!(
        reused >= 3,
        "only {reused} of 10 kills left committed rows to resume"
    );
}

#[test]
fn kill_9_of_an_embedding_run_then_resume_gives_the_same_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("emb.parquet");
    generate(&input, 1_500, 100, 11, 6);
    let reused = kill_and_resume(
        dir.path(),
        &input,
        &[
            "--metrics",
            "cosine,bertscore,token_f1",
            "--batch-size",
            "50",
        ],
        3,
        0xE3B,
        &[],
    );
    assert!(reused >= 1, "no kill left committed rows to resume");
}

fn mm_server(delay: Duration) -> common::judge_server::Server {
    start(move |req, _| {
        let verdict = req.candidate().len() % 2 == 0;
        Reply::After(
            delay,
            Box::new(chat(&format!(
                r#"{{"meaning_match": {verdict}, "reason": "scripted"}}"#
            ))),
        )
    })
}

#[test]
fn kill_9_of_a_judge_run_then_resume_gives_the_same_output_without_paying_twice() {
    let server = mm_server(Duration::from_millis(15));
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("judge.parquet");
    generate(&input, 400, 40, 13, 5);
    let url = server.url.clone();
    let extra = [
        "--metrics",
        "meaning_match,token_f1",
        "--judge-url",
        url.as_str(),
        "--judge-model",
        "scripted",
        "--batch-size",
        "10",
        "--judge-concurrency",
        "2",
        // One call per judged row (what the call counts below assume).
        "--judge-reasons",
        "always",
    ];
    let before = server.requests().len();
    let reused = kill_and_resume(dir.path(), &input, &extra, 3, 0x1D6E, &["judge_latency_ms"]);
    assert!(reused >= 1, "no kill left committed rows to resume");
    // Each of the 4 runs (clean + 3 killed-and-resumed) asks each distinct
    // question at most once, plus what was in flight at each kill (answers
    // are journaled as they arrive; 2 requests at a time).
    let asked = server
        .requests()
        .iter()
        .skip(before)
        .filter(|r| r.kind() == "meaning_match")
        .count();
    let clean = read_parquet(&dir.path().join("clean.parquet"));
    let judged = texts(&clean, "meaning_match_source")
        .iter()
        .filter(|s| s.as_deref() == Some("judge"))
        .count();
    assert!(
        asked <= 4 * judged + 3 * 2,
        "{asked} judge calls for {judged} judged rows in 4 runs: answers were paid twice"
    );
}

/// A run of `extra` over 300,000 generated rows (`seed`), killed ever later
/// until it leaves committed progress behind: the folder, input and output.
fn interrupted_run(seed: u64, extra: &[&str]) -> (tempfile::TempDir, PathBuf, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    generate(&input, 300_000, 10_000, seed, 8);
    let output = dir.path().join("o.parquet");
    let args = score_args(input.to_str().unwrap(), output.to_str().unwrap(), extra);
    let committed = || {
        let folder = run_dir(&output);
        folder.exists() && listing(&folder).iter().any(|n| n.starts_with("part-"))
    };
    let mut after = Duration::from_millis(60);
    while !committed() || output.exists() {
        // A run killed before its first commit leaves a folder to discard.
        let _ = std::fs::remove_dir_all(run_dir(&output));
        let _ = std::fs::remove_file(&output);
        kill_after(&args, &[FAST_COMMITS], after);
        after += Duration::from_millis(20);
        assert!(after < Duration::from_secs(10), "could not interrupt a run");
    }
    (dir, input, output)
}

#[test]
fn resume_is_refused_when_options_or_inputs_change_and_leftovers_are_reported() {
    let (_dir, input, o) = interrupted_run(3, &["--metrics", "lexical"]);
    let (i, o_s) = (input.to_str().unwrap(), o.to_str().unwrap());
    let args = score_args(i, o_s, &["--metrics", "lexical"]);
    // Without --resume: reported, not reused, not deleted.
    let err = fails(&run(&args, &[]), 78);
    assert!(err.contains("use --resume, or --overwrite"), "{err}");
    assert!(run_dir(&o).exists());
    // A changed option.
    let mut changed = score_args(i, o_s, &["--metrics", "token_f1", "--resume"]);
    let err = fails(&run(&changed, &[]), 78);
    assert!(
        err.contains("--resume refused") && err.contains("--metrics differs"),
        "{err}"
    );
    changed = score_args(
        i,
        o_s,
        &[
            "--metrics",
            "lexical",
            "--threshold",
            "token_f1=0.9",
            "--resume",
        ],
    );
    let err = fails(&run(&changed, &[]), 78);
    assert!(err.contains("threshold"), "{err}");
    // A changed input file.
    generate(&input, 300_000, 10_000, 4, 8);
    let mut resume = args.clone();
    resume.push("--resume");
    let err = fails(&run(&resume, &[]), 78);
    assert!(err.contains("changed"), "{err}");
    assert!(!o.exists(), "no output was written");
    // --overwrite discards the leftover and starts again.
    let mut over = args.clone();
    over.push("--overwrite");
    ok(&run(&over, &[]));
    assert!(!run_dir(&o).exists());
    // --resume of a finished run: nothing to do, exit 0.
    ok(&run(&resume, &[]));
}

/// What the release before run record format 2 wrote as the record of
/// `--metrics exact_match,token_f1` over `inputs` of [`generate`]'s columns
/// (as a run folder of that binary holds it), with `lexical` as its lexical
/// selection: each lexical metric flagged by its position in the registry,
/// every built-in metric's default threshold.
fn format_1_record(inputs: &serde_json::Value, lexical: &str) -> serde_json::Value {
    let thresholds = [
        ("bertscore_f1", 0.8),
        ("bertscore_precision", 0.8),
        ("bertscore_recall", 0.8),
        ("contains_match", 1.0),
        ("contains_match_norm", 1.0),
        ("cosine", 0.7),
        ("cross_score", 0.5),
        ("exact_match", 1.0),
        ("exact_match_norm", 1.0),
        ("fact_similarity", 0.5),
        ("meaning_match", 1.0),
        ("nli_contradiction", 0.5),
        ("nli_equivalence", 0.5),
        ("nli_precision", 0.5),
        ("nli_recall", 0.5),
        ("similarity", 0.7),
        ("token_f1", 0.5),
    ];
    serde_json::json!({
        "inputs": inputs,
        "shard": null,
        "thresholds": thresholds,
        "settings": {
            "batch_size": 32768,
            "columns": ["id", "question", "reference", "output"],
            "keep": [],
            "lexical": lexical,
        },
    })
}

#[test]
fn a_run_interrupted_before_an_upgrade_resumes_when_its_settings_are_equal() {
    let chosen = ["exact_match", "token_f1"];
    let extra = ["--metrics", "exact_match,token_f1"];
    let (dir, input, o) = interrupted_run(5, &extra);
    let (i, o_s) = (input.to_str().unwrap(), o.to_str().unwrap());
    let args = score_args(i, o_s, &extra);
    // The record names the chosen metrics, and no other metric refscore
    // has: one added to it later changes nothing of this run.
    let manifest_path = run_dir(&o).join("run.json");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&manifest_path).unwrap()).unwrap();
    let record = &manifest["fingerprint"];
    assert_eq!(record["metrics"], serde_json::json!(chosen));
    let text = record.to_string();
    for m in refscore_core::metric::BUILTIN.iter() {
        let quoted = format!("\"{}\"", m.name);
        assert!(
            chosen.contains(&m.name.as_str()) || !text.contains(&quoted),
            "the record names {}, which the run does not compute: {text}",
            m.name
        );
    }
    // The same run as the release before recorded it.
    let write_format_1 = |lexical: &str| {
        let mut m = manifest.clone();
        m["fingerprint"] = format_1_record(&record["inputs"], lexical);
        std::fs::write(&manifest_path, m.to_string()).unwrap();
    };
    let mut resume = args.clone();
    resume.push("--resume");
    // Flags of a registry this version does not know: refused in one line.
    write_format_1("Selection([true, false, false, false, true, false])");
    let err = fails(&run(&resume, &[]), 78);
    assert!(
        err.contains("recorded by an older refscore") && err.trim().lines().count() == 1,
        "{err}"
    );
    write_format_1("Selection([true, false, false, false, true])");
    // Another selection is another run.
    let other = score_args(i, o_s, &["--metrics", "token_f1", "--resume"]);
    let err = fails(&run(&other, &[]), 78);
    assert!(
        err.contains("--metrics differs (exact_match,token_f1 then, token_f1 now)"),
        "{err}"
    );
    // The same settings resume it, keeping its committed rows (a threshold
    // of a metric the run does not compute is none of its settings).
    let mut same = resume.clone();
    same.extend(["--threshold", "cosine=0.9"]);
    ok(&run(&same, &[FAST_COMMITS]));
    assert!(summary(&o)["rows_resumed"].as_u64().unwrap() > 0);
    let clean = dir.path().join("clean.parquet");
    ok(&run(&score_args(i, clean.to_str().unwrap(), &extra), &[]));
    assert_same_results(&clean, &o, &[]);
}

/// Three files of several row groups each.
fn multi_file_input(dir: &Path) -> PathBuf {
    let d = dir.join("data");
    std::fs::create_dir(&d).unwrap();
    generate(&d.join("a.parquet"), 25_000, 4_000, 21, 8);
    generate(&d.join("b.parquet"), 7_000, 7_000, 22, 8);
    generate(&d.join("c.parquet"), 40_000, 3_000, 23, 8);
    d
}

#[test]
fn three_shards_add_up_to_the_unsharded_run() {
    let dir = tempfile::tempdir().unwrap();
    let data = multi_file_input(dir.path());
    let data_s = data.to_str().unwrap();
    let whole = dir.path().join("whole.parquet");
    let args = ["--metrics", "lexical", "--threshold", "token_f1=0.3"];
    ok(&run(
        &score_args(data_s, whole.to_str().unwrap(), &args),
        &[],
    ));
    let mut shard_files = Vec::new();
    for k in 1..=3 {
        let out = dir.path().join(format!("shard-{k}.parquet"));
        let spec = format!("{k}/3");
        let mut a = score_args(data_s, out.to_str().unwrap(), &args);
        a.extend_from_slice(&["--shard", spec.as_str()]);
        ok(&run(&a, &[]));
        shard_files.push(out);
    }
    // The shards in order hold exactly the unsharded rows, value by value.
    let whole_rows = read_parquet(&whole);
    let parts: Vec<RecordBatch> = shard_files.iter().map(|p| read_parquet(p)).collect();
    assert!(
        parts.iter().all(|p| p.num_rows() > 0),
        "every shard has rows"
    );
    let joined = arrow::compute::concat_batches(&whole_rows.schema(), &parts).unwrap();
    assert_eq!(joined, whole_rows);
    // Merged summary = unsharded summary (counts, means, medians, pass rates).
    let merged = dir.path().join("merged.json");
    let mut m = vec!["merge-summaries", "-o", merged.to_str().unwrap(), "--quiet"];
    // In another order than the shards', on purpose.
    let names: Vec<String> = [3, 1, 2]
        .iter()
        .map(|k| format!("{}.summary.json", shard_files[k - 1].display()))
        .collect();
    m.extend(names.iter().map(String::as_str));
    ok(&run(&m, &[]));
    let merged: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&merged).unwrap()).unwrap();
    let whole_s = summary(&whole);
    for key in ["rows", "rows_ok", "rows_partial", "rows_error", "metrics"] {
        assert_eq!(merged[key], whole_s[key], "{key}");
    }
    // Shards of another run do not merge.
    let other = dir.path().join("other.parquet");
    ok(&run(
        &score_args(data_s, other.to_str().unwrap(), &["--metrics", "token_f1"]),
        &[],
    ));
    let other_summary = format!("{}.summary.json", other.display());
    let err = fails(
        &run(&["merge-summaries", &names[0], &other_summary], &[]),
        78,
    );
    assert!(err.contains("not a shard of the same run"), "{err}");
}

#[test]
fn an_unreachable_judge_fails_before_any_work_with_exit_75() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    generate(&input, 20, 20, 1, 4);
    // A port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("http://127.0.0.1:{port}/v1");
    let out = dir.path().join("o.parquet");
    let args = score_args(
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        &[
            "--metrics",
            "meaning_match",
            "--judge-url",
            &url,
            "--judge-timeout",
            "2",
        ],
    );
    let err = fails(&run(&args, &[]), 75);
    assert!(err.contains("127.0.0.1"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!out.exists() && !run_dir(&out).exists(), "no output at all");
}

#[test]
fn judge_failures_exit_75_and_resume_repairs_them_to_the_clean_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    generate(&input, 120, 30, 5, 5);
    let i = input.to_str().unwrap();
    // One endpoint whose failures can be switched on: every third judge
    // call then fails with a 500.
    let failing = Arc::new(AtomicBool::new(false));
    let calls = Arc::new(AtomicUsize::new(0));
    let (f2, c2) = (Arc::clone(&failing), Arc::clone(&calls));
    let server = start(move |req, _| {
        if req.kind() != "meaning_match" {
            return chat("{}");
        }
        let n = c2.fetch_add(1, Ordering::SeqCst);
        if f2.load(Ordering::SeqCst) && n % 3 == 2 {
            Reply::Status(500, vec![], "{\"error\":\"overloaded\"}".into())
        } else {
            let verdict = req.candidate().len() % 2 == 0;
            chat(&format!(
                r#"{{"meaning_match": {verdict}, "reason": "scripted"}}"#
            ))
        }
    });
    let judge = [
        "--metrics",
        "meaning_match,token_f1",
        "--judge-url",
        server.url.as_str(),
        "--judge-model",
        "scripted",
        "--judge-retries",
        "0",
        "--judge-timeout",
        "2",
        "--batch-size",
        "16",
        // One call per judged row (what the call counts below assume).
        "--judge-reasons",
        "always",
    ];
    let clean = dir.path().join("clean.parquet");
    ok(&run(&score_args(i, clean.to_str().unwrap(), &judge), &[]));

    failing.store(true, Ordering::SeqCst);
    let out = dir.path().join("o.parquet");
    let o = out.to_str().unwrap();
    let err = fails(&run(&score_args(i, o, &judge), &[]), 75);
    assert!(
        err.contains("rows lack judge metrics") && err.contains("--resume"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(out.exists(), "everything else is written");
    let failed = texts(&read_parquet(&out), "status")
        .iter()
        .filter(|s| s.as_deref() == Some("partial"))
        .count();
    assert!(failed > 0);
    assert_eq!(
        summary(&out)["judge"]["rows_lacking_judge_metrics"],
        failed as u64
    );

    // A user who accepts some failures gets exit 0.
    let tolerant = dir.path().join("tolerant.parquet");
    let mut t = score_args(i, tolerant.to_str().unwrap(), &judge);
    t.extend_from_slice(&["--max-judge-failures", "1000"]);
    ok(&run(&t, &[]));

    // The judge is back: the same command with --resume judges only the
    // rows that failed and gives the clean run's output.
    failing.store(false, Ordering::SeqCst);
    let before = calls.load(Ordering::SeqCst);
    let mut resume = score_args(i, o, &judge);
    resume.push("--resume");
    ok(&run(&resume, &[]));
    let asked = calls.load(Ordering::SeqCst) - before;
    assert_eq!(asked, failed, "only the failed rows were judged again");
    assert!(!run_dir(&out).exists());
    assert_same_results(&clean, &out, &["judge_latency_ms"]);
}

#[test]
fn the_output_may_never_be_an_input_file() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("x.parquet");
    generate(&input, 100, 100, 2, 4);
    let before = std::fs::read(&input).unwrap();
    let i = input.to_str().unwrap();
    let err = fails(
        &run(
            &score_args(i, i, &["--overwrite", "--metrics", "lexical"]),
            &[],
        ),
        78,
    );
    assert!(err.contains("one of the input files"), "{err}");
    // Through another path to the same file, and through a folder input.
    let link = dir.path().join("link.parquet");
    std::fs::hard_link(&input, &link).unwrap();
    let d = dir.path().to_str().unwrap();
    fails(
        &run(
            &score_args(i, link.to_str().unwrap(), &["--overwrite"]),
            &[],
        ),
        78,
    );
    fails(&run(&score_args(d, i, &["--overwrite"]), &[]), 78);
    assert_eq!(
        std::fs::read(&input).unwrap(),
        before,
        "the input is untouched"
    );
}

#[test]
fn overwrite_never_deletes_a_run_another_process_is_writing() {
    let server = mm_server(Duration::from_millis(40));
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    generate(&input, 200, 50, 17, 5);
    let out = dir.path().join("o.parquet");
    let args = score_args(
        input.to_str().unwrap(),
        out.to_str().unwrap(),
        &[
            "--metrics",
            "meaning_match",
            "--judge-url",
            server.url.as_str(),
            "--batch-size",
            "10",
        ],
    );
    let mut first = command(&args, &[])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !run_dir(&out).join("run.json").exists() {
        assert!(Instant::now() < deadline, "the first run never started");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut second = args.clone();
    second.push("--overwrite");
    let err = fails(&run(&second, &[]), 75);
    assert!(err.contains("another refscore process"), "{err}");
    let status = first.wait().unwrap();
    assert!(
        status.success(),
        "the first run finished undisturbed: {status:?}"
    );
    assert_eq!(read_parquet(&out).num_rows(), 200);
}
