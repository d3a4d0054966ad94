//! Parity with the reference implementations (docs/metrics.md#embedding-metrics): the real
//! all-MiniLM-L6-v2 model through the real binary must reproduce
//! sentence-transformers' cosine and bert_score's P/R/F1 (idf off and on),
//! within 1e-4 on every row of tests/fixtures/parity.jsonl, which
//! scripts/fixtures/make-parity-fixture.py produced with those libraries.

mod common;

use common::*;
use std::path::{Path, PathBuf};

const TOLERANCE: f32 = 1e-4;

struct Row {
    id: String,
    reference: String,
    output: String,
    values: serde_json::Value,
}

fn fixture() -> Vec<Row> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/parity.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            Row {
                id: v["id"].as_str().unwrap().to_string(),
                reference: v["reference"].as_str().unwrap().to_string(),
                output: v["output"].as_str().unwrap().to_string(),
                values: v,
            }
        })
        .collect()
}

fn model_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    assert!(
        dir.join("model.safetensors").is_file(),
        "the real model is required: run scripts/fetch-model.sh (scripts/test.sh does)"
    );
    dir
}

fn run(rows: &[Row], extra: &[&str]) -> arrow::array::RecordBatch {
    let out = run_with_env(rows, extra, &[]);
    ok(&out.0);
    out.1.expect("scores written")
}

/// Scores `rows` with extra environment variables; the process output and,
/// when it succeeded, the scores.
fn run_with_env(
    rows: &[Row],
    extra: &[&str],
    env: &[(&str, &str)],
) -> (std::process::Output, Option<arrow::array::RecordBatch>) {
    let rows: Vec<(&str, &str, &str)> = rows
        .iter()
        .map(|r| (r.id.as_str(), r.reference.as_str(), r.output.as_str()))
        .collect();
    let (output, scores) = score_embedding(&rows, &model_dir(), extra, env);
    (output, scores.map(|s| s.0))
}

fn compare(rows: &[Row], batch: &arrow::array::RecordBatch, pairs: &[(&str, &str)]) {
    let status = texts(batch, "status");
    let mut checked = 0;
    let mut worst = (0f32, String::new());
    for (column, key) in pairs {
        let got = f32s(batch, column);
        for (i, row) in rows.iter().enumerate() {
            if row.reference.trim().is_empty() {
                // An empty reference cannot be scored: an explicit error, never a number.
                assert_eq!(status[i].as_deref(), Some("error"), "{}", row.id);
                assert_eq!(got[i], None, "{}", row.id);
                continue;
            }
            let want = row.values[*key].as_f64().unwrap() as f32;
            let have = got[i].unwrap_or_else(|| panic!("{}: {column} is null", row.id));
            let diff = (have - want).abs();
            if diff > worst.0 {
                worst = (
                    diff,
                    format!("{} {column}: refscore {have} vs reference {want}", row.id),
                );
            }
            checked += 1;
        }
    }
    assert!(
        worst.0 <= TOLERANCE,
        "worst difference {} > {TOLERANCE}: {}",
        worst.0,
        worst.1
    );
    assert!(
        checked >= 300 * pairs.len(),
        "only {checked} values compared"
    );
    eprintln!(
        "compared {checked} values; worst difference {:.2e} ({})",
        worst.0, worst.1
    );
}

#[test]
fn cosine_and_bertscore_match_the_reference_libraries() {
    let rows = fixture();
    assert!(rows.len() >= 300);
    let batch = run(&rows, &[]);
    compare(
        &rows,
        &batch,
        &[
            ("cosine", "cosine"),
            ("bertscore_precision", "bertscore_precision"),
            ("bertscore_recall", "bertscore_recall"),
            ("bertscore_f1", "bertscore_f1"),
        ],
    );
}

#[test]
fn idf_weighted_bertscore_matches_the_reference_library() {
    let rows = fixture();
    let batch = run(&rows, &["--idf"]);
    compare(
        &rows,
        &batch,
        &[
            ("bertscore_precision", "bertscore_precision_idf"),
            ("bertscore_recall", "bertscore_recall_idf"),
            ("bertscore_f1", "bertscore_f1_idf"),
        ],
    );
}

#[test]
fn scores_do_not_depend_on_batch_composition() {
    // The same rows scored in small record batches with a tiny cache (so texts
    // are re-embedded in different padded company) give the same numbers.
    let rows = fixture();
    let a = run(&rows, &[]);
    let b = run(&rows, &["--batch-size", "7", "--embed-cache-mb", "0"]);
    for col in ["cosine", "bertscore_f1"] {
        let (x, y) = (f32s(&a, col), f32s(&b, col));
        for (i, (p, q)) in x.iter().zip(&y).enumerate() {
            match (p, q) {
                (Some(p), Some(q)) => assert!((p - q).abs() < 1e-5, "row {i} {col}: {p} vs {q}"),
                (None, None) => {}
                _ => panic!("row {i} {col}: {p:?} vs {q:?}"),
            }
        }
    }
}

/// Every CPU kernel path the machine can run (`REFSCORE_KERNELS`) gives the
/// same scores, bit for bit (they round alike: see kernels/avx512.rs), so
/// the AVX2 and portable paths are tested on AVX-512 machines too; a path
/// the CPU cannot run is a clear error.
#[test]
fn forced_kernel_paths_agree() {
    let rows = fixture();
    let columns = [
        "cosine",
        "bertscore_precision",
        "bertscore_recall",
        "bertscore_f1",
    ];
    let mut first: Option<(&str, arrow::array::RecordBatch)> = None;
    for (path, features) in KERNEL_PATHS {
        let missing: Vec<&str> = features.iter().copied().filter(|f| !cpu_has(f)).collect();
        let (output, batch) = run_with_env(&rows, &[], &[("REFSCORE_KERNELS", path)]);
        if !missing.is_empty() {
            eprintln!(
                "skipping the {path} kernels: this CPU lacks {}",
                missing.join(", ")
            );
            let err = fails(&output, 78);
            assert!(
                err.contains(&format!("REFSCORE_KERNELS={path}"))
                    && err.contains(&missing.join(", ")),
                "{err}"
            );
            continue;
        }
        ok(&output);
        let batch = batch.unwrap();
        let Some((base, reference)) = &first else {
            first = Some((path, batch));
            continue;
        };
        let mut worst = 0f32;
        for column in columns {
            for (i, (a, b)) in f32s(reference, column)
                .iter()
                .zip(f32s(&batch, column))
                .enumerate()
            {
                match (a, b) {
                    (Some(a), Some(b)) => worst = worst.max((a - b).abs()),
                    (None, None) => {}
                    _ => panic!("row {i} {column}: {base} {a:?} vs {path} {b:?}"),
                }
            }
        }
        eprintln!("{path} vs {base}: worst difference {worst:.2e}");
        assert!(worst == 0.0, "{path} vs {base}: worst difference {worst}");
    }
    assert!(first.is_some(), "the portable path always runs");
    let (output, _) = run_with_env(&rows[..1], &[], &[("REFSCORE_KERNELS", "sse9")]);
    let err = fails(&output, 78);
    assert!(
        err.contains("REFSCORE_KERNELS=sse9: unknown kernel path"),
        "{err}"
    );
}

/// `--truncate-dim N` against sentence-transformers' `truncate_dim` on the
/// two real models, each at several widths (tests/fixtures/truncate-dim.jsonl,
/// made by scripts/fixtures/make-truncate-fixture.py), within 1e-4 on every
/// row; the width is in the summary, the footer's record and the refusal of
/// widths the model does not have.
#[test]
fn truncate_dim_matches_sentence_transformers() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/truncate-dim.jsonl");
    let lines: Vec<serde_json::Value> = std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let mut cases: Vec<(String, u64)> = lines
        .iter()
        .map(|v| {
            (
                v["model"].as_str().unwrap().to_string(),
                v["dims"].as_u64().unwrap(),
            )
        })
        .collect();
    cases.dedup();
    assert!(cases.len() >= 4, "{cases:?}");
    for (model, dims) in &cases {
        let rows: Vec<&serde_json::Value> = lines
            .iter()
            .filter(|v| v["model"] == model.as_str() && v["dims"] == *dims)
            .collect();
        let input = fixture_pairs(&rows);
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("models")
            .join(model);
        let n = dims.to_string();
        let (out, scores) = score_embedding(
            &input,
            &dir,
            &["--metrics", "cosine", "--truncate-dim", &n],
            &[],
        );
        ok(&out);
        let (batch, summary) = scores.unwrap();
        assert_eq!(summary["embedding"]["truncate_dim"], *dims);
        let got = f32s(&batch, "cosine");
        let mut worst = 0f32;
        for (k, v) in rows.iter().enumerate() {
            let want = v["cosine"].as_f64().unwrap() as f32;
            worst = worst.max((got[k].unwrap() - want).abs());
        }
        assert!(worst <= TOLERANCE, "{model} at {dims}: worst {worst}");
        assert!(rows.len() >= 300, "{model}: {} rows", rows.len());
        eprintln!(
            "{model} --truncate-dim {dims}: {} rows, worst {worst:.2e}",
            rows.len()
        );
    }
    // Widths the model does not have are refused before any row is scored.
    let rows = [("a", "Paris", "paris")];
    for bad in ["0", "385"] {
        let (out, _) = score_embedding(&rows, &model_dir(), &["--truncate-dim", bad], &[]);
        let err = fails(&out, 64);
        assert!(
            err.contains("--truncate-dim") && err.trim().lines().count() == 1,
            "{err}"
        );
    }
}
