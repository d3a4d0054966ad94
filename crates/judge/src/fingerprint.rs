//! The judge's part of a run's fingerprint: every judge setting that
//! changes a result value, as explicit text, so that `--resume` continues
//! only the run it was started as. Beside [`crate::JudgeStage`]'s summary,
//! but on the options: a run is checked before any stage is built.

use refscore_core::metric::Group;
use serde_json::{json, Value};

use crate::batch::BatchMode;
use crate::{Api, JudgeOptions};

impl JudgeOptions {
    /// The judge's fingerprint entries for a run in `batch` mode (none:
    /// online). The keys and texts are those earlier versions stored, so
    /// their interrupted runs still resume.
    pub fn fingerprint(&self, batch: Option<&BatchMode>) -> Vec<(String, Value)> {
        let mut f = vec![
            ("judge".into(), json!(self.metrics.flags(Group::Judge))),
            // The URL as shown (credentials redacted): the fingerprint is stored.
            (
                "judge_endpoint".into(),
                json!({"url": self.endpoint.display_url(), "model": self.endpoint.model,
                       "band": self.tiers.fingerprint(), "where": self.where_column,
                       "reasons": self.reasons.name(), "threshold": self.threshold}),
            ),
            ("judge_templates".into(), json!(crate::template_versions())),
        ];
        // The protocol changes every request; only when not OpenAI's, so
        // runs started before it was a choice still resume.
        if self.endpoint.api != Api::OpenAi {
            f.push(("judge_api".into(), json!(self.endpoint.api.name())));
        }
        // A run's open batches are collected only by the same mode; only
        // when set, so online runs started before still resume.
        if let Some(mode) = batch {
            f.push(("judge_batch".into(), json!(mode.name())));
        }
        // Only where the fact ratio runs a part locally, likewise.
        if let Some(local) = crate::local_facts::fingerprint(self.facts, self.fact_check.as_ref()) {
            f.push(("judge_facts".into(), local));
        }
        // Only with a defined metric chosen, so earlier runs still resume.
        let defined = self.judge_metrics.record(&self.metrics);
        if !defined.is_empty() {
            f.push(("judge_metrics".into(), json!(defined)));
        }
        f
    }
}
