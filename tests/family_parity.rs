//! Parity of the model families beyond BERT with the reference
//! implementations. Through the real binary, each model must reproduce
//! sentence-transformers' cosine and bert_score's P/R/F1 at a chosen layer
//! (`--layer`, bert_score's num_layers), with idf off and on, and rescaled
//! with a baseline file in bert_score's format (`--rescale-baseline FILE`),
//! within 1e-4 on every row of its tests/fixtures/parity-NAME.jsonl (made by
//! scripts/fixtures/make-family-fixture.py with those libraries; multilingual rows
//! included), on every CPU kernel path this machine runs for the families
//! with fused layers, and on the first such path for those that run
//! Candle operations between their kernels (the path does not change them:
//! those kernels, the gated activation and the fused attention of
//! ModernBERT, GTE and NomicBERT, give the same bits on every path, which
//! `kernels::tests::glu_rows_match_their_definitions_on_every_path` and
//! `kernels::tests::windowed_attention_is_the_same_on_every_path` check):
//!
//! - all-mpnet-base-v2: MPNet, real weights (scripts/fetch-model.sh);
//! - tiny-roberta: RoBERTa with a byte-level BPE tokenizer;
//! - tiny-xlm-roberta: XLM-RoBERTa with a Unigram tokenizer;
//! - tiny-bert-unigram: a BERT body with a Unigram tokenizer, CLS pooling;
//! - tiny-distilbert-dense: DistilBERT with a WordPiece tokenizer, then two
//!   Dense modules (Tanh, Identity) after the pooling;
//! - tiny-deberta: DeBERTa v1 with a byte-level BPE tokenizer (bert_score's
//!   prefix space), CLS pooling;
//! - tiny-deberta-v3: DeBERTa-v2 configured as v3 (log buckets, shared
//!   attention keys, a normalised relative table);
//! - tiny-deberta-v2-conv: DeBERTa-v2 configured as v2-xlarge (its own
//!   position projections, clamped distances, the convolution), with
//!   absolute positions and a projected embedding;
//! - tiny-gte (and tiny-gte-new, tiny-gte-native: its weights under
//!   new-impl's config and transformers' in-memory names): rotary, GLU;
//! - tiny-gte-ntk: those weights under new-impl's config with its fixed
//!   NTK `rope_scaling` (factor 2, as gte-*-en-v1.5 ship), against
//!   transformers' GTE given new-impl's NTK frequencies (transformers runs
//!   no ntk itself);
//! - tiny-nomic-bert (and tiny-nomic-bert-own: nomic-ai's config keys):
//!   rotary, SwiGLU, no biases;
//! - tiny-qwen3: a causal Qwen3 (grouped-query attention, q/k norms) whose
//!   tokenizer appends `<|endoftext|>` and pads on the left, last-token
//!   pooling. Where bert_score's arithmetic breaks for such a tokenizer (a
//!   one-word text counted as empty; NaN for a text of zero total weight),
//!   the fixture holds docs/metrics.md's values instead;
//! - tiny-modernbert (and tiny-modernbert-own: the original config keys):
//!   pre-norm, GeGLU, global and 16-token local layers with two rotary
//!   bases, a final norm;
//! - tiny-embeddinggemma: bidirectional Gemma 3 with sliding and global
//!   layers, (1 + w) RMSNorms, a scaled embedding, and two Dense modules;
//! - tiny-t5: T5's encoder as Flan-T5 configures it (gated GELU, 32
//!   relative buckets up to 128 tokens, unscaled attention, RMS norms, a
//!   final norm, `d_kv · heads` ≠ `d_model`) with a T5-shaped Unigram
//!   tokenizer that appends `</s>` (no [CLS]/[SEP]: bert_score weighs
//!   every token, and its two-token rule is handled as for tiny-qwen3);
//!   tiny-t5-relu: the original T5's ReLU feed-forward, 8 buckets up to 20
//!   tokens.
//!
//! The tiny ones are random-weight checkpoints committed under
//! tests/fixtures/models (scripts/fixtures/make-tiny-models.py).

mod common;

use arrow::array::RecordBatch;
use common::*;
use std::path::{Path, PathBuf};

const TOLERANCE: f32 = 1e-4;

struct Fixture {
    header: serde_json::Value,
    rows: Vec<serde_json::Value>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> Fixture {
    let path = root().join(format!("tests/fixtures/parity-{name}.jsonl"));
    let text = std::fs::read_to_string(&path).unwrap();
    let mut lines = text.lines();
    let header: serde_json::Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let rows: Vec<serde_json::Value> = lines.map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(header["header"]["rows"].as_u64(), Some(rows.len() as u64));
    Fixture {
        header: header["header"].clone(),
        rows,
    }
}

fn model_dir(name: &str) -> PathBuf {
    let tiny = root().join("tests/fixtures/models").join(name);
    if tiny.is_dir() {
        return tiny;
    }
    let dir = root().join("models").join(name);
    assert!(
        dir.join("model.safetensors").is_file(),
        "the real model is required: run scripts/fetch-model.sh --model {name} (scripts/test.sh does)"
    );
    dir
}

/// Scores the fixture's rows with `--model` and `extra` flags under `env`.
fn run(f: &Fixture, model: &Path, extra: &[&str], env: &[(&str, &str)]) -> RecordBatch {
    let text = |r: &serde_json::Value, k: &str| r[k].as_str().unwrap().to_string();
    let owned: Vec<[String; 3]> = f
        .rows
        .iter()
        .map(|r| [text(r, "id"), text(r, "reference"), text(r, "output")])
        .collect();
    let rows: Vec<(&str, &str, &str)> = owned
        .iter()
        .map(|[a, b, c]| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    let (output, scores) = score_embedding(&rows, model, extra, env);
    ok(&output);
    let (batch, summary) = scores.expect("scores written");
    if extra.contains(&"--layer") {
        let layer = f.header["layer"].as_u64().unwrap();
        assert_eq!(
            summary["embedding"]["bertscore_layer"].as_u64(),
            Some(layer)
        );
    }
    batch
}

/// The worst difference between `batch`'s columns and the fixture's keys.
fn compare(f: &Fixture, batch: &RecordBatch, pairs: &[(&str, &str)]) -> f32 {
    let status = texts(batch, "status");
    let mut checked = 0;
    let mut worst = (0f32, String::new());
    for (column, key) in pairs {
        let got = f32s(batch, column);
        for (i, row) in f.rows.iter().enumerate() {
            let id = row["id"].as_str().unwrap();
            if row["reference"].as_str().unwrap().trim().is_empty() {
                assert_eq!(status[i].as_deref(), Some("error"), "{id}");
                continue;
            }
            let want = row[*key].as_f64().unwrap() as f32;
            let have = got[i].unwrap_or_else(|| panic!("{id}: {column} is null"));
            if ill_conditioned_f1(row, key) {
                continue;
            }
            let diff = (have - want).abs();
            if diff > worst.0 {
                worst = (
                    diff,
                    format!("{id} {column}: refscore {have} vs reference {want}"),
                );
            }
            checked += 1;
        }
    }
    assert!(
        checked >= 350 * pairs.len(),
        "only {checked} values compared"
    );
    assert!(
        worst.0 <= TOLERANCE,
        "worst difference {} > {TOLERANCE}: {}",
        worst.0,
        worst.1
    );
    worst.0
}

/// Whether `key` is an F1 whose P + R is near 0, where F = 2PR/(P+R)
/// turns a 1e-7 difference in P or R into 1e-3 (a random tiny model's
/// layer can put P and R either side of 0): no implementation in f32
/// agrees with another there, so those values are not compared (an empty
/// text's P = R = 0, F = 0 still is).
fn ill_conditioned_f1(row: &serde_json::Value, key: &str) -> bool {
    let Some(suffix) = key.strip_prefix("bertscore_f1") else {
        return false;
    };
    // A rescaled F comes from the raw one.
    let suffix = suffix.strip_suffix("_rescaled").unwrap_or(suffix);
    let value = |m: &str| row[format!("bertscore_{m}{suffix}")].as_f64().unwrap();
    let (p, r) = (value("precision"), value("recall"));
    (p, r) != (0.0, 0.0) && (p + r).abs() < 1e-2
}

fn bertscore(suffix: &str) -> [(&'static str, String); 3] {
    ["precision", "recall", "f1"].map(|m| {
        let column: &'static str = match m {
            "precision" => "bertscore_precision",
            "recall" => "bertscore_recall",
            _ => "bertscore_f1",
        };
        (column, format!("bertscore_{m}{suffix}"))
    })
}

/// Whether the folder's family runs refscore's fused CPU kernels (the
/// BERT-shaped body), so that each kernel path computes it differently.
fn uses_fused_kernels(model: &Path) -> bool {
    let config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(model.join("config.json")).unwrap()).unwrap();
    matches!(
        config["model_type"].as_str().unwrap_or("bert"),
        "bert" | "distilbert" | "mpnet" | "roberta" | "xlm-roberta"
    )
}

fn cpu_has_all(features: &[&str]) -> bool {
    features.iter().all(|f| cpu_has(f))
}

/// Cosine from the last layer, BERTScore from the fixture's layer, plain,
/// idf-weighted and rescaled; the plain scores again on each other runnable
/// kernel path.
fn matches_the_reference_libraries(name: &str) {
    matches_in_another_layout(name, name);
}

/// As [`matches_the_reference_libraries`], for the folder `model` holding
/// `fixture`'s weights in another layout (other names or config keys).
fn matches_in_another_layout(fixture_name: &str, model: &str) {
    let name = model;
    let f = fixture(fixture_name);
    let model = model_dir(model);
    let layer = f.header["layer"].to_string();
    let baseline = root()
        .join("tests/fixtures")
        .join(f.header["baseline"].as_str().unwrap());
    let baseline = baseline.to_str().unwrap();
    let kernels = uses_fused_kernels(&model);
    let first = KERNEL_PATHS
        .iter()
        .find(|(_, f)| cpu_has_all(f))
        .map(|(p, _)| *p);
    for (path, features) in KERNEL_PATHS {
        if !kernels && Some(path) != first {
            // The same Candle operations (and bit-identical kernels) run
            // whatever the kernel path: one path is the check, the others
            // only repeat it.
            continue;
        }
        if !features.iter().all(|f| cpu_has(f)) {
            eprintln!("skipping the {path} kernels: this CPU lacks some of {features:?}");
            continue;
        }
        let env = [("REFSCORE_KERNELS", path)];
        let check = |batch: &RecordBatch, pairs: &[(&'static str, String)]| {
            let pairs: Vec<(&str, &str)> = pairs.iter().map(|(c, k)| (*c, k.as_str())).collect();
            compare(&f, batch, &pairs)
        };
        let plain = run(&f, &model, &["--layer", &layer], &env);
        let mut pairs = vec![("cosine", "cosine".to_string())];
        pairs.extend(bertscore(""));
        let w1 = check(&plain, &pairs);
        if Some(path) != first {
            // idf weights and the rescaling are arithmetic on the same
            // embeddings, which no kernel path computes: the plain run is
            // what this path changes.
            eprintln!("{name} {path}: worst difference plain {w1:.2e}");
            continue;
        }
        let idf = run(&f, &model, &["--layer", &layer, "--idf"], &env);
        let w2 = check(&idf, &bertscore("_idf"));
        let rescale = ["--layer", &layer, "--rescale-baseline", baseline];
        let w3 = check(&run(&f, &model, &rescale, &env), &bertscore("_rescaled"));
        eprintln!(
            "{name} {path}: worst differences plain {w1:.2e}, idf {w2:.2e}, rescaled {w3:.2e}"
        );
    }
}

#[test]
fn mpnet_matches_the_reference_libraries() {
    matches_the_reference_libraries("all-mpnet-base-v2");
}

#[test]
fn roberta_with_byte_level_bpe_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-roberta");
}

#[test]
fn xlm_roberta_with_unigram_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-xlm-roberta");
}

#[test]
fn bert_with_a_unigram_tokenizer_and_cls_pooling_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-bert-unigram");
}

#[test]
fn distilbert_with_two_dense_modules_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-distilbert-dense");
}

#[test]
fn deberta_v1_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-deberta");
}

#[test]
fn deberta_v3_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-deberta-v3");
}

#[test]
fn deberta_v2_with_its_convolution_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-deberta-v2-conv");
}

#[test]
fn gte_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-gte");
}

/// The same weights under new-impl's config (`model_type` `new`), and
/// under transformers' in-memory names.
#[test]
fn gte_in_its_other_layouts_matches_the_reference_libraries() {
    matches_in_another_layout("tiny-gte", "tiny-gte-new");
    matches_in_another_layout("tiny-gte", "tiny-gte-native");
}

/// new-impl's fixed NTK scaling of the rotary frequencies.
#[test]
fn gte_with_ntk_rope_scaling_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-gte-ntk");
}

#[test]
fn nomic_bert_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-nomic-bert");
}

/// The same weights under nomic-ai's own config keys.
#[test]
fn nomic_bert_with_its_own_config_matches_the_reference_libraries() {
    matches_in_another_layout("tiny-nomic-bert", "tiny-nomic-bert-own");
}

#[test]
fn qwen3_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-qwen3");
}

#[test]
fn modernbert_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-modernbert");
}

/// The same weights under ModernBERT's original config keys.
#[test]
fn modernbert_with_its_original_config_matches_the_reference_libraries() {
    matches_in_another_layout("tiny-modernbert", "tiny-modernbert-own");
}

#[test]
fn embeddinggemma_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-embeddinggemma");
}

#[test]
fn t5_with_gated_gelu_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-t5");
}

#[test]
fn t5_with_relu_matches_the_reference_libraries() {
    matches_the_reference_libraries("tiny-t5-relu");
}

/// The families that run as Candle operations on padded batches, by the
/// tiny folder that tests each.
const PADDED_FAMILIES: [&str; 9] = [
    "tiny-deberta",
    "tiny-deberta-v3",
    "tiny-deberta-v2-conv",
    "tiny-gte",
    "tiny-nomic-bert",
    "tiny-qwen3",
    "tiny-modernbert",
    "tiny-embeddinggemma",
    "tiny-t5",
];

/// The worst |refscore − reference| over the fixture's rows for cosine and
/// plain BERTScore, F1 taken where |P + R| is at least 0.2 (as
/// tests/precision.rs does).
fn worst_deviation(f: &Fixture, batch: &RecordBatch) -> f32 {
    let mut worst = 0f32;
    for column in [
        "cosine",
        "bertscore_precision",
        "bertscore_recall",
        "bertscore_f1",
    ] {
        let got = f32s(batch, column);
        for (i, row) in f.rows.iter().enumerate() {
            if row["reference"].as_str().unwrap().trim().is_empty() {
                continue;
            }
            let value = |k: &str| row[k].as_f64().unwrap() as f32;
            if column == "bertscore_f1"
                && (value("bertscore_precision") + value("bertscore_recall")).abs() < 0.2
            {
                continue;
            }
            worst = worst.max((got[i].unwrap() - value(column)).abs());
        }
    }
    worst
}

/// `--precision bf16|int8` runs every padded family's layer products in
/// that precision: off the reference by more than nothing (the products
/// really changed) and by no more than the bound docs/performance.md states
/// for these tiny random checkpoints, and named in the summary.
#[test]
fn padded_families_run_in_reduced_precision() {
    // Random weights at initializer_range 0.2 magnify rounding more than
    // trained ones do (all-MiniLM-L6-v2's bounds are 3e-3 and 2.5e-2).
    let bounds = [("bf16", 3e-2f32), ("int8", 1e-1)];
    for name in PADDED_FAMILIES {
        let f = fixture(name);
        let model = model_dir(name);
        let layer = f.header["layer"].to_string();
        for (precision, bound) in bounds {
            let batch = run(
                &f,
                &model,
                &["--layer", &layer, "--precision", precision],
                &[],
            );
            let worst = worst_deviation(&f, &batch);
            eprintln!("{name} {precision}: worst deviation {worst:.1e}");
            assert!(
                worst > 0.0 && worst <= bound,
                "{name} {precision}: worst deviation {worst} (bound {bound})"
            );
        }
    }
    let rows = [("a", "The cat sleeps.", "A cat is asleep.")];
    let (output, scores) = score_embedding(
        &rows,
        &model_dir("tiny-qwen3"),
        &["--precision", "int8"],
        &[],
    );
    ok(&output);
    let (_, summary) = scores.expect("scores written");
    assert_eq!(summary["embedding"]["precision"], "int8");
}

/// A padded family's reduced-precision products give the same bits on
/// every kernel path this CPU runs, end to end.
#[test]
fn padded_families_in_reduced_precision_agree_across_kernel_paths() {
    let f = fixture("tiny-qwen3");
    let model = model_dir("tiny-qwen3");
    for precision in ["bf16", "int8"] {
        let mut first: Option<(&str, RecordBatch)> = None;
        for (path, features) in KERNEL_PATHS {
            if !cpu_has_all(features) {
                eprintln!("skipping the {path} kernels: this CPU lacks some of {features:?}");
                continue;
            }
            let env = [("REFSCORE_KERNELS", path)];
            let batch = run(&f, &model, &["--precision", precision], &env);
            match &first {
                None => first = Some((path, batch)),
                Some((first_path, reference)) => {
                    for column in ["cosine", "bertscore_f1"] {
                        let bits = |b: &RecordBatch| -> Vec<Option<u32>> {
                            f32s(b, column)
                                .iter()
                                .map(|v| v.map(f32::to_bits))
                                .collect()
                        };
                        assert_eq!(
                            bits(&batch),
                            bits(reference),
                            "{precision} {column}: {path} differs from {first_path}"
                        );
                    }
                }
            }
        }
    }
}

/// The summary names the family and the modules applied after pooling.
#[test]
fn the_summary_names_the_family_and_the_dense_modules() {
    let model = model_dir("tiny-distilbert-dense");
    let rows = [("a", "The cat sleeps.", "A cat is asleep.")];
    let (output, scores) = score_embedding(&rows, &model, &[], &[]);
    ok(&output);
    let (_, summary) = scores.expect("scores written");
    let e = &summary["embedding"];
    assert_eq!(e["family"], "distilbert");
    assert_eq!(
        e["after_pooling"],
        serde_json::json!(["Dense(32→24, Tanh)", "Dense(24→16, Identity)", "Normalize"])
    );
}

/// A layer past the model's last, and a baseline file without the layer's
/// row, are refused before any work, naming the flag.
#[test]
fn a_layer_the_model_lacks_is_refused() {
    let model = model_dir("all-mpnet-base-v2");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("s.parquet");
    let model = model.to_str().unwrap();
    let output = score(
        &example(),
        &out,
        &["--metrics", "embedding", "--model", model, "--layer", "13"],
    );
    let err = fails(&output, 64);
    assert!(
        err.contains("--layer") && err.contains("12 layers"),
        "{err}"
    );
    let baseline = dir.path().join("b.tsv");
    std::fs::write(&baseline, "LAYER,P,R,F\n0,0.5,0.5,0.5\n").unwrap();
    let output = score(
        &example(),
        &out,
        &[
            "--metrics",
            "embedding",
            "--model",
            model,
            "--rescale-baseline",
            baseline.to_str().unwrap(),
        ],
    );
    let err = fails(&output, 78);
    assert!(err.contains("no row for layer 12"), "{err}");
    assert!(!out.exists(), "no output after a refused run");
}
