//! End to end with a real judge: llama.cpp's llama-server running
//! Qwen2.5-Coder-1.5B-Instruct (scripts/judge-server.sh), on the example
//! set's judge rows. Checks that every requested row gets a verdict, that no
//! reply fails to parse, agreement with the hand labels, what the cosine
//! cascade saves, and the fact ratio on the worked cases of docs/metrics.md#fact-ratio.
//!
//! Needs REFSCORE_JUDGE_URL. scripts/test.sh starts the server and sets
//! REFSCORE_REQUIRE_REAL_JUDGE=1, so in CI this test cannot skip; run alone
//! without a server it says so and returns.

mod common;

use std::path::{Path, PathBuf};

use arrow::array::{Array, AsArray};
use common::*;

fn url() -> Option<String> {
    match std::env::var("REFSCORE_JUDGE_URL") {
        Ok(u) if !u.is_empty() => Some(u),
        _ => {
            assert!(
                std::env::var("REFSCORE_REQUIRE_REAL_JUDGE").is_err(),
                "REFSCORE_REQUIRE_REAL_JUDGE is set but REFSCORE_JUDGE_URL is not (scripts/judge-server.sh start prints it)"
            );
            eprintln!("skipping: no REFSCORE_JUDGE_URL (scripts/test.sh starts a real judge)");
            None
        }
    }
}

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2")
}

#[test]
fn a_real_judge_scores_the_example_judge_rows() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let m = model();
    let base = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "--judge-url",
            &url,
            "--judge-model",
            "qwen2.5-coder-1.5b",
            "--judge-where",
            "judge",
            "--metrics",
            "cosine,meaning_match",
            "--model",
            m.to_str().unwrap(),
            "--judge-cache",
            cache.to_str().unwrap(),
            "--judge-concurrency",
            "2",
            "--judge-timeout",
            "120",
            "--keep",
            "expected_meaning_match,judge",
        ];
        args.extend_from_slice(extra);
        ok(&score(&example(), out, &args));
        read_parquet(out)
    };

    // Every judge row, judged.
    let full_out = dir.path().join("full.parquet");
    let full = base(&full_out, &[]);
    let wanted = bools(&full, "judge");
    let expected = bools(&full, "expected_meaning_match");
    let verdict = bools(&full, "meaning_match");
    let status = texts(&full, "status");
    let source = texts(&full, "meaning_match_source");
    let (mut labelled, mut agree) = (0, 0);
    for i in 0..full.num_rows() {
        if wanted[i] != Some(true) || status[i].as_deref() == Some("error") {
            assert!(verdict[i].is_none() || wanted[i] == Some(true));
            continue;
        }
        assert!(
            verdict[i].is_some(),
            "row {i} was requested but has no verdict ({:?})",
            texts(&full, "error")[i]
        );
        if let Some(e) = expected[i] {
            labelled += 1;
            agree += (verdict[i] == Some(e)) as usize;
        }
    }
    let j = summary(&full_out)["judge"].clone();
    assert_eq!(j["parse_failures"], 0, "{j}");
    assert_eq!(j["failures"], 0, "{j}");
    let agreement = agree as f64 / labelled as f64;
    assert!(labelled >= 50, "{labelled} labelled judge rows");
    assert!(
        agreement >= 0.6,
        "agreement with hand labels {agreement:.3} ({agree}/{labelled})"
    );

    // The cascade: only rows with cosine in the band go to the judge; the
    // rest are decided by the band's side. Answers come from the cache.
    let band_out = dir.path().join("band.parquet");
    let band = base(&band_out, &["--judge-band", "cosine:0.4..0.9"]);
    let band_verdict = bools(&band, "meaning_match");
    let band_source = texts(&band, "meaning_match_source");
    let judged_full = source
        .iter()
        .filter(|s| matches!(s.as_deref(), Some("judge" | "cache")))
        .count();
    let judged_band = band_source
        .iter()
        .filter(|s| matches!(s.as_deref(), Some("judge" | "cache")))
        .count();
    let by_band = band_source
        .iter()
        .filter(|s| s.as_deref() == Some("band"))
        .count();
    let decided: Vec<usize> = (0..band.num_rows())
        .filter(|&i| verdict[i].is_some())
        .collect();
    let same = decided
        .iter()
        .filter(|&&i| band_verdict[i] == verdict[i])
        .count();
    let band_labels = decided
        .iter()
        .filter(|&&i| expected[i].is_some() && band_verdict[i] == expected[i])
        .count();
    assert_eq!(
        summary(&band_out)["judge"]["calls"],
        0,
        "in-band answers come from the cache"
    );
    assert_eq!(
        judged_band
            + by_band
            + source
                .iter()
                .filter(|s| s.as_deref() == Some("rule"))
                .count(),
        decided.len()
    );

    let report = serde_json::json!({
        "judge_rows": decided.len(),
        "labelled": labelled,
        "agreement_with_labels": agreement,
        "decided_by_rule": j["decided_by_rule"],
        "model_calls": j["calls"],
        "seconds_per_judged_row": j["seconds_per_judged_row"],
        "parse_failures": j["parse_failures"],
        "band": "cosine:0.4..0.9",
        "band_calls_saved": judged_full - judged_band,
        "band_decided": by_band,
        "band_agreement_with_full_judging": same as f64 / decided.len() as f64,
        "band_agreement_with_labels": band_labels as f64 / labelled as f64,
    });
    eprintln!("real judge report: {report}");
    let target = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("real-judge-report.json");
    std::fs::write(target, report.to_string()).unwrap();
}

#[test]
fn a_real_judge_gives_fact_ratios_and_similarity_scores() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("facts.parquet");
    write_parquet(
        &input,
        vec![
            (
                "question",
                s(&[
                    "Which fruits does Amy like?",
                    "What is the capital of France, and what language is spoken there?",
                    "How old was the patient?",
                ]),
            ),
            (
                "reference",
                s(&[
                    "Amy likes apples and bananas",
                    "Paris is the capital; French is spoken",
                    "96 years old",
                ]),
            ),
            (
                "output",
                s(&[
                    "Amy likes apples, berries and plums",
                    "Paris is the capital",
                    "more than 95",
                ]),
            ),
        ],
    );
    let out = dir.path().join("o.parquet");
    ok(&score(
        &input,
        &out,
        &[
            "--judge-url",
            &url,
            "--metrics",
            "similarity,fact_similarity",
            "--judge-concurrency",
            "2",
            "--judge-timeout",
            "120",
        ],
    ));
    let b = read_parquet(&out);
    let sim = f32s(&b, "similarity");
    let facts = f32s(&b, "fact_similarity");
    for i in 0..3 {
        let (s, f) = (sim[i].unwrap_or(-1.0), facts[i].unwrap_or(-1.0));
        assert!(
            (0.0..=1.0).contains(&s) && (0.0..=1.0).contains(&f),
            "row {i}: {s} {f} {:?}",
            texts(&b, "error")[i]
        );
    }
    let counts = b.column_by_name("fact_counts").unwrap().as_struct().clone();
    assert_eq!(counts.null_count(), 0);
    eprintln!(
        "real judge facts: similarity {sim:?}, fact_similarity {facts:?} (docs/metrics.md#fact-ratio: 1/3, 0.5, 0)"
    );
    assert_eq!(summary(&out)["judge"]["parse_failures"], 0);
}
