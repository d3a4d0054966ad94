//! Embedding metrics through the real binary: model discovery, what happens
//! without a model, devices, and BERTScore rescaling.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;

fn model() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2")
}

fn small_input(dir: &Path) -> PathBuf {
    let p = dir.join("in.parquet");
    write_parquet(
        &p,
        vec![
            (
                "reference",
                s(&[
                    "Paris",
                    "one hundred",
                    "The mitochondria produce ATP.",
                    "Leonardo da Vinci",
                    "42",
                    "blue",
                ]),
            ),
            (
                "output",
                s(&[
                    "paris",
                    "100",
                    "ATP is made by mitochondria.",
                    "Michelangelo",
                    "The answer is 42.",
                    "The sky is green.",
                ]),
            ),
        ],
    );
    p
}

fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> std::process::Output {
    let mut c = Command::new(bin());
    c.args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    c.output().unwrap()
}

#[test]
fn default_model_is_found_and_reported() {
    let dir = tempfile::tempdir().unwrap();
    let input = small_input(dir.path());
    let out = dir.path().join("o.parquet");
    let m = model();
    let o = run_with_env(
        &[
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-q",
        ],
        &[("REFSCORE_MODEL_DIR", m.to_str().unwrap())],
    );
    ok(&o);
    let b = read_parquet(&out);
    let names = column_names(&b);
    assert_eq!(
        names[6..10],
        [
            "cosine",
            "bertscore_precision",
            "bertscore_recall",
            "bertscore_f1"
        ]
        .map(String::from)
    );
    let cos = f32s(&b, "cosine");
    assert!(cos[0].unwrap() > 0.99, "case-only difference: {:?}", cos[0]);
    assert!(cos.iter().all(|c| (0.0..=1.0).contains(&c.unwrap())));
    let e = &summary(&out)["embedding"];
    assert_eq!(e["max_seq_length"], 256);
    assert_eq!(e["pooling"], "mean");
    assert_eq!(e["texts_embedded"], 12);
}

#[test]
fn a_missing_model_is_an_error_when_asked_for_and_a_warning_otherwise() {
    let dir = tempfile::tempdir().unwrap();
    let input = small_input(dir.path());
    let out = dir.path().join("o.parquet");
    let env = [("REFSCORE_MODEL_DIR", "/nonexistent/model")];
    let o = run_with_env(
        &[
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--metrics",
            "cosine",
        ],
        &env,
    );
    let err = fails(&o, 78);
    assert!(
        err.contains("/nonexistent/model") && err.contains("scripts/fetch-model.sh"),
        "{err}"
    );
    assert!(!out.exists());

    // Named by the environment is asked for: an error even without
    // --metrics, never a silent skip.
    let o = run_with_env(
        &[
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "-q",
        ],
        &env,
    );
    let err = fails(&o, 78);
    assert!(err.contains("/nonexistent/model"), "{err}");
    assert!(!out.exists());

    // Not asked for at all and none at the default place: a warning.
    let o = Command::new(bin())
        .args([
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
        ])
        .env_remove("REFSCORE_MODEL_DIR")
        .current_dir(dir.path())
        .output()
        .unwrap();
    let printed = ok(&o);
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(
        stderr.contains("warning: embedding metrics skipped"),
        "{stderr}"
    );
    assert!(
        printed.contains("token_f1") && !printed.contains("cosine"),
        "{printed}"
    );
    assert!(read_parquet(&out).column_by_name("cosine").is_none());
}

#[test]
fn cuda_without_the_feature_is_a_clear_configuration_error() {
    if cfg!(feature = "cuda") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let input = small_input(dir.path());
    let out = dir.path().join("o.parquet");
    let m = model();
    let embed = |flag: &str, value: &str| {
        let args = [
            "--metrics",
            "embedding",
            "--model",
            m.to_str().unwrap(),
            flag,
            value,
        ];
        score(&input, &out, &args)
    };
    let err = fails(&embed("--device", "cuda:0"), 78);
    assert!(err.contains("--features cuda"), "{err}");
    // Malformed or out-of-range flag values are usage errors (64); the
    // well-formed cuda:0 above is an environment error (78).
    let err = fails(&embed("--device", "tpu"), 64);
    assert!(err.contains("expected cpu, cuda, cuda:N or auto"), "{err}");
    let err = fails(&embed("--max-seq-length", "100000"), 64);
    assert!(err.contains("position limit"), "{err}");
    assert!(!out.exists());
}

/// A model folder whose `config.json` names an architecture refscore has no
/// family for is refused before any work, naming the type and the families
/// it has.
#[test]
fn a_model_type_without_a_family_is_a_configuration_error() {
    let dir = tempfile::tempdir().unwrap();
    let input = small_input(dir.path());
    let out = dir.path().join("o.parquet");
    let folder = dir.path().join("model");
    std::fs::create_dir(&folder).unwrap();
    let original = model();
    for entry in std::fs::read_dir(&original).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap();
        if name != "config.json" {
            std::os::unix::fs::symlink(&path, folder.join(name)).unwrap();
        }
    }
    let mut config: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(original.join("config.json")).unwrap())
            .unwrap();
    config["model_type"] = "xlnet".into();
    std::fs::write(folder.join("config.json"), config.to_string()).unwrap();
    let args = [
        "--metrics",
        "embedding",
        "--model",
        folder.to_str().unwrap(),
    ];
    let err = fails(&score(&input, &out, &args), 78);
    let listed = "bert, deberta, deberta-v2, distilbert, gemma3_text, gte, modernbert, mpnet, \
                  new, nomic_bert, qwen3, roberta, t5, xlm-roberta";
    assert!(
        err.contains("model_type is 'xlnet'") && err.contains(listed),
        "{err}"
    );
    assert!(!out.exists());
}

#[test]
fn rescaling_applies_the_given_or_sampled_baseline() {
    let dir = tempfile::tempdir().unwrap();
    let input = small_input(dir.path());
    let m = model();
    let base = ["--metrics", "bertscore", "--model", m.to_str().unwrap()];
    let raw_out = dir.path().join("raw.parquet");
    ok(&score(&input, &raw_out, &base));
    let given_out = dir.path().join("given.parquet");
    let mut args = base.to_vec();
    args.extend(["--rescale-baseline", "0.5,0.6,0.55"]);
    ok(&score(&input, &given_out, &args));
    let (raw, given) = (read_parquet(&raw_out), read_parquet(&given_out));
    for (col, b) in [
        ("bertscore_precision", 0.5f32),
        ("bertscore_recall", 0.6),
        ("bertscore_f1", 0.55),
    ] {
        for (x, y) in f32s(&raw, col).iter().zip(f32s(&given, col)) {
            let want = (x.unwrap() - b) / (1.0 - b);
            assert!((y.unwrap() - want).abs() < 1e-5, "{col}: {y:?} vs {want}");
        }
    }

    let mut args = base.to_vec();
    args.extend(["--rescale-baseline", "auto"]);
    let (a1, a2) = (
        dir.path().join("auto1.parquet"),
        dir.path().join("auto2.parquet"),
    );
    ok(&score(&input, &a1, &args));
    ok(&score(&input, &a2, &args));
    let b1 = summary(&a1)["embedding"]["baseline"].clone();
    assert_eq!(
        b1,
        summary(&a2)["embedding"]["baseline"],
        "seeded: same input, same baseline"
    );
    let b: Vec<f32> = b1
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_f64().unwrap() as f32)
        .collect();
    assert_eq!(b.len(), 3);
    // Mismatched pairs score lower than the matched mean.
    let f1 = f32s(&raw, "bertscore_f1");
    let matched_mean = f1.iter().map(|v| v.unwrap()).sum::<f32>() / f1.len() as f32;
    assert!(
        b[2] < matched_mean,
        "baseline {b:?} vs matched mean {matched_mean}"
    );
    let auto = f32s(&read_parquet(&a1), "bertscore_f1");
    let want = (f1[0].unwrap() - b[2]) / (1.0 - b[2]);
    assert!((auto[0].unwrap() - want).abs() < 1e-5);

    let err = fails(
        &score(
            &input,
            &dir.path().join("bad.parquet"),
            &["--rescale-baseline", "1.2,0,0"],
        ),
        64,
    );
    assert!(err.contains("finite numbers below 1"), "{err}");
}

#[test]
fn each_distinct_text_is_embedded_once_per_run() {
    // 120 rows, one reference, 10 distinct outputs, read in batches of 7:
    // 11 distinct texts, however they are spread over batches.
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("rep.parquet");
    let outs: Vec<String> = (0..120)
        .map(|i| format!("answer number {}", i % 10))
        .collect();
    let refs = vec!["the reference answer"; 120];
    write_parquet(
        &input,
        vec![
            ("reference", s(&refs)),
            (
                "output",
                s(&outs.iter().map(String::as_str).collect::<Vec<_>>()),
            ),
        ],
    );
    let out = dir.path().join("o.parquet");
    let m = model();
    ok(&score(
        &input,
        &out,
        &[
            "--metrics",
            "embedding",
            "--model",
            m.to_str().unwrap(),
            "--batch-size",
            "7",
        ],
    ));
    let e = &summary(&out)["embedding"];
    assert_eq!(e["texts_embedded"], 11);
    assert_eq!(e["texts_reused"], 240 - 11);
    let cos = f32s(&read_parquet(&out), "cosine");
    assert_eq!(cos[3], cos[13], "same pair, same score");
}

/// The persistent cache (`--embed-cache`): a second night over the same
/// references and new outputs embeds only the outputs, with scores equal to
/// bit to those of a run without the cache; a damaged entry is re-embedded.
#[test]
fn the_embed_cache_makes_unchanged_references_free_the_next_run() {
    let dir = tempfile::tempdir().unwrap();
    let cache = dir.path().join("cache");
    let m = model();
    let night = |name: &str, outputs: &[&str]| {
        let input = dir.path().join(format!("{name}.parquet"));
        let refs = ["Paris", "one hundred", "Leonardo da Vinci", "Paris"];
        write_parquet(
            &input,
            vec![("reference", s(&refs)), ("output", s(outputs))],
        );
        input
    };
    let run = |input: &Path, out: &Path, cached: bool| {
        let mut args = vec!["--metrics", "embedding", "--model", m.to_str().unwrap()];
        if cached {
            args.extend(["--embed-cache", cache.to_str().unwrap()]);
        }
        ok(&score(input, out, &args));
        summary(out)["embedding"].clone()
    };
    let first = night("first", &["paris", "100", "da Vinci", "Lyon"]);
    let e1 = run(&first, &dir.path().join("1.parquet"), true);
    assert_eq!(e1["texts_embedded"], 7, "3 references + 4 outputs");
    assert_eq!(e1["embed_cache"]["hits"], 0);
    assert_eq!(e1["embed_cache"]["writes"], 3, "references only by default");

    let second = night(
        "second",
        &["Paris, France", "a hundred", "Raphael", "Paris"],
    );
    let out2 = dir.path().join("2.parquet");
    let e2 = run(&second, &out2, true);
    assert_eq!(
        e2["embed_cache"]["hits"], 3,
        "every reference came from disk"
    );
    assert_eq!(
        e2["texts_embedded"], 3,
        "only the new outputs (\"Paris\" is a reference)"
    );
    let plain = dir.path().join("plain.parquet");
    let e_plain = run(&second, &plain, false);
    assert!(e_plain["embed_cache"].is_null());
    for col in [
        "cosine",
        "bertscore_precision",
        "bertscore_recall",
        "bertscore_f1",
    ] {
        assert_eq!(
            f32s(&read_parquet(&out2), col),
            f32s(&read_parquet(&plain), col),
            "{col}: cached and uncached runs agree exactly"
        );
    }

    // Damage every entry: they read as missing and are written anew.
    let mut damaged = 0;
    for entry in walk(&cache) {
        std::fs::write(&entry, b"not an embedding").unwrap();
        damaged += 1;
    }
    assert_eq!(damaged, 3);
    let out3 = dir.path().join("3.parquet");
    let e3 = run(&second, &out3, true);
    assert_eq!(e3["embed_cache"]["hits"], 0);
    assert_eq!(e3["embed_cache"]["writes"], 3);
    assert_eq!(
        f32s(&read_parquet(&out3), "cosine"),
        f32s(&read_parquet(&plain), "cosine")
    );

    // A cache path that cannot be a folder is an I/O error naming it, and
    // nothing is written.
    let blocker = dir.path().join("a-file");
    std::fs::write(&blocker, b"").unwrap();
    let out4 = dir.path().join("4.parquet");
    let args = ["--metrics", "embedding", "--model", m.to_str().unwrap()];
    let cache_arg = ["--embed-cache", blocker.to_str().unwrap()];
    let err = fails(
        &score(&second, &out4, &[&args[..], &cache_arg[..]].concat()),
        74,
    );
    assert!(
        err.contains("--embed-cache") && err.contains("a-file"),
        "{err}"
    );
    assert!(!out4.exists());
}

/// docs/metrics.md#cosine: cosine lies in [0, 1] and raw BERTScore never above 1, even for
/// texts scored against themselves, where f32 rounding gave 1.0000001 on the
/// bundled example; rescaling applies to the clamped raw value.
#[test]
fn scores_never_exceed_one_on_the_bundled_example() {
    let dir = tempfile::tempdir().unwrap();
    let m = model();
    let base = ["--metrics", "embedding", "--model", m.to_str().unwrap()];
    let raw_out = dir.path().join("raw.parquet");
    ok(&score(&example(), &raw_out, &base));
    let raw = read_parquet(&raw_out);
    let metrics = [
        "cosine",
        "bertscore_precision",
        "bertscore_recall",
        "bertscore_f1",
    ];
    let mut ones = 0;
    for col in metrics {
        for (i, v) in f32s(&raw, col).iter().enumerate() {
            let Some(v) = *v else { continue };
            assert!(v <= 1.0, "row {i} {col} = {v} is above 1");
            if col == "cosine" {
                assert!(v >= 0.0, "row {i} cosine = {v} is below 0");
            }
            ones += usize::from(v > 1.0 - 1e-6);
        }
    }
    assert!(
        ones > 0,
        "the example has rows scoring 1: the check must see them"
    );

    let rescaled_out = dir.path().join("rescaled.parquet");
    let args = [&base[..], &["--rescale-baseline", "0.5,0.5,0.5"]].concat();
    ok(&score(&example(), &rescaled_out, &args));
    let rescaled = read_parquet(&rescaled_out);
    for col in &metrics[1..] {
        for (i, (x, y)) in f32s(&raw, col).iter().zip(f32s(&rescaled, col)).enumerate() {
            let (Some(x), Some(y)) = (*x, y) else {
                continue;
            };
            assert!(y <= 1.0, "row {i} rescaled {col} = {y} is above 1");
            assert!(
                (y - (x - 0.5) / 0.5).abs() < 1e-6,
                "row {i} {col}: {y} from raw {x}"
            );
        }
    }
}

/// Every `.emb` file under `dir`.
fn walk(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            found.extend(walk(&path));
        } else if path.extension().is_some_and(|e| e == "emb") {
            found.push(path);
        }
    }
    found
}
