//! Fitting the cascade's band from human labels: the narrowest LO..HI such
//! that the labelled rows a stand-in score decides alone (below LO: false,
//! above HI: true) disagree with their labels at most a given share on each
//! side, so the judge is asked only where the stand-in cannot be trusted.

use serde::Serialize;

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
}

/// A band fitted on labelled rows.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BandFit {
    /// Rows below are decided false (−∞: the side decides nothing).
    pub lo: f64,
    /// Rows above are decided true (+∞: the side decides nothing).
    pub hi: f64,
    /// The side below LO.
    pub below: Side,
    /// The side above HI.
    pub above: Side,
    /// The error asked for on each side.
    pub max_error: f64,
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

fn side(labels: u64, errors: u64) -> Side {
    let interval = wilson(errors, labels);
    Side {
        labels,
        errors,
        error: (labels > 0).then(|| errors as f64 / labels as f64),
        error_low: interval.map(|i| i.0),
        error_high: interval.map(|i| i.1),
    }
}

/// Fits the band on `(stand-in value, label)` pairs: HI as low as it can be
/// with the rows above it labelled false at most `max_error` of the time,
/// then LO as high as it can be, up to HI, with the rows below it labelled
/// true at most `max_error` of the time. Cut-offs lie half-way between
/// neighbouring labelled values. Fails without labels of both kinds: a side
/// whose error cannot be measured cannot be fitted.
pub fn fit_band(pairs: &[(f64, bool)], max_error: f64) -> Result<BandFit, String> {
    let trues = pairs.iter().filter(|p| p.1).count();
    if trues == 0 || trues == pairs.len() {
        return Err(format!(
            "the labels are all {}: the band's {} side cannot be measured; label rows of both kinds",
            trues > 0,
            if trues > 0 { "lower" } else { "upper" }
        ));
    }
    let mut sorted: Vec<(f64, bool)> = pairs.iter().copied().filter(|p| p.0.is_finite()).collect();
    sorted.sort_by(|a, b| a.0.total_cmp(&b.0));
    // Groups of equal values: (value, rows, labelled true).
    let mut groups: Vec<(f64, u64, u64)> = Vec::new();
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
    let cut = |j: usize| (groups[j - 1].0 + groups[j].0) / 2.0;
    // HI: the smallest cut j (rows of groups j.. above) within the error.
    let (mut hi, mut above) = (f64::INFINITY, side(0, 0));
    let (mut rows, mut falses) = (0u64, 0u64);
    for j in (0..n).rev() {
        rows += groups[j].1;
        falses += groups[j].1 - groups[j].2;
        if (falses as f64) <= max_error * rows as f64 {
            hi = if j == 0 { f64::NEG_INFINITY } else { cut(j) };
            above = side(rows, falses);
        }
    }
    // LO: the largest cut up to HI (rows of groups ..j below) within the error.
    let (mut lo, mut below) = (f64::NEG_INFINITY, side(0, 0));
    let (mut rows, mut trues) = (0u64, 0u64);
    for (j, group) in groups.iter().enumerate() {
        rows += group.1;
        trues += group.2;
        let at = if j + 1 < n { cut(j + 1) } else { f64::INFINITY };
        if at > hi {
            break;
        }
        if (trues as f64) <= max_error * rows as f64 {
            lo = at;
            below = side(rows, trues);
        }
    }
    if hi == f64::NEG_INFINITY {
        // Everything above: a cut below every labelled value.
        hi = groups[0].0.next_down();
    }
    if lo == f64::INFINITY {
        lo = groups[n - 1].0.next_up();
    }
    Ok(BandFit {
        lo,
        hi,
        below,
        above,
        max_error,
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
}
