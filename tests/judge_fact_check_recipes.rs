//! `--fact-check nli` with a checker recipe (`--cross-recipe factcg`): each
//! fact is checked against the other answer with the recipe's chunks and its
//! maximum over them, so a fact stated only in a late chunk of a long
//! reference holds, where the plain pair (`--cross-recipe nli`, cut at the
//! model's limit) never shows the model that part. The figures are those
//! computed from `cross_score` of the same (premise, fact) pairs under the
//! same recipe, which tests/score_cross_recipes.rs holds to FactCG's own
//! code. On the tiny seeded FactCG twin (random weights), so the threshold
//! is placed between the two measured scores of the late fact.

mod common;

use std::path::{Path, PathBuf};

use arrow::array::AsArray;
use arrow::datatypes::UInt32Type;
use common::*;
use serde_json::Value;

const TWIN: &str = "tiny-cross-checker-deberta";

fn fixture_rows() -> Vec<Value> {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("tests/fixtures/cross-recipes.jsonl")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// One row of the test's input.
struct Row {
    reference: String,
    output: String,
}

/// A long reference (two FactCG chunks) whose output is one sentence from
/// its second chunk, and short rows from the recipe fixture.
fn rows() -> Vec<Row> {
    let fixture = fixture_rows();
    let text = |id: &str, k: &str| {
        fixture.iter().find(|r| r["id"] == id).unwrap()[k]
            .as_str()
            .unwrap()
            .to_string()
    };
    let long = text("doc-003", "reference");
    let late = refscore_judge::sentences(&long).pop().unwrap();
    let mut rows = vec![Row {
        reference: long,
        output: late,
    }];
    for id in [
        "short-000",
        "short-001",
        "tricky-013",
        "uni-016",
        "list-023",
    ] {
        rows.push(Row {
            reference: text(id, "reference"),
            output: text(id, "output"),
        });
    }
    rows
}

fn write_rows(path: &Path, rows: &[(&str, &str)]) {
    let (r, o): (Vec<&str>, Vec<&str>) = rows.iter().copied().unzip();
    write_parquet(path, vec![("reference", s(&r)), ("output", s(&o))]);
}

/// Every check the fact ratio makes, as (premise, fact): each reference
/// fact against the output, each output fact against the reference.
fn checks(row: &Row) -> (Vec<(String, String)>, Vec<(String, String)>) {
    let facts = refscore_judge::sentences;
    (
        facts(&row.reference)
            .into_iter()
            .map(|f| (row.output.clone(), f))
            .collect(),
        facts(&row.output)
            .into_iter()
            .map(|f| (row.reference.clone(), f))
            .collect(),
    )
}

/// Each (premise, fact) pair's score by a `--metrics metric` run with
/// `flags`: the premise as reference, the fact as output.
fn scored(dir: &Path, pairs: &[(String, String)], metric: &str, flags: &[&str]) -> Vec<f32> {
    let input = dir.join(format!("pairs-{metric}.parquet"));
    let out = dir.join(format!("pairs-{metric}.out.parquet"));
    let refs: Vec<(&str, &str)> = pairs
        .iter()
        .map(|(p, f)| (p.as_str(), f.as_str()))
        .collect();
    write_rows(&input, &refs);
    let mut args = vec!["--overwrite", "--metrics", metric, "--cross-model"];
    let twin = tiny_model(TWIN);
    args.push(&twin);
    args.extend_from_slice(flags);
    ok(&score(&input, &out, &args));
    f32s(&read_parquet(&out), metric)
        .into_iter()
        .map(|v| v.expect("scored"))
        .collect()
}

/// The fact ratio's figures and counts of each row, from each check's
/// score against `threshold`.
fn expected(
    rows: &[Row],
    score: &dyn Fn(&(String, String)) -> f32,
    threshold: f32,
) -> Vec<[f64; 6]> {
    rows.iter()
        .map(|row| {
            let (ref_checks, out_checks) = checks(row);
            let held = |c: &[(String, String)]| c.iter().filter(|p| score(p) >= threshold).count();
            let (n_ref, n_out) = (ref_checks.len() as f64, out_checks.len() as f64);
            let matched = held(&ref_checks).min(held(&out_checks)) as f64;
            let ratio = |d: f64| if d == 0.0 { 0.0 } else { matched / d };
            [
                ratio(n_ref.max(n_out)),
                ratio(n_ref),
                ratio(n_out),
                matched,
                n_ref,
                n_out,
            ]
        })
        .collect()
}

/// The fact ratio's figures and counts of each row of a run's output.
fn figures(out: &Path) -> Vec<[f64; 6]> {
    let b = read_parquet(out);
    let col = |k: &str| f32s(&b, k);
    let counts = b.column_by_name("fact_counts").unwrap().as_struct().clone();
    let count = |k: &str| {
        counts
            .column_by_name(k)
            .unwrap()
            .as_primitive::<UInt32Type>()
            .clone()
    };
    let (sim, rec, pre) = (
        col("fact_similarity"),
        col("fact_recall"),
        col("fact_precision"),
    );
    let (m, r, o) = (count("matched"), count("reference"), count("output"));
    (0..b.num_rows())
        .map(|i| {
            [
                f64::from(sim[i].unwrap()),
                f64::from(rec[i].unwrap()),
                f64::from(pre[i].unwrap()),
                f64::from(m.value(i)),
                f64::from(r.value(i)),
                f64::from(o.value(i)),
            ]
        })
        .collect()
}

fn assert_figures(got: &[[f64; 6]], want: &[[f64; 6]], what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        for k in 0..6 {
            assert!(
                (g[k] - w[k]).abs() <= 1e-6,
                "{what}, row {i}: {g:?} vs {w:?} from cross_score"
            );
        }
    }
}

/// Runs the wholly local fact ratio on `input` at `threshold` with
/// `flags`; the figures and the summary's judge section.
fn fact_ratio(input: &Path, out: &Path, threshold: f32, flags: &[&str]) -> (Vec<[f64; 6]>, Value) {
    let t = threshold.to_string();
    let twin = tiny_model(TWIN);
    let mut args = vec![
        "--overwrite",
        "--metrics",
        "fact_similarity",
        "--facts",
        "sentences",
        "--fact-check",
        "nli",
        "--fact-check-threshold",
        &t,
        "--cross-model",
        &twin,
    ];
    args.extend_from_slice(flags);
    ok(&score(input, out, &args));
    (figures(out), summary(out)["judge"].clone())
}

#[test]
fn a_checker_recipe_checks_facts_over_the_references_chunks() {
    let dir = tempfile::tempdir().unwrap();
    let rows = rows();
    // Each distinct check once, as the judge stage asks it.
    let mut pairs: Vec<(String, String)> = Vec::new();
    for (a, b) in rows.iter().map(checks) {
        for p in a.into_iter().chain(b) {
            if !pairs.contains(&p) {
                pairs.push(p);
            }
        }
    }
    let support = scored(
        dir.path(),
        &pairs,
        "cross_score",
        &["--cross-recipe", "factcg"],
    );
    let plain = scored(
        dir.path(),
        &pairs,
        "nli_precision",
        &["--nli-labels", "entailment=1"],
    );
    let at = |p: &(String, String)| pairs.iter().position(|q| q == p).unwrap();
    // The late fact against the long reference.
    let late = &checks(&rows[0]).1[0];
    let (chunked, cut) = (support[at(late)], plain[at(late)]);
    eprintln!("late fact: support over chunks {chunked}, plain truncated pair {cut}");
    assert!(chunked > cut, "late fact: {chunked} over chunks, {cut} cut");
    let threshold = (chunked + cut) / 2.0;
    for (k, v) in support.iter().chain(&plain).enumerate() {
        assert!(
            (v - threshold).abs() > 1e-4,
            "check {k}: {v} too near the threshold {threshold}"
        );
    }

    let input = dir.path().join("in.parquet");
    let refs: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| (r.reference.as_str(), r.output.as_str()))
        .collect();
    write_rows(&input, &refs);
    let out = dir.path().join("o.parquet");

    // FactCG's recipe: the figures of its chunked support.
    let (got, judge) = fact_ratio(&input, &out, threshold, &["--cross-recipe", "factcg"]);
    let want = expected(&rows, &|p| support[at(p)], threshold);
    assert_figures(&got, &want, "factcg");
    assert_eq!(judge["calls"], 0);
    assert_eq!(judge["fact_checks_nli"], pairs.len() as u64, "{judge}");
    assert_eq!(judge["fact_check"]["recipe"], "factcg", "{judge}");
    assert!(
        judge["fact_check"].get("entailment_label").is_none(),
        "{judge}"
    );
    assert_eq!(
        judge
            .get("fact_checks_nli_truncated")
            .and_then(Value::as_u64)
            .unwrap_or(0),
        0,
        "{judge}"
    );
    // The long row: its one output fact holds (and one reference fact
    // against it), so one pair.
    assert_eq!(got[0][3], 1.0, "{:?}", got[0]);
    let factcg_run = summary(&out)["run_id"].clone();

    // The plain pair, cut at the limit: the late fact no longer holds.
    let (plain_got, judge) = fact_ratio(
        &input,
        &out,
        threshold,
        &["--cross-recipe", "nli", "--nli-labels", "entailment=1"],
    );
    let plain_want = expected(&rows, &|p| plain[at(p)], threshold);
    assert_figures(&plain_got, &plain_want, "nli");
    assert_eq!(plain_got[0][3], 0.0, "{:?}", plain_got[0]);
    assert!(
        judge["fact_checks_nli_truncated"].as_u64().unwrap() >= 1,
        "{judge}"
    );
    assert_ne!(
        summary(&out)["run_id"],
        factcg_run,
        "the recipe is in the fingerprint"
    );
}
