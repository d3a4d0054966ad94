//! A million-row run through the real binary: every row comes out, in
//! order, and peak memory does not grow with the row count.

mod common;

use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, Int64Array, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use common::*;
use parquet::arrow::ArrowWriter;

fn generate(path: &Path, rows: i64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::Int64, false),
        Field::new("reference", DataType::Utf8, true),
        Field::new("output", DataType::Utf8, true),
    ]));
    let mut w = ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), None).unwrap();
    for start in (0..rows).step_by(100_000) {
        let end = (start + 100_000).min(rows);
        let ids: Vec<i64> = (start..end).collect();
        let refs: Vec<Option<String>> = (start..end)
            .map(|i| (i % 1000 != 7).then(|| format!("answer number {}", i % 50)))
            .collect();
        let outs: Vec<String> = (start..end)
            .map(|i| format!("Answer number {}", i % 40))
            .collect();
        let batch = RecordBatch::try_new(
            schema.clone(),
            vec![
                Arc::new(Int64Array::from(ids)) as ArrayRef,
                Arc::new(StringArray::from(refs)),
                Arc::new(StringArray::from(outs)),
            ],
        )
        .unwrap();
        w.write(&batch).unwrap();
    }
    w.close().unwrap();
}

fn peak_rss(output: &Path) -> u64 {
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}.summary.json", output.display())).unwrap(),
    )
    .unwrap();
    summary["peak_rss_bytes"].as_u64().unwrap()
}

#[test]
fn a_million_rows_come_out_in_order_with_flat_memory() {
    let dir = tempfile::tempdir().unwrap();
    let small_in = dir.path().join("small.parquet");
    let big_in = dir.path().join("big.parquet");
    generate(&small_in, 100_000);
    generate(&big_in, 1_200_000);
    let small_out = dir.path().join("small.out.parquet");
    let big_out = dir.path().join("big.out.parquet");
    ok(&score(&small_in, &small_out, &["--metrics", "lexical"]));
    ok(&score(&big_in, &big_out, &["--metrics", "lexical"]));

    let b = read_parquet(&big_out);
    assert_eq!(b.num_rows(), 1_200_000);
    let ids = b
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .clone();
    assert!(
        ids.values()
            .iter()
            .enumerate()
            .all(|(i, &id)| id == i as i64),
        "ids in input order"
    );
    let em = f32s(&b, "exact_match_norm");
    let status = texts(&b, "status");
    for i in (0..1_200_000usize)
        .step_by(1009)
        .chain([7, 1007, 1_199_999])
    {
        if i % 1000 == 7 {
            assert_eq!(em[i], None);
            assert_eq!(status[i].as_deref(), Some("error"));
        } else {
            let expect = (i % 50) == (i % 40);
            assert_eq!(em[i], Some(if expect { 1.0 } else { 0.0 }), "row {i}");
            assert_eq!(status[i].as_deref(), Some("ok"));
        }
    }
    assert_eq!(
        b.column_by_name("error").unwrap().null_count(),
        1_200_000 - 1200
    );

    // Twelve times the rows, nearly the same memory.
    let (small, big) = (peak_rss(&small_out), peak_rss(&big_out));
    assert!(
        (big as f64) < small as f64 * 1.3 + 16.0 * 1024.0 * 1024.0,
        "peak RSS grew with rows: {small} bytes at 100k rows, {big} at 1.2M"
    );
    assert!(
        big < 256 * 1024 * 1024,
        "peak RSS {big} bytes for a lexical run"
    );
}
