//! The user's rubrics through the stage, against a scripted server: scores
//! read with their probabilities over the rubric's own scale, a verdict's
//! own threshold, reasons only for failures, the input columns a prompt
//! reads, and a changed rubric never answered from the cache.

use std::io::Write;

use arrow::array::{ArrayRef, AsArray, StringArray};
use arrow::datatypes::UInt8Type;

use super::rubric::VERDICT_TOKENS;
use super::tests::{batch, options};
use super::*;
use crate::test_server::{chat, chat_with_logprobs, start, Request};

const RUBRICS: &str = r#"
[judge.metric.concise]
answer = "score"
scale = [1, 5]
threshold = 4
instructions = "Rate how concise the answer is."
prompt = "Policy {{ row.policy }}\nReference: {{ reference }}\nAnswer: {{ output }}"

[judge.metric.cites]
answer = "verdict"
threshold = 0.9
prompt = "Does this answer cite the policy? {{ output }}"
"#;

/// The judge metrics of `text`, and a stage over `names` of them.
fn stage_of(
    text: &str,
    url: &str,
    names: &[&str],
    cache: Option<PathBuf>,
) -> (JudgeStage, tempfile::NamedTempFile) {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    let mut known = JudgeMetrics::builtin();
    known.read(f.path(), true).unwrap();
    let catalog = known.catalog();
    let mut metrics = refscore_core::metric::MetricSet::new();
    for n in names {
        metrics.insert(&catalog.find(n).unwrap());
    }
    let mut thresholds: Vec<(String, f64)> = catalog
        .iter()
        .map(|m| (m.name.to_string(), m.default_threshold))
        .collect();
    thresholds.push(("similarity".into(), 0.7));
    let stage = JudgeStage::new(JudgeOptions {
        metrics,
        thresholds,
        judge_metrics: known,
        reasons: Reasons::Failures,
        ..options(url, &[], cache)
    })
    .unwrap();
    (stage, f)
}

/// The test batch with a `policy` column for the prompts.
fn batch_with_policy() -> RowBatch {
    let mut b = batch();
    b.prompt_columns = vec![(
        "policy".into(),
        Arc::new(StringArray::from(vec![Some("4.2"), None])) as ArrayRef,
    )];
    b
}

fn u8s(cols: &ScoreColumns, name: &str) -> Vec<Option<u8>> {
    super::tests::column(cols, name)
        .as_primitive::<UInt8Type>()
        .iter()
        .collect()
}

fn user_of(req: &Request) -> String {
    req.body["messages"][1]["content"]
        .as_str()
        .unwrap()
        .to_string()
}

/// A score cut after its number: `digits` are the generated tokens with
/// their alternatives.
fn cut_score(digits: &[(&str, &[(&str, f64)])]) -> crate::test_server::Reply {
    let mut tokens: Vec<(&str, &[(&str, f64)])> = vec![
        ("{\"", &[("{\"", 1.0)]),
        ("score", &[("score", 1.0)]),
        ("\":", &[("\":", 1.0)]),
        (" ", &[(" ", 1.0)]),
    ];
    tokens.extend_from_slice(digits);
    let number: String = digits.iter().map(|(t, _)| *t).collect();
    chat_with_logprobs(&format!("{{\"score\": {number}"), &tokens)
}

#[test]
fn a_defined_score_is_read_over_its_scale_with_reasons_for_failures() {
    let server = start(|req: &Request, _| {
        if req.body["max_tokens"] == VERDICT_TOKENS {
            if user_of(req).contains("Lyon") {
                cut_score(&[("2", &[("2", 0.6), ("3", 0.4)])])
            } else {
                cut_score(&[("5", &[("5", 0.9), ("4", 0.1)])])
            }
        } else {
            chat(r#"{"score": 2, "reason": "Wordy and wrong."}"#)
        }
    });
    let (mut stage, _f) = stage_of(RUBRICS, &server.url, &["concise"], None);
    let cols = stage
        .score_batch(
            &batch_with_policy(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    let scores = u8s(&cols, "concise_score");
    assert_eq!(scores, [Some(2), Some(5)]);
    // 2.4 and 4.9 expected on 1..5, written on 0..1.
    let v = super::tests::floats(&cols, "concise");
    assert!((v[0].unwrap() - 0.35).abs() < 1e-4, "{v:?}");
    assert!((v[1].unwrap() - 0.975).abs() < 1e-4, "{v:?}");
    assert_eq!(
        super::tests::strings(&cols, "concise_reason"),
        [Some("Wordy and wrong.".into()), None],
        "0.35 is below the threshold 4 (0.75); 0.975 is not"
    );
    assert_eq!(
        super::tests::strings(&cols, "concise_source"),
        [Some("judge".into()), Some("judge".into())]
    );
    let requests = server.requests();
    assert_eq!(requests.len(), 3, "two cut answers and one reason");
    let users: Vec<String> = requests.iter().map(user_of).collect();
    assert!(
        users.contains(
            &"Policy 4.2\nReference: Paris is the capital of France\nAnswer: Lyon".to_string()
        ),
        "{users:?}"
    );
    assert!(
        users.contains(
            &"Policy \nReference: Water boils at 100 C\nAnswer: It boils at 90 C".to_string()
        ),
        "a null value is empty text: {users:?}"
    );
    let system = requests[0].body["messages"][0]["content"].as_str().unwrap();
    assert!(system.starts_with("Rate how concise the answer is.\nReply with a JSON object only: {\"score\": integer 1-5,"), "{system}");
    assert_eq!(
        requests[0].body["response_format"]["json_schema"]["schema"]["properties"]["score"],
        json!({"type": "integer", "minimum": 1, "maximum": 5})
    );
}

#[test]
fn a_defined_ten_split_into_digits_is_read_as_ten() {
    let server = start(|_: &Request, _| {
        cut_score(&[
            ("1", &[("1", 0.7), ("9", 0.3)]),
            ("0", &[("0", 0.9), (",", 0.1)]),
        ])
    });
    let text = RUBRICS.replace("scale = [1, 5]", "scale = [1, 10]");
    let (mut stage, _f) = stage_of(&text, &server.url, &["concise"], None);
    let cols = stage
        .score_batch(
            &batch_with_policy(),
            &[Wanted::Every, Wanted::Every],
            &ChainValues::none(),
        )
        .unwrap();
    let scores = u8s(&cols, "concise_score");
    assert_eq!(scores, [Some(10), Some(10)]);
    // 0.7 * (0.9 * 10 + 0.1 * 1) + 0.3 * 9 = 9.07 on 1..10.
    let v = super::tests::floats(&cols, "concise");
    assert!((v[0].unwrap() - (9.07 - 1.0) / 9.0).abs() < 1e-4, "{v:?}");
}

#[test]
fn a_defined_verdict_passes_at_its_own_threshold() {
    let server = start(|_: &Request, _| {
        let verdict: &[(&str, f64)] = &[(" false", 0.2), (" true", 0.8)];
        chat_with_logprobs(
            "{\"verdict\": true",
            &[
                ("{\"", &[("{\"", 1.0)]),
                ("verdict", &[("verdict", 1.0)]),
                ("\":", &[("\":", 1.0)]),
                (" true", verdict),
            ],
        )
    });
    let (mut stage, _f) = stage_of(RUBRICS, &server.url, &["cites"], None);
    let mut b = batch();
    b.set_answers(b.reference().clone(), super::tests::text(&["Lyon", ""]));
    let cols = stage
        .score_batch(&b, &[Wanted::Every, Wanted::Every], &ChainValues::none())
        .unwrap();
    // P(true) 0.8 is below the rubric's 0.9 (the run's --judge-threshold is 0.5).
    assert_eq!(
        super::tests::bools(&cols, "cites"),
        [Some(false), Some(false)]
    );
    let p = super::tests::floats(&cols, "cites_p");
    assert!(
        (p[0].unwrap() - 0.8).abs() < 1e-4 && p[1].is_none(),
        "{p:?}"
    );
    assert_eq!(
        super::tests::strings(&cols, "cites_source"),
        [Some("judge".into()), Some("rule".into())],
        "an empty output fails by rule"
    );
}

#[test]
fn a_changed_rubric_is_never_answered_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(|_: &Request, _| chat(r#"{"score": 5, "reason": "fine"}"#));
    let run = |text: &str| {
        let (mut stage, _f) = stage_of(
            text,
            &server.url,
            &["concise"],
            Some(dir.path().to_path_buf()),
        );
        let cols = stage
            .score_batch(
                &batch_with_policy(),
                &[Wanted::Every, Wanted::Every],
                &ChainValues::none(),
            )
            .unwrap();
        super::tests::strings(&cols, "concise_source")
    };
    let judged = vec![Some("judge".to_string()); 2];
    let cached = vec![Some("cache".to_string()); 2];
    assert_eq!(run(RUBRICS), judged);
    assert_eq!(run(RUBRICS), cached, "the same rubric: from the cache");
    assert_eq!(server.requests().len(), 2);
    let reworded = RUBRICS.replace("Rate how concise", "Rate how short");
    assert_eq!(run(&reworded), judged, "new instructions: asked again");
    let rethresholded = RUBRICS.replace("threshold = 4", "threshold = 3");
    assert_eq!(
        run(&rethresholded),
        judged,
        "which rows get reasons changed: asked again"
    );
    assert_eq!(server.requests().len(), 6);
    assert_eq!(run(&reworded), cached);
}
