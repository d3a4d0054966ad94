//! Results appended to a Delta table (`--output-format delta`) through the
//! real binary, read back from the table's own log and data files: a run
//! killed midway and run again appends its rows once, equal to the Parquet
//! output of the same input; a finished run run again (its summary lost,
//! as after a crash right after the commit) adds nothing. Reading the
//! table with deltalake and Polars: tests/python/test_delta_output.py.

mod common;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use arrow::array::{ArrayRef, RecordBatch, StringArray, UInt64Array};
use arrow::datatypes::{DataType, Field, Schema};
use common::*;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use parquet::arrow::ArrowWriter;
use parquet::file::properties::WriterProperties;

/// Commits at every row group, so a run killed early has parts to resume.
const FAST_COMMITS: (&str, &str) = ("REFSCORE_COMMIT_SECONDS", "0.02,1");

/// `rows` rows of (id, reference, output) in row groups of 2,000.
fn write_input(path: &Path, rows: u64) {
    let schema = Arc::new(Schema::new(vec![
        Field::new("id", DataType::UInt64, false),
        Field::new("reference", DataType::Utf8, true),
        Field::new("output", DataType::Utf8, true),
    ]));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(2_000))
        .build();
    let mut w =
        ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), Some(props)).unwrap();
    let ids: Vec<u64> = (0..rows).collect();
    let reference: Vec<String> = ids
        .iter()
        .map(|i| format!("the answer is {}", i % 97))
        .collect();
    let output: Vec<String> = ids
        .iter()
        .map(|i| format!("the answer is {}", (i * 7) % 97))
        .collect();
    let batch = RecordBatch::try_new(
        schema,
        vec![
            Arc::new(UInt64Array::from(ids)) as ArrayRef,
            Arc::new(StringArray::from(reference)),
            Arc::new(StringArray::from(output)),
        ],
    )
    .unwrap();
    w.write(&batch).unwrap();
    w.close().unwrap();
}

fn command(input: &Path, out: &Path) -> Command {
    let mut c = Command::new(bin());
    c.args([
        "score",
        input.to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--quiet",
        "--metrics",
        "lexical",
        "--keep",
        "reference",
        "--output-format",
        "delta",
    ])
    .env(FAST_COMMITS.0, FAST_COMMITS.1);
    c
}

/// The table's commits, each as its actions (one JSON value per line).
fn commits(table: &Path) -> Vec<Vec<serde_json::Value>> {
    let mut names: Vec<PathBuf> = std::fs::read_dir(table.join("_delta_log"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "json"))
        .collect();
    names.sort();
    names
        .iter()
        .map(|p| {
            std::fs::read_to_string(p)
                .unwrap()
                .lines()
                .map(|l| serde_json::from_str(l).unwrap())
                .collect()
        })
        .collect()
}

/// The rows a commit added, its data files read in the log's order.
fn added_rows(table: &Path, commit: &[serde_json::Value]) -> Vec<RecordBatch> {
    commit
        .iter()
        .filter_map(|a| a.get("add"))
        .flat_map(|add| {
            let path = table.join(add["path"].as_str().unwrap());
            ParquetRecordBatchReaderBuilder::try_new(File::open(path).unwrap())
                .unwrap()
                .build()
                .unwrap()
                .map(Result::unwrap)
                .collect::<Vec<_>>()
        })
        .collect()
}

fn concat(batches: &[RecordBatch]) -> RecordBatch {
    arrow::compute::concat_batches(&batches[0].schema(), batches).unwrap()
}

#[test]
fn a_killed_run_run_again_appends_its_rows_once_and_equal_to_the_parquet_output() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("night.parquet");
    write_input(&input, 200_000);
    let clean = dir.path().join("clean.parquet");
    ok(&score(
        &input,
        &clean,
        &["--metrics", "lexical", "--keep", "reference"],
    ));
    let table = dir.path().join("results");

    // Killed once a part is committed (its run folder is in _refscore/).
    let mut child = command(&input, &table)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(120);
    let meta = table.join("_refscore");
    let committed = || {
        std::fs::read_dir(&meta)
            .into_iter()
            .flatten()
            .flatten()
            .any(|e| {
                e.file_name().to_string_lossy().ends_with(".refscore-run")
                    && std::fs::read_dir(e.path())
                        .into_iter()
                        .flatten()
                        .flatten()
                        .any(|p| p.file_name().to_string_lossy().starts_with("part-"))
            })
    };
    while !committed() && Instant::now() < deadline && child.try_wait().unwrap().is_none() {
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = child.kill();
    let _ = child.wait();
    let killed_midway = !table.join("_delta_log").exists();

    // The same command again: the local result is named after the run, so
    // it is this run's to finish.
    ok(&command(&input, &table).output().unwrap());
    let log = commits(&table);
    assert_eq!(log.len(), 1, "one commit");
    let txn: Vec<&str> = log[0]
        .iter()
        .filter_map(|a| a.get("txn"))
        .map(|t| t["appId"].as_str().unwrap())
        .collect();
    let summary_run_id = {
        let names = listing(&meta);
        assert_eq!(names.len(), 1, "only the summary is left: {names:?}");
        let s: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(meta.join(&names[0])).unwrap()).unwrap();
        if killed_midway {
            assert!(
                s["rows_resumed"].as_u64().unwrap_or(0) > 0,
                "the rerun resumed"
            );
        }
        s["run_id"].as_str().unwrap().to_string()
    };
    assert_eq!(txn, [format!("refscore:{summary_run_id}")]);
    let got = concat(&added_rows(&table, &log[0]));
    let want = read_parquet(&clean);
    assert_eq!(got.num_rows(), 200_000);
    for field in want.schema().fields() {
        let a = got.column_by_name(field.name()).unwrap();
        // Delta has no unsigned types: the u64 id is a long in the table.
        let b = arrow::compute::cast(want.column_by_name(field.name()).unwrap(), a.data_type())
            .unwrap();
        assert!(
            a.to_data() == b.to_data(),
            "column {} differs",
            field.name()
        );
    }
    assert_eq!(
        got.schema().field_with_name("id").unwrap().data_type(),
        &DataType::Int64
    );

    // A crash right after the commit, before the summary: the same
    // command adds nothing, and says so.
    std::fs::remove_file(meta.join(format!("{summary_run_id}.summary.json"))).unwrap();
    let again = Command::new(bin())
        .args(command(&input, &table).get_args())
        .arg("--resume")
        .output()
        .unwrap();
    ok(&again);
    assert_eq!(commits(&table).len(), 1, "nothing appended");
}
