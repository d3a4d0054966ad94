//! Bad input and bad settings: each gives a one-line message naming the
//! file/column, a documented exit code, and leaves no output behind.

mod common;

use std::path::Path;
use std::sync::Arc;

use arrow::array::{ArrayRef, Int64Array};
use common::*;

fn good_input(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("in.parquet");
    write_parquet(
        &p,
        vec![("reference", s(&["a", "b"])), ("output", s(&["a", "c"]))],
    );
    p
}

/// Runs a failing case and checks exit code, message and that the output
/// directory holds nothing new.
fn check(dir: &Path, input: &Path, out: &Path, extra: &[&str], code: i32, needles: &[&str]) {
    let before = listing(out.parent().unwrap());
    let err = fails(&score(input, out, extra), code);
    for n in needles {
        assert!(err.contains(n), "stderr lacks {n:?}: {err}");
    }
    assert_eq!(err.trim_end().lines().count(), 1, "one-line message: {err}");
    assert_eq!(
        listing(out.parent().unwrap()),
        before,
        "no file left behind in {}",
        dir.display()
    );
}

#[test]
fn missing_input_path_is_an_io_error() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("nope.parquet");
    check(
        dir.path(),
        &missing,
        &dir.path().join("o.parquet"),
        &[],
        74,
        &["nope.parquet", "no such file"],
    );
    let glob = dir.path().join("*.parquet");
    check(
        dir.path(),
        &glob,
        &dir.path().join("o.parquet"),
        &[],
        74,
        &["no files match"],
    );
}

#[test]
fn non_parquet_and_truncated_files_are_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.parquet");
    std::fs::write(&text, "id,reference,output\n1,a,b\n").unwrap();
    check(
        dir.path(),
        &text,
        &dir.path().join("o.parquet"),
        &[],
        65,
        &["notes.parquet", "not a Parquet file"],
    );
    let empty = dir.path().join("empty.parquet");
    std::fs::write(&empty, "").unwrap();
    check(
        dir.path(),
        &empty,
        &dir.path().join("o.parquet"),
        &[],
        65,
        &["empty.parquet", "not a Parquet file"],
    );

    let good = good_input(dir.path());
    let bytes = std::fs::read(&good).unwrap();
    let cut = dir.path().join("cut.parquet");
    std::fs::write(&cut, &bytes[..bytes.len() / 2]).unwrap();
    check(
        dir.path(),
        &cut,
        &dir.path().join("o.parquet"),
        &[],
        65,
        &["cut.parquet", "truncated"],
    );
    // Footer intact but its length field lies: corrupt footer.
    let mut bad = bytes.clone();
    let n = bad.len();
    bad[n - 8..n - 4].copy_from_slice(&(n as u32 * 2).to_le_bytes());
    let corrupt = dir.path().join("corrupt.parquet");
    std::fs::write(&corrupt, &bad).unwrap();
    check(
        dir.path(),
        &corrupt,
        &dir.path().join("o.parquet"),
        &[],
        65,
        &["corrupt.parquet"],
    );
}

#[test]
fn corrupt_data_pages_fail_with_the_file_and_row() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("pages.parquet");
    let n = 50_000;
    let refs: Vec<String> = (0..n)
        .map(|i| format!("reference text number {i}"))
        .collect();
    write_parquet(
        &input,
        vec![
            (
                "reference",
                Arc::new(arrow::array::StringArray::from(refs.clone())) as ArrayRef,
            ),
            ("output", Arc::new(arrow::array::StringArray::from(refs))),
        ],
    );
    let mut bytes = std::fs::read(&input).unwrap();
    // Overwrite a stretch in the middle of the data (far from the footer).
    let mid = bytes.len() / 3;
    for b in &mut bytes[mid..mid + 4096] {
        *b = 0xA5;
    }
    std::fs::write(&input, &bytes).unwrap();
    let out = dir.path().join("o.parquet");
    let before = listing(dir.path());
    let result = score(&input, &out, &[]);
    let err = fails(&result, 65);
    assert!(
        err.contains("pages.parquet") && err.contains("row group"),
        "{err}"
    );
    assert_eq!(listing(dir.path()), before);
}

#[test]
fn missing_and_mistyped_columns_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("cols.parquet");
    write_parquet(
        &input,
        vec![
            ("reference", s(&["a"])),
            ("answer", s(&["a"])),
            ("score", Arc::new(Int64Array::from(vec![1])) as ArrayRef),
        ],
    );
    let out = dir.path().join("o.parquet");
    check(
        dir.path(),
        &input,
        &out,
        &[],
        65,
        &["cols.parquet", "no output column", "--output-col", "answer"],
    );
    check(
        dir.path(),
        &input,
        &out,
        &["--output-col", "missing"],
        65,
        &["cols.parquet", "'missing'", "--output-col", "not found"],
    );
    check(
        dir.path(),
        &input,
        &out,
        &["--output-col", "score"],
        65,
        &["cols.parquet", "'score'", "Int64", "string"],
    );
    check(
        dir.path(),
        &input,
        &out,
        &["--output-col", "answer", "--keep", "nope"],
        65,
        &["--keep", "'nope'"],
    );
    check(
        dir.path(),
        &input,
        &out,
        &["--output-col", "reference"],
        78,
        &["'reference'", "both"],
    );
}

#[test]
fn files_that_disagree_are_rejected_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    write_parquet(
        &data.join("1.parquet"),
        vec![("reference", s(&["a"])), ("output", s(&["a"]))],
    );
    write_parquet(
        &data.join("2.parquet"),
        vec![("reference", s(&["a"])), ("answer", s(&["a"]))],
    );
    check(
        dir.path(),
        &data,
        &dir.path().join("o.parquet"),
        &[],
        65,
        &["2.parquet", "'output'"],
    );
}

#[test]
fn output_problems_are_reported_before_work_starts() {
    let dir = tempfile::tempdir().unwrap();
    let input = good_input(dir.path());
    let missing_dir = dir.path().join("no/such/dir/out.parquet");
    let err = fails(&score(&input, &missing_dir, &[]), 74);
    assert!(err.contains("does not exist"), "{err}");

    let out = dir.path().join("exists.parquet");
    std::fs::write(&out, "keep me").unwrap();
    check(
        dir.path(),
        &input,
        &out,
        &[],
        78,
        &["exists.parquet", "--overwrite"],
    );
    assert_eq!(std::fs::read_to_string(&out).unwrap(), "keep me");
    ok(&score(&input, &out, &["--overwrite"]));
    assert_eq!(read_parquet(&out).num_rows(), 2);
}

#[test]
fn usage_errors_exit_64_and_help_explains() {
    let out = refscore(&["score", "--no-such-flag"]);
    assert_eq!(out.status.code(), Some(64));
    let help = refscore(&["score", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    let text = String::from_utf8_lossy(&help.stdout);
    for needle in [
        "--reference-col",
        "ground_truth",
        "--keep",
        "--metrics",
        "--overwrite",
        "Exit codes",
        "78",
    ] {
        assert!(text.contains(needle), "help lacks {needle}: {text}");
    }
    let err = fails(&refscore(&["score", "x.parquet"]), 78);
    assert!(err.contains("-o"), "{err}");
}

#[test]
fn an_interrupted_run_leaves_no_finished_looking_file() {
    // Kill the process mid-run: only a hidden .partial file may remain,
    // never the target name.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("big.parquet");
    let n = 2_000_000;
    let refs: Vec<String> = (0..n)
        .map(|i| format!("a somewhat longer reference answer {i}"))
        .collect();
    write_parquet(
        &input,
        vec![
            (
                "reference",
                Arc::new(arrow::array::StringArray::from(refs.clone())) as ArrayRef,
            ),
            ("output", Arc::new(arrow::array::StringArray::from(refs))),
        ],
    );
    let out = dir.path().join("out.parquet");
    let mut child = std::process::Command::new(bin())
        .args([
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-q",
            "--batch-size",
            "1000",
        ])
        .spawn()
        .unwrap();
    std::thread::sleep(std::time::Duration::from_millis(300));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(!out.exists(), "target must not exist after a kill");
    assert!(!dir.path().join("out.parquet.summary.json").exists());
}

#[test]
fn table_folders_are_refused_not_read_as_loose_files() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    std::fs::create_dir(&out_dir).unwrap();
    let out = out_dir.join("o.parquet");
    // A Delta table whose log is damaged (no protocol or metadata): read as
    // a table, it is bad input naming the table; its files are never read
    // loose instead. Tables written by the deltalake package itself, read
    // at every version: tests/python/test_delta_tables.py.
    let delta = dir.path().join("night");
    std::fs::create_dir_all(delta.join("_delta_log")).unwrap();
    std::fs::create_dir_all(delta.join("day=1")).unwrap();
    std::fs::write(delta.join("_delta_log/00000000000000000000.json"), "{}\n").unwrap();
    good_input(&delta);
    std::fs::copy(delta.join("in.parquet"), delta.join("day=1/part-0.parquet")).unwrap();
    let spec = delta.to_str().unwrap();
    check(
        dir.path(),
        &delta,
        &out,
        &[],
        65,
        &[spec, "cannot read the Delta table", "metadata"],
    );
    // Its partition folder, a glob over its files, and a folder holding it.
    check(
        dir.path(),
        &delta.join("day=1"),
        &out,
        &[],
        78,
        &["Delta Lake table"],
    );
    let glob = format!("{spec}/*.parquet");
    check(
        dir.path(),
        Path::new(&glob),
        &out,
        &[],
        78,
        &["Delta Lake table"],
    );
    check(
        dir.path(),
        dir.path(),
        &out,
        &[],
        78,
        &[spec, "Delta Lake table"],
    );
    let partition = delta.join("day=1");
    let inspected = fails(&refscore(&["inspect", partition.to_str().unwrap()]), 78);
    assert!(inspected.contains("Delta Lake table"), "{inspected}");

    // An Iceberg table's folder.
    let iceberg = dir.path().join("ice");
    std::fs::create_dir_all(iceberg.join("metadata")).unwrap();
    std::fs::create_dir_all(iceberg.join("data")).unwrap();
    std::fs::write(iceberg.join("metadata/v1.metadata.json"), "{}").unwrap();
    good_input(&iceberg.join("data"));
    // Read as a table since issue 68: its metadata is not a table's.
    check(
        dir.path(),
        &iceberg,
        &out,
        &[],
        65,
        &["cannot read the Iceberg table"],
    );
    check(
        dir.path(),
        &iceberg.join("data"),
        &out,
        &[],
        78,
        &["Iceberg table"],
    );

    // `.` inside a partition folder is part of the table too.
    let inside = std::process::Command::new(bin())
        .current_dir(delta.join("day=1"))
        .args(["score", ".", "-o", out.to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    let err = fails(&inside, 78);
    assert!(err.contains("Delta Lake table"), "{err}");

    // A plain folder beside them is read as before, even with a metadata
    // folder of its own that no Iceberg table goes with.
    let plain = dir.path().join("plain");
    std::fs::create_dir_all(plain.join("metadata")).unwrap();
    std::fs::write(plain.join("metadata/run.metadata.json"), "{}").unwrap();
    good_input(&plain);
    ok(&score(&plain, &out, &[]));
}
