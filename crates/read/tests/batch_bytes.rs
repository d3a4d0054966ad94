//! Batches are bounded in bytes as well as rows: a row group of a few huge
//! texts is read in batches of at most about `BATCH_BYTES` of text, where a
//! row-count batch would put all of them in one string array (40 texts of
//! 60 MB overflowed Arrow's 2 GiB offsets).

use std::fs::File;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use refscore_read::{Dataset, ReadOptions, BATCH_BYTES};

#[test]
fn a_row_group_of_huge_texts_is_read_in_byte_bounded_batches() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge.parquet");
    write_huge_answers(&path, ["reference", "output"], None);
    read_in_bounded_batches(path.to_str().unwrap(), "plain file");
}

/// Answers of 24 MiB each: 12 of them are 288 MiB, more than [`BATCH_BYTES`].
const HUGE: usize = 24 << 20;
/// How many huge answers the files hold.
const HUGE_ROWS: usize = 12;

/// Writes one row group of [`HUGE_ROWS`] rows: a one-letter reference and
/// an answer of [`HUGE`] bytes starting with its row number, the columns
/// named `names` (with those Parquet field ids, if given).
fn write_huge_answers(path: &std::path::Path, names: [&str; 2], ids: Option<[&str; 2]>) {
    let texts: Vec<String> = (0..HUGE_ROWS)
        .map(|i| format!("{i:02}") + &"x".repeat(HUGE - 2))
        .collect();
    let field = |k: usize| {
        let f = Field::new(names[k], DataType::Utf8, false);
        match ids {
            Some(ids) => f.with_metadata(std::collections::HashMap::from([(
                "PARQUET:field_id".to_string(),
                ids[k].to_string(),
            )])),
            None => f,
        }
    };
    let schema = Arc::new(Schema::new(vec![field(0), field(1)]));
    let props = WriterProperties::builder()
        .set_compression(Compression::ZSTD(ZstdLevel::try_new(1).unwrap()))
        .set_dictionary_enabled(false)
        .build();
    let mut w =
        ArrowWriter::try_new(File::create(path).unwrap(), schema.clone(), Some(props)).unwrap();
    let small: ArrayRef = Arc::new(StringArray::from(vec!["a"; HUGE_ROWS]));
    let big: ArrayRef = Arc::new(StringArray::from(texts));
    w.write(&RecordBatch::try_new(schema, vec![small, big]).unwrap())
        .unwrap();
    w.close().unwrap();
}

/// Reads `input`'s huge answers: every batch within [`BATCH_BYTES`] of
/// text, every row once, in order.
fn read_in_bounded_batches(input: &str, what: &str) {
    let dataset = Dataset::open(input, &ReadOptions::default()).unwrap();
    let most = (BATCH_BYTES / HUGE as u64) as usize;
    assert!(
        most < HUGE_ROWS,
        "the test needs more text than one batch holds"
    );
    let mut seen = 0;
    for batch in dataset.batches() {
        let batch = batch.unwrap();
        assert!(
            batch.len() <= most,
            "{what}: a batch of {} rows of 24 MiB",
            batch.len()
        );
        for i in 0..batch.len() {
            let text = batch.output().get(i).unwrap();
            assert_eq!(&text[..2], format!("{:02}", seen + i), "rows in order");
        }
        seen += batch.len();
    }
    assert_eq!(seen, HUGE_ROWS);
}

#[test]
fn tiny_row_groups_are_grouped_into_full_batches_at_fixed_cuts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("tiny.parquet");
    let schema = Arc::new(Schema::new(vec![
        Field::new("reference", DataType::Utf8, false),
        Field::new("output", DataType::Utf8, false),
    ]));
    let props = WriterProperties::builder()
        .set_max_row_group_row_count(Some(100))
        .build();
    let mut w =
        ArrowWriter::try_new(File::create(&path).unwrap(), schema.clone(), Some(props)).unwrap();
    let rows: Vec<String> = (0..5_050).map(|i| format!("row {i}")).collect();
    let col: ArrayRef = Arc::new(StringArray::from(rows));
    w.write(&RecordBatch::try_new(schema, vec![col.clone(), col]).unwrap())
        .unwrap();
    w.close().unwrap();
    let options = ReadOptions {
        batch_size: 1_000,
        ..ReadOptions::default()
    };
    let dataset = Dataset::open(path.to_str().unwrap(), &options).unwrap();
    let units = dataset.units();
    // 51 row groups of 100 (the last of 50): units of 10 row groups, then the rest.
    let sizes: Vec<(usize, u64)> = units.iter().map(|u| (u.row_groups, u.rows)).collect();
    assert_eq!(
        sizes,
        vec![
            (10, 1000),
            (10, 1000),
            (10, 1000),
            (10, 1000),
            (10, 1000),
            (1, 50)
        ]
    );
    // Whole batches across row groups, and a range read cut where asked.
    let lens: Vec<usize> = dataset.batches().map(|b| b.unwrap().len()).collect();
    assert_eq!(lens, vec![1000, 1000, 1000, 1000, 1000, 50]);
    let part: Vec<String> = dataset
        .read_unit(&units[2], 250, 730)
        .unwrap()
        .flat_map(|b| {
            let b = b.unwrap();
            (0..b.len())
                .map(|i| b.output().get(i).unwrap().to_string())
                .collect::<Vec<_>>()
        })
        .collect();
    assert_eq!(part.len(), 480);
    assert_eq!(part[0], "row 2250");
    assert_eq!(part[479], "row 2729");
}

/// The same bound on a Delta table with column mapping (issue 68): its
/// files name the columns by physical names (`col-…`), so the footer's
/// sizes must be found through the table's mapping, not the logical names
/// the run asks for (which matched nothing, and the batch fell back to the
/// row count: all 12 texts of 24 MiB in one batch). In mode `id` the
/// file's names may be neither: the field ids find the columns.
#[test]
fn a_column_mapped_delta_table_of_huge_texts_is_read_in_byte_bounded_batches() {
    read_mapped_table("name", ["col-5f1c-reference", "col-9a2e-output"]);
    read_mapped_table("id", ["written_as_ref", "written_as_out"]);
}

/// Writes a table of 12 answers of 24 MiB in mapping `mode`, its file
/// naming the two columns `in_file`, and reads it in bounded batches.
fn read_mapped_table(mode: &str, in_file: [&str; 2]) {
    let dir = tempfile::tempdir().unwrap();
    let table = dir.path().join("mapped");
    std::fs::create_dir_all(table.join("_delta_log")).unwrap();
    let file = table.join("part-00000.parquet");
    // Field ids as writers store them in either mode.
    write_huge_answers(&file, in_file, Some(["1", "2"]));
    let column = |name: &str, id: u32, physical: &str| {
        format!(
            r#"{{"name":"{name}","type":"string","nullable":false,"metadata":{{"delta.columnMapping.id":{id},"delta.columnMapping.physicalName":"{physical}"}}}}"#
        )
    };
    let schema_string = format!(
        r#"{{"type":"struct","fields":[{},{}]}}"#,
        column("reference", 1, "col-5f1c-reference"),
        column("output", 2, "col-9a2e-output")
    );
    let log = [
        r#"{"protocol":{"minReaderVersion":2,"minWriterVersion":5}}"#.to_string(),
        format!(
            r#"{{"metaData":{{"id":"6c1f0d0e-2d3a-4a8e-9a55-0c5d1b2f7e11","format":{{"provider":"parquet","options":{{}}}},"schemaString":{},"partitionColumns":[],"configuration":{{"delta.columnMapping.mode":"{mode}","delta.columnMapping.maxColumnId":"2"}},"createdTime":1700000000000}}}}"#,
            serde_json_string(&schema_string)
        ),
        format!(
            r#"{{"add":{{"path":"part-00000.parquet","partitionValues":{{}},"size":{},"modificationTime":1700000000000,"dataChange":true}}}}"#,
            std::fs::metadata(&file).unwrap().len()
        ),
    ];
    std::fs::write(
        table.join("_delta_log/00000000000000000000.json"),
        log.join("\n") + "\n",
    )
    .unwrap();
    read_in_bounded_batches(table.to_str().unwrap(), &format!("column mapping {mode}"));
}

/// `text` as a JSON string literal (the log holds the schema as a string).
fn serde_json_string(text: &str) -> String {
    format!("\"{}\"", text.replace('\\', "\\\\").replace('"', "\\\""))
}
