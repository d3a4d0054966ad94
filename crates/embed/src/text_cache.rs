//! The embeddings of recent texts, kept across batches within a byte
//! budget, so a reference repeated over a night is embedded once.

use std::sync::Arc;

use lru::LruCache;

use crate::math::Embedded;

/// A least-recently-used map from text to its embedding, bounded in bytes
/// (the texts and their vectors); a budget of 0 keeps nothing.
pub(crate) struct TextCache {
    entries: LruCache<String, Arc<Embedded>>,
    bytes: usize,
    budget: usize,
}

impl TextCache {
    /// An empty cache holding at most `budget` bytes.
    pub(crate) fn new(budget: usize) -> TextCache {
        TextCache {
            entries: LruCache::unbounded(),
            bytes: 0,
            budget,
        }
    }

    /// The embedding of `text`, if kept (and now the most recent).
    pub(crate) fn get(&mut self, text: &str) -> Option<Arc<Embedded>> {
        self.entries.get(text).cloned()
    }

    /// Keeps `e` as the embedding of `text`, dropping the least recent
    /// entries beyond the budget.
    pub(crate) fn put(&mut self, text: &str, e: &Arc<Embedded>) {
        if self.budget == 0 {
            return;
        }
        self.bytes += e.bytes() + text.len();
        if let Some((k, old)) = self.entries.push(text.to_string(), Arc::clone(e)) {
            self.bytes -= old.bytes() + k.len();
        }
        while self.bytes > self.budget {
            match self.entries.pop_lru() {
                Some((k, old)) => self.bytes -= old.bytes() + k.len(),
                None => break,
            }
        }
    }
}
