//! The judge's cascade as a chain of tiers (`--judge-band` repeated, or
//! `[[judge.tier]]` in a config file): the first tier sure of a row decides
//! it and names itself in `<metric>_source`; the order of tiers changes who
//! decides; the judge (a scripted server that logs what it is asked) sees
//! only the rows no tier decided; the fingerprint covers the chain and its
//! order; a tier over a score the run lacks is refused before any work.

mod common;

use std::path::{Path, PathBuf};

use common::judge_server::{chat, start, Server};
use common::*;

/// The tiny NLI cross-encoder of the cross tests (its scores are whatever
/// they are: the bands below are chosen so that they decide every row).
fn cross_model() -> String {
    tiny_model("tiny-cross-roberta-nli")
}

/// Rows against the reference "alpha beta gamma delta": token F1 0 (the
/// first four), 8/9 (the next four) and 0.5 (the last four).
fn input(dir: &Path) -> PathBuf {
    let outputs: Vec<String> = (0..12)
        .map(|i| match i / 4 {
            0 => format!("zeta eta theta iota{i}"),
            1 => format!("alpha beta gamma delta kappa{i}"),
            _ => format!("alpha beta theta iota{i}"),
        })
        .collect();
    let outs: Vec<&str> = outputs.iter().map(String::as_str).collect();
    let path = dir.join("in.parquet");
    write_parquet(
        &path,
        vec![
            ("reference", s(&["alpha beta gamma delta"; 12])),
            ("output", s(&outs)),
        ],
    );
    path
}

fn yes_judge() -> Server {
    start(|_, _| chat(r#"{"meaning_match": true}"#))
}

/// The flags of a run with token F1, the NLI tier's score and Meaning
/// Match asked of `server`, plus `extra`.
fn flags(server: &Server, extra: &[&str]) -> Vec<String> {
    let mut args: Vec<String> = [
        "--metrics",
        "token_f1,nli_equivalence,meaning_match",
        "--cross-model",
        &cross_model(),
        "--judge-url",
        &server.url,
        "--judge-model",
        "scripted",
        "--judge-reasons",
        "never",
        "--overwrite",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    args.extend(extra.iter().map(|a| a.to_string()));
    args
}

fn run(server: &Server, input: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let args = flags(server, extra);
    score(
        input,
        out,
        &args.iter().map(String::as_str).collect::<Vec<_>>(),
    )
}

/// Writes `text` to the config file `config`, runs with it and returns the
/// error of its refusal (exit 78: a config file's mistake).
fn config_refused(server: &Server, input: &Path, out: &Path, config: &Path, text: &str) -> String {
    std::fs::write(config, text).unwrap();
    fails(
        &run(server, input, out, &["--config", config.to_str().unwrap()]),
        78,
    )
}

/// [`run`] without --quiet: the printed summary table comes back.
fn run_loud(server: &Server, input: &Path, out: &Path, extra: &[&str]) -> std::process::Output {
    let mut args = vec![
        "score".to_string(),
        input.to_str().unwrap().to_string(),
        "-o".into(),
        out.to_str().unwrap().to_string(),
    ];
    args.extend(flags(server, extra));
    refscore(&args.iter().map(String::as_str).collect::<Vec<_>>())
}

/// A chain in which token F1 decides its sure rows and the NLI tier all the
/// rest (every equivalence is above -0.5), and the same tiers swapped.
const TOKEN_THEN_NLI: [&str; 4] = [
    "--judge-band",
    "token_f1:0.3..0.8",
    "--judge-band",
    "nli_equivalence:-1..-0.5",
];
const NLI_THEN_TOKEN: [&str; 4] = [
    "--judge-band",
    "nli_equivalence:-1..-0.5",
    "--judge-band",
    "token_f1:0.3..0.8",
];

/// Token F1 decides its sure rows; the NLI tier decides what it passed on
/// (every equivalence is above -0.5); swapped, the NLI tier decides all.
#[test]
fn the_first_sure_tier_decides_and_the_order_matters() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    ok(&run(&server, &input, &out, &TOKEN_THEN_NLI));
    assert!(server.requests().is_empty(), "the chain decided every row");
    let b = read_parquet(&out);
    let source = texts(&b, "meaning_match_source");
    let verdict = bools(&b, "meaning_match");
    for i in 0..12 {
        let (want_source, want) = match i / 4 {
            0 => ("band:token_f1", false),
            1 => ("band:token_f1", true),
            _ => ("band:nli_equivalence", true),
        };
        assert_eq!(source[i].as_deref(), Some(want_source), "row {i}");
        assert_eq!(verdict[i], Some(want), "row {i}");
    }
    let summary = summary(&out);
    let tiers = summary["judge"]["tiers"].as_array().unwrap();
    let counts: Vec<(&str, u64, u64)> = tiers
        .iter()
        .map(|t| {
            (
                t["source"].as_str().unwrap(),
                t["decided"].as_u64().unwrap(),
                t["decided_true"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        counts,
        [("band:token_f1", 8, 4), ("band:nli_equivalence", 4, 4)]
    );
    assert_eq!(summary["judge"]["decided_by_band"], 12);
    let first_id = summary["run_id"].clone();

    // Swapped: the NLI tier is sure of every row first.
    ok(&run(&server, &input, &out, &NLI_THEN_TOKEN));
    let b = read_parquet(&out);
    assert!(texts(&b, "meaning_match_source")
        .iter()
        .all(|s| s.as_deref() == Some("band:nli_equivalence")));
    // The fingerprint (the run id) covers the chain and its order.
    let swapped_id = summary_of(&out);
    assert_ne!(first_id, swapped_id);
    ok(&run(&server, &input, &out, &NLI_THEN_TOKEN));
    assert_eq!(summary_of(&out), swapped_id);
}

fn summary_of(out: &Path) -> serde_json::Value {
    summary(out)["run_id"].clone()
}

/// A tier that decides nothing passes every row it sees on: the judge is
/// asked exactly about the rows the first tier left, and those say `judge`.
#[test]
fn the_judge_sees_only_what_the_chain_left() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    ok(&run(
        &server,
        &input,
        &out,
        &[
            "--judge-band",
            "token_f1:0.3..0.8",
            "--judge-band",
            "nli_equivalence:-inf..inf",
        ],
    ));
    let mut asked: Vec<String> = server
        .requests()
        .iter()
        .map(|r| r.candidate().to_string())
        .collect();
    asked.sort();
    let mut left: Vec<String> = (8..12)
        .map(|i| format!("alpha beta theta iota{i}"))
        .collect();
    left.sort();
    assert_eq!(asked, left);
    let source = texts(&read_parquet(&out), "meaning_match_source");
    assert!(source[8..].iter().all(|s| s.as_deref() == Some("judge")));
    let text = ok(&run_loud(
        &server,
        &input,
        &out,
        &[
            "--judge-band",
            "token_f1:0.3..0.8",
            "--judge-band",
            "nli_equivalence:-inf..inf",
        ],
    ));
    assert!(
        text.contains("tiers: 1. token_f1:0.3..0.8 decided 8 (66.7% of 12 rows asked; 4 true, 4 false), 2. nli_equivalence:-inf..inf decided 0"),
        "{text}"
    );
}

/// `[[judge.tier]]` tables are the same chain as the flags, in the file's
/// order; the command line's --judge-band replaces them.
#[test]
fn config_file_tiers_are_the_same_chain() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let config = dir.path().join("refscore.toml");
    std::fs::write(
        &config,
        "[[judge.tier]]\nband = \"token_f1:0.3..0.8\"\n\n[[judge.tier]]\nband = \"nli_equivalence:-1..-0.5\"\n",
    )
    .unwrap();
    let config = config.to_str().unwrap();
    let server = yes_judge();
    ok(&run(&server, &input, &out, &["--config", config]));
    let from_file = texts(&read_parquet(&out), "meaning_match_source");
    assert_eq!(from_file[0].as_deref(), Some("band:token_f1"));
    assert_eq!(from_file[8].as_deref(), Some("band:nli_equivalence"));
    ok(&run(
        &server,
        &input,
        &out,
        &[
            "--config",
            config,
            "--judge-band",
            "nli_equivalence:-1..-0.5",
        ],
    ));
    assert!(texts(&read_parquet(&out), "meaning_match_source")
        .iter()
        .all(|s| s.as_deref() == Some("band:nli_equivalence")));
    // A bad tier in the file names its line (exit 78).
    let err = config_refused(
        &server,
        &input,
        &out,
        &dir.path().join("bad.toml"),
        "[[judge.tier]]\nband = \"token_f1:0.8..0.3\"\n",
    );
    assert!(
        err.contains("bad.toml") && err.contains("token_f1:0.8..0.3"),
        "{err}"
    );
}

/// A tier over a score the run does not compute is refused before any
/// work: no output, no judge call.
#[test]
fn a_tier_over_a_missing_score_is_refused_first() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    let err = fails(
        &score(
            &input,
            &out,
            &[
                "--metrics",
                "token_f1,meaning_match",
                "--judge-url",
                &server.url,
                "--judge-band",
                "token_f1:0.3..0.8",
                "--judge-band",
                "nli_equivalence:0.2..0.8",
            ],
        ),
        78,
    );
    assert!(
        err.contains("--judge-band nli_equivalence:0.2..0.8 needs the nli_equivalence metric"),
        "{err}"
    );
    assert!(!out.exists());
    assert!(server.requests().is_empty());
}

/// The project's labelled Meaning Match set (191 rows): id, reference,
/// output, label.
fn labelled_set() -> Vec<(String, String, String, bool)> {
    let path = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/meaning_match_labelled.jsonl");
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(|l| {
            let r: serde_json::Value = serde_json::from_str(l).unwrap();
            let t = |k: &str| r[k].as_str().unwrap().to_string();
            (
                t("id"),
                t("reference"),
                t("output"),
                r["label"].as_bool().unwrap(),
            )
        })
        .collect()
}

/// Writes `rows` as an input with the labels in column `human`.
fn labelled_input(path: &Path, rows: &[&(String, String, String, bool)]) {
    let col = |k: usize| -> arrow::array::ArrayRef {
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
    let labels: arrow::array::ArrayRef = std::sync::Arc::new(arrow::array::BooleanArray::from(
        rows.iter().map(|r| r.3).collect::<Vec<_>>(),
    ));
    write_parquet(
        path,
        vec![
            ("id", col(0)),
            ("reference", col(1)),
            ("output", col(2)),
            ("human", labels),
        ],
    );
}

/// A cut-off as calibrate-band's JSON writes it.
fn cut_off(v: &serde_json::Value) -> f64 {
    match v.as_str() {
        Some("inf") => f64::INFINITY,
        Some("-inf") => f64::NEG_INFINITY,
        _ => v.as_f64().unwrap(),
    }
}

/// `calibrate-band --by A,B,C` on half the labelled set: tier 1 is A's
/// single band; each later tier is the band fitted (by `fit_band`) on the
/// labelled rows the tiers before leave, within --max-error on each side;
/// the printed flags run on the other half, where the judge is asked only
/// about the rows the chain leaves.
#[test]
fn a_chain_fitted_on_half_the_labelled_set_runs_on_the_other_half() {
    const MAX_ERROR: f64 = 0.1;
    let set = labelled_set();
    let fit_rows: Vec<_> = set.iter().step_by(2).collect();
    let test_rows: Vec<_> = set.iter().skip(1).step_by(2).collect();
    let dir = tempfile::tempdir().unwrap();
    let (fit_in, test_in) = (
        dir.path().join("fit.parquet"),
        dir.path().join("test.parquet"),
    );
    labelled_input(&fit_in, &fit_rows);
    labelled_input(&test_in, &test_rows);
    let server = yes_judge();
    let scored = |input: &Path, out: &Path, extra: &[&str]| {
        let mut args = vec![
            "--metrics",
            "token_f1,cosine,bertscore_f1,meaning_match",
            "--judge-url",
            &server.url,
            "--judge-model",
            "scripted",
            "--judge-reasons",
            "never",
            "--gold",
            "meaning_match=human",
        ];
        args.extend_from_slice(extra);
        ok(&score(input, out, &args));
    };
    let fit_out = dir.path().join("fit.result.parquet");
    scored(&fit_in, &fit_out, &[]);
    let json = dir.path().join("chain.json");
    let result = fit_out.to_str().unwrap();
    let max_error = MAX_ERROR.to_string();
    let flags = ok(&refscore(&[
        "calibrate-band",
        result,
        "--by",
        "token_f1,cosine,bertscore_f1",
        "--max-error",
        &max_error,
        "--json",
        json.to_str().unwrap(),
        "--quiet",
    ]));
    let chain: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let tiers = chain["tiers"].as_array().unwrap();
    assert_eq!(tiers.len(), 3);
    let bands: Vec<&str> = tiers
        .iter()
        .map(|t| t["judge_band"].as_str().unwrap())
        .collect();
    assert_eq!(
        flags.trim(),
        bands
            .iter()
            .map(|b| format!("--judge-band {b}"))
            .collect::<Vec<_>>()
            .join(" ")
    );
    let single = ok(&refscore(&[
        "calibrate-band",
        result,
        "--by",
        "token_f1",
        "--max-error",
        &max_error,
        "--quiet",
    ]));
    assert_eq!(single.trim(), format!("--judge-band {}", bands[0]));

    // Each tier against fit_band on the labelled rows the earlier ones left.
    let b = read_parquet(&fit_out);
    let labels = bools(&b, "human");
    let scores: Vec<Vec<Option<f32>>> = ["token_f1", "cosine", "bertscore_f1"]
        .iter()
        .map(|c| f32s(&b, c))
        .collect();
    // The rows the rules decide never reach a tier.
    let rule: Vec<bool> = texts(&b, "meaning_match_source")
        .iter()
        .map(|s| s.as_deref() == Some("rule"))
        .collect();
    let mut open: Vec<bool> = labels
        .iter()
        .zip(&rule)
        .map(|(l, rule)| l.is_some() && !rule)
        .collect();
    for (t, tier) in tiers.iter().enumerate() {
        let pairs: Vec<(f64, bool)> = (0..b.num_rows())
            .filter(|&i| open[i])
            .filter_map(|i| Some((f64::from(scores[t][i]?), labels[i]?)))
            .collect();
        assert_eq!(tier["labels_reaching"], pairs.len() as u64, "tier {t}");
        let want = refscore_stats::band::fit_band(&pairs, MAX_ERROR).unwrap();
        let (lo, hi) = (cut_off(&tier["lo"]), cut_off(&tier["hi"]));
        // As f32, as the run compares (JSON's digits may miss the f64 by an ulp).
        assert_eq!(
            (lo as f32, hi as f32),
            (want.lo as f32, want.hi as f32),
            "tier {t}"
        );
        for side in ["below", "above"] {
            if let Some(e) = tier[side]["error"].as_f64() {
                assert!(e <= MAX_ERROR, "tier {t} {side}: {e}");
            }
        }
        for i in 0..b.num_rows() {
            if let Some(s) = scores[t][i] {
                let s = f64::from(s);
                open[i] &= !(s < lo || s > hi);
            }
        }
    }

    // The chain on the other half: the judge sees only what it leaves.
    let test_out = dir.path().join("test.result.parquet");
    let before = server.requests().len();
    let chain_flags: Vec<&str> = flags.split_whitespace().collect();
    scored(&test_in, &test_out, &chain_flags);
    let asked = server.requests().len() - before;
    let source = texts(&read_parquet(&test_out), "meaning_match_source");
    let by_tier = source
        .iter()
        .filter(|s| s.as_deref().is_some_and(|s| s.starts_with("band:")))
        .count();
    let by_judge = source
        .iter()
        .filter(|s| s.as_deref() == Some("judge"))
        .count();
    assert_eq!(asked, by_judge);
    assert_eq!(
        by_tier
            + by_judge
            + source
                .iter()
                .filter(|s| s.as_deref() == Some("rule"))
                .count(),
        test_rows.len()
    );
    let summary = summary(&test_out);
    let decided: u64 = summary["judge"]["tiers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["decided"].as_u64().unwrap())
        .sum();
    assert_eq!(decided, by_tier as u64);
    // With --gold, each tier's labelled rows against their labels.
    let calibration = summary["calibration"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "meaning_match")
        .unwrap();
    let per_tier: u64 = calibration["tiers"].as_array().map_or(0, |t| {
        t.iter()
            .map(|t| {
                assert!(t["source"].as_str().unwrap().starts_with("band:"));
                let sides = t["decided_false"]["labels"].as_u64().unwrap()
                    + t["decided_true"]["labels"].as_u64().unwrap();
                assert_eq!(t["agreement"]["n"].as_u64().unwrap(), sides);
                sides
            })
            .sum()
    });
    assert_eq!(
        per_tier, by_tier as u64,
        "every row of the half is labelled"
    );
}

/// The chain's flags that decide rows 0..8 (token F1) and pass 8..12 on.
const LEAVES_FOUR: [&str; 4] = [
    "--judge-band",
    "token_f1:0.3..0.8",
    "--judge-band",
    "nli_equivalence:-inf..inf",
];

/// Whether a request's text is about one of the four rows the chain leaves
/// (and about no row it decided).
fn about_a_left_row(text: &str) -> bool {
    (8..12).any(|i| text.contains(&format!("alpha beta theta iota{i}")))
        && !text.contains("zeta eta")
        && !text.contains("kappa")
}

/// Through batches (`--judge-batch dir:`) the request files hold only what
/// the chain left; a resumed run with the chain in another order is refused
/// (the fingerprint covers it), the same chain resumes.
#[test]
fn batches_hold_only_what_the_chain_left_and_resume_keeps_the_chain() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let folder = dir.path().join("box");
    let mode = format!("dir:{}", folder.display());
    let cross = cross_model();
    let args = |chain: &[&str], resume: bool| -> std::process::Output {
        let mut a = vec![
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--quiet",
            "--metrics",
            "token_f1,nli_equivalence,meaning_match",
            "--cross-model",
            &cross,
            "--judge-model",
            "scripted",
            "--judge-reasons",
            "never",
            "--judge-batch",
            &mode,
        ];
        a.extend_from_slice(chain);
        if resume {
            a.push("--resume");
        }
        refscore(&a)
    };
    fails(&args(&LEAVES_FOUR, false), 75);
    let mut lines = Vec::new();
    for entry in std::fs::read_dir(&folder).unwrap().flatten() {
        if entry.file_name().to_string_lossy().starts_with("requests-") {
            lines.extend(
                std::fs::read_to_string(entry.path())
                    .unwrap()
                    .lines()
                    .map(String::from),
            );
        }
    }
    assert_eq!(lines.len(), 4, "one request per row the chain left");
    assert!(lines.iter().all(|l| about_a_left_row(l)), "{lines:?}");
    let swapped = [
        LEAVES_FOUR[2],
        LEAVES_FOUR[3],
        LEAVES_FOUR[0],
        LEAVES_FOUR[1],
    ];
    let err = fails(&args(&swapped, true), 78);
    assert!(err.contains("--resume refused"), "{err}");
    let err = fails(&args(&LEAVES_FOUR, true), 75);
    assert!(err.contains("waiting for"), "{err}");
}

/// A jury sees only what the chain left: neither juror is asked about a
/// row a tier decided.
#[test]
fn a_panel_sees_only_what_the_chain_left() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let (a, b) = (yes_judge(), yes_judge());
    let cross = cross_model();
    let mut args = vec![
        "--metrics",
        "token_f1,nli_equivalence,meaning_match",
        "--cross-model",
        &cross,
        "--judge-url",
        &a.url,
        "--judge-model",
        "first",
        "--judge-url",
        &b.url,
        "--judge-model",
        "second",
        "--judge-panel",
        "jury",
        "--judge-reasons",
        "never",
    ];
    args.extend_from_slice(&LEAVES_FOUR);
    ok(&score(&input, &out, &args));
    for server in [&a, &b] {
        let asked = server.requests();
        assert_eq!(asked.len(), 4);
        assert!(asked.iter().all(|r| about_a_left_row(r.user())));
    }
    let source = texts(&read_parquet(&out), "meaning_match_source");
    assert!(source[..8]
        .iter()
        .all(|s| s.as_deref() == Some("band:token_f1")));
    assert!(source[8..].iter().all(|s| s.as_deref() == Some("jury")));
}

/// A band with no inside (`inf..inf`, `-inf..-inf`) would decide every row
/// without the judge: refused with one line and the usage exit code (64),
/// before any work.
#[test]
fn an_empty_band_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    for band in ["token_f1:inf..inf", "token_f1:-inf..-inf"] {
        let err = fails(&run(&server, &input, &out, &["--judge-band", band]), 64);
        assert!(err.contains(band) && err.contains("empty"), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
        assert!(!out.exists());
    }
    assert!(server.requests().is_empty());
}

/// The tier tables the config file refuses, each with the message the
/// reader gave before tier kinds were a registry (exit 78): a table of no
/// known kind, a non-table, and tiers named both ways.
#[test]
fn a_tier_table_of_no_known_kind_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    for (text, says) in [
        (
            "[[judge.tier]]\ncosine = \"0.3..0.9\"\n",
            "[[judge.tier]]: each tier is a table with one key, band = \"METRIC:LO..HI\" (e.g. band = \"cosine:0.3..0.9\")",
        ),
        (
            "[[judge.tier]]\nband = \"token_f1:0.3..0.8\"\nnote = \"x\"\n",
            "[[judge.tier]]: each tier is a table with one key, band = \"METRIC:LO..HI\"",
        ),
        (
            "[judge]\ntier = \"token_f1:0.3..0.8\"\n",
            "[[judge.tier]]: expected tables, each with band = \"METRIC:LO..HI\"",
        ),
        (
            "judge_band = [\"token_f1:0.3..0.8\"]\n\n[[judge.tier]]\nband = \"token_f1:0.3..0.8\"\n",
            "[[judge.tier]] and judge_band: name the tiers one way",
        ),
    ] {
        let err = config_refused(&server, &input, &out, &dir.path().join("t.toml"), text);
        assert!(err.contains("t.toml") && err.contains(says), "{text}: {err}");
        assert!(!out.exists());
    }
    assert!(server.requests().is_empty());
}

/// A bad band in the second `[[judge.tier]]` is reported at its own line,
/// not the first tier's.
#[test]
fn a_bad_second_tier_names_its_own_line() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    let err = config_refused(
        &server,
        &input,
        &out,
        &dir.path().join("refscore.toml"),
        "[[judge.tier]]\nband = \"token_f1:0.3..0.8\"\n\n[[judge.tier]]\nband = \"nli_equivalence:0.8..0.1\"\n",
    );
    assert!(
        err.contains("refscore.toml:5:") && err.contains("nli_equivalence:0.8..0.1"),
        "{err}"
    );
}

/// `nli_contradiction` is lower-is-better: a band over it decides a row
/// above HI false (a contradiction) and below LO true, and says so.
#[test]
fn a_band_over_contradiction_decides_high_contradiction_false() {
    let dir = tempfile::tempdir().unwrap();
    let input = input(dir.path());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    let model = cross_model();
    let run_with = |band: &str| {
        ok(&score(
            &input,
            &out,
            &[
                "--metrics",
                "nli_contradiction,meaning_match",
                "--cross-model",
                &model,
                "--judge-url",
                &server.url,
                "--judge-model",
                "scripted",
                "--judge-reasons",
                "never",
                "--overwrite",
                "--judge-band",
                band,
            ],
        ));
        let b = read_parquet(&out);
        (
            bools(&b, "meaning_match"),
            texts(&b, "meaning_match_source"),
        )
    };
    // Every probability is above -0.5: all decided, as contradictions.
    let (verdicts, sources) = run_with("nli_contradiction:-1..-0.5");
    assert!(
        sources
            .iter()
            .all(|s| s.as_deref() == Some("band:nli_contradiction")),
        "{sources:?}"
    );
    assert!(verdicts.iter().all(|v| *v == Some(false)), "{verdicts:?}");
    // Every probability is below 2: all decided, as no contradiction.
    let (verdicts, _) = run_with("nli_contradiction:2..3");
    assert!(verdicts.iter().all(|v| *v == Some(true)), "{verdicts:?}");
    assert!(server.requests().is_empty());
}

/// Reference "alpha beta gamma delta" and: 20 outputs that are the same
/// answer (the exact-match rule decides them, token F1 1, labelled true), 8
/// near misses (token F1 8/9, half labelled true) and 8 unrelated outputs
/// (token F1 0, labelled false).
fn rule_heavy_input(path: &Path) {
    let mut rows: Vec<(String, String, String, bool)> = Vec::new();
    let reference = "alpha beta gamma delta".to_string();
    for i in 0..20 {
        rows.push((
            format!("same{i}"),
            reference.clone(),
            "Alpha beta gamma delta.".into(),
            true,
        ));
    }
    for i in 0..8 {
        rows.push((
            format!("near{i}"),
            reference.clone(),
            format!("alpha beta gamma delta kappa{i}"),
            i % 2 == 0,
        ));
    }
    for i in 0..8 {
        rows.push((
            format!("far{i}"),
            reference.clone(),
            format!("zeta eta theta iota{i}"),
            false,
        ));
    }
    labelled_input(path, &rows.iter().collect::<Vec<_>>());
}

/// Scores token F1 and Meaning Match (asked of `server`) with the labels
/// of column `human` as `--gold`: the labelled result `calibrate-band`
/// reads.
fn score_labelled(server: &Server, input: &Path, out: &Path) {
    ok(&score(
        input,
        out,
        &[
            "--metrics",
            "token_f1,meaning_match",
            "--judge-url",
            &server.url,
            "--judge-model",
            "scripted",
            "--judge-reasons",
            "never",
            "--gold",
            "meaning_match=human",
        ],
    ));
}

/// The rows the exact-match and empty-output rules decide never reach a
/// tier in a run, so `calibrate-band` fits and measures the band on the
/// other labelled rows only: each side's labelled rows and errors are
/// exactly those of the rows the run would hand the band, and within
/// --max-error; the volume counts only those rows too.
#[test]
fn calibrate_band_leaves_out_the_rows_the_rules_decide() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    rule_heavy_input(&input);
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    score_labelled(&server, &input, &out);
    let b = read_parquet(&out);
    let source = texts(&b, "meaning_match_source");
    assert_eq!(
        source
            .iter()
            .filter(|s| s.as_deref() == Some("rule"))
            .count(),
        20
    );
    let json = dir.path().join("band.json");
    ok(&refscore(&[
        "calibrate-band",
        out.to_str().unwrap(),
        "--by",
        "token_f1",
        "--max-error",
        "0.2",
        "--json",
        json.to_str().unwrap(),
    ]));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let (lo, hi) = (cut_off(&r["lo"]), cut_off(&r["hi"]));
    let (labels, f1) = (bools(&b, "human"), f32s(&b, "token_f1"));
    let handed: Vec<usize> = (0..b.num_rows())
        .filter(|&i| source[i].as_deref() != Some("rule"))
        .collect();
    for (side, decided) in [("below", false), ("above", true)] {
        let rows: Vec<usize> = handed
            .iter()
            .copied()
            .filter(|&i| {
                let v = f64::from(f1[i].unwrap());
                if decided {
                    v > hi
                } else {
                    v < lo
                }
            })
            .collect();
        let errors = rows.iter().filter(|&&i| labels[i] != Some(decided)).count();
        assert_eq!(r[side]["labels"], rows.len() as u64, "{side}: {r}");
        assert_eq!(r[side]["errors"], errors as u64, "{side}: {r}");
        assert!(errors as f64 <= 0.2 * rows.len() as f64, "{side}: {r}");
    }
    assert_eq!(r["rows"], handed.len() as u64, "{r}");
    // The chain's first tier reaches the same rows.
    ok(&refscore(&[
        "calibrate-band",
        out.to_str().unwrap(),
        "--by",
        "token_f1,token_f1",
        "--max-error",
        "0.2",
        "--json",
        json.to_str().unwrap(),
    ]));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["tiers"][0]["labels_reaching"], handed.len() as u64, "{r}");
    assert_eq!(r["rows"], handed.len() as u64, "{r}");
}

/// Labels only on rows the rules decide: no labelled row reaches the band,
/// and `calibrate-band` says that (not "the labels are all false"); a fit
/// on two labelled rows warns that there are too few, with the count.
#[test]
fn calibrate_band_says_when_labels_are_missing_or_too_few() {
    let dir = tempfile::tempdir().unwrap();
    let server = yes_judge();
    let scored = |rows: &[(String, String, String, bool)], labelled: &[bool], name: &str| {
        let input = dir.path().join(format!("{name}.in.parquet"));
        labelled_input(&input, &rows.iter().collect::<Vec<_>>());
        // Unlabel the rows `labelled` leaves out.
        let b = read_parquet(&input);
        let human: arrow::array::ArrayRef = std::sync::Arc::new(arrow::array::BooleanArray::from(
            bools(&b, "human")
                .iter()
                .zip(labelled)
                .map(|(l, keep)| if *keep { *l } else { None })
                .collect::<Vec<_>>(),
        ));
        write_parquet(
            &input,
            vec![
                ("id", b.column_by_name("id").unwrap().clone()),
                ("reference", b.column_by_name("reference").unwrap().clone()),
                ("output", b.column_by_name("output").unwrap().clone()),
                ("human", human),
            ],
        );
        let out = dir.path().join(format!("{name}.parquet"));
        score_labelled(&server, &input, &out);
        out
    };
    let reference = "alpha beta gamma delta".to_string();
    let mut rows: Vec<(String, String, String, bool)> = (0..4)
        .map(|i| {
            (
                format!("same{i}"),
                reference.clone(),
                reference.clone(),
                true,
            )
        })
        .collect();
    rows.extend((0..6).map(|i| {
        (
            format!("other{i}"),
            reference.clone(),
            format!("zeta eta theta iota{i}"),
            i % 2 == 0,
        )
    }));
    // Only the rule's rows labelled.
    let out = scored(
        &rows,
        &(0..10).map(|i| i < 4).collect::<Vec<_>>(),
        "rules_only",
    );
    let err = fails(
        &refscore(&["calibrate-band", out.to_str().unwrap(), "--by", "token_f1"]),
        78,
    );
    assert!(
        !err.contains("all false") && !err.contains("all true"),
        "{err}"
    );
    assert!(
        err.contains("4 labelled rows") && err.contains("rules"),
        "{err}"
    );
    assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    // Two labelled rows the band would see (one of each kind).
    let out = scored(
        &rows,
        &(0..10).map(|i| i == 4 || i == 5).collect::<Vec<_>>(),
        "two",
    );
    let done = refscore(&["calibrate-band", out.to_str().unwrap(), "--by", "token_f1"]);
    ok(&done);
    let err = String::from_utf8_lossy(&done.stderr);
    assert!(
        err.contains("warning") && err.contains("too few") && err.contains("2 labelled rows"),
        "{err}"
    );
}

/// `calibrate-band --by nli_contradiction` fits the band the way the run
/// reads it (lower is better): labels true exactly where the contradiction
/// is low give a band whose lower side decides true and upper side false,
/// each without error, and the printed band decides them so in a run.
#[test]
fn calibrate_band_fits_contradiction_the_other_way_round() {
    let dir = tempfile::tempdir().unwrap();
    let set = labelled_set();
    let rows: Vec<_> = set.iter().take(60).collect();
    let server = yes_judge();
    let model = cross_model();
    let scored = |input: &Path, out: &Path, extra: &[&str]| {
        let mut args = vec![
            "--metrics",
            "nli_contradiction,meaning_match",
            "--cross-model",
            &model,
            "--judge-url",
            &server.url,
            "--judge-model",
            "scripted",
            "--judge-reasons",
            "never",
            "--overwrite",
        ];
        args.extend_from_slice(extra);
        ok(&score(input, out, &args));
        read_parquet(out)
    };
    let first = dir.path().join("first.parquet");
    labelled_input(&first, &rows);
    let b = scored(&first, &dir.path().join("first.result.parquet"), &[]);
    let contradiction: Vec<f32> = f32s(&b, "nli_contradiction")
        .iter()
        .map(|v| v.unwrap())
        .collect();
    let mut sorted = contradiction.clone();
    sorted.sort_by(f32::total_cmp);
    let median = sorted[sorted.len() / 2];
    assert!(sorted[0] < median, "the scores vary: {sorted:?}");
    // Labelled true exactly where the contradiction is below the median.
    let relabelled: Vec<(String, String, String, bool)> = rows
        .iter()
        .zip(&contradiction)
        .map(|(r, &c)| (r.0.clone(), r.1.clone(), r.2.clone(), c < median))
        .collect();
    let input = dir.path().join("labelled.parquet");
    labelled_input(&input, &relabelled.iter().collect::<Vec<_>>());
    let out = dir.path().join("labelled.result.parquet");
    let b = scored(&input, &out, &["--gold", "meaning_match=human"]);
    let json = dir.path().join("band.json");
    let printed = ok(&refscore(&[
        "calibrate-band",
        out.to_str().unwrap(),
        "--by",
        "nli_contradiction",
        "--max-error",
        "0",
        "--json",
        json.to_str().unwrap(),
        "--quiet",
    ]));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(r["lower_is_better"], true, "{r}");
    let (lo, hi) = (cut_off(&r["lo"]), cut_off(&r["hi"]));
    let (labels, source) = (bools(&b, "human"), texts(&b, "meaning_match_source"));
    let values = f32s(&b, "nli_contradiction");
    let handed: Vec<usize> = (0..b.num_rows())
        .filter(|&i| source[i].as_deref() != Some("rule"))
        .collect();
    for (side, decided) in [("below", true), ("above", false)] {
        let on: Vec<usize> = handed
            .iter()
            .copied()
            .filter(|&i| {
                let v = f64::from(values[i].unwrap());
                if decided {
                    v < lo
                } else {
                    v > hi
                }
            })
            .collect();
        assert!(!on.is_empty(), "{side} decides some rows: {r}");
        assert_eq!(r[side]["labels"], on.len() as u64, "{side}: {r}");
        assert_eq!(r[side]["errors"], 0, "{side}: {r}");
        assert!(on.iter().all(|&i| labels[i] == Some(decided)), "{side}");
    }
    // The printed band, run, decides those rows as their labels say.
    let flags: Vec<&str> = printed.split_whitespace().collect();
    let b = scored(&input, &out, &flags);
    let (verdicts, source) = (
        bools(&b, "meaning_match"),
        texts(&b, "meaning_match_source"),
    );
    for i in 0..b.num_rows() {
        if source[i].as_deref() == Some("band:nli_contradiction") {
            assert_eq!(verdicts[i], labels[i], "row {i}");
        }
    }
}

/// `calibrate-band --confidence`: each side decides only where the upper
/// Clopper-Pearson bound of its error is within --max-error. Reference
/// "alpha beta gamma delta" and 40 near misses (token F1 8/9) labelled
/// true, 20 half-right answers (token F1 0.5) half of them true, 10
/// unrelated answers (token F1 0) labelled false. At 10% and 90%: the upper
/// side's 40 rows without error bound it at 1 − 0.1^(1/40) = 5.6% and it
/// decides them; the lower side's 10 rows are fewer than the 22 a side
/// needs at zero errors (1 − 0.1^(1/22) ≤ 10%), so it stays open and says
/// it needs 84 more labels: 22 on that side at its share of 10 in 70, 154
/// in all. Today's fit (no --confidence) decides those 10 rows.
#[test]
fn calibrate_band_with_a_confidence_decides_only_where_the_bound_holds() {
    let dir = tempfile::tempdir().unwrap();
    let reference = "alpha beta gamma delta".to_string();
    let mut rows: Vec<(String, String, String, bool)> = Vec::new();
    for i in 0..40 {
        let output = format!("alpha beta gamma delta kappa{i}");
        rows.push((format!("near{i}"), reference.clone(), output, true));
    }
    for i in 0..20 {
        let output = format!("alpha beta theta iota{i}");
        rows.push((format!("half{i}"), reference.clone(), output, i % 2 == 0));
    }
    for i in 0..10 {
        let output = format!("zeta eta theta iota{i}");
        rows.push((format!("far{i}"), reference.clone(), output, false));
    }
    let input = dir.path().join("in.parquet");
    labelled_input(&input, &rows.iter().collect::<Vec<_>>());
    let out = dir.path().join("o.parquet");
    let server = yes_judge();
    score_labelled(&server, &input, &out);
    let json = dir.path().join("band.json");
    let calibrate = |extra: &[&str]| {
        let mut args = vec![
            "calibrate-band",
            out.to_str().unwrap(),
            "--by",
            "token_f1",
            "--max-error",
            "0.1",
            "--json",
            json.to_str().unwrap(),
        ];
        args.extend_from_slice(extra);
        let printed = ok(&refscore(&args));
        let r: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
        (printed, r)
    };
    let (printed, r) = calibrate(&["--confidence", "0.9"]);
    assert_eq!(r["confidence"], 0.9, "{r}");
    let above = &r["above"];
    assert_eq!(
        (&above["labels"], &above["errors"]),
        (&40.into(), &0.into()),
        "{r}"
    );
    // It decides 40 of the 70 labelled rows the band is fitted on.
    assert!(
        (above["share"].as_f64().unwrap() - 40.0 / 70.0).abs() < 1e-12,
        "{r}"
    );
    let g = &above["guarantee"];
    assert_eq!(g["held"], true, "{r}");
    // 1 − 0.1^(1/40) (scipy.stats.beta.ppf(0.9, 1, 40)).
    let high = g["error_high"].as_f64().unwrap();
    assert!((high - 0.05594).abs() < 1e-4, "{r}");
    let (lo, hi) = (cut_off(&r["lo"]), cut_off(&r["hi"]));
    assert!(hi > 0.5 && hi < 8.0 / 9.0, "{r}");
    assert_eq!(lo, f64::NEG_INFINITY, "{r}");
    let g = &r["below"]["guarantee"];
    assert_eq!(g["held"], false, "{r}");
    let need = &g["labels_needed"];
    assert_eq!(need["basis"], "observed_error", "{r}");
    assert_eq!(
        (&need["side_labels"], &need["more_labels"]),
        (&22.into(), &84.into()),
        "{r}"
    );
    assert!(
        printed.contains("40 labelled rows (57.1% of those fitted on) decided true")
            && printed.contains("guarantee held")
            && printed.contains("guarantee not met")
            && printed.contains("needs 84 more labels (at the observed error 0.0%"),
        "{printed}"
    );
    // The band it prints decides only the upper side, and carries the
    // guarantee that side holds (in the JSON too).
    assert!(
        printed.starts_with("--judge-band token_f1:-inf.."),
        "{printed}"
    );
    let band = r["judge_band"].as_str().unwrap();
    assert!(
        band.ends_with(",max_error=0.1,confidence=0.9,sides=above")
            && printed.starts_with(&format!("--judge-band {band}\n")),
        "{printed}"
    );
    // Today's fit, at the point estimate, decides the 10 unrelated rows.
    let (printed, r) = calibrate(&[]);
    assert_eq!(r["confidence"], serde_json::Value::Null, "{r}");
    assert!(!r["judge_band"].as_str().unwrap().contains(','), "{r}");
    assert_eq!(r["below"]["labels"], 10, "{r}");
    assert!(r["below"].get("guarantee").is_none(), "{r}");
    assert!(!printed.contains("guarantee"), "{printed}");
    // A confidence outside (0, 1), or one asked to bound an error of 0,
    // is a usage error naming the flag.
    for (flags, named) in [
        (["--confidence", "1", "--max-error", "0.1"], "--confidence"),
        (["--confidence", "0.9", "--max-error", "0"], "--max-error"),
    ] {
        let mut args = vec!["calibrate-band", out.to_str().unwrap(), "--by", "token_f1"];
        args.extend_from_slice(&flags);
        let err = fails(&refscore(&args), 64);
        assert!(err.contains(named), "{err}");
        assert_eq!(err.trim_end().lines().count(), 1, "one line: {err}");
    }
}

/// The input of the confidence test above: reference "alpha beta gamma
/// delta"; 40 near misses (token F1 8/9) labelled true, 20 half-right
/// answers (token F1 0.5) half of them true, 10 unrelated answers (token
/// F1 0) labelled false.
fn near_half_far(path: &Path) {
    let reference = "alpha beta gamma delta".to_string();
    let mut rows: Vec<(String, String, String, bool)> = Vec::new();
    for i in 0..40 {
        let output = format!("alpha beta gamma delta kappa{i}");
        rows.push((format!("near{i}"), reference.clone(), output, true));
    }
    for i in 0..20 {
        let output = format!("alpha beta theta iota{i}");
        rows.push((format!("half{i}"), reference.clone(), output, i % 2 == 0));
    }
    for i in 0..10 {
        let output = format!("zeta eta theta iota{i}");
        rows.push((format!("far{i}"), reference.clone(), output, false));
    }
    labelled_input(path, &rows.iter().collect::<Vec<_>>());
}

/// A band that carries a guarantee (as `calibrate-band --confidence`
/// prints it) is checked in the run against the labelled rows each of its
/// sides decides: the summary, the printed lines and `report` (its JSON and
/// its page) give the tier's decided share, each guaranteed side's error
/// with its Clopper-Pearson bounds at the band's confidence and whether the
/// guarantee held; a side with too few labels or none says so. A band
/// without one is shown as before (Wilson, no guarantee). Bounds from scipy
/// 1.17.1: beta.ppf(0.9, 1, 40) = 0.055939123714076625 (40 rows, none
/// wrong), beta.ppf(0.9, 1, 10) = 0.2056717652757185 (10 rows); at zero
/// errors a side needs 22 labelled rows for a 10% bound at 90%.
#[test]
fn a_run_checks_each_tier_against_the_guarantee_its_band_carries() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("in.parquet");
    near_half_far(&input);
    let server = yes_judge();
    let out = dir.path().join("o.parquet");
    let scored_with = |band: &str| -> (String, serde_json::Value) {
        let o = refscore(&[
            "score",
            input.to_str().unwrap(),
            "-o",
            out.to_str().unwrap(),
            "--overwrite",
            "--metrics",
            "token_f1,meaning_match",
            "--judge-url",
            &server.url,
            "--judge-model",
            "scripted",
            "--judge-reasons",
            "never",
            "--gold",
            "meaning_match=human",
            "--judge-band",
            band,
        ]);
        let printed = ok(&o) + &String::from_utf8_lossy(&o.stderr);
        (printed, summary(&out))
    };
    let tier_of = |s: &serde_json::Value| -> serde_json::Value {
        let c = s["calibration"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["metric"] == "meaning_match")
            .unwrap();
        c["tiers"][0].clone()
    };
    let close = |v: &serde_json::Value, want: f64| (v.as_f64().unwrap() - want).abs() < 1e-9;

    // Both sides guaranteed: above held on its 40 rows; below decided its
    // 10 rows rightly, but 10 are too few to show a 10% bound.
    let (printed, s) = scored_with("token_f1:0.01..0.6,max_error=0.1,confidence=0.9");
    let t = &s["judge"]["tiers"][0];
    assert_eq!(
        t["guarantee"],
        serde_json::json!({"max_error": 0.1, "confidence": 0.9, "sides": "both"}),
        "{t}"
    );
    assert_eq!(t["tier"], "token_f1:0.01..0.6", "{t}");
    assert!(close(&t["share"], 50.0 / 70.0), "{t}");
    let tier = tier_of(&s);
    assert_eq!(tier["source"], "band:token_f1", "{tier}");
    assert_eq!(tier["guarantee"]["sides"], "both", "{tier}");
    let above = &tier["decided_true"];
    assert_eq!(
        (&above["labels"], &above["errors"]),
        (&40.into(), &0.into())
    );
    let g = &above["guarantee"];
    assert_eq!(
        (&g["status"], &g["held"]),
        (&"held".into(), &true.into()),
        "{g}"
    );
    assert!(close(&g["error_high"], 0.055939123714076625), "{g}");
    assert_eq!(
        (&g["max_error"], &g["confidence"]),
        (&0.1.into(), &0.9.into())
    );
    // The Wilson interval stays where it was, beside the check.
    assert!(above["error_high"].as_f64().unwrap() > 0.08, "{above}");
    let below = &tier["decided_false"];
    let g = &below["guarantee"];
    assert_eq!(g["status"], "not_enough_labels", "{g}");
    assert!(close(&g["error_high"], 0.2056717652757185), "{g}");
    assert_eq!(g["labels_needed"]["side_labels"], 22, "{g}");
    assert!(
        printed.contains("[guaranteed error at most 10.0% at 90% confidence, both sides] decided 50")
            && printed.contains(
                "decided true: 0 of 40 against their label (0.0%, Clopper-Pearson [0.0%, 5.6%], each end 90.0% one-sided): guarantee held"
            )
            && printed.contains(
                "decided false: 0 of 10 against their label (0.0%, Clopper-Pearson [0.0%, 20.6%], each end 90.0% one-sided): not enough labels to show the guarantee (upper bound above 10.0%; at this error it needs 22 labelled rows on this side)"
            ),
        "{printed}"
    );
    // `report` reads the guarantee back from the result and shows the same.
    let json = dir.path().join("r.json");
    let page = dir.path().join("r.html");
    ok(&refscore(&[
        "report",
        out.to_str().unwrap(),
        "--json",
        json.to_str().unwrap(),
        "-o",
        page.to_str().unwrap(),
    ]));
    let r: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let c = r["calibration"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["metric"] == "meaning_match")
        .unwrap();
    assert_eq!(c["tiers"][0], tier, "{c}");
    assert_eq!(c["tier_volume"]["band:token_f1"]["decided"], 50, "{c}");
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.contains("guaranteed error at most 10.0% at 90.0% confidence (both)")
            && html.contains("guarantee held")
            && html.contains(
                "not enough labels to show the guarantee (at this error it needs 22 labelled rows)"
            )
            && html.contains("decided 50 values of the run, 71.4%"),
        "{html}"
    );

    // The side below decides no row at all: no labels to check it on.
    let (printed, s) = scored_with("token_f1:-0.5..0.6,max_error=0.1,confidence=0.9,sides=both");
    let g = &tier_of(&s)["decided_false"]["guarantee"];
    assert_eq!(
        (&g["status"], &g["held"]),
        (&"no_labels".into(), &false.into()),
        "{g}"
    );
    assert!(
        printed.contains("decided false: no labels: it decided no labelled row, so its guarantee (error at most 10.0% at 90.0%) is not checked"),
        "{printed}"
    );

    // Without a guarantee: no check, the Wilson interval as before, and
    // the result's footer records no tiers.
    let (printed, s) = scored_with("token_f1:0.01..0.6");
    assert!(s["judge"]["tiers"][0].get("guarantee").is_none(), "{s}");
    let tier = tier_of(&s);
    assert!(tier.get("guarantee").is_none(), "{tier}");
    assert!(tier["decided_true"].get("guarantee").is_none(), "{tier}");
    assert!(!printed.contains("guarantee"), "{printed}");
    assert!(
        printed.contains("decided true: 0 of 40 against their label (0.0% [0.0%, 8.8%])"),
        "{printed}"
    );
}
