//! The span detector against LettuceDetect 0.2.3's own inference
//! (`TransformerDetector.predict`) on the tiny seeded ModernBERT token
//! classifier, from tests/fixtures/lettuce-tiny-token-modernbert.jsonl
//! (scripts/fixtures/make-lettuce-fixture.py): per-token probabilities,
//! spans (offsets and text), the row's score, truncation, and the answer
//! LettuceDetect refuses.

mod common;

use common::{fixtures, jsonl};

use refscore_embed::{span_prompt, CrossOptions, CrossReport, Detected, Precision, SpanDetector};
use serde_json::Value;

const MODEL: &str = "tiny-token-modernbert";

fn detect(precision: Precision) -> (Value, Vec<Value>, Vec<Detected>, CrossReport) {
    let (header, rows) = jsonl(&format!("lettuce-{MODEL}.jsonl"));
    let options = CrossOptions {
        precision,
        ..CrossOptions::default()
    };
    let detector = SpanDetector::load(&fixtures().join("models").join(MODEL), &options).unwrap();
    assert_eq!(
        detector.max_length() as u64,
        header["max_length"].as_u64().unwrap()
    );
    let prompts: Vec<String> = rows
        .iter()
        .map(|r| span_prompt(r["reference"].as_str().unwrap(), r["question"].as_str()))
        .collect();
    let pairs: Vec<(&str, &str)> = prompts
        .iter()
        .zip(&rows)
        .map(|(p, r)| (p.as_str(), r["output"].as_str().unwrap()))
        .collect();
    let mut report = CrossReport::default();
    let got = detector.detect(&pairs, &mut report).unwrap();
    (header, rows, got, report)
}

fn close(a: f32, b: &Value, what: &str) -> f32 {
    let b = b.as_f64().unwrap() as f32;
    assert!((a - b).abs() < 1e-4, "{what}: {a} vs LettuceDetect {b}");
    (a - b).abs()
}

#[test]
fn spans_match_lettucedetect() {
    let (_, rows, got, report) = detect(Precision::Fp32);
    let (mut worst, mut spans, mut refused) = (0f32, 0, 0);
    for (row, got) in rows.iter().zip(&got) {
        let id = row["id"].as_str().unwrap();
        if row.get("error").is_some() {
            let r = got.as_ref().expect_err(id);
            assert!(r.answer_tokens + 3 >= r.max_length, "{id}: {r:?}");
            assert!(r.message().contains("not scored"), "{}", r.message());
            refused += 1;
            continue;
        }
        let d = got
            .as_ref()
            .unwrap_or_else(|r| panic!("{id}: refused {r:?}"));
        assert_eq!(d.truncated, row["truncated"].as_bool().unwrap(), "{id}");
        let want = row["tokens"].as_array().unwrap();
        assert_eq!(d.probabilities.len(), want.len(), "{id}: labelled tokens");
        for (k, (a, b)) in d.probabilities.iter().zip(want).enumerate() {
            worst = worst.max(close(*a, b, &format!("{id} token {k}")));
        }
        worst = worst.max(close(d.score, &row["score"], &format!("{id} score")));
        let want = row["spans"].as_array().unwrap();
        let shown: Vec<(u32, u32, &str)> = d
            .spans
            .iter()
            .map(|s| (s.start, s.end, s.text.as_str()))
            .collect();
        let wanted: Vec<(u32, u32, &str)> = want
            .iter()
            .map(|s| {
                (
                    s["start"].as_u64().unwrap() as u32,
                    s["end"].as_u64().unwrap() as u32,
                    s["text"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(shown, wanted, "{id}: spans");
        for (s, w) in d.spans.iter().zip(want) {
            worst = worst.max(close(s.confidence, &w["confidence"], &format!("{id} span")));
        }
        spans += d.spans.len();
    }
    assert!(
        refused >= 1 && spans >= 10,
        "{refused} refused, {spans} spans"
    );
    assert_eq!(report.pairs as usize, rows.len() - refused);
    eprintln!(
        "{MODEL}: {} rows, {spans} spans, {refused} refused, {} truncated, worst difference {worst:.2e}",
        rows.len(),
        report.truncated
    );
}

/// bf16 and int8 keep the probabilities near fp32's.
#[test]
fn spans_in_reduced_precision_stay_near_fp32() {
    let (_, _, reference, _) = detect(Precision::Fp32);
    for precision in [Precision::Bf16, Precision::Int8] {
        let (_, _, got, _) = detect(precision);
        let worst = got
            .iter()
            .zip(&reference)
            .filter_map(|(a, b)| Some((a.as_ref().ok()?, b.as_ref().ok()?)))
            .flat_map(|(a, b)| a.probabilities.iter().zip(&b.probabilities))
            .map(|(x, y)| (x - y).abs())
            .fold(0f32, f32::max);
        eprintln!("{MODEL} {precision:?}: worst probability difference from fp32 {worst:.2e}");
        assert!(worst > 0.0 && worst < 0.1, "{precision:?}: {worst}");
    }
}
