//! What deciding one judge metric for one row yields: the value
//! ([`Outcome`]) and what settled it ([`Source`], written to
//! `<metric>_source`).

use std::sync::Arc;

use refscore_core::schema::source;

/// How a judge metric was decided, as written to `<metric>_source`: the
/// column's values are the run's record of which step settled each value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Source {
    Rule,
    /// A tier of the chain, by its source name (`band:cosine`).
    Tier(Arc<str>),
    /// The fact ratio, its facts checked by a local NLI model.
    Nli,
    Cache,
    Judge,
}

impl Source {
    /// Whether a shared step settled it (a rule or a tier: the steps
    /// before [`super::asking`]'s), deciding alike for every judge of a
    /// panel, so no later judge is asked about it.
    pub(crate) fn shared(&self) -> bool {
        matches!(self, Source::Rule | Source::Tier(_))
    }

    /// The value `<metric>_source` holds for it.
    pub(crate) fn name(&self) -> &str {
        match self {
            Source::Rule => source::RULE,
            Source::Tier(name) => name,
            Source::Nli => source::NLI,
            Source::Cache => source::CACHE,
            Source::Judge => source::JUDGE,
        }
    }
}

/// The result of one metric for one row, whichever step settled it: the
/// output columns are built from it alike.
#[derive(Debug, Clone)]
pub(crate) enum Outcome {
    /// A verdict rubric's answer: the verdict, P(true) where the judge gave
    /// probabilities, the reason where one was asked for.
    Verdict {
        verdict: bool,
        p_true: Option<f32>,
        reason: Option<String>,
    },
    /// A score rubric's answer: the sampled score, the expected score where
    /// the judge gave probabilities, the reason where one was asked for.
    Score {
        score: u8,
        expected: Option<f32>,
        reason: Option<String>,
    },
    /// (matched, reference facts, output facts); counts unknown when decided by rule.
    Facts(Option<(u32, u32, u32)>),
}

/// One metric's decisions for the rows of a batch.
pub(crate) type Decisions = Vec<Option<(Outcome, Source)>>;
