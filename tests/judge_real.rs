//! End to end with a real judge: llama.cpp's llama-server running
//! Qwen2.5-Coder-1.5B-Instruct (scripts/env/judge-server.sh), on the example
//! set's judge rows. Checks that every requested row gets a verdict, that no
//! reply fails to parse, agreement with the hand labels, P(true) and reasons
//! as `--judge-reasons` says, prompt-cache hits, what the cosine cascade
//! saves, and the fact ratio on the worked cases of docs/metrics.md#fact-ratio.
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
                "REFSCORE_REQUIRE_REAL_JUDGE is set but REFSCORE_JUDGE_URL is not (scripts/env/judge-server.sh start prints it)"
            );
            eprintln!("skipping: no REFSCORE_JUDGE_URL (scripts/test.sh starts a real judge)");
            None
        }
    }
}

/// `example`'s columns and the boolean columns `flags` (which rows a run
/// asks the judge about), written to `path`.
fn write_with_flags(
    example: &arrow::record_batch::RecordBatch,
    path: &Path,
    flags: Vec<(&str, Vec<Option<bool>>)>,
) {
    let schema = example.schema();
    let mut columns: Vec<(&str, arrow::array::ArrayRef)> = schema
        .fields()
        .iter()
        .zip(example.columns())
        .map(|(f, c)| (f.name().as_str(), c.clone()))
        .collect();
    for (name, values) in flags {
        columns.push((
            name,
            std::sync::Arc::new(arrow::array::BooleanArray::from(values)),
        ));
    }
    write_parquet(path, columns);
}

/// `--judge-timeout` for every call here. The tests bound their work (a few
/// rows, two workers), not the wall clock of a call: on a machine shared
/// with other jobs the 1.5B judge has taken up to 547 s for one answer, and
/// a timeout there only turns a slow answer into a retry and a failed test.
const JUDGE_TIMEOUT: &str = "1800";

/// The calls that were answered: attempts less the retries a slow or busy
/// server caused, which say nothing about what the run asked.
fn answered_calls(judge: &serde_json::Value) -> u64 {
    judge["calls"].as_u64().unwrap() - judge["retries"].as_u64().unwrap()
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
    // Every other judge row of the example (30 of 60): 13 labelled true and
    // 17 false, so a judge that always gives one answer agrees on at most
    // 57% of them and fails the bar below (the other half, 11 against 18,
    // would let one that always says false pass). Half the rows halve this
    // test's judge calls, the largest share of the test command's time.
    let example = read_parquet(&example());
    let judge_rows = bools(&example, "judge");
    let mut k = 0;
    let sample: Vec<Option<bool>> = judge_rows
        .iter()
        .map(|&j| {
            k += usize::from(j == Some(true));
            Some(j == Some(true) && k % 2 == 0)
        })
        .collect();
    let input = dir.path().join("sample.parquet");
    write_with_flags(&example, &input, vec![("sample", sample)]);
    let base = |out: &Path, extra: &[&str]| {
        let mut args = vec![
            "--judge-url",
            &url,
            "--judge-model",
            "qwen2.5-coder-1.5b",
            "--judge-where",
            "sample",
            "--metrics",
            "cosine,meaning_match",
            "--model",
            m.to_str().unwrap(),
            "--judge-cache",
            cache.to_str().unwrap(),
            "--judge-concurrency",
            "2",
            "--judge-timeout",
            JUDGE_TIMEOUT,
            "--keep",
            "expected_meaning_match,sample",
            // Reasons are long answers, most of this test's time on 2
            // cores; every mode is checked on three rows below.
            "--judge-reasons",
            "never",
        ];
        args.extend_from_slice(extra);
        ok(&score(&input, out, &args));
        read_parquet(out)
    };

    // Every sampled row, judged.
    let full_out = dir.path().join("full.parquet");
    let full = base(&full_out, &[]);
    let wanted = bools(&full, "sample");
    let expected = bools(&full, "expected_meaning_match");
    let verdict = bools(&full, "meaning_match");
    let status = texts(&full, "status");
    let source = texts(&full, "meaning_match_source");
    let (mut labelled, mut agree, mut trues) = (0, 0, 0);
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
            trues += usize::from(e);
            agree += (verdict[i] == Some(e)) as usize;
        }
    }
    let j = summary(&full_out)["judge"].clone();
    assert_eq!(j["parse_failures"], 0, "{j}");
    assert_eq!(j["failures"], 0, "{j}");
    // P(true) for every judged row (llama.cpp sends logprobs).
    assert_eq!(j["reasons"], "never");
    assert_eq!(j["replies_without_logprobs"], 0, "{j}");
    let p = f32s(&full, "meaning_match_p");
    for i in 0..full.num_rows() {
        if source[i].as_deref() != Some("judge") {
            continue;
        }
        let p = p[i].unwrap_or_else(|| panic!("row {i}: no meaning_match_p"));
        assert!((0.0..=1.0).contains(&p));
        assert_eq!(
            verdict[i],
            Some(p >= 0.5),
            "row {i}: the verdict is P(true) >= 0.5"
        );
    }
    assert!(
        j["prompt_tokens_cached"].as_u64().unwrap() > j["prompt_tokens"].as_u64().unwrap() / 2,
        "the fixed instructions come from llama.cpp's prompt cache: {j}"
    );
    let agreement = agree as f64 / labelled as f64;
    assert!(labelled >= 29, "{labelled} labelled judge rows");
    // Better than any judge that always answers the same: the larger class
    // of the labels is at most 57% of the rows.
    let majority = trues.max(labelled - trues) as f64 / labelled as f64;
    assert!(majority <= 0.6, "labels {trues} true of {labelled}");
    assert!(
        agreement >= 0.6 && agreement >= majority + 0.1,
        "agreement with hand labels {agreement:.3} ({agree}/{labelled}; always one answer: {majority:.3})"
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
        .filter(|s| s.as_deref() == Some("band:cosine"))
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
            JUDGE_TIMEOUT,
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
    // The worked cases of docs/metrics.md#fact-ratio, with the local 1.5B judge.
    let want = [1.0 / 3.0, 0.5, 0.0];
    for i in 0..3 {
        assert!(
            (facts[i].unwrap() - want[i]).abs() < 1e-6,
            "worked case {i}: fact_similarity {:?}, want {}",
            facts[i],
            want[i]
        );
    }
    let j = summary(&out)["judge"].clone();
    assert_eq!(j["parse_failures"], 0);
    // One yes/no check per reference fact and per output fact.
    let count = |name: &str| -> u64 {
        let c = counts.column_by_name(name).unwrap();
        let c = c.as_primitive::<arrow::datatypes::UInt32Type>();
        c.iter().map(|v| u64::from(v.unwrap())).sum()
    };
    assert_eq!(
        j["fact_checks"],
        count("reference") + count("output"),
        "{j}"
    );
    // The similarity is the probability-weighted score, near the sampled one.
    let sampled = b
        .column_by_name("similarity_score")
        .unwrap()
        .as_primitive::<arrow::datatypes::UInt8Type>()
        .clone();
    for (i, s) in sim.iter().enumerate() {
        let e = s.unwrap() * 10.0;
        assert!(
            (e - f32::from(sampled.value(i))).abs() <= 3.0,
            "row {i}: expected score {e} far from the sampled {}",
            sampled.value(i)
        );
    }
}

#[test]
fn every_reasons_mode_works_with_a_real_judge() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("mm.parquet");
    write_parquet(
        &input,
        vec![
            (
                "question",
                s(&[
                    "What is the capital of France?",
                    "Who wrote Hamlet?",
                    "What is the boiling point of water at sea level?",
                ]),
            ),
            ("reference", s(&["Paris", "William Shakespeare", "100 °C"])),
            (
                "output",
                s(&[
                    "The capital of France is Paris.",
                    "Charles Dickens wrote it.",
                    "It boils at 50 degrees Celsius.",
                ]),
            ),
        ],
    );
    let run = |mode: &str| {
        let out = dir.path().join(format!("{mode}.parquet"));
        let mut args = vec![
            "--judge-url",
            &url,
            "--metrics",
            "meaning_match",
            "--judge-timeout",
            JUDGE_TIMEOUT,
        ];
        // "failures" is the default: run it without the flag.
        if mode != "failures" {
            args.extend(["--judge-reasons", mode]);
        }
        ok(&score(&input, &out, &args));
        (read_parquet(&out), summary(&out)["judge"].clone())
    };
    for mode in ["always", "never", "failures"] {
        let (b, j) = run(mode);
        let verdict = bools(&b, "meaning_match");
        let p = f32s(&b, "meaning_match_p");
        let reason = texts(&b, "meaning_match_reason");
        let mut falses = 0;
        for i in 0..3 {
            assert!(verdict[i].is_some() && p[i].is_some(), "{mode}, row {i}");
            assert_eq!(verdict[i], Some(p[i].unwrap() >= 0.5), "{mode}, row {i}");
            let reasoned = match mode {
                "always" => true,
                "never" => false,
                // A reason exactly where the verdict is false.
                _ => verdict[i] == Some(false),
            };
            assert_eq!(reason[i].is_some(), reasoned, "{mode}, row {i}: {reason:?}");
            falses += u64::from(verdict[i] == Some(false));
        }
        assert_eq!(j["reasons"], mode);
        assert_eq!(j["parse_failures"], 0, "{mode}: {j}");
        assert_eq!(j["replies_without_logprobs"], 0, "{mode}: {j}");
        if mode == "failures" {
            // The 1.5B judge calls Dickens and 50 °C wrong: a real
            // failure to explain, asked again in full.
            assert!(falses >= 1, "{mode}: {verdict:?}");
            assert_eq!(j["reasons_asked"], falses, "{mode}: {j}");
            assert_eq!(
                answered_calls(&j),
                3 + falses,
                "{mode}: a second call per false verdict: {j}"
            );
        } else {
            assert_eq!(answered_calls(&j), 3, "{mode}: one call per row: {j}");
        }
        if mode == "never" {
            let generated = j["completion_tokens"].as_u64().unwrap();
            assert!(
                generated <= 30,
                "answers cut after the verdict (10 tokens at most): {j}"
            );
        }
        eprintln!("real judge, --judge-reasons {mode}: verdicts {verdict:?}, p {p:?}");
    }
}

/// The worked rubrics of docs/metrics.md marked `<!-- rubric: NAME -->`, as
/// one file of definitions: the test runs what the docs show.
fn docs_rubrics(names: &[&str]) -> String {
    let docs =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/metrics.md"))
            .unwrap();
    let mut out = String::new();
    for name in names {
        let marker = format!("<!-- rubric: {name} -->\n```toml\n");
        let at = docs
            .find(&marker)
            .unwrap_or_else(|| panic!("docs/metrics.md lacks {marker}"));
        let rest = &docs[at + marker.len()..];
        out.push_str(&rest[..rest.find("```").unwrap()]);
        out.push('\n');
    }
    out
}

#[test]
fn the_docs_rubrics_run_on_the_example_with_a_real_judge() {
    let Some(url) = url() else { return };
    let dir = tempfile::tempdir().unwrap();
    let rubrics = dir.path().join("rubrics.toml");
    std::fs::write(&rubrics, docs_rubrics(&["direct", "accuracy"])).unwrap();
    // Each rubric on the rows that test it, one run each. `accuracy`: every
    // hedged judge row and every other one of the rest (33 of 60), whose
    // labels separate right from wrong answers. `direct`: the six hedged rows
    // against a third of those others (15 rows): its contrast is hedged
    // against plain, and on all 33 rows the judge called 1 of 6 hedged and
    // 26 of 26 plain answers direct (AMD EPYC fam 25 model 17, AVX2, 2 cores),
    // so fewer plain rows keep the margin and save 18 of 66 judge calls.
    let example = read_parquet(&example());
    let (judge, category) = (bools(&example, "judge"), texts(&example, "category"));
    let mut k = 0;
    let (mut accuracy_rows, mut direct_rows) = (Vec::new(), Vec::new());
    for i in 0..example.num_rows() {
        if judge[i] != Some(true) {
            accuracy_rows.push(Some(false));
            direct_rows.push(Some(false));
            continue;
        }
        k += 1;
        let hedged = category[i].as_deref() == Some("hedged");
        accuracy_rows.push(Some(hedged || k % 2 == 1));
        direct_rows.push(Some(hedged || k % 6 == 1));
    }
    let input = dir.path().join("rubric-rows.parquet");
    write_with_flags(
        &example,
        &input,
        vec![
            ("accuracy_rows", accuracy_rows),
            ("direct_rows", direct_rows),
        ],
    );
    // One rubric on the rows its column names; reads the output back.
    let run = |metric: &str, rows: &str| {
        let out = dir.path().join(format!("{metric}.parquet"));
        ok(&score(
            &input,
            &out,
            &[
                "--judge-url",
                &url,
                "--judge-model",
                "qwen2.5-coder-1.5b",
                "--judge-metrics",
                rubrics.to_str().unwrap(),
                "--metrics",
                metric,
                "--judge-where",
                rows,
                "--judge-concurrency",
                "2",
                "--judge-timeout",
                JUDGE_TIMEOUT,
                "--keep",
                &format!("category,{rows},expected_meaning_match"),
                // Verdicts and scores only: reasons are checked above.
                "--judge-reasons",
                "never",
            ],
        ));
        let j = summary(&out)["judge"].clone();
        assert_eq!(j["parse_failures"], 0, "{metric}: {j}");
        (read_parquet(&out), j)
    };
    // Every row asked for has its answer, with status ok; no other row has one.
    let asked = |b: &arrow::array::RecordBatch, rows: &str, metric: &str| -> Vec<bool> {
        let (wanted, status) = (bools(b, rows), texts(b, "status"));
        let got = b.column_by_name(metric).unwrap();
        (0..b.num_rows())
            .map(|i| {
                if wanted[i] != Some(true) || status[i].as_deref() == Some("error") {
                    assert!(got.is_null(i), "row {i} was not asked for {metric}");
                    return false;
                }
                assert_eq!(
                    status[i].as_deref(),
                    Some("ok"),
                    "row {i}: {:?}",
                    texts(b, "error")[i]
                );
                assert!(got.is_valid(i), "row {i}: no {metric}");
                true
            })
            .collect()
    };

    let (d, _) = run("direct", "direct_rows");
    let (direct, direct_p, direct_source) = (
        bools(&d, "direct"),
        f32s(&d, "direct_p"),
        texts(&d, "direct_source"),
    );
    let category = texts(&d, "category");
    let (mut hedges, mut plain) = ((0, 0), (0, 0));
    for (i, asked) in asked(&d, "direct_rows", "direct").into_iter().enumerate() {
        if !asked {
            continue;
        }
        let h = direct[i].unwrap();
        if direct_source[i].as_deref() == Some("judge") {
            let p = direct_p[i].expect("llama-server sends probabilities");
            assert!((0.0..=1.0).contains(&p));
            assert_eq!(h, p >= 0.5, "row {i}: verdict {h} from P(true) {p}");
        }
        let tally = if category[i].as_deref() == Some("hedged") {
            &mut hedges
        } else {
            &mut plain
        };
        tally.0 += u32::from(h);
        tally.1 += 1;
    }

    let (a, j) = run("accuracy", "accuracy_rows");
    let expected = bools(&a, "expected_meaning_match");
    let accuracy = f32s(&a, "accuracy");
    let accuracy_score = a
        .column_by_name("accuracy_score")
        .unwrap()
        .as_primitive::<arrow::datatypes::UInt8Type>()
        .clone();
    let sources = texts(&a, "accuracy_source");
    let (mut right, mut wrong) = (Vec::new(), Vec::new());
    for (i, asked) in asked(&a, "accuracy_rows", "accuracy")
        .into_iter()
        .enumerate()
    {
        if !asked {
            continue;
        }
        let c = accuracy[i].unwrap();
        assert!((0.0..=1.0).contains(&c), "row {i}: accuracy {c}");
        if sources[i].as_deref() == Some("judge") {
            assert!((1..=5).contains(&accuracy_score.value(i)), "row {i}");
        }
        match expected[i] {
            Some(true) => right.push(c),
            Some(false) => wrong.push(c),
            None => {}
        }
    }
    let mean = |v: &[f32]| v.iter().sum::<f32>() / v.len() as f32;
    eprintln!(
        "real judge, docs rubrics: direct true on {}/{} hedged rows and {}/{} others; accuracy mean {:.3} on the {} rows labelled right, {:.3} on the {} labelled wrong",
        hedges.0, hedges.1, plain.0, plain.1, mean(&right), right.len(), mean(&wrong), wrong.len()
    );
    // The rubrics measure what they say, by more than noise.
    let rate = |t: (u32, u32)| f64::from(t.0) / f64::from(t.1);
    assert!(
        rate(hedges) + 0.2 < rate(plain),
        "direct on hedged rows {hedges:?} vs others {plain:?}"
    );
    // (Measured here: accuracy 0.64 against 0.46.)
    assert!(
        mean(&right) > mean(&wrong) + 0.1,
        "right {right:?} vs wrong {wrong:?}"
    );
    assert!(j["defined_metrics"]["accuracy"]["version"]
        .as_str()
        .unwrap()
        .starts_with("accuracy-def-"));
}
