//! The metric registry: every metric refscore computes, as a value that
//! says what it is (name, group, kind, output columns, default pass
//! threshold, what it needs). The CLI validates `--metrics` and
//! `--threshold` against it and prints its help from it, the stages name
//! their columns from it, the summary and the report read the kinds and
//! judge columns from it, so adding a metric is one entry here plus the
//! code that computes it.

use std::sync::{Arc, LazyLock};

/// The stage that computes a metric, which is also a `--metrics` group name.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Group {
    /// Text comparisons; no model.
    Lexical,
    /// Scores from the embedding model's forward pass.
    Embedding,
    /// Scores of a cross-encoder (`--cross-model`) reading each pair
    /// together: an STS score, or NLI's entailment in both directions.
    Cross,
    /// Answers of an LLM judge.
    Judge,
}

impl Group {
    /// Every group, in output order.
    pub const ALL: [Group; 4] = [Group::Lexical, Group::Embedding, Group::Cross, Group::Judge];

    /// The name `--metrics` takes for the whole group.
    pub fn name(self) -> &'static str {
        match self {
            Group::Lexical => "lexical",
            Group::Embedding => "embedding",
            Group::Cross => "cross",
            Group::Judge => "judge",
        }
    }

    /// What the group's metrics need beyond the reference and output texts,
    /// for `--help` and messages.
    pub fn needs(self) -> &'static str {
        match self {
            Group::Lexical => "",
            Group::Embedding => "needs the model",
            Group::Cross => "needs --cross-model",
            Group::Judge => "needs --judge-url",
        }
    }
}

/// What a metric's value means, which decides how it is summarised.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A pass/fail value (0/1 or a boolean column): its mean is a rate.
    Binary,
    /// A graded score on 0..=1.
    Score,
}

/// Which way a metric's value improves. Everything that reads a value as
/// good or bad asks this, once per metric: a band tier (which side decides
/// true), `report`'s better/worse and its regression gate, `--gold`'s
/// stand-in figures and `calibrate-band`'s fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// A higher value is the better answer (almost every metric).
    HigherIsBetter,
    /// A lower value is the better answer (`nli_contradiction`).
    LowerIsBetter,
}

impl Direction {
    /// Whether a lower value is the better answer.
    pub fn lower_is_better(self) -> bool {
        self == Direction::LowerIsBetter
    }

    /// The direction of the metric named `name` (a built-in one; any other
    /// column, a defined judge metric or a panel judge's, is higher is
    /// better).
    pub fn of(name: &str) -> Direction {
        find(name).map_or(Direction::HigherIsBetter, |m| m.direction)
    }
}

/// One metric: what `--metrics` calls it and everything downstream needs to
/// know about its output without running it. Built-in metrics are made
/// once per process ([`BUILTIN`]); a judge metric the user defines is made
/// when its definition is read, and shared by [`MetricRef`]s.
#[derive(Debug, PartialEq)]
pub struct Metric {
    /// The name `--metrics`, `--threshold` and `--judge-where` use; also the
    /// column holding the metric's value.
    pub name: String,
    /// The stage that computes it.
    pub group: Group,
    /// A second name that selects it with its siblings ("bertscore").
    pub family: Option<&'static str>,
    /// Pass/fail or graded.
    pub kind: Kind,
    /// The pass threshold the summary uses unless `--threshold` says otherwise.
    pub default_threshold: f64,
    /// Whether higher or lower values are better.
    pub direction: Direction,
    /// Every column the metric writes, in output order (its value column
    /// among them).
    pub columns: Vec<String>,
    /// The column with the judge's explanation, for judge metrics.
    pub reason_column: Option<String>,
    /// The column saying how each value was decided (rule, band, cache, judge).
    pub source_column: Option<String>,
    /// Whether the input (question) column is part of what it reads.
    pub reads_input: bool,
}

/// A metric as the registry hands it out: shared, cheap to clone.
pub type MetricRef = Arc<Metric>;

impl Metric {
    fn lexical(name: &str, kind: Kind, default_threshold: f64) -> Metric {
        Metric {
            name: name.into(),
            group: Group::Lexical,
            family: None,
            kind,
            default_threshold,
            direction: Direction::HigherIsBetter,
            columns: vec![name.into()],
            reason_column: None,
            source_column: None,
            reads_input: false,
        }
    }

    fn embedding(name: &str, family: Option<&'static str>, default_threshold: f64) -> Metric {
        Metric::scored(Group::Embedding, name, family, default_threshold)
    }

    /// A graded score of `group` in one column of its name.
    fn scored(
        group: Group,
        name: &str,
        family: Option<&'static str>,
        default_threshold: f64,
    ) -> Metric {
        Metric {
            name: name.into(),
            group,
            family,
            kind: Kind::Score,
            default_threshold,
            direction: Direction::HigherIsBetter,
            columns: vec![name.into()],
            reason_column: None,
            source_column: None,
            reads_input: false,
        }
    }

    /// A judge metric writing `columns` (its value column among them), its
    /// reason (where it has one) and source columns last.
    pub fn judge(
        name: &str,
        kind: Kind,
        default_threshold: f64,
        columns: &[&str],
        reason_column: Option<&str>,
        reads_input: bool,
    ) -> Metric {
        let source = format!("{name}_source");
        let mut all: Vec<String> = columns.iter().map(|c| c.to_string()).collect();
        all.extend(reason_column.map(String::from));
        all.push(source.clone());
        Metric {
            name: name.into(),
            group: Group::Judge,
            family: None,
            kind,
            default_threshold,
            direction: Direction::HigherIsBetter,
            columns: all,
            reason_column: reason_column.map(String::from),
            source_column: Some(source),
            reads_input,
        }
    }

    /// The same metric with lower values better.
    fn lower_is_better(self) -> Metric {
        Metric {
            direction: Direction::LowerIsBetter,
            ..self
        }
    }

    /// The columns it writes, in output order.
    pub fn output_columns(&self) -> &[String] {
        &self.columns
    }
}

/// A built-in metric, made once per process.
pub type Builtin = LazyLock<MetricRef>;

/// strip(reference) == strip(output).
pub static EXACT_MATCH: Builtin =
    LazyLock::new(|| Arc::new(Metric::lexical("exact_match", Kind::Binary, 1.0)));
/// strip(reference) is a substring of strip(output).
pub static CONTAINS_MATCH: Builtin =
    LazyLock::new(|| Arc::new(Metric::lexical("contains_match", Kind::Binary, 1.0)));
/// Normalised texts equal.
pub static EXACT_MATCH_NORM: Builtin =
    LazyLock::new(|| Arc::new(Metric::lexical("exact_match_norm", Kind::Binary, 1.0)));
/// Normalised reference tokens a contiguous run of the output's.
pub static CONTAINS_MATCH_NORM: Builtin =
    LazyLock::new(|| Arc::new(Metric::lexical("contains_match_norm", Kind::Binary, 1.0)));
/// SQuAD-style token F1.
pub static TOKEN_F1: Builtin =
    LazyLock::new(|| Arc::new(Metric::lexical("token_f1", Kind::Score, 0.5)));
/// Cosine of the pooled embeddings.
pub static COSINE: Builtin = LazyLock::new(|| Arc::new(Metric::embedding("cosine", None, 0.7)));
/// BERTScore precision.
pub static BERTSCORE_PRECISION: Builtin = LazyLock::new(|| {
    Arc::new(Metric::embedding(
        "bertscore_precision",
        Some("bertscore"),
        0.8,
    ))
});
/// BERTScore recall.
pub static BERTSCORE_RECALL: Builtin = LazyLock::new(|| {
    Arc::new(Metric::embedding(
        "bertscore_recall",
        Some("bertscore"),
        0.8,
    ))
});
/// BERTScore F1.
pub static BERTSCORE_F1: Builtin =
    LazyLock::new(|| Arc::new(Metric::embedding("bertscore_f1", Some("bertscore"), 0.8)));
/// A one-output cross-encoder's score of (reference, output), as
/// sentence-transformers' `CrossEncoder.predict` returns it.
pub static CROSS_SCORE: Builtin =
    LazyLock::new(|| Arc::new(Metric::scored(Group::Cross, "cross_score", None, 0.5)));
/// P(entailment | premise reference, hypothesis output): nothing in the
/// output goes beyond the reference.
pub static NLI_PRECISION: Builtin = LazyLock::new(|| {
    Arc::new(Metric::scored(
        Group::Cross,
        "nli_precision",
        Some("nli"),
        0.5,
    ))
});
/// P(entailment | premise output, hypothesis reference): the output states
/// what the reference states.
pub static NLI_RECALL: Builtin =
    LazyLock::new(|| Arc::new(Metric::scored(Group::Cross, "nli_recall", Some("nli"), 0.5)));
/// min(nli_precision, nli_recall): two-way entailment, a local Meaning Match.
pub static NLI_EQUIVALENCE: Builtin = LazyLock::new(|| {
    Arc::new(Metric::scored(
        Group::Cross,
        "nli_equivalence",
        Some("nli"),
        0.5,
    ))
});
/// The larger P(contradiction) of the two directions (its pass rate counts
/// the rows at or above the threshold: contradictions, not passes). Lower
/// is better.
pub static NLI_CONTRADICTION: Builtin = LazyLock::new(|| {
    Arc::new(Metric::scored(Group::Cross, "nli_contradiction", Some("nli"), 0.5).lower_is_better())
});
/// The judge's verdict: same meaning as the reference.
pub static MEANING_MATCH: Builtin = LazyLock::new(|| {
    Arc::new(Metric::judge(
        "meaning_match",
        Kind::Binary,
        1.0,
        &["meaning_match", "meaning_match_p"],
        Some("meaning_match_reason"),
        true,
    ))
});
/// The judge's 0–10 similarity rubric, on 0..=1.
pub static SIMILARITY: Builtin = LazyLock::new(|| {
    Arc::new(Metric::judge(
        "similarity",
        Kind::Score,
        0.7,
        &["similarity_score", "similarity"],
        Some("similarity_rationale"),
        true,
    ))
});
/// The fact ratio: facts the two answers share.
pub static FACT_SIMILARITY: Builtin = LazyLock::new(|| {
    Arc::new(Metric::judge(
        "fact_similarity",
        Kind::Score,
        0.5,
        &[
            "fact_similarity",
            "fact_recall",
            "fact_precision",
            "fact_counts",
        ],
        None,
        true,
    ))
});

/// Every built-in metric, in output order.
pub static BUILTIN: LazyLock<[MetricRef; 17]> = LazyLock::new(|| {
    [
        &EXACT_MATCH,
        &CONTAINS_MATCH,
        &EXACT_MATCH_NORM,
        &CONTAINS_MATCH_NORM,
        &TOKEN_F1,
        &COSINE,
        &BERTSCORE_PRECISION,
        &BERTSCORE_RECALL,
        &BERTSCORE_F1,
        &CROSS_SCORE,
        &NLI_PRECISION,
        &NLI_RECALL,
        &NLI_EQUIVALENCE,
        &NLI_CONTRADICTION,
        &MEANING_MATCH,
        &SIMILARITY,
        &FACT_SIMILARITY,
    ]
    .map(|m| Arc::clone(m))
});

/// The metric named `name`, if refscore has one built in.
pub fn find(name: &str) -> Option<MetricRef> {
    Catalog::builtin().find(name)
}

/// The names `--metrics` takes besides the metrics': each group, followed
/// by the families within it.
pub fn group_names() -> Vec<&'static str> {
    let mut names: Vec<&'static str> = Vec::new();
    for g in Group::ALL {
        names.push(g.name());
        for m in BUILTIN.iter().filter(|m| m.group == g) {
            if let Some(f) = m.family {
                if !names.contains(&f) {
                    names.push(f);
                }
            }
        }
    }
    names
}

/// The metrics a run knows: the built-in ones and the judge metrics the
/// user defined (`[judge.metric.NAME]`), which exist only at run time.
/// Everything that reads a metric name (`--metrics`, `--threshold`, the
/// defaults) asks the run's catalog, so a defined metric is named, chosen
/// and thresholded like a built-in one.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Catalog {
    defined: Vec<MetricRef>,
}

impl Catalog {
    /// The built-in metrics alone.
    pub fn builtin() -> Catalog {
        Catalog::default()
    }

    /// The built-ins and `defined` (judge metrics, after the built-ins in
    /// output order; their names are checked not to clash by whoever made
    /// them).
    pub fn with_defined(defined: Vec<MetricRef>) -> Catalog {
        Catalog { defined }
    }

    /// Every metric: the built-ins in output order, then the defined ones.
    pub fn iter(&self) -> impl Iterator<Item = &MetricRef> + '_ {
        BUILTIN.iter().chain(self.defined.iter())
    }

    /// The metric named `name`.
    pub fn find(&self, name: &str) -> Option<MetricRef> {
        self.iter().find(|m| m.name == name).cloned()
    }

    /// The metrics a `--metrics` word names, a metric or a group ("lexical",
    /// "bertscore", "judge" with the defined ones), in output order; `None`
    /// for a word nothing knows. ("all" is the caller's: it depends on
    /// whether a judge is configured.)
    pub fn named(&self, word: &str) -> Option<Vec<MetricRef>> {
        let members: Vec<MetricRef> = self
            .iter()
            .filter(|m| m.name == word || m.group.name() == word || m.family == Some(word))
            .cloned()
            .collect();
        (!members.is_empty()).then_some(members)
    }

    /// The metrics of the given groups.
    pub fn of_groups(&self, groups: &[Group]) -> MetricSet {
        let mut set = MetricSet::new();
        for m in self.iter().filter(|m| groups.contains(&m.group)) {
            set.insert(m);
        }
        set
    }
}

/// A run's chosen metrics, kept in registry order (defined metrics after
/// the built-ins, by name) whatever order they were named in, so output columns never depend on how the flag was spelt.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct MetricSet(Vec<MetricRef>);

impl MetricSet {
    /// No metric.
    pub fn new() -> MetricSet {
        MetricSet(Vec::new())
    }

    /// Adds a metric (a no-op when present).
    pub fn insert(&mut self, metric: &MetricRef) {
        if !self.contains(metric) {
            self.0.push(Arc::clone(metric));
            // Built-ins in registry order, then defined metrics by name.
            self.0.sort_by(|a, b| rank(a).cmp(&rank(b)));
        }
    }

    /// Whether the set holds `metric`.
    pub fn contains(&self, metric: &Metric) -> bool {
        self.0.iter().any(|m| m.name == metric.name)
    }

    /// Whether the set holds any metric of `group`.
    pub fn has_group(&self, group: Group) -> bool {
        self.0.iter().any(|m| m.group == group)
    }

    /// True when the set is empty.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The metrics, in order.
    pub fn iter(&self) -> impl Iterator<Item = &MetricRef> + '_ {
        self.0.iter()
    }

    /// For each built-in metric of `group`, in registry order, whether the
    /// set holds it: the form run records of format 1 kept a selection in.
    /// Not for a run record: adding a built-in changes it for every set
    /// (the record names the metrics; `crates/job/src/record.rs` maps the
    /// old form).
    pub fn flags(&self, group: Group) -> Vec<bool> {
        BUILTIN
            .iter()
            .filter(|m| m.group == group)
            .map(|m| self.contains(m))
            .collect()
    }
}

/// Where a metric goes among a set's: built-ins in registry order, then
/// defined metrics by name.
fn rank(m: &Metric) -> (usize, &str) {
    let builtin = BUILTIN.iter().position(|b| b.name == m.name);
    (builtin.unwrap_or(usize::MAX), m.name.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_columns_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for m in BUILTIN.iter() {
            assert!(seen.insert(m.name.clone()), "{} twice", m.name);
            assert!(m.output_columns().contains(&m.name), "{}", m.name);
            for c in m.output_columns().iter().filter(|c| **c != m.name) {
                assert!(seen.insert(c.clone()), "{c} twice");
            }
        }
        for g in group_names() {
            assert!(find(g).is_none(), "{g} is a group and a metric");
        }
    }

    /// Contradiction is the one lower-is-better score; a name the registry
    /// does not know reads as higher is better.
    #[test]
    fn every_metric_has_a_direction() {
        let lower: Vec<&str> = BUILTIN
            .iter()
            .filter(|m| m.direction.lower_is_better())
            .map(|m| m.name.as_str())
            .collect();
        assert_eq!(lower, ["nli_contradiction"]);
        assert_eq!(Direction::of("meaning_match__a"), Direction::HigherIsBetter);
    }

    #[test]
    fn a_set_keeps_registry_order() {
        let mut s = MetricSet::new();
        s.insert(&FACT_SIMILARITY);
        s.insert(&TOKEN_F1);
        s.insert(&MEANING_MATCH);
        s.insert(&TOKEN_F1);
        let names: Vec<_> = s.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["token_f1", "meaning_match", "fact_similarity"]);
        assert_eq!(s.flags(Group::Judge), [true, false, true]);
        assert_eq!(
            Catalog::builtin().named("bertscore").unwrap().len(),
            3,
            "the bertscore family has three members"
        );
    }
}
