//! The judge prompts, versioned in one place. Each template's hash goes into
//! the output and into cache keys, so a changed prompt never reuses old
//! answers and every score says which prompt produced it.

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// One prompt template: a system message and a user message with `{name}`
/// slots, plus the JSON schema the reply must follow.
#[derive(Debug)]
pub(crate) struct Template {
    pub name: &'static str,
    pub version: &'static str,
    pub system: &'static str,
    pub user: &'static str,
    pub schema: fn() -> Value,
    pub max_tokens: u32,
    /// Sent with the negotiated structured output (JSON schema, JSON mode or
    /// plain text asking for JSON); false for one-word and free-text answers,
    /// which ask for no format.
    pub structured: bool,
}

impl Template {
    /// Short content hash of the template (name, version, texts, schema).
    pub(crate) fn hash(&self) -> String {
        let mut h = Sha256::new();
        for part in [
            self.name,
            self.version,
            self.system,
            self.user,
            &(self.schema)().to_string(),
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let digest = h.finalize();
        format!("{}-{}-{}", self.name, self.version, hex(&digest[..6]))
    }

    /// Fills the user message's `{name}` slots in one pass over the
    /// template: a value is pasted as it is and never scanned again, so a
    /// reference that contains the text `{output}` stays as written. Braces
    /// that do not name a given slot are kept.
    pub(crate) fn render(&self, slots: &[(&str, &str)]) -> String {
        let extra: usize = slots.iter().map(|(_, v)| v.len()).sum();
        let mut out = String::with_capacity(self.user.len() + extra);
        let mut rest = self.user;
        while let Some(open) = rest.find('{') {
            out.push_str(&rest[..open]);
            let after = &rest[open + 1..];
            let filled = after.find('}').and_then(|close| {
                let name = &after[..close];
                slots
                    .iter()
                    .find(|(k, _)| *k == name)
                    .map(|(_, v)| (*v, close))
            });
            match filled {
                Some((value, close)) => {
                    out.push_str(value);
                    rest = &after[close + 1..];
                }
                None => {
                    out.push('{');
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    }
}

/// Every template, for the run's fingerprint and the summary.
pub(crate) const ALL: [&Template; 4] = [&MEANING_MATCH, &SIMILARITY, &FACT_EXTRACT, &FACT_CHECK];

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The instructions of Meaning Match.
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

pub(crate) const MEANING_MATCH: Template = Template {
    name: "meaning_match",
    version: "v1",
    system: concat!(meaning_match_rules!(), "Reply with a JSON object only: {\"meaning_match\": true or false, \"reason\": \"one or two sentences\"}."),
    user: "Question:\n{input}\n\nReference answer:\n{reference}\n\nCandidate answer:\n{output}",
    schema: || {
        json!({"type": "object", "properties": {
            "meaning_match": {"type": "boolean"},
            "reason": {"type": "string"}},
            "required": ["meaning_match", "reason"], "additionalProperties": false})
    },
    max_tokens: 256,
    structured: true,
};

pub(crate) const SIMILARITY: Template = Template {
    name: "similarity",
    version: "v1",
    system: concat!(similarity_rubric!(), "Reply with a JSON object only: {\"score\": integer 0-10, \"rationale\": \"two to four sentences\"}."),
    user: "Question:\n{input}\n\nReference answer:\n{reference}\n\nCandidate answer:\n{output}",
    schema: || {
        json!({"type": "object", "properties": {
            "score": {"type": "integer", "minimum": 0, "maximum": 10},
            "rationale": {"type": "string"}},
            "required": ["score", "rationale"], "additionalProperties": false})
    },
    max_tokens: 512,
    structured: true,
};

/// The fact ratio's check: does an answer state one fact? One word, so
/// that each fact costs one generated token, and the question and answer
/// come before the fact so every fact of a row shares the cached prefix.
pub(crate) const FACT_CHECK: Template = Template {
    name: "fact_check",
    version: "v1",
    system: "You check whether an answer to a question states a given fact. The fact is stated when the \
answer says the same thing, in any words. It is not stated when the answer says something different, \
says nothing about it, or says something merely compatible with it but vaguer or less precise \
(\"more than 95\" does not state \"96 years old\"; \"fruit\" does not state \"apples\").\n\
Reply with one word: yes if the answer states the fact, no if it does not.",
    user: "Question:\n{input}\n\nAnswer:\n{answer}\n\nFact:\n{fact}",
    schema: || json!({"type": "boolean"}),
    max_tokens: 1,
    structured: false,
};

/// The facts of one answer, from its text alone: shown the question too, a
/// 1.5B judge adds the facts the question asks about ("Paris is the capital"
/// to "…and what language is spoken there?" gained "French is spoken").
/// The checks ([`FACT_CHECK`]) see the question.
pub(crate) const FACT_EXTRACT: Template = Template {
    name: "fact_extract",
    version: "v2",
    system: "You split a text into atomic facts: short, self-contained statements that each assert one \
thing the text says. Never add a fact the text does not state. Do not merge two facts into one, and do not \
repeat a fact.\n\
Reply with a JSON object only: {\"facts\": [\"fact one\", \"fact two\", ...]}.",
    user: "Text:\n{answer}",
    schema: || {
        json!({"type": "object", "properties": {
            "facts": {"type": "array", "items": {"type": "string"}}},
            "required": ["facts"], "additionalProperties": false})
    },
    max_tokens: 768,
    structured: true,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_distinct() {
        let hashes: Vec<String> = ALL.iter().map(|t| t.hash()).collect();
        assert_eq!(hashes[0], MEANING_MATCH.hash());
        assert!(hashes[0].starts_with("meaning_match-v1-"));
        for i in 0..ALL.len() {
            for j in i + 1..ALL.len() {
                assert_ne!(hashes[i], hashes[j]);
            }
        }
        assert_eq!(
            MEANING_MATCH.render(&[("input", "Q"), ("reference", "R"), ("output", "O")]),
            "Question:\nQ\n\nReference answer:\nR\n\nCandidate answer:\nO"
        );
    }
}

#[cfg(test)]
mod render_tests {
    use super::*;

    #[test]
    fn slot_values_are_never_rescanned() {
        // Filled one slot after another, the reference's literal "{output}"
        // received the candidate answer.
        let got = MEANING_MATCH.render(&[
            ("input", "Which {reference} is meant?"),
            ("reference", "Write {output} in the template"),
            ("output", "CANDIDATE"),
        ]);
        assert_eq!(
            got,
            "Question:\nWhich {reference} is meant?\n\nReference answer:\n\
             Write {output} in the template\n\nCandidate answer:\nCANDIDATE"
        );
        assert_eq!(got.matches("CANDIDATE").count(), 1);
    }

    #[test]
    fn braces_that_are_not_slots_are_kept() {
        let t = Template {
            user: "{a} {unknown} {{a}} {b",
            ..MEANING_MATCH
        };
        assert_eq!(t.render(&[("a", "1")]), "1 {unknown} {1} {b");
    }
}

#[cfg(test)]
mod order_tests {
    use super::*;

    #[test]
    fn schemas_list_the_verdict_before_the_explanation() {
        // Grammar-constrained servers generate keys in schema order; the short
        // verdict must come before the free text that could run out of tokens.
        let keys = |t: &Template| -> Vec<String> {
            (t.schema)()["properties"]
                .as_object()
                .unwrap()
                .keys()
                .cloned()
                .collect()
        };
        assert_eq!(keys(&SIMILARITY), ["score", "rationale"]);
        assert_eq!(keys(&MEANING_MATCH), ["meaning_match", "reason"]);
    }
}
