//! Fitting the cascade's band from human labels: the narrowest LO..HI such
//! that the labelled rows a stand-in score decides alone (below LO: false,
//! above HI: true) disagree with their labels at most a given share on each
//! side, so the judge is asked only where the stand-in cannot be trusted.

use serde::{Deserialize, Serialize};
use statrs::distribution::{Beta, ContinuousCDF};

use crate::ppi::Z95;

/// One side of a fitted band, measured on the labelled rows it decides.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Side {
    /// Labelled rows the side decides.
    pub labels: u64,
    /// Of them, rows whose label says otherwise.
    pub errors: u64,
    /// errors / labels (null when the side decides no labelled row).
    pub error: Option<f64>,
    /// Wilson 95% interval of the error.
    pub error_low: Option<f64>,
    /// Upper end of that interval.
    pub error_high: Option<f64>,
    /// labels / the labelled rows the band was fitted on: the share of them
    /// this side decides (absent where the side was not fitted here).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub share: Option<f64>,
    /// With a confidence (`calibrate-band --confidence`): the side's
    /// Clopper-Pearson bounds and whether its guarantee held; absent for
    /// today's point-estimate fit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub guarantee: Option<Guarantee>,
}

/// What a side fitted at a confidence promises: its error's exact binomial
/// (Clopper-Pearson) bounds on the labelled rows it decides, whether the
/// upper one is within the error asked, and, for a side left open, how many
/// labels would let it decide.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct Guarantee {
    /// C = 1 − δ: each bound holds with this probability.
    pub confidence: f64,
    /// E, where a run checks a band's guarantee ([`check_side`]; the fit
    /// gives it once, as `max_error`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_error: Option<f64>,
    /// One-sided lower Clopper-Pearson bound of the error at `confidence`
    /// (null when the side decides no labelled row).
    pub error_low: Option<f64>,
    /// One-sided upper bound at `confidence`: what is held to the error
    /// asked. Together the two ends are a 1 − 2δ two-sided interval
    /// (statsmodels' `proportion_confint(alpha=2δ, method="beta")`).
    pub error_high: Option<f64>,
    /// Whether the side decides rows with `error_high` at most the error
    /// asked (false: the side is open; in a run's check, not shown).
    pub held: bool,
    /// In a run's check: why it held or did not, in one word.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<GuaranteeStatus>,
    /// For an open side: the labels it would need.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub labels_needed: Option<LabelsNeeded>,
}

/// How many labels an open side would need before a cut's upper bound can
/// fall within the error asked.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct LabelsNeeded {
    /// What the count assumes.
    pub basis: Basis,
    /// The observed error it assumes the new labels keep (`observed_error`
    /// only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<f64>,
    /// Labelled rows the side would have to decide.
    pub side_labels: u64,
    /// More labelled rows in all, at the share of the labelled rows the cut
    /// decides now (`observed_error` only: at zero errors the share is
    /// unknown).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub more_labels: Option<u64>,
    /// The cut the count is for (`observed_error` only).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub at: Option<f64>,
}

/// What a [`LabelsNeeded`] count assumes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Basis {
    /// The new labels keep the error observed at the cut that needs the
    /// fewest of them.
    ObservedError,
    /// No cut's observed error is below the error asked, so more labels at
    /// these rates would not help: the count is the fewest labelled rows a
    /// side with no error at all needs, a lower bound.
    ZeroErrors,
}

/// What a band fitted at a confidence promises, carried with the band
/// itself (`--judge-band METRIC:LO..HI,max_error=E,confidence=C,sides=S`,
/// as `calibrate-band --confidence` prints it): each side named holds its
/// error to `max_error` with probability `confidence`. A run reads it back
/// to say, per tier, whether its labelled rows bear the promise out; a band
/// written without it promises nothing (bands fitted at the point estimate,
/// and every band written before bands carried one).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct BandGuarantee {
    /// E: the error each guaranteed side is held to.
    pub max_error: f64,
    /// C = 1 − δ.
    pub confidence: f64,
    /// Which sides, by place, the promise covers.
    pub sides: GuaranteedSides,
}

/// The sides of a band a [`BandGuarantee`] covers, by place (below LO,
/// above HI), as `calibrate-band`'s `below` and `above` name them: what a
/// side decides follows from the score's direction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GuaranteedSides {
    /// Below LO only.
    Below,
    /// Above HI only.
    Above,
    /// Both.
    Both,
}

impl GuaranteedSides {
    /// The word the band's spec uses.
    pub fn name(self) -> &'static str {
        match self {
            GuaranteedSides::Below => "below",
            GuaranteedSides::Above => "above",
            GuaranteedSides::Both => "both",
        }
    }

    /// Whether the side below LO is covered.
    pub fn below(self) -> bool {
        self != GuaranteedSides::Above
    }

    /// Whether the side above HI is covered.
    pub fn above(self) -> bool {
        self != GuaranteedSides::Below
    }

    /// The sides a fitted band's held guarantees cover; `None` where
    /// neither side held (the band then decides nothing and promises
    /// nothing).
    pub fn of(below: bool, above: bool) -> Option<GuaranteedSides> {
        match (below, above) {
            (true, true) => Some(GuaranteedSides::Both),
            (true, false) => Some(GuaranteedSides::Below),
            (false, true) => Some(GuaranteedSides::Above),
            (false, false) => None,
        }
    }
}

impl BandGuarantee {
    /// The guarantee of a band fitted at a confidence: the sides whose
    /// guarantee held; `None` for a point-estimate fit, or where no side
    /// held.
    pub fn of_fit(fit: &BandFit) -> Option<BandGuarantee> {
        let confidence = fit.confidence?;
        let held = |s: &Side| s.guarantee.is_some_and(|g| g.held);
        Some(BandGuarantee {
            max_error: fit.max_error,
            confidence,
            sides: GuaranteedSides::of(held(&fit.below), held(&fit.above))?,
        })
    }

    /// Parses the part of a band's spec after its range:
    /// `max_error=E,confidence=C[,sides=below|above|both]` (keys in any
    /// order; E and C strictly between 0 and 1). Without `sides` the promise
    /// covers both sides; the caller checks that a covered side is not open.
    pub fn parse(text: &str) -> Result<BandGuarantee, String> {
        let (mut max_error, mut confidence, mut sides) = (None, None, None);
        for part in text.split(',') {
            let (key, value) = part.split_once('=').ok_or_else(|| {
                format!("'{part}': expected KEY=VALUE (max_error=E, confidence=C, sides=below|above|both)")
            })?;
            let (key, value) = (key.trim(), value.trim());
            let share = |what: &str| -> Result<f64, String> {
                value
                    .parse::<f64>()
                    .ok()
                    .filter(|v| *v > 0.0 && *v < 1.0)
                    .ok_or_else(|| {
                        format!("{key}={value}: expected {what} between 0 and 1 (not included)")
                    })
            };
            let slot_taken = match key {
                "max_error" => max_error.replace(share("a share")?).is_some(),
                "confidence" => confidence.replace(share("a probability")?).is_some(),
                "sides" => sides
                    .replace(match value {
                        "below" => GuaranteedSides::Below,
                        "above" => GuaranteedSides::Above,
                        "both" => GuaranteedSides::Both,
                        _ => return Err(format!("sides={value}: expected below, above or both")),
                    })
                    .is_some(),
                _ => {
                    return Err(format!(
                        "'{key}': a band's guarantee has max_error, confidence and sides"
                    ))
                }
            };
            if slot_taken {
                return Err(format!("{key} is given twice"));
            }
        }
        match (max_error, confidence) {
            (Some(max_error), Some(confidence)) => Ok(BandGuarantee {
                max_error,
                confidence,
                sides: sides.unwrap_or(GuaranteedSides::Both),
            }),
            _ => Err("a band's guarantee needs both max_error=E and confidence=C".into()),
        }
    }
}

impl std::fmt::Display for BandGuarantee {
    /// What [`BandGuarantee::parse`] reads back.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "max_error={},confidence={},sides={}",
            self.max_error,
            self.confidence,
            self.sides.name()
        )
    }
}

/// How a run's labelled rows bear out a guaranteed side
/// ([`check_side`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GuaranteeStatus {
    /// The upper bound of the side's error is within the error promised.
    Held,
    /// It is not, and the observed error is itself at or above it.
    NotHeld,
    /// It is not, but the observed error is below it: the side decided too
    /// few labelled rows for the bound to show the promise (`labels_needed`
    /// says how many would, at that error).
    NotEnoughLabels,
    /// The side decided no labelled row.
    NoLabels,
}

/// The guarantee check of one side of a tier in a run: its `labels`
/// labelled rows, `errors` of them against their label, bounded by
/// Clopper-Pearson at the band's confidence and held to its error.
pub fn check_side(labels: u64, errors: u64, g: &BandGuarantee) -> Guarantee {
    let bounds = clopper_pearson(errors as f64, labels as f64, g.confidence);
    let high = bounds.map(|b| b.1);
    let held = high.is_some_and(|h| h <= g.max_error);
    let observed = (labels > 0).then(|| errors as f64 / labels as f64);
    let status = match (labels, held, observed) {
        (0, _, _) => GuaranteeStatus::NoLabels,
        (_, true, _) => GuaranteeStatus::Held,
        (_, false, Some(p)) if p < g.max_error => GuaranteeStatus::NotEnoughLabels,
        _ => GuaranteeStatus::NotHeld,
    };
    let labels_needed = match (status, observed) {
        (GuaranteeStatus::NoLabels, _) => Some(LabelsNeeded {
            basis: Basis::ZeroErrors,
            error: None,
            side_labels: zero_error_labels(g.max_error, g.confidence),
            more_labels: None,
            at: None,
        }),
        (GuaranteeStatus::NotEnoughLabels, Some(p)) => {
            side_labels_at(p, labels, g.max_error, g.confidence).map(|n| LabelsNeeded {
                basis: Basis::ObservedError,
                error: Some(p),
                side_labels: n,
                more_labels: None,
                at: None,
            })
        }
        _ => None,
    };
    Guarantee {
        confidence: g.confidence,
        max_error: Some(g.max_error),
        error_low: bounds.map(|b| b.0),
        error_high: high,
        held,
        status: Some(status),
        labels_needed,
    }
}

/// A band fitted on labelled rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandFit {
    /// Rows below are decided false (−∞: the side decides nothing; written
    /// `"-inf"` in JSON, which has no infinity).
    #[serde(serialize_with = "cut_off")]
    pub lo: f64,
    /// Rows above are decided true (+∞: the side decides nothing; written
    /// `"inf"`).
    #[serde(serialize_with = "cut_off")]
    pub hi: f64,
    /// The side below LO.
    pub below: Side,
    /// The side above HI.
    pub above: Side,
    /// The error asked for on each side.
    pub max_error: f64,
    /// The confidence each side's upper bound is held at (null: the sides
    /// were fitted at the point estimate, with no guarantee).
    pub confidence: Option<f64>,
}

/// A cut-off in JSON: the number, or `"inf"` / `"-inf"` for an open side
/// (serde would write an infinity as null, which reads as "no band").
fn cut_off<S: serde::Serializer>(v: &f64, s: S) -> Result<S::Ok, S::Error> {
    if v.is_infinite() {
        s.serialize_str(if *v > 0.0 { "inf" } else { "-inf" })
    } else {
        s.serialize_f64(*v)
    }
}

/// The Wilson score interval of `k` of `n` at 95% (statsmodels'
/// `proportion_confint(k, n, method="wilson")`).
pub fn wilson(k: u64, n: u64) -> Option<(f64, f64)> {
    if n == 0 {
        return None;
    }
    let (k, n) = (k as f64, n as f64);
    let p = k / n;
    let z2 = Z95 * Z95;
    let centre = (p + z2 / (2.0 * n)) / (1.0 + z2 / n);
    let half = Z95 * (p * (1.0 - p) / n + z2 / (4.0 * n * n)).sqrt() / (1.0 + z2 / n);
    Some((centre - half, centre + half))
}

/// A side of `labels` decided rows, `errors` of them against their label,
/// with the error's Wilson interval.
pub fn side(labels: u64, errors: u64) -> Side {
    let interval = wilson(errors, labels);
    Side {
        labels,
        errors,
        error: (labels > 0).then(|| errors as f64 / labels as f64),
        error_low: interval.map(|i| i.0),
        error_high: interval.map(|i| i.1),
        share: None,
        guarantee: None,
    }
}

/// The Clopper-Pearson (exact binomial) bounds of a share of `k` in `n`,
/// each one-sided at `confidence`: (lower, upper), the ends of statsmodels'
/// `proportion_confint(k, n, alpha=2(1-confidence), method="beta")`. The
/// inverse regularized incomplete beta is statrs'. `k` may be fractional
/// (labels needed at an observed rate); None without rows.
pub fn clopper_pearson(k: f64, n: f64, confidence: f64) -> Option<(f64, f64)> {
    if n <= 0.0 || !(0.0..=n).contains(&k) {
        return None;
    }
    let quantile = |a: f64, b: f64, p: f64| {
        Beta::new(a, b)
            .expect("positive shapes")
            .inverse_cdf(p)
            .clamp(0.0, 1.0)
    };
    let low = if k == 0.0 {
        0.0
    } else {
        quantile(k, n - k + 1.0, 1.0 - confidence)
    };
    let high = if k == n {
        1.0
    } else {
        quantile(k + 1.0, n - k, confidence)
    };
    Some((low, high))
}

/// The fewest labelled rows a side must decide, all rightly, for its upper
/// bound at `confidence` to be within `max_error` (> 0): no cut deciding
/// fewer can hold, so a confident scan starts there.
pub fn zero_error_labels(max_error: f64, confidence: f64) -> u64 {
    // 1 − δ^(1/n) ≤ E  ⇔  n ≥ ln δ / ln(1 − E); checked against the bound
    // itself so that rounding cannot put the start one row off.
    let mut n = ((1.0 - confidence).ln() / (1.0 - max_error).ln())
        .ceil()
        .max(1.0) as u64;
    let high = |n: u64| clopper_pearson(0.0, n as f64, confidence).map_or(1.0, |b| b.1);
    while n > 1 && high(n - 1) <= max_error {
        n -= 1;
    }
    while high(n) > max_error {
        n += 1;
    }
    n
}

/// One candidate cut of a side, in scan order: the cut, the labelled rows
/// it decides and how many of them are labelled otherwise.
type Cut = (f64, u64, u64);

/// The cut a side takes from its candidates, ordered from the most
/// conservative outward. At the point estimate (no confidence): the last
/// whose error is within `max_error`. At a confidence: a fixed-sequence
/// test, starting at the first cut deciding enough rows that it could hold
/// at all ([`zero_error_labels`]) and stopping at the first whose upper
/// Clopper-Pearson bound exceeds `max_error`; the last cut before the stop
/// is taken. Stopping (rather than going on to a wider cut that happens to
/// pass) is what keeps the chance that the chosen cut's true error exceeds
/// `max_error` at most δ despite the many cuts tried.
fn scan(cuts: &[Cut], max_error: f64, confidence: Option<f64>) -> Option<Cut> {
    let mut chosen = None;
    let start = confidence.map_or(0, |c| zero_error_labels(max_error, c));
    for &(at, rows, errors) in cuts {
        match confidence {
            None if (errors as f64) <= max_error * rows as f64 => chosen = Some((at, rows, errors)),
            None => {}
            Some(_) if rows < start => {}
            Some(c) => {
                let high = clopper_pearson(errors as f64, rows as f64, c).map_or(1.0, |b| b.1);
                if high > max_error {
                    break;
                }
                chosen = Some((at, rows, errors));
            }
        }
    }
    chosen
}

/// The fewest labelled rows (at least `rows`) a side with observed error
/// `p` must decide for its upper bound at `confidence` to be within
/// `max_error`, assuming new labels keep that error; `None` where no count
/// up to about a million does (an error at or near `max_error`).
fn side_labels_at(p: f64, rows: u64, max_error: f64, confidence: f64) -> Option<u64> {
    let holds = |n: u64| {
        clopper_pearson(p * n as f64, n as f64, confidence).is_some_and(|b| b.1 <= max_error)
    };
    // The bound falls as n grows at a fixed rate: doubling to the first
    // n that holds (no side is labelled beyond a million rows; the
    // beta's inverse slows at shapes far past that), then halving.
    const CAP: u64 = 1 << 20;
    let mut hi = rows.max(1);
    while !holds(hi) && hi < CAP {
        hi *= 2;
    }
    if !holds(hi) {
        return None;
    }
    let mut lo = rows.max(hi / 2);
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if holds(mid) {
            hi = mid;
        } else {
            lo = mid + 1;
        }
    }
    Some(lo)
}

/// The labels an open side would need, out of `labels` labelled rows in
/// all: at the observed error of the candidate cut that needs the fewest
/// more labelled rows (keeping the share of rows it decides), or, where no
/// cut's observed error is below `max_error`, the zero-error lower bound.
fn labels_needed(cuts: &[Cut], labels: u64, max_error: f64, confidence: f64) -> LabelsNeeded {
    let mut best: Option<LabelsNeeded> = None;
    for &(at, rows, errors) in cuts {
        let p = errors as f64 / rows as f64;
        if p >= max_error {
            continue;
        }
        let Some(lo) = side_labels_at(p, rows, max_error, confidence) else {
            continue;
        };
        // Rows this cut already decides but that a scan stopped before
        // need no more labels; the sequence, not the count, blocks them.
        if lo <= rows {
            continue;
        }
        let total = (lo as f64 * labels as f64 / rows as f64).ceil() as u64;
        let more = total.saturating_sub(labels);
        if best.is_none_or(|b| b.more_labels.is_some_and(|m| more < m)) {
            best = Some(LabelsNeeded {
                basis: Basis::ObservedError,
                error: Some(p),
                side_labels: lo,
                more_labels: Some(more),
                at: Some(at),
            });
        }
    }
    best.unwrap_or(LabelsNeeded {
        basis: Basis::ZeroErrors,
        error: None,
        side_labels: zero_error_labels(max_error, confidence),
        more_labels: None,
        at: None,
    })
}

/// A side as [`scan`] chose it (`None`: open), with its guarantee where
/// fitted at a confidence.
fn fitted_side(
    chosen: Option<Cut>,
    cuts: &[Cut],
    labels: u64,
    max_error: f64,
    confidence: Option<f64>,
) -> Side {
    let (rows, errors) = chosen.map_or((0, 0), |c| (c.1, c.2));
    let mut s = side(rows, errors);
    s.share = (labels > 0).then(|| rows as f64 / labels as f64);
    s.guarantee = confidence.map(|c| {
        let bounds = clopper_pearson(errors as f64, rows as f64, c);
        Guarantee {
            confidence: c,
            max_error: None,
            error_low: bounds.map(|b| b.0),
            error_high: bounds.map(|b| b.1),
            held: chosen.is_some(),
            status: None,
            labels_needed: chosen
                .is_none()
                .then(|| labels_needed(cuts, labels, max_error, c)),
        }
    });
    s
}

/// Today's point-estimate fit: [`fit_band_at`] with no confidence.
pub fn fit_band(pairs: &[(f64, bool)], max_error: f64) -> Result<BandFit, String> {
    fit_band_at(pairs, max_error, None)
}

/// Fits the band on `(stand-in value, label)` pairs: HI as low as it can be
/// with the rows above it labelled false at most `max_error` of the time,
/// then LO as high as it can be, up to HI, with the rows below it labelled
/// true at most `max_error` of the time. Without a confidence "at most" is
/// the observed share; with one it is the upper Clopper-Pearson bound at
/// that confidence, cuts tried from the most conservative outward and the
/// scan stopped at the first that fails (see [`scan`]), so that each side's
/// true error exceeds `max_error` with probability at most 1 − confidence.
/// Cut-offs lie half-way between neighbouring labelled values, as f32
/// values (the run compares its f32 scores with an f32 band): each
/// separates its neighbours under the run's rule (above: value > HI; below:
/// value < LO), so the rows a side counts are exactly those the run
/// decides. Fails without labels of both kinds: a side whose error cannot be
/// measured cannot be fitted.
pub fn fit_band_at(
    pairs: &[(f64, bool)],
    max_error: f64,
    confidence: Option<f64>,
) -> Result<BandFit, String> {
    let trues = pairs.iter().filter(|p| p.1).count();
    if trues == 0 || trues == pairs.len() {
        return Err(format!(
            "the labels are all {}: the band's {} side cannot be measured; label rows of both kinds",
            trues > 0,
            if trues > 0 { "lower" } else { "upper" }
        ));
    }
    // Grouped as the run sees the values: in f32.
    let mut sorted: Vec<(f32, bool)> = pairs
        .iter()
        .map(|p| (p.0 as f32, p.1))
        .filter(|p| p.0.is_finite())
        .collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    let labels = sorted.len() as u64;
    // Groups of equal values: (value, rows, labelled true).
    let mut groups: Vec<(f32, u64, u64)> = Vec::new();
    for (v, g) in &sorted {
        match groups.last_mut() {
            Some(last) if last.0 == *v => {
                last.1 += 1;
                last.2 += *g as u64;
            }
            _ => groups.push((*v, 1, *g as u64)),
        }
    }
    let n = groups.len();
    let middle = |j: usize| ((groups[j - 1].0 as f64 + groups[j].0 as f64) / 2.0) as f32;
    // An upper cut between groups j-1 and j: g[j-1] <= HI < g[j].
    let upper = |j: usize| middle(j).clamp(groups[j - 1].0, groups[j].0.next_down()) as f64;
    // A lower cut between groups j-1 and j: g[j-1] < LO <= g[j].
    let lower = |j: usize| middle(j).clamp(groups[j - 1].0.next_up(), groups[j].0) as f64;
    // HI's candidates, from the top down: cut j puts groups j.. above.
    let mut above_cuts = Vec::with_capacity(n);
    let (mut rows, mut falses) = (0u64, 0u64);
    for j in (0..n).rev() {
        rows += groups[j].1;
        falses += groups[j].1 - groups[j].2;
        let at = if j == 0 { f64::NEG_INFINITY } else { upper(j) };
        above_cuts.push((at, rows, falses));
    }
    let chosen = scan(&above_cuts, max_error, confidence);
    let mut hi = chosen.map_or(f64::INFINITY, |c| c.0);
    let above = fitted_side(chosen, &above_cuts, labels, max_error, confidence);
    // LO's candidates, from the bottom up to HI: cut j+1 puts groups ..=j
    // below.
    let mut below_cuts = Vec::with_capacity(n);
    let (mut rows, mut trues) = (0u64, 0u64);
    for (j, group) in groups.iter().enumerate() {
        rows += group.1;
        trues += group.2;
        let at = if j + 1 < n {
            lower(j + 1)
        } else {
            f64::INFINITY
        };
        if at > hi {
            break;
        }
        below_cuts.push((at, rows, trues));
    }
    let chosen = scan(&below_cuts, max_error, confidence);
    let mut lo = chosen.map_or(f64::NEG_INFINITY, |c| c.0);
    let below = fitted_side(chosen, &below_cuts, labels, max_error, confidence);
    if hi == f64::NEG_INFINITY {
        // Everything above: the f32 just below every labelled value (for
        // 0, -1e-45: a value of 0 is above it, as the fit counted).
        hi = groups[0].0.next_down() as f64;
    }
    if lo == f64::INFINITY {
        lo = groups[n - 1].0.next_up() as f64;
    }
    Ok(BandFit {
        lo,
        hi,
        below,
        above,
        max_error,
        confidence,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_clean_split_leaves_a_narrow_band() {
        // Below 0.4 all false, above 0.7 all true, mixed between.
        let mut pairs = Vec::new();
        for i in 0..40 {
            pairs.push((0.1 + i as f64 * 0.007, false));
            pairs.push((0.75 + i as f64 * 0.005, true));
        }
        pairs.extend([(0.45, true), (0.5, false), (0.6, true), (0.65, false)]);
        let b = fit_band(&pairs, 0.0).unwrap();
        assert!(b.lo > 0.373 && b.lo < 0.45, "{b:?}");
        assert!(b.hi > 0.65 && b.hi < 0.75, "{b:?}");
        assert_eq!((b.below.labels, b.below.errors), (40, 0));
        assert_eq!((b.above.labels, b.above.errors), (40, 0));
    }

    #[test]
    fn the_error_allowed_widens_the_sides() {
        let pairs: Vec<(f64, bool)> = (0..100)
            .map(|i| (i as f64 / 100.0, i % 7 == 0 || i > 50))
            .collect();
        let strict = fit_band(&pairs, 0.0).unwrap();
        let loose = fit_band(&pairs, 0.2).unwrap();
        assert!(loose.lo >= strict.lo && loose.hi <= strict.hi);
        assert!(loose.below.error.unwrap() <= 0.2 && loose.above.error.unwrap_or(0.0) <= 0.2);
    }

    /// What the run decides with the fitted band read back as f32:
    /// (rows below, of them labelled true; rows above, of them false).
    fn as_the_run_decides(b: &BandFit, pairs: &[(f64, bool)]) -> (u64, u64, u64, u64) {
        let (lo, hi) = (b.lo as f32, b.hi as f32);
        let mut n = (0, 0, 0, 0);
        for &(v, label) in pairs {
            let v = v as f32;
            if v < lo {
                n.0 += 1;
                n.1 += label as u64;
            } else if v > hi {
                n.2 += 1;
                n.3 += !label as u64;
            }
        }
        n
    }

    #[test]
    fn the_sides_count_the_rows_the_run_decides() {
        // With 10% allowed, every row goes above: HI lies below the lowest
        // value, 0, and the six rows at 0 are above it as the fit counted
        // them (a cut at -0, where f64's step below 0 lands in f32, left
        // them inside).
        let mut pairs: Vec<(f64, bool)> = (0..6).map(|_| (0.0, true)).collect();
        pairs.extend((1..=94).map(|i| (i as f64 / 100.0, true)));
        pairs.extend((0..5).map(|_| (0.5, false)));
        let b = fit_band(&pairs, 0.1).unwrap();
        assert!(b.hi < 0.0 && (b.hi as f32) < 0.0, "{b:?}");
        let run = as_the_run_decides(&b, &pairs);
        assert_eq!((run.2, run.3), (b.above.labels, b.above.errors), "{b:?}");
        assert_eq!((b.above.labels, b.above.errors), (105, 5));
        assert_eq!((run.0, run.1), (b.below.labels, b.below.errors), "{b:?}");
        // Neighbours one f32 step apart: the middle rounds onto one of them,
        // and the cut still separates them.
        let a = 0.3f32;
        let next = a.next_up();
        let pairs = vec![
            (a as f64, false),
            (next as f64, true),
            (0.9, true),
            (0.1, false),
        ];
        let b = fit_band(&pairs, 0.0).unwrap();
        let run = as_the_run_decides(&b, &pairs);
        // HI lands on 0.3 itself (0.3 is not above it, its neighbour is);
        // LO cannot pass HI, so the row at 0.3 stays with the judge.
        assert_eq!((run.0, run.1, run.2, run.3), (1, 0, 2, 0), "{b:?}");
        assert_eq!((b.below.labels, b.above.labels), (1, 2));
        assert_eq!(b.hi as f32, a);
        // Open sides are written so that they read back as open.
        let open = fit_band(&[(0.2, true), (0.3, false), (0.4, true), (0.5, false)], 0.0).unwrap();
        let json = serde_json::to_value(&open).unwrap();
        assert_eq!(
            (open.lo, open.hi),
            (f64::NEG_INFINITY, f64::INFINITY),
            "{open:?}"
        );
        assert_eq!(
            (&json["lo"], &json["hi"]),
            (&serde_json::json!("-inf"), &serde_json::json!("inf"))
        );
    }

    #[test]
    fn one_kind_of_label_cannot_fit_a_band() {
        assert!(fit_band(&[(0.2, true), (0.9, true)], 0.02).is_err());
    }

    #[test]
    fn wilson_matches_statsmodels() {
        // statsmodels.stats.proportion.proportion_confint(3, 40, method="wilson")
        let (lo, hi) = wilson(3, 40).unwrap();
        assert!((lo - 0.025836025774588184).abs() < 1e-12, "{lo}");
        assert!((hi - 0.1986423352431055).abs() < 1e-12, "{hi}");
    }

    #[test]
    fn clopper_pearson_matches_statsmodels() {
        // Figures from statsmodels 0.15.0 (scipy 1.17.1), run once:
        //   from statsmodels.stats.proportion import proportion_confint
        //   proportion_confint(k, n, alpha=2*(1-c), method='beta')
        // (each end a one-sided bound at c; the upper one also equals
        // scipy.stats.beta.ppf(c, k+1, n-k)).
        let cases = [
            (0, 10, 0.9, 0.0, 0.2056717652757185),
            (10, 10, 0.9, 0.7943282347242815, 1.0),
            (3, 40, 0.9, 0.027870242852176794, 0.15944931303445956),
            (0, 200, 0.95, 0.0, 0.014867039231272054),
            (7, 150, 0.9, 0.026150650529541495, 0.0772253552037913),
            (1, 1, 0.8, 0.19999999999999996, 1.0),
            (45, 50, 0.99, 0.7584473562535243, 0.9736902057417738),
            (12, 400, 0.9, 0.01965179425447922, 0.044132093562876486),
        ];
        for (k, n, c, low, high) in cases {
            let (l, h) = clopper_pearson(k as f64, n as f64, c).unwrap();
            assert!(
                (l - low).abs() < 1e-9,
                "{k}/{n} at {c}: low {l}, want {low}"
            );
            assert!(
                (h - high).abs() < 1e-9,
                "{k}/{n} at {c}: high {h}, want {high}"
            );
        }
        assert_eq!(clopper_pearson(0.0, 0.0, 0.9), None);
    }

    /// A run's check of a guaranteed side: Clopper-Pearson at the band's
    /// confidence against its error, with the status in words. Figures
    /// from scipy 1.17.1, run once:
    ///   upper = scipy.stats.beta.ppf(c, k + 1, n - k)
    ///   lower = scipy.stats.beta.ppf(1 - c, k, n - k + 1)
    /// and, for the labels a side needs at its observed error p, the first
    /// m >= n with beta.ppf(c, p m + 1, m - p m) <= E.
    #[test]
    fn a_run_checks_a_side_against_its_guarantee() {
        let g = |max_error, confidence| BandGuarantee {
            max_error,
            confidence,
            sides: GuaranteedSides::Both,
        };
        let cases = [
            // k, n, E, C, lower, upper, status, side labels needed
            (
                0,
                40,
                0.1,
                0.9,
                0.0,
                0.055939123714076625,
                GuaranteeStatus::Held,
                None,
            ),
            (
                0,
                10,
                0.1,
                0.9,
                0.0,
                0.2056717652757185,
                GuaranteeStatus::NotEnoughLabels,
                Some(22),
            ),
            (
                3,
                40,
                0.05,
                0.9,
                0.027870242852176794,
                0.15944931303445956,
                GuaranteeStatus::NotHeld,
                None,
            ),
            (
                1,
                30,
                0.05,
                0.9,
                0.0035058572695848733,
                0.12356999067525615,
                GuaranteeStatus::NotEnoughLabels,
                Some(326),
            ),
            (
                2,
                150,
                0.05,
                0.95,
                0.002374192077553909,
                0.041374969893577085,
                GuaranteeStatus::Held,
                None,
            ),
            (
                5,
                60,
                0.1,
                0.9,
                0.041090675699303844,
                0.14910314556864135,
                GuaranteeStatus::NotEnoughLabels,
                Some(581),
            ),
            // The example of docs/trust.md.
            (
                2,
                64,
                0.05,
                0.9,
                0.00834031657900519,
                0.08102633701134153,
                GuaranteeStatus::NotEnoughLabels,
                Some(262),
            ),
        ];
        for (k, n, e, c, low, high, status, needed) in cases {
            let check = check_side(n, k, &g(e, c));
            let what = format!("{k}/{n} at E {e}, C {c}: {check:?}");
            assert!((check.error_low.unwrap() - low).abs() < 1e-9, "{what}");
            assert!((check.error_high.unwrap() - high).abs() < 1e-9, "{what}");
            assert_eq!(check.status, Some(status), "{what}");
            assert_eq!(check.held, status == GuaranteeStatus::Held, "{what}");
            assert_eq!(check.max_error, Some(e), "{what}");
            assert_eq!(check.labels_needed.map(|l| l.side_labels), needed, "{what}");
        }
        // No labelled row: nothing to bound, and the fewest a check needs.
        let none = check_side(0, 0, &g(0.05, 0.9));
        assert_eq!(none.status, Some(GuaranteeStatus::NoLabels));
        assert_eq!(
            (none.error_low, none.error_high, none.held),
            (None, None, false)
        );
        let need = none.labels_needed.unwrap();
        assert_eq!((need.basis, need.side_labels), (Basis::ZeroErrors, 45));
    }

    /// The guarantee a fit carries reads back from its spec, and covers only
    /// the sides that held.
    #[test]
    fn a_fit_carries_the_sides_that_held() {
        let mut pairs: Vec<(f64, bool)> = (0..30).map(|i| (0.9 + i as f64 * 1e-3, true)).collect();
        pairs.extend((0..100).map(|i| (0.1 + i as f64 * 1e-3, i % 2 == 0)));
        pairs.extend((0..60).map(|i| (0.95 + i as f64 * 1e-4, true)));
        let b = fit_band_at(&pairs, 0.05, Some(0.9)).unwrap();
        let g = BandGuarantee::of_fit(&b).unwrap();
        assert_eq!(g.sides, GuaranteedSides::Above, "{b:?}");
        assert_eq!(BandGuarantee::parse(&g.to_string()).unwrap(), g);
        assert_eq!(g.to_string(), "max_error=0.05,confidence=0.9,sides=above");
        // Without a confidence, or with no side held, no guarantee.
        assert_eq!(
            BandGuarantee::of_fit(&fit_band(&pairs, 0.05).unwrap()),
            None
        );
        let open = fit_band_at(&pairs[..30 + 100], 0.05, Some(0.9)).unwrap();
        assert_eq!(BandGuarantee::of_fit(&open), None, "{open:?}");
    }

    #[test]
    fn a_confident_scan_starts_where_zero_errors_could_hold() {
        // 1 − 0.1^(1/n) ≤ 0.05 first at n = 45 (ln 0.1 / ln 0.95 = 44.9).
        assert_eq!(zero_error_labels(0.05, 0.9), 45);
        assert_eq!(zero_error_labels(0.02, 0.9), 114);
    }

    #[test]
    fn a_confident_side_stops_at_the_first_cut_that_fails() {
        // From the top: 60 rows labelled true, then 20 false, then 200 true.
        // Each widening past the false rows has an observed error under 10%
        // but the scan stopped at the first cut whose bound exceeds it.
        let mut pairs: Vec<(f64, bool)> = (0..60).map(|i| (0.9 + i as f64 * 1e-3, true)).collect();
        pairs.extend((0..20).map(|i| (0.8 + i as f64 * 1e-3, false)));
        pairs.extend((0..200).map(|i| (0.5 + i as f64 * 1e-3, true)));
        pairs.extend((0..50).map(|i| (0.1 + i as f64 * 1e-3, false)));
        let point = fit_band(&pairs, 0.1).unwrap();
        assert!(point.hi < 0.8, "{point:?}");
        let sure = fit_band_at(&pairs, 0.1, Some(0.9)).unwrap();
        assert!(sure.hi > 0.81 && sure.hi < 0.9, "{sure:?}");
        let g = sure.above.guarantee.unwrap();
        assert!(g.held && g.error_high.unwrap() <= 0.1, "{g:?}");
        // 62 rows, 2 false: bound 8.4%; with a third false row it is 10.3%
        // (scipy.stats.beta.ppf(0.9, 4, 60)), and the scan stops.
        assert_eq!((sure.above.labels, sure.above.errors), (62, 2));
    }

    #[test]
    fn an_open_side_says_how_many_labels_it_needs() {
        // 30 rows at the top, all true: too few for a 5% bound at 90% (45
        // needed), at zero observed error, so 15 more on that side; the
        // side decides 30 of 130 labelled rows, so 195 in all, 65 more.
        let mut pairs: Vec<(f64, bool)> = (0..30).map(|i| (0.9 + i as f64 * 1e-3, true)).collect();
        pairs.extend((0..100).map(|i| (0.1 + i as f64 * 1e-3, i % 2 == 0)));
        let b = fit_band_at(&pairs, 0.05, Some(0.9)).unwrap();
        assert_eq!(b.hi, f64::INFINITY);
        let g = b.above.guarantee.unwrap();
        assert!(!g.held);
        let need = g.labels_needed.unwrap();
        assert_eq!(need.basis, Basis::ObservedError);
        assert_eq!(
            (need.error, need.side_labels, need.more_labels),
            (Some(0.0), 45, Some(65))
        );
        // Below, every cut's observed error is 50%: no count at that rate
        // helps, and the zero-error lower bound is given.
        let need = b.below.guarantee.unwrap().labels_needed.unwrap();
        assert_eq!(need.basis, Basis::ZeroErrors);
        assert_eq!((need.side_labels, need.more_labels), (45, None));
        // Without a confidence, no guarantee is claimed.
        assert_eq!(fit_band(&pairs, 0.05).unwrap().above.guarantee, None);
    }
}
