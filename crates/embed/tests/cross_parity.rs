//! Cross-encoders against sentence-transformers' `CrossEncoder.predict`
//! (`apply_softmax=True` for several labels), on the tiny seeded
//! `*ForSequenceClassification` folders of tests/fixtures/models and their
//! reference values in tests/fixtures/cross-*.jsonl
//! (scripts/fixtures/make-tiny-cross-models.py): every row, both
//! directions, truncation included.

mod common;

use common::{fixtures, jsonl, pairs};

use refscore_embed::{CrossEncoder, CrossFolder, CrossOptions, CrossReport, Precision};
use serde_json::Value;

fn rows(name: &str) -> (Value, Vec<Value>) {
    jsonl(&format!("cross-{name}.jsonl"))
}

fn options() -> CrossOptions {
    CrossOptions {
        precision: Precision::Fp32,
        ..CrossOptions::default()
    }
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

/// Every row's scores in both directions within 1e-4 of the reference (as
/// the family parity tests), and the same pairs counted as truncated.
fn matches_sentence_transformers(name: &str) {
    let (header, rows) = rows(name);
    let folder = CrossFolder::read(&fixtures().join("models").join(name)).unwrap();
    assert_eq!(
        folder.labels.len() as u64,
        header["num_labels"].as_u64().unwrap(),
        "{name}"
    );
    let model = CrossEncoder::load(folder, &options()).unwrap();
    assert_eq!(
        model.max_len() as u64,
        header["max_length"].as_u64().unwrap(),
        "{name}: the pair limit"
    );
    let forward: Vec<(&str, &str)> = pairs(&rows);
    let backward: Vec<(&str, &str)> = forward.iter().map(|&(a, b)| (b, a)).collect();
    let mut report = CrossReport::default();
    let got_forward = model.predict(&forward, true, &mut report).unwrap();
    let got_backward = model.predict(&backward, true, &mut report).unwrap();
    let (mut worst, mut truncated) = (0f32, 0);
    for (i, row) in rows.iter().enumerate() {
        for (got, key) in [(&got_forward[i], "forward"), (&got_backward[i], "backward")] {
            let want = floats(&row[key]);
            assert_eq!(got.values.len(), want.len(), "{name} row {i} {key}");
            for (g, w) in got.values.iter().zip(&want) {
                worst = worst.max((g - w).abs());
                assert!(
                    (g - w).abs() < 1e-4,
                    "{name} row {i} ({}) {key}: {:?} vs sentence-transformers {want:?}",
                    row["id"],
                    got.values
                );
            }
            assert_eq!(
                got.truncated,
                row[format!("{key}_truncated")].as_bool().unwrap(),
                "{name} row {i} {key}: truncated"
            );
            truncated += usize::from(got.truncated);
        }
    }
    assert_eq!(report.pairs as usize, 2 * rows.len());
    assert_eq!(report.truncated as usize, truncated);
    eprintln!(
        "{name}: {} rows, both directions, worst difference {worst:.2e}, {truncated} truncated",
        rows.len()
    );
}

#[test]
fn bert_one_output_with_token_types() {
    matches_sentence_transformers("tiny-cross-bert");
}

#[test]
fn roberta_nli_legacy_layout() {
    matches_sentence_transformers("tiny-cross-roberta-nli");
}

#[test]
fn deberta_v3_nli_sentence_transformers_5_layout() {
    matches_sentence_transformers("tiny-cross-deberta-v3-nli");
}

/// DeBERTa v1 (deberta-large-mnli's class and upper-case labels), its
/// ContextPooler on the v1 body.
#[test]
fn deberta_v1_nli_with_upper_case_labels() {
    matches_sentence_transformers("tiny-cross-deberta-nli");
}

#[test]
fn distilbert_two_way_entailment() {
    matches_sentence_transformers("tiny-cross-distilbert-2way");
}

#[test]
fn xlm_roberta_with_unnamed_labels() {
    matches_sentence_transformers("tiny-cross-xlmr-minicheck");
}

#[test]
fn modernbert_nli_on_the_first_token() {
    matches_sentence_transformers("tiny-cross-modernbert-nli");
}

#[test]
fn modernbert_one_output_on_the_mean_state() {
    matches_sentence_transformers("tiny-cross-modernbert-mean");
}

/// transformers' GTE classifier (BERT's pooler) over a body saved in the
/// layout gte-*-v1.5 ship, under transformers' own prefix.
#[test]
fn gte_reranker_one_output() {
    matches_sentence_transformers("tiny-cross-gte-reranker");
}

/// NomicBERT's rotary body with two token types: the second text gets
/// type 1's row, as BERT's template says.
#[test]
fn nomic_bert_nli_with_token_types() {
    matches_sentence_transformers("tiny-cross-nomic-bert-nli");
}

/// A copy of `name`'s folder with `edit` applied to its config.json.
fn edited(name: &str, edit: impl Fn(&mut serde_json::Map<String, Value>)) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let from = fixtures().join("models").join(name);
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    let path = dir.path().join("config.json");
    let mut config: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    edit(config.as_object_mut().unwrap());
    std::fs::write(&path, config.to_string()).unwrap();
    dir
}

#[test]
fn what_is_not_a_single_label_sequence_classifier_is_refused_by_name() {
    let refused = |dir: &std::path::Path| CrossFolder::read(dir).unwrap_err();
    let token = edited("tiny-cross-bert", |c| {
        c.insert(
            "architectures".into(),
            serde_json::json!(["BertForTokenClassification"]),
        );
    });
    let e = refused(token.path());
    assert!(
        e.message
            .contains("BertForTokenClassification is a token classifier"),
        "{}",
        e.message
    );
    let multi = edited("tiny-cross-roberta-nli", |c| {
        c.insert(
            "problem_type".into(),
            serde_json::json!("multi_label_classification"),
        );
    });
    let e = refused(multi.path());
    assert!(
        e.message.contains("multi_label_classification"),
        "{}",
        e.message
    );
    let decoder = edited("tiny-cross-bert", |c| {
        c.insert(
            "architectures".into(),
            serde_json::json!(["Qwen3ForSequenceClassification"]),
        );
        c.insert("model_type".into(), serde_json::json!("qwen3"));
    });
    let e = refused(decoder.path());
    assert!(e.message.contains("decoder"), "{}", e.message);
    // An embedding model's folder is not a cross-encoder.
    let e = refused(&fixtures().join("models/tiny-roberta"));
    assert!(
        e.message.contains("ForSequenceClassification"),
        "{}",
        e.message
    );
    // Every refusal is a settings error (exit 78).
    assert_eq!(e.class, refscore_core::ErrorClass::Config);
}

/// `--precision bf16` and `int8` run the same cross-encoder off fp32 by a
/// rounding-sized amount (printed: the measured deviation the docs quote).
#[test]
fn reduced_precisions_stay_near_fp32() {
    let (_, rows) = rows("tiny-cross-roberta-nli");
    let pairs: Vec<(&str, &str)> = pairs(&rows);
    let run = |precision: Precision| {
        let folder = CrossFolder::read(&fixtures().join("models/tiny-cross-roberta-nli")).unwrap();
        let model = CrossEncoder::load(
            folder,
            &CrossOptions {
                precision,
                ..CrossOptions::default()
            },
        )
        .unwrap();
        model
            .predict(&pairs, true, &mut CrossReport::default())
            .unwrap()
    };
    let reference = run(Precision::Fp32);
    for precision in [Precision::Bf16, Precision::Int8] {
        let worst = run(precision)
            .iter()
            .zip(&reference)
            .flat_map(|(a, b)| a.values.iter().zip(&b.values).map(|(x, y)| (x - y).abs()))
            .fold(0f32, f32::max);
        eprintln!(
            "{precision:?}: worst probability difference from fp32 {worst:.2e} over {} pairs",
            pairs.len()
        );
        assert!(worst > 0.0 && worst < 0.05, "{precision:?}: {worst}");
    }
}

/// HHEM-2.1-Open's folder, read as its published code reads it: the
/// premise/hypothesis prompt around each pair, the foundation's T5 config,
/// no truncation, the first position's logits; the probabilities within
/// 1e-4 of its `predict` (tests/fixtures/cross-tiny-cross-hhem.jsonl,
/// scripts/fixtures/make-hhem-fixture.py) on every row, both directions:
/// long pairs (prompts past 512 tokens and the buckets' 128), empty and
/// non-ASCII texts, braces and special tokens inside the texts.
#[test]
fn hhem_matches_its_authors_predict() {
    let (header, rows) = rows("tiny-cross-hhem");
    let folder = CrossFolder::read(&fixtures().join("models/tiny-cross-hhem")).unwrap();
    assert_eq!(folder.architecture, "HHEMv2ForSequenceClassification");
    assert_eq!(folder.files.family, "t5");
    assert_eq!(folder.labels, ["hallucinated", "consistent"]);
    let prompt = refscore_embed::PairPrompt::parse(header["prompt"].as_str().unwrap()).unwrap();
    assert_eq!(folder.input, refscore_embed::CrossInput::Prompt(prompt));
    let model = CrossEncoder::load(folder, &options()).unwrap();
    assert_eq!(
        model.max_len(),
        usize::MAX,
        "HHEM's predict does not truncate"
    );
    let forward: Vec<(&str, &str)> = pairs(&rows);
    let backward: Vec<(&str, &str)> = forward.iter().map(|&(a, b)| (b, a)).collect();
    let mut report = CrossReport::default();
    let got_forward = model.predict(&forward, true, &mut report).unwrap();
    let got_backward = model.predict(&backward, true, &mut report).unwrap();
    let mut worst = 0f32;
    for (i, row) in rows.iter().enumerate() {
        for (got, key) in [(&got_forward[i], "forward"), (&got_backward[i], "backward")] {
            let want = floats(&row[key]);
            assert!(!got.truncated, "row {i} {key}: truncated");
            for (g, w) in got.values.iter().zip(&want) {
                worst = worst.max((g - w).abs());
            }
            assert!(
                got.values
                    .iter()
                    .zip(&want)
                    .all(|(g, w)| (g - w).abs() < 1e-4),
                "row {i} ({}) {key}: {:?} vs HHEM's predict {want:?}",
                row["id"],
                got.values
            );
        }
    }
    assert_eq!(report.truncated, 0);
    let longest = header["longest_prompt_tokens"].as_u64().unwrap();
    eprintln!(
        "tiny-cross-hhem: {} rows, both directions, prompts up to {longest} tokens, worst difference {worst:.2e}",
        rows.len()
    );
    // The score HHEM returns is the consistent label's.
    assert_eq!(refscore_embed::HHEM_CONSISTENT, 1);
}

/// A copy of HHEM's twin with `edit` applied to its config.json and the
/// foundation named by its absolute path (the copy is elsewhere).
fn hhem_copy(edit: impl Fn(&mut serde_json::Map<String, Value>)) -> tempfile::TempDir {
    let foundation = fixtures().join("models/tiny-t5");
    edited("tiny-cross-hhem", |c| {
        c.insert(
            "foundation".into(),
            serde_json::json!(foundation.to_str().unwrap()),
        );
        edit(c);
    })
}

/// What HHEM's folder lacks is refused in one line naming it (exit 78);
/// transformers' T5ForSequenceClassification, which runs T5's decoder, is
/// refused by name.
#[test]
fn hhem_folders_missing_a_part_are_refused_in_one_line() {
    // An absolute foundation reads as a relative one did.
    let whole = hhem_copy(|_| {});
    let folder = CrossFolder::read(whole.path()).unwrap();
    assert_eq!(folder.files.family, "t5");
    let no_tokenizer = hhem_copy(|_| {});
    std::fs::remove_file(no_tokenizer.path().join("tokenizer.json")).unwrap();
    let e = CrossFolder::read(no_tokenizer.path()).unwrap_err();
    assert_eq!(e.class, refscore_core::ErrorClass::Config);
    assert!(
        e.message.contains("tokenizer.json") && e.message.contains("tiny-t5"),
        "{}",
        e.message
    );
    assert!(!e.message.contains('\n'), "{}", e.message);
    let elsewhere = hhem_copy(|c| {
        c.insert("foundation".into(), serde_json::json!("no/such-model"));
    });
    let e = CrossFolder::read(elsewhere.path()).unwrap_err();
    assert!(
        e.message.contains("foundation 'no/such-model'"),
        "{}",
        e.message
    );
    let decoder = edited("tiny-t5", |c| {
        c.insert(
            "architectures".into(),
            serde_json::json!(["T5ForSequenceClassification"]),
        );
    });
    let e = CrossFolder::read(decoder.path()).unwrap_err();
    assert!(
        e.message.contains("HHEMv2ForSequenceClassification") && e.message.contains("decoder"),
        "{}",
        e.message
    );
}

/// HHEM's T5 in `--precision bf16` and `int8` stays near fp32 (bounds for
/// this random twin, whose classifier, drawn wide to spread the scores,
/// magnifies rounding: measured 1.1e-2 and 5.1e-2).
#[test]
fn hhem_in_reduced_precision_stays_near_fp32() {
    let (_, rows) = rows("tiny-cross-hhem");
    let pairs: Vec<(&str, &str)> = rows
        .iter()
        .take(120)
        .map(|r| {
            (
                r["reference"].as_str().unwrap(),
                r["output"].as_str().unwrap(),
            )
        })
        .collect();
    let run = |precision: Precision| {
        let folder = CrossFolder::read(&fixtures().join("models/tiny-cross-hhem")).unwrap();
        let options = CrossOptions {
            precision,
            ..CrossOptions::default()
        };
        CrossEncoder::load(folder, &options)
            .unwrap()
            .predict(&pairs, true, &mut CrossReport::default())
            .unwrap()
    };
    let reference = run(Precision::Fp32);
    for precision in [Precision::Bf16, Precision::Int8] {
        let worst = run(precision)
            .iter()
            .zip(&reference)
            .flat_map(|(a, b)| a.values.iter().zip(&b.values).map(|(x, y)| (x - y).abs()))
            .fold(0f32, f32::max);
        eprintln!("HHEM {precision:?}: worst probability difference from fp32 {worst:.2e}");
        let bound = if precision == Precision::Bf16 {
            0.03
        } else {
            0.1
        };
        assert!(worst > 0.0 && worst < bound, "{precision:?}: {worst}");
    }
}

/// The shipped `hhem` recipe on HHEM's twin is HHEM's `predict`: its
/// template is the config's prompt, its score the consistent label's
/// probability; every row's support within 1e-4 of the fixture's
/// (tests/fixtures/cross-tiny-cross-hhem.jsonl), both directions, one
/// chunk per pair, nothing truncated.
#[test]
fn the_hhem_recipe_is_hhems_predict() {
    let (_, rows) = rows("tiny-cross-hhem");
    let folder = CrossFolder::read(&fixtures().join("models/tiny-cross-hhem"))
        .unwrap()
        .with_recipe(Some("hhem"))
        .unwrap();
    assert_eq!(folder.recipe.name(), "hhem");
    let model = CrossEncoder::load(folder, &options()).unwrap();
    assert!(model.scores_support());
    assert_eq!(model.max_len(), usize::MAX);
    let forward: Vec<(&str, &str)> = rows
        .iter()
        .map(|r| {
            (
                r["reference"].as_str().unwrap(),
                r["output"].as_str().unwrap(),
            )
        })
        .collect();
    let backward: Vec<(&str, &str)> = forward.iter().map(|&(a, b)| (b, a)).collect();
    let mut report = CrossReport::default();
    let got_forward = model.support(&forward, &mut report).unwrap();
    let got_backward = model.support(&backward, &mut report).unwrap();
    let mut worst = 0f32;
    for (i, row) in rows.iter().enumerate() {
        for (got, key) in [(&got_forward[i], "forward"), (&got_backward[i], "backward")] {
            let want = floats(&row[key])[refscore_embed::HHEM_CONSISTENT];
            worst = worst.max((got.score - want).abs());
            assert!(
                (got.score - want).abs() < 1e-4,
                "row {i} ({}) {key}: {} vs HHEM's predict {want}",
                row["id"],
                got.score
            );
            assert_eq!(got.chunks, 1, "row {i} {key}");
            assert!(!got.truncated, "row {i} {key}: truncated");
        }
    }
    assert_eq!(report.chunked, 0);
    assert_eq!(report.truncated, 0);
    eprintln!(
        "hhem recipe on tiny-cross-hhem: {} rows, both directions, worst difference {worst:.2e}",
        rows.len()
    );
}
