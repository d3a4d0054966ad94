//! The cascade's local deciders (docs/trust.md#the-chain-of-tiers): after
//! the rules and before the cache and the judge, an ordered chain of tiers,
//! each reading scores of the same run (lexical, embedding or
//! cross-encoder) and settling the rows it is sure of. A row is decided by
//! the first tier that decides it; a row no tier decides goes on to the
//! judge. A new kind of decider is one module here implementing
//! [`TierKind`] and [`Tier`], plus its entry in [`KINDS`] (and the field
//! of `JudgeArgs` its flag fills); a kind whose tiers can be fitted to
//! labels also offers `calibrate-band` a [`TierFit`].

mod band;
mod band_fit;
mod fit;
mod kind;

use std::sync::Arc;

use arrow::array::{Array, AsArray, Float32Array};
use arrow::datatypes::Float32Type;
use refscore_core::metric::MetricSet;
use refscore_core::{Error, ScoreColumns};
use refscore_stats::band::BandGuarantee;
use serde_json::{json, Value};

pub use band::{Band, BAND};
pub use fit::{FitRequest, Fitted, TierFit};
pub use kind::{check_reads, flag, TierKind};

/// Every kind of tier, each self-describing (see [`TierKind`]): the one
/// place a new kind is registered. Tiers of several kinds run in this
/// order, then in the order given.
pub static KINDS: &[&dyn TierKind] = &[&BAND];

/// One local decider of the chain.
pub trait Tier: Send + Sync + std::fmt::Debug {
    /// Its kind.
    fn kind(&self) -> &'static dyn TierKind;
    /// The score columns of the run it reads (any number), in the order
    /// [`Tier::decide`] gets their values.
    fn reads(&self) -> &[String];
    /// Checks it against the run: the run's `metrics`, and whether the run
    /// has a judge metric a tier decides (`decidable`); `spec` is the tier
    /// as given. By default [`check_reads`].
    fn check(&self, spec: &str, metrics: &MetricSet, decidable: bool) -> Result<(), Error> {
        check_reads(self, spec, metrics, decidable)
    }
    /// What `<metric>_source` says for the rows it decides:
    /// `refscore_core::schema::source::tier` of its kind's name.
    fn source(&self) -> String;
    /// The verdict for a row whose scores are `values` (one per column of
    /// [`Tier::reads`], none null), with why; `None` passes the row on (a
    /// NaN always does).
    fn decide(&self, values: &[f32]) -> Option<(bool, String)>;
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

/// Reads one `--judge-band` value as a tier (the tests' shorthand).
#[cfg(test)]
fn parse(spec: &str) -> Result<Arc<dyn Tier>, String> {
    BAND.parse(spec)
}

/// The ordered tiers of a run (none: every row the rules leave goes to the
/// judge).
#[derive(Debug, Clone, Default)]
pub struct TierChain {
    tiers: Vec<Arc<dyn Tier>>,
    /// Each tier's source name, made once.
    sources: Vec<Arc<str>>,
    /// Where each tier's columns start in [`ChainValues`].
    starts: Vec<usize>,
}

/// A batch's values of each score the tiers read, tier after tier, each
/// tier's in the order of its [`Tier::reads`] (null where the run lacks a
/// score for a row, or lacks the column).
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
        let starts = tiers
            .iter()
            .scan(0, |next, t| {
                let start = *next;
                *next += t.reads().len();
                Some(start)
            })
            .collect();
        TierChain {
            tiers,
            sources,
            starts,
        }
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

    /// Each tier's scores among the columns of the stages before.
    pub(crate) fn values(&self, earlier: &ScoreColumns) -> ChainValues {
        ChainValues(
            self.tiers
                .iter()
                .flat_map(|t| t.reads())
                .map(|score| {
                    earlier
                        .column(score)
                        .map(|c| c.as_primitive::<Float32Type>().clone())
                })
                .collect(),
        )
    }

    /// The first tier that decides row `row`: its index, the verdict and
    /// why; `None` when every tier passes it on (a tier with a score
    /// missing or null at the row does).
    pub(crate) fn decide(&self, values: &ChainValues, row: usize) -> Option<(usize, bool, String)> {
        let mut scores = Vec::new();
        self.tiers
            .iter()
            .zip(&self.starts)
            .enumerate()
            .find_map(|(k, (tier, &start))| {
                let columns = values.0.get(start..start + tier.reads().len())?;
                scores.clear();
                for column in columns {
                    let column = column.as_ref().filter(|c| c.is_valid(row))?;
                    scores.push(column.value(row));
                }
                tier.decide(&scores).map(|(v, why)| (k, v, why))
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

    /// A test kind reading two scores: true where the first beats the
    /// second by more than 0.5, else passed on.
    #[derive(Debug)]
    struct Gap;

    impl TierKind for Gap {
        fn name(&self) -> &'static str {
            "gap"
        }
        fn key(&self) -> &'static str {
            "judge_gap"
        }
        fn shape(&self) -> &'static str {
            "A,B"
        }
        fn example(&self) -> &'static str {
            "cosine,token_f1"
        }
        fn take_specs(&self, _: &mut crate::JudgeArgs) -> Vec<String> {
            Vec::new()
        }
        fn parse(&self, _: &str) -> Result<Arc<dyn Tier>, String> {
            Ok(Arc::new(Gap))
        }
    }

    static READS: std::sync::LazyLock<[String; 2]> =
        std::sync::LazyLock::new(|| ["cosine".into(), "token_f1".into()]);

    impl Tier for Gap {
        fn kind(&self) -> &'static dyn TierKind {
            &Gap
        }
        fn reads(&self) -> &[String] {
            READS.as_slice()
        }
        fn source(&self) -> String {
            refscore_core::schema::source::tier(self.kind().name(), "cosine")
        }
        fn decide(&self, values: &[f32]) -> Option<(bool, String)> {
            (values[0] - values[1] > 0.5).then(|| (true, format!("{values:?}")))
        }
        fn fingerprint(&self) -> Value {
            json!("gap")
        }
        fn describe(&self) -> String {
            "gap".into()
        }
    }

    /// A tier may read several scores: after a one-score band, the
    /// two-score tier gets its own columns, in its order; a null in either
    /// passes the row on.
    #[test]
    fn a_tier_reads_any_number_of_scores() {
        let c = TierChain::new(vec![parse("token_f1:0.2..0.5").unwrap(), Arc::new(Gap)]);
        let v = values(&[
            &[Some(0.3), Some(0.3), Some(0.3), Some(0.9)],
            &[Some(0.9), Some(0.9), None, Some(0.9)],
            &[Some(0.1), Some(0.6), Some(0.1), Some(0.1)],
        ]);
        let got: Vec<Option<(usize, bool, String)>> = (0..4).map(|r| c.decide(&v, r)).collect();
        assert_eq!(
            got,
            [
                Some((1, true, "[0.9, 0.1]".into())),
                None,
                None,
                Some((0, true, "token_f1 0.900 is above the band 0.2..0.5".into())),
            ]
        );
        assert_eq!(c.source(1).as_ref(), "gap:cosine");
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
