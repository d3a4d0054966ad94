//! The judge stage against a scripted local server: cache and journal keys,
//! output modes, failures, reasons on demand and the fact ratio.

use std::time::Duration;

use arrow::array::{ArrayRef, StringArray};
use refscore_core::TextColumn;

use super::rubric::VERDICT_TOKENS;
use super::*;
use crate::test_server::{chat, start, Reply, Request, Server};
use crate::Endpoint;

pub(super) fn text(values: &[&str]) -> TextColumn {
    TextColumn::Utf8(StringArray::from(values.to_vec()))
}

pub(super) fn batch() -> RowBatch {
    let refs = ["Paris is the capital of France", "Water boils at 100 C"];
    RowBatch::new(
        0,
        "in.parquet".into(),
        0,
        Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
        Some(text(&["Capital?", "Boiling point?"])),
        text(&refs),
        text(&["Lyon", "It boils at 90 C"]),
    )
}

/// Options for a judge at `url` asking for the built-in metrics `names`.
pub(crate) fn options(url: &str, names: &[&str], cache: Option<PathBuf>) -> JudgeOptions {
    let mut metrics = refscore_core::metric::MetricSet::new();
    for name in names {
        metrics.insert(&refscore_core::metric::find(name).expect("a metric"));
    }
    JudgeOptions {
        endpoint: Endpoint {
            url: url.into(),
            api: crate::Api::default(),
            model: "m".into(),
            api_key: None,
            timeout: Duration::from_secs(5),
            retries: 0,
            concurrency: 2,
            requests_per_minute: None,
            tokens_per_minute: None,
            backoff: Duration::from_millis(5),
            mode: None,
        },
        metrics,
        tiers: Default::default(),
        facts: Default::default(),
        fact_check: None,
        cache_dir: cache,
        reasons: Reasons::Always,
        threshold: 0.5,
        thresholds: vec![("similarity".into(), 0.7)],
        judge_metrics: JudgeMetrics::builtin(),
        where_column: None,
    }
}

/// A judge answering every template; Meaning Match says `verdict`.
fn judge(verdict: bool) -> Server {
    start(move |req: &Request, _| match req.kind() {
        "meaning_match" => chat(&format!(
            r#"{{"meaning_match": {verdict}, "reason": "scripted"}}"#
        )),
        "similarity" => chat(r#"{"score": 3, "rationale": "little overlap"}"#),
        "fact_extract" => chat(r#"{"facts": ["one fact", "another fact"]}"#),
        _ => chat("yes"),
    })
}

pub(super) fn column<'a>(cols: &'a ScoreColumns, name: &str) -> &'a ArrayRef {
    let k = cols.fields.iter().position(|f| f.name() == name).unwrap();
    &cols.arrays[k]
}

pub(super) fn strings(cols: &ScoreColumns, name: &str) -> Vec<Option<String>> {
    use arrow::array::AsArray;
    column(cols, name)
        .as_string::<i32>()
        .iter()
        .map(|s| s.map(String::from))
        .collect()
}

#[test]
fn the_cache_is_keyed_by_the_endpoint() {
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = (judge(true), judge(false));
    let sel = &["meaning_match"];
    let run = |url: &str| {
        let mut stage = JudgeStage::new(options(url, sel, Some(dir.path().to_path_buf()))).unwrap();
        let cols = stage
            .score_batch(
                &batch(),
                &[Wanted::Every, Wanted::Every],
                &ChainValues::none(),
            )
            .unwrap();
        (cols, stage.report())
    };
    let (cols, _) = run(&a.url);
    assert_eq!(a.requests().len(), 2);
    assert_eq!(
        strings(&cols, "meaning_match_source"),
        [Some("judge".into()), Some("judge".into())]
    );
    // Same cache folder, another server: B is asked, A's answers unused.
    let (cols, report) = run(&b.url);
    assert_eq!(b.requests().len(), 2, "server B must be called");
    assert_eq!(report.cached, 0);
    assert_eq!(
        strings(&cols, "meaning_match_source"),
        [Some("judge".into()), Some("judge".into())]
    );
    use arrow::array::AsArray;
    assert_eq!(
        column(&cols, "meaning_match")
            .as_boolean()
            .iter()
            .collect::<Vec<_>>(),
        [Some(false), Some(false)]
    );
    // And A again: its own answers come from the cache.
    let (cols, report) = run(&a.url);
    assert_eq!((a.requests().len(), report.cached), (2, 2));
    assert_eq!(
        strings(&cols, "meaning_match_source"),
        [Some("cache".into()), Some("cache".into())]
    );
}

#[test]
fn the_negotiated_output_mode_is_part_of_the_key_and_remembered() {
    // A server without structured output: rejects json_schema, accepts
    // json_object.
    let server = start(|req: &Request, _| {
        if req.body["response_format"]["type"] == "json_schema" {
            Reply::Status(
                400,
                vec![],
                "response_format json_schema unsupported".into(),
            )
        } else {
            chat(r#"{"meaning_match": false, "reason": "scripted"}"#)
        }
    });
    let dir = tempfile::tempdir().unwrap();
    let run = || {
        let mut stage = JudgeStage::new(options(
            &server.url,
            &["meaning_match"],
            Some(dir.path().to_path_buf()),
        ))
        .unwrap();
        let cols = stage
            .score_batch(
                &batch(),
                &[Wanted::Every, Wanted::Every],
                &ChainValues::none(),
            )
            .unwrap();
        (strings(&cols, "meaning_match_source"), stage.report())
    };
    let (sources, report) = run();
    assert_eq!(sources, [Some("judge".into()), Some("judge".into())]);
    assert_eq!(report.response_format, "json_object");
    let asked = server.requests().len();
    let (sources, report) = run();
    assert_eq!(sources, [Some("cache".into()), Some("cache".into())]);
    assert_eq!(
        report.response_format, "json_object",
        "starts in the mode it negotiated"
    );
    assert_eq!(server.requests().len(), asked, "a re-run pays nothing");
}

#[test]
fn rows_with_a_judge_failure_are_counted() {
    let server = start(|req: &Request, _| match req.kind() {
        "meaning_match" => Reply::Status(400, vec![], "no".into()),
        _ => chat(r#"{"score": 3, "rationale": "x"}"#),
    });
    let mut stage =
        JudgeStage::new(options(&server.url, &["meaning_match", "similarity"], None)).unwrap();
    let mut b = batch();
    // row 1: decided by rule
    b.set_answers(
        b.reference().clone(),
        text(&["Lyon", "Water boils at 100 C."]),
    );
    stage
        .score_batch(&b, &[Wanted::Every, Wanted::Every], &ChainValues::none())
        .unwrap();
    assert_eq!(stage.last_batch_rows_failed(), 1);
    let r = stage.report();
    assert_eq!((r.rows_failed, r.failures), (1, 1));
    stage
        .score_batch(
            &batch(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    assert_eq!(stage.last_batch_rows_failed(), 2);
    assert_eq!(stage.report().rows_failed, 3);
    stage
        .score_batch(
            &batch(),
            &vec![Wanted::These(vec![refscore_core::metric::SIMILARITY.clone()]); 2],
            &ChainValues::none(),
        )
        .unwrap();
    assert_eq!(stage.last_batch_rows_failed(), 0);
}

#[test]
fn the_journal_replays_paid_answers_as_judge_answers() {
    use std::sync::atomic::AtomicBool;
    let dir = tempfile::tempdir().unwrap();
    let journal = dir.path().join("journal");
    let sel = &["meaning_match", "similarity", "fact_similarity"];
    // One endpoint (the key holds its URL) that answers, then, like a
    // judge gone down after a crash, fails every request.
    let down = Arc::new(AtomicBool::new(false));
    let down2 = Arc::clone(&down);
    let server = start(move |req: &Request, _| {
        if down2.load(Ordering::Relaxed) {
            return Reply::Status(500, vec![], "down".into());
        }
        match req.kind() {
            "meaning_match" => chat(r#"{"meaning_match": true, "reason": "scripted"}"#),
            "similarity" => chat(r#"{"score": 3, "rationale": "little overlap"}"#),
            "fact_extract" => chat(r#"{"facts": ["one fact", "another fact"]}"#),
            _ => chat("yes"),
        }
    });
    let run = || {
        let mut stage = JudgeStage::new(options(&server.url, sel, None)).unwrap();
        stage.set_journal_dir(journal.clone()).unwrap();
        let cols = stage
            .score_batch(
                &batch(),
                &[Wanted::Every, Wanted::Every],
                &ChainValues::none(),
            )
            .unwrap();
        (cols, stage.report())
    };
    let (first, paid) = run();
    assert!(first.row_errors.is_empty());
    assert_eq!(
        paid.calls, 16,
        "per row: meaning, similarity, two extractions, four fact checks"
    );
    down.store(true, Ordering::Relaxed);
    let asked = server.requests().len();

    let (again, replayed) = run();
    assert_eq!(
        server.requests().len(),
        asked,
        "nothing asked of the failed judge"
    );
    assert!(again.row_errors.is_empty(), "{:?}", again.row_errors);
    assert_eq!(replayed.failures, 0);
    assert_eq!(replayed.rows_failed, 0);
    assert_eq!(again.fields, first.fields);
    for (k, f) in first.fields.iter().enumerate() {
        assert_eq!(
            again.arrays[k].to_data(),
            first.arrays[k].to_data(),
            "column {} differs from the clean run",
            f.name()
        );
    }
    for m in [
        "meaning_match_source",
        "similarity_source",
        "fact_similarity_source",
    ] {
        assert_eq!(
            strings(&again, m),
            [Some("judge".into()), Some("judge".into())]
        );
    }
    assert_eq!(
        (
            replayed.prompt_tokens,
            replayed.completion_tokens,
            replayed.rows_judged
        ),
        (paid.prompt_tokens, paid.completion_tokens, paid.rows_judged)
    );
    assert_eq!((replayed.cached, replayed.calls), (0, 0));
    assert!(replayed.replayed > 0);
}

pub(super) fn floats(cols: &ScoreColumns, name: &str) -> Vec<Option<f32>> {
    use arrow::array::AsArray;
    use arrow::datatypes::Float32Type;
    column(cols, name)
        .as_primitive::<Float32Type>()
        .iter()
        .collect()
}

pub(super) fn bools(cols: &ScoreColumns, name: &str) -> Vec<Option<bool>> {
    use arrow::array::AsArray;
    column(cols, name).as_boolean().iter().collect()
}

fn verdict_first(url: &str, names: &[&str], reasons: Reasons) -> JudgeStage {
    JudgeStage::new(JudgeOptions {
        reasons,
        ..options(url, names, None)
    })
    .unwrap()
}

/// A Meaning Match answer cut after its verdict, as llama.cpp sends it
/// with logprobs: P(true) = `p`, "false" generated.
fn cut_verdict(p: f64) -> Reply {
    use crate::test_server::chat_with_logprobs;
    let verdict: &[(&str, f64)] = &[(" false", 1.0 - p), (" true", p)];
    chat_with_logprobs(
        "{\"meaning_match\": false",
        &[
            ("{\"", &[("{\"", 1.0)]),
            ("meaning", &[("meaning", 1.0)]),
            ("_match", &[("_match", 1.0)]),
            ("\":", &[("\":", 1.0)]),
            (" false", verdict),
        ],
    )
}

fn user_of(req: &Request) -> String {
    req.body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

#[test]
fn the_verdict_is_cut_short_and_a_reason_asked_only_where_it_fails() {
    let server = start(|req: &Request, _| {
        assert_eq!(req.body["logprobs"], true);
        if req.body["max_tokens"] == VERDICT_TOKENS {
            // Row 0 (Lyon): P(true) 0.2. Row 1: 0.8, though "false" was generated.
            cut_verdict(if user_of(req).contains("Lyon") {
                0.2
            } else {
                0.8
            })
        } else {
            chat(r#"{"meaning_match": false, "reason": "Lyon is not the capital."}"#)
        }
    });
    let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Failures);
    let cols = stage
        .score_batch(
            &batch(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    assert_eq!(bools(&cols, "meaning_match"), [Some(false), Some(true)]);
    let p = floats(&cols, "meaning_match_p");
    assert!(
        (p[0].unwrap() - 0.2).abs() < 1e-4 && (p[1].unwrap() - 0.8).abs() < 1e-4,
        "{p:?}"
    );
    assert_eq!(
        strings(&cols, "meaning_match_reason"),
        [Some("Lyon is not the capital.".into()), None],
        "a reason for the failing row only"
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    let whole: Vec<_> = requests
        .iter()
        .filter(|r| r.body["max_tokens"] != VERDICT_TOKENS)
        .collect();
    assert_eq!(whole.len(), 1);
    let cut = requests
        .iter()
        .find(|r| r.body["max_tokens"] == VERDICT_TOKENS && user_of(r) == user_of(whole[0]))
        .unwrap();
    assert_eq!(
        (&cut.body["messages"], &cut.body["response_format"]),
        (
            &whole[0].body["messages"],
            &whole[0].body["response_format"]
        ),
        "the reason's request repeats the verdict's prompt byte for byte"
    );
    let r = stage.report();
    assert_eq!(
        (r.calls, r.reasons_asked, r.replies_with_logprobs),
        (3, 1, 2)
    );
    assert_eq!(
        r.prompt_tokens_cached, 80,
        "cached tokens of the two verdicts"
    );

    // `never`: the same verdicts, no reasons.
    let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Never);
    let cols = stage
        .score_batch(
            &batch(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    assert_eq!(bools(&cols, "meaning_match"), [Some(false), Some(true)]);
    assert_eq!(strings(&cols, "meaning_match_reason"), [None, None]);
    assert_eq!(server.requests().len(), 5);
}

#[test]
fn a_ten_split_into_digits_is_read_as_ten() {
    use crate::test_server::chat_with_logprobs;
    let server = start(|_: &Request, _| {
        chat_with_logprobs(
            "{\"score\": 10",
            &[
                ("{\"", &[("{\"", 1.0)]),
                ("score", &[("score", 1.0)]),
                ("\":", &[("\":", 1.0)]),
                (" ", &[(" ", 1.0)]),
                ("1", &[("1", 0.7), ("9", 0.3)]),
                ("0", &[("0", 0.9), (",", 0.1)]),
            ],
        )
    });
    let mut stage = verdict_first(&server.url, &["similarity"], Reasons::Failures);
    let cols = stage
        .score_batch(
            &batch(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    use arrow::array::AsArray;
    use arrow::datatypes::UInt8Type;
    let scores: Vec<Option<u8>> = column(&cols, "similarity_score")
        .as_primitive::<UInt8Type>()
        .iter()
        .collect();
    assert_eq!(scores, [Some(10), Some(10)]);
    // 0.7 * (0.9 * 10 + 0.1 * 1) + 0.3 * 9 = 9.07
    let sim = floats(&cols, "similarity");
    assert!((sim[0].unwrap() - 0.907).abs() < 1e-4, "{sim:?}");
    assert_eq!(
        strings(&cols, "similarity_rationale"),
        [None, None],
        "passing: no reason"
    );
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn without_logprobs_the_sampled_answer_decides_and_p_is_null() {
    let server = start(|req: &Request, _| {
        let lyon = user_of(req).contains("Lyon");
        match (req.body["max_tokens"] == VERDICT_TOKENS, lyon) {
            (true, true) => chat(r#"{"meaning_match": false, "re"#),
            (true, false) => chat(r#"{"meaning_match": true"#),
            (false, _) => chat(r#"{"meaning_match": false, "reason": "Different city."}"#),
        }
    });
    let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Failures);
    let cols = stage
        .score_batch(
            &batch(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    assert_eq!(bools(&cols, "meaning_match"), [Some(false), Some(true)]);
    assert_eq!(floats(&cols, "meaning_match_p"), [None, None]);
    assert_eq!(
        strings(&cols, "meaning_match_reason"),
        [Some("Different city.".into()), None]
    );
    let r = stage.report();
    assert_eq!(
        (r.replies_with_logprobs, r.replies_without_logprobs),
        (0, 3)
    );
}

#[test]
fn a_json_reply_cut_after_the_verdict_gives_the_verdict_and_its_p() {
    use crate::test_server::chat_with_logprobs;
    let server = start(|_: &Request, _| {
        let verdict: &[(&str, f64)] = &[(" false", 0.4), (" true", 0.6)];
        chat_with_logprobs(
            "{\"meaning_match\": false, \"rea",
            &[
                ("{\"", &[("{\"", 1.0)]),
                ("meaning", &[("meaning", 1.0)]),
                ("_match", &[("_match", 1.0)]),
                ("\":", &[("\":", 1.0)]),
                (" false", verdict),
                (",", &[(",", 1.0)]),
                (" \"rea", &[(" \"rea", 1.0)]),
            ],
        )
    });
    let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Always);
    let cols = stage
        .score_batch(
            &batch(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    assert!(cols.row_errors.is_empty(), "{:?}", cols.row_errors);
    assert_eq!(
        bools(&cols, "meaning_match"),
        [Some(true), Some(true)],
        "p 0.6 ≥ 0.5"
    );
    let p = floats(&cols, "meaning_match_p");
    assert!((p[0].unwrap() - 0.6).abs() < 1e-5);
    assert_eq!(strings(&cols, "meaning_match_reason"), [None, None]);
}

#[test]
fn the_fact_ratio_counts_checked_facts_in_refscore() {
    // The metric doc's first worked case: 1 of 2 reference facts, 1 of
    // 3 output facts hold on the other side: 1/3.
    let server = start(|req: &Request, _| {
        let user = req.body["messages"][1]["content"].as_str().unwrap();
        match req.kind() {
            "fact_extract" if user.contains("bananas") => {
                chat(r#"{"facts": ["Amy likes apples", "Amy likes bananas"]}"#)
            }
            "fact_extract" => {
                chat(r#"{"facts": ["Amy likes apples", "Amy likes berries", "Amy likes plums"]}"#)
            }
            _ => {
                let fact = user.rsplit("Fact:\n").next().unwrap();
                chat(if fact == "Amy likes apples" {
                    "yes"
                } else {
                    "no"
                })
            }
        }
    });
    let mut b = batch();
    b.input = Some(text(&["What does Amy like?", "What does Amy like?"]));
    b.set_answers(
        text(&[
            "Amy likes apples and bananas",
            "Amy likes apples and bananas",
        ]),
        text(&[
            "Amy likes apples, berries and plums",
            "Amy likes apples, berries and plums",
        ]),
    );
    let mut stage = verdict_first(&server.url, &["fact_similarity"], Reasons::Failures);
    let cols = stage
        .score_batch(&b, &[Wanted::Every, Wanted::Every], &ChainValues::none())
        .unwrap();
    assert!(cols.row_errors.is_empty(), "{:?}", cols.row_errors);
    let f = floats(&cols, "fact_similarity");
    assert!((f[0].unwrap() - 1.0 / 3.0).abs() < 1e-6, "{f:?}");
    assert_eq!(f[0], f[1]);
    assert_eq!(floats(&cols, "fact_recall")[0], Some(0.5));
    assert!((floats(&cols, "fact_precision")[0].unwrap() - 1.0 / 3.0).abs() < 1e-6);
    // Two extractions and five checks, asked once for the two equal rows.
    assert_eq!(server.requests().len(), 7);
    assert_eq!(stage.report().fact_checks, 5);
}
