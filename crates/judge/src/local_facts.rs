//! The fact ratio without an LLM: an answer's sentences as its facts
//! (`--facts sentences`, instead of asking the judge to extract them) and a
//! local NLI model deciding whether each fact holds (`--fact-check nli`,
//! instead of one judge question per fact). Either alone or both: with
//! both, `fact_similarity` needs no judge call at all.

use std::sync::Arc;

use refscore_core::entailment::Entailment;
use serde_json::{json, Value};

/// Where the fact ratio's facts come from (`--facts`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FactSource {
    /// The judge extracts each answer's atomic facts (one call per
    /// distinct answer).
    #[default]
    Judge,
    /// Each answer's sentences are its facts ([`sentences`]); no call.
    Sentences,
}

impl FactSource {
    /// Reads `--facts`' value.
    pub fn parse(s: &str) -> Result<FactSource, String> {
        match s {
            "judge" => Ok(FactSource::Judge),
            "sentences" => Ok(FactSource::Sentences),
            other => Err(format!("'{other}': expected judge or sentences")),
        }
    }

    /// The name `--facts` takes.
    pub fn name(self) -> &'static str {
        match self {
            FactSource::Judge => "judge",
            FactSource::Sentences => "sentences",
        }
    }
}

/// `--fact-check nli`: each fact holds where the model's score of (the
/// other answer, the fact) is at least `threshold`: an NLI model's
/// P(entailment), or under a checker recipe (`--cross-recipe factcg`, ...)
/// the recipe's support over the other answer's chunks.
#[derive(Clone)]
pub struct NliFactCheck {
    /// The model (`--cross-model`).
    pub model: Arc<dyn Entailment>,
    /// `--fact-check-threshold`.
    pub threshold: f32,
    /// What changes the model's answers (its files and labels), for the
    /// run's fingerprint.
    pub fingerprint: Value,
    /// What the summary says of the model, so that a reader knows which
    /// one checked the facts: `--cross-model` as given, its architecture
    /// and entailment label (or its checker recipe).
    pub described: Value,
}

impl std::fmt::Debug for NliFactCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NliFactCheck")
            .field("threshold", &self.threshold)
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

/// `--fact-check-threshold`'s default: a fact holds at even odds.
pub const DEFAULT_FACT_CHECK_THRESHOLD: f32 = 0.5;

/// An answer's sentences, trimmed, blank ones dropped: Wikimedia's
/// sentencex segmenter with its English rules, which know abbreviations
/// ("Mr.", "Dr.", "e.g.", "vs."), initials, decimals and numbered list
/// items, and end a sentence at other scripts' full stops too ("。").
/// (UAX #29's boundaries, used before, split after "Mr." before a capital
/// and after a list item's "1.".)
pub fn sentences(answer: &str) -> Vec<String> {
    sentencex::segment("en", answer)
        .into_iter()
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(String::from)
        .collect()
}

/// The fingerprint entry of the fact ratio's local parts, where any is in
/// use (none with both defaults, so earlier runs still resume).
pub(crate) fn fingerprint(facts: FactSource, check: Option<&NliFactCheck>) -> Option<Value> {
    (facts != FactSource::Judge || check.is_some()).then(|| {
        json!({
            "facts": facts.name(),
            "check": check.map_or(json!("judge"), |c| json!({
                "nli": c.fingerprint,
                "threshold": c.threshold,
            })),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Abbreviations, decimals and list numbers are not boundaries, other
    /// scripts' full stops are.
    #[test]
    fn an_answers_sentences_are_its_facts() {
        assert_eq!(
            sentences("Paris is the capital. It has 2.1 million people!  Is it big? "),
            [
                "Paris is the capital.",
                "It has 2.1 million people!",
                "Is it big?"
            ]
        );
        assert_eq!(
            sentences("東京は首都です。人口は多い。"),
            ["東京は首都です。", "人口は多い。"]
        );
        assert!(sentences("   ").is_empty());
        assert_eq!(sentences("no full stop"), ["no full stop"]);
        assert_eq!(
            sentences("Mr. Smith met Dr. Jones. They spoke, e.g. about the St. Mary's fund vs. the Jan. 2020 one."),
            [
                "Mr. Smith met Dr. Jones.",
                "They spoke, e.g. about the St. Mary's fund vs. the Jan. 2020 one."
            ]
        );
        assert_eq!(
            sentences("Prof. Lee, Ph.D., wrote it in 1999. It sold 2.5 million copies!"),
            [
                "Prof. Lee, Ph.D., wrote it in 1999.",
                "It sold 2.5 million copies!"
            ]
        );
        assert_eq!(
            sentences("Steps:\n1. Boil water.\n2. Add 3.5 g of salt."),
            ["Steps:", "1. Boil water.", "2. Add 3.5 g of salt."]
        );
    }
}
