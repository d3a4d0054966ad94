//! The fact ratio on this machine: `--facts sentences` (an answer's
//! sentences are its facts) and `--fact-check nli` (the `--cross-model` NLI
//! model checks each fact), against sentence-transformers' CrossEncoder over
//! the same facts (tests/fixtures/fact-nli-tiny-cross-roberta-nli.jsonl,
//! scripts/fixtures/make-fact-nli-fixture.py): with both no judge is needed
//! at all; with one, the judge (a scripted server that logs what it is
//! asked) is asked only the other part.

mod common;

use std::path::{Path, PathBuf};

use arrow::array::AsArray;
use arrow::datatypes::UInt32Type;
use common::judge_server::{chat, start};
use common::*;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The fixture's header and rows.
fn fixture() -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(
        root().join("tests/fixtures/fact-nli-tiny-cross-roberta-nli.jsonl"),
    )
    .unwrap();
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let header = lines.next().unwrap()["header"].clone();
    (header, lines.collect())
}

fn input(dir: &Path, rows: &[Value]) -> PathBuf {
    let col = |k: &str| -> arrow::array::ArrayRef {
        let v: Vec<&str> = rows.iter().map(|r| r[k].as_str().unwrap()).collect();
        s(&v)
    };
    let path = dir.join("in.parquet");
    write_parquet(
        &path,
        vec![
            ("id", col("id")),
            ("reference", col("reference")),
            ("output", col("output")),
        ],
    );
    path
}

/// The flags of a fact ratio checked by the tiny NLI model at the
/// fixture's threshold.
fn nli_flags(threshold: &str) -> Vec<String> {
    [
        "--metrics",
        "fact_similarity",
        "--fact-check",
        "nli",
        "--fact-check-threshold",
        threshold,
        "--cross-model",
        &tiny_model("tiny-cross-roberta-nli"),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect()
}

/// [`nli_flags`] with the answers' sentences as their facts: the wholly
/// local fact ratio, no judge.
fn sentence_flags(threshold: &str) -> Vec<String> {
    let mut flags = nli_flags(threshold);
    flags.extend(["--facts".to_string(), "sentences".to_string()]);
    flags
}

fn run(input: &Path, out: &Path, flags: &[String]) -> std::process::Output {
    score(
        input,
        out,
        &flags.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

/// Every row's fact ratio and counts as the fixture has them.
fn assert_fixture_values(out: &Path, rows: &[Value]) {
    let b = read_parquet(out);
    let counts = b.column_by_name("fact_counts").unwrap().as_struct().clone();
    let count = |k: &str| {
        counts
            .column_by_name(k)
            .unwrap()
            .as_primitive::<UInt32Type>()
            .clone()
    };
    let (matched, n_ref, n_out) = (count("matched"), count("reference"), count("output"));
    for column in ["fact_similarity", "fact_recall", "fact_precision"] {
        let got = f32s(&b, column);
        for (i, r) in rows.iter().enumerate() {
            let want = r[column].as_f64().unwrap();
            let g = f64::from(got[i].unwrap_or(f32::NAN));
            assert!((g - want).abs() < 1e-6, "{column} row {i}: {g} != {want}");
        }
    }
    for (i, r) in rows.iter().enumerate() {
        assert_eq!(
            (matched.value(i), n_ref.value(i), n_out.value(i)),
            (
                r["matched"].as_u64().unwrap() as u32,
                r["n_reference"].as_u64().unwrap() as u32,
                r["n_output"].as_u64().unwrap() as u32
            ),
            "row {i}"
        );
    }
}

/// Sentences as facts, the NLI model as checker: no --judge-url, no call;
/// the values are sentence-transformers' over the same facts.
#[test]
fn a_wholly_local_fact_ratio_needs_no_judge_and_matches_cross_encoder() {
    let (header, rows) = fixture();
    let threshold = header["threshold"].as_f64().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), &rows);
    let out = dir.path().join("o.parquet");
    let flags = sentence_flags(&threshold);
    ok(&run(&inp, &out, &flags));
    assert_fixture_values(&out, &rows);
    let b = read_parquet(&out);
    assert!(texts(&b, "fact_similarity_source")
        .iter()
        .all(|s| s.as_deref() == Some("nli")));
    assert!(texts(&b, "judge_templates")
        .iter()
        .all(|s| s.as_deref() == Some("sentences,nli")));
    let j = &summary(&out)["judge"];
    assert_eq!(j["calls"], 0);
    assert_eq!(j["rows_judged"], 0);
    let checks: usize = rows
        .iter()
        .map(|r| {
            r["reference_facts"].as_array().unwrap().len()
                + r["output_facts"].as_array().unwrap().len()
        })
        .sum();
    let nli = j["fact_checks_nli"].as_u64().unwrap() as usize;
    assert!(nli > 0 && nli <= checks, "{nli} of {checks}");
    assert!(j["facts_from_sentences"].as_u64().unwrap() > 0);

    // The fingerprint covers the threshold: another one is another run.
    let id = summary(&out)["run_id"].clone();
    let mut other = nli_flags("0.9");
    other.extend(["--facts".into(), "sentences".into(), "--overwrite".into()]);
    ok(&run(&inp, &out, &other));
    assert_ne!(summary(&out)["run_id"], id);
}

/// The NLI metrics and the fact check in one run hold one copy of the
/// model between them: the fact ratio is still the fixture's, and the NLI
/// metrics are those of a run that asks them alone.
#[test]
fn the_nli_metrics_and_the_fact_check_share_the_model() {
    let (header, rows) = fixture();
    let threshold = header["threshold"].as_f64().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), &rows);
    let both = dir.path().join("both.parquet");
    let mut flags = sentence_flags(&threshold);
    flags[1] = "fact_similarity,nli".to_string();
    ok(&run(&inp, &both, &flags));
    assert_fixture_values(&both, &rows);
    let alone = dir.path().join("alone.parquet");
    ok(&score(
        &inp,
        &alone,
        &[
            "--metrics",
            "nli",
            "--cross-model",
            &tiny_model("tiny-cross-roberta-nli"),
        ],
    ));
    let (b, a) = (read_parquet(&both), read_parquet(&alone));
    for column in [
        "nli_precision",
        "nli_recall",
        "nli_equivalence",
        "nli_contradiction",
    ] {
        assert_eq!(f32s(&b, column), f32s(&a, column), "{column}");
    }
}

/// The judge extracts (here: the sentences, as a scripted judge), the NLI
/// model checks: the judge is asked to extract and nothing else.
#[test]
fn with_nli_checks_the_judge_only_extracts() {
    let (header, rows) = fixture();
    let threshold = header["threshold"].as_f64().unwrap().to_string();
    let server = start(|req, _| {
        assert_eq!(req.kind(), "fact_extract", "the judge was asked a check");
        let text = req
            .user()
            .strip_prefix("Text:\n")
            .unwrap()
            .trim()
            .to_string();
        let mut facts = Vec::new();
        let mut start = 0;
        for (i, c) in text.char_indices() {
            if ".!?".contains(c) && text[i + 1..].starts_with(' ') {
                facts.push(text[start..=i].trim().to_string());
                start = i + 1;
            }
        }
        facts.push(text[start..].trim().to_string());
        chat(&serde_json::json!({ "facts": facts }).to_string())
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), &rows);
    let out = dir.path().join("o.parquet");
    let mut flags = nli_flags(&threshold);
    flags.extend(
        ["--judge-url", &server.url, "--judge-model", "scripted"]
            .iter()
            .map(|s| s.to_string()),
    );
    ok(&run(&inp, &out, &flags));
    assert_fixture_values(&out, &rows);
    assert!(server.requests().iter().all(|r| r.kind() == "fact_extract"));
    assert!(texts(&read_parquet(&out), "fact_similarity_source")
        .iter()
        .all(|s| s.as_deref() == Some("nli")));
}

/// Sentences as facts, the judge checks: the judge is never asked to
/// extract.
#[test]
fn with_sentences_the_judge_only_checks() {
    let (_, rows) = fixture();
    let server = start(|req, _| {
        assert_ne!(req.kind(), "fact_extract", "the judge was asked to extract");
        chat("yes")
    });
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), &rows);
    let out = dir.path().join("o.parquet");
    ok(&score(
        &inp,
        &out,
        &[
            "--metrics",
            "fact_similarity",
            "--facts",
            "sentences",
            "--judge-url",
            &server.url,
            "--judge-model",
            "scripted",
        ],
    ));
    // Every fact holds: the ratio is min(n_ref, n_out) / max(n_ref, n_out).
    let sim = f32s(&read_parquet(&out), "fact_similarity");
    for (i, r) in rows.iter().enumerate() {
        let (a, b) = (
            r["n_reference"].as_f64().unwrap(),
            r["n_output"].as_f64().unwrap(),
        );
        assert!(
            (f64::from(sim[i].unwrap()) - a.min(b) / a.max(b)).abs() < 1e-6,
            "row {i}"
        );
    }
    assert!(!server.requests().is_empty());
}

/// What cannot work is refused before any work, with the reason.
#[test]
fn local_fact_settings_that_cannot_work_are_refused_first() {
    let (_, rows) = fixture();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), &rows);
    let out = dir.path().join("o.parquet");
    let local = |extra: &[&str]| {
        let mut a = vec!["--facts", "sentences", "--fact-check", "nli"];
        a.extend_from_slice(extra);
        score(&inp, &out, &a)
    };
    // One local part alone still needs the judge for the other.
    let err = fails(
        &score(
            &inp,
            &out,
            &["--facts", "sentences", "--metrics", "lexical"],
        ),
        78,
    );
    assert!(err.contains("pass --judge-url, or both"), "{err}");
    let err = fails(&local(&["--metrics", "fact_similarity"]), 78);
    assert!(err.contains("--cross-model"), "{err}");
    let one_output = tiny_model("tiny-cross-bert");
    let err = fails(
        &local(&["--metrics", "fact_similarity", "--cross-model", &one_output]),
        78,
    );
    assert!(err.contains("needs an NLI model"), "{err}");
    let nli = tiny_model("tiny-cross-roberta-nli");
    let err = fails(
        &local(&["--metrics", "meaning_match", "--cross-model", &nli]),
        78,
    );
    assert!(
        err.contains("meaning_match needs a judge endpoint"),
        "{err}"
    );
    let err = fails(
        &score(
            &inp,
            &out,
            &[
                "--metrics",
                "fact_similarity",
                "--judge-url",
                "http://127.0.0.1:9/v1",
                "--fact-check-threshold",
                "0.7",
            ],
        ),
        64,
    );
    assert!(
        err.contains("--fact-check-threshold is for --fact-check nli"),
        "{err}"
    );
    let err = fails(
        &local(&[
            "--metrics",
            "fact_similarity",
            "--cross-model",
            &nli,
            "--fact-check-threshold",
            "2",
        ]),
        64,
    );
    assert!(err.contains("--fact-check-threshold 2"), "{err}");
    assert!(!out.exists());
}

/// A fact ratio with no judge at all says so in the summary: no judge
/// templates or output format (nothing was asked), and the NLI model that
/// checked the facts by name, with its threshold.
#[test]
fn a_judge_less_summary_names_the_nli_model_and_no_judge_template() {
    let (header, rows) = fixture();
    let threshold = header["threshold"].as_f64().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let inp = input(dir.path(), &rows);
    let out = dir.path().join("o.parquet");
    let flags = sentence_flags(&threshold);
    ok(&run(&inp, &out, &flags));
    let j = &summary(&out)["judge"];
    for key in ["templates", "response_format", "reasons"] {
        assert!(j.get(key).is_none(), "a judge-less summary has {key}: {j}");
    }
    let nli = &j["fact_check"];
    assert_eq!(nli["model"], tiny_model("tiny-cross-roberta-nli"), "{j}");
    assert_eq!(nli["architecture"], "RobertaForSequenceClassification");
    assert_eq!(nli["entailment_label"], "entailment");
    assert!(
        (nli["threshold"].as_f64().unwrap() - header["threshold"].as_f64().unwrap()).abs() < 1e-6
    );

    // With a judge that extracts, the judge's part stays and the model is
    // named beside it.
    let server = start(|req, _| {
        let text = req.user().strip_prefix("Text:\n").unwrap_or("").to_string();
        chat(&serde_json::json!({ "facts": [text] }).to_string())
    });
    let judged = dir.path().join("judged.parquet");
    let mut flags = nli_flags(&threshold);
    flags.extend(
        ["--judge-url", &server.url, "--judge-model", "scripted"]
            .iter()
            .map(|s| s.to_string()),
    );
    ok(&run(&inp, &judged, &flags));
    let j = &summary(&judged)["judge"];
    assert!(
        j["templates"].as_array().is_some_and(|t| !t.is_empty()),
        "{j}"
    );
    assert_eq!(
        j["fact_check"]["model"],
        tiny_model("tiny-cross-roberta-nli")
    );
}

/// A fact past the NLI model's token limit is cut from the premise it is
/// checked against: the checks so cut are counted, and the run warns.
#[test]
fn fact_checks_cut_at_the_model_limit_are_counted_and_warned() {
    let dir = tempfile::tempdir().unwrap();
    // The tiny model reads 64 tokens a pair: the last sentence of this
    // reference is past them.
    let filler = "The river runs through the old town and past the market square. ".repeat(8);
    let reference = format!("{filler}The bridge was built in 1890.");
    let path = dir.path().join("long.parquet");
    write_parquet(
        &path,
        vec![
            ("reference", s(&[reference.as_str(), "Cats sleep a lot."])),
            (
                "output",
                s(&["The bridge was built in 1890.", "Cats sleep a lot."]),
            ),
        ],
    );
    let (header, _) = fixture();
    let threshold = header["threshold"].as_f64().unwrap().to_string();
    let out = dir.path().join("o.parquet");
    // Not --quiet: the warning is printed.
    let mut args = vec!["score", path.to_str().unwrap(), "-o", out.to_str().unwrap()];
    let flags = nli_flags(&threshold);
    args.extend(flags.iter().map(String::as_str));
    args.extend(["--facts", "sentences"]);
    let o = refscore(&args);
    ok(&o);
    let j = &summary(&out)["judge"];
    let cut = j["fact_checks_nli_truncated"].as_u64().expect("counted");
    let all = j["fact_checks_nli"].as_u64().unwrap();
    // The output's one fact against the long reference, and each of the
    // reference's nine facts against the short output: the first only is
    // cut (the hypothesis, a fact, fits; the premise is cut).
    assert!(cut >= 1 && cut < all, "{cut} of {all}: {j}");
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains(&format!("{cut} of {all} fact checks")) && stderr.contains("token limit"),
        "{stderr}"
    );
}

/// `--facts sentences` splits where a sentence ends, not after an
/// abbreviation, a decimal's point or a list item's number: each answer
/// here has two facts (the summary counts them, with the output's).
#[test]
fn sentences_do_not_end_at_abbreviations_decimals_or_list_numbers() {
    let dir = tempfile::tempdir().unwrap();
    let answers = [
        "Mr. Smith met Dr. Jones 3.5 km from the border. They talked, e.g. about rain.",
        "Prof. Lee, Ph.D., wrote it in 1999. It sold 2.5 million copies!",
        "The recipe:\n1. Boil the water.",
        "It costs $3.50 vs. $4.00 at St. Mary's. Buy it.",
    ];
    let path = dir.path().join("in.parquet");
    write_parquet(
        &path,
        vec![
            ("reference", s(&answers)),
            ("output", s(&["Something else entirely."; 4])),
        ],
    );
    let (header, _) = fixture();
    let threshold = header["threshold"].as_f64().unwrap().to_string();
    let out = dir.path().join("o.parquet");
    let flags = sentence_flags(&threshold);
    ok(&run(&path, &out, &flags));
    let b = read_parquet(&out);
    let counts = b.column_by_name("fact_counts").unwrap().as_struct().clone();
    let n_ref = counts
        .column_by_name("reference")
        .unwrap()
        .as_primitive::<UInt32Type>()
        .clone();
    for (i, a) in answers.iter().enumerate() {
        assert_eq!(n_ref.value(i), 2, "{a:?}");
    }
}
