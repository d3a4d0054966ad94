//! OpenAI's flex processing as a judge mode (`--judge-service-tier flex`,
//! config `[judge] service_tier`), against the scripted chat server: every
//! request carries the tier, flex's 429 "resource unavailable" is retried
//! and counted in the summary and its printed line, `--judge-flex-fallback
//! N` sends a request at the standard tier after N refusals, and an API
//! without the tier (Anthropic's) is refused in one line.

mod common;

use std::path::Path;

use common::judge_server::{chat, start, Reply, Request};
use common::*;

/// Flex's answer when it has no capacity (OpenAI charges nothing for it).
fn unavailable() -> Reply {
    Reply::Status(
        429,
        vec![("Retry-After", "0".into())],
        r#"{"error": {"message": "Resource unavailable. Please try again later.", "type": "resource_unavailable"}}"#.into(),
    )
}

fn verdict() -> Reply {
    chat(r#"{"meaning_match": true, "reason": "scripted"}"#)
}

fn flex(req: &Request) -> bool {
    req.body["service_tier"] == "flex"
}

fn args<'a>(input: &'a str, output: &'a str, url: &'a str) -> Vec<&'a str> {
    vec![
        "score",
        input,
        "-o",
        output,
        "--metrics",
        "meaning_match",
        "--judge-url",
        url,
        "--judge-model",
        "scripted",
        "--judge-reasons",
        "always",
    ]
}

fn rows(dir: &Path) -> std::path::PathBuf {
    let p = dir.join("in.parquet");
    write_parquet(
        &p,
        vec![
            ("reference", s(&["Paris", "Rome", "Oslo"])),
            ("output", s(&["paris, France", "Rome, Italy", "Bergen"])),
        ],
    );
    p
}

#[test]
fn every_request_is_flex_and_its_refusals_are_retried_and_counted() {
    // Each row's first two tries find no capacity.
    let server = start(|_, seen| if seen < 2 { unavailable() } else { verdict() });
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (rows(dir.path()), dir.path().join("o.parquet"));
    let (inp, out) = (inp.to_str().unwrap(), out.to_str().unwrap());
    let mut a = args(inp, out, &server.url);
    a.extend(["--judge-service-tier", "flex"]);
    let o = refscore(&a);
    ok(&o);
    let requests = server.requests();
    assert_eq!(requests.len(), 9);
    assert!(requests.iter().all(flex), "{:?}", requests[0].body);
    let b = read_parquet(Path::new(out));
    assert_eq!(bools(&b, "meaning_match"), vec![Some(true); 3]);
    let j = &summary(Path::new(out))["judge"];
    assert_eq!(
        j["flex"],
        serde_json::json!({"service_tier": "flex", "resource_unavailable": 6, "sent_standard": 0})
    );
    assert_eq!(j["retries"], 6);
    let printed = String::from_utf8_lossy(&o.stdout);
    assert!(
        printed.contains(
            "judge flex processing: 6 requests refused for want of capacity (429 resource unavailable), retried\n"
        ),
        "{printed}"
    );
}

#[test]
fn a_rate_limit_is_no_flex_refusal() {
    let server = start(|_, seen| {
        if seen == 0 {
            Reply::Status(
                429,
                vec![("Retry-After", "0".into())],
                r#"{"error": {"message": "Rate limit reached for requests"}}"#.into(),
            )
        } else {
            verdict()
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (rows(dir.path()), dir.path().join("o.parquet"));
    let (inp, out) = (inp.to_str().unwrap(), out.to_str().unwrap());
    let mut a = args(inp, out, &server.url);
    a.extend(["--judge-service-tier", "flex", "-q"]);
    ok(&refscore(&a));
    let j = &summary(Path::new(out))["judge"];
    assert_eq!(j["retries"], 3);
    assert_eq!(j["flex"]["resource_unavailable"], 0);
}

#[test]
fn after_n_refusals_a_request_goes_at_the_standard_tier() {
    // Flex never has capacity; the standard tier always answers.
    let server = start(|req, _| if flex(req) { unavailable() } else { verdict() });
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (rows(dir.path()), dir.path().join("o.parquet"));
    let (inp, out) = (inp.to_str().unwrap(), out.to_str().unwrap());
    let mut a = args(inp, out, &server.url);
    a.extend([
        "--judge-service-tier",
        "flex",
        "--judge-flex-fallback",
        "2",
        "-q",
    ]);
    ok(&refscore(&a));
    let requests = server.requests();
    // Per row: flex, flex, then standard.
    assert_eq!(requests.len(), 9);
    assert_eq!(requests.iter().filter(|r| flex(r)).count(), 6);
    for candidate in ["paris, France", "Rome, Italy", "Bergen"] {
        let tiers: Vec<bool> = requests
            .iter()
            .filter(|r| r.candidate() == candidate)
            .map(flex)
            .collect();
        assert_eq!(tiers, [true, true, false], "{candidate}");
    }
    let b = read_parquet(Path::new(out));
    assert_eq!(bools(&b, "meaning_match"), vec![Some(true); 3]);
    let j = &summary(Path::new(out))["judge"];
    assert_eq!(j["flex"]["resource_unavailable"], 6);
    assert_eq!(j["flex"]["sent_standard"], 3);
    // Without the fallback, the same server spends every retry on flex.
    let server = start(|req, _| if flex(req) { unavailable() } else { verdict() });
    let mut a = args(inp, out, &server.url);
    a.extend([
        "--judge-service-tier",
        "flex",
        "--judge-retries",
        "1",
        "-q",
        "--overwrite",
    ]);
    let o = refscore(&a);
    assert_eq!(
        o.status.code(),
        Some(75),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(server.requests().iter().all(flex));
}

#[test]
fn the_config_key_is_judge_service_tier() {
    let server = start(|_, _| verdict());
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (rows(dir.path()), dir.path().join("o.parquet"));
    let (inp, out) = (inp.to_str().unwrap(), out.to_str().unwrap());
    let config = dir.path().join("refscore.toml");
    std::fs::write(
        &config,
        "[judge]\nservice_tier = \"flex\"\nflex_fallback = 1\n",
    )
    .unwrap();
    let mut a = args(inp, out, &server.url);
    a.extend(["--config", config.to_str().unwrap(), "-q"]);
    ok(&refscore(&a));
    assert!(server.requests().iter().all(flex));
    assert_eq!(
        summary(Path::new(out))["judge"]["flex"]["service_tier"],
        "flex"
    );
    // The command line wins over the file.
    let server = start(|_, _| verdict());
    let mut a = args(inp, out, &server.url);
    a.extend(["--config", config.to_str().unwrap(), "-q", "--overwrite"]);
    a.extend([
        "--judge-service-tier",
        "standard",
        "--judge-flex-fallback",
        "1",
    ]);
    let e = fails(&refscore(&a), 64);
    assert!(
        e.contains("--judge-flex-fallback 1: falls back from flex"),
        "{e}"
    );
    let server = start(|_, _| verdict());
    std::fs::write(&config, "[judge]\nservice_tier = \"flex\"\n").unwrap();
    let mut a = args(inp, out, &server.url);
    a.extend(["--config", config.to_str().unwrap(), "-q", "--overwrite"]);
    a.extend(["--judge-service-tier", "standard"]);
    ok(&refscore(&a));
    assert!(!server.requests().iter().any(flex));
    assert!(summary(Path::new(out))["judge"].get("flex").is_none());
}

#[test]
fn an_api_without_the_tier_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let (inp, out) = (rows(dir.path()), dir.path().join("o.parquet"));
    let (inp, out) = (inp.to_str().unwrap(), out.to_str().unwrap());
    // The URL implies Anthropic's API; nothing is called.
    let mut a = args(inp, out, "https://api.anthropic.com/v1");
    a.extend(["--judge-service-tier", "flex"]);
    let e = fails(&refscore(&a), 64);
    assert_eq!(e.lines().count(), 1, "{e}");
    assert!(
        e.contains("--judge-service-tier flex: the anthropic API has no flex tier"),
        "{e}"
    );
    // In the config file: a configuration error at its line.
    let config = dir.path().join("refscore.toml");
    std::fs::write(&config, "\n[judge]\nservice_tier = \"flex\"\n").unwrap();
    let mut a = args(inp, out, "http://127.0.0.1:9/v1");
    a.extend([
        "--judge-api",
        "anthropic",
        "--config",
        config.to_str().unwrap(),
    ]);
    let e = fails(&refscore(&a), 78);
    assert!(
        e.contains("refscore.toml:3: judge_service_tier = flex: the anthropic API"),
        "{e}"
    );
    // Batches are priced alike already: one or the other.
    let mut a = args(inp, out, "http://127.0.0.1:9/v1");
    a.extend(["--judge-service-tier", "flex", "--judge-batch", "api"]);
    let e = fails(&refscore(&a), 64);
    assert!(e.contains("flex is for calls"), "{e}");
    // An unknown tier names the choices.
    let mut a = args(inp, out, "http://127.0.0.1:9/v1");
    a.extend(["--judge-service-tier", "priority"]);
    let e = fails(&refscore(&a), 64);
    assert!(e.contains("'priority': expected flex or standard"), "{e}");
}
