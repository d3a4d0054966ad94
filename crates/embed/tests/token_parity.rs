//! Token classifiers (`*ForTokenClassification`) against transformers'
//! per-token softmax, on the tiny seeded folders of tests/fixtures/models
//! and their reference values in tests/fixtures/tokens-*.jsonl
//! (scripts/fixtures/make-token-classifier-fixtures.py): every row's
//! tokens, truncation included.

use std::path::PathBuf;

use refscore_embed::{CrossOptions, CrossReport, Precision, TokenClassifier};
use serde_json::Value;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
}

fn rows(name: &str) -> (Value, Vec<Value>) {
    let text = std::fs::read_to_string(fixtures().join(format!("tokens-{name}.jsonl"))).unwrap();
    let mut lines = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap());
    let header = lines.next().unwrap();
    (header["header"].clone(), lines.collect())
}

fn load(name: &str, precision: Precision) -> TokenClassifier {
    let options = CrossOptions {
        precision,
        ..CrossOptions::default()
    };
    TokenClassifier::load(&fixtures().join("models").join(name), &options).unwrap()
}

/// Every token's probabilities within 1e-4 of transformers', the same ids,
/// the same pairs cut.
fn matches_transformers(name: &str) {
    let (header, rows) = rows(name);
    let model = load(name, Precision::Fp32);
    assert_eq!(model.architecture(), header["architecture"]);
    let labels: Vec<String> = (0..model.labels().len())
        .map(|k| {
            header["id2label"][k.to_string()]
                .as_str()
                .unwrap()
                .to_string()
        })
        .collect();
    assert_eq!(model.labels(), labels.as_slice());
    assert_eq!(
        model.max_len() as u64,
        header["max_length"].as_u64().unwrap()
    );
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
    let got = model.predict(&pairs, &mut report).unwrap();
    let (mut worst, mut tokens) = (0f32, 0);
    for (row, got) in rows.iter().zip(&got) {
        let id = &row["id"];
        let ids: Vec<u32> = row["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_u64().unwrap() as u32)
            .collect();
        assert_eq!(got.ids, ids, "{name} {id}: ids");
        assert_eq!(got.truncated, row["truncated"].as_bool().unwrap(), "{id}");
        let want = row["forward"].as_array().unwrap();
        assert_eq!(got.probabilities.len(), want.len(), "{id}");
        for (k, (g, w)) in got.probabilities.iter().zip(want).enumerate() {
            let w: Vec<f32> = w
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_f64().unwrap() as f32)
                .collect();
            assert_eq!(g.len(), w.len());
            for (a, b) in g.iter().zip(&w) {
                worst = worst.max((a - b).abs());
                assert!(
                    (a - b).abs() < 1e-4,
                    "{name} {id} token {k}: {g:?} vs transformers {w:?}"
                );
            }
            tokens += 1;
        }
    }
    assert_eq!(report.pairs as usize, rows.len());
    eprintln!(
        "{name}: {} rows, {tokens} tokens, worst difference {worst:.2e}, {} truncated",
        rows.len(),
        report.truncated
    );
}

/// LettuceDetect's shape: ModernBERT's prediction head on every token.
#[test]
fn modernbert_token_classifier_matches_transformers() {
    matches_transformers("tiny-token-modernbert");
}

/// BERT's linear classifier on every token, with token types.
#[test]
fn bert_token_classifier_matches_transformers() {
    matches_transformers("tiny-token-bert");
}

/// T5ForTokenClassification (what HHEM-2.1-Open wraps): the linear
/// classifier on every token of T5's encoder, under `transformer.`.
#[test]
fn t5_token_classifier_matches_transformers() {
    matches_transformers("tiny-token-t5");
}

/// A sequence classifier, or a family without a token head, is refused
/// by name (exit 78).
#[test]
fn what_is_not_a_token_classifier_is_refused() {
    let options = CrossOptions::default();
    let Err(e) = TokenClassifier::load(&fixtures().join("models/tiny-cross-bert"), &options) else {
        panic!("a sequence classifier loaded as a token classifier")
    };
    assert!(
        e.message.contains("BertForSequenceClassification"),
        "{}",
        e.message
    );
    assert_eq!(e.class, refscore_core::ErrorClass::Config);
}

/// bf16 and int8 stay near fp32.
#[test]
fn token_classifiers_in_reduced_precision_stay_near_fp32() {
    let (_, rows) = rows("tiny-token-modernbert");
    let pairs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["reference"].as_str().unwrap(),
                r["output"].as_str().unwrap(),
            )
        })
        .collect();
    let run = |p| {
        load("tiny-token-modernbert", p)
            .predict(&pairs, &mut CrossReport::default())
            .unwrap()
    };
    let reference = run(Precision::Fp32);
    for precision in [Precision::Bf16, Precision::Int8] {
        let worst = run(precision)
            .iter()
            .zip(&reference)
            .flat_map(|(a, b)| a.probabilities.iter().zip(&b.probabilities))
            .flat_map(|(a, b)| a.iter().zip(b).map(|(x, y)| (x - y).abs()))
            .fold(0f32, f32::max);
        eprintln!("tiny-token-modernbert {precision:?}: worst difference from fp32 {worst:.2e}");
        assert!(worst > 0.0 && worst < 0.1, "{precision:?}: {worst}");
    }
}
