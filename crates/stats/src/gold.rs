//! One metric against its human labels over a whole run: the labelled rows
//! kept whole (a labelled slice is hundreds to thousands of rows) and the
//! unlabelled rows as sums, so that parts of a run merge exactly into what
//! one pass would have gathered, and [`GoldState::calibration`] computes
//! every agreement figure and the corrected estimate from them.

use serde::{Deserialize, Serialize};

use crate::agreement::{
    probability_calibration, score_agreement, score_separation, Confusion, ProbabilityCalibration,
    ScoreAgreement, ScoreSeparation, VerdictAgreement,
};
use crate::agreement::{verdict_agreement_at, RATE_CONFIDENCE};
use crate::band::{check_side, wilson, BandGuarantee};
use crate::ppi::{corrected_mean, CorrectedMean, PpiSums, MIN_LABELS};
use crate::{fixed, SUM_SCALE};

/// How a metric's value is compared with its label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum LabelKind {
    /// A judge verdict against a boolean label (agreement, kappa, the
    /// probability's calibration, a corrected pass rate).
    Verdict,
    /// A judge score against a label on the same 0–1 scale (correlations,
    /// error, weighted kappa, a corrected mean).
    Score,
    /// An embedding or lexical score read as a verdict against a boolean
    /// label: how well it could stand in for the judge (AUC, best cut-off).
    StandIn,
}

/// One labelled row: its label, the metric's value, and what else the
/// figures read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LabelledRow {
    /// The human label: 0 or 1 for a verdict, the score otherwise.
    pub gold: f64,
    /// The metric's value (a verdict as 0 or 1).
    pub value: f64,
    /// The judge's P(true), where the metric has one and the judge gave it.
    pub p: Option<f64>,
    /// The run's embedding and lexical scores on this row, in
    /// [`GoldState::stand_ins`] order (verdicts only).
    pub stand_ins: Vec<Option<f64>>,
    /// Whether the cascade band decided the value (source `band`).
    pub by_band: bool,
    /// Which tier of the chain decided it (its source, `band:SCORE`), where
    /// one did and the result says which (older results say `band`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tier: Option<String>,
    /// Whether a rule (the exact-match or empty-output rule) decided the
    /// value: such a row never reaches a tier in a run, so a band is neither
    /// fitted nor measured on it.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub by_rule: bool,
}

/// A metric's labelled rows and unlabelled sums; see the module text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct GoldState {
    /// The metric.
    pub metric: String,
    /// The column holding its labels.
    pub column: String,
    /// How value and label are compared.
    pub kind: LabelKind,
    /// The embedding and lexical scores recorded beside each labelled row.
    pub stand_ins: Vec<String>,
    /// The labelled rows with a value, sorted (so a merge is order-free).
    pub rows: Vec<LabelledRow>,
    /// Labelled rows where the metric has no value (not requested, failed).
    pub labels_without_value: u64,
    /// Rows with a value and no label.
    pub unlabelled: u64,
    /// Σ value over them, fixed point (value × 2^64), as a decimal string.
    #[serde(with = "decimal")]
    pub unlabelled_sum: i128,
    /// Σ value² over them, fixed point, as a decimal string.
    #[serde(with = "decimal")]
    pub unlabelled_sum_sq: i128,
    /// The guarantees of the run's tiers, by source, as the result's footer
    /// records them: each tier's sides are checked against them. Empty
    /// where no tier carried one.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub guarantees: Vec<TierGuarantee>,
    /// The confidence of a verdict's TPR and TNR lower bounds.
    #[serde(
        default = "default_rates_confidence",
        skip_serializing_if = "is_default_rates_confidence"
    )]
    pub rates_confidence: f64,
}

/// What one tier of a run promised: its source (`band:SCORE`) and its
/// band's guarantee.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TierGuarantee {
    /// The tier's source.
    pub source: String,
    /// Its guarantee, sides by place.
    pub guarantee: BandGuarantee,
    /// Whether its score is lower-is-better (below LO decides true), which
    /// says which verdict each guaranteed side decides.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lower_is_better: bool,
}

fn default_rates_confidence() -> f64 {
    RATE_CONFIDENCE
}

fn is_default_rates_confidence(c: &f64) -> bool {
    *c == RATE_CONFIDENCE
}

/// Fixed-point sums stored as decimal strings: JSON numbers beyond 2^53
/// lose digits in most readers.
mod decimal {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(v: &i128, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&v.to_string())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i128, D::Error> {
        let text = String::deserialize(d)?;
        text.parse()
            .map_err(|_| serde::de::Error::custom(format!("bad fixed-point sum '{text}'")))
    }
}

/// Agreement figures computed from one [`GoldState`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Calibration {
    /// The metric.
    pub metric: String,
    /// The column holding its labels.
    pub gold_column: String,
    /// How value and label were compared.
    pub kind: LabelKind,
    /// Labelled rows with a value: what every figure below is computed on.
    pub labels: u64,
    /// Labelled rows without a value, left out.
    pub labels_without_value: u64,
    /// A verdict's agreement with the labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub verdict: Option<VerdictAgreement>,
    /// How well the judge's P(true) separates the classes, and the
    /// `--judge-threshold` that would have agreed best.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probability: Option<ScoreSeparation>,
    /// Brier score, ECE and the reliability diagram of P(true).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub probability_calibration: Option<ProbabilityCalibration>,
    /// A score's agreement with labelled scores.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub score: Option<ScoreAgreement>,
    /// A stand-in's separation of the label classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub separation: Option<ScoreSeparation>,
    /// The run's embedding and lexical scores as stand-ins for this verdict.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub stand_ins: Vec<StandIn>,
    /// The verdicts the cascade band decided, against their labels.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub band: Option<VerdictAgreement>,
    /// The same per tier of the chain, in the order of their sources' names
    /// (`band:SCORE`; `band` for results written before tiers).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tiers: Vec<TierAgreement>,
    /// The run-wide mean (pass rate) corrected for the judge's error.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub corrected: Option<Corrected>,
}

/// What one tier of the chain decided, against the labels: its agreement,
/// and each side's error with its Wilson interval (the rows it decided
/// false that are labelled true, and the reverse); where the tier's band
/// carries a guarantee, each side it covers has a `guarantee` check
/// (Clopper-Pearson at the band's confidence, against its error).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TierAgreement {
    /// The tier's source (`band:SCORE`).
    pub source: String,
    /// Its verdicts against their labels (absent where a guaranteed tier
    /// decided no labelled row: it is listed to say so).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub agreement: Option<VerdictAgreement>,
    /// The guarantee its band carries, where it carries one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<BandGuarantee>,
    /// The rows it decided false.
    pub decided_false: crate::band::Side,
    /// The rows it decided true.
    pub decided_true: crate::band::Side,
}

/// Per tier that decided labelled rows, and per tier whose band carries a
/// guarantee (decided labelled rows or not), in the order of the sources'
/// names. A guaranteed side's rows are checked against its guarantee.
fn tier_agreements(
    rows: &[LabelledRow],
    guarantees: &[TierGuarantee],
    rates_confidence: f64,
) -> Vec<TierAgreement> {
    let mut sources: Vec<&str> = rows.iter().filter_map(|r| r.tier.as_deref()).collect();
    sources.extend(guarantees.iter().map(|g| g.source.as_str()));
    sources.sort_unstable();
    sources.dedup();
    sources
        .into_iter()
        .map(|source| {
            let mine: Vec<(bool, bool)> = rows
                .iter()
                .filter(|r| r.tier.as_deref() == Some(source))
                .map(|r| (r.gold >= 0.5, r.value >= 0.5))
                .collect();
            let promised = guarantees.iter().find(|g| g.source == source);
            let side = |verdict: bool| {
                let decided = mine.iter().filter(|(_, v)| *v == verdict);
                let labels = decided.clone().count() as u64;
                let errors = decided.filter(|(g, _)| *g != verdict).count() as u64;
                let mut s = crate::band::side(labels, errors);
                // The side deciding `verdict`, by place: above HI decides
                // true unless lower is better.
                s.guarantee = promised
                    .filter(|t| {
                        let above = verdict != t.lower_is_better;
                        if above {
                            t.guarantee.sides.above()
                        } else {
                            t.guarantee.sides.below()
                        }
                    })
                    .map(|t| check_side(labels, errors, &t.guarantee));
                s
            };
            TierAgreement {
                source: source.to_string(),
                agreement: verdict_agreement_at(
                    Confusion::of(mine.iter().copied()),
                    rates_confidence,
                ),
                guarantee: promised.map(|t| t.guarantee),
                decided_false: side(false),
                decided_true: side(true),
            }
        })
        .collect()
}

/// One embedding or lexical score's separation of a verdict's labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct StandIn {
    /// The stand-in metric.
    pub metric: String,
    /// Its AUC and best cut-off against the labels (for a lower-is-better
    /// score: the chance a label-true row scores *below* a label-false one,
    /// and the cut-off at or below which a row reads as true).
    pub separation: ScoreSeparation,
    /// Whether the score is lower-is-better (`nli_contradiction`).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub lower_is_better: bool,
}

/// The run-wide figure as the judge gives it and as corrected by the labels.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Corrected {
    /// Rows with a value (labelled or not).
    pub rows: u64,
    /// The metric's mean over them as the judge gave it (a verdict's pass rate).
    pub raw: f64,
    /// The corrected estimate, with its interval where there are enough labels.
    #[serde(flatten)]
    pub mean: CorrectedMean,
    /// Why there is no interval: fewer than [`MIN_LABELS`] labels, labels
    /// all alike, or a variance estimate of zero (then `low` and `high` are
    /// NaN, null in JSON).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    /// Where a verdict's labels have one class, PPI++ has no interval (its
    /// variance estimate is zero), but the labels alone still bound the
    /// rate: their Wilson 95% interval ([`wilson`]), `[low, high]`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels_wilson: Option<[f64; 2]>,
}

impl GoldState {
    /// An empty state for `metric` labelled by `column`.
    pub fn new(metric: &str, column: &str, kind: LabelKind, stand_ins: Vec<String>) -> GoldState {
        GoldState {
            metric: metric.into(),
            column: column.into(),
            kind,
            stand_ins,
            rows: Vec::new(),
            labels_without_value: 0,
            unlabelled: 0,
            unlabelled_sum: 0,
            unlabelled_sum_sq: 0,
            guarantees: Vec::new(),
            rates_confidence: RATE_CONFIDENCE,
        }
    }

    /// Counts one row: its label (if any), the metric's value (if any), and
    /// the rest of [`LabelledRow`] for a labelled one.
    pub fn add(
        &mut self,
        gold: Option<f64>,
        value: Option<f64>,
        labelled: impl FnOnce() -> (Option<f64>, Vec<Option<f64>>, Option<String>, bool),
    ) {
        match (gold, value.filter(|v| v.is_finite())) {
            (Some(gold), Some(value)) => {
                let (p, stand_ins, tier, by_rule) = labelled();
                self.rows.push(LabelledRow {
                    gold,
                    value,
                    p,
                    stand_ins,
                    by_band: tier.is_some(),
                    tier,
                    by_rule,
                });
            }
            (Some(_), None) => self.labels_without_value += 1,
            (None, Some(v)) => {
                self.unlabelled += 1;
                self.unlabelled_sum += fixed(v);
                self.unlabelled_sum_sq += fixed(v * v);
            }
            (None, None) => {}
        }
    }

    /// Adds another part of the same run. Fails when it labels another
    /// metric, column or stand-in set.
    pub fn merge(&mut self, other: &GoldState) -> Result<(), String> {
        if (&self.metric, &self.column, self.kind, &self.stand_ins)
            != (&other.metric, &other.column, other.kind, &other.stand_ins)
        {
            return Err(format!(
                "the parts label differently: {} by '{}' and {} by '{}'",
                self.metric, self.column, other.metric, other.column
            ));
        }
        if (&self.guarantees, self.rates_confidence) != (&other.guarantees, other.rates_confidence)
        {
            return Err(format!(
                "the parts measure {} differently: their tiers' guarantees or --gold-confidence differ",
                self.metric
            ));
        }
        self.rows.extend(other.rows.iter().cloned());
        self.labels_without_value += other.labels_without_value;
        self.unlabelled += other.unlabelled;
        self.unlabelled_sum += other.unlabelled_sum;
        self.unlabelled_sum_sq += other.unlabelled_sum_sq;
        self.sort();
        Ok(())
    }

    /// Puts the labelled rows in their canonical order.
    pub fn sort(&mut self) {
        let key = |r: &LabelledRow| {
            let mut k = vec![
                r.gold,
                r.value,
                r.p.unwrap_or(f64::NAN),
                r.by_band as u8 as f64,
            ];
            k.extend(r.stand_ins.iter().map(|v| v.unwrap_or(f64::NAN)));
            k
        };
        self.rows.sort_by(|a, b| {
            key(a)
                .iter()
                .zip(key(b).iter())
                .map(|(x, y)| x.total_cmp(y))
                .find(|o| o.is_ne())
                .unwrap_or_else(|| a.tier.cmp(&b.tier))
        });
    }

    /// The sums the corrected mean needs.
    fn ppi_sums(&self) -> PpiSums {
        let mut s = PpiSums {
            big_n: self.unlabelled as f64,
            fu: self.unlabelled_sum as f64 / SUM_SCALE,
            ffu: self.unlabelled_sum_sq as f64 / SUM_SCALE,
            ..PpiSums::default()
        };
        for r in &self.rows {
            s.n += 1.0;
            s.y += r.gold;
            s.f += r.value;
            s.yy += r.gold * r.gold;
            s.ff += r.value * r.value;
            s.yf += r.gold * r.value;
        }
        s
    }

    /// Every figure the labels allow; see [`Calibration`]. Every stand-in
    /// is read as higher-is-better; [`GoldState::calibration_with`] says
    /// which are not.
    pub fn calibration(&self) -> Calibration {
        self.calibration_with(|_| false)
    }

    /// [`GoldState::calibration`], with the stand-ins for which
    /// `lower_is_better` holds read the other way round (the metric
    /// registry knows which; this crate does not depend on it).
    pub fn calibration_with(&self, lower_is_better: impl Fn(&str) -> bool) -> Calibration {
        let gold_true: Vec<bool> = self.rows.iter().map(|r| r.gold >= 0.5).collect();
        let values: Vec<f64> = self.rows.iter().map(|r| r.value).collect();
        let mut c = Calibration {
            metric: self.metric.clone(),
            gold_column: self.column.clone(),
            kind: self.kind,
            labels: self.rows.len() as u64,
            labels_without_value: self.labels_without_value,
            verdict: None,
            probability: None,
            probability_calibration: None,
            score: None,
            separation: None,
            stand_ins: Vec::new(),
            band: None,
            tiers: Vec::new(),
            corrected: None,
        };
        match self.kind {
            LabelKind::Verdict => {
                let at = self.rates_confidence;
                let pairs = self.rows.iter().map(|r| (r.gold >= 0.5, r.value >= 0.5));
                c.verdict = verdict_agreement_at(Confusion::of(pairs), at);
                let band = self.rows.iter().filter(|r| r.by_band);
                c.band = verdict_agreement_at(
                    Confusion::of(band.map(|r| (r.gold >= 0.5, r.value >= 0.5))),
                    at,
                );
                c.tiers = tier_agreements(&self.rows, &self.guarantees, at);
                let (p, g): (Vec<f64>, Vec<bool>) = self
                    .rows
                    .iter()
                    .filter_map(|r| Some((r.p?, r.gold >= 0.5)))
                    .unzip();
                c.probability = score_separation(&p, &g);
                c.probability_calibration = probability_calibration(&p, &g);
                for (k, name) in self.stand_ins.iter().enumerate() {
                    let lower = lower_is_better(name);
                    // A lower-is-better score is read negated, its cut-off
                    // negated back.
                    let sign = if lower { -1.0 } else { 1.0 };
                    let (s, g): (Vec<f64>, Vec<bool>) = self
                        .rows
                        .iter()
                        .filter_map(|r| {
                            Some((sign * r.stand_ins.get(k).copied().flatten()?, r.gold >= 0.5))
                        })
                        .filter(|(v, _)| v.is_finite())
                        .unzip();
                    if let Some(mut separation) = score_separation(&s, &g) {
                        if let Some(t) = separation.best_threshold.as_mut() {
                            t.value *= sign;
                        }
                        c.stand_ins.push(StandIn {
                            metric: name.clone(),
                            separation,
                            lower_is_better: lower,
                        });
                    }
                }
            }
            LabelKind::Score => {
                let gold: Vec<f64> = self.rows.iter().map(|r| r.gold).collect();
                c.score = score_agreement(&values, &gold);
            }
            LabelKind::StandIn => c.separation = score_separation(&values, &gold_true),
        }
        if self.kind != LabelKind::StandIn {
            c.corrected = self.corrected();
        }
        c
    }

    fn corrected(&self) -> Option<Corrected> {
        let s = self.ppi_sums();
        let rows = self.unlabelled + self.rows.len() as u64;
        let raw = (s.f + s.fu) / rows as f64;
        let mut mean = corrected_mean(&s)?;
        let labels = self.rows.len() as u64;
        let alike = self.rows.iter().all(|r| r.gold == self.rows[0].gold);
        let mut labels_wilson = None;
        let note = if labels < MIN_LABELS {
            Some(format!(
                "{labels} labels: at least {MIN_LABELS} are needed for an interval"
            ))
        } else if alike {
            let label = match (self.kind, self.rows[0].gold) {
                (LabelKind::Score, g) => g.to_string(),
                (_, g) if g >= 0.5 => "true".into(),
                _ => "false".into(),
            };
            if self.kind == LabelKind::Verdict {
                let trues = if self.rows[0].gold >= 0.5 { labels } else { 0 };
                labels_wilson = wilson(trues, labels).map(|(lo, hi)| [lo, hi]);
            }
            Some(format!(
                "the {labels} labels are all {label}, so PPI++'s variance estimate is zero"
            ))
        } else if mean.low.is_nan() {
            Some("PPI++'s variance estimate is zero".into())
        } else {
            None
        };
        if note.is_some() {
            mean.low = f64::NAN;
            mean.high = f64::NAN;
        }
        Some(Corrected {
            rows,
            raw,
            mean,
            note,
            labels_wilson,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A judge verdict labelled on `labels` rows (`label_true` of them
    /// true, the judge saying true on `judged_true`) and unlabelled on 1000
    /// more, 550 of them judged true.
    fn state(labels: usize, label_true: usize, judged_true: usize) -> GoldState {
        let mut g = GoldState::new("meaning_match", "human", LabelKind::Verdict, Vec::new());
        for i in 0..labels {
            let gold = (i < label_true) as u8 as f64;
            let value = (i < judged_true) as u8 as f64;
            g.add(Some(gold), Some(value), || (None, Vec::new(), None, false));
        }
        for i in 0..1000 {
            g.add(None, Some((i < 550) as u8 as f64), || unreachable!());
        }
        g.sort();
        g
    }

    #[test]
    fn one_class_labels_give_the_wilson_interval_of_the_labels_instead() {
        // The case: 60 labels all true, the judge at 55%.
        let c = state(60, 60, 33).calibration();
        let k = c.corrected.as_ref().unwrap();
        assert_eq!(k.mean.estimate, 1.0);
        assert!(k.mean.low.is_nan() && k.mean.high.is_nan(), "{k:?}");
        assert_eq!(
            k.note.as_deref(),
            Some("the 60 labels are all true, so PPI++'s variance estimate is zero")
        );
        // statsmodels 0.15.0 proportion_confint(60, 60, method="wilson") =
        // (0.9398281478579099, 0.9999999999999999).
        let [lo, hi] = k.labels_wilson.unwrap();
        assert!((lo - 0.9398281478579099).abs() < 1e-12, "{lo}");
        assert!((hi - 0.9999999999999999).abs() < 1e-12, "{hi}");
        let json = serde_json::to_value(&c).unwrap();
        let k = &json["corrected"];
        assert!(k["low"].is_null() && k["high"].is_null(), "{k}");
        assert_eq!(k["labels_wilson"].as_array().unwrap().len(), 2);
        let v = &json["verdict"];
        assert!(v["kappa_low"].is_null() && v["kappa_high"].is_null(), "{v}");
        assert_eq!(
            v["kappa_no_interval"],
            "the labels have one class (all true)"
        );

        // statsmodels 0.15.0 proportion_confint(0, 45, method="wilson") =
        // (0.0, 0.07865159873288839).
        let c = state(45, 0, 10).calibration();
        let k = c.corrected.unwrap();
        assert_eq!(k.mean.estimate, 0.0);
        assert!(k.note.unwrap().contains("all false"));
        let [lo, hi] = k.labels_wilson.unwrap();
        assert!(lo.abs() < 1e-12 && (hi - 0.07865159873288839).abs() < 1e-12);
    }
}
