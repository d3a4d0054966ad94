//! `refscore score --cross-model`: the cross metrics of whole runs against
//! sentence-transformers' `CrossEncoder.predict` (tests/fixtures/cross-*.jsonl,
//! scripts/fixtures/make-tiny-cross-models.py), on each CPU kernel path
//! this machine runs; and the settings refused before any work.

mod common;

use std::path::{Path, PathBuf};

use arrow::array::ArrayRef;
use common::*;
use serde_json::Value;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A fixture row: (id, reference, output) and sentence-transformers' scores
/// of (reference, output) and (output, reference).
type Row = (String, String, String, Vec<f32>, Vec<f32>);

/// The fixture's rows.
fn fixture(name: &str) -> Vec<Row> {
    let text =
        std::fs::read_to_string(root().join(format!("tests/fixtures/cross-{name}.jsonl"))).unwrap();
    let floats = |v: &Value| -> Vec<f32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_f64().unwrap() as f32)
            .collect()
    };
    text.lines()
        .skip(1)
        .map(|l| {
            let r: Value = serde_json::from_str(l).unwrap();
            let t = |k: &str| r[k].as_str().unwrap().to_string();
            (
                t("id"),
                t("reference"),
                t("output"),
                floats(&r["forward"]),
                floats(&r["backward"]),
            )
        })
        .collect()
}

/// Writes the fixture's rows as an input file in `dir`.
fn input(dir: &Path, name: &str) -> PathBuf {
    let rows = fixture(name);
    let col = |k: usize| -> ArrayRef {
        let v: Vec<&str> = rows
            .iter()
            .map(|r| match k {
                0 => r.0.as_str(),
                1 => r.1.as_str(),
                _ => r.2.as_str(),
            })
            .collect();
        s(&v)
    };
    let path = dir.join(format!("{name}.parquet"));
    write_parquet(
        &path,
        vec![("id", col(0)), ("reference", col(1)), ("output", col(2))],
    );
    path
}

/// Rows refscore scores: a blank reference is a row error for every
/// metric; an empty output is scored as the model scores it.
fn scorable(reference: &str) -> bool {
    !reference.trim().is_empty()
}

/// A metric's value from the (reference, output) and (output, reference)
/// scores.
type Definition = fn(&[f32], &[f32]) -> f32;

/// Each metric's column within 1e-5 of its definition over the reference
/// scores, on every kernel path; nulls exactly on the unscorable rows.
fn run_matches(name: &str, flags: &[&str], expect: &[(&str, Definition)]) {
    let dir = tempfile::tempdir().unwrap();
    let rows = fixture(name);
    let input = input(dir.path(), name);
    let cross = tiny_model(name);
    for (path, features) in KERNEL_PATHS {
        if !features.iter().all(|f| cpu_has(f)) {
            eprintln!("skipping the {path} kernels: this CPU lacks some of {features:?}");
            continue;
        }
        let out = dir.path().join(format!("{path}.parquet"));
        let mut args = vec!["--cross-model", &cross];
        args.extend_from_slice(flags);
        let run = score_with_env(&input, &out, &args, &[("REFSCORE_KERNELS", path)]);
        ok(&run);
        let b = read_parquet(&out);
        let mut worst = 0f32;
        for (column, value) in expect {
            let got = f32s(&b, column);
            for (i, r) in rows.iter().enumerate() {
                if !scorable(&r.1) {
                    assert_eq!(got[i], None, "{name} {column} row {i}: unscorable");
                    continue;
                }
                let want = value(&r.3, &r.4);
                let g = got[i].unwrap_or_else(|| panic!("{name} {column} row {i}: null"));
                worst = worst.max((g - want).abs());
                assert!(
                    (g - want).abs() < 1e-5,
                    "{name} {path} {column} row {i} ({}): {g} vs {want}",
                    r.0
                );
            }
        }
        let sum = summary(&out);
        let c = &sum["cross"];
        assert!(c["pairs_scored"].as_u64().unwrap() > 0, "{c}");
        eprintln!("{name} on {path}: worst {worst:.2e}; summary {c}");
    }
}

#[test]
fn nli_metrics_match_cross_encoder_in_both_directions() {
    // cross-encoder/nli-* order: contradiction 0, entailment 1.
    run_matches(
        "tiny-cross-roberta-nli",
        &["--metrics", "nli,token_f1"],
        &[
            ("nli_precision", |f, _| f[1]),
            ("nli_recall", |_, b| b[1]),
            ("nli_equivalence", |f, b| f[1].min(b[1])),
            ("nli_contradiction", |f, b| f[0].max(b[0])),
        ],
    );
}

#[test]
fn a_one_output_model_gives_cross_score() {
    run_matches(
        "tiny-cross-bert",
        &["--metrics", "cross"],
        &[("cross_score", |f, _| f[0])],
    );
}

#[test]
fn unnamed_labels_are_named_by_the_flag() {
    run_matches(
        "tiny-cross-xlmr-minicheck",
        &[
            "--metrics",
            "nli_equivalence",
            "--nli-labels",
            "entailment=1",
        ],
        &[("nli_equivalence", |f, b| f[1].min(b[1]))],
    );
}

#[test]
fn a_cross_model_that_cannot_give_the_metrics_is_refused_before_any_work() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path(), "tiny-cross-bert");
    let out = dir.path().join("o.parquet");
    let refused = |flags: &[&str], code: i32, says: &str| {
        let e = fails(&score(&input, &out, flags), code);
        assert!(e.contains(says), "{flags:?}: {e}");
        assert!(!out.exists(), "{flags:?}: no output after a refusal");
    };
    let nli = tiny_model("tiny-cross-roberta-nli");
    let bert = tiny_model("tiny-cross-bert");
    let minicheck = tiny_model("tiny-cross-xlmr-minicheck");
    let two_way = tiny_model("tiny-cross-distilbert-2way");
    refused(&["--metrics", "nli"], 78, "--cross-model");
    refused(
        &["--cross-model", &nli, "--metrics", "cross_score"],
        78,
        "one-output model",
    );
    refused(
        &["--cross-model", &bert, "--metrics", "nli_precision"],
        78,
        "NLI model",
    );
    refused(
        &["--cross-model", &minicheck, "--metrics", "nli"],
        78,
        "--nli-labels",
    );
    refused(
        &["--cross-model", &two_way, "--metrics", "nli_contradiction"],
        78,
        "nli_contradiction needs a contradiction label",
    );
    refused(
        &[
            "--cross-model",
            &minicheck,
            "--metrics",
            "nli_recall",
            "--nli-labels",
            "entailment=5",
        ],
        64,
        "entailment=5",
    );
    refused(
        &["--metrics", "token_f1", "--nli-labels", "entailment=1"],
        64,
        "--cross-model",
    );
    let embedding = tiny_model("tiny-roberta");
    refused(
        &["--cross-model", &embedding, "--metrics", "nli"],
        78,
        "ForSequenceClassification",
    );
    // The two-way model gives what it can.
    ok(&score(
        &input,
        &out,
        &[
            "--cross-model",
            &two_way,
            "--metrics",
            "nli_precision,nli_recall,nli_equivalence",
        ],
    ));
    let b = read_parquet(&out);
    assert!(f32s(&b, "nli_equivalence").iter().any(|v| v.is_some()));
}

#[test]
fn the_fingerprint_covers_the_cross_model() {
    // The run's id hashes what changes its values (a resumed run must
    // match it): another cross-encoder or other labels are another run.
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path(), "tiny-cross-xlmr-minicheck");
    let out = dir.path().join("o.parquet");
    let run_id = |flags: &[&str]| -> String {
        let mut args = vec!["--overwrite", "--metrics", "nli_precision"];
        args.extend_from_slice(flags);
        ok(&score(&input, &out, &args));
        summary(&out)["run_id"].as_str().unwrap().to_string()
    };
    let minicheck = tiny_model("tiny-cross-xlmr-minicheck");
    let two_way = tiny_model("tiny-cross-distilbert-2way");
    let first = run_id(&["--cross-model", &minicheck, "--nli-labels", "entailment=1"]);
    assert_eq!(
        first,
        run_id(&["--cross-model", &minicheck, "--nli-labels", "entailment=1"])
    );
    assert_ne!(
        first,
        run_id(&["--cross-model", &minicheck, "--nli-labels", "entailment=0"])
    );
    assert_ne!(first, run_id(&["--cross-model", &two_way]));
    assert_ne!(
        first,
        run_id(&[
            "--cross-model",
            &minicheck,
            "--nli-labels",
            "entailment=1",
            "--precision",
            "bf16"
        ])
    );
}

/// A scripted judge that says every answer means the same, logging each
/// request.
fn yes_judge() -> common::judge_server::Server {
    common::judge_server::start(|_, _| common::judge_server::chat(r#"{"meaning_match": true}"#))
}

/// Scores nli_equivalence with `name`'s cross-encoder and Meaning Match
/// with `judge`, plus `extra` flags.
fn judged(
    name: &str,
    judge: &common::judge_server::Server,
    input: &Path,
    out: &Path,
    extra: &[&str],
) -> std::process::Output {
    let cross = tiny_model(name);
    let mut args = vec![
        "--cross-model",
        &cross,
        "--metrics",
        "nli_equivalence,meaning_match",
        "--judge-url",
        &judge.url,
        "--judge-model",
        "scripted",
        "--judge-reasons",
        "never",
    ];
    args.extend_from_slice(extra);
    score(input, out, &args)
}

#[test]
fn a_band_on_nli_equivalence_settles_rows_before_the_llm_judge() {
    // The local tier of the cascade: rows whose two-way entailment lies
    // outside the band are decided by it; only the rest reach the judge.
    let name = "tiny-cross-roberta-nli";
    let rows = fixture(name);
    let equivalence: Vec<Option<f32>> = rows
        .iter()
        .map(|r| scorable(&r.1).then(|| r.3[1].min(r.4[1])))
        .collect();
    let mut sorted: Vec<f32> = equivalence.iter().flatten().copied().collect();
    sorted.sort_by(f32::total_cmp);
    // Band edges midway between neighbouring values, far from any row.
    let edge = |q: usize| (sorted[q] + sorted[q + 1]) / 2.0;
    let (lo, hi) = (edge(sorted.len() / 4), edge(3 * sorted.len() / 4));
    let server = yes_judge();
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path(), name);
    let out = dir.path().join("o.parquet");
    let band = format!("nli_equivalence:{lo}..{hi}");
    ok(&judged(
        name,
        &server,
        &input,
        &out,
        &["--judge-band", &band],
    ));
    let b = read_parquet(&out);
    let (verdict, source) = (
        bools(&b, "meaning_match"),
        texts(&b, "meaning_match_source"),
    );
    let mut in_band = std::collections::HashSet::new();
    let (mut below, mut above) = (0, 0);
    for (i, e) in equivalence.iter().enumerate() {
        let Some(e) = *e else { continue };
        if source[i].as_deref() == Some("rule") {
            continue; // the rules come first (an exact match, an empty output)
        }
        if e < lo || e > hi {
            assert_eq!(
                source[i].as_deref(),
                Some("band:nli_equivalence"),
                "row {i}: {e}"
            );
            assert_eq!(verdict[i], Some(e > hi), "row {i}: {e}");
            below += usize::from(e < lo);
            above += usize::from(e > hi);
        } else {
            assert_ne!(
                source[i].as_deref(),
                Some("band:nli_equivalence"),
                "row {i}: {e}"
            );
            in_band.insert(rows[i].2.trim().to_string());
        }
    }
    let asked = server.requests();
    assert!(
        !asked.is_empty() && below > 50 && above > 50,
        "{below} {above}"
    );
    for r in &asked {
        assert!(
            in_band.contains(r.candidate()),
            "a row the band decided reached the judge: {:?}",
            r.candidate()
        );
    }
    eprintln!(
        "nli_equivalence band {lo:.4}..{hi:.4}: {below} rows false, {above} true by the band; {} judge calls",
        asked.len()
    );
}

#[test]
fn a_pair_repeated_across_batches_is_scored_once() {
    // The night's rows three times over, in batches of 64 rows: the model
    // sees each distinct pair once; the repeats come from the cache, with
    // the same values.
    let name = "tiny-cross-roberta-nli";
    let rows = fixture(name);
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("thrice.parquet");
    let thrice = |k: usize| -> ArrayRef {
        let v: Vec<&str> = (0..3)
            .flat_map(|_| rows.iter())
            .map(|r| if k == 1 { r.1.as_str() } else { r.2.as_str() })
            .collect();
        s(&v)
    };
    write_parquet(
        &input,
        vec![("reference", thrice(1)), ("output", thrice(2))],
    );
    let out = dir.path().join("o.parquet");
    let cross = tiny_model(name);
    let flags = [
        "--cross-model",
        cross.as_str(),
        "--metrics",
        "nli_precision",
        "--batch-size",
        "64",
    ];
    ok(&score(&input, &out, &flags));
    let got = f32s(&read_parquet(&out), "nli_precision");
    let distinct: std::collections::HashSet<(&str, &str)> = rows
        .iter()
        .filter(|r| scorable(&r.1))
        .map(|r| (r.1.as_str(), r.2.as_str()))
        .collect();
    for (i, r) in (0..3).flat_map(|_| rows.iter()).enumerate() {
        if scorable(&r.1) {
            assert!((got[i].unwrap() - r.3[1]).abs() < 1e-5, "row {i}");
        }
    }
    let c = &summary(&out)["cross"];
    assert_eq!(c["pairs_scored"], distinct.len(), "{c}");
    // The second and third nights' pairs all came from the cache.
    assert!(
        c["pairs_reused"].as_u64().unwrap() >= 2 * distinct.len() as u64 - 64,
        "{c}"
    );
    // Without a cache, every batch's pairs go to the model.
    let mut none = flags.to_vec();
    none.extend(["--embed-cache-mb", "0", "--overwrite"]);
    ok(&score(&input, &out, &none));
    let c = &summary(&out)["cross"];
    assert_eq!(c["pairs_reused"], 0, "{c}");
    assert!(
        c["pairs_scored"].as_u64().unwrap() > distinct.len() as u64,
        "{c}"
    );
}

/// A folder holding the tiny RoBERTa NLI model's fixture rows as a night,
/// and the model's path.
fn nli_night() -> (tempfile::TempDir, PathBuf, String) {
    let name = "tiny-cross-roberta-nli";
    let dir = tempfile::tempdir().unwrap();
    let night = input(dir.path(), name);
    (dir, night, tiny_model(name))
}

#[test]
fn a_cross_run_commits_every_256_rows_by_default() {
    // The default batch is part of the fingerprint: a finished run resumes
    // as complete under --batch-size 256, and is another run under the
    // lexical default of 32,768 (which left a cross-only night an hour or
    // more between commits).
    let (dir, inp, cross) = nli_night();
    let out = dir.path().join("o.parquet");
    let flags = [
        "--cross-model",
        cross.as_str(),
        "--metrics",
        "nli_precision",
    ];
    ok(&score(&inp, &out, &flags));
    let same = [flags.as_slice(), &["--resume", "--batch-size", "256"]].concat();
    let id = summary(&out)["run_id"].clone();
    ok(&score(&inp, &out, &same));
    assert_eq!(summary(&out)["run_id"], id, "the same run, found complete");
    let other = [flags.as_slice(), &["--resume", "--batch-size", "32768"]].concat();
    fails(&score(&inp, &out, &other), 78);
}

#[test]
fn the_next_night_takes_its_pairs_from_the_embed_cache() {
    // Night one scores both directions of every pair and keeps them under
    // --embed-cache; night two, the same pairs in another order, asks the
    // model nothing and gives the same values; a damaged entry is scored
    // again.
    let (dir, night1, cross) = nli_night();
    let cache = dir.path().join("cache");
    let flags = [
        "--cross-model",
        cross.as_str(),
        "--metrics",
        "nli",
        "--embed-cache",
        cache.to_str().unwrap(),
    ];
    let first = dir.path().join("first.parquet");
    ok(&score(&night1, &first, &flags));
    let c = &summary(&first)["cross"];
    let scored = c["pairs_scored"].as_u64().unwrap();
    assert!(scored > 0 && c["pairs_from_embed_cache"] == 0, "{c}");

    let batch = read_parquet(&night1);
    let rows = batch.num_rows();
    let reversed: Vec<u32> = (0..rows as u32).rev().collect();
    let take = |name: &str| {
        arrow::compute::take(
            batch.column_by_name(name).unwrap(),
            &arrow::array::UInt32Array::from(reversed.clone()),
            None,
        )
        .unwrap()
    };
    let night2 = dir.path().join("night2.parquet");
    write_parquet(
        &night2,
        vec![("reference", take("reference")), ("output", take("output"))],
    );
    let second = dir.path().join("second.parquet");
    ok(&score(&night2, &second, &flags));
    let c = &summary(&second)["cross"];
    assert_eq!(c["pairs_scored"], 0, "{c}");
    assert_eq!(c["pairs_from_embed_cache"], scored, "{c}");
    let (a, b) = (read_parquet(&first), read_parquet(&second));
    for column in ["nli_precision", "nli_recall", "nli_equivalence"] {
        let mut want = f32s(&a, column);
        want.reverse();
        assert_eq!(f32s(&b, column), want, "{column}");
    }

    // One entry cut short: that pair alone goes to the model again.
    let entry = walk_files(&cache)
        .into_iter()
        .find(|p| p.extension().is_some_and(|e| e == "pair"))
        .expect("pair entries written");
    let bytes = std::fs::read(&entry).unwrap();
    std::fs::write(&entry, &bytes[..bytes.len() - 1]).unwrap();
    let third = dir.path().join("third.parquet");
    ok(&score(&night2, &third, &flags));
    let c = &summary(&third)["cross"];
    assert_eq!(c["pairs_scored"], 1, "{c}");
    assert_eq!(
        f32s(&read_parquet(&third), "nli_equivalence"),
        f32s(&b, "nli_equivalence")
    );
}

/// Every file below `dir`.
fn walk_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let p = entry.path();
        if p.is_dir() {
            out.extend(walk_files(&p));
        } else {
            out.push(p);
        }
    }
    out
}

#[test]
fn calibrate_band_fits_a_band_on_nli_equivalence() {
    // Labels that nli_equivalence separates (true above the median): the
    // fitted band leaves few rows to the judge.
    let name = "tiny-cross-roberta-nli";
    let rows: Vec<Row> = fixture(name)
        .into_iter()
        .filter(|r| scorable(&r.1))
        .collect();
    let equivalence: Vec<f32> = rows.iter().map(|r| r.3[1].min(r.4[1])).collect();
    let mut sorted = equivalence.clone();
    sorted.sort_by(f32::total_cmp);
    let median = sorted[sorted.len() / 2];
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("labelled.parquet");
    let human: ArrayRef = std::sync::Arc::new(arrow::array::BooleanArray::from(
        equivalence
            .iter()
            .map(|&e| Some(e > median))
            .collect::<Vec<_>>(),
    ));
    let col = |k: usize| -> ArrayRef {
        s(&rows
            .iter()
            .map(|r| if k == 1 { r.1.as_str() } else { r.2.as_str() })
            .collect::<Vec<_>>())
    };
    write_parquet(
        &input,
        vec![("reference", col(1)), ("output", col(2)), ("human", human)],
    );
    let server = yes_judge();
    let out = dir.path().join("o.parquet");
    ok(&judged(
        name,
        &server,
        &input,
        &out,
        &["--gold", "meaning_match=human"],
    ));
    let json = dir.path().join("band.json");
    let printed = ok(&refscore(&[
        "calibrate-band",
        out.to_str().unwrap(),
        "--by",
        "nli_equivalence",
        "--json",
        json.to_str().unwrap(),
    ]));
    let band: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(
        printed.contains("--judge-band nli_equivalence:"),
        "{printed}"
    );
    let (all, inside) = (
        band["rows"].as_u64().unwrap(),
        band["rows_inside"].as_u64().unwrap(),
    );
    assert!(inside * 4 < all, "{band}");
    eprintln!("calibrate-band --by nli_equivalence: {printed}");
}

/// A copy of the tiny model `name` in `dir`, for a test to change one of
/// its files.
fn model_copy(name: &str, dir: &Path) -> PathBuf {
    let to = dir.join(name);
    std::fs::create_dir_all(&to).unwrap();
    for entry in std::fs::read_dir(tiny_model(name)).unwrap() {
        let from = entry.unwrap().path();
        std::fs::copy(&from, to.join(from.file_name().unwrap())).unwrap();
    }
    to
}

/// Rewrites the JSON file `file` of the model folder `model` with `edit`.
fn edit_json(model: &Path, file: &str, edit: impl FnOnce(&mut Value)) {
    let path = model.join(file);
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(&mut v);
    std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
}

#[test]
fn an_id2label_naming_one_index_twice_is_refused() {
    // transformers reads id2label's keys with int(): "1" and "01" are one
    // index, named twice, and index 2 is named by no key. A config error
    // (78) naming the index, not a panic (70).
    let dir = tempfile::tempdir().unwrap();
    let model = model_copy("tiny-cross-roberta-nli", dir.path());
    edit_json(&model, "config.json", |c| {
        c["id2label"] =
            serde_json::json!({"0": "contradiction", "1": "entailment", "01": "neutral"});
    });
    let input = input(dir.path(), "tiny-cross-roberta-nli");
    let out = dir.path().join("o.parquet");
    let err = fails(
        &score(
            &input,
            &out,
            &["--cross-model", model.to_str().unwrap(), "--metrics", "nli"],
        ),
        78,
    );
    assert!(err.contains("id2label names index 1 twice"), "{err}");
    assert_eq!(err.trim().lines().count(), 1, "one line: {err}");
    assert!(!out.exists());
}

#[test]
fn score_help_names_every_cross_encoder_family() {
    // The families come from the code's own list of heads, so a family
    // added there and not to the help fails here.
    let help = ok(&refscore(&["score", "--help"]));
    // The --cross-model paragraph, up to the next option.
    let at = help
        .find("--cross-model <")
        .expect("--cross-model in the help");
    let mut lines = help[at..].lines();
    let first = lines.next().unwrap();
    let paragraph = std::iter::once(first)
        .chain(lines.take_while(|l| !l.trim_start().starts_with('-')))
        .collect::<Vec<_>>()
        .join(" ");
    let paragraph = paragraph.split_whitespace().collect::<Vec<_>>().join(" ");
    for (model_type, family) in refscore_embed::cross_families() {
        assert!(
            paragraph.contains(family),
            "score --help's --cross-model omits {family} (model_type '{model_type}'): {paragraph}"
        );
    }
}

/// `cross_score` of the tiny-cross-bert fixture's rows with `model`.
fn cross_scores(dir: &Path, model: &Path, name: &str) -> Vec<Option<f32>> {
    let input = input(dir, "tiny-cross-bert");
    let out = dir.join(format!("{name}.parquet"));
    ok(&score(
        &input,
        &out,
        &[
            "--cross-model",
            model.to_str().unwrap(),
            "--metrics",
            "cross",
        ],
    ));
    f32s(&read_parquet(&out), "cross_score")
}

#[test]
fn a_tokenizer_class_without_token_types_gives_every_token_type_zero() {
    // transformers' tokenizer returns token_type_ids only where its class's
    // model_input_names (or tokenizer_config.json's) name them; without
    // them the model embeds every token as type 0, and so must refscore.
    // The reference: the same BERT cross-encoder whose tokenizer.json pair
    // template gives every token type 0, which is what CrossEncoder.predict
    // runs when the tokenizer sends no token types.
    let dir = tempfile::tempdir().unwrap();
    let variant = |name: &str, file: &str, edit: &dyn Fn(&mut Value)| -> Vec<Option<f32>> {
        let d = dir.path().join(name);
        let model = model_copy("tiny-cross-bert", &d);
        edit_json(&model, file, |v| edit(v));
        cross_scores(&d, &model, name)
    };
    let original = cross_scores(
        dir.path(),
        Path::new(&tiny_model("tiny-cross-bert")),
        "bert",
    );
    let zero_types = variant("zero", "tokenizer.json", &|t| {
        for piece in t["post_processor"]["pair"].as_array_mut().unwrap() {
            for part in piece.as_object_mut().unwrap().values_mut() {
                part["type_id"] = 0.into();
            }
        }
    });
    let distilbert = variant("distilbert", "tokenizer_config.json", &|c| {
        c["tokenizer_class"] = "DistilBertTokenizer".into();
    });
    let fast = variant("fast", "tokenizer_config.json", &|c| {
        c["tokenizer_class"] = "DistilBertTokenizerFast".into();
    });
    let unlisted = variant("unlisted", "tokenizer_config.json", &|c| {
        c["model_input_names"] = serde_json::json!(["input_ids", "attention_mask"]);
    });
    let listed = variant("listed", "tokenizer_config.json", &|c| {
        c["tokenizer_class"] = "DistilBertTokenizer".into();
        c["model_input_names"] =
            serde_json::json!(["input_ids", "token_type_ids", "attention_mask"]);
    });
    let close = |a: &[Option<f32>], b: &[Option<f32>]| {
        a.len() == b.len()
            && a.iter().zip(b).all(|(x, y)| match (x, y) {
                (Some(x), Some(y)) => (x - y).abs() < 1e-6,
                (None, None) => true,
                _ => false,
            })
    };
    // The fixture's pairs are long enough for the token types to matter.
    assert!(
        !close(&original, &zero_types),
        "{original:?} {zero_types:?}"
    );
    assert!(
        close(&distilbert, &zero_types),
        "DistilBertTokenizer: {distilbert:?} vs {zero_types:?}"
    );
    assert!(
        close(&fast, &zero_types),
        "DistilBertTokenizerFast: {fast:?}"
    );
    assert!(
        close(&unlisted, &zero_types),
        "model_input_names without token_type_ids: {unlisted:?}"
    );
    // model_input_names, where the file has them, win over the class.
    assert!(
        close(&listed, &original),
        "listed token_type_ids: {listed:?}"
    );
}
