//! Helpers shared by the integration tests: write real Parquet files with
//! the arrow writer, run the real `refscore` binary, read its output back.

#![allow(dead_code)]

// The scripted servers live in one crate, shared with the judge crate's
// own tests.
#[allow(unused_imports)]
pub use refscore_test_servers::{
    anthropic as anthropic_server, openai as judge_server, openai_batch as batch_server,
};

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::compute::concat_batches;
use arrow::datatypes::{Field, Schema};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;

/// A tiny seeded model of tests/fixtures/models, by folder name, as a
/// path for `--model` or `--cross-model`.
pub fn tiny_model(name: &str) -> String {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/models")
        .join(name)
        .to_str()
        .expect("a UTF-8 path")
        .to_string()
}

/// Path of the binary under test.
pub fn bin() -> &'static str {
    env!("CARGO_BIN_EXE_refscore")
}

/// Runs `refscore` with `args`, never inheriting a terminal.
pub fn refscore(args: &[&str]) -> Output {
    Command::new(bin())
        .args(args)
        .output()
        .expect("run refscore")
}

/// Runs `refscore score` on `input` writing `output`, quietly.
pub fn score(input: &Path, output: &Path, extra: &[&str]) -> Output {
    score_with_env(input, output, extra, &[])
}

/// [`score`] with `env` set for the process (e.g. `REFSCORE_KERNELS`).
pub fn score_with_env(input: &Path, output: &Path, extra: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(bin())
        .args([
            "score",
            input.to_str().unwrap(),
            "-o",
            output.to_str().unwrap(),
            "--quiet",
        ])
        .args(extra)
        .envs(env.iter().copied())
        .output()
        .expect("run refscore")
}

/// Scores `(id, reference, output)` rows, written to a Parquet file, with
/// the embedding metrics of `model` plus `extra` flags, under `env`: the
/// process output and, when it succeeded, the scores and the summary.
pub fn score_embedding(
    rows: &[(&str, &str, &str)],
    model: &Path,
    extra: &[&str],
    env: &[(&str, &str)],
) -> (Output, Option<(RecordBatch, serde_json::Value)>) {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rows.parquet");
    let col = |k: usize| {
        let values: Vec<&str> = rows.iter().map(|r| [r.0, r.1, r.2][k]).collect();
        Arc::new(StringArray::from(values)) as ArrayRef
    };
    write_parquet(
        &input,
        vec![("id", col(0)), ("reference", col(1)), ("output", col(2))],
    );
    let out = dir.path().join("scores.parquet");
    let model = model.to_str().unwrap();
    let mut args = vec!["--metrics", "embedding", "--model", model];
    args.extend_from_slice(extra);
    let output = score_with_env(&input, &out, &args, env);
    let scores = output
        .status
        .success()
        .then(|| (read_parquet(&out), summary(&out)));
    (output, scores)
}

/// Asserts success and returns stdout.
pub fn ok(out: &Output) -> String {
    assert!(
        out.status.success(),
        "refscore failed ({:?}):\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Asserts failure with `code` and returns stderr.
pub fn fails(out: &Output, code: i32) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(code),
        "expected exit {code}; stderr: {stderr}"
    );
    stderr
}

/// Writes columns to a Parquet file.
pub fn write_parquet(path: &Path, columns: Vec<(&str, ArrayRef)>) {
    let fields: Vec<Field> = columns
        .iter()
        .map(|(n, a)| Field::new(*n, a.data_type().clone(), true))
        .collect();
    let schema = Arc::new(Schema::new(fields));
    let batch = RecordBatch::try_new(
        schema.clone(),
        columns.into_iter().map(|(_, a)| a).collect(),
    )
    .unwrap();
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema, None).unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

/// A Utf8 column from optional strings.
pub fn strs(values: &[Option<&str>]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

/// A Utf8 column from strings.
pub fn s(values: &[&str]) -> ArrayRef {
    Arc::new(StringArray::from(values.to_vec()))
}

/// Reads a whole Parquet file into one batch.
pub fn read_parquet(path: &Path) -> RecordBatch {
    let r = ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap()).unwrap();
    let schema = r.schema().clone();
    let batches: Vec<RecordBatch> = r.build().unwrap().map(|b| b.unwrap()).collect();
    concat_batches(&schema, &batches).unwrap()
}

/// A Float32 column of a result as `Option<f32>`s.
pub fn f32s(batch: &RecordBatch, name: &str) -> Vec<Option<f32>> {
    let col = batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let a = col
        .as_any()
        .downcast_ref::<arrow::array::Float32Array>()
        .expect("Float32");
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i)))
        .collect()
}

/// A Utf8 column of a result as `Option<String>`s.
pub fn texts(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
    let col = batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let a = arrow::compute::cast(col, &arrow::datatypes::DataType::Utf8).unwrap();
    let a = a.as_any().downcast_ref::<StringArray>().unwrap();
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i).to_string()))
        .collect()
}

/// Files in a directory (names), to check that nothing was left behind.
pub fn listing(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// The bundled example dataset.
pub fn example() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/qa.parquet")
}

/// A Boolean column of a result as `Option<bool>`s.
pub fn bools(batch: &RecordBatch, name: &str) -> Vec<Option<bool>> {
    let col = batch
        .column_by_name(name)
        .unwrap_or_else(|| panic!("no column {name}"));
    let a = col
        .as_any()
        .downcast_ref::<arrow::array::BooleanArray>()
        .expect("Boolean");
    (0..a.len())
        .map(|i| a.is_valid(i).then(|| a.value(i)))
        .collect()
}

/// The summary JSON written beside a result file.
/// The column names of a result, in order.
pub fn column_names(batch: &RecordBatch) -> Vec<String> {
    batch
        .schema()
        .fields()
        .iter()
        .map(|f| f.name().clone())
        .collect()
}

pub fn summary(output: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(format!("{}.summary.json", output.display())).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// The CPU kernel paths `REFSCORE_KERNELS` can force, widest first, with
/// the CPU features each is compiled for (as `KernelPath::features` lists
/// them).
pub const KERNEL_PATHS: [(&str, &[&str]); 3] = [
    ("avx512", &["avx512f", "avx512vl", "avx2", "fma"]),
    ("avx2", &["avx2", "fma"]),
    ("portable", &[]),
];

/// Whether the CPU running the tests has a feature (always false off x86-64).
pub fn cpu_has(feature: &str) -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        match feature {
            "avx512f" => std::is_x86_feature_detected!("avx512f"),
            "avx512vl" => std::is_x86_feature_detected!("avx512vl"),
            "avx2" => std::is_x86_feature_detected!("avx2"),
            "fma" => std::is_x86_feature_detected!("fma"),
            other => panic!("unknown feature {other}"),
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        let _ = feature;
        false
    }
}

/// Eight rows for the judge tests: four right answers, four wrong, none
/// the rules decide, so every one needs the judge.
pub fn eight_judged_rows(dir: &Path) -> PathBuf {
    let p = dir.join("in.parquet");
    let q: Vec<String> = (0..8).map(|k| format!("question {k}")).collect();
    let r: Vec<String> = (0..8).map(|k| format!("the reference {k}")).collect();
    let o: Vec<String> = (0..8)
        .map(|k| {
            if k % 2 == 0 {
                format!("the right answer {k}")
            } else {
                format!("a wrong answer {k}")
            }
        })
        .collect();
    let strs = |v: &[String]| s(&v.iter().map(String::as_str).collect::<Vec<_>>());
    write_parquet(
        &p,
        vec![
            ("question", strs(&q)),
            ("reference", strs(&r)),
            ("output", strs(&o)),
        ],
    );
    p
}

/// Runs `args` and `--resume` through `run` until it exits 0 (at most
/// `rounds` times, each other exit being 75, as judge batches end runs);
/// the number of runs.
pub fn resume_until_done(run: fn(&[&str]) -> Output, args: &[&str], rounds: usize) -> usize {
    let mut with_resume: Vec<&str> = args.to_vec();
    with_resume.push("--resume");
    for k in 1..=rounds {
        let out = run(&with_resume);
        match out.status.code() {
            Some(0) => return k,
            Some(75) => {}
            _ => panic!("run {k}: {}", String::from_utf8_lossy(&out.stderr)),
        }
    }
    panic!("not done after {rounds} runs");
}

/// Two result tables are equal in every column but the call latency (the
/// judge's, which differs between any two runs).
pub fn assert_same_results(a: &RecordBatch, b: &RecordBatch) {
    let names = column_names(a);
    assert_eq!(names, column_names(b));
    for (k, name) in names.iter().enumerate() {
        if name != "judge_latency_ms" {
            assert_eq!(
                a.column(k).to_data(),
                b.column(k).to_data(),
                "column {name}"
            );
        }
    }
}

/// A 96-character API key a hostile gateway echoes back, and the body it
/// echoes it in: the key starts 49 characters in, so it straddles a cut at
/// 120 characters.
pub fn echoed_key() -> (String, String) {
    let key = format!("sk-proj-{}", "Zq7Xw3Vb9Nm2".repeat(8));
    let key = key[..96].to_string();
    let body = format!(
        r#"{{"error":{{"message":"Incorrect API key provided: {key}. You can find your API key at the dashboard."}}}}"#
    );
    (key, body)
}

/// Every file under `dir` (recursively) that holds the first `n` bytes of
/// `secret`: a key must never be written, whole or in part.
pub fn files_holding(dir: &Path, secret: &str, n: usize) -> Vec<PathBuf> {
    let needle = &secret.as_bytes()[..n];
    let mut found = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if let Ok(bytes) = std::fs::read(&p) {
                if bytes.windows(n).any(|w| w == needle) {
                    found.push(p);
                }
            }
        }
    }
    found
}

/// The `(id, reference, output)` of fixture lines (JSON objects with those
/// keys), as [`score_embedding`] takes rows.
pub fn fixture_pairs<'a>(lines: &[&'a serde_json::Value]) -> Vec<(&'a str, &'a str, &'a str)> {
    lines
        .iter()
        .map(|v| {
            (
                v["id"].as_str().unwrap(),
                v["reference"].as_str().unwrap(),
                v["output"].as_str().unwrap(),
            )
        })
        .collect()
}
