//! What a sentence-transformers folder must hold, through the real binary:
//! every module `modules.json` lists is applied or the folder is refused by
//! name (never scored without it), settings that cannot be honoured are
//! refused, and tokenizers without special tokens score empty texts
//! without a panic.

mod common;

use std::path::{Path, PathBuf};

use common::*;
use serde_json::{json, Value};

fn minilm() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2")
}

/// A copy of the MiniLM folder (its files linked) with `changed` files
/// written anew (relative path → content).
fn variant(dir: &Path, changed: &[(&str, String)]) -> PathBuf {
    let folder = dir.join("model");
    std::fs::create_dir_all(&folder).unwrap();
    for entry in std::fs::read_dir(minilm()).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        // A folder holding a changed file is made, never linked: the
        // model's own files stay untouched.
        let first = |c: &str| {
            Path::new(c)
                .components()
                .next()
                .map(|p| p.as_os_str().to_owned())
        };
        if !changed
            .iter()
            .any(|(c, _)| first(c).as_deref() == Some(name))
        {
            std::os::unix::fs::symlink(&path, folder.join(name)).unwrap();
        }
    }
    for (name, text) in changed {
        let path = folder.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }
    folder
}

fn input(dir: &Path) -> PathBuf {
    let p = dir.join("in.parquet");
    write_parquet(
        &p,
        vec![
            ("id", s(&["a", "b", "c"])),
            ("reference", s(&["Paris", "blue", "a dog"])),
            ("output", s(&["paris", "", "the cat"])),
        ],
    );
    p
}

fn run(dir: &Path, model: &Path) -> std::process::Output {
    let out = dir.join("o.parquet");
    score(
        &input(dir),
        &out,
        &["--metrics", "embedding", "--model", model.to_str().unwrap()],
    )
}

fn module(idx: usize, path: &str, kind: &str) -> Value {
    json!({"idx": idx, "name": idx.to_string(), "path": path, "type": kind})
}

#[test]
fn a_module_refscore_does_not_apply_is_refused_by_name() {
    let dir = tempfile::tempdir().unwrap();
    // LaBSE's and the distiluse models' layout: a Dense layer after pooling.
    let modules = json!([
        module(0, "", "sentence_transformers.models.Transformer"),
        module(1, "1_Pooling", "sentence_transformers.models.Pooling"),
        module(2, "2_Dense", "sentence_transformers.models.Dense"),
        module(3, "3_Normalize", "sentence_transformers.models.Normalize"),
    ]);
    let dense = json!({"in_features": 384, "out_features": 16, "bias": true,
                       "activation_function": "torch.nn.modules.activation.Tanh"});
    let model = variant(
        dir.path(),
        &[
            ("modules.json", modules.to_string()),
            ("2_Dense/config.json", dense.to_string()),
        ],
    );
    let err = fails(&run(dir.path(), &model), 78);
    assert!(
        err.contains("modules.json: module 2 (sentence_transformers.models.Dense, path '2_Dense')"),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!dir.path().join("o.parquet").exists());
}

#[test]
fn a_pooling_module_whose_folder_is_missing_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let modules = json!([
        module(0, "", "sentence_transformers.models.Transformer"),
        module(1, "9_Pooling", "sentence_transformers.models.Pooling"),
        module(2, "2_Normalize", "sentence_transformers.models.Normalize"),
    ]);
    let model = variant(dir.path(), &[("modules.json", modules.to_string())]);
    let err = fails(&run(dir.path(), &model), 78);
    assert!(
        err.contains("module 1 (sentence_transformers.models.Pooling, path '9_Pooling')")
            && err.contains("9_Pooling/config.json is missing"),
        "{err}"
    );
    // No Pooling module at all: no sentence embedding.
    let dir = tempfile::tempdir().unwrap();
    let modules = json!([module(0, "", "sentence_transformers.models.Transformer")]);
    let model = variant(dir.path(), &[("modules.json", modules.to_string())]);
    let err = fails(&run(dir.path(), &model), 78);
    assert!(err.contains("no Pooling module"), "{err}");
}

#[test]
fn a_max_seq_length_below_two_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let config = json!({"max_seq_length": 1, "do_lower_case": false});
    let model = variant(
        dir.path(),
        &[("sentence_bert_config.json", config.to_string())],
    );
    let err = fails(&run(dir.path(), &model), 78);
    assert!(
        err.contains("sentence_bert_config.json: max_seq_length 1"),
        "{err}"
    );
}

#[test]
fn a_tokenizer_without_special_tokens_scores_an_empty_output() {
    let mut tokenizer: Value =
        serde_json::from_str(&std::fs::read_to_string(minilm().join("tokenizer.json")).unwrap())
            .unwrap();
    tokenizer["post_processor"] = Value::Null;
    for mode in ["cls", "mean", "max", "weightedmean", "lasttoken"] {
        let dir = tempfile::tempdir().unwrap();
        let pooling = json!({"word_embedding_dimension": 384, "pooling_mode": mode});
        let model = variant(
            dir.path(),
            &[
                ("tokenizer.json", tokenizer.to_string()),
                ("1_Pooling/config.json", pooling.to_string()),
            ],
        );
        let out = dir.path().join("o.parquet");
        ok(&run(dir.path(), &model));
        let got = read_parquet(&out);
        let cosine = f32s(&got, "cosine");
        let f1 = f32s(&got, "bertscore_f1");
        // An empty output has no token: no direction to compare, and
        // BERTScore 0 as for any empty text.
        assert_eq!((cosine[1], f1[1]), (Some(0.0), Some(0.0)), "{mode}");
        assert!(cosine[0].unwrap() > 0.3, "{mode}: {cosine:?}");
        assert_eq!(texts(&got, "status"), vec![Some("ok".to_string()); 3]);
    }
}
