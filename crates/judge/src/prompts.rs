//! The judge prompts, versioned in one place. Each template's hash goes into
//! the output and into cache keys, so a changed prompt never reuses old
//! answers and every score says which prompt produced it. The rubrics'
//! templates (Meaning Match, similarity, the user's) are built from their
//! definitions (`definition.rs`); the fact ratio's two are written here.

use std::borrow::Cow;
use std::sync::Arc;

use serde_json::{json, Value};
use sha2::{Digest, Sha256};

/// The JSON schema a reply must follow.
#[derive(Debug, Clone)]
pub(crate) enum Schema {
    /// Written in the code (the fact ratio's templates).
    Fixed(fn() -> Value),
    /// Built from a rubric's definition when it was read.
    Built(Value),
}

/// One prompt template: a system message and a user message with slots,
/// plus the JSON schema the reply must follow. The fact ratio's are
/// constants; a rubric's is built when its definition is read, and owns
/// its texts and its compiled user message.
#[derive(Debug, Clone)]
pub(crate) struct Template {
    pub name: Cow<'static, str>,
    pub version: &'static str,
    pub system: Cow<'static, str>,
    /// The user message's source: `{name}` slots, or a minijinja template
    /// when [`Template::jinja`] is set.
    pub user: Cow<'static, str>,
    /// The compiled user message of a rubric (its template is named
    /// [`Template::name`]); none for the fact ratio's brace templates.
    pub jinja: Option<Arc<minijinja::Environment<'static>>>,
    pub schema: Schema,
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
            &*self.name,
            self.version,
            &*self.system,
            &*self.user,
            &self.schema().to_string(),
        ] {
            h.update(part.as_bytes());
            h.update([0]);
        }
        let digest = h.finalize();
        format!("{}-{}-{}", self.name, self.version, hex(&digest[..6]))
    }

    /// The JSON schema a reply must follow.
    pub(crate) fn schema(&self) -> Value {
        match &self.schema {
            Schema::Fixed(f) => f(),
            Schema::Built(v) => v.clone(),
        }
    }

    /// Renders a rubric's user message for one row; `row` holds `input`,
    /// `reference`, `output` and the `row` map of the columns it reads.
    pub(crate) fn render_row(&self, row: &minijinja::Value) -> Result<String, String> {
        let env = self.jinja.as_ref().ok_or("not a rubric template")?;
        env.get_template(&self.name)
            .and_then(|t| t.render(row))
            .map_err(|e| format!("template of {} does not render: {e:#}", self.name))
    }

    /// Fills the user message's `{name}` slots in one pass over the
    /// template: a value is pasted as it is and never scanned again, so a
    /// reference that contains the text `{output}` stays as written. Braces
    /// that do not name a given slot are kept.
    pub(crate) fn render(&self, slots: &[(&str, &str)]) -> String {
        let extra: usize = slots.iter().map(|(_, v)| v.len()).sum();
        let mut out = String::with_capacity(self.user.len() + extra);
        let mut rest: &str = &self.user;
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

pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The fact ratio's check: does an answer state one fact? One word, so
/// that each fact costs one generated token, and the question and answer
/// come before the fact so every fact of a row shares the cached prefix.
pub(crate) const FACT_CHECK: Template = Template {
    name: Cow::Borrowed("fact_check"),
    version: "v1",
    system: Cow::Borrowed("You check whether an answer to a question states a given fact. The fact is stated when the \
answer says the same thing, in any words. It is not stated when the answer says something different, \
says nothing about it, or says something merely compatible with it but vaguer or less precise \
(\"more than 95\" does not state \"96 years old\"; \"fruit\" does not state \"apples\").\n\
Reply with one word: yes if the answer states the fact, no if it does not."),
    user: Cow::Borrowed("Question:\n{input}\n\nAnswer:\n{answer}\n\nFact:\n{fact}"),
    jinja: None,
    schema: Schema::Fixed(|| json!({"type": "boolean"})),
    max_tokens: 1,
    structured: false,
};

/// The facts of one answer, from its text alone: shown the question too, a
/// 1.5B judge adds the facts the question asks about ("Paris is the capital"
/// to "…and what language is spoken there?" gained "French is spoken").
/// The checks ([`FACT_CHECK`]) see the question.
pub(crate) const FACT_EXTRACT: Template = Template {
    name: Cow::Borrowed("fact_extract"),
    version: "v2",
    system: Cow::Borrowed("You split a text into atomic facts: short, self-contained statements that each assert one \
thing the text says. Never add a fact the text does not state. Do not merge two facts into one, and do not \
repeat a fact.\n\
Reply with a JSON object only: {\"facts\": [\"fact one\", \"fact two\", ...]}."),
    user: Cow::Borrowed("Text:\n{answer}"),
    jinja: None,
    schema: Schema::Fixed(|| {
        json!({"type": "object", "properties": {
            "facts": {"type": "array", "items": {"type": "string"}}},
            "required": ["facts"], "additionalProperties": false})
    }),
    max_tokens: 768,
    structured: true,
};

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hashes_are_stable_and_distinct() {
        assert_eq!(FACT_CHECK.hash(), FACT_CHECK.hash());
        assert!(FACT_CHECK.hash().starts_with("fact_check-v1-"));
        assert_ne!(FACT_CHECK.hash(), FACT_EXTRACT.hash());
        assert_eq!(
            FACT_CHECK.render(&[("input", "Q"), ("answer", "A"), ("fact", "F")]),
            "Question:\nQ\n\nAnswer:\nA\n\nFact:\nF"
        );
    }

    #[test]
    fn slot_values_are_never_rescanned() {
        // Filled one slot after another, the answer's literal "{fact}"
        // received the fact.
        let got = FACT_CHECK.render(&[
            ("input", "Which {answer} is meant?"),
            ("answer", "Write {fact} in the template"),
            ("fact", "FACT"),
        ]);
        assert_eq!(
            got,
            "Question:\nWhich {answer} is meant?\n\nAnswer:\n\
             Write {fact} in the template\n\nFact:\nFACT"
        );
        assert_eq!(got.matches("FACT").count(), 1);
    }

    #[test]
    fn braces_that_are_not_slots_are_kept() {
        let t = Template {
            user: Cow::Borrowed("{a} {unknown} {{a}} {b"),
            ..FACT_CHECK
        };
        assert_eq!(t.render(&[("a", "1")]), "1 {unknown} {1} {b");
    }
}
