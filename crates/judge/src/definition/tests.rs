//! Definitions: the built-in rubrics send what they sent before they were
//! definitions, and every bad definition fails before any call, naming the
//! file, line and key.

use std::io::Write;

use super::*;
use crate::metric::JudgeMetrics;

/// The definitions of a file on disk.
fn read(path: &Path, only_definitions: bool) -> Result<Vec<Rubric>, Error> {
    super::read(
        path,
        &std::fs::read_to_string(path).unwrap(),
        only_definitions,
    )
}

// The built-in prompts as the code wrote them before they were definitions
// (copied from refscore 0.x's prompts.rs), so a change of what is sent
// cannot hide in the move.
macro_rules! meaning_match_rules {
    () => {
        "You are a strict grader. You compare a candidate answer with a reference answer to the \
same question and decide whether the candidate gives the same core answer: the same fact, entity or value.\n\
Rules:\n\
- Judge only the core answer, not style, tone or length.\n\
- Aliases, synonyms, abbreviations and paraphrases count as the same (\"NYC\" = \"New York City\", \"Da Vinci\" = \"Leonardo da Vinci\").\n\
- Ignore differences of case, punctuation, whitespace, articles, formatting and small typos.\n\
- Digits and number words are equal (\"100\" = \"one hundred\").\n\
- Extra detail is fine unless it changes or contradicts the core answer.\n\
- If the candidate offers the right answer next to wrong alternatives (\"Paris or Lyon\"), it does not match.\n\
- A hedged, uncertain or incomplete answer does not match.\n\
"
    };
}

/// The similarity rubric.
macro_rules! similarity_rubric {
    () => {
        "You are a strict grader. Rate how similar a candidate answer is to a reference answer to the \
same question, on an integer scale from 0 to 10:\n\
10: nearly identical in meaning, structure, accuracy and completeness.\n\
8-9: high overlap; only very minor omissions or differences of phrasing.\n\
6-7: most facts present, but some are partly wrong, incomplete or vague.\n\
4-5: major elements missing or misrepresented.\n\
1-3: very little overlap.\n\
0: unrelated or wrong.\n\
Weigh factual accuracy, completeness, semantic similarity, terminology and structure, and above all the \
precision of quantities, names and categories (doses, figures, units). Be strict: penalise omissions and \
wrong values. Answers may be long or structured (lists, JSON); compare their content.\n\
"
    };
}

fn rubric(i: usize) -> Template {
    builtin_rubrics()[i].template.clone()
}

#[test]
fn the_built_in_rubrics_send_what_they_sent_before() {
    let (mm, sim) = (rubric(0), rubric(1));
    assert_eq!(
        mm.system,
        concat!(meaning_match_rules!(), "Reply with a JSON object only: {\"meaning_match\": true or false, \"reason\": \"one or two sentences\"}.")
    );
    assert_eq!(
        sim.system,
        concat!(similarity_rubric!(), "Reply with a JSON object only: {\"score\": integer 0-10, \"rationale\": \"two to four sentences\"}.")
    );
    assert_eq!(
        mm.schema().to_string(),
        json!({"type": "object", "properties": {
            "meaning_match": {"type": "boolean"},
            "reason": {"type": "string"}},
            "required": ["meaning_match", "reason"], "additionalProperties": false})
        .to_string()
    );
    assert_eq!(
        sim.schema().to_string(),
        json!({"type": "object", "properties": {
            "score": {"type": "integer", "minimum": 0, "maximum": 10},
            "rationale": {"type": "string"}},
            "required": ["score", "rationale"], "additionalProperties": false})
        .to_string()
    );
    assert_eq!((mm.max_tokens, sim.max_tokens), (256, 512));
    let row = minijinja::context! { input => "Q", reference => "R", output => "O", row => BTreeMap::<&str, &str>::new() };
    for t in [mm, sim] {
        assert_eq!(
            t.render_row(&row).unwrap(),
            "Question:\nQ\n\nReference answer:\nR\n\nCandidate answer:\nO"
        );
    }
}

#[test]
fn row_values_are_pasted_never_read_as_template() {
    let row = minijinja::context! {
        input => "Which {{ reference }} is meant?",
        reference => "Write {output} or {{ output }} in the template",
        output => "CANDIDATE",
        row => BTreeMap::<&str, &str>::new(),
    };
    let got = rubric(0).render_row(&row).unwrap();
    assert_eq!(
        got,
        "Question:\nWhich {{ reference }} is meant?\n\nReference answer:\n\
         Write {output} or {{ output }} in the template\n\nCandidate answer:\nCANDIDATE"
    );
    assert_eq!(got.matches("CANDIDATE").count(), 1);
}

/// A file holding `text`.
fn file(text: &str) -> tempfile::NamedTempFile {
    let mut f = tempfile::Builder::new().suffix(".toml").tempfile().unwrap();
    f.write_all(text.as_bytes()).unwrap();
    f
}

const TWO: &str = r#"
[judge.metric.same_language]
answer = "verdict"
threshold = 0.6
instructions = "You check languages."
prompt = """Question: {{ input }}
Answer: {{ output }}
Policy: {{ row.policy_section }}"""

[judge.metric.concise]
answer = "score"
scale = [1, 5]
threshold = 4
band = false
prompt = "Reference: {{ reference }}\nAnswer: {{ output }}"
"#;

#[test]
fn definitions_become_metrics_with_their_columns_and_thresholds() {
    let f = file(TWO);
    let defined = read(f.path(), true).unwrap();
    let (concise, lang) = (&defined[0], &defined[1]);
    assert_eq!(concise.name(), "concise");
    assert_eq!(
        concise.metric.output_columns(),
        [
            "concise_score",
            "concise",
            "concise_reason",
            "concise_source"
        ]
    );
    assert_eq!(concise.metric.kind, Kind::Score);
    assert!(
        (concise.metric.default_threshold - 0.75).abs() < 1e-12,
        "4 on 1..5"
    );
    assert!(!concise.metric.reads_input);
    assert!(concise.columns.is_empty());
    assert_eq!(
        lang.metric.output_columns(),
        [
            "same_language",
            "same_language_p",
            "same_language_reason",
            "same_language_source"
        ]
    );
    assert_eq!(lang.p_threshold(), Some(0.6));
    assert_eq!(lang.columns, ["policy_section"]);
    assert!(lang.metric.reads_input);
    let t = &lang.template;
    assert_eq!(
        t.system,
        "You check languages.\nReply with a JSON object only: {\"verdict\": true or false, \"reason\": \"one or two sentences\"}."
    );
    let row = minijinja::context! {
        input => "Q", reference => "R", output => "O",
        row => BTreeMap::from([("policy_section", "4.2")]),
    };
    assert_eq!(
        t.render_row(&row).unwrap(),
        "Question: Q\nAnswer: O\nPolicy: 4.2"
    );
    assert!(t.hash().starts_with("same_language-def-"));
    // A changed prompt is another version.
    let g = file(&TWO.replace("Policy:", "Section:"));
    let again = read(g.path(), true).unwrap();
    assert_ne!(again[1].template.hash(), lang.template.hash());
    assert_eq!(again[0].template.hash(), concise.template.hash());
}

#[test]
fn show_prints_a_definition_that_reads_back_the_same() {
    let f = file(TWO);
    let mut known = JudgeMetrics::builtin();
    known.read(f.path(), true).unwrap();
    let shown = known.show("concise").unwrap();
    let g = file(&shown);
    let back = read(g.path(), true).unwrap();
    let (a, b) = (
        back[0].definition.clone(),
        known
            .named("concise")
            .and_then(|j| j.rubric().map(|r| r.definition.clone()))
            .unwrap(),
    );
    assert_eq!(
        Definition {
            origin: String::new(),
            ..a
        },
        Definition {
            origin: String::new(),
            ..b
        }
    );
    // A built-in, copied under another name, asks the same question.
    let mm = known.show("meaning_match").unwrap();
    let h = file(&mm.replace("[judge.metric.meaning_match]", "[judge.metric.my_match]"));
    let mine = read(h.path(), true).unwrap().remove(0);
    let row = minijinja::context! { input => "Q", reference => "R", output => "O", row => BTreeMap::<&str, &str>::new() };
    assert_eq!(
        mine.template.render_row(&row).unwrap(),
        rubric(0).render_row(&row).unwrap()
    );
    assert!(mine.template.system.starts_with(MEANING_MATCH_RULES));
    assert!(known.show("fact_similarity").is_none());
    assert!(known.listing().contains("concise"));
}

#[test]
fn bad_definitions_fail_with_file_line_and_key() {
    let cases: &[(&str, &str)] = &[
        (
            "answer = \"score\"\nscale = [5, 1]\nprompt = \"{{ output }}\"",
            "scale: [5, 1] is not a scale",
        ),
        (
            "answer = \"score\"\nscale = []\nprompt = \"{{ output }}\"",
            "scale: [] is not a scale",
        ),
        (
            "answer = \"score\"\nprompt = \"{{ output }}\"",
            "a score needs its scale",
        ),
        (
            "answer = \"score\"\nscale = [1, 5]\nthreshold = 7\nprompt = \"{{ output }}\"",
            "threshold: 7 is outside the scale [1, 5]",
        ),
        (
            "answer = \"verdict\"\nthreshold = 2\nprompt = \"{{ output }}\"",
            "threshold: 2: a verdict passes",
        ),
        (
            "answer = \"verdict\"\nscale = [1, 5]\nprompt = \"{{ output }}\"",
            "scale: only a score",
        ),
        (
            "answer = \"grade\"\nprompt = \"{{ output }}\"",
            "answer: 'grade'",
        ),
        (
            "answer = \"verdict\"\nprompt = \"{{ output }} {{ answer }}\"",
            "unknown slot 'answer'",
        ),
        (
            "answer = \"verdict\"\nprompt = \"{{ reference }}\"",
            "never shows the output",
        ),
        (
            "answer = \"verdict\"\nprompt = \"{{ output \"",
            "does not compile",
        ),
        (
            "answer = \"verdict\"\nprompt = \"{{ output | no_such_filter }}\"",
            "unknown filter",
        ),
        (
            "answer = \"verdict\"\nprompt = \"{{ output }} {{ row }}\"",
            "row.NAME",
        ),
        ("answer = \"verdict\"\nprompt = \"\"", "prompt: is empty"),
        (
            "answer = \"verdict\"\nprompt = \"{{ output }}\"\nscael = 1",
            "unknown field `scael`",
        ),
        (
            "answer = \"verdict\"\nprompt = \"{{ output }}\"\nmax_tokens = 3",
            "max_tokens: 3",
        ),
        (
            "answer = \"score\"\nscale = [1, 5]\nband = true\nprompt = \"{{ output }}\"",
            "band: only a verdict",
        ),
    ];
    for (body, want) in cases {
        let f = file(&format!("# rubrics\n[judge.metric.mine]\n{body}\n"));
        let err = read(f.path(), true).unwrap_err();
        assert_eq!(err.class, refscore_core::ErrorClass::Config, "{body}");
        // The line of the key at fault: "KEY: why", or the prompt's for its
        // template errors, the answer's for a score without a scale.
        let key = match want.split_once(':') {
            Some((k, _)) if !k.contains(' ') => k,
            _ if want.contains("scael") => "scael",
            _ if want.contains("needs its scale") => "answer",
            _ => "prompt",
        };
        let line = 3 + body
            .lines()
            .position(|l| l.starts_with(&format!("{key} =")))
            .unwrap_or_else(|| panic!("{body}: no line for {key}"));
        let at = format!("{}:{line}:", f.path().display());
        assert!(
            err.message.starts_with(&at),
            "{body}: want {at}: {}",
            err.message
        );
        assert!(err.message.contains(want), "{body}: {}", err.message);
        assert!(
            err.message.contains("[judge.metric.mine]") || want.contains("unknown field"),
            "{body}: {}",
            err.message
        );
    }
    for name in [
        "meaning_match",
        "similarity_rationale",
        "status",
        "judge",
        "bertscore",
        "judge_templates",
        "Bad",
        "9x",
    ] {
        let f = file(&format!(
            "[judge.metric.{name}]\nanswer = \"verdict\"\nprompt = \"{{{{ output }}}}\"\n"
        ));
        let err = read(f.path(), true).unwrap_err();
        assert!(
            err.message.contains(&format!("[judge.metric.{name}]")),
            "{name}: {}",
            err.message
        );
        assert!(err.message.contains(":1:"), "{name}: {}", err.message);
    }
    let f = file("metrics = [\"judge\"]\n[judge.metric.mine]\nanswer = \"verdict\"\nprompt = \"{{ output }}\"\n");
    let err = read(f.path(), true).unwrap_err();
    assert!(
        err.message.contains("unknown key `metrics`"),
        "{}",
        err.message
    );
    assert_eq!(
        read(f.path(), false).unwrap().len(),
        1,
        "a config file's other keys are flags"
    );
    let mut known = JudgeMetrics::builtin();
    known.read(f.path(), false).unwrap();
    let err = known.read(f.path(), false).unwrap_err();
    assert!(
        err.message.contains("'mine' is defined twice"),
        "{}",
        err.message
    );
}
