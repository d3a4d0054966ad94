//! Static embedding models (docs/models.md#static-models) through the real
//! binary: model2vec folders computed as model2vec computes them, a
//! sentence-transformers `StaticEmbedding` folder as sentence-transformers
//! does, and BERTScore over the tokens' own table rows, against values the
//! libraries themselves produced:
//! - tiny seeded folders (float16, per-token weights, a vocabulary mapping)
//!   committed with tests/fixtures/tiny-static.expected.jsonl
//!   (scripts/fixtures/make-tiny-static-models.py);
//! - a real model distilled from all-MiniLM-L6-v2 with model2vec's own
//!   `distill`, made by the test command (scripts/fixtures/make-static-model.sh)
//!   with models/static-minilm.expected.jsonl.
//!
//! Bad folders and settings a static model cannot honour fail before any
//! row is scored.

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use common::*;

const TOLERANCE: f32 = 1e-4;

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

fn expected(path: &Path) -> Vec<serde_json::Value> {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| {
        panic!(
            "{}: {e}; scripts/test.sh makes it (scripts/fixtures/make-static-model.sh)",
            path.display()
        )
    });
    text.lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// docs/metrics.md#bertscore: P and R within [-1, 1], F = 2PR/(P+R)
/// (0 when P + R = 0) within [-1, 1]. Greedy matching of vectors that are
/// not all positive (a static model's centred table) can give P and R of
/// opposite signs, where the reference formula leaves that range.
fn documented_range(p: f64, r: f64) -> [f32; 3] {
    let (p, r) = (p.clamp(-1.0, 1.0), r.clamp(-1.0, 1.0));
    let f = if p + r == 0.0 {
        0.0
    } else {
        (2.0 * p * r / (p + r)).clamp(-1.0, 1.0)
    };
    [p as f32, r as f32, f as f32]
}

/// Scores the rows of `model` in `values` with and without `--idf` and
/// compares every metric; returns the worst differences.
fn check(model_dir: &Path, family: &str, values: &[&serde_json::Value]) -> (f32, f32) {
    let input = fixture_pairs(values);
    let mut worst = (0f32, 0f32);
    for idf in [false, true] {
        let extra: &[&str] = if idf { &["--idf"] } else { &[] };
        let (out, scores) = score_embedding(&input, model_dir, extra, &[]);
        ok(&out);
        let (batch, summary) = scores.unwrap();
        assert_eq!(summary["embedding"]["family"], family);
        let cosine = f32s(&batch, "cosine");
        let got: Vec<Vec<Option<f32>>> = ["precision", "recall", "f1"]
            .iter()
            .map(|m| f32s(&batch, &format!("bertscore_{m}")))
            .collect();
        let suffix = if idf { "_idf" } else { "" };
        for (k, v) in values.iter().enumerate() {
            let id = v["id"].as_str().unwrap();
            let want_cos = v["cosine"].as_f64().unwrap() as f32;
            let d = (cosine[k].unwrap() - want_cos).abs();
            assert!(
                d <= TOLERANCE,
                "{id}: cosine {:?}, want {want_cos}",
                cosine[k]
            );
            worst.0 = worst.0.max(d);
            let raw = |m: &str| v[format!("bertscore_{m}{suffix}")].as_f64().unwrap();
            let want = documented_range(raw("precision"), raw("recall"));
            for (m, want) in want.iter().enumerate() {
                let d = (got[m][k].unwrap() - want).abs();
                assert!(
                    d <= TOLERANCE,
                    "{id} (idf {idf}): bertscore {m} is {:?}, want {want}",
                    got[m][k]
                );
                worst.1 = worst.1.max(d);
            }
        }
    }
    worst
}

/// Groups the expected rows by their `model`.
fn by_model(rows: &[serde_json::Value]) -> Vec<(String, Vec<&serde_json::Value>)> {
    let mut groups: Vec<(String, Vec<&serde_json::Value>)> = Vec::new();
    for v in rows {
        let model = v["model"].as_str().unwrap().to_string();
        match groups.iter_mut().find(|(m, _)| *m == model) {
            Some((_, g)) => g.push(v),
            None => groups.push((model, vec![v])),
        }
    }
    groups
}

#[test]
fn tiny_static_folders_match_model2vec() {
    let rows = expected(&repo("tests/fixtures/tiny-static.expected.jsonl"));
    let groups = by_model(&rows);
    assert!(
        groups.len() >= 3,
        "{:?}",
        groups.iter().map(|g| &g.0).collect::<Vec<_>>()
    );
    for (model, values) in &groups {
        let dir = repo("tests/fixtures/models").join(model);
        let (cos, bert) = check(&dir, "model2vec", values);
        eprintln!(
            "{model}: {} rows, worst cosine {cos:.2e}, worst BERTScore {bert:.2e}",
            values.len()
        );
    }
}

#[test]
fn a_model_distilled_from_minilm_matches_model2vec_and_sentence_transformers() {
    let rows = expected(&repo("models/static-minilm.expected.jsonl"));
    let groups = by_model(&rows);
    let families = [
        ("static-minilm-m2v", "model2vec"),
        ("static-minilm-st", "static-embedding"),
    ];
    for (model, family) in families {
        let values = &groups
            .iter()
            .find(|(m, _)| m == model)
            .unwrap_or_else(|| panic!("no rows of {model}"))
            .1;
        assert!(values.len() >= 300, "{model}: {} rows", values.len());
        let (cos, bert) = check(&repo("models").join(model), family, values);
        eprintln!(
            "{model}: {} rows, worst cosine {cos:.2e}, worst BERTScore {bert:.2e}",
            values.len()
        );
    }
}

/// A copy of the tiny float16 folder whose tensors `edit` changes.
fn edited_folder(
    edit: impl FnOnce(&mut HashMap<String, candle_core::Tensor>),
) -> tempfile::TempDir {
    let from = repo("tests/fixtures/models/tiny-static-f16");
    let dir = tempfile::tempdir().unwrap();
    for entry in std::fs::read_dir(&from).unwrap() {
        let entry = entry.unwrap();
        if entry.file_type().unwrap().is_file() {
            std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
        }
    }
    let weights = dir.path().join("model.safetensors");
    let mut tensors = candle_core::safetensors::load(&weights, &candle_core::Device::Cpu).unwrap();
    edit(&mut tensors);
    candle_core::safetensors::save(&tensors, &weights).unwrap();
    dir
}

fn vocab_size(dir: &Path) -> usize {
    let v: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap())
            .unwrap();
    let vocab = &v["model"]["vocab"];
    vocab
        .as_object()
        .map(|o| o.len())
        .or_else(|| vocab.as_array().map(Vec::len))
        .unwrap()
        + v["added_tokens"].as_array().map_or(0, |a| {
            a.iter()
                .filter(|t| vocab.get(t["content"].as_str().unwrap()).is_none())
                .count()
        })
}

#[test]
fn bad_static_folders_and_settings_fail_before_any_row() {
    let rows = [("a", "Paris is the capital", "the capital is Paris")];
    let table = |t: &HashMap<String, candle_core::Tensor>| t["embeddings"].clone();
    let no_table = edited_folder(|t| {
        let e = t.remove("embeddings").unwrap();
        t.insert("vectors".into(), e);
    });
    let vocab = vocab_size(&repo("tests/fixtures/models/tiny-static-f16"));
    let short_table = edited_folder(|t| {
        let e = table(t).narrow(0, 0, vocab / 2).unwrap();
        t.insert("embeddings".into(), e);
    });
    let bad_mapping = edited_folder(|t| {
        // One entry short of the vocabulary.
        let m = candle_core::Tensor::zeros(
            vocab - 1,
            candle_core::DType::I64,
            &candle_core::Device::Cpu,
        )
        .unwrap();
        t.insert("mapping".into(), m);
    });
    let outside_mapping = edited_folder(|t| {
        let rows = table(t).dim(0).unwrap() as i64;
        let m: Vec<i64> = (0..vocab as i64)
            .map(|i| if i == 3 { rows } else { i % rows })
            .collect();
        let m = candle_core::Tensor::new(m, &candle_core::Device::Cpu).unwrap();
        t.insert("mapping".into(), m);
    });
    let good = repo("tests/fixtures/models/tiny-static-f16");
    let width = {
        let t = candle_core::safetensors::load(
            good.join("model.safetensors"),
            &candle_core::Device::Cpu,
        )
        .unwrap();
        t["embeddings"].dim(1).unwrap()
    };
    let above = (width + 1).to_string();
    let store = tempfile::tempdir().unwrap();
    let cases: Vec<(&Path, Vec<&str>, i32, &str)> = vec![
        (no_table.path(), vec![], 78, "no tensor 'embeddings'"),
        (short_table.path(), vec![], 78, "rows (and no 'mapping')"),
        (bad_mapping.path(), vec![], 78, "tensor 'mapping' has"),
        (outside_mapping.path(), vec![], 78, "sends token 3 to row"),
        (&good, vec!["--truncate-dim", "0"], 64, "--truncate-dim"),
        (&good, vec!["--truncate-dim", &above], 64, "--truncate-dim"),
        (&good, vec!["--layer", "0"], 64, "has no layers"),
        (
            &good,
            vec!["--embed-cache", store.path().to_str().unwrap()],
            64,
            "--embed-cache",
        ),
        (&good, vec!["--precision", "int8"], 64, "--precision"),
    ];
    for (dir, extra, code, says) in cases {
        let (out, scores) = score_embedding(&rows, dir, &extra, &[]);
        let err = fails(&out, code);
        assert!(err.contains(says), "{extra:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(scores.is_none());
    }
    assert!(
        listing(store.path()).is_empty(),
        "the cache folder was written"
    );
}

#[test]
fn truncate_dim_cuts_a_static_sentence_vector() {
    let dir = repo("tests/fixtures/models/tiny-static-weights");
    let rows = [
        ("a", "the cat sat", "a cat sat down"),
        ("b", "blue sky", "the sky is blue"),
    ];
    let (out, whole) = score_embedding(&rows, &dir, &["--metrics", "cosine"], &[]);
    ok(&out);
    let (out, cut) = score_embedding(
        &rows,
        &dir,
        &["--metrics", "cosine", "--truncate-dim", "4"],
        &[],
    );
    ok(&out);
    let ((whole, _), (cut, summary)) = (whole.unwrap(), cut.unwrap());
    assert_eq!(summary["embedding"]["truncate_dim"], 4);
    assert_ne!(f32s(&whole, "cosine"), f32s(&cut, "cosine"));
}
