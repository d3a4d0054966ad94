//! A cross-encoder as a [`refscore_core::entailment::Entailment`]: what the
//! judge stage checks the fact ratio's facts with under `--fact-check nli`.
//! Under the plain `nli` recipe, an NLI model's P(entailment) as
//! `CrossEncoder.predict(..., apply_softmax=True)` gives it; under a checker
//! recipe (`factcg`, `minicheck`, `hhem`, a file), the recipe's support of
//! the fact given the premise, with its chunking and aggregation (what
//! `cross_score` gives for the same pair).

use std::sync::Arc;

use refscore_core::entailment::{Entailed, Entailment};
use refscore_core::Error;
use serde_json::{json, Value};

use super::{CrossCapability, CrossEncoder, CrossFolder, CrossOptions, CrossReport, NliLabels};

/// What a fact check reads of the model's outputs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FactReading {
    /// The entailment label's probability (this label index), on the plain
    /// pair: an NLI model under the `nli` recipe.
    Entailment(usize),
    /// The recipe's one support score: the premise in the recipe's chunks,
    /// aggregated as the recipe says (a checker recipe).
    Support,
}

/// A cross-encoder loaded for entailment checks.
pub struct NliEntailment {
    encoder: Arc<CrossEncoder>,
    reading: FactReading,
    fingerprint: Value,
}

impl NliEntailment {
    /// The entailment label of `folder`'s model (found by name, or given by
    /// `--nli-labels`' text), refused with the reason when it has none.
    pub fn labels(folder: &CrossFolder, nli_labels: Option<&str>) -> Result<NliLabels, Error> {
        let capability = CrossCapability::of(folder, nli_labels)?;
        capability.nli().ok_or_else(|| {
            let why = capability
                .why_not(&refscore_core::metric::NLI_PRECISION.name)
                .unwrap_or("the model has no entailment label");
            Error::config(format!(
                "--fact-check nli needs an NLI model or a checker recipe (--cross-recipe factcg|minicheck|hhem): {why}"
            ))
        })
    }

    /// What a check reads of `folder`'s model: the recipe's support score
    /// where the recipe reads one value, else the entailment label
    /// ([`NliEntailment::labels`], refused without one). Read from the
    /// folder alone, before any weights load.
    pub fn reading(folder: &CrossFolder, nli_labels: Option<&str>) -> Result<FactReading, Error> {
        let support = folder
            .recipe
            .score_labels(&folder.labels)
            .map_err(|why| Error::config(format!("{}: {why}", folder.files.dir.display())))?
            .is_some();
        if support {
            return Ok(FactReading::Support);
        }
        Ok(FactReading::Entailment(
            NliEntailment::labels(folder, nli_labels)?.entailment,
        ))
    }

    /// Loads `folder`'s model for entailment checks.
    pub fn load(
        folder: CrossFolder,
        nli_labels: Option<&str>,
        options: &CrossOptions,
    ) -> Result<NliEntailment, Error> {
        NliEntailment::reading(&folder, nli_labels)?;
        let encoder = Arc::new(CrossEncoder::load(folder.clone(), options)?);
        NliEntailment::sharing(&folder, nli_labels, options, encoder)
    }

    /// Entailment checks with `encoder`, a model already loaded from
    /// `folder` (the cross metrics' own, so one run holds one copy).
    pub fn sharing(
        folder: &CrossFolder,
        nli_labels: Option<&str>,
        options: &CrossOptions,
        encoder: Arc<CrossEncoder>,
    ) -> Result<NliEntailment, Error> {
        let reading = NliEntailment::reading(folder, nli_labels)?;
        let mut fingerprint = json!({
            "model_sha256": folder.files.content_sha256()?,
            "architecture": folder.architecture,
            "labels": folder.labels,
        });
        // A checker recipe's score is the recipe's (recorded below with
        // the recipe); the plain pair's is the entailment label's, in the
        // place it always had (the keys' order is part of the run's id).
        if let FactReading::Entailment(label) = reading {
            fingerprint["entailment"] = json!(label);
        }
        fingerprint["max_length"] = json!(folder.max_length());
        fingerprint["precision"] = json!(options.precision.fingerprint_text());
        if folder.drops_token_types() {
            fingerprint["token_types"] = json!(false);
        }
        if !folder.recipe.is_plain() {
            fingerprint["recipe"] = folder.recipe.fingerprint();
        }
        Ok(NliEntailment {
            encoder,
            reading,
            fingerprint,
        })
    }

    /// What changes its answers, for the run's fingerprint.
    pub fn fingerprint(&self) -> &Value {
        &self.fingerprint
    }
}

impl Entailment for NliEntailment {
    fn entailment(&self, pairs: &[(&str, &str)]) -> Result<Vec<Entailed>, Error> {
        let mut report = CrossReport::default();
        Ok(match self.reading {
            FactReading::Entailment(label) => self
                .encoder
                .predict(pairs, true, &mut report)?
                .into_iter()
                .map(|p| Entailed {
                    p: p.values[label],
                    truncated: p.truncated,
                })
                .collect(),
            FactReading::Support => self
                .encoder
                .support(pairs, &mut report)?
                .into_iter()
                .map(|s| Entailed {
                    p: s.score,
                    truncated: s.truncated,
                })
                .collect(),
        })
    }
}
