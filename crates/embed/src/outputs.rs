//! The embedding metrics as entries: each names its registry metric and
//! how a pair's scores give its value, so a new embedding metric is one
//! entry here (and its [`refscore_core::metric::Builtin`]).

use arrow::datatypes::{DataType, Field};
use refscore_core::metric::{self, MetricSet};

/// A pair's raw scores, from which each embedding metric takes its value.
#[derive(Debug, Clone, Copy)]
pub(crate) struct PairScores {
    pub(crate) cosine: f32,
    /// BERTScore's precision, recall and F1 (rescaled when asked), when a
    /// BERTScore metric is wanted.
    pub(crate) bertscore: [f32; 3],
}

/// One embedding metric: its registry entry and how a pair's scores give
/// its value. A new metric is one entry here.
pub(crate) struct Output {
    pub(crate) metric: &'static metric::Builtin,
    /// Whether it needs BERTScore's greedy matching.
    pub(crate) bertscore: bool,
    pub(crate) value: fn(&PairScores) -> f32,
}

/// The embedding metrics, in the order of the output columns.
pub(crate) static OUTPUTS: [Output; 4] = [
    Output {
        metric: &metric::COSINE,
        bertscore: false,
        value: |s| s.cosine,
    },
    Output {
        metric: &metric::BERTSCORE_PRECISION,
        bertscore: true,
        value: |s| s.bertscore[0],
    },
    Output {
        metric: &metric::BERTSCORE_RECALL,
        bertscore: true,
        value: |s| s.bertscore[1],
    },
    Output {
        metric: &metric::BERTSCORE_F1,
        bertscore: true,
        value: |s| s.bertscore[2],
    },
];

/// The output fields of the selected embedding metrics.
pub fn fields(metrics: &MetricSet) -> Vec<Field> {
    OUTPUTS
        .iter()
        .filter(|o| metrics.contains(o.metric))
        .map(|o| Field::new(o.metric.name.clone(), DataType::Float32, true))
        .collect()
}
