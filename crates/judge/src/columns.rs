//! The judge stage's output columns: per metric its value, explanation and
//! source, then the per-row accounting and the templates used.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, StringArray, StructArray, UInt32Array, UInt8Array,
};
use arrow::datatypes::{DataType, Field, Fields};
use refscore_core::schema::{JUDGE_TEMPLATES, JUDGE_USAGE};
use refscore_core::ScoreColumns;

use crate::decide::{Decisions, Outcome, Source};
use crate::definition::Answer;
use crate::metric::{JudgeMetric, JudgeMetrics};
use crate::transport::Usage;

/// A score answer's value on 0..=1: the expected score where the judge
/// gave probabilities, else the sampled one, placed on the rubric's scale.
pub(crate) fn normalised(score: u8, expected: Option<f32>, (min, max): (u8, u8)) -> f32 {
    (expected.unwrap_or(f32::from(score)) - f32::from(min)) / f32::from(max - min)
}

/// Builds the output columns of a batch: per metric of `metrics` (in
/// order) its columns from `verdicts[m][row]`, then the per-row usage and
/// templates, and the rows' errors.
pub(crate) fn build(
    metrics: &[JudgeMetric],
    versions: &[String],
    n: usize,
    verdicts: &[Decisions],
    usage: &[Usage],
    errors: Vec<Option<String>>,
) -> ScoreColumns {
    let mut out = ScoreColumns::default();
    let mut all = fields_of(metrics).into_iter();
    let mut push = |out: &mut ScoreColumns, a: ArrayRef| out.push(all.next().expect("field"), a);
    for (jm, decided) in metrics.iter().zip(verdicts) {
        for array in metric_arrays(jm, n, decided) {
            push(&mut out, array);
        }
    }
    // The templates a row's values were asked with (an NLI-checked fact
    // ratio's say which parts ran locally).
    let decided_by_judge = |i: usize, m: usize| {
        matches!(
            verdicts[m][i],
            Some((_, Source::Judge | Source::Cache | Source::Nli))
        )
    };
    let acc = |f: fn(&Usage) -> u32| -> ArrayRef {
        Arc::new(
            (0..n)
                .map(|i| {
                    (verdicts.iter().any(|v| v[i].is_some()) || errors[i].is_some())
                        .then(|| f(&usage[i]))
                })
                .collect::<UInt32Array>(),
        )
    };
    push(&mut out, acc(|u| u.prompt_tokens));
    push(&mut out, acc(|u| u.completion_tokens));
    push(&mut out, acc(|u| u.latency_ms));
    let templates: Vec<Option<String>> = (0..n)
        .map(|i| {
            let used: Vec<&str> = (0..metrics.len())
                .filter(|&m| decided_by_judge(i, m))
                .map(|m| versions[m].as_str())
                .collect();
            (!used.is_empty()).then(|| used.join(","))
        })
        .collect();
    push(&mut out, Arc::new(StringArray::from(templates)));
    for (i, e) in errors.into_iter().enumerate() {
        if let Some(e) = e {
            out.fail_row(n, i, e);
        }
    }
    out
}

/// One metric's columns, in the order of [`metric_fields`].
fn metric_arrays(jm: &JudgeMetric, n: usize, decided: &Decisions) -> Vec<ArrayRef> {
    let source: ArrayRef = Arc::new(
        decided
            .iter()
            .map(|v| v.as_ref().map(|(_, s)| s.name()))
            .collect::<StringArray>(),
    );
    let verdict = |i: usize| decided[i].as_ref().map(|(v, _)| v);
    match jm {
        JudgeMetric::Rubric(r) => match r.answer {
            Answer::Verdict => {
                let get = |i: usize| match verdict(i) {
                    Some(Outcome::Verdict {
                        verdict,
                        p_true,
                        reason,
                    }) => (Some(*verdict), *p_true, reason.as_deref()),
                    _ => (None, None, None),
                };
                vec![
                    Arc::new((0..n).map(|i| get(i).0).collect::<BooleanArray>()),
                    Arc::new((0..n).map(|i| get(i).1).collect::<Float32Array>()),
                    Arc::new((0..n).map(|i| get(i).2).collect::<StringArray>()),
                    source,
                ]
            }
            Answer::Score { min, max } => {
                let get = |i: usize| match verdict(i) {
                    Some(Outcome::Score {
                        score,
                        expected,
                        reason,
                    }) => (
                        Some(*score),
                        Some(normalised(*score, *expected, (min, max))),
                        reason.as_deref(),
                    ),
                    _ => (None, None, None),
                };
                vec![
                    Arc::new((0..n).map(|i| get(i).0).collect::<UInt8Array>()),
                    Arc::new((0..n).map(|i| get(i).1).collect::<Float32Array>()),
                    Arc::new((0..n).map(|i| get(i).2).collect::<StringArray>()),
                    source,
                ]
            }
        },
        JudgeMetric::FactRatio => {
            let counts: Vec<Option<Option<(u32, u32, u32)>>> = (0..n)
                .map(|i| match verdict(i) {
                    Some(Outcome::Facts(c)) => Some(*c),
                    _ => None,
                })
                .collect();
            let ratio = |f: fn(u32, u32, u32) -> f32| -> ArrayRef {
                Arc::new(
                    counts
                        .iter()
                        .map(|c| c.map(|c| c.map_or(0.0, |(m, r, o)| f(m, r, o))))
                        .collect::<Float32Array>(),
                )
            };
            let part = |k: usize| -> ArrayRef {
                Arc::new(
                    counts
                        .iter()
                        .map(|c| c.flatten().map(|t| [t.0, t.1, t.2][k]))
                        .collect::<UInt32Array>(),
                )
            };
            let valid: Vec<bool> = counts.iter().map(|c| c.flatten().is_some()).collect();
            let struct_array = StructArray::new(
                count_fields(),
                vec![part(0), part(1), part(2)],
                Some(valid.into()),
            );
            vec![
                ratio(|m, r, o| {
                    if r.max(o) == 0 {
                        0.0
                    } else {
                        m as f32 / r.max(o) as f32
                    }
                }),
                ratio(|m, r, _| if r == 0 { 0.0 } else { m as f32 / r as f32 }),
                ratio(|m, _, o| if o == 0 { 0.0 } else { m as f32 / o as f32 }),
                Arc::new(struct_array),
                source,
            ]
        }
    }
}

fn count_fields() -> Fields {
    Fields::from(vec![
        Field::new("matched", DataType::UInt32, true),
        Field::new("reference", DataType::UInt32, true),
        Field::new("output", DataType::UInt32, true),
    ])
}

/// One metric's output fields: the names from its registry entry, the
/// types from its kind of answer.
fn metric_fields(jm: &JudgeMetric) -> Vec<Field> {
    let types = match jm {
        JudgeMetric::Rubric(r) if r.answer == Answer::Verdict => vec![
            DataType::Boolean,
            DataType::Float32,
            DataType::Utf8,
            DataType::Utf8,
        ],
        // A score rubric.
        JudgeMetric::Rubric(_) => vec![
            DataType::UInt8,
            DataType::Float32,
            DataType::Utf8,
            DataType::Utf8,
        ],
        JudgeMetric::FactRatio => vec![
            DataType::Float32,
            DataType::Float32,
            DataType::Float32,
            DataType::Struct(count_fields()),
            DataType::Utf8,
        ],
    };
    let names = jm.metric().output_columns();
    assert_eq!(names.len(), types.len(), "{}: columns", jm.name());
    names
        .iter()
        .zip(types)
        .map(|(name, t)| Field::new(name.as_str(), t, true))
        .collect()
}

/// The output fields of the judge metrics of a run, in output order, then
/// the per-row accounting columns.
pub(crate) fn fields_of(metrics: &[JudgeMetric]) -> Vec<Field> {
    let text = |n: &str| Field::new(n, DataType::Utf8, true);
    let mut f: Vec<Field> = metrics.iter().flat_map(metric_fields).collect();
    for name in JUDGE_USAGE {
        f.push(Field::new(name, DataType::UInt32, true));
    }
    f.push(text(JUDGE_TEMPLATES));
    f
}

impl JudgeMetrics {
    /// The output fields of the selected metrics, then the accounting and
    /// template columns.
    pub fn fields(&self, set: &refscore_core::metric::MetricSet) -> Vec<Field> {
        fields_of(&self.selected(set))
    }

    /// The columns a panel of judges adds after [`JudgeMetrics::fields`]:
    /// each judge's verdict or score (and P(true)), and the jury's
    /// agreement; none for a single judge (`mode` None).
    pub fn panel_fields(
        &self,
        set: &refscore_core::metric::MetricSet,
        names: &[String],
        mode: Option<crate::PanelMode>,
    ) -> Vec<Field> {
        crate::panel::panel_fields(&self.selected(set), names, mode)
    }
}
