//! Values of recent texts (an embedding, a pair's scores), kept across
//! batches within a byte budget, so a reference repeated over a night is
//! embedded once and a pair repeated is scored once.

use std::sync::Arc;

use lru::LruCache;

use crate::math::Embedded;

/// The bytes a cached value holds, for the budget.
pub(crate) trait CachedBytes {
    fn cached_bytes(&self) -> usize;
}

impl CachedBytes for Embedded {
    fn cached_bytes(&self) -> usize {
        self.bytes()
    }
}

impl CachedBytes for Vec<f32> {
    fn cached_bytes(&self) -> usize {
        self.len() * std::mem::size_of::<f32>()
    }
}

/// What one entry costs beyond its text and value's bytes: the map's node
/// and slot, the key's, the `Arc`'s and the value's allocations. Measured
/// with a cross-encoder's pair scores (3 floats each, ~140-byte keys):
/// 1M entries took 153-209 bytes each beyond those counted (peak RSS, Zen
/// 2); without it, a 64 MiB budget held 153 MiB. Small for an embedding
/// (kilobytes), most of a pair's cost.
const ENTRY_OVERHEAD: usize = 192;

/// A least-recently-used map from text to a value, bounded in bytes (the
/// texts, their values and each entry's overhead); a budget of 0 keeps
/// nothing.
pub(crate) struct TextCache<V = Embedded> {
    entries: LruCache<String, Arc<V>>,
    bytes: usize,
    budget: usize,
}

impl<V: CachedBytes> TextCache<V> {
    /// An empty cache holding at most `budget` bytes.
    pub(crate) fn new(budget: usize) -> TextCache<V> {
        TextCache {
            entries: LruCache::unbounded(),
            bytes: 0,
            budget,
        }
    }

    /// The value of `text`, if kept (and now the most recent).
    pub(crate) fn get(&mut self, text: &str) -> Option<Arc<V>> {
        self.entries.get(text).cloned()
    }

    /// Keeps `e` as the value of `text`, dropping the least recent entries
    /// beyond the budget.
    pub(crate) fn put(&mut self, text: &str, e: &Arc<V>) {
        if self.budget == 0 {
            return;
        }
        self.bytes += e.cached_bytes() + text.len() + ENTRY_OVERHEAD;
        if let Some((k, old)) = self.entries.push(text.to_string(), Arc::clone(e)) {
            self.bytes -= old.cached_bytes() + k.len() + ENTRY_OVERHEAD;
        }
        while self.bytes > self.budget {
            match self.entries.pop_lru() {
                Some((k, old)) => self.bytes -= old.cached_bytes() + k.len() + ENTRY_OVERHEAD,
                None => break,
            }
        }
    }
}
