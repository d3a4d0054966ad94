//! Judge metrics as values of one type: what is asked, what kind of answer
//! comes back and how it is read, which rules decide without asking, and
//! (through the registry entry) which columns it writes. Meaning Match, the
//! similarity rubric and the user's rubrics are rubrics built from
//! definitions (`definition.rs`); the fact ratio runs its own pipeline of
//! extractions and checks on the same client, cache and journal.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::LazyLock;

use arrow::datatypes::Field;
use refscore_core::metric::{self, Catalog, Metric, MetricSet};
use refscore_core::Error;
use serde_json::{json, Value};

use crate::definition::{self, Definition};
use crate::prompts::{self, Template};

/// The kind of answer a rubric asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Answer {
    /// true or false, read with P(true); passes where P(true) reaches
    /// `--judge-threshold` (or the sampled word, without probabilities).
    Verdict,
    /// An integer on `min..=max`, read with its probability-weighted
    /// expectation and written normalised to 0..=1.
    Score { min: u8, max: u8 },
}

/// How a judge metric is asked.
#[derive(Debug)]
pub(crate) enum Asking {
    /// One question per row, rendered from a template.
    Rubric {
        template: &'static Template,
        answer: Answer,
        /// The JSON keys the answer's value may come under; the first is
        /// the one the prompt asks for (its token probabilities are read).
        value_keys: &'static [&'static str],
        /// The JSON keys the reason may come under; the first is the one
        /// the prompt asks for.
        reason_keys: &'static [&'static str],
    },
    /// The fact ratio: the facts of each answer extracted once, then one
    /// check per fact.
    Facts,
}

/// Rules that decide a value without asking the judge.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// The same answer as the reference (up to case, whitespace, articles
    /// and final punctuation) passes.
    pub same_answer_passes: bool,
    /// `--judge-band cosine:LO..HI` decides it outside the band.
    pub cosine_band: bool,
}

/// One judge metric. (An empty output fails every judge metric, by rule.)
#[derive(Debug)]
pub(crate) struct JudgeMetric {
    /// Its registry entry: name, columns, default threshold.
    pub metric: &'static Metric,
    /// What is asked and how the answer is read.
    pub asking: Asking,
    /// The rules that decide it without a call.
    pub rules: Rules,
    /// The input columns its prompt reads (`row.NAME`), sorted.
    pub columns: Vec<&'static str>,
    /// The definition it was built from (none for the fact ratio).
    pub definition: Option<Definition>,
}

impl JudgeMetric {
    /// The name, as `--metrics` and messages use it.
    pub fn name(&self) -> &'static str {
        self.metric.name
    }

    /// The template of a rubric (none for the fact ratio).
    pub fn template(&self) -> Option<&'static Template> {
        match &self.asking {
            Asking::Rubric { template, .. } => Some(template),
            Asking::Facts => None,
        }
    }

    /// The prompt versions its answers come from, as the `judge_templates`
    /// column lists them.
    pub fn template_versions(&self) -> String {
        match &self.asking {
            Asking::Rubric { template, .. } => template.hash(),
            Asking::Facts => format!(
                "{},{}",
                prompts::FACT_EXTRACT.hash(),
                prompts::FACT_CHECK.hash()
            ),
        }
    }

    /// A verdict's own pass probability, from its definition (None:
    /// `--judge-threshold`).
    pub fn p_threshold(&self) -> Option<f32> {
        let d = self.definition.as_ref()?;
        match d.answer {
            Answer::Verdict => d.threshold.map(|t| t as f32),
            Answer::Score { .. } => None,
        }
    }

    /// Whether the user defined it.
    fn is_defined(&self) -> bool {
        metric::find(self.name()).is_none()
    }
}

/// The fact ratio.
static FACT_SIMILARITY: JudgeMetric = JudgeMetric {
    metric: &metric::FACT_SIMILARITY,
    asking: Asking::Facts,
    rules: Rules {
        same_answer_passes: false,
        cosine_band: false,
    },
    columns: Vec::new(),
    definition: None,
};

/// Every judge metric refscore ships, in output order: Meaning Match and
/// the similarity rubric (built from their definitions once), the fact
/// ratio.
pub(crate) fn builtin() -> [&'static JudgeMetric; 3] {
    static RUBRICS: LazyLock<[&'static JudgeMetric; 2]> =
        LazyLock::new(definition::builtin_rubrics);
    [RUBRICS[0], RUBRICS[1], &FACT_SIMILARITY]
}

/// The judge metrics a run can ask for: the built-ins and the rubrics the
/// user defined (`[judge.metric.NAME]` in the config file or a
/// `--judge-metrics` file). The settings read the definitions into one of
/// these before anything runs; the metric catalog, the stage, `--judge-where`
/// and the output columns all take their judge metrics from it.
#[derive(Debug, Clone, Default)]
pub struct JudgeMetrics {
    defined: Vec<&'static JudgeMetric>,
}

impl JudgeMetrics {
    /// The built-in judge metrics alone.
    pub fn builtin() -> JudgeMetrics {
        JudgeMetrics::default()
    }

    /// Adds the definitions of `path` (see the `--judge-metrics` help):
    /// `only_definitions` for a file of definitions alone, false for the
    /// config file (whose other keys are flags). A bad definition, or a
    /// name defined twice, is a configuration error naming file and line.
    pub fn read(&mut self, path: &Path, only_definitions: bool) -> Result<(), Error> {
        let text = refscore_core::files::read_text(path, "judge metrics")?;
        self.read_text(path, &text, only_definitions)
    }

    /// [`JudgeMetrics::read`] of a file's text already read (a config file
    /// is read once: it may be a pipe); `path` names it in messages.
    pub fn read_text(
        &mut self,
        path: &Path,
        text: &str,
        only_definitions: bool,
    ) -> Result<(), Error> {
        let at = |j: &JudgeMetric| {
            j.definition
                .as_ref()
                .map_or(String::new(), |d| d.origin.clone())
        };
        for jm in definition::read(path, text, only_definitions)? {
            if let Some(old) = self.defined.iter().find(|d| d.name() == jm.name()) {
                return Err(Error::config(format!(
                    "judge metric '{}' is defined twice ({} and {})",
                    jm.name(),
                    at(old),
                    at(jm)
                )));
            }
            // Two metrics writing one column ("x_score" of a score named x
            // and a verdict named x_score) would collide in the result.
            let columns = |j: &JudgeMetric| j.metric.output_columns().to_vec();
            for old in &self.defined {
                if let Some(c) = columns(jm).iter().find(|c| columns(old).contains(c)) {
                    return Err(Error::config(format!(
                        "{}: judge metric '{}' would write column '{c}', which judge metric '{}' ({}) writes too; rename one",
                        at(jm),
                        jm.name(),
                        old.name(),
                        at(old)
                    )));
                }
            }
            self.defined.push(jm);
            self.defined.sort_by_key(|j| j.name());
        }
        Ok(())
    }

    /// The selected metrics that `--judge-band` decides outside the band.
    pub fn banded(&self, set: &MetricSet) -> Vec<&'static str> {
        self.selected(set)
            .into_iter()
            .filter(|j| j.rules.cosine_band)
            .map(JudgeMetric::name)
            .collect()
    }

    /// The metric catalog of a run with these judge metrics.
    pub fn catalog(&self) -> Catalog {
        Catalog::with_defined(self.defined.iter().map(|j| j.metric).collect())
    }

    /// Every judge metric, built-ins first, then the defined ones by name
    /// (the order [`MetricSet`] keeps).
    pub(crate) fn all(&self) -> impl Iterator<Item = &'static JudgeMetric> + '_ {
        builtin().into_iter().chain(self.defined.iter().copied())
    }

    /// The judge metrics of a run's metric set, in output order.
    pub(crate) fn selected(&self, set: &MetricSet) -> Vec<&'static JudgeMetric> {
        self.all().filter(|j| set.contains(j.metric)).collect()
    }

    /// The judge metric a `--judge-where` value names: its name, or its
    /// first column (`similarity_score`).
    pub(crate) fn named(&self, name: &str) -> Option<&'static JudgeMetric> {
        self.all()
            .find(|j| j.name() == name || j.metric.output_columns().first() == Some(&name))
    }

    /// The names of every judge metric, for messages and listings.
    pub fn names(&self) -> Vec<&'static str> {
        self.all().map(JudgeMetric::name).collect()
    }

    /// A rubric's definition as TOML (`refscore judge-metrics --show`);
    /// None for an unknown name or the fact ratio, which has its own
    /// pipeline.
    pub fn show(&self, name: &str) -> Option<String> {
        let jm = self.all().find(|j| j.name() == name)?;
        jm.definition.as_ref().map(definition::to_toml)
    }

    /// One line per judge metric: name, answer, where it is defined.
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for jm in self.all() {
            let what = match &jm.definition {
                Some(d) => match d.answer {
                    Answer::Verdict => "verdict".to_string(),
                    Answer::Score { min, max } => format!("score {min}-{max}"),
                },
                None => "fact ratio".to_string(),
            };
            let origin = jm
                .definition
                .as_ref()
                .map_or("built in", |d| d.origin.as_str());
            out.push_str(&format!("{:<24} {:<12} {origin}\n", jm.name(), what));
        }
        out
    }

    /// The input columns the selected metrics' prompts read, each with
    /// what reads it (for the reader's messages).
    pub fn columns_read(&self, set: &MetricSet) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for jm in self.selected(set) {
            for c in &jm.columns {
                if !out.iter().any(|(n, _)| n == c) {
                    let at = jm
                        .definition
                        .as_ref()
                        .map_or(String::new(), |d| d.origin.clone());
                    out.push((c.to_string(), format!("{at}: judge metric '{}'", jm.name())));
                }
            }
        }
        out
    }

    /// The user's selected definitions as the run records them (in the
    /// fingerprint, the summary and the result file's footer): per name its
    /// version (the template's content hash), answer, scale, threshold,
    /// band, token limit and columns: everything that changes a request or
    /// how its answer is read. Empty when no defined metric is selected, so runs
    /// without one keep their earlier fingerprints.
    pub fn record(&self, set: &MetricSet) -> BTreeMap<String, Value> {
        self.selected(set)
            .into_iter()
            .filter(|j| j.is_defined())
            .filter_map(|j| {
                let d = j.definition.as_ref()?;
                let (answer, scale) = match d.answer {
                    Answer::Verdict => ("verdict", Value::Null),
                    Answer::Score { min, max } => ("score", json!([min, max])),
                };
                Some((
                    j.name().to_string(),
                    json!({
                        "version": j.template_versions(),
                        "answer": answer,
                        "scale": scale,
                        "threshold": d.threshold,
                        "band": d.band,
                        // Not in the template's hash (caches key it
                        // apart), but it changes every request.
                        "max_tokens": d.max_tokens,
                        "columns": j.metric.output_columns(),
                        "reason_column": j.metric.reason_column,
                        "source_column": j.metric.source_column,
                    }),
                ))
            })
            .collect()
    }

    /// The output fields of the selected metrics, then the accounting and
    /// template columns.
    pub fn fields(&self, set: &MetricSet) -> Vec<Field> {
        crate::columns::fields_of(&self.selected(set))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_judge_metric_of_the_registry_has_a_definition() {
        let known = JudgeMetrics::builtin();
        for m in metric::BUILTIN
            .iter()
            .filter(|m| m.group == metric::Group::Judge)
        {
            let j = known
                .named(m.name)
                .unwrap_or_else(|| panic!("{} has no definition", m.name));
            assert_eq!(j.metric, *m);
        }
    }
}
