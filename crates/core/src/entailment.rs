//! A local model that says how likely one text entails another: the seam
//! between the judge stage, which checks the fact ratio's facts with one
//! when asked (`--fact-check nli`), and the crate that runs the model (an
//! NLI cross-encoder in `refscore-embed`), so neither depends on the other.

use crate::Error;

/// One pair's answer: P(entailment), and whether the model's token limit
/// cut the pair (a hypothesis stated past the cut of a long premise reads
/// as unsupported, so such checks are counted and reported).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Entailed {
    /// The probability that the premise entails the hypothesis.
    pub p: f32,
    /// Whether truncation at the model's limit cut either text.
    pub truncated: bool,
}

/// P(entailment) of (premise, hypothesis) pairs, from a model on this
/// machine.
pub trait Entailment: Send + Sync {
    /// Each pair's P(entailment) and whether it was cut, in the pairs'
    /// order.
    fn entailment(&self, pairs: &[(&str, &str)]) -> Result<Vec<Entailed>, Error>;
}
