//! Judge metrics as values of one type: what is asked, what kind of answer
//! comes back and how it is read, which rules decide without asking, and
//! (through the registry entry) which columns it writes. Meaning Match and
//! the similarity rubric are two rubrics; the fact ratio runs its own
//! pipeline of extractions and checks on the same client, cache and journal.

use refscore_batch::metric::{self, Metric, MetricSet};

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
}

/// Meaning Match: does the output mean what the reference means?
pub(crate) static MEANING_MATCH: JudgeMetric = JudgeMetric {
    metric: &metric::MEANING_MATCH,
    asking: Asking::Rubric {
        template: &prompts::MEANING_MATCH,
        answer: Answer::Verdict,
        value_keys: &["meaning_match", "match"],
        reason_keys: &["reason", "reasons", "explanation"],
    },
    rules: Rules {
        same_answer_passes: true,
        cosine_band: true,
    },
};

/// The 0–10 similarity rubric.
pub(crate) static SIMILARITY: JudgeMetric = JudgeMetric {
    metric: &metric::SIMILARITY,
    asking: Asking::Rubric {
        template: &prompts::SIMILARITY,
        answer: Answer::Score { min: 0, max: 10 },
        value_keys: &["score", "similarity_score", "similarity"],
        reason_keys: &["rationale", "reason", "explanation"],
    },
    rules: Rules {
        same_answer_passes: false,
        cosine_band: false,
    },
};

/// The fact ratio.
pub(crate) static FACT_SIMILARITY: JudgeMetric = JudgeMetric {
    metric: &metric::FACT_SIMILARITY,
    asking: Asking::Facts,
    rules: Rules {
        same_answer_passes: false,
        cosine_band: false,
    },
};

/// Every judge metric refscore ships, in output order.
pub(crate) static BUILTIN: [&JudgeMetric; 3] = [&MEANING_MATCH, &SIMILARITY, &FACT_SIMILARITY];

/// The judge metrics of a run's metric set, in output order.
pub(crate) fn selected(set: &MetricSet) -> Vec<&'static JudgeMetric> {
    BUILTIN
        .iter()
        .copied()
        .filter(|j| set.contains(j.metric))
        .collect()
}

/// The judge metric a `--judge-where` value names: its name, or its first
/// column (`similarity_score`).
pub(crate) fn named(name: &str) -> Option<&'static JudgeMetric> {
    BUILTIN
        .iter()
        .copied()
        .find(|j| j.name() == name || j.metric.output_columns().first() == Some(&name))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_judge_metric_of_the_registry_has_a_definition() {
        for m in metric::BUILTIN
            .iter()
            .filter(|m| m.group == metric::Group::Judge)
        {
            let j = named(m.name).unwrap_or_else(|| panic!("{} has no definition", m.name));
            assert_eq!(j.metric, *m);
        }
    }
}
