//! The statistics a run is summarised by: counts, exact means, medians from
//! 1e-4-wide histograms, and pass rates. One implementation for the summary
//! written with a run, `merge-summaries` and `report`, so that they cannot
//! disagree about the same rows.
//!
//! Memory does not grow with the number of rows, and two parts of a run
//! (resumed sessions, shards) merge by addition into exactly what one pass
//! would have gathered: sums are fixed point, so the order in which values
//! were added never changes the mean, and histograms add bin by bin.

use std::collections::BTreeMap;

pub mod agreement;
pub mod band;
pub mod gold;
pub mod ppi;

/// Width of a histogram bin. Medians are bin centres, so they are exact to
/// within half a bin.
pub const BIN_WIDTH: f64 = 1e-4;
const BINS_PER_UNIT: f64 = 1.0 / BIN_WIDTH;
/// Dense bins cover [-1, 1] (every plain score and every difference of
/// two); anything outside (similarity scores 0-10, strongly rescaled
/// BERTScore) goes to a sparse map, so no value is ever clamped.
const DENSE_SPAN: i64 = 10_000;
const DENSE_BINS: usize = (2 * DENSE_SPAN + 1) as usize;
/// Fixed-point scale of the exact sums: 2^64. Integer addition is
/// associative, so merged sums are bit-identical whatever the order.
const SUM_SCALE: f64 = 18_446_744_073_709_551_616.0;
/// Values beyond ±2^62 saturate in the sum (no score comes near).
const SUM_LIMIT: f64 = 4.611_686_018_427_388e18;

/// The bin of a value: round(v / [`BIN_WIDTH`]), halves away from zero.
#[inline]
pub fn bin_of(v: f64) -> i64 {
    round_to_i64(v * BINS_PER_UNIT)
}

/// `x.round() as i64`, without the library call `round` is on baseline
/// x86-64 (8% of a 1M-row report's time, AMD EPYC Zen 5): the integer part
/// by truncation, then the exact fraction `x − trunc(x)` decides.
#[inline]
fn round_to_i64(x: f64) -> i64 {
    let whole = x as i64; // truncates; saturates; NaN gives 0, as `round` does
    let fraction = x - whole as f64;
    if fraction >= 0.5 {
        whole.saturating_add(1)
    } else if fraction <= -0.5 {
        whole.saturating_sub(1)
    } else {
        whole
    }
}

/// The centre of a bin.
#[inline]
pub fn bin_centre(bin: i64) -> f64 {
    bin as f64 / BINS_PER_UNIT
}

/// Thresholds as a result file's footer stores them (the key is
/// `refscore_core::schema::footer::THRESHOLDS`), so that `report` computes
/// the pass rates the summary did: a JSON object, metric → threshold.
pub fn thresholds_to_json(thresholds: &[(String, f64)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = thresholds
        .iter()
        .map(|(name, t)| (name.clone(), serde_json::json!(t)))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Reads what [`thresholds_to_json`] wrote.
pub fn thresholds_from_json(text: &str) -> Result<Vec<(String, f64)>, String> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_str(text).map_err(|e| e.to_string())?;
    map.into_iter()
        .map(|(name, v)| match v.as_f64() {
            Some(t) => Ok((name, t)),
            None => Err(format!("{name} = {v} is not a number")),
        })
        .collect()
}

/// Counts per [`BIN_WIDTH`] bin, for medians, charts and the bootstrap.
#[derive(Debug, Clone, PartialEq)]
pub struct Histogram {
    dense: Vec<u64>,
    sparse: BTreeMap<i64, u64>,
}

impl Default for Histogram {
    fn default() -> Histogram {
        Histogram::new()
    }
}

impl Histogram {
    /// A histogram with dense bins for [-1, 1]: fast, 160 KiB.
    pub fn new() -> Histogram {
        Histogram {
            dense: vec![0; DENSE_BINS],
            sparse: BTreeMap::new(),
        }
    }

    /// A histogram that keeps only its non-empty bins: for the many small
    /// ones of a report's slices.
    pub fn sparse() -> Histogram {
        Histogram {
            dense: Vec::new(),
            sparse: BTreeMap::new(),
        }
    }

    /// Counts one value.
    #[inline]
    pub fn add(&mut self, v: f64) {
        self.add_bin(bin_of(v), 1);
    }

    /// Counts `n` values in `bin`.
    #[inline]
    pub fn add_bin(&mut self, bin: i64, n: u64) {
        if !self.dense.is_empty() && (-DENSE_SPAN..=DENSE_SPAN).contains(&bin) {
            self.dense[(bin + DENSE_SPAN) as usize] += n;
        } else {
            *self.sparse.entry(bin).or_default() += n;
        }
    }

    /// Adds another histogram bin by bin.
    pub fn merge(&mut self, other: &Histogram) {
        for (bin, n) in other.bins() {
            self.add_bin(bin, n);
        }
    }

    /// Non-empty bins, ascending.
    pub fn bins(&self) -> Vec<(i64, u64)> {
        let below = self.sparse.range(..-DENSE_SPAN).map(|(b, c)| (*b, *c));
        let middle = self
            .sparse
            .range(-DENSE_SPAN..=DENSE_SPAN)
            .map(|(b, c)| (*b, *c));
        let dense = self
            .dense
            .iter()
            .enumerate()
            .filter(|(_, c)| **c > 0)
            .map(|(i, c)| (i as i64 - DENSE_SPAN, *c));
        let above = self.sparse.range(DENSE_SPAN + 1..).map(|(b, c)| (*b, *c));
        // A histogram has dense bins or sparse ones in [-1, 1], never both.
        below.chain(middle).chain(dense).chain(above).collect()
    }

    /// The median as a bin centre (within half a bin of the exact one).
    pub fn median(&self) -> Option<f64> {
        let bins = self.bins();
        let n: u64 = bins.iter().map(|b| b.1).sum();
        if n == 0 {
            return None;
        }
        let kth = |k: u64| {
            let mut seen = 0;
            for (b, c) in &bins {
                seen += c;
                if seen > k {
                    return bin_centre(*b);
                }
            }
            f64::NAN
        };
        Some(if n % 2 == 1 {
            kth(n / 2)
        } else {
            (kth(n / 2 - 1) + kth(n / 2)) / 2.0
        })
    }
}

/// Count, exact sum and passes of one metric's values.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    count: u64,
    sum: i128,
    passed: u64,
}

/// `v` × 2^64 truncated to an integer, as `(v × 2^64) as i128` gives it, from
/// the float's bits: the float-to-i128 `as` is a library call, and the
/// report sums tens of millions of values (measured: 1M-row report with a
/// baseline and slices 15% slower with it, AMD EPYC Zen 5).
#[inline]
pub(crate) fn fixed(v: f64) -> i128 {
    let bits = v.clamp(-SUM_LIMIT, SUM_LIMIT).to_bits();
    let exponent = ((bits >> 52) & 0x7ff) as i32;
    if exponent == 0 {
        return 0; // zero or subnormal: |v| × 2^64 < 1
    }
    let mantissa = (bits & ((1 << 52) - 1)) | (1 << 52);
    // v = mantissa × 2^(exponent − 1075), so v × 2^64 = mantissa × 2^shift.
    let shift = exponent - 1011;
    let magnitude = if shift >= 0 {
        (mantissa as i128) << shift // at most 2^53 × 2^73 < 2^127 (clamped)
    } else if shift > -64 {
        (mantissa >> -shift) as i128
    } else {
        0
    };
    if bits >> 63 == 1 {
        -magnitude
    } else {
        magnitude
    }
}

impl Tally {
    /// A tally from its stored parts (see [`Tally::parts`]).
    pub fn from_parts(count: u64, sum: i128, passed: u64) -> Tally {
        Tally { count, sum, passed }
    }

    /// Count, fixed-point sum (value × 2^64) and passes, for storing.
    pub fn parts(&self) -> (u64, i128, u64) {
        (self.count, self.sum, self.passed)
    }

    /// Counts one finite value; `threshold` decides whether it passes
    /// (value ≥ threshold).
    #[inline]
    pub fn add(&mut self, v: f64, threshold: Option<f64>) {
        self.count += 1;
        self.sum += fixed(v);
        if threshold.is_some_and(|t| v >= t) {
            self.passed += 1;
        }
    }

    /// Adds another tally.
    pub fn merge(&mut self, other: &Tally) {
        self.count += other.count;
        self.sum += other.sum;
        self.passed += other.passed;
    }

    /// Values counted.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// Values that passed.
    pub fn passed(&self) -> u64 {
        self.passed
    }

    /// The mean, exact up to the final division.
    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum as f64 / SUM_SCALE / self.count as f64)
    }

    /// The share of values at or above the threshold, where there is one.
    pub fn pass_rate(&self, threshold: Option<f64>) -> Option<f64> {
        threshold
            .filter(|_| self.count > 0)
            .map(|_| self.passed as f64 / self.count as f64)
    }
}

/// Everything one metric is summarised by: its threshold, tally and
/// histogram. Non-finite values are not counted.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricStats {
    threshold: Option<f64>,
    tally: Tally,
    histogram: Histogram,
}

impl MetricStats {
    /// Empty statistics for a metric with this pass threshold.
    pub fn new(threshold: Option<f64>) -> MetricStats {
        MetricStats {
            threshold,
            tally: Tally::default(),
            histogram: Histogram::new(),
        }
    }

    /// Statistics from stored parts.
    pub fn from_parts(threshold: Option<f64>, tally: Tally, histogram: Histogram) -> MetricStats {
        MetricStats {
            threshold,
            tally,
            histogram,
        }
    }

    /// Counts one value (ignored unless finite).
    #[inline]
    pub fn add(&mut self, v: f64) {
        if v.is_finite() {
            self.tally.add(v, self.threshold);
            self.histogram.add(v);
        }
    }

    /// Adds the statistics of another part; both must use one threshold.
    pub fn merge(&mut self, other: &MetricStats) -> Result<(), String> {
        if other.threshold != self.threshold {
            return Err(format!(
                "threshold {:?} in one part and {:?} in another",
                other.threshold, self.threshold
            ));
        }
        self.tally.merge(&other.tally);
        self.histogram.merge(&other.histogram);
        Ok(())
    }

    /// The pass threshold, if the metric has one.
    pub fn threshold(&self) -> Option<f64> {
        self.threshold
    }

    /// Count, sum and passes.
    pub fn tally(&self) -> &Tally {
        &self.tally
    }

    /// The values' histogram.
    pub fn histogram(&self) -> &Histogram {
        &self.histogram
    }

    /// The mean of the counted values.
    pub fn mean(&self) -> Option<f64> {
        self.tally.mean()
    }

    /// The median, as a bin centre.
    pub fn median(&self) -> Option<f64> {
        self.histogram.median()
    }

    /// The share at or above the threshold.
    pub fn pass_rate(&self) -> Option<f64> {
        self.tally.pass_rate(self.threshold)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(values: &[f64], threshold: Option<f64>) -> MetricStats {
        let mut s = MetricStats::new(threshold);
        values.iter().for_each(|&v| s.add(v));
        s
    }

    #[test]
    fn median_mean_and_pass_rate() {
        let s = stats(&[0.1, 0.9, 0.5, 0.7], Some(0.6));
        assert_eq!(s.median(), Some(0.6));
        assert!((s.mean().unwrap() - 0.55).abs() < 1e-15);
        assert_eq!(s.pass_rate(), Some(0.5));
        assert_eq!(stats(&[], Some(0.5)).median(), None);
        assert_eq!(stats(&[0.2], None).pass_rate(), None);
    }

    #[test]
    fn values_outside_minus_one_to_one_are_kept_in_order() {
        let s = stats(&[10.0, -3.0, 0.25, 7.0, 2.0], None);
        let bins: Vec<i64> = s.histogram().bins().iter().map(|b| b.0).collect();
        assert_eq!(bins, [-30_000, 2_500, 20_000, 70_000, 100_000]);
        assert_eq!(s.median(), Some(2.0));
    }

    #[test]
    fn sparse_and_dense_histograms_agree() {
        let values = [0.1, -0.99, 0.1, 1.0, 4.0, -2.5, 0.33333];
        let (mut dense, mut sparse) = (Histogram::new(), Histogram::sparse());
        for v in values {
            dense.add(v);
            sparse.add(v);
        }
        assert_eq!(dense.bins(), sparse.bins());
        assert_eq!(dense.median(), sparse.median());
    }

    #[test]
    fn merged_parts_equal_one_pass_exactly() {
        let values: Vec<f64> = (0..1000)
            .map(|i| ((i * 37) % 101) as f64 / 97.0 - 0.3)
            .collect();
        let whole = stats(&values, Some(0.4));
        let mut left = stats(&values[..333], Some(0.4));
        left.merge(&stats(&values[333..], Some(0.4))).unwrap();
        assert_eq!(left, whole);
        assert!(left.merge(&stats(&values, Some(0.5))).is_err());
    }

    #[test]
    fn fixed_point_equals_the_plain_conversion() {
        let mut values = vec![
            0.0,
            -0.0,
            1.0,
            -1.0,
            0.5,
            1e-30,
            -1e-19,
            5e-20,
            2.0f64.powi(-64),
        ];
        values.extend([
            SUM_LIMIT,
            -SUM_LIMIT,
            1e300,
            -1e300,
            f64::MIN_POSITIVE / 3.0,
        ]);
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        for _ in 0..100_000 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let v = f64::from_bits(s >> 1); // any positive float, NaN aside
            if v.is_finite() {
                values.extend([v, -v]);
            }
            let w = ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) as f64;
            values.push(w);
        }
        for v in values {
            let plain = (v.clamp(-SUM_LIMIT, SUM_LIMIT) * SUM_SCALE) as i128;
            assert_eq!(fixed(v), plain, "{v:e}");
        }
    }

    #[test]
    fn rounding_equals_the_library_round() {
        let mut values = vec![
            0.5,
            -0.5,
            1.5,
            2.5,
            -2.5,
            0.49999999999999994,
            -0.49999999999999994,
        ];
        values.extend([
            4503599627370495.5,
            9.3e18,
            -9.3e18,
            f64::INFINITY,
            f64::NEG_INFINITY,
        ]);
        values.extend([f64::NAN, 1e300, -1e300, 0.0, -0.0, 12345.5, -12345.5]);
        let mut s = 7u64;
        for _ in 0..100_000 {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) as f64;
            values.extend([
                f * BINS_PER_UNIT,
                f * 10.0 * BINS_PER_UNIT,
                f64::from_bits(s),
            ]);
        }
        for x in values {
            assert_eq!(round_to_i64(x), x.round() as i64, "{x:e}");
        }
    }

    #[test]
    fn thresholds_survive_the_footer() {
        let t = vec![("cosine".to_string(), 0.7), ("token_f1".to_string(), 0.6)];
        assert_eq!(thresholds_from_json(&thresholds_to_json(&t)).unwrap(), t);
        assert!(thresholds_from_json("{\"cosine\": \"high\"}").is_err());
        assert!(thresholds_from_json("[").is_err());
    }

    #[test]
    fn non_finite_values_are_not_counted() {
        let s = stats(&[f64::NAN, f64::INFINITY, 0.5], Some(0.5));
        assert_eq!((s.tally().count(), s.tally().passed()), (1, 1));
    }
}
