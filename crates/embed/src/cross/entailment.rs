//! An NLI cross-encoder as a [`refscore_core::entailment::Entailment`]:
//! what the judge stage checks the fact ratio's facts with under
//! `--fact-check nli`, P(entailment) as `CrossEncoder.predict(...,
//! apply_softmax=True)` gives it.

use std::sync::Arc;

use refscore_core::entailment::{Entailed, Entailment};
use refscore_core::Error;
use serde_json::{json, Value};

use super::{CrossCapability, CrossEncoder, CrossFolder, CrossOptions, CrossReport, NliLabels};

/// An NLI model loaded for entailment checks.
pub struct NliEntailment {
    encoder: Arc<CrossEncoder>,
    labels: NliLabels,
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
            Error::config(format!("--fact-check nli needs an NLI model: {why}"))
        })
    }

    /// Loads `folder`'s model for entailment checks.
    pub fn load(
        folder: CrossFolder,
        nli_labels: Option<&str>,
        options: &CrossOptions,
    ) -> Result<NliEntailment, Error> {
        NliEntailment::labels(&folder, nli_labels)?;
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
        let labels = NliEntailment::labels(folder, nli_labels)?;
        let mut fingerprint = json!({
            "model_sha256": folder.files.content_sha256()?,
            "architecture": folder.architecture,
            "labels": folder.labels,
            "entailment": labels.entailment,
            "max_length": folder.max_length(),
            "precision": options.precision.name(),
        });
        if folder.drops_token_types() {
            fingerprint["token_types"] = json!(false);
        }
        if !folder.recipe.is_plain() {
            fingerprint["recipe"] = folder.recipe.fingerprint();
        }
        Ok(NliEntailment {
            encoder,
            labels,
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
        Ok(self
            .encoder
            .predict(pairs, true, &mut report)?
            .into_iter()
            .map(|p| Entailed {
                p: p.values[self.labels.entailment],
                truncated: p.truncated,
            })
            .collect())
    }
}
