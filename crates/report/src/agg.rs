//! Streaming aggregates whose size does not grow with the number of rows:
//! counts, sums, 1e-4-wide histograms, and bounded heaps of row ordinals.

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

/// Histogram bin width, for medians, charts and the bootstrap.
pub(crate) const BIN: f64 = 1e-4;
const DENSE_SPAN: i64 = 10_000;

/// A multiplicative hasher for integer keys (bins, ids): the keys are
/// already well spread or already hashed, and SipHash would dominate the
/// loops over 10M rows.
#[derive(Default)]
pub(crate) struct FastHasher(u64);

impl Hasher for FastHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0.rotate_left(5) ^ *b as u64).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v)
            .wrapping_mul(0x9e37_79b9_7f4a_7c15)
            .rotate_left(29);
    }
    fn write_i64(&mut self, v: i64) {
        self.write_u64(v as u64)
    }
    fn write_u128(&mut self, v: u128) {
        self.write_u64(v as u64 ^ (v >> 64) as u64 ^ ((v >> 64) as u64).rotate_left(17));
    }
}

pub(crate) type FastMap<K, V> = HashMap<K, V, BuildHasherDefault<FastHasher>>;

/// The bin of a value: round(v / 1e-4).
#[inline]
pub(crate) fn bin_of(v: f64) -> i64 {
    (v / BIN).round() as i64
}

/// Counts per 1e-4 bin: a dense array for [-1, 1] (every plain score and
/// every difference of two) when `dense`, a map otherwise and beyond.
#[derive(Debug, Clone)]
pub(crate) struct Hist {
    dense: Vec<u64>,
    sparse: FastMap<i64, u64>,
}

impl Hist {
    pub fn new(dense: bool) -> Hist {
        Hist {
            dense: if dense {
                vec![0; (2 * DENSE_SPAN + 1) as usize]
            } else {
                Vec::new()
            },
            sparse: FastMap::default(),
        }
    }

    #[inline]
    pub fn add(&mut self, bin: i64) {
        if !self.dense.is_empty() && (-DENSE_SPAN..=DENSE_SPAN).contains(&bin) {
            self.dense[(bin + DENSE_SPAN) as usize] += 1;
        } else {
            *self.sparse.entry(bin).or_default() += 1;
        }
    }

    /// Non-empty bins, ascending.
    pub fn bins(&self) -> Vec<(i64, u64)> {
        let mut out: Vec<(i64, u64)> = self.sparse.iter().map(|(b, c)| (*b, *c)).collect();
        out.extend(
            self.dense
                .iter()
                .enumerate()
                .filter(|(_, c)| **c > 0)
                .map(|(i, c)| (i as i64 - DENSE_SPAN, *c)),
        );
        out.sort_unstable();
        out
    }

    /// The median as a bin centre (within 5e-5 of the exact one).
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
                    return *b as f64 * BIN;
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

/// One metric of one run (or one slice): count, sum, passes.
#[derive(Debug, Clone, Default)]
pub(crate) struct Moments {
    pub count: u64,
    pub sum: f64,
    pub passed: u64,
}

impl Moments {
    #[inline]
    pub fn add(&mut self, v: f32, threshold: Option<f64>) {
        self.count += 1;
        self.sum += v as f64;
        if threshold.is_some_and(|t| v as f64 >= t) {
            self.passed += 1;
        }
    }

    pub fn mean(&self) -> Option<f64> {
        (self.count > 0).then(|| self.sum / self.count as f64)
    }

    pub fn pass_rate(&self, threshold: Option<f64>) -> Option<f64> {
        threshold
            .filter(|_| self.count > 0)
            .map(|_| self.passed as f64 / self.count as f64)
    }
}

/// Paired rows of one metric: both runs have a value.
#[derive(Debug, Clone)]
pub(crate) struct Paired {
    pub pairs: u64,
    pub sum_base: f64,
    pub sum_cur: f64,
    pub pass_base: u64,
    pub pass_cur: u64,
    pub pass_to_fail: u64,
    pub fail_to_pass: u64,
    pub diff: Hist,
}

impl Paired {
    pub fn new(dense: bool) -> Paired {
        Paired {
            pairs: 0,
            sum_base: 0.0,
            sum_cur: 0.0,
            pass_base: 0,
            pass_cur: 0,
            pass_to_fail: 0,
            fail_to_pass: 0,
            diff: Hist::new(dense),
        }
    }

    /// Adds one pair; returns the flip, if any: -1 pass → fail, +1 fail → pass.
    #[inline]
    pub fn add(&mut self, base: f32, cur: f32, threshold: Option<f64>) -> i8 {
        self.pairs += 1;
        self.sum_base += base as f64;
        self.sum_cur += cur as f64;
        self.diff.add(bin_of(cur as f64 - base as f64));
        let Some(t) = threshold else { return 0 };
        let (pb, pc) = (base as f64 >= t, cur as f64 >= t);
        self.pass_base += pb as u64;
        self.pass_cur += pc as u64;
        match (pb, pc) {
            (true, false) => {
                self.pass_to_fail += 1;
                -1
            }
            (false, true) => {
                self.fail_to_pass += 1;
                1
            }
            _ => 0,
        }
    }

    pub fn mean_diff(&self) -> Option<f64> {
        (self.pairs > 0).then(|| (self.sum_cur - self.sum_base) / self.pairs as f64)
    }
}

/// An f32 as a u32 whose unsigned order is the float's total order.
#[inline]
pub(crate) fn sortable(v: f32) -> u32 {
    let b = v.to_bits();
    if b >> 31 == 1 {
        !b
    } else {
        b | 0x8000_0000
    }
}

/// The f32 that [`sortable`] turned into `k`.
#[inline]
pub(crate) fn unsortable(k: u32) -> f32 {
    f32::from_bits(if k >> 31 == 1 { k & 0x7fff_ffff } else { !k })
}

/// The `n` smallest entries seen (by `key`, then row), in bounded memory.
#[derive(Debug, Clone)]
pub(crate) struct Lowest<T: Ord> {
    n: usize,
    heap: BinaryHeap<T>,
}

impl<T: Ord> Lowest<T> {
    pub fn new(n: usize) -> Lowest<T> {
        Lowest {
            n,
            heap: BinaryHeap::with_capacity(n + 1),
        }
    }

    /// True when `probe` would be kept: lets callers skip building entries.
    #[inline]
    pub fn wants(&self, probe: &T) -> bool {
        self.heap.len() < self.n || self.heap.peek().is_some_and(|top| probe < top)
    }

    #[inline]
    pub fn offer(&mut self, item: T) {
        if self.n == 0 {
            return;
        }
        if self.heap.len() < self.n {
            self.heap.push(item);
        } else if self.heap.peek().is_some_and(|top| item < *top) {
            self.heap.pop();
            self.heap.push(item);
        }
    }

    /// Kept entries, smallest first.
    pub fn into_sorted(self) -> Vec<T> {
        self.heap.into_sorted_vec()
    }
}

/// A row among the lowest of a metric: (value order, row ordinal).
pub(crate) type LowEntry = (u32, u64);

/// A flipped row: (order key, current row, baseline row, current value bits,
/// baseline value bits). The key puts the biggest changes first.
pub(crate) type FlipEntry = (u32, u64, u64, u32, u32);

/// Names the slices of a `--by` column; past `MAX_SLICES` distinct values
/// the rest share one "(other)" slice, so memory stays bounded.
pub(crate) struct Slicer {
    ids: HashMap<String, u32>,
    pub names: Vec<String>,
    other: Option<u32>,
}

/// Most distinct `--by` values reported one by one.
pub(crate) const MAX_SLICES: usize = 1000;

impl Slicer {
    pub fn new() -> Slicer {
        Slicer {
            ids: HashMap::new(),
            names: Vec::new(),
            other: None,
        }
    }

    #[inline]
    pub fn id(&mut self, label: Option<&str>) -> u32 {
        let label = label.unwrap_or("(null)");
        if let Some(&k) = self.ids.get(label) {
            return k;
        }
        if self.names.len() >= MAX_SLICES {
            return *self.other.get_or_insert_with(|| {
                self.names.push("(other)".into());
                (self.names.len() - 1) as u32
            });
        }
        self.names.push(label.to_string());
        let k = (self.names.len() - 1) as u32;
        self.ids.insert(label.to_string(), k);
        k
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lowest_keeps_the_smallest_and_earliest() {
        let mut l: Lowest<LowEntry> = Lowest::new(2);
        for (row, v) in [0.5f32, 0.0, 0.9, 0.0, -0.1].iter().enumerate() {
            l.offer((sortable(*v), row as u64));
        }
        let kept: Vec<u64> = l.into_sorted().iter().map(|e| e.1).collect();
        assert_eq!(kept, vec![4, 1]);
    }

    #[test]
    fn sortable_orders_like_floats() {
        let v = [-2.0f32, -0.5, 0.0, 1e-6, 0.5, 3.0];
        for w in v.windows(2) {
            assert!(sortable(w[0]) < sortable(w[1]), "{w:?}");
        }
        for x in v {
            assert_eq!(unsortable(sortable(x)), x);
        }
    }

    #[test]
    fn median_from_bins() {
        let mut h = Hist::new(true);
        for v in [0.1, 0.2, 0.9, 5.0] {
            h.add(bin_of(v));
        }
        assert!((h.median().unwrap() - 0.55).abs() < 1e-9);
    }

    #[test]
    fn slicer_caps_distinct_values() {
        let mut s = Slicer::new();
        for i in 0..MAX_SLICES + 10 {
            s.id(Some(&i.to_string()));
        }
        assert_eq!(s.names.len(), MAX_SLICES + 1);
        assert_eq!(s.names.last().unwrap(), "(other)");
    }
}
