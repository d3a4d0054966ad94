//! The judge stage's output columns: per metric its value, explanation and
//! source, then the per-row accounting and the templates used.

use std::sync::Arc;

use arrow::array::{
    ArrayRef, BooleanArray, Float32Array, StringArray, StructArray, UInt32Array, UInt8Array,
};
use arrow::datatypes::{DataType, Field, Fields};
use refscore_batch::ScoreColumns;

use crate::client::Usage;

/// The `similarity` column: the expected score where the judge gave
/// probabilities, else the sampled one, on 0..=1.
pub(crate) fn similarity_value(score: u8, expected: Option<f32>) -> f32 {
    expected.unwrap_or(f32::from(score)) / 10.0
}

/// How a judge metric was decided, as written to `<metric>_source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Source {
    Rule,
    Band,
    Cache,
    Judge,
}

impl Source {
    pub(crate) fn name(self) -> &'static str {
        match self {
            Source::Rule => "rule",
            Source::Band => "band",
            Source::Cache => "cache",
            Source::Judge => "judge",
        }
    }
}

/// The result of one metric for one row.
#[derive(Debug, Clone)]
pub(crate) enum Verdict {
    /// The verdict, P(true) where the judge gave probabilities, the reason
    /// where one was asked for.
    Meaning {
        verdict: bool,
        p_true: Option<f32>,
        reason: Option<String>,
    },
    /// The sampled score, the expected score (0..=10) where the judge gave
    /// probabilities, the rationale where one was asked for.
    Similarity {
        score: u8,
        expected: Option<f32>,
        rationale: Option<String>,
    },
    /// (matched, reference facts, output facts); counts unknown when decided by rule.
    Facts(Option<(u32, u32, u32)>),
}

/// Builds the output columns of a batch from its verdicts, usage and errors;
/// `templates[m]` lists the prompt versions metric m's answers come from.
pub(crate) fn build(
    sel: [bool; 3],
    templates: &[String; 3],
    n: usize,
    verdicts: &[[Option<(Verdict, Source)>; 3]],
    usage: &[Usage],
    errors: Vec<Option<String>>,
) -> ScoreColumns {
    let mut out = ScoreColumns::default();
    let source = |m: usize| -> ArrayRef {
        Arc::new(
            verdicts
                .iter()
                .map(|v| v[m].as_ref().map(|(_, s)| s.name()))
                .collect::<StringArray>(),
        )
    };
    let mut all = fields(sel).into_iter();
    let mut push = |out: &mut ScoreColumns, a: ArrayRef| out.push(all.next().expect("field"), a);
    if sel[0] {
        let get = |i: usize| match &verdicts[i][0] {
            Some((
                Verdict::Meaning {
                    verdict,
                    p_true,
                    reason,
                },
                _,
            )) => (Some(*verdict), *p_true, reason.clone()),
            _ => (None, None, None),
        };
        push(
            &mut out,
            Arc::new((0..n).map(|i| get(i).0).collect::<BooleanArray>()),
        );
        push(
            &mut out,
            Arc::new((0..n).map(|i| get(i).1).collect::<Float32Array>()),
        );
        push(
            &mut out,
            Arc::new((0..n).map(|i| get(i).2).collect::<StringArray>()),
        );
        push(&mut out, source(0));
    }
    if sel[1] {
        let get = |i: usize| match &verdicts[i][1] {
            Some((
                Verdict::Similarity {
                    score,
                    expected,
                    rationale,
                },
                _,
            )) => (
                Some(*score),
                Some(similarity_value(*score, *expected)),
                rationale.clone(),
            ),
            _ => (None, None, None),
        };
        push(
            &mut out,
            Arc::new((0..n).map(|i| get(i).0).collect::<UInt8Array>()),
        );
        push(
            &mut out,
            Arc::new((0..n).map(|i| get(i).1).collect::<Float32Array>()),
        );
        push(
            &mut out,
            Arc::new((0..n).map(|i| get(i).2).collect::<StringArray>()),
        );
        push(&mut out, source(1));
    }
    if sel[2] {
        let counts: Vec<Option<Option<(u32, u32, u32)>>> = (0..n)
            .map(|i| match &verdicts[i][2] {
                Some((Verdict::Facts(c), _)) => Some(*c),
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
        push(
            &mut out,
            ratio(|m, r, o| {
                if r.max(o) == 0 {
                    0.0
                } else {
                    m as f32 / r.max(o) as f32
                }
            }),
        );
        push(
            &mut out,
            ratio(move |m, r, _| if r == 0 { 0.0 } else { m as f32 / r as f32 }),
        );
        push(
            &mut out,
            ratio(move |m, _, o| if o == 0 { 0.0 } else { m as f32 / o as f32 }),
        );
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
        push(&mut out, Arc::new(struct_array));
        push(&mut out, source(2));
    }
    let any = |i: usize| {
        verdicts[i]
            .iter()
            .any(|v| matches!(v, Some((_, Source::Judge | Source::Cache))))
    };
    let acc = |f: fn(&Usage) -> u32| -> ArrayRef {
        Arc::new(
            (0..n)
                .map(|i| {
                    (verdicts[i].iter().any(Option::is_some) || errors[i].is_some())
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
            any(i).then(|| {
                (0..3)
                    .filter(|m| matches!(verdicts[i][*m], Some((_, Source::Judge | Source::Cache))))
                    .map(|m| templates[m].as_str())
                    .collect::<Vec<_>>()
                    .join(",")
            })
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

fn count_fields() -> Fields {
    Fields::from(vec![
        Field::new("matched", DataType::UInt32, true),
        Field::new("reference", DataType::UInt32, true),
        Field::new("output", DataType::UInt32, true),
    ])
}

/// The output fields for a selection of judge metrics.
pub fn fields(selection: [bool; 3]) -> Vec<Field> {
    let mut f = Vec::new();
    let text = |n: &str| Field::new(n, DataType::Utf8, true);
    if selection[0] {
        f.push(Field::new("meaning_match", DataType::Boolean, true));
        f.push(Field::new("meaning_match_p", DataType::Float32, true));
        f.push(text("meaning_match_reason"));
        f.push(text("meaning_match_source"));
    }
    if selection[1] {
        f.push(Field::new("similarity_score", DataType::UInt8, true));
        f.push(Field::new("similarity", DataType::Float32, true));
        f.push(text("similarity_rationale"));
        f.push(text("similarity_source"));
    }
    if selection[2] {
        f.push(Field::new("fact_similarity", DataType::Float32, true));
        f.push(Field::new("fact_recall", DataType::Float32, true));
        f.push(Field::new("fact_precision", DataType::Float32, true));
        f.push(Field::new(
            "fact_counts",
            DataType::Struct(count_fields()),
            true,
        ));
        f.push(text("fact_similarity_source"));
    }
    f.push(Field::new("judge_prompt_tokens", DataType::UInt32, true));
    f.push(Field::new(
        "judge_completion_tokens",
        DataType::UInt32,
        true,
    ));
    f.push(Field::new("judge_latency_ms", DataType::UInt32, true));
    f.push(text("judge_templates"));
    f
}
