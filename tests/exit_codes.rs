//! Every value-taking flag of `refscore score`, given a bad value, exits
//! with the code the rule says: a malformed or out-of-range value is 64; a
//! value the data, the settings or the environment cannot serve is 65, 74
//! or 78 (docs/usage.md, `--help`). The list of flags comes from `--help`, so a new
//! flag without an entry here fails the test.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::*;

const JUDGE: [&str; 2] = ["--judge-url", "http://127.0.0.1:9/v1"];

/// A tiny NLI cross-encoder (tests/fixtures/models).
const CROSS_NLI: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/tests/fixtures/models/tiny-cross-roberta-nli"
);

/// (flag, bad value, the other arguments it needs, expected code). Flags
/// whose every value is accepted until it is used (a model name, a variable
/// name, a cache folder) are listed with `None` and why.
fn cases(model: &str) -> Vec<(&'static str, Option<&'static str>, Vec<&str>, i32)> {
    let lexical = vec!["--metrics", "lexical"];
    let embedding = vec!["--metrics", "embedding", "--model", model];
    let judge = vec![JUDGE[0], JUDGE[1], "--metrics", "lexical"];
    vec![
        (
            "--output",
            Some("/nonexistent-folder/o.parquet"),
            lexical.clone(),
            74,
        ),
        ("--shard", Some("4/3"), lexical.clone(), 64),
        ("--max-judge-failures", Some("many"), lexical.clone(), 64),
        ("--id-col", Some("no_such_column"), lexical.clone(), 65),
        ("--input-col", Some("no_such_column"), lexical.clone(), 65),
        (
            "--reference-col",
            Some("no_such_column"),
            lexical.clone(),
            65,
        ),
        ("--output-col", Some("no_such_column"), lexical.clone(), 65),
        ("--keep", Some("no_such_column"), lexical.clone(), 65),
        ("--metrics", Some("no_such_metric"), vec![], 64),
        (
            "--model",
            Some("/nonexistent-model"),
            vec!["--metrics", "embedding"],
            78,
        ),
        (
            "--cross-model",
            Some("/nonexistent-model"),
            vec!["--metrics", "nli"],
            78,
        ),
        // An index past the tiny NLI model's three labels.
        (
            "--nli-labels",
            Some("entailment=3"),
            vec!["--metrics", "nli", "--cross-model", CROSS_NLI],
            64,
        ),
        // Neither a shipped recipe's name nor a file.
        (
            "--cross-recipe",
            Some("no-such-recipe"),
            vec!["--metrics", "nli", "--cross-model", CROSS_NLI],
            64,
        ),
        ("--device", Some("tpu"), embedding.clone(), 64),
        ("--precision", Some("fp64"), embedding.clone(), 64),
        ("--rescale-baseline", Some("1,2"), embedding.clone(), 64),
        ("--max-seq-length", Some("100000"), embedding.clone(), 64),
        // all-MiniLM-L6-v2 has 6 layers.
        ("--layer", Some("7"), embedding.clone(), 64),
        // Wider than MiniLM's 384-value sentence embedding.
        ("--truncate-dim", Some("385"), embedding.clone(), 64),
        // A name the folder's config_sentence_transformers.json lacks.
        ("--prompt-name", Some("nosuch"), embedding.clone(), 78),
        // Any text is a prompt.
        ("--prompt", None, vec![], 0),
        ("--embed-cache-mb", Some("-1"), embedding.clone(), 64),
        (
            "--embed-cache",
            Some("/proc/no-such/cache"),
            embedding.clone(),
            74,
        ),
        (
            "--judge-url",
            Some("not a url"),
            vec!["--metrics", "lexical"],
            64,
        ),
        // Accepted as given; the judge refuses an unknown model (78, with a
        // real server: tests/judge.rs).
        ("--judge-model", None, vec![], 0),
        // A variable name; an unset one means no key.
        ("--judge-api-key-env", None, vec![], 0),
        ("--judge-api", Some("gemini"), judge.clone(), 64),
        ("--judge-timeout", Some("soon"), judge.clone(), 64),
        ("--judge-retries", Some("-1"), judge.clone(), 64),
        ("--judge-concurrency", Some("0"), judge.clone(), 64),
        ("--judge-rpm", Some("0"), judge.clone(), 64),
        ("--judge-tpm", Some("0"), judge.clone(), 64),
        ("--judge-where", Some("no_such_column"), judge.clone(), 65),
        ("--judge-band", Some("cosine:0.9..0.1"), judge.clone(), 64),
        // The fact ratio's local parts (their own checks: tests/judge_local_facts.rs).
        ("--facts", Some("paragraphs"), judge.clone(), 64),
        ("--fact-check", Some("oracle"), judge.clone(), 64),
        (
            "--fact-check-threshold",
            Some("1.5"),
            [judge.as_slice(), &["--fact-check", "nli"]].concat(),
            64,
        ),
        // A panel's flags (a panel's own checks: tests/judge_panel.rs).
        ("--judge-panel", Some("council"), judge.clone(), 64),
        ("--judge-escalate-band", Some("0.9..0.1"), judge.clone(), 64),
        // A folder, created when the judge first answers.
        ("--judge-cache", None, vec![], 0),
        ("--judge-reasons", Some("sometimes"), judge.clone(), 64),
        ("--judge-batch", Some("cloud"), judge.clone(), 64),
        (
            "--judge-batch-wait",
            Some("soon"),
            [judge.as_slice(), &["--judge-batch", "api"]].concat(),
            64,
        ),
        // A file that cannot be read (bad definitions: tests/judge_defined.rs).
        (
            "--judge-metrics",
            Some("/nonexistent-rubrics.toml"),
            judge.clone(),
            74,
        ),
        ("--judge-threshold", Some("2"), judge.clone(), 64),
        // OpenAI's flex processing (its own checks: tests/judge_flex.rs).
        ("--judge-service-tier", Some("priority"), judge.clone(), 64),
        (
            "--judge-flex-fallback",
            Some("0"),
            [judge.as_slice(), &["--judge-service-tier", "flex"]].concat(),
            64,
        ),
        ("--threshold", Some("no_such_metric=1"), lexical.clone(), 64),
        // Not METRIC=COLUMN (bad labels: tests/gold.rs).
        ("--gold", Some("token_f1"), lexical.clone(), 64),
        // A confidence outside (0, 1) (without --gold it is refused too).
        (
            "--gold-confidence",
            Some("1"),
            vec!["--metrics", "lexical", "--gold", "token_f1=label"],
            64,
        ),
        ("--batch-size", Some("0"), lexical.clone(), 64),
        // A version on plain files (versions of a Delta table:
        // tests/python/test_delta_tables.py).
        ("--table-version", Some("1"), lexical.clone(), 78),
        ("--table-version", Some("-1"), lexical.clone(), 64),
        ("--table-timestamp", Some("yesterday"), lexical.clone(), 64),
        ("--store-retries", Some("many"), lexical.clone(), 64),
        // Only for an object-store output (one: tests/python/test_object_store.py).
        ("--run-dir", Some("/tmp"), lexical.clone(), 78),
        ("--output-format", Some("iceberg"), lexical.clone(), 64),
        ("--threads", Some("0"), lexical.clone(), 64),
        (
            "--config",
            Some("/nonexistent-config.toml"),
            lexical.clone(),
            74,
        ),
    ]
}

/// The value-taking flags `refscore score --help` lists.
fn value_flags() -> BTreeSet<String> {
    let help = ok(&refscore(&["score", "--help"]));
    help.lines()
        .filter_map(|line| {
            let line = line.trim_start();
            let line = line.split_once(", ").map_or(line, |(short, long)| {
                if short.len() == 2 && short.starts_with('-') {
                    long
                } else {
                    line
                }
            });
            let (flag, rest) = line.split_once(' ')?;
            (flag.starts_with("--") && rest.starts_with('<')).then(|| flag.to_string())
        })
        .collect()
}

#[test]
fn every_flag_with_a_bad_value_exits_with_its_code() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let model = model.to_str().unwrap();
    let cases = cases(model);
    let listed: BTreeSet<String> = cases.iter().map(|c| c.0.to_string()).collect();
    assert_eq!(
        listed,
        value_flags(),
        "every value-taking flag needs a case here"
    );
    let dir = tempfile::tempdir().unwrap();
    let input = example();
    for (flag, value, context, code) in &cases {
        let Some(value) = value else { continue };
        let out = dir.path().join("o.parquet");
        let mut args = vec!["score", input.to_str().unwrap(), "--quiet", flag, value];
        if *flag != "--output" {
            args.extend(["-o", out.to_str().unwrap()]);
        }
        args.extend(context.iter().copied());
        let err = fails(&refscore(&args), *code);
        // One line naming the problem; clap's own parse errors add a hint
        // to try --help.
        let first = err.lines().next().unwrap_or("");
        assert!(first.contains("error"), "{flag} {value}: {err}");
        if first.starts_with("refscore: error:") {
            assert_eq!(err.trim().lines().count(), 1, "{flag} {value}: {err}");
        }
        assert!(!out.exists(), "{flag} {value}: wrote an output");
    }
}

/// The config file is read as more arguments by the same parser: each
/// flag's bad value, given as the file's key, fails as the flag does, except
/// that a malformed value is the file's configuration error (78, naming the
/// file or "config file") instead of a usage error (64).
#[test]
fn every_flag_in_the_config_file_gets_the_same_checks() {
    let model = Path::new(env!("CARGO_MANIFEST_DIR")).join("models/all-MiniLM-L6-v2");
    let model = model.to_str().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let input = example();
    let config = dir.path().join("refscore.toml");
    for (flag, value, context, code) in cases(model) {
        let Some(value) = value else { continue };
        if flag == "--config" {
            continue; // a config file names no other config file
        }
        let key = flag.trim_start_matches("--").replace('-', "_");
        std::fs::write(&config, format!("{key} = {value:?}\n")).unwrap();
        let out = dir.path().join("o.parquet");
        let mut args = vec!["score", input.to_str().unwrap(), "--quiet"];
        args.extend(["--config", config.to_str().unwrap()]);
        if flag != "--output" {
            args.extend(["-o", out.to_str().unwrap()]);
        }
        args.extend(context.iter().copied());
        let want = if code == 64 { 78 } else { code };
        let err = fails(&refscore(&args), want);
        if code == 64 {
            assert!(
                err.contains("config file") || err.contains("refscore.toml"),
                "{key} = {value:?}: {err}"
            );
            // The file and the key's line, whichever check found it.
            assert!(
                err.contains(&format!("{}:1:", config.display())),
                "{key} = {value:?}: {err}"
            );
        }
        assert_eq!(err.trim().lines().count(), 1, "{key} = {value:?}: {err}");
        assert!(!out.exists(), "{key} = {value:?}: wrote an output");
    }
    // Keys are the flags' names; anything else is refused with its line.
    std::fs::write(&config, "quiet = true\nthreshholds = 1\n").unwrap();
    let err = fails(
        &refscore(&[
            "score",
            input.to_str().unwrap(),
            "--config",
            config.to_str().unwrap(),
        ]),
        78,
    );
    assert!(
        err.contains("refscore.toml:2") && err.contains("threshholds"),
        "{err}"
    );
}

/// Values of the wrong type or form in the config file name the file and
/// the line of the key (or of the `[thresholds]` entry); a file that is
/// not UTF-8 text is a configuration error (78), not an I/O error.
#[test]
fn config_file_errors_name_the_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = example();
    let config = dir.path().join("refscore.toml");
    let run = |text: &[u8]| {
        std::fs::write(&config, text).unwrap();
        let out = dir.path().join("o.parquet");
        refscore(&[
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--quiet",
            "--metrics",
            "lexical",
            "--config",
            config.to_str().unwrap(),
        ])
    };
    let shown = config.display().to_string();
    for (text, line, what) in [
        ("quiet = true\n[thresholds]\nexact_match = 1\ntoken_f1 = \"high\"\n", 4, "token_f1"),
        ("quiet = true\njudge_url = \"http://127.0.0.1:9/v1\"\njudge_batch = \"api\"\njudge_batch_wait = 90\n", 4, "judge_batch_wait"),
        ("quiet = true\nshard = \"0/3\"\n", 2, "0/3"),
        ("quiet = true\n\nthreads = \"two\"\n", 3, "threads"),
        ("judge_metrics = 5\n", 1, "judge_metrics"),
    ] {
        let err = fails(&run(text.as_bytes()), 78);
        assert!(
            err.contains(&format!("{shown}:{line}:")) && err.contains(what),
            "{text:?}: {err}"
        );
        assert_eq!(err.trim().lines().count(), 1, "{err}");
    }
    let err = fails(&run(b"quiet = true\nmetrics = [\"lexical\xff\"]\n"), 78);
    assert!(err.contains("not UTF-8"), "{err}");
    // A judge metrics file likewise.
    let rubrics = dir.path().join("rubrics.toml");
    std::fs::write(&rubrics, b"[judge.metric.x]\nanswer = \"verdict\xff\"\n").unwrap();
    let out = dir.path().join("o.parquet");
    let err = fails(
        &refscore(&[
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--judge-metrics",
            rubrics.to_str().unwrap(),
        ]),
        78,
    );
    assert!(
        err.contains("rubrics.toml") && err.contains("not UTF-8"),
        "{err}"
    );
}
