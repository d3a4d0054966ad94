//! What a review and a hostile first user found, each through the real
//! binary: values out of range, a closed stdout, special output files,
//! checks made before scoring, symlinked input folders, duplicate columns,
//! mixed string kinds, all-null columns, `--judge-where` checked before the
//! first call, and an order-independent rescaling baseline.

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

use arrow::array::{ArrayRef, LargeStringArray, NullArray, StringArray};
use common::judge_server::{chat, start};
use common::*;

fn two_rows(dir: &Path, name: &str) -> PathBuf {
    let p = dir.join(name);
    write_parquet(
        &p,
        vec![
            ("id", s(&["a", "b"])),
            ("reference", s(&["Paris", "blue"])),
            ("output", s(&["paris", "green"])),
        ],
    );
    p
}

#[test]
fn values_out_of_range_are_refused_at_the_command_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = two_rows(dir.path(), "in.parquet");
    let out = dir.path().join("o.parquet");
    for bad in [
        vec![
            "--judge-url",
            "http://127.0.0.1:9/v1",
            "--judge-timeout",
            "1e20",
        ],
        vec![
            "--judge-url",
            "http://127.0.0.1:9/v1",
            "--judge-timeout",
            "nan",
        ],
        vec!["--judge-url", "http://127.0.0.1:9/v1", "--judge-rpm", "0"],
        vec!["--judge-url", "http://127.0.0.1:9/v1", "--judge-tpm", "0"],
        vec!["--threads", "1000000"],
        vec!["--threads", "0"],
        vec!["--batch-size", "0"],
        vec!["--threshold", "token_f1=nan"],
        vec!["--threshold", "token_f1=inf"],
        vec!["--shard", "4/3"],
        vec!["--shard", "0/3"],
        vec!["--rescale-baseline=-inf,0,0", "--metrics", "bertscore"],
        vec![
            "--rescale-baseline",
            "0.1,x,0.2,0.3",
            "--metrics",
            "bertscore",
        ],
        vec!["--threshold", "token_f1"],
        vec!["--threshold", "no_such_metric=1"],
        vec![
            "--judge-url",
            "http://127.0.0.1:9/v1",
            "--judge-band",
            "cosine:0.9..0.1",
        ],
        vec![
            "--judge-url",
            "http://127.0.0.1:9/v1",
            "--judge-band",
            "0.1..0.9",
        ],
    ] {
        let err = fails(&score(&input, &out, &bad), 64);
        assert_eq!(err.trim().lines().count(), 1, "{bad:?}: {err}");
    }
    assert!(!out.exists());
}

#[test]
fn a_closed_stdout_is_a_normal_end() {
    let out = Command::new(bin())
        .args(["inspect", example().to_str().unwrap()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut child = out;
    let mut first = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut first)
        .unwrap();
    // The reader goes away after one line, like `| head -1`.
    let status = child.wait().unwrap();
    assert!(first.starts_with("files:"), "{first}");
    assert!(status.success(), "{status:?}");
}

#[test]
fn special_files_and_folders_are_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let input = two_rows(dir.path(), "in.parquet");
    // A FIFO stays a FIFO.
    let fifo = dir.path().join("fifo");
    assert!(Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let err = fails(
        &score(&input, &fifo, &["--overwrite", "--metrics", "lexical"]),
        78,
    );
    assert!(err.contains("not a regular file"), "{err}");
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    // A missing folder: exit 74 before scoring, nothing left behind.
    let missing = dir.path().join("newdir").join("out.parquet");
    fails(&score(&input, &missing, &["--metrics", "lexical"]), 74);
    // The summary path is a folder: refused before the Parquet is written.
    let out = dir.path().join("o.parquet");
    std::fs::create_dir(dir.path().join("o.parquet.summary.json")).unwrap();
    let err = fails(&score(&input, &out, &["--metrics", "lexical"]), 78);
    assert!(err.contains("summary"), "{err}");
    let mut left = listing(dir.path());
    left.retain(|n| n != "in.parquet" && n != "fifo" && n != "o.parquet.summary.json");
    assert!(left.is_empty(), "left behind: {left:?}");
}

#[test]
fn symlinked_folders_are_read_once_and_never_loop() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let day = data.join("2024-06-01");
    std::fs::create_dir_all(&day).unwrap();
    two_rows(&day, "part.parquet");
    std::os::unix::fs::symlink(&day, data.join("latest")).unwrap();
    std::os::unix::fs::symlink(".", day.join("self")).unwrap();
    std::os::unix::fs::symlink("..", day.join("up")).unwrap();
    let out = dir.path().join("o.parquet");
    ok(&score(&data, &out, &["--metrics", "lexical"]));
    assert_eq!(read_parquet(&out).num_rows(), 2, "each real file once");
    let inspect = ok(&refscore(&["inspect", data.to_str().unwrap()]));
    assert!(inspect.contains("rows: 2"), "{inspect}");
}

#[test]
fn duplicate_columns_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("dup.parquet");
    write_parquet(
        &p,
        vec![
            ("reference", s(&["a"])),
            ("output", s(&["a"])),
            ("output", s(&["b"])),
        ],
    );
    let out = dir.path().join("o.parquet");
    let err = fails(&score(&p, &out, &["--metrics", "lexical"]), 78);
    assert!(err.contains("'output' appears 2 times"), "{err}");
    let ok_input = two_rows(dir.path(), "in.parquet");
    let err = fails(
        &score(&ok_input, &out, &["--keep", "id,reference,reference"]),
        78,
    );
    assert!(err.contains("twice"), "{err}");
}

#[test]
fn files_with_other_string_kinds_and_null_columns_are_unified() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // DuckDB writes Utf8 ids, Polars LargeUtf8; pandas an all-null column as Null.
    write_parquet(
        &data.join("a.parquet"),
        vec![
            ("id", s(&["x1", "x2"])),
            ("reference", s(&["Paris", "blue"])),
            ("output", s(&["paris", "blue"])),
        ],
    );
    write_parquet(
        &data.join("b.parquet"),
        vec![
            (
                "id",
                Arc::new(LargeStringArray::from(vec!["y1", "y2"])) as ArrayRef,
            ),
            ("reference", s(&["one", "two"])),
            ("output", Arc::new(NullArray::new(2)) as ArrayRef),
        ],
    );
    let out = dir.path().join("o.parquet");
    ok(&score(
        &data,
        &out,
        &["--metrics", "lexical", "--keep", "reference"],
    ));
    let r = read_parquet(&out);
    assert_eq!(
        texts(&r, "id"),
        vec![
            Some("x1".into()),
            Some("x2".into()),
            Some("y1".into()),
            Some("y2".into())
        ]
    );
    let status = texts(&r, "status");
    assert_eq!(status[2].as_deref(), Some("error"));
    assert_eq!(texts(&r, "error")[3].as_deref(), Some("output is null"));
}

#[test]
fn a_bad_judge_where_value_in_the_last_row_fails_before_any_call() {
    let server = start(|_, _| chat(r#"{"meaning_match": true, "reason": "x"}"#));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("w.parquet");
    let n = 50;
    let refs: Vec<String> = (0..n).map(|i| format!("reference {i}")).collect();
    let outs: Vec<String> = (0..n).map(|i| format!("output {i}")).collect();
    let mut want: Vec<&str> = vec!["meaning_match"; n];
    want[n - 1] = "no_such_metric";
    write_parquet(
        &p,
        vec![
            ("reference", Arc::new(StringArray::from(refs)) as ArrayRef),
            ("output", Arc::new(StringArray::from(outs)) as ArrayRef),
            ("judge", s(&want)),
        ],
    );
    let out = dir.path().join("o.parquet");
    let before = server
        .requests()
        .iter()
        .filter(|r| r.kind() == "meaning_match")
        .count();
    let err = fails(
        &score(
            &p,
            &out,
            &[
                "--metrics",
                "meaning_match",
                "--judge-url",
                &server.url,
                "--judge-where",
                "judge",
                "--batch-size",
                "5",
            ],
        ),
        65,
    );
    assert!(
        err.contains("row 49") && err.contains("no_such_metric"),
        "{err}"
    );
    let after = server
        .requests()
        .iter()
        .filter(|r| r.kind() == "meaning_match")
        .count();
    assert_eq!(before, after, "no call was paid for");
}

#[test]
fn the_auto_baseline_does_not_depend_on_row_order() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let dir = tempfile::tempdir().unwrap();
    let rows: Vec<(String, String)> = (0..300)
        .map(|i| {
            (
                format!("The answer to question {i} is {}", i * 7 % 13),
                format!("I think it is {} for item {i}", i * 5 % 11),
            )
        })
        .collect();
    let write = |name: &str, order: &[usize]| -> PathBuf {
        let p = dir.path().join(name);
        let refs: Vec<&str> = order.iter().map(|&i| rows[i].0.as_str()).collect();
        let outs: Vec<&str> = order.iter().map(|&i| rows[i].1.as_str()).collect();
        write_parquet(&p, vec![("reference", s(&refs)), ("output", s(&outs))]);
        p
    };
    let forward: Vec<usize> = (0..rows.len()).collect();
    let shuffled: Vec<usize> = (0..rows.len()).map(|i| (i * 7919) % rows.len()).collect();
    let mut baselines = Vec::new();
    for (name, order) in [("a.parquet", &forward), ("b.parquet", &shuffled)] {
        let input = write(name, order);
        let out = dir.path().join(format!("{name}.out"));
        ok(&score(
            &input,
            &out,
            &[
                "--metrics",
                "bertscore",
                "--rescale-baseline",
                "auto",
                "--model",
                model.to_str().unwrap(),
            ],
        ));
        baselines.push(summary(&out)["embedding"]["baseline"].clone());
    }
    assert!(!baselines[0].is_null());
    assert_eq!(baselines[0], baselines[1], "same rows, same baseline");
}

#[test]
fn a_model_named_by_the_environment_is_required_like_model() {
    let dir = tempfile::tempdir().unwrap();
    let input = two_rows(dir.path(), "in.parquet");
    let out = dir.path().join("o.parquet");
    let o = Command::new(bin())
        .args([
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-q",
        ])
        .env("REFSCORE_MODEL_DIR", dir.path().join("nowhere"))
        .output()
        .unwrap();
    assert!(
        !o.status.success(),
        "a missing model named by the environment fails"
    );
    assert!(!out.exists());
}

/// Writes `reference` and `output` as raw UTF8-annotated byte arrays with
/// parquet's low-level writer (no Arrow validation, dictionary encoding on),
/// as other writers may have.
fn write_raw_text(
    path: &Path,
    refs: Vec<parquet::data_type::ByteArray>,
    outs: Vec<parquet::data_type::ByteArray>,
) {
    use parquet::data_type::ByteArrayType;
    use parquet::file::writer::SerializedFileWriter;
    use parquet::schema::parser::parse_message_type;
    let schema = parse_message_type(
        "message m { required binary reference (UTF8); required binary output (UTF8); }",
    )
    .unwrap();
    let file = std::fs::File::create(path).unwrap();
    let mut w = SerializedFileWriter::new(file, Arc::new(schema), Default::default()).unwrap();
    let mut rg = w.next_row_group().unwrap();
    for values in [refs, outs] {
        let mut col = rg.next_column().unwrap().unwrap();
        col.typed::<ByteArrayType>()
            .write_batch(&values, None, None)
            .unwrap();
        col.close().unwrap();
    }
    rg.close().unwrap();
    w.close().unwrap();
}

#[test]
fn invalid_utf8_is_reported_with_its_column_and_row() {
    use parquet::data_type::ByteArray;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("bad-utf8.parquet");
    let refs: Vec<ByteArray> = (0..10)
        .map(|i| ByteArray::from(format!("ref {i}").as_str()))
        .collect();
    let mut outs: Vec<ByteArray> = (0..10)
        .map(|i| ByteArray::from(format!("out {i}").as_str()))
        .collect();
    outs[7] = ByteArray::from(vec![b'b', b'a', b'd', 0xff, b'!']);
    write_raw_text(&path, refs, outs);
    let out = dir.path().join("o.parquet");
    let err = fails(&score(&path, &out, &["--metrics", "lexical"]), 65);
    assert!(
        err.contains("bad-utf8.parquet")
            && err.contains("column 'output'")
            && err.contains("row 7"),
        "{err}"
    );
}

#[test]
fn a_long_answer_repeated_through_a_dictionary_is_not_expanded() {
    use parquet::data_type::ByteArray;
    // One 70 KB value in 32,768 rows: a few KB on disk, 2.3 GB expanded.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("dict.parquet");
    let long = ByteArray::from("word ".repeat(14_000).as_str());
    let rows = 32_768;
    write_raw_text(
        &path,
        vec![ByteArray::from("word word"); rows],
        vec![long; rows],
    );
    assert!(std::fs::metadata(&path).unwrap().len() < 200_000);
    let out = dir.path().join("o.parquet");
    ok(&score(&path, &out, &["--metrics", "exact_match"]));
    let r = read_parquet(&out);
    assert_eq!(r.num_rows(), rows);
    let rss = summary(&out)["peak_rss_bytes"].as_u64().unwrap();
    assert!(
        rss < 1 << 30,
        "peak RSS {rss} bytes: the value was expanded per row"
    );
}

#[test]
fn a_first_file_without_the_id_column_does_not_decide_for_all() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir(&data).unwrap();
    // The first file (in path order) has no id; the second has real ids,
    // which used to become row numbers without a word.
    write_parquet(
        &data.join("a.parquet"),
        vec![("reference", s(&["Paris"])), ("output", s(&["paris"]))],
    );
    two_rows(&data, "b.parquet");
    let out = dir.path().join("o.parquet");
    let err = fails(&score(&data, &out, &["--metrics", "lexical"]), 65);
    assert!(
        err.contains("a.parquet") && err.contains("b.parquet") && err.contains("id column"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists());
    // The same for the optional question column.
    std::fs::remove_file(data.join("b.parquet")).unwrap();
    write_parquet(
        &data.join("b.parquet"),
        vec![
            ("question", s(&["Capital?"])),
            ("reference", s(&["Paris"])),
            ("output", s(&["paris"])),
        ],
    );
    let err = fails(&score(&data, &out, &["--metrics", "lexical"]), 65);
    assert!(
        err.contains("input column") && err.contains("'question'"),
        "{err}"
    );
}

#[test]
fn an_iceberg_folder_is_read_as_its_table_and_its_data_folder_refused() {
    // Iceberg tables are read (issue 68): the folder is the table, whose
    // metadata here is not a table's; its data/ read loose is refused.
    let dir = tempfile::tempdir().unwrap();
    let ice = dir.path().join("ice");
    std::fs::create_dir_all(ice.join("metadata")).unwrap();
    std::fs::create_dir_all(ice.join("data")).unwrap();
    std::fs::write(ice.join("metadata/v1.metadata.json"), "{}").unwrap();
    two_rows(&ice.join("data"), "a.parquet");
    let out = dir.path().join("o.parquet");
    let err = fails(&score(&ice, &out, &["--metrics", "lexical"]), 65);
    assert!(
        err.contains("cannot read the Iceberg table") && err.contains("v1.metadata.json"),
        "{err}"
    );
    let err = fails(
        &score(&ice.join("data"), &out, &["--metrics", "lexical"]),
        78,
    );
    assert!(
        err.contains("Iceberg table") && err.contains(&format!("({})", ice.display())),
        "{err}"
    );
    assert!(!err.contains("delta_scan"), "{err}");
}
