//! The judge metrics a run knows, as values of two kinds: rubrics (one
//! question per row, answered with a verdict or a score: Meaning Match, the
//! similarity rubric and the user's, see `definition.rs`) and the fact ratio
//! (its own pipeline of extractions and checks on the same client, cache and
//! journal). Each carries its registry entry, which names its columns.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, LazyLock};

use refscore_core::metric::{self, Catalog, MetricRef, MetricSet};
use refscore_core::Error;
use serde_json::{json, Value};

use crate::definition::{self, Answer, Rubric};
use crate::prompts;

/// One judge metric.
#[derive(Debug, Clone)]
pub(crate) enum JudgeMetric {
    /// A rubric: one question per row.
    Rubric(Arc<Rubric>),
    /// The fact ratio: the facts of each answer extracted once, then one
    /// check per fact, counted by refscore.
    FactRatio,
}

impl JudgeMetric {
    /// Its registry entry.
    pub(crate) fn metric(&self) -> &MetricRef {
        match self {
            JudgeMetric::Rubric(r) => &r.metric,
            JudgeMetric::FactRatio => &metric::FACT_SIMILARITY,
        }
    }

    /// The name, as `--metrics` and messages use it.
    pub(crate) fn name(&self) -> &str {
        &self.metric().name
    }

    /// The prompt versions its answers come from, as the `judge_templates`
    /// column lists them. Where the fact ratio's facts come from `facts` and
    /// its checks from a local NLI model (`nli_checks`), `sentences` and
    /// `nli` stand for the templates not asked.
    pub(crate) fn template_versions_with(
        &self,
        facts: crate::FactSource,
        nli_checks: bool,
    ) -> String {
        match self {
            JudgeMetric::Rubric(r) => r.template.hash(),
            JudgeMetric::FactRatio => format!(
                "{},{}",
                match facts {
                    crate::FactSource::Judge => prompts::FACT_EXTRACT.hash(),
                    crate::FactSource::Sentences => "sentences".into(),
                },
                if nli_checks {
                    "nli".into()
                } else {
                    prompts::FACT_CHECK.hash()
                }
            ),
        }
    }

    /// The rubric it is, when it is one.
    pub(crate) fn rubric(&self) -> Option<&Arc<Rubric>> {
        match self {
            JudgeMetric::Rubric(r) => Some(r),
            JudgeMetric::FactRatio => None,
        }
    }

    /// Whether `--judge-band` decides it outside the band.
    pub(crate) fn band(&self) -> bool {
        matches!(self, JudgeMetric::Rubric(r) if r.band())
    }
}

/// Meaning Match and the similarity rubric, built from their definitions
/// once per process.
fn builtin_rubrics() -> &'static [Arc<Rubric>; 2] {
    static RUBRICS: LazyLock<[Arc<Rubric>; 2]> =
        LazyLock::new(|| definition::builtin_rubrics().map(Arc::new));
    &RUBRICS
}

/// Built-in rubric `i` (Meaning Match, then the similarity rubric).
#[cfg(test)]
pub(crate) fn builtin_rubric(i: usize) -> &'static Arc<Rubric> {
    &builtin_rubrics()[i]
}

/// The versions (content hashes) of every built-in prompt template:
/// Meaning Match's, the similarity rubric's, the fact ratio's two.
pub(crate) fn builtin_versions() -> Vec<String> {
    let [mm, sim] = builtin_rubrics();
    vec![
        mm.template.hash(),
        sim.template.hash(),
        prompts::FACT_EXTRACT.hash(),
        prompts::FACT_CHECK.hash(),
    ]
}

/// Every judge metric refscore ships, in output order: Meaning Match, the
/// similarity rubric, the fact ratio.
pub(crate) fn builtin() -> [JudgeMetric; 3] {
    let [mm, sim] = builtin_rubrics();
    [
        JudgeMetric::Rubric(Arc::clone(mm)),
        JudgeMetric::Rubric(Arc::clone(sim)),
        JudgeMetric::FactRatio,
    ]
}

/// The judge metrics a run can ask for: the built-ins and the rubrics the
/// user defined (`[judge.metric.NAME]` in the config file or a
/// `--judge-metrics` file). The settings read the definitions into one of
/// these before anything runs; the metric catalog, the stage, `--judge-where`
/// and the output columns all take their judge metrics from it.
#[derive(Debug, Clone, Default)]
pub struct JudgeMetrics {
    defined: Vec<Arc<Rubric>>,
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
        self.add(definition::read(path, &text, only_definitions)?)
    }

    /// Adds the definitions of a config file whose text (`text`, read from
    /// `path`) was parsed as `parsed`: the file is parsed once, for its
    /// flags and its definitions.
    pub fn read_config_table(
        &mut self,
        path: &Path,
        text: &str,
        parsed: toml::Spanned<toml::de::DeTable<'_>>,
    ) -> Result<(), Error> {
        self.add(definition::read_parsed(path, text, parsed, false)?)
    }

    /// Adds rubrics read from a file, refusing a name or a column that
    /// another definition has.
    fn add(&mut self, rubrics: Vec<Rubric>) -> Result<(), Error> {
        for rubric in rubrics {
            let at = |r: &Rubric| r.definition.origin.clone();
            if let Some(old) = self.defined.iter().find(|d| d.name() == rubric.name()) {
                return Err(Error::config(format!(
                    "judge metric '{}' is defined twice ({} and {})",
                    rubric.name(),
                    at(old),
                    at(&rubric)
                )));
            }
            // Two metrics writing one column ("x_score" of a score named x
            // and a verdict named x_score) would collide in the result.
            for old in &self.defined {
                let theirs = old.metric.output_columns();
                if let Some(c) = rubric
                    .metric
                    .output_columns()
                    .iter()
                    .find(|c| theirs.contains(c))
                {
                    return Err(Error::config(format!(
                        "{}: judge metric '{}' would write column '{c}', which judge metric '{}' ({}) writes too; rename one",
                        at(&rubric),
                        rubric.name(),
                        old.name(),
                        at(old)
                    )));
                }
            }
            self.defined.push(Arc::new(rubric));
            self.defined.sort_by(|a, b| a.name().cmp(b.name()));
        }
        Ok(())
    }

    /// Whether the band may decide one of the judge metrics of `set`
    /// (`--judge-band` needs one).
    pub fn any_banded(&self, set: &MetricSet) -> bool {
        self.selected(set).iter().any(JudgeMetric::band)
    }

    /// The metric catalog of a run with these judge metrics.
    pub fn catalog(&self) -> Catalog {
        Catalog::with_defined(self.defined.iter().map(|r| Arc::clone(&r.metric)).collect())
    }

    /// Every judge metric, built-ins first, then the defined ones by name
    /// (the order [`MetricSet`] keeps).
    pub(crate) fn all(&self) -> impl Iterator<Item = JudgeMetric> + '_ {
        builtin().into_iter().chain(
            self.defined
                .iter()
                .map(|r| JudgeMetric::Rubric(Arc::clone(r))),
        )
    }

    /// The judge metrics of a run's metric set, in output order.
    pub(crate) fn selected(&self, set: &MetricSet) -> Vec<JudgeMetric> {
        self.all().filter(|j| set.contains(j.metric())).collect()
    }

    /// The judge metric a `--judge-where` value names: its name, or its
    /// first column (`similarity_score`).
    pub(crate) fn named(&self, name: &str) -> Option<JudgeMetric> {
        self.all().find(|j| {
            j.name() == name
                || j.metric().output_columns().first().map(String::as_str) == Some(name)
        })
    }

    /// The scale of a score rubric (`scale = [1, 5]`: (1, 5)); `None` for a
    /// verdict or a metric the run does not know. Human labels of a score
    /// are on 0–1, so a hint about them needs the rubric's own scale.
    pub fn score_scale(&self, name: &str) -> Option<(u8, u8)> {
        match self.named(name)?.rubric()?.answer {
            crate::definition::Answer::Score { min, max } => Some((min, max)),
            crate::definition::Answer::Verdict => None,
        }
    }

    /// The names of every judge metric, for messages and listings.
    pub fn names(&self) -> Vec<String> {
        self.all().map(|j| j.name().to_string()).collect()
    }

    /// A rubric's definition as TOML (`refscore judge-metrics --show`);
    /// None for an unknown name or the fact ratio, which has its own
    /// pipeline.
    pub fn show(&self, name: &str) -> Option<String> {
        let jm = self.all().find(|j| j.name() == name)?;
        jm.rubric().map(|r| definition::to_toml(&r.definition))
    }

    /// One line per judge metric: name, answer, where it is defined.
    pub fn listing(&self) -> String {
        let mut out = String::new();
        for jm in self.all() {
            let (what, origin) = match &jm {
                JudgeMetric::Rubric(r) => (
                    match r.answer {
                        Answer::Verdict => "verdict".to_string(),
                        Answer::Score { min, max } => format!("score {min}-{max}"),
                    },
                    r.definition.origin.as_str(),
                ),
                JudgeMetric::FactRatio => ("fact ratio".to_string(), "built in"),
            };
            out.push_str(&format!("{:<24} {:<12} {origin}\n", jm.name(), what));
        }
        out
    }

    /// The input columns the selected metrics' prompts read, each with
    /// what reads it (for the reader's messages).
    pub fn columns_read(&self, set: &MetricSet) -> Vec<(String, String)> {
        let mut out: Vec<(String, String)> = Vec::new();
        for jm in self.selected(set) {
            let Some(r) = jm.rubric() else {
                continue;
            };
            for c in &r.columns {
                if !out.iter().any(|(n, _)| n == c) {
                    let at = &r.definition.origin;
                    out.push((c.to_string(), format!("{at}: judge metric '{}'", r.name())));
                }
            }
        }
        out
    }

    /// The user's selected definitions as the run records them (in the
    /// fingerprint, the summary and the result file's footer): per name its
    /// version (the template's content hash), answer, scale, threshold,
    /// band, token limit and columns: everything that changes a request or
    /// how its answer is read. Empty when no defined metric is selected, so
    /// runs without one keep their earlier fingerprints.
    pub fn record(&self, set: &MetricSet) -> BTreeMap<String, Value> {
        self.defined
            .iter()
            .filter(|r| set.contains(&r.metric) && r.is_defined())
            .map(|r| {
                let d = &r.definition;
                let (answer, scale) = match d.answer {
                    Answer::Verdict => ("verdict", Value::Null),
                    Answer::Score { min, max } => ("score", json!([min, max])),
                };
                (
                    r.name().to_string(),
                    json!({
                        "version": r.template.hash(),
                        "answer": answer,
                        "scale": scale,
                        "threshold": d.threshold,
                        "band": d.band,
                        // Not in the template's hash (caches key it
                        // apart), but it changes every request.
                        "max_tokens": d.max_tokens,
                        "columns": r.metric.output_columns(),
                        "reason_column": r.metric.reason_column,
                        "source_column": r.metric.source_column,
                    }),
                )
            })
            .collect()
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
                .named(&m.name)
                .unwrap_or_else(|| panic!("{} has no definition", m.name));
            assert_eq!(j.metric(), m);
        }
    }
}
