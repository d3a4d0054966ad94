//! The cascade's local deciders (docs/trust.md#the-chain-of-tiers): after
//! the rules and before the cache and the judge, an ordered chain of tiers,
//! each reading one score of the same run (lexical, embedding or
//! cross-encoder) and settling the rows it is sure of. A row is decided by
//! the first tier that decides it; a row no tier decides goes on to the
//! judge. A new kind of decider is one module here implementing [`Tier`]
//! and its place in [`parse`].

mod band;

use std::sync::Arc;

use arrow::array::{Array, AsArray, Float32Array};
use arrow::datatypes::Float32Type;
use refscore_core::ScoreColumns;
use refscore_stats::band::BandGuarantee;
use serde_json::{json, Value};

pub use band::Band;

/// One local decider of the chain.
pub trait Tier: Send + Sync + std::fmt::Debug {
    /// The score column of the run it reads.
    fn reads(&self) -> &str;
    /// What `<metric>_source` says for the rows it decides (see
    /// `refscore_core::schema::source`).
    fn source(&self) -> String;
    /// The verdict for a row whose score is `value`, with why; `None`
    /// passes the row on (a NaN always does).
    fn decide(&self, value: f32) -> Option<(bool, String)>;
    /// Its part of the run's fingerprint.
    fn fingerprint(&self) -> Value;
    /// How flags, messages and the summary show it (`cosine:0.3..0.9`).
    fn describe(&self) -> String;
    /// What it promises about its error, where it was fitted at a
    /// confidence; `None`: nothing.
    fn guarantee(&self) -> Option<BandGuarantee> {
        None
    }
}

/// Reads one `--judge-band` value as a tier. The one place a new kind of
/// decider is registered.
pub fn parse(spec: &str) -> Result<Arc<dyn Tier>, String> {
    Ok(Arc::new(Band::parse(spec)?))
}

/// The ordered tiers of a run (none: every row the rules leave goes to the
/// judge).
#[derive(Debug, Clone, Default)]
pub struct TierChain {
    tiers: Vec<Arc<dyn Tier>>,
    /// Each tier's source name, made once.
    sources: Vec<Arc<str>>,
}

/// A batch's values of each tier's score (null where the run lacks it for
/// a row, or lacks the column).
pub(crate) struct ChainValues(Vec<Option<Float32Array>>);

/// What one tier decided over the run, for the summary.
#[derive(Debug, Clone, Default, serde::Serialize, PartialEq)]
pub struct TierCount {
    /// The tier, as given (`cosine:0.3..0.9`).
    pub tier: String,
    /// Its `<metric>_source` value.
    pub source: String,
    /// Metric values it decided.
    pub decided: u64,
    /// Of them, true verdicts.
    pub decided_true: u64,
    /// decided / the rows that asked for a judge metric (set when the
    /// summary is written; see [`TierCount::with_share`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// What the tier promises, as its band carries it (absent: nothing).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<BandGuarantee>,
}

impl TierCount {
    /// The count with its share of `rows_requested` rows (none without
    /// rows).
    pub fn with_share(mut self, rows_requested: u64) -> TierCount {
        self.share = (rows_requested > 0).then(|| self.decided as f64 / rows_requested as f64);
        self
    }
}

impl TierChain {
    /// The chain of `tiers`, in the order they run.
    pub fn new(tiers: Vec<Arc<dyn Tier>>) -> TierChain {
        let sources = tiers.iter().map(|t| Arc::from(t.source())).collect();
        TierChain { tiers, sources }
    }

    /// Tier `k`'s source name.
    pub(crate) fn source(&self, k: usize) -> Arc<str> {
        Arc::clone(&self.sources[k])
    }

    /// Whether the chain has no tier.
    pub fn is_empty(&self) -> bool {
        self.tiers.is_empty()
    }

    /// The tiers, in order.
    pub fn tiers(&self) -> &[Arc<dyn Tier>] {
        &self.tiers
    }

    /// An empty count per tier, in order, for the run's report.
    pub(crate) fn counts(&self) -> Vec<TierCount> {
        self.tiers
            .iter()
            .map(|t| TierCount {
                tier: t.describe(),
                source: t.source(),
                guarantee: t.guarantee(),
                ..TierCount::default()
            })
            .collect()
    }

    /// What the result's footer records of the chain, where a tier carries
    /// a guarantee (`None` otherwise, so that results of chains that
    /// promise nothing are written as before): every tier's band, source
    /// and guarantee, in order.
    pub fn footer(&self) -> Option<String> {
        if self.tiers.iter().all(|t| t.guarantee().is_none()) {
            return None;
        }
        let tiers: Vec<Value> = self
            .tiers
            .iter()
            .map(|t| {
                let mut v = json!({"tier": t.describe(), "source": t.source()});
                if let Some(g) = t.guarantee() {
                    v["guarantee"] = json!(g);
                }
                v
            })
            .collect();
        Some(Value::Array(tiers).to_string())
    }

    /// Each tier's score among the columns of the stages before.
    pub(crate) fn values(&self, earlier: &ScoreColumns) -> ChainValues {
        ChainValues(
            self.tiers
                .iter()
                .map(|t| {
                    earlier
                        .column(t.reads())
                        .map(|c| c.as_primitive::<Float32Type>().clone())
                })
                .collect(),
        )
    }

    /// The first tier that decides row `row`: its index, the verdict and
    /// why; `None` when every tier passes it on.
    pub(crate) fn decide(&self, values: &ChainValues, row: usize) -> Option<(usize, bool, String)> {
        self.tiers
            .iter()
            .zip(&values.0)
            .enumerate()
            .find_map(|(k, (tier, column))| {
                let column = column.as_ref()?;
                if !column.is_valid(row) {
                    return None;
                }
                tier.decide(column.value(row)).map(|(v, why)| (k, v, why))
            })
    }

    /// What the fingerprint records: one band as earlier versions stored
    /// it (so their runs still resume), a list for several.
    pub(crate) fn fingerprint(&self) -> Value {
        match self.tiers.as_slice() {
            [] => Value::Null,
            [one] => one.fingerprint(),
            many => json!(many.iter().map(|t| t.fingerprint()).collect::<Vec<_>>()),
        }
    }
}

impl ChainValues {
    /// No values: a chain that decides nothing (a panel's later judges,
    /// which no tier step reaches).
    pub(crate) fn none() -> ChainValues {
        ChainValues(Vec::new())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(specs: &[&str]) -> TierChain {
        TierChain::new(specs.iter().map(|s| parse(s).unwrap()).collect())
    }

    fn values(columns: &[&[Option<f32>]]) -> ChainValues {
        ChainValues(
            columns
                .iter()
                .map(|c| Some(Float32Array::from(c.to_vec())))
                .collect(),
        )
    }

    /// The first tier that is sure decides; a null or in-band value passes
    /// the row on; the order of tiers changes who decides.
    #[test]
    fn the_first_sure_tier_decides() {
        let c = chain(&["cosine:0.3..0.9", "token_f1:0.2..0.5"]);
        let v = values(&[
            &[Some(0.95), Some(0.5), None, Some(0.1)],
            &[Some(0.1), Some(0.6), Some(0.1), Some(0.9)],
        ]);
        let got: Vec<Option<(usize, bool)>> = (0..4)
            .map(|r| c.decide(&v, r).map(|(k, b, _)| (k, b)))
            .collect();
        assert_eq!(
            got,
            [
                Some((0, true)),
                Some((1, true)),
                Some((1, false)),
                Some((0, false))
            ]
        );
        let swapped = chain(&["token_f1:0.2..0.5", "cosine:0.3..0.9"]);
        let v = values(&[
            &[Some(0.1), Some(0.6), Some(0.1), Some(0.9)],
            &[Some(0.95), Some(0.5), None, Some(0.1)],
        ]);
        let got: Vec<Option<(usize, bool)>> = (0..4)
            .map(|r| swapped.decide(&v, r).map(|(k, b, _)| (k, b)))
            .collect();
        assert_eq!(
            got,
            [
                Some((0, false)),
                Some((0, true)),
                Some((0, false)),
                Some((0, true))
            ]
        );
        assert!(chain(&["cosine:0.3..0.9"])
            .decide(&values(&[&[Some(0.5)]]), 0)
            .is_none());
        assert!(chain(&["cosine:0.3..0.9"])
            .decide(&ChainValues::none(), 0)
            .is_none());
    }

    /// One band keeps the fingerprint earlier versions stored.
    #[test]
    fn one_band_keeps_the_old_fingerprint() {
        assert_eq!(
            chain(&["cosine:0.3..0.9"]).fingerprint(),
            json!([0.3f32, 0.9f32])
        );
        assert_eq!(chain(&[]).fingerprint(), Value::Null);
        let two = chain(&["cosine:0.3..0.9", "nli_equivalence:0.1..0.8"]).fingerprint();
        assert_eq!(two.as_array().map(Vec::len), Some(2));
    }
}
