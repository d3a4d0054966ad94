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
    // A LayerNorm module after pooling changes the vector; refscore has none.
    let modules = json!([
        module(0, "", "sentence_transformers.models.Transformer"),
        module(1, "1_Pooling", "sentence_transformers.models.Pooling"),
        module(2, "2_LayerNorm", "sentence_transformers.models.LayerNorm"),
        module(3, "3_Normalize", "sentence_transformers.models.Normalize"),
    ]);
    let model = variant(dir.path(), &[("modules.json", modules.to_string())]);
    let err = fails(&run(dir.path(), &model), 78);
    assert!(
        err.contains(
            "modules.json: module 2 (sentence_transformers.models.LayerNorm, path '2_LayerNorm')"
        ),
        "{err}"
    );
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(!dir.path().join("o.parquet").exists());
}

/// Tensors by name and shape, for a Dense module's weights file.
type Shapes<'a> = &'a [(&'a str, &'a [usize])];

/// A MiniLM folder with one Dense module (`config` as its config.json)
/// after pooling, and `weights` (name → shape) in its safetensors file
/// when given.
fn with_dense(dir: &Path, config: Value, weights: Option<Shapes>) -> PathBuf {
    let modules = json!([
        module(0, "", "sentence_transformers.models.Transformer"),
        module(1, "1_Pooling", "sentence_transformers.models.Pooling"),
        module(2, "2_Dense", "sentence_transformers.models.Dense"),
        module(3, "3_Normalize", "sentence_transformers.models.Normalize"),
    ]);
    let model = variant(
        dir,
        &[
            ("modules.json", modules.to_string()),
            ("2_Dense/config.json", config.to_string()),
        ],
    );
    if let Some(weights) = weights {
        let tensors: std::collections::HashMap<String, candle_core::Tensor> = weights
            .iter()
            .map(|(name, shape)| {
                let t = candle_core::Tensor::zeros(
                    *shape,
                    candle_core::DType::F32,
                    &candle_core::Device::Cpu,
                );
                (name.to_string(), t.unwrap())
            })
            .collect();
        candle_core::safetensors::save(&tensors, model.join("2_Dense/model.safetensors")).unwrap();
    }
    model
}

/// A Dense module is applied only when all of it can be: missing weights,
/// weights of another shape, an activation or setting refscore does not
/// apply are each refused by name, exit 78, before any output.
#[test]
fn a_dense_module_that_cannot_be_applied_whole_is_refused_by_name() {
    let dense = |extra: Value| {
        let mut c = json!({"in_features": 384, "out_features": 16, "bias": true,
                           "activation_function": "torch.nn.modules.activation.Tanh"});
        c.as_object_mut()
            .unwrap()
            .extend(extra.as_object().unwrap().clone());
        c
    };
    let right: Shapes = &[("linear.weight", &[16, 384]), ("linear.bias", &[16])];
    let cases: Vec<(Value, Option<Shapes>, &str)> = vec![
        (
            dense(json!({})),
            None,
            "has no weights (model.safetensors or pytorch_model.bin)",
        ),
        (
            dense(json!({})),
            Some(&[("linear.weight", &[16, 768]), ("linear.bias", &[16])]),
            "'linear.weight' has shape [16, 768], the config says [16, 384]",
        ),
        (
            dense(json!({})),
            Some(&[("linear.weight", &[16, 384])]),
            "no tensor 'linear.bias'",
        ),
        (
            dense(json!({"in_features": 768})),
            Some(right),
            "in_features is 768, but the vector before it has 384 values",
        ),
        (
            dense(json!({"activation_function": "torch.nn.modules.activation.Softplus"})),
            Some(right),
            "activation_function 'torch.nn.modules.activation.Softplus'",
        ),
        (
            dense(json!({"use_residual": true})),
            Some(right),
            "use_residual true",
        ),
        (
            dense(json!({"module_input_name": "token_embeddings"})),
            Some(right),
            "module_input_name 'token_embeddings'",
        ),
    ];
    for (config, weights, want) in cases {
        let dir = tempfile::tempdir().unwrap();
        let model = with_dense(dir.path(), config, weights);
        let err = fails(&run(dir.path(), &model), 78);
        assert!(
            err.contains(want) && err.contains("2_Dense"),
            "{want}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
        assert!(!dir.path().join("o.parquet").exists());
    }
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

#[test]
fn a_weight_error_is_one_line_with_rust_backtrace_set() {
    let dir = tempfile::tempdir().unwrap();
    let model = variant(dir.path(), &[("model.safetensors", String::new())]);
    // Weights that name none of the model's tensors.
    let t = candle_core::Tensor::zeros(&[2, 2], candle_core::DType::F32, &candle_core::Device::Cpu)
        .unwrap();
    candle_core::safetensors::save(
        &std::collections::HashMap::from([("unrelated".to_string(), t)]),
        model.join("model.safetensors"),
    )
    .unwrap();
    let out = dir.path().join("o.parquet");
    let o = std::process::Command::new(bin())
        .args([
            "score",
            input(dir.path()).to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .args(["--metrics", "embedding", "--model", model.to_str().unwrap()])
        .env("RUST_BACKTRACE", "1")
        .env("RUST_LIB_BACKTRACE", "1")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(err.trim().lines().count(), 1, "{err}");
    assert!(
        err.contains("model.safetensors") || err.contains("tensor"),
        "{err}"
    );
    assert!(!out.exists());
}
