//! A band tier (`--judge-band METRIC:LO..HI`): rows whose score (cosine,
//! BERTScore F1, token F1, an NLI probability, …) lies outside LO..HI are
//! decided by its side without a judge call; `refscore calibrate-band` fits
//! one, or a chain of them, from human labels. Over a score where lower is
//! better (`nli_contradiction`, see `refscore_core::metric::Direction`) the
//! sides swap: above HI false, below LO true.

use std::sync::Arc;

use refscore_core::metric::Direction;
use refscore_core::schema::source;
use refscore_stats::band::BandGuarantee;
use serde_json::{json, Value};

use super::band_fit::BandFit;
use super::{Tier, TierFit, TierKind};
use crate::options::JudgeArgs;

/// The band kind of tier: `--judge-band METRIC:LO..HI`, `[[judge.tier]]
/// band = "..."`, source `band:METRIC`.
pub struct BandKind;

/// The band kind's entry in [`super::KINDS`].
pub static BAND: BandKind = BandKind;

impl TierKind for BandKind {
    fn name(&self) -> &'static str {
        "band"
    }

    fn key(&self) -> &'static str {
        "judge_band"
    }

    fn shape(&self) -> &'static str {
        "METRIC:LO..HI"
    }

    fn example(&self) -> &'static str {
        "cosine:0.3..0.9"
    }

    fn take_specs(&self, args: &mut JudgeArgs) -> Vec<String> {
        std::mem::take(&mut args.judge_band)
    }

    fn parse(&self, spec: &str) -> Result<Arc<dyn Tier>, String> {
        Ok(Arc::new(Band::parse(spec)?))
    }

    fn fitter(&self) -> Option<&'static dyn TierFit> {
        Some(&BandFit)
    }
}

/// A band on an embedding or lexical score of the same run.
#[derive(Debug, Clone, PartialEq)]
pub struct Band {
    /// The score the band reads (a result column computed before judging).
    pub metric: String,
    /// Rows below it are decided false (true where lower is better).
    pub lo: f32,
    /// Rows above it are decided true (false where lower is better).
    pub hi: f32,
    /// Which way the score improves, from the metric registry.
    pub direction: Direction,
    /// What the band promises, where it was fitted at a confidence
    /// (`calibrate-band --confidence` writes it into the spec); `None` for
    /// a band that promises nothing.
    pub guarantee: Option<BandGuarantee>,
}

impl Band {
    /// Parses `METRIC:LO..HI` (e.g. `cosine:0.3..0.9`), LO ≤ HI; `-inf` or
    /// `inf` leaves a side open (it decides nothing). A band with no inside
    /// (both ends infinite on the same side) would decide every row, and is
    /// refused.
    ///
    /// A guarantee may follow the range, as `calibrate-band --confidence`
    /// writes it: `METRIC:LO..HI,max_error=E,confidence=C,sides=S`
    /// ([`BandGuarantee::parse`]); a side it covers must decide rows (a
    /// finite end).
    pub fn parse(spec: &str) -> Result<Band, String> {
        let bad = || format!("{spec}: expected METRIC:LO..HI, e.g. cosine:0.3..0.9, with LO <= HI");
        let (band, guarantee) = match spec.split_once(',') {
            Some((band, g)) => (
                band,
                Some(BandGuarantee::parse(g).map_err(|e| format!("{spec}: {e}"))?),
            ),
            None => (spec, None),
        };
        let (metric, range) = band.split_once(':').ok_or_else(bad)?;
        let (lo, hi) = range.split_once("..").ok_or_else(bad)?;
        let (lo, hi): (f32, f32) = (
            lo.trim().parse().map_err(|_| bad())?,
            hi.trim().parse().map_err(|_| bad())?,
        );
        if metric.trim().is_empty() || lo.is_nan() || hi.is_nan() || lo > hi {
            return Err(bad());
        }
        if lo == hi && lo.is_infinite() {
            return Err(format!(
                "{spec}: the band {lo}..{hi} is empty, so it would decide every row without the judge; give a finite end (e.g. -inf..0.9), or -inf..inf to decide nothing"
            ));
        }
        if let Some(g) = &guarantee {
            let open = [
                (g.sides.below() && lo == f32::NEG_INFINITY, "below", "-inf"),
                (g.sides.above() && hi == f32::INFINITY, "above", "inf"),
            ];
            if let Some((_, side, end)) = open.iter().find(|o| o.0) {
                return Err(format!(
                    "{spec}: sides={} covers the side {side} the band, but that side is open ({end}) and decides nothing; name only the sides that decide",
                    g.sides.name()
                ));
            }
        }
        let metric = metric.trim().to_string();
        Ok(Band {
            direction: Direction::of(&metric),
            metric,
            lo,
            hi,
            guarantee,
        })
    }

    /// What the fingerprint records: `[lo, hi]` for a cosine band, as
    /// before other metrics were allowed (so those runs still resume); a
    /// lower-is-better band says so (its verdicts differ from what earlier
    /// versions decided).
    pub(crate) fn fingerprint(&self) -> Value {
        if self.metric == "cosine" {
            json!([self.lo, self.hi])
        } else if self.direction.lower_is_better() {
            json!({"metric": self.metric, "range": [self.lo, self.hi], "lower_is_better": true})
        } else {
            json!({"metric": self.metric, "range": [self.lo, self.hi]})
        }
    }
}

impl Tier for Band {
    fn kind(&self) -> &'static dyn TierKind {
        &BAND
    }

    fn reads(&self) -> &[String] {
        std::slice::from_ref(&self.metric)
    }

    fn source(&self) -> String {
        source::tier(BAND.name(), &self.metric)
    }

    fn decide(&self, values: &[f32]) -> Option<(bool, String)> {
        Band::decide(self, values[0])
    }

    fn fingerprint(&self) -> Value {
        Band::fingerprint(self)
    }

    fn describe(&self) -> String {
        self.to_string()
    }

    fn guarantee(&self) -> Option<BandGuarantee> {
        self.guarantee
    }
}

impl Band {
    /// Below LO false, above HI true (the other way round where lower is
    /// better); inside the band (or NaN) passed on.
    pub fn decide(&self, value: f32) -> Option<(bool, String)> {
        if !(value < self.lo || value > self.hi) {
            return None;
        }
        let above = value > self.hi;
        let why = format!(
            "{} {value:.3} is {} the band {}..{}{}",
            self.metric,
            if above { "above" } else { "below" },
            self.lo,
            self.hi,
            if self.direction.lower_is_better() {
                " (lower is better)"
            } else {
                ""
            }
        );
        Some((above != self.direction.lower_is_better(), why))
    }
}

impl std::fmt::Display for Band {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}..{}", self.metric, self.lo, self.hi)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use refscore_stats::band::GuaranteedSides;

    #[test]
    fn parses_any_metric_and_keeps_the_cosine_fingerprint() {
        let b = Band::parse("cosine:0.3..0.9").unwrap();
        assert_eq!(b.fingerprint(), json!([0.3f32, 0.9f32]));
        let b = Band::parse("bertscore_f1:-0.1..0.4").unwrap();
        assert_eq!((b.metric.as_str(), b.lo, b.hi), ("bertscore_f1", -0.1, 0.4));
        assert!(Band::parse("cosine:0.9..0.3").is_err());
        assert!(Band::parse("0.3..0.9").is_err());
        assert!(Band::parse("cosine:a..0.9").is_err());
        assert_eq!(
            Band::parse("cosine:-inf..0.9").unwrap().lo,
            f32::NEG_INFINITY
        );
        assert!(Band::parse("cosine:inf..inf").is_err());
        assert!(Band::parse("cosine:-inf..-inf").is_err());
        assert!(Band::parse("cosine:-inf..inf").is_ok());
    }

    /// A band may carry the guarantee it was fitted at; it changes neither
    /// what the band decides nor the run's fingerprint, and a side it
    /// covers must decide rows.
    #[test]
    fn a_band_carries_its_guarantee() {
        let b = Band::parse("cosine:0.3..0.9,max_error=0.05,confidence=0.9,sides=above").unwrap();
        let g = b.guarantee.unwrap();
        assert_eq!(
            (g.max_error, g.confidence, g.sides),
            (0.05, 0.9, GuaranteedSides::Above)
        );
        assert_eq!(
            b.fingerprint(),
            Band::parse("cosine:0.3..0.9").unwrap().fingerprint()
        );
        assert_eq!(b.to_string(), "cosine:0.3..0.9");
        // Keys in any order; without sides, both.
        let b = Band::parse("token_f1:0.2..0.5,confidence=0.95,max_error=0.1").unwrap();
        assert_eq!(b.guarantee.unwrap().sides, GuaranteedSides::Both);
        assert_eq!(Band::parse("cosine:0.3..0.9").unwrap().guarantee, None);
        for bad in [
            "cosine:-inf..0.9,max_error=0.05,confidence=0.9,sides=both",
            "cosine:-inf..0.9,max_error=0.05,confidence=0.9,sides=below",
            "cosine:0.3..0.9,max_error=0.05",
            "cosine:0.3..0.9,max_error=1,confidence=0.9",
            "cosine:0.3..0.9,max_error=0.05,confidence=0",
            "cosine:0.3..0.9,max_error=0.05,confidence=0.9,sides=left",
            "cosine:0.3..0.9,max_error=0.05,confidence=0.9,delta=0.1",
            "cosine:0.3..0.9,max_error=0.05,max_error=0.1,confidence=0.9",
            "cosine:0.3..0.9,0.05",
        ] {
            assert!(Band::parse(bad).is_err(), "{bad}");
        }
        assert!(Band::parse("cosine:-inf..0.9,max_error=0.05,confidence=0.9,sides=above").is_ok());
    }

    /// Over a lower-is-better score the sides swap.
    #[test]
    fn a_lower_is_better_band_decides_the_other_way() {
        let b = Band::parse("nli_contradiction:0.2..0.7").unwrap();
        assert_eq!(b.decide(0.9).map(|d| d.0), Some(false));
        assert_eq!(b.decide(0.1).map(|d| d.0), Some(true));
        assert_eq!(b.decide(0.5), None);
        let c = Band::parse("nli_equivalence:0.2..0.7").unwrap();
        assert_eq!(c.decide(0.9).map(|d| d.0), Some(true));
    }
}
