//! Paired bootstrap of a mean difference over a histogram of differences.
//!
//! Resampling n paired rows with replacement and taking the mean of their
//! differences depends only on how many times each row is drawn; rows with
//! the same difference are interchangeable, so a replicate is a multinomial
//! draw of n over the histogram's bins (drawn as conditional binomials, bin
//! by bin). That is the ordinary nonparametric bootstrap of the binned
//! differences, at a cost of (groups × replicates) whatever n is: 10M rows
//! cost what 10k rows cost.
//!
//! Groups: the 1e-4 bins are merged into groups w wide, w = the larger of
//! 1e-4 and sd/40 (sd: the differences' standard deviation), each valued at
//! the mean of its members, so there are at most about 40 groups per sd
//! (a few hundred) however finely the scores vary. Grouping moves each
//! difference by less than w, which changes a replicate's deviation from
//! the mean by a resampling fluctuation of those moves: standard deviation
//! below w/√n ≤ (sd/40)/√n, about 1.3% of the interval's half-width
//! (1.96·sd/√n), well inside the Monte Carlo error of 2,000 replicates
//! (about 6%). The interval is centred on the exact mean (the replicates'
//! deviations from the grouped mean are added to it), so grouping never
//! shifts it.

use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use rand_distr::{Binomial, Distribution};

use refscore_stats::BIN_WIDTH as BIN;

/// How the intervals are made, recorded in the report's JSON.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Method {
    /// Human-readable description.
    pub description: &'static str,
    /// Replicates per interval.
    pub replicates: usize,
    /// Base seed (each metric and slice derives its own stream from it).
    pub seed: u64,
    /// Confidence level.
    pub confidence: f64,
    /// Histogram bin width of the differences.
    pub bin_width: f64,
}

pub(crate) const DESCRIPTION: &str = "paired percentile bootstrap: each replicate resamples the \
paired rows with replacement, drawn as a multinomial over the histogram of their differences \
(1e-4 bins merged into groups of width max(1e-4, sd/40), each valued at its members' mean) by \
conditional binomials (ChaCha8 stream seeded per metric and slice); the interval is \
the exact mean difference plus the 2.5th and 97.5th percentiles (linear interpolation) of the \
replicates' deviations from the binned mean";

/// Stream seed for one interval: the base seed mixed with the metric and
/// slice names, so an interval does not depend on what else is computed.
pub(crate) fn stream_seed(seed: u64, metric: &str, slice: Option<&str>) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in metric
        .bytes()
        .chain([0xff])
        .chain(slice.unwrap_or("").bytes())
    {
        h = (h ^ b as u64).wrapping_mul(0x100_0000_01b3);
    }
    seed ^ h
}

/// Fine bins per bootstrap group: the differences' standard deviation over
/// this many (at least one 1e-4 bin).
const GROUPS_PER_SD: f64 = 40.0;

/// Merges 1e-4 bins into groups of `width` fine bins, each group valued at
/// the mean of its members (in fine-bin units): (value, rows).
fn groups(bins: &[(i64, u64)], width: i64) -> Vec<(f64, u64)> {
    let mut out: Vec<(f64, u64)> = Vec::new();
    let mut current: Option<(i64, f64, u64)> = None;
    for &(b, c) in bins {
        let g = b.div_euclid(width);
        match &mut current {
            Some((cg, sum, n)) if *cg == g => {
                *sum += b as f64 * c as f64;
                *n += c;
            }
            _ => {
                if let Some((_, sum, n)) = current.take() {
                    out.push((sum / n as f64, n));
                }
                current = Some((g, b as f64 * c as f64, c));
            }
        }
    }
    if let Some((_, sum, n)) = current {
        out.push((sum / n as f64, n));
    }
    out
}

/// The 95% interval of the mean difference: `bins` are (bin, rows) of the
/// differences in 1e-4 bins, ascending; `exact_mean` the mean of the
/// unbinned ones.
pub(crate) fn interval(
    bins: &[(i64, u64)],
    exact_mean: f64,
    seed: u64,
    replicates: usize,
) -> Option<(f64, f64)> {
    let n: u64 = bins.iter().map(|b| b.1).sum();
    if n == 0 || replicates == 0 {
        return None;
    }
    let nf = n as f64;
    let mean = bins.iter().map(|(b, c)| *b as f64 * *c as f64).sum::<f64>() / nf;
    let var = bins
        .iter()
        .map(|(b, c)| (*b as f64 - mean).powi(2) * *c as f64)
        .sum::<f64>()
        / nf;
    let width = ((var.sqrt() / GROUPS_PER_SD).floor() as i64).max(1);
    let groups = groups(bins, width);
    let binned_mean = groups.iter().map(|(v, c)| v * *c as f64).sum::<f64>() / nf;
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut reps = Vec::with_capacity(replicates);
    for _ in 0..replicates {
        let (mut left_n, mut left_c) = (n, n);
        let mut sum = 0.0f64;
        for &(v, c) in &groups {
            if left_n == 0 {
                break;
            }
            let x = if c >= left_c {
                left_n
            } else {
                let p = c as f64 / left_c as f64;
                Binomial::new(left_n, p)
                    .expect("0 <= p <= 1")
                    .sample(&mut rng)
            };
            sum += x as f64 * v;
            left_n -= x;
            left_c -= c;
        }
        reps.push((sum / nf - binned_mean) * BIN);
    }
    reps.sort_by(f64::total_cmp);
    Some((
        exact_mean + quantile(&reps, 0.025),
        exact_mean + quantile(&reps, 0.975),
    ))
}

/// Linear-interpolation quantile of sorted values (numpy's default).
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let h = q * (sorted.len() - 1) as f64;
    let lo = h.floor() as usize;
    let hi = (lo + 1).min(sorted.len() - 1);
    sorted[lo] + (h - lo as f64) * (sorted[hi] - sorted[lo])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn matches_the_normal_interval_for_a_large_sample() {
        // Differences -1, 0, +1 with shares 0.2, 0.5, 0.3: mean 0.1, sd
        // sqrt(0.5 - 0.01) = 0.7; n = 1e6 → half-width 1.96·0.7/1000.
        let bins = [(-10_000, 200_000), (0, 500_000), (10_000, 300_000)];
        let (lo, hi) = interval(&bins, 0.1, 7, 2000).unwrap();
        let half = 1.96 * 0.49f64.sqrt() / 1000.0;
        assert!((lo - (0.1 - half)).abs() < 0.1 * half, "{lo}");
        assert!((hi - (0.1 + half)).abs() < 0.1 * half, "{hi}");
    }

    #[test]
    fn groups_keep_counts_and_means() {
        let bins = [(-7, 1), (-5, 2), (0, 3), (3, 1), (4, 1)];
        let g = groups(&bins, 5);
        assert_eq!(g, vec![(-7.0, 1), (-5.0, 2), (1.4, 5)]);
        let g = groups(&bins, 1);
        assert_eq!(g.len(), bins.len());
    }

    #[test]
    fn same_seed_same_interval_and_constant_data_has_no_width() {
        let bins = [(-3, 10), (5, 20)];
        assert_eq!(interval(&bins, 0.0, 1, 500), interval(&bins, 0.0, 1, 500));
        let (lo, hi) = interval(&[(42, 1000)], 0.0042, 1, 100).unwrap();
        assert!((lo - 0.0042).abs() < 1e-12 && (hi - 0.0042).abs() < 1e-12);
        assert_eq!(interval(&[], 0.0, 1, 100), None);
    }
}
