//! Prediction-powered inference (PPI++, Angelopoulos, Duchi and Zrnic 2023):
//! the mean of a quantity over every row of a run, from the judge's value on
//! all rows and the human label on a small labelled slice, with an interval
//! that covers the true mean whatever the judge's error.
//!
//! The estimate is `λ·mean(f over unlabelled) + mean(y − λ·f over labelled)`:
//! the judge's mean, corrected by its measured bias on the labelled rows.
//! λ (power tuning) weighs how much the judge is trusted; it is chosen to
//! minimise the interval's width and clipped to [0, 1], so a useless judge
//! gives the classical interval of the labels alone (λ = 0) and a perfect
//! one the judge's mean with no correction left (λ = 1). Everything below is
//! a function of sums, so the estimate merges exactly across shards.

use serde::{Deserialize, Serialize};

/// z for a two-sided 95% normal interval: Φ⁻¹(0.975).
pub const Z95: f64 = 1.959_963_984_540_054;

/// A variance (of values on the 0–1 scale, or kappa's variance times n)
/// below which it is taken as zero: these variances are differences of
/// sums of order one, which leave rounding of about 1e-16 where the true
/// value is zero, and any real spread of labels lies far above 1e-12. An
/// interval from a zero variance collapses to a point, so none is given.
pub const ZERO_SPREAD: f64 = 1e-12;

/// Labels below which no interval is printed: the normal approximation
/// behind it is not trustworthy with fewer.
pub const MIN_LABELS: u64 = 30;

/// Sums over the labelled rows (label `y`, judge value `f`) and the
/// unlabelled rows (judge value only) that the corrected mean needs.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PpiSums {
    /// Labelled rows.
    pub n: f64,
    /// Σy over the labelled rows.
    pub y: f64,
    /// Σf over the labelled rows.
    pub f: f64,
    /// Σy² over the labelled rows.
    pub yy: f64,
    /// Σf² over the labelled rows.
    pub ff: f64,
    /// Σy·f over the labelled rows.
    pub yf: f64,
    /// Unlabelled rows.
    pub big_n: f64,
    /// Σf over the unlabelled rows.
    pub fu: f64,
    /// Σf² over the unlabelled rows.
    pub ffu: f64,
}

/// A corrected mean with its 95% interval (`low` and `high` NaN where the
/// variance estimate is zero: see [`with_lambda`]).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct CorrectedMean {
    /// The prediction-powered estimate of the mean over all rows.
    pub estimate: f64,
    /// Lower end of the 95% interval.
    pub low: f64,
    /// Upper end of the 95% interval.
    pub high: f64,
    /// The power-tuning weight on the judge, in [0, 1].
    pub lambda: f64,
    /// The mean of the labels alone, for comparison.
    pub labels_mean: f64,
}

/// The PPI++ mean with the variance-minimising λ (ppi_py's
/// `ppi_mean_ci(..., lam=None)`), or `None` with fewer than two labelled
/// or two unlabelled rows.
pub fn corrected_mean(s: &PpiSums) -> Option<CorrectedMean> {
    if s.n < 2.0 || s.big_n < 2.0 {
        return None;
    }
    let (n, big_n) = (s.n, s.big_n);
    let (my, mf) = (s.y / n, s.f / n);
    // Covariance of label and judge on the labelled rows (divided by n), and
    // the judge's variance over all rows (divided by n + N − 1).
    let cov = s.yf / n - my * mf;
    let all = n + big_n;
    let mean_all = (s.f + s.fu) / all;
    let var_all = ((s.ff + s.ffu) - all * mean_all * mean_all) / (all - 1.0);
    let lambda = if var_all > 0.0 {
        (cov / ((1.0 + n / big_n) * var_all)).clamp(0.0, 1.0)
    } else {
        0.0
    };
    Some(with_lambda(s, lambda, my))
}

/// The estimate and interval at a given λ (1: plain PPI; 0: labels only).
/// Where the variance estimate is zero (labels all alike and λ = 0, say)
/// the interval would be the point itself, so `low` and `high` are NaN.
pub fn with_lambda(s: &PpiSums, lambda: f64, labels_mean: f64) -> CorrectedMean {
    let (n, big_n) = (s.n, s.big_n);
    let (my, mf, mfu) = (s.y / n, s.f / n, s.fu / big_n);
    let estimate = lambda * mfu + my - lambda * mf;
    // Population variances (numpy's default ddof = 0), as ppi_py takes them.
    let var_u = lambda * lambda * (s.ffu / big_n - mfu * mfu);
    let r_mean = my - lambda * mf;
    let r_sq = (s.yy - 2.0 * lambda * s.yf + lambda * lambda * s.ff) / n;
    let var_r = r_sq - r_mean * r_mean;
    let (var_u, var_r) = (var_u.max(0.0), var_r.max(0.0));
    let se = (var_u / big_n + var_r / n).sqrt();
    let half = if var_u + var_r < ZERO_SPREAD {
        f64::NAN
    } else {
        Z95 * se
    };
    CorrectedMean {
        estimate,
        low: estimate - half,
        high: estimate + half,
        lambda,
        labels_mean,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A seeded 64-bit generator (SplitMix64): reproducible simulations
    /// without a dependency.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> f64 {
            self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.0;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
        }
    }

    /// A night of `rows` rows whose true pass rate is `truth`, judged by a
    /// judge with sensitivity 0.9 and specificity 0.7 (so it overstates the
    /// rate), with `labels` of them labelled at random.
    fn night(rng: &mut Rng, rows: usize, labels: usize, truth: f64) -> (PpiSums, f64, f64) {
        let mut s = PpiSums::default();
        let (mut judged, mut truly) = (0.0, 0.0);
        for i in 0..rows {
            let y = (rng.next() < truth) as u8 as f64;
            let f = if y == 1.0 {
                (rng.next() < 0.9) as u8 as f64
            } else {
                (rng.next() < 0.3) as u8 as f64
            };
            judged += f;
            truly += y;
            if i < labels {
                s.n += 1.0;
                s.y += y;
                s.f += f;
                s.yy += y * y;
                s.ff += f * f;
                s.yf += y * f;
            } else {
                s.big_n += 1.0;
                s.fu += f;
                s.ffu += f * f;
            }
        }
        (s, judged / rows as f64, truly / rows as f64)
    }

    #[test]
    fn the_corrected_interval_covers_the_truth_where_the_judge_misses_it() {
        let mut rng = Rng(20261124);
        let (mut covered, mut raw_missed) = (0, 0);
        for _ in 0..100 {
            let (s, raw, _) = night(&mut rng, 20_000, 500, 0.6);
            let c = corrected_mean(&s).unwrap();
            // The truth is the population rate the rows were drawn with.
            if c.low <= 0.6 && 0.6 <= c.high {
                covered += 1;
            }
            if (raw - 0.6).abs() > 0.02 {
                raw_missed += 1;
            }
            assert!(c.lambda > 0.0 && c.lambda <= 1.0);
        }
        assert!(covered >= 93, "covered {covered} of 100");
        // The judge alone says 0.66 (0.6·0.9 + 0.4·0.3): never within 2 points.
        assert_eq!(raw_missed, 100);
    }

    #[test]
    fn a_useless_judge_gives_the_labels_alone() {
        let mut s = PpiSums::default();
        // The judge says 1 on every row: no variance, λ = 0.
        for i in 0..100 {
            let y = (i % 4 == 0) as u8 as f64;
            s.n += 1.0;
            s.y += y;
            s.yy += y;
            s.f += 1.0;
            s.ff += 1.0;
            s.yf += y;
        }
        s.big_n = 1000.0;
        s.fu = 1000.0;
        s.ffu = 1000.0;
        let c = corrected_mean(&s).unwrap();
        assert_eq!(c.lambda, 0.0);
        assert!((c.estimate - 0.25).abs() < 1e-12);
        let se = (0.25f64 * 0.75 / 100.0).sqrt();
        assert!((c.high - c.low - 2.0 * Z95 * se).abs() < 1e-12);
    }

    #[test]
    fn labels_all_alike_give_no_interval() {
        // 60 labels all true, the judge saying true on 33 of them and on 55%
        // of 1000 more: λ = 0, every residual y − λ·f is 1, and the variance
        // estimate is zero (ppi_py would give the point [1, 1]).
        let mut s = PpiSums::default();
        for i in 0..60 {
            let f = (i < 33) as u8 as f64;
            s.n += 1.0;
            s.y += 1.0;
            s.yy += 1.0;
            s.f += f;
            s.ff += f;
            s.yf += f;
        }
        s.big_n = 1000.0;
        s.fu = 550.0;
        s.ffu = 550.0;
        let c = corrected_mean(&s).unwrap();
        assert_eq!((c.lambda, c.estimate), (0.0, 1.0));
        assert!(c.low.is_nan() && c.high.is_nan(), "{c:?}");
    }
}
