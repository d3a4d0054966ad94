//! Streaming aggregates whose size does not grow with the number of rows,
//! beyond the shared statistics (`refscore-stats`): paired differences,
//! bounded heaps of row ordinals, slices.

use std::collections::{BinaryHeap, HashMap};
use std::hash::{BuildHasherDefault, Hasher};

use refscore_stats::Histogram;

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
    pub diff: Histogram,
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
            diff: if dense {
                Histogram::new()
            } else {
                Histogram::sparse()
            },
        }
    }

    /// Adds one pair; returns the flip, if any: -1 pass → fail, +1 fail → pass.
    #[inline]
    pub fn add(&mut self, base: f32, cur: f32, threshold: Option<f64>) -> i8 {
        self.pairs += 1;
        self.sum_base += base as f64;
        self.sum_cur += cur as f64;
        self.diff.add(cur as f64 - base as f64);
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

    /// The baseline's mean over the paired rows.
    pub fn mean_base(&self) -> Option<f64> {
        (self.pairs > 0).then(|| self.sum_base / self.pairs as f64)
    }

    /// The result's mean over the paired rows.
    pub fn mean_cur(&self) -> Option<f64> {
        (self.pairs > 0).then(|| self.sum_cur / self.pairs as f64)
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
    fn slicer_caps_distinct_values() {
        let mut s = Slicer::new();
        for i in 0..MAX_SLICES + 10 {
            s.id(Some(&i.to_string()));
        }
        assert_eq!(s.names.len(), MAX_SLICES + 1);
        assert_eq!(s.names.last().unwrap(), "(other)");
    }
}
