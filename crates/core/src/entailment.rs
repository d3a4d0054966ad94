//! A local model that says how likely one text entails another: the seam
//! between the judge stage, which checks the fact ratio's facts with one
//! when asked (`--fact-check nli`), and the crate that runs the model (an
//! NLI cross-encoder in `refscore-embed`), so neither depends on the other.

use crate::Error;

/// P(entailment) of (premise, hypothesis) pairs, from a model on this
/// machine.
pub trait Entailment: Send + Sync {
    /// The probability that each pair's premise entails its hypothesis, in
    /// the pairs' order.
    fn entailment(&self, pairs: &[(&str, &str)]) -> Result<Vec<f32>, Error>;
}
