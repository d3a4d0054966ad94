//! Lexical metrics (docs/metrics.md#lexical-metrics): computed for every
//! row, no model needed.
//!
//! `exact_match`, `contains_match` compare the stripped texts as they are;
//! `exact_match_norm`, `contains_match_norm` and `token_f1` compare the
//! token sequences of normalisation N (see [`normalize`]).

mod normalize;
mod plan;

use std::sync::Arc;

use arrow::array::{ArrayRef, Float32Array};
use arrow::datatypes::{DataType, Field};
use rayon::prelude::*;
use refscore_core::metric::{self, Metric, MetricSet};
use refscore_core::{RowBatch, ScoreColumns};

pub use normalize::normalize;
use normalize::Normalized;

/// Which lexical metrics a run computes. The scorer skips the work of
/// those not asked for (a run wanting `token_f1` alone does no contains
/// search).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Selection {
    exact_match: bool,
    contains_match: bool,
    exact_match_norm: bool,
    contains_match_norm: bool,
    token_f1: bool,
}

impl Selection {
    /// Every lexical metric.
    pub const ALL: Selection = Selection {
        exact_match: true,
        contains_match: true,
        exact_match_norm: true,
        contains_match_norm: true,
        token_f1: true,
    };

    /// The lexical metrics of a run's metric set.
    pub fn of(set: &MetricSet) -> Selection {
        Selection {
            exact_match: set.contains(&metric::EXACT_MATCH),
            contains_match: set.contains(&metric::CONTAINS_MATCH),
            exact_match_norm: set.contains(&metric::EXACT_MATCH_NORM),
            contains_match_norm: set.contains(&metric::CONTAINS_MATCH_NORM),
            token_f1: set.contains(&metric::TOKEN_F1),
        }
    }

    /// The selected metrics, in output order, each with the field of
    /// [`LexicalScores`] that holds its value.
    fn columns(&self) -> Vec<(&'static Metric, ScoreOf)> {
        let all: [(bool, &'static Metric, ScoreOf); 5] = [
            (self.exact_match, &metric::EXACT_MATCH, |s| s.exact_match),
            (self.contains_match, &metric::CONTAINS_MATCH, |s| {
                s.contains_match
            }),
            (self.exact_match_norm, &metric::EXACT_MATCH_NORM, |s| {
                s.exact_match_norm
            }),
            (
                self.contains_match_norm,
                &metric::CONTAINS_MATCH_NORM,
                |s| s.contains_match_norm,
            ),
            (self.token_f1, &metric::TOKEN_F1, |s| s.token_f1),
        ];
        all.into_iter()
            .filter_map(|(on, m, get)| on.then_some((m, get)))
            .collect()
    }

    fn needs_normalization(&self) -> bool {
        self.exact_match_norm || self.contains_match_norm || self.token_f1
    }
}

/// Reads one metric's value out of a row's [`LexicalScores`].
type ScoreOf = fn(&LexicalScores) -> f32;

/// The five lexical scores of one (reference, output) pair; each is 0 or 1
/// except `token_f1`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct LexicalScores {
    /// strip(reference) == strip(output).
    pub exact_match: f32,
    /// strip(reference) is a substring of strip(output).
    pub contains_match: f32,
    /// N(reference) == N(output).
    pub exact_match_norm: f32,
    /// N(reference) tokens occur as a contiguous run in N(output) tokens.
    pub contains_match_norm: f32,
    /// SQuAD-style token F1 of N(reference) against N(output).
    pub token_f1: f32,
}

/// Scores pairs while reusing its buffers, so scoring millions of rows does
/// not allocate per row. One per thread.
#[derive(Default, Debug)]
pub struct Scorer {
    reference: Normalized,
    output: Normalized,
    sorted_ref: Vec<u32>,
    sorted_out: Vec<u32>,
    failure: Vec<u32>,
}

impl Scorer {
    /// A scorer with empty buffers.
    pub fn new() -> Scorer {
        Scorer::default()
    }

    /// Computes all five metrics for one pair.
    pub fn score(&mut self, reference: &str, output: &str) -> LexicalScores {
        self.score_selected(reference, output, Selection::ALL)
    }

    /// Computes only the metrics `sel` asks for (the others stay 0): a run
    /// that wants `token_f1` alone must not pay for the contains search.
    fn score_selected(&mut self, reference: &str, output: &str, sel: Selection) -> LexicalScores {
        let (r, o) = (reference.trim(), output.trim());
        let mut s = LexicalScores::default();
        if sel.exact_match {
            s.exact_match = f(r == o);
        }
        if sel.contains_match {
            // `str::contains` uses the two-way algorithm: linear time.
            s.contains_match = f(o.contains(r));
        }
        if !sel.needs_normalization() {
            return s;
        }
        self.reference.run(r);
        self.output.run(o);
        if sel.token_f1 {
            s.token_f1 = self.token_f1();
        }
        if sel.exact_match_norm || sel.contains_match_norm {
            let rt = self.reference.tokens();
            let ot = self.output.tokens();
            let equal = rt.len() == ot.len() && rt.eq(ot);
            s.exact_match_norm = f(equal);
            if sel.contains_match_norm {
                s.contains_match_norm = f(if self.reference.token_count() == 0 {
                    equal
                } else {
                    contains_run(&self.reference, &self.output, &mut self.failure)
                });
            }
        }
        s
    }

    /// SQuAD token F1 over the two normalised token lists: the multiset
    /// intersection counted by merging the token indexes sorted by text,
    /// without copying any token.
    fn token_f1(&mut self) -> f32 {
        let (r, o) = (&self.reference, &self.output);
        let (nr, no) = (r.token_count(), o.token_count());
        if nr == 0 || no == 0 {
            return f(nr == no);
        }
        self.sorted_ref.clear();
        self.sorted_out.clear();
        self.sorted_ref.extend(0..nr as u32);
        self.sorted_out.extend(0..no as u32);
        self.sorted_ref
            .sort_unstable_by(|a, b| r.token(*a as usize).cmp(r.token(*b as usize)));
        self.sorted_out
            .sort_unstable_by(|a, b| o.token(*a as usize).cmp(o.token(*b as usize)));
        let (mut i, mut j, mut common) = (0, 0, 0usize);
        while i < nr && j < no {
            match r
                .token(self.sorted_ref[i] as usize)
                .cmp(o.token(self.sorted_out[j] as usize))
            {
                std::cmp::Ordering::Less => i += 1,
                std::cmp::Ordering::Greater => j += 1,
                std::cmp::Ordering::Equal => {
                    common += 1;
                    i += 1;
                    j += 1;
                }
            }
        }
        if common == 0 {
            return 0.0;
        }
        let precision = common as f64 / no as f64;
        let recall = common as f64 / nr as f64;
        (2.0 * precision * recall / (precision + recall)) as f32
    }
}

/// True when the needle's tokens occur as a contiguous run in the
/// haystack's. Knuth–Morris–Pratt over tokens: each haystack token is
/// compared a bounded number of times, so a megabyte row costs a linear scan
/// rather than needle × haystack comparisons. `failure` is a reusable buffer.
fn contains_run(needle: &Normalized, haystack: &Normalized, failure: &mut Vec<u32>) -> bool {
    let (n, h) = (needle.token_count(), haystack.token_count());
    if n == 0 {
        return true;
    }
    if n > h {
        return false;
    }
    // failure[k]: length of the longest proper prefix of needle[..=k] that
    // is also a suffix of it.
    failure.clear();
    failure.push(0);
    let mut len = 0usize;
    for k in 1..n {
        while len > 0 && needle.token(k) != needle.token(len) {
            len = failure[len - 1] as usize;
        }
        if needle.token(k) == needle.token(len) {
            len += 1;
        }
        failure.push(len as u32);
    }
    let mut matched = 0usize;
    for j in 0..h {
        while matched > 0 && haystack.token(j) != needle.token(matched) {
            matched = failure[matched - 1] as usize;
        }
        if haystack.token(j) == needle.token(matched) {
            matched += 1;
            if matched == n {
                return true;
            }
        }
    }
    false
}

#[inline]
fn f(b: bool) -> f32 {
    if b {
        1.0
    } else {
        0.0
    }
}

/// The output fields of the selected lexical metrics (all Float32, nullable).
pub fn fields(sel: Selection) -> Vec<Field> {
    sel.columns()
        .into_iter()
        .map(|(m, _)| Field::new(m.name.clone(), DataType::Float32, true))
        .collect()
}

/// Scores every row of a batch in parallel. Rows that cannot be scored
/// (see [`RowBatch::unscorable`]) get nulls.
pub fn score_batch(batch: &RowBatch, sel: Selection) -> ScoreColumns {
    let n = batch.len();
    let rows: Vec<Option<LexicalScores>> = (0..n)
        .into_par_iter()
        .with_min_len(2048)
        .map_init(Scorer::new, |scorer, i| {
            if batch.unscorable(i).is_some() {
                return None;
            }
            let (r, o) = (batch.reference().get(i)?, batch.output().get(i)?);
            Some(scorer.score_selected(r, o, sel))
        })
        .collect();
    let mut out = ScoreColumns::default();
    for (m, get) in sel.columns() {
        let array: Float32Array = rows.iter().map(|r| r.as_ref().map(get)).collect();
        out.push(
            Field::new(m.name.clone(), DataType::Float32, true),
            Arc::new(array) as ArrayRef,
        );
    }
    out
}

/// The lexical metrics as a pipeline stage: the selected ones, per batch.
#[derive(Debug, Clone, Copy)]
pub struct LexicalStage(pub Selection);

impl refscore_core::Stage for LexicalStage {
    fn fields(&self) -> Vec<Field> {
        fields(self.0)
    }

    fn score(
        &mut self,
        batch: &RowBatch,
        _: &ScoreColumns,
    ) -> Result<ScoreColumns, refscore_core::Error> {
        Ok(score_batch(batch, self.0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(r: &str, o: &str) -> LexicalScores {
        Scorer::new().score(r, o)
    }

    #[test]
    fn exact_and_contains_are_case_sensitive_and_stripped() {
        let x = s("  Paris ", "Paris\n");
        assert_eq!((x.exact_match, x.contains_match), (1.0, 1.0));
        let x = s("paris", "Paris");
        assert_eq!((x.exact_match, x.contains_match), (0.0, 0.0));
        assert_eq!(x.exact_match_norm, 1.0);
        let x = s("42", "The answer is 42.");
        assert_eq!((x.exact_match, x.contains_match), (0.0, 1.0));
    }

    #[test]
    fn normalised_metrics() {
        let x = s("one hundred", "100");
        assert_eq!(
            (x.exact_match_norm, x.contains_match_norm, x.token_f1),
            (1.0, 1.0, 1.0)
        );
        let x = s("New York City", "It is in new york city, USA");
        assert_eq!((x.exact_match_norm, x.contains_match_norm), (0.0, 1.0));
        // contiguous run, not just a subset
        let x = s("new york", "york new");
        assert_eq!(x.contains_match_norm, 0.0);
        assert_eq!(x.token_f1, 1.0);
        // "a" + "the" are articles: N(reference) is empty
        let x = s("The", "anything");
        assert_eq!((x.contains_match_norm, x.token_f1), (0.0, 0.0));
    }

    #[test]
    fn contains_run_finds_overlapping_and_repeated_prefixes() {
        // Cases where a naive restart and KMP's fallback differ.
        let x = s("x x y", "x x x y");
        assert_eq!(x.contains_match_norm, 1.0);
        let x = s("x y x z", "x y x y x z");
        assert_eq!(x.contains_match_norm, 1.0);
        let x = s("x y x z", "x y x y x y");
        assert_eq!(x.contains_match_norm, 0.0);
        let x = s("new york", "new new york");
        assert_eq!(x.contains_match_norm, 1.0);
        let x = s("b", "a b c");
        assert_eq!(x.contains_match_norm, 1.0);
        let x = s("c d", "a b c");
        assert_eq!(x.contains_match_norm, 0.0);
    }

    #[test]
    fn contains_run_is_linear_on_large_rows() {
        // 200k repeated tokens against a 100k-token needle that only fails at
        // its last token: a needle × haystack search does ~10^10 token
        // comparisons (minutes); KMP does a few hundred thousand.
        let output = "x ".repeat(200_000);
        let miss = format!("{}y", "x ".repeat(100_000));
        let x = s(&miss, &output);
        assert_eq!(x.contains_match_norm, 0.0);
        let hit = format!("{}y", "x ".repeat(100_000));
        let x = s(&hit, &format!("{output}y tail"));
        assert_eq!(x.contains_match_norm, 1.0);
    }

    #[test]
    fn only_the_selected_metrics_are_computed() {
        let only = |m: &metric::MetricRef| {
            let mut set = MetricSet::new();
            set.insert(m);
            Selection::of(&set)
        };
        let x = Scorer::new().score_selected("a b c", "a b c", only(&metric::TOKEN_F1));
        assert_eq!(x.token_f1, 1.0);
        assert_eq!(
            (
                x.exact_match,
                x.contains_match,
                x.exact_match_norm,
                x.contains_match_norm
            ),
            (0.0, 0.0, 0.0, 0.0),
            "metrics not asked for are not computed"
        );
        let x = Scorer::new().score_selected("b", "a b c", only(&metric::CONTAINS_MATCH_NORM));
        assert_eq!((x.contains_match_norm, x.token_f1), (1.0, 0.0));
    }

    #[test]
    fn token_f1_matches_squad() {
        // SQuAD: pred "the cat sat on the mat" vs gold "a cat on a mat":
        // tokens [cat sat on mat] vs [cat on mat] -> P=3/4 R=1 F=6/7
        let x = s("a cat on a mat", "the cat sat on the mat");
        assert!((x.token_f1 - 6.0 / 7.0).abs() < 1e-6);
        // multiset: repeated tokens count once each
        let x = s("go go", "go");
        assert!((x.token_f1 - 2.0 / 3.0).abs() < 1e-6);
        let x = s("apples", "");
        assert_eq!(x.token_f1, 0.0);
    }
}
