//! The judge's part of a run's fingerprint: every judge setting that
//! changes a result value, as explicit text, so that `--resume` continues
//! only the run it was started as. Beside [`crate::JudgeStage`]'s summary,
//! but on the options: a run is checked before any stage is built.

use serde_json::{json, Map, Value};

use crate::batch::BatchMode;
use crate::metric::JudgeMetric;
use crate::prompts;
use crate::JudgeOptions;

impl JudgeOptions {
    /// The judge's fingerprint entries for a run in `batch` mode (none:
    /// online). The chosen metrics are in the run record by name (not
    /// here); the prompt versions are keyed by the chosen metrics' names,
    /// so a built-in metric added later changes nothing of a run without
    /// it. The other keys and texts are those earlier versions stored, so
    /// their interrupted runs still resume.
    pub fn fingerprint(&self, batch: Option<&BatchMode>) -> Vec<(String, Value)> {
        let mut f = vec![
            // The URL as shown (credentials redacted): the fingerprint is stored.
            (
                "judge_endpoint".into(),
                json!({"url": self.endpoint.display_url(), "model": self.endpoint.model,
                       "band": self.tiers.fingerprint(), "where": self.where_column,
                       "reasons": self.reasons.name(), "threshold": self.threshold}),
            ),
            ("judge_templates".into(), self.chosen_template_versions()),
        ];
        // The protocol changes every request; only when not the default
        // API's, so runs started before it was a choice still resume.
        if let Some(api) = self.endpoint.api.recorded() {
            f.push(("judge_api".into(), json!(api)));
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

    /// The prompt versions of the chosen built-in judge metrics, by name
    /// (the fact ratio's two, extraction and check, joined by a comma;
    /// defined metrics keep theirs in `judge_metrics`).
    fn chosen_template_versions(&self) -> Value {
        let versions: Map<String, Value> = crate::metric::builtin()
            .iter()
            .filter(|m| self.metrics.contains(m.metric()))
            .map(|m| {
                let version = match m {
                    JudgeMetric::Rubric(r) => r.template.hash(),
                    JudgeMetric::FactRatio => format!(
                        "{},{}",
                        prompts::FACT_EXTRACT.hash(),
                        prompts::FACT_CHECK.hash()
                    ),
                };
                (m.name().to_string(), json!(version))
            })
            .collect();
        Value::Object(versions)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;

    #[test]
    fn prompt_versions_are_keyed_by_the_chosen_builtin_metrics_alone() {
        let names = ["meaning_match", "fact_similarity"];
        let options = crate::stage::tests::options("http://127.0.0.1:9", &names, None);
        let f: BTreeMap<String, _> = options.fingerprint(None).into_iter().collect();
        // Nothing flags the built-ins by position: a metric added to refscore
        // would change every run's record.
        assert!(!f.contains_key("judge"), "{f:?}");
        // Every built-in template's version, in registry order: the list the
        // first run record format kept (crates/job/src/record.rs maps it).
        let v = crate::template_versions();
        assert_eq!(
            f["judge_templates"],
            json!({"meaning_match": v[0], "fact_similarity": format!("{},{}", v[2], v[3])})
        );
    }
}
