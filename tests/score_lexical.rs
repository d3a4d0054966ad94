//! End-to-end tests of `refscore score` with lexical metrics: values,
//! column mapping, string encodings, nulls, order and pass-through.

mod common;

use std::sync::Arc;

use arrow::array::{
    Array, ArrayRef, DictionaryArray, Int64Array, LargeStringArray, StringArray, StringViewArray,
};
use arrow::datatypes::Int32Type;
use common::*;

const LEX: [&str; 5] = [
    "exact_match",
    "contains_match",
    "exact_match_norm",
    "contains_match_norm",
    "token_f1",
];

fn row(batch: &arrow::array::RecordBatch, i: usize) -> Vec<Option<f32>> {
    LEX.iter().map(|m| f32s(batch, m)[i]).collect()
}

#[test]
fn spec_cases_score_as_defined() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    let out = dir.path().join("out.parquet");
    write_parquet(
        &input,
        vec![
            ("id", s(&["a", "b", "c", "d", "e", "f"])),
            (
                "reference",
                s(&[
                    "Paris",
                    "one hundred",
                    "42",
                    "The Eiffel Tower",
                    "a hundred and forty-four",
                    "Amy likes apples and bananas",
                ]),
            ),
            (
                "output",
                s(&[
                    " Paris\n",
                    "100",
                    "The answer is 42.",
                    "eiffel tower!",
                    "144",
                    "Amy likes apples, berries and plums",
                ]),
            ),
        ],
    );
    ok(&score(&input, &out, &[]));
    let b = read_parquet(&out);
    let some = |v: [f32; 5]| v.iter().map(|x| Some(*x)).collect::<Vec<_>>();
    assert_eq!(row(&b, 0), some([1.0, 1.0, 1.0, 1.0, 1.0]));
    assert_eq!(row(&b, 1), some([0.0, 0.0, 1.0, 1.0, 1.0]));
    assert_eq!(
        row(&b, 2)[..4],
        [Some(0.0), Some(1.0), Some(0.0), Some(1.0)]
    );
    // N("42") = [42], N("The answer is 42.") = [answer is 42]: P=1/3 R=1 F=0.5
    assert!((row(&b, 2)[4].unwrap() - 0.5).abs() < 1e-6);
    assert_eq!(row(&b, 3), some([0.0, 0.0, 1.0, 1.0, 1.0]));
    assert_eq!(row(&b, 4), some([0.0, 0.0, 1.0, 1.0, 1.0]));
    // [amy likes apples and bananas] vs [amy likes apples berries and plums]: 4 common, P=4/6 R=4/5
    let f1 = row(&b, 5)[4].unwrap();
    assert!(
        (f1 - (2.0 * (4.0 / 6.0) * 0.8 / (4.0 / 6.0 + 0.8)) as f32).abs() < 1e-6,
        "{f1}"
    );
    assert_eq!(texts(&b, "status"), vec![Some("ok".to_string()); 6]);
    assert_eq!(texts(&b, "error"), vec![None; 6]);
    assert_eq!(
        texts(&b, "id"),
        ["a", "b", "c", "d", "e", "f"].map(|x| Some(x.to_string()))
    );
}

#[test]
fn nulls_and_empty_strings_keep_every_row_with_a_status() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    let out = dir.path().join("out.parquet");
    write_parquet(
        &input,
        vec![
            (
                "reference",
                strs(&[None, Some("x"), Some("   "), Some("x"), Some(""), Some("x")]),
            ),
            (
                "output",
                strs(&[Some("x"), None, Some("x"), Some(""), Some("x"), Some("x")]),
            ),
        ],
    );
    ok(&score(&input, &out, &[]));
    let b = read_parquet(&out);
    assert_eq!(b.num_rows(), 6);
    let status: Vec<_> = texts(&b, "status")
        .into_iter()
        .map(Option::unwrap)
        .collect();
    assert_eq!(status, ["error", "error", "error", "ok", "error", "ok"]);
    let errors = texts(&b, "error");
    assert_eq!(errors[0].as_deref(), Some("reference is null"));
    assert_eq!(errors[1].as_deref(), Some("output is null"));
    assert_eq!(errors[2].as_deref(), Some("reference is empty"));
    assert_eq!(errors[3], None);
    for i in [0, 1, 2, 4] {
        assert_eq!(row(&b, i), vec![None; 5], "row {i} must have null metrics");
    }
    // An empty output is a (wrong) answer, scored as such.
    assert_eq!(row(&b, 3), vec![Some(0.0); 5]);
    // No id column: ids are the row ordinals.
    let ids = b
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow::array::UInt64Array>()
        .unwrap()
        .clone();
    assert_eq!(ids.values().to_vec(), vec![0, 1, 2, 3, 4, 5]);
}

#[test]
fn every_string_encoding_gives_the_same_scores() {
    let refs = ["Paris", "one hundred", "Tokyo", "Paris"];
    let outs = ["paris", "100", "It is Tokyo.", "Lyon"];
    let dir = tempfile::tempdir().unwrap();
    let encodings: Vec<(&str, ArrayRef, ArrayRef)> = vec![
        (
            "utf8",
            Arc::new(StringArray::from(refs.to_vec())),
            Arc::new(StringArray::from(outs.to_vec())),
        ),
        (
            "large",
            Arc::new(LargeStringArray::from(refs.to_vec())),
            Arc::new(LargeStringArray::from(outs.to_vec())),
        ),
        (
            "view",
            Arc::new(StringViewArray::from(refs.to_vec())),
            Arc::new(StringViewArray::from(outs.to_vec())),
        ),
        (
            "dict",
            Arc::new(refs.iter().copied().collect::<DictionaryArray<Int32Type>>()),
            Arc::new(outs.iter().copied().collect::<DictionaryArray<Int32Type>>()),
        ),
    ];
    let mut results = Vec::new();
    for (name, r, o) in encodings {
        let input = dir.path().join(format!("{name}.parquet"));
        let out = dir.path().join(format!("{name}.out.parquet"));
        write_parquet(&input, vec![("reference", r), ("output", o)]);
        let schema_type = format!(
            "{:?}",
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                std::fs::File::open(&input).unwrap()
            )
            .unwrap()
            .schema()
            .field(0)
            .data_type()
        );
        ok(&score(&input, &out, &[]));
        let b = read_parquet(&out);
        results.push((
            name,
            schema_type,
            (0..4).map(|i| row(&b, i)).collect::<Vec<_>>(),
        ));
    }
    // The files really do hold four different encodings.
    let types: Vec<&str> = results.iter().map(|r| r.1.as_str()).collect();
    assert_eq!(
        types,
        ["Utf8", "LargeUtf8", "Utf8View", "Dictionary(Int32, Utf8)"]
    );
    for r in &results[1..] {
        assert_eq!(r.2, results[0].2, "{} differs from utf8", r.0);
    }
    assert_eq!(results[0].2[0][2], Some(1.0));
}

#[test]
fn aliases_map_columns_when_unambiguous() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    let out = dir.path().join("out.parquet");
    write_parquet(
        &input,
        vec![
            (
                "example_id",
                Arc::new(Int64Array::from(vec![7, 9])) as ArrayRef,
            ),
            ("question", s(&["q1", "q2"])),
            ("ground_truth", s(&["yes", "no"])),
            ("actual_output", s(&["yes", "yes"])),
        ],
    );
    ok(&score(&input, &out, &[]));
    let b = read_parquet(&out);
    assert_eq!(f32s(&b, "exact_match"), vec![Some(1.0), Some(0.0)]);
    let ids = b
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<Int64Array>()
        .unwrap()
        .clone();
    assert_eq!(
        ids.values().to_vec(),
        vec![7, 9],
        "id keeps the input's type and values"
    );

    // inspect shows how each column was found
    let shown = ok(&refscore(&["inspect", input.to_str().unwrap()]));
    assert!(shown.contains("rows: 2"), "{shown}");
    assert!(
        shown.contains("reference  <- 'ground_truth'  [alias]"),
        "{shown}"
    );
    assert!(
        shown.contains("input      <- 'question'  [alias]"),
        "{shown}"
    );
}

#[test]
fn explicit_mapping_overrides_and_resolves_ambiguity() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    write_parquet(
        &input,
        vec![
            ("ground_truth", s(&["a"])),
            ("expected_output", s(&["b"])),
            ("response", s(&["b"])),
        ],
    );
    let out = dir.path().join("out.parquet");
    let err = fails(&score(&input, &out, &[]), 78);
    assert!(
        err.contains("ambiguous")
            && err.contains("'ground_truth'")
            && err.contains("'expected_output'"),
        "{err}"
    );
    assert!(err.contains("--reference-col"), "{err}");
    ok(&score(
        &input,
        &out,
        &["--reference-col", "expected_output"],
    ));
    assert_eq!(f32s(&read_parquet(&out), "exact_match"), vec![Some(1.0)]);
}

#[test]
fn keep_passes_input_columns_through_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    let out = dir.path().join("out.parquet");
    let n = 100_000;
    let refs: Vec<String> = (0..n).map(|i| format!("answer {}", i % 97)).collect();
    let outs: Vec<String> = (0..n).map(|i| format!("answer {}", i % 89)).collect();
    let tags: Vec<String> = (0..n).map(|i| format!("tag-{i}")).collect();
    write_parquet(
        &input,
        vec![
            (
                "reference",
                Arc::new(StringArray::from(refs.clone())) as ArrayRef,
            ),
            ("output", Arc::new(StringArray::from(outs.clone()))),
            ("tag", Arc::new(StringArray::from(tags.clone()))),
        ],
    );
    ok(&score(
        &input,
        &out,
        &[
            "--keep",
            "tag",
            "--batch-size",
            "7000",
            "--metrics",
            "lexical",
        ],
    ));
    let b = read_parquet(&out);
    assert_eq!(b.num_rows(), n);
    let names = column_names(&b);
    assert_eq!(
        names,
        [
            "id",
            "exact_match",
            "contains_match",
            "exact_match_norm",
            "contains_match_norm",
            "token_f1",
            "status",
            "error",
            "tag"
        ]
    );
    let kept = texts(&b, "tag");
    let em = f32s(&b, "exact_match");
    for i in (0..n).step_by(997) {
        assert_eq!(kept[i].as_deref(), Some(tags[i].as_str()));
        assert_eq!(
            em[i],
            Some(if refs[i] == outs[i] { 1.0 } else { 0.0 }),
            "row {i}"
        );
    }
}

#[test]
fn metrics_flag_selects_columns() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    let out = dir.path().join("out.parquet");
    write_parquet(
        &input,
        vec![("reference", s(&["a b"])), ("output", s(&["a"]))],
    );
    ok(&score(&input, &out, &["--metrics", "token_f1,exact_match"]));
    let b = read_parquet(&out);
    let names = column_names(&b);
    assert_eq!(names, ["id", "exact_match", "token_f1", "status", "error"]);
    let err = fails(
        &score(
            &input,
            &dir.path().join("o2.parquet"),
            &["--metrics", "exact,token_f1"],
        ),
        64,
    );
    assert!(err.contains("unknown metric 'exact'"), "{err}");
}

#[test]
fn zero_rows_give_a_zero_row_file_with_the_full_schema() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    let out = dir.path().join("out.parquet");
    write_parquet(
        &input,
        vec![("id", s(&[])), ("reference", s(&[])), ("output", s(&[]))],
    );
    ok(&score(&input, &out, &["--metrics", "lexical"]));
    let b = read_parquet(&out);
    assert_eq!(b.num_rows(), 0);
    let names = column_names(&b);
    assert_eq!(
        names,
        [
            "id",
            "exact_match",
            "contains_match",
            "exact_match_norm",
            "contains_match_norm",
            "token_f1",
            "status",
            "error"
        ]
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out.parquet.summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(summary["rows"], 0);
}

#[test]
fn directories_and_globs_read_every_file_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    std::fs::create_dir_all(data.join("part=2")).unwrap();
    write_parquet(
        &data.join("a.parquet"),
        vec![("reference", s(&["1", "2"])), ("output", s(&["1", "x"]))],
    );
    write_parquet(
        &data.join("b.parquet"),
        vec![("reference", s(&["3"])), ("output", s(&["3"]))],
    );
    write_parquet(
        &data.join("part=2/c.parquet"),
        vec![("reference", s(&["4"])), ("output", s(&["y"]))],
    );
    std::fs::write(data.join("_SUCCESS"), "").unwrap();
    let out = dir.path().join("dir.parquet");
    ok(&score(&data, &out, &[]));
    assert_eq!(
        f32s(&read_parquet(&out), "exact_match"),
        vec![Some(1.0), Some(0.0), Some(1.0), Some(0.0)]
    );
    let out = dir.path().join("glob.parquet");
    let pattern = format!("{}/*.parquet", data.display());
    ok(&refscore(&[
        "score",
        &pattern,
        "-o",
        out.to_str().unwrap(),
        "-q",
    ]));
    let b = read_parquet(&out);
    assert_eq!(
        f32s(&b, "exact_match"),
        vec![Some(1.0), Some(0.0), Some(1.0)]
    );
    let ids = b
        .column_by_name("id")
        .unwrap()
        .as_any()
        .downcast_ref::<arrow::array::UInt64Array>()
        .unwrap()
        .clone();
    assert_eq!(
        ids.values().to_vec(),
        vec![0, 1, 2],
        "ordinals continue across files"
    );
}

#[test]
fn summary_is_printed_and_written() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("out.parquet");
    let printed = ok(&refscore(&[
        "score",
        example().to_str().unwrap(),
        "-o",
        out.to_str().unwrap(),
        "--metrics",
        "lexical",
    ]));
    assert!(
        printed.contains("exact_match_norm") && printed.contains("pass rate"),
        "{printed}"
    );
    let summary: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("out.parquet.summary.json")).unwrap(),
    )
    .unwrap();
    let rows = read_parquet(&out).num_rows() as u64;
    assert_eq!(summary["rows"], rows);
    assert_eq!(
        summary["rows_ok"].as_u64().unwrap()
            + summary["rows_partial"].as_u64().unwrap()
            + summary["rows_error"].as_u64().unwrap(),
        rows
    );
    let metrics = summary["metrics"].as_array().unwrap();
    let em = metrics.iter().find(|m| m["name"] == "exact_match").unwrap();
    let values = f32s(&read_parquet(&out), "exact_match");
    let valued: Vec<f32> = values.into_iter().flatten().collect();
    let mean = valued.iter().map(|v| *v as f64).sum::<f64>() / valued.len() as f64;
    assert_eq!(em["count"], valued.len() as u64);
    assert!((em["mean"].as_f64().unwrap() - mean).abs() < 1e-9);
    assert!((em["pass_rate"].as_f64().unwrap() - mean).abs() < 1e-9);
    assert!(summary["peak_rss_bytes"].as_u64().unwrap() > 0);
}

#[test]
fn config_file_supplies_settings_and_flags_win() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    write_parquet(
        &input,
        vec![
            ("gold", s(&["a", "b"])),
            ("pred", s(&["a", "c"])),
            ("alt", s(&["c", "c"])),
        ],
    );
    std::fs::write(
        dir.path().join("refscore.toml"),
        "input = \"in.parquet\"\noutput = \"cfg.parquet\"\nreference_col = \"gold\"\noutput_col = \"pred\"\nmetrics = [\"exact_match\"]\nquiet = true\n",
    )
    .unwrap();
    let cfg = dir.path().join("refscore.toml");
    ok(&refscore(&["score", "--config", cfg.to_str().unwrap()]));
    let b = read_parquet(&dir.path().join("cfg.parquet"));
    assert_eq!(f32s(&b, "exact_match"), vec![Some(1.0), Some(0.0)]);
    let out2 = dir.path().join("flag.parquet");
    ok(&refscore(&[
        "score",
        "--config",
        cfg.to_str().unwrap(),
        "-o",
        out2.to_str().unwrap(),
        "--output-col",
        "alt",
    ]));
    assert_eq!(
        f32s(&read_parquet(&out2), "exact_match"),
        vec![Some(0.0), Some(0.0)]
    );

    std::fs::write(
        dir.path().join("bad.toml"),
        "input = \"in.parquet\"\nrefernce_col = \"gold\"\n",
    )
    .unwrap();
    let err = fails(
        &refscore(&[
            "score",
            "--config",
            dir.path().join("bad.toml").to_str().unwrap(),
            "-o",
            "x.parquet",
        ]),
        78,
    );
    assert!(
        err.contains("bad.toml:2") && err.contains("refernce_col"),
        "{err}"
    );
}
