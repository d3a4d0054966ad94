//! `refscore score --cross-model DIR` with a token classifier (a span
//! detector, LettuceDetect's shape): whole runs of the real binary on a
//! Parquet file of tests/fixtures/lettuce-tiny-token-modernbert.jsonl's rows
//! (scripts/fixtures/make-lettuce-fixture.py: LettuceDetect 0.2.3's own
//! inference on the tiny seeded ModernBERT token classifier), the
//! `cross_spans` column read back, the row statuses, the summary, the
//! `--embed-cache` store, and the refusals.

mod common;

use std::path::{Path, PathBuf};

use arrow::array::{
    Array, Float32Array, Int32Array, ListArray, RecordBatch, StringArray, StructArray,
};
use arrow::datatypes::DataType;
use common::*;
use serde_json::Value;

const MODEL: &str = "tiny-token-modernbert";

fn rows() -> Vec<Value> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(format!("tests/fixtures/lettuce-{MODEL}.jsonl"));
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The fixture's rows, then one with a null output (unscorable), as an
/// input file with a `question` column (null where LettuceDetect was given
/// none).
fn input(dir: &Path) -> (PathBuf, Vec<Value>) {
    let mut rows = rows();
    rows.push(serde_json::json!({
        "id": "null-output", "reference": "Paris.", "question": null, "output": null
    }));
    let col = |k: &str| strs(&rows.iter().map(|r| r[k].as_str()).collect::<Vec<_>>());
    let path = dir.join("rows.parquet");
    write_parquet(
        &path,
        vec![
            ("id", col("id")),
            ("question", col("question")),
            ("reference", col("reference")),
            ("output", col("output")),
        ],
    );
    (path, rows)
}

/// (start, end, text, score) of each row's spans; `None` for a null list.
fn spans(batch: &RecordBatch) -> Vec<Option<Vec<(i32, i32, String, f32)>>> {
    let col = batch.column_by_name("cross_spans").expect("cross_spans");
    let list = col.as_any().downcast_ref::<ListArray>().expect("a list");
    (0..list.len())
        .map(|i| {
            list.is_valid(i).then(|| {
                let items = list.value(i);
                let s = items.as_any().downcast_ref::<StructArray>().unwrap();
                let int = |k| s.column(k).as_any().downcast_ref::<Int32Array>().unwrap();
                let text = s.column(2).as_any().downcast_ref::<StringArray>().unwrap();
                let score = s.column(3).as_any().downcast_ref::<Float32Array>().unwrap();
                (0..s.len())
                    .map(|k| {
                        (
                            int(0).value(k),
                            int(1).value(k),
                            text.value(k).to_string(),
                            score.value(k),
                        )
                    })
                    .collect()
            })
        })
        .collect()
}

fn run(input: &Path, extra: &[&str]) -> (RecordBatch, Value) {
    let out = input.with_file_name("scores.parquet");
    let model = tiny_model(MODEL);
    let mut args = vec![
        "--overwrite",
        "--metrics",
        "cross_score",
        "--cross-model",
        &model,
    ];
    args.extend_from_slice(extra);
    ok(&score(input, &out, &args));
    (read_parquet(&out), summary(&out))
}

#[test]
fn a_span_detector_scores_and_lists_the_unsupported_spans() {
    let dir = tempfile::tempdir().unwrap();
    let (input, rows) = input(dir.path());
    let (batch, summary) = run(&input, &[]);
    let field = batch
        .schema()
        .field_with_name("cross_spans")
        .unwrap()
        .clone();
    let DataType::List(item) = field.data_type() else {
        panic!("cross_spans is {:?}", field.data_type())
    };
    let DataType::Struct(parts) = item.data_type() else {
        panic!("cross_spans' items are {:?}", item.data_type())
    };
    let shape: Vec<(String, DataType)> = parts
        .iter()
        .map(|f| (f.name().clone(), f.data_type().clone()))
        .collect();
    assert_eq!(
        shape,
        [
            ("start".to_string(), DataType::Int32),
            ("end".to_string(), DataType::Int32),
            ("text".to_string(), DataType::Utf8),
            ("score".to_string(), DataType::Float32),
        ]
    );
    let scores = f32s(&batch, "cross_score");
    let got = spans(&batch);
    let status = texts(&batch, "status");
    let errors = texts(&batch, "error");
    let (mut none, mut several) = (0, 0);
    for (k, row) in rows.iter().enumerate() {
        let id = row["id"].as_str().unwrap();
        if id == "null-output" {
            assert_eq!((scores[k], &got[k]), (None, &None), "{id}");
            assert_eq!(status[k].as_deref(), Some("error"), "{id}");
            continue;
        }
        if row.get("error").is_some() {
            assert_eq!((scores[k], &got[k]), (None, &None), "{id}");
            assert_eq!(status[k].as_deref(), Some("partial"), "{id}");
            let e = errors[k].as_deref().unwrap();
            assert!(e.contains("tokens") && !e.contains('\n'), "{e}");
            continue;
        }
        assert_eq!(status[k].as_deref(), Some("ok"), "{id}");
        // cross_score is the support: 1 − LettuceDetect's example-level
        // hallucination probability.
        let want = 1.0 - row["score"].as_f64().unwrap() as f32;
        assert!((scores[k].unwrap() - want).abs() < 1e-4, "{id}: {scores:?}");
        let got = got[k].as_ref().expect("a list");
        let want = row["spans"].as_array().unwrap();
        assert_eq!(got.len(), want.len(), "{id}: {got:?}");
        for (g, w) in got.iter().zip(want) {
            assert_eq!(g.0 as u64, w["start"].as_u64().unwrap(), "{id}");
            assert_eq!(g.1 as u64, w["end"].as_u64().unwrap(), "{id}");
            assert_eq!(g.2, w["text"].as_str().unwrap(), "{id}");
            assert!((g.3 - w["confidence"].as_f64().unwrap() as f32).abs() < 1e-4);
        }
        none += usize::from(got.is_empty());
        several += usize::from(got.len() > 1);
    }
    assert!(
        none >= 1 && several >= 1,
        "{none} without, {several} with several"
    );
    let cross = &summary["cross"];
    let scored = rows.len() - 2;
    assert_eq!(cross["head"], "tokens", "{cross}");
    assert_eq!(cross["pairs_scored"], scored as u64, "{cross}");
    assert_eq!(cross["pairs_refused"], 1, "{cross}");
    let truncated = rows
        .iter()
        .filter(|r| r["truncated"].as_bool() == Some(true))
        .count();
    assert_eq!(cross["pairs_truncated"], truncated as u64, "{cross}");
    assert_eq!(cross["max_length"], 128, "{cross}");
}

#[test]
fn detections_come_back_from_the_embed_cache() {
    let dir = tempfile::tempdir().unwrap();
    let (input, rows) = input(dir.path());
    let cache = dir.path().join("cache");
    let flags = ["--embed-cache", cache.to_str().unwrap()];
    let (first, summary) = run(&input, &flags);
    let scored = rows.len() - 1;
    assert_eq!(summary["cross"]["pairs_from_embed_cache"], 0);
    let (again, summary) = run(&input, &flags);
    assert_eq!(
        summary["cross"]["pairs_from_embed_cache"], scored as u64,
        "{}",
        summary["cross"]
    );
    assert_eq!(summary["cross"]["pairs_scored"], 0);
    assert_eq!(f32s(&first, "cross_score"), f32s(&again, "cross_score"));
    assert_eq!(spans(&first), spans(&again));
    assert_eq!(texts(&first, "status"), texts(&again, "status"));
}

#[test]
fn what_a_span_detector_cannot_do_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = input(dir.path());
    let out = dir.path().join("o.parquet");
    let model = tiny_model(MODEL);
    let refused = |args: &[&str]| {
        let err = fails(&score(&input, &out, args), 78);
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!out.exists(), "no output after a refusal");
        err
    };
    let err = refused(&["--cross-model", &model, "--cross-recipe", "factcg"]);
    assert!(
        err.contains("--cross-recipe factcg") && err.contains("token classifier"),
        "{err}"
    );
    let err = refused(&["--metrics", "nli_precision", "--cross-model", &model]);
    assert!(err.contains("nli"), "{err}");
    // The three-label BERT token classifier is not LettuceDetect's shape.
    let bert = tiny_model("tiny-token-bert");
    let err = refused(&["--metrics", "cross_score", "--cross-model", &bert]);
    assert!(err.contains("3 labels"), "{err}");
}
