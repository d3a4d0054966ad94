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
    }
}

/// Fits the band on `(stand-in value, label)` pairs: HI as low as it can be
/// with the rows above it labelled false at most `max_error` of the time,
/// then LO as high as it can be, up to HI, with the rows below it labelled
/// true at most `max_error` of the time. Cut-offs lie half-way between
/// neighbouring labelled values, as f32 values (the run compares its f32
/// scores with an f32 band): each separates its neighbours under the run's
/// rule (above: value > HI; below: value < LO), so the rows a side counts
/// are exactly those the run decides. Fails without labels of both kinds: a
/// side whose error cannot be measured cannot be fitted.
pub fn fit_band(pairs: &[(f64, bool)], max_error: f64) -> Result<BandFit, String> {
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
    // HI: the smallest cut j (rows of groups j.. above) within the error.
    let (mut hi, mut above) = (f64::INFINITY, side(0, 0));
    let (mut rows, mut falses) = (0u64, 0u64);
    for j in (0..n).rev() {
        rows += groups[j].1;
        falses += groups[j].1 - groups[j].2;
        if (falses as f64) <= max_error * rows as f64 {
            hi = if j == 0 { f64::NEG_INFINITY } else { upper(j) };
            above = side(rows, falses);
        }
    }
    // LO: the largest cut up to HI (rows of groups ..j below) within the error.
    let (mut lo, mut below) = (f64::NEG_INFINITY, side(0, 0));
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
        if (trues as f64) <= max_error * rows as f64 {
            lo = at;
            below = side(rows, trues);
        }
    }
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
}
