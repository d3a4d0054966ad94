//! `refscore score --cross-model DIR --cross-recipe factcg|minicheck|hhem|FILE`:
//! whole runs against the checkers' own inference code
//! (tests/fixtures/cross-recipes.jsonl, from
//! scripts/fixtures/make-recipe-parity-fixture.py: FactCG's and MiniCheck's
//! `score` on tiny seeded twins; tests/fixtures/cross-tiny-cross-hhem.jsonl,
//! from scripts/fixtures/make-hhem-fixture.py: HHEM-2.1-Open's `predict`),
//! the summary's counts, a folder that names
//! its recipe, recipe files, the config key, the caches and the refusals.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

const DEBERTA: &str = "tiny-cross-checker-deberta";
const ROBERTA: &str = "tiny-cross-checker-roberta";

fn rows() -> Vec<Value> {
    let text = std::fs::read_to_string(root().join("tests/fixtures/cross-recipes.jsonl")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The fixture's rows that `keep` keeps, as an input file in `dir`.
fn input(dir: &Path, keep: fn(&Value) -> bool) -> (PathBuf, Vec<Value>) {
    let rows: Vec<Value> = rows().into_iter().filter(keep).collect();
    let col = |k: &str| -> arrow::array::ArrayRef {
        let v: Vec<&str> = rows.iter().map(|r| r[k].as_str().unwrap()).collect();
        s(&v)
    };
    let path = dir.join("rows.parquet");
    write_parquet(
        &path,
        vec![
            ("id", col("id")),
            ("reference", col("reference")),
            ("output", col("output")),
        ],
    );
    (path, rows)
}

fn all(_: &Value) -> bool {
    true
}

/// The rows whose document is short (one chunk, quick to score): the other
/// tests' input.
fn short(r: &Value) -> bool {
    r["reference"].as_str().unwrap().len() < 1200 && r["output"].as_str().unwrap().len() < 1200
}

/// Runs `--metrics cross_score` on `input` with `flags`; the scores, the
/// summary's `cross` section and the run id.
fn run(input: &Path, flags: &[&str]) -> (Vec<Option<f32>>, Value, String) {
    let out = input.with_file_name("scores.parquet");
    let mut args = vec!["--overwrite", "--metrics", "cross_score"];
    args.extend_from_slice(flags);
    ok(&score(input, &out, &args));
    let summary = summary(&out);
    (
        f32s(&read_parquet(&out), "cross_score"),
        summary["cross"].clone(),
        summary["run_id"].as_str().unwrap().to_string(),
    )
}

/// Every row's cross_score against the authors' `key` column: within 1e-4,
/// null where their code raised (a blank document); the summary's chunked
/// and truncated pairs as the authors' chunks and tokenizer count them.
fn agrees(rows: &[Value], got: &[Option<f32>], cross: &Value, key: &str) {
    assert_eq!(got.len(), rows.len());
    let mut worst = 0f64;
    for (row, got) in rows.iter().zip(got) {
        let id = row["id"].as_str().unwrap();
        match (row[key].as_f64(), got) {
            (None, None) => {}
            (Some(want), Some(got)) => {
                let diff = (f64::from(*got) - want).abs();
                worst = worst.max(diff);
                assert!(diff <= 1e-4, "{key} {id}: {got} vs the authors' {want}");
            }
            (want, got) => panic!("{key} {id}: {got:?} vs the authors' {want:?}"),
        }
    }
    let count = |f: &dyn Fn(&Value) -> bool| rows.iter().filter(|r| f(r)).count() as u64;
    let chunked = count(&|r| r[format!("{key}_chunks")].as_u64().unwrap() > 1);
    let truncated = count(&|r| r[format!("{key}_truncated")].as_bool().unwrap());
    assert_eq!(cross["pairs_chunked"], chunked, "{cross}");
    assert_eq!(cross["pairs_truncated"], truncated, "{cross}");
    eprintln!("{key}: worst |diff| {worst:.2e}, {chunked} chunked, {truncated} truncated");
}

#[test]
fn each_recipe_gives_its_authors_scores() {
    for (twin, recipe, key) in [
        (DEBERTA, "factcg", "factcg"),
        (ROBERTA, "minicheck", "minicheck_roberta"),
        (DEBERTA, "minicheck", "minicheck_deberta"),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let model = tiny_model(twin);
        let (input, rows) = input(dir.path(), all);
        let (got, cross, _) = run(&input, &["--cross-model", &model, "--cross-recipe", recipe]);
        agrees(&rows, &got, &cross, key);
        let chunked = cross["pairs_chunked"].as_u64().unwrap();
        assert!(chunked >= 10, "{key}: {chunked} pairs with several chunks");
        assert_eq!(cross["recipe"], recipe);
        assert_eq!(cross["recipe_from"], "built-in");
        let want_len = if recipe == "factcg" || twin == DEBERTA {
            2048
        } else {
            512
        };
        assert_eq!(cross["max_length"], want_len);
    }
}

#[test]
fn a_folder_names_its_recipe_and_the_flag_overrides_it() {
    let dir = tempfile::tempdir().unwrap();
    let folder = dir.path().join("factcg-twin");
    std::fs::create_dir(&folder).unwrap();
    for f in std::fs::read_dir(tiny_model(DEBERTA)).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), folder.join(f.file_name())).unwrap();
    }
    std::fs::write(
        folder.join("refscore_recipe.json"),
        r#"{"recipe": "factcg"}"#,
    )
    .unwrap();
    let model = folder.to_str().unwrap();
    let (input, rows) = input(dir.path(), short);
    let (got, cross, _) = run(&input, &["--cross-model", model]);
    agrees(&rows, &got, &cross, "factcg");
    assert_eq!(cross["recipe"], "factcg");
    assert!(
        cross["recipe_from"]
            .as_str()
            .unwrap()
            .ends_with("refscore_recipe.json (built-in)"),
        "{cross}"
    );
    let (got, cross, _) = run(
        &input,
        &["--cross-model", model, "--cross-recipe", "minicheck"],
    );
    agrees(&rows, &got, &cross, "minicheck_deberta");
    // A folder holding a whole recipe.
    let mut recipe: Value = serde_json::from_str(include_str!(
        "../crates/embed/src/cross/recipe/recipes/minicheck.json"
    ))
    .unwrap();
    recipe["name"] = "minicheck-here".into();
    std::fs::write(folder.join("refscore_recipe.json"), recipe.to_string()).unwrap();
    let (got, cross, _) = run(&input, &["--cross-model", model]);
    agrees(&rows, &got, &cross, "minicheck_deberta");
    assert_eq!(cross["recipe"], "minicheck-here");
}

#[test]
fn a_recipe_file_the_config_key_and_the_caches_follow_the_recipe() {
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model(DEBERTA);
    let (input, rows) = input(dir.path(), short);
    // FactCG's recipe in a file next to a config file naming it relatively.
    let mut recipe: Value = serde_json::from_str(include_str!(
        "../crates/embed/src/cross/recipe/recipes/factcg.json"
    ))
    .unwrap();
    recipe["name"] = "factcg-copy".into();
    std::fs::write(dir.path().join("mine.json"), recipe.to_string()).unwrap();
    let config = dir.path().join("refscore.toml");
    std::fs::write(
        &config,
        format!("cross_model = {model:?}\ncross_recipe = \"mine.json\"\n"),
    )
    .unwrap();
    let (got, cross, _) = run(&input, &["--config", config.to_str().unwrap()]);
    agrees(&rows, &got, &cross, "factcg");
    assert_eq!(cross["recipe"], "factcg-copy");

    // Chunks of at most 5 NLTK words: other chunks, other scores, another
    // run, and no score reused from the cache.
    recipe["chunk"]["size"] = 5.into();
    let small = dir.path().join("small.json");
    std::fs::write(&small, recipe.to_string()).unwrap();
    let cache = dir.path().join("cache");
    let cached = |recipe: &str| {
        run(
            &input,
            &[
                "--cross-model",
                &model,
                "--cross-recipe",
                recipe,
                "--embed-cache",
                cache.to_str().unwrap(),
            ],
        )
    };
    let (first, cross, run_factcg) = cached("factcg");
    assert_eq!(cross["pairs_from_embed_cache"], 0);
    let (other, cross, run_small) = cached(small.to_str().unwrap());
    assert_eq!(
        cross["pairs_from_embed_cache"], 0,
        "a changed recipe reuses no score"
    );
    assert!(cross["pairs_chunked"].as_u64().unwrap() > 5, "{cross}");
    assert_ne!(run_factcg, run_small);
    assert_ne!(first, other);
    let (again, cross, run_again) = cached("factcg");
    assert_eq!(run_again, run_factcg);
    assert_eq!(again, first);
    let scorable = rows
        .iter()
        .filter(|r| !r["reference"].as_str().unwrap().trim().is_empty())
        .count();
    assert_eq!(cross["pairs_from_embed_cache"], scorable as u64, "{cross}");
    assert_eq!(cross["pairs_scored"], 0, "{cross}");
}

#[test]
fn the_plain_recipe_is_todays_cross_encoder() {
    // Naming the default changes neither the scores nor the run.
    let dir = tempfile::tempdir().unwrap();
    let model = tiny_model("tiny-cross-bert");
    let (input, _) = input(dir.path(), short);
    let (plain, cross, id) = run(&input, &["--cross-model", &model]);
    assert_eq!(cross["recipe"], "nli");
    assert_eq!(cross["pairs_chunked"], 0);
    let (named, _, named_id) = run(&input, &["--cross-model", &model, "--cross-recipe", "nli"]);
    assert_eq!(plain, named);
    assert_eq!(id, named_id);
}

#[test]
fn what_a_recipe_cannot_do_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = input(dir.path(), short);
    let out = dir.path().join("o.parquet");
    let deberta = tiny_model(DEBERTA);
    let refused = |args: &[&str], code: i32| fails(&score(&input, &out, args), code);
    let err = refused(&["--cross-model", &deberta, "--cross-recipe", "nope"], 64);
    assert!(err.contains("factcg, minicheck"), "{err}");
    let err = refused(
        &[
            "--metrics",
            "nli_precision",
            "--cross-model",
            &deberta,
            "--cross-recipe",
            "factcg",
        ],
        78,
    );
    assert!(err.contains("cross_score"), "{err}");
    // MiniCheck-RoBERTa reads 512 tokens; this RoBERTa has 64 positions.
    let small = tiny_model("tiny-cross-roberta-nli");
    let err = refused(
        &[
            "--metrics",
            "cross_score",
            "--cross-model",
            &small,
            "--cross-recipe",
            "minicheck",
        ],
        78,
    );
    assert!(err.contains("max_length 512"), "{err}");
    let err = refused(
        &["--metrics", "cross_score", "--cross-recipe", "factcg"],
        64,
    );
    assert!(err.contains("--cross-model"), "{err}");
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{"name": "b", "input": "pair", "score": {"label": 7, "activation": "softmax"}}"#,
    )
    .unwrap();
    let err = refused(
        &[
            "--metrics",
            "cross_score",
            "--cross-model",
            &deberta,
            "--cross-recipe",
            bad.to_str().unwrap(),
        ],
        78,
    );
    assert!(err.contains("label 7"), "{err}");
    assert!(!out.exists());
}

/// The rows of HHEM's fixture (tests/fixtures/cross-tiny-cross-hhem.jsonl,
/// scripts/fixtures/make-hhem-fixture.py: `HHEMv2ForSequenceClassification.
/// predict` on the tiny twin), with ids as the fixture gives them.
fn hhem_rows() -> Vec<Value> {
    let text =
        std::fs::read_to_string(root().join("tests/fixtures/cross-tiny-cross-hhem.jsonl")).unwrap();
    text.lines()
        .skip(1)
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// A copy of HHEM's twin in `dir` (its foundation, named relatively in the
/// fixture, named by its absolute path so the copy still finds it).
fn hhem_copy(dir: &Path) -> PathBuf {
    let from = PathBuf::from(tiny_model("tiny-cross-hhem"));
    let to = dir.join("hhem-copy");
    std::fs::create_dir(&to).unwrap();
    for f in std::fs::read_dir(&from).unwrap() {
        let f = f.unwrap();
        std::fs::copy(f.path(), to.join(f.file_name())).unwrap();
    }
    let mut config: Value =
        serde_json::from_str(&std::fs::read_to_string(to.join("config.json")).unwrap()).unwrap();
    config["foundation"] = tiny_model("tiny-t5").into();
    std::fs::write(to.join("config.json"), config.to_string()).unwrap();
    to
}

/// `--cross-recipe hhem` through the whole run: every row's cross_score is
/// HHEM's own `predict` (P(consistent) of (reference, output)) within 1e-4,
/// long prompts (past 512 tokens), non-ASCII and empty outputs included; a
/// blank reference gives a null, as for every cross metric. Nothing is
/// chunked or cut.
#[test]
fn hhem_gives_its_authors_predict_through_the_cli() {
    let dir = tempfile::tempdir().unwrap();
    let rows = hhem_rows();
    let col = |k: &str| -> arrow::array::ArrayRef {
        let v: Vec<&str> = rows.iter().map(|r| r[k].as_str().unwrap()).collect();
        s(&v)
    };
    let input = dir.path().join("rows.parquet");
    write_parquet(
        &input,
        vec![
            ("id", col("id")),
            ("reference", col("reference")),
            ("output", col("output")),
        ],
    );
    let model = tiny_model("tiny-cross-hhem");
    let (got, cross, _) = run(&input, &["--cross-model", &model, "--cross-recipe", "hhem"]);
    assert_eq!(got.len(), rows.len());
    let mut worst = 0f64;
    let mut blank = 0;
    for (row, got) in rows.iter().zip(&got) {
        let id = row["id"].as_str().unwrap();
        if row["reference"].as_str().unwrap().trim().is_empty() {
            assert_eq!(*got, None, "{id}: a blank reference");
            blank += 1;
            continue;
        }
        let want = row["forward"][1].as_f64().unwrap();
        let got = f64::from(got.unwrap_or_else(|| panic!("{id}: no cross_score")));
        let diff = (got - want).abs();
        worst = worst.max(diff);
        assert!(diff <= 1e-4, "{id}: {got} vs HHEM's predict {want}");
    }
    assert!(blank > 0 && blank < rows.len());
    assert_eq!(cross["recipe"], "hhem", "{cross}");
    assert_eq!(cross["pairs_chunked"], 0, "{cross}");
    assert_eq!(cross["pairs_truncated"], 0, "{cross}");
    eprintln!(
        "hhem: {} rows, worst |diff| {worst:.2e}",
        rows.len() - blank
    );
}

/// HHEM's published folder holds no tokenizer: a folder without
/// tokenizer.json is refused before any work, in one line naming the file
/// and the foundation it would come from (exit 78), and writes nothing.
#[test]
fn hhem_without_a_tokenizer_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (input, _) = input(dir.path(), short);
    let folder = hhem_copy(dir.path());
    std::fs::remove_file(folder.join("tokenizer.json")).unwrap();
    let out = dir.path().join("o.parquet");
    let err = fails(
        &score(
            &input,
            &out,
            &[
                "--metrics",
                "cross_score",
                "--cross-model",
                folder.to_str().unwrap(),
                "--cross-recipe",
                "hhem",
            ],
        ),
        78,
    );
    assert!(
        err.contains("tokenizer.json") && err.contains("tiny-t5"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!out.exists());
    // The same copy with its tokenizer back runs.
    std::fs::copy(
        Path::new(&tiny_model("tiny-cross-hhem")).join("tokenizer.json"),
        folder.join("tokenizer.json"),
    )
    .unwrap();
    run(
        &input,
        &[
            "--cross-model",
            folder.to_str().unwrap(),
            "--cross-recipe",
            "hhem",
        ],
    );
}
