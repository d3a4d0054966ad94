//! Checker recipes against their authors' inference code
//! (tests/fixtures/cross-recipes.jsonl, written by
//! scripts/fixtures/make-recipe-parity-fixture.py from FactCG's and
//! MiniCheck's own `score` functions on tiny seeded twins): every row's
//! support within 1e-4, the same chunk counts, the same inputs counted as
//! longer than the limit; and the Punkt and word-tokenizer ports against
//! NLTK (tests/fixtures/punkt-english.jsonl), sentence for sentence.

use std::path::PathBuf;

use refscore_embed::recipe::{punkt::Punkt, words};
use refscore_embed::{CrossEncoder, CrossFolder, CrossOptions, CrossReport, Precision};
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn lines(name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(fixtures().join(name)).unwrap();
    text.lines()
        .skip(1)
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect()
}

#[test]
fn punkt_splits_as_nltk_splits() {
    let punkt = Punkt::english();
    let mut checked = 0;
    for row in lines("punkt-english.jsonl") {
        let text = row["text"].as_str().unwrap();
        let want: Vec<&str> = row["sentences"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s.as_str().unwrap())
            .collect();
        assert_eq!(punkt.sentences(text), want, "sentences of {text:?}");
        let counts: Vec<usize> = want.iter().map(|s| words::word_count(s)).collect();
        let want_counts: Vec<usize> = row["words"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n.as_u64().unwrap() as usize)
            .collect();
        assert_eq!(counts, want_counts, "word_tokenize counts of {want:?}");
        assert_eq!(
            words::word_count(text) as u64,
            row["word_tokenize"].as_u64().unwrap(),
            "word_tokenize of {text:?}"
        );
        checked += 1;
    }
    assert!(checked > 50, "{checked} texts");
}

/// Each row's support under `recipe` on `twin` against the fixture's
/// `key` column: the score within 1e-4, the chunks and truncation equal.
fn matches_the_authors(twin: &str, recipe: &str, key: &str) {
    let folder = CrossFolder::read(&fixtures().join("models").join(twin))
        .unwrap()
        .with_recipe(Some(recipe))
        .unwrap();
    let model = CrossEncoder::load(
        folder,
        &CrossOptions {
            precision: Precision::Fp32,
            ..CrossOptions::default()
        },
    )
    .unwrap();
    let rows: Vec<Value> = lines("cross-recipes.jsonl")
        .into_iter()
        .filter(|r| !r[key].is_null())
        .collect();
    assert!(rows.len() > 20);
    let pairs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["reference"].as_str().unwrap(),
                r["output"].as_str().unwrap(),
            )
        })
        .collect();
    let mut report = CrossReport::default();
    let got = model.support(&pairs, &mut report).unwrap();
    let mut worst = 0f64;
    for (row, s) in rows.iter().zip(&got) {
        let id = row["id"].as_str().unwrap();
        let want = row[key].as_f64().unwrap();
        let diff = (f64::from(s.score) - want).abs();
        worst = worst.max(diff);
        assert!(
            diff <= 1e-4,
            "{recipe} {id}: {} vs the authors' {want}",
            s.score
        );
        assert_eq!(
            s.chunks as u64,
            row[format!("{key}_chunks")].as_u64().unwrap(),
            "{recipe} {id}: chunks"
        );
        assert_eq!(
            s.truncated,
            row[format!("{key}_truncated")].as_bool().unwrap(),
            "{recipe} {id}: truncated"
        );
    }
    let several = rows
        .iter()
        .filter(|r| r[format!("{key}_chunks")].as_u64().unwrap() > 1)
        .count() as u64;
    assert!(several >= 5, "{key}: {several} rows with several chunks");
    assert_eq!(report.chunked, several);
    eprintln!(
        "{recipe} on {twin}: {} rows, worst |diff| {worst:.2e}",
        rows.len()
    );
}

#[test]
fn factcg_matches_its_authors_code() {
    matches_the_authors("tiny-cross-checker-deberta", "factcg", "factcg");
}

#[test]
fn minicheck_roberta_matches_its_authors_code() {
    matches_the_authors(
        "tiny-cross-checker-roberta",
        "minicheck",
        "minicheck_roberta",
    );
}

#[test]
fn minicheck_deberta_matches_its_authors_code() {
    matches_the_authors(
        "tiny-cross-checker-deberta",
        "minicheck",
        "minicheck_deberta",
    );
}
