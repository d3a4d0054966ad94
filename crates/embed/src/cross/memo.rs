//! What a cross-encoder stage has already computed: recent values in memory
//! and, with `--embed-cache`, values kept between runs, by one key per input
//! (a pair in a direction, a detector's prompt and answer). Both stages (the
//! sequence classifier's and the span detector's) look up and fill it the
//! same way, so a value is computed once per run and once per cache.

use std::sync::Arc;

use refscore_core::Error;

use super::pair_store::PairStore;
use super::CrossReport;
use crate::text_cache::TextCache;

/// The memory cache and the optional store of one stage.
pub(super) struct Memo {
    /// Recent values by key.
    cache: TextCache<Vec<f32>>,
    /// Values kept between runs (`--embed-cache`), by the same keys.
    store: Option<PairStore>,
}

impl Memo {
    /// A memory cache of `cache_bytes`, and `store` if the run keeps one.
    pub(super) fn new(cache_bytes: usize, store: Option<PairStore>) -> Memo {
        Memo {
            cache: TextCache::new(cache_bytes),
            store,
        }
    }

    /// The values of `keys`: from memory (counted as `reused`), else from
    /// the store (`from_store`), else from `compute`, called once with the
    /// indexes of the keys neither held (and the report, for its own
    /// counts), returning their values in that order; those are kept in both.
    pub(super) fn values(
        &mut self,
        keys: &[String],
        report: &mut CrossReport,
        compute: impl FnOnce(&[usize], &mut CrossReport) -> Result<Vec<Vec<f32>>, Error>,
    ) -> Result<Vec<Arc<Vec<f32>>>, Error> {
        let mut out: Vec<Option<Arc<Vec<f32>>>> = keys.iter().map(|k| self.cache.get(k)).collect();
        report.reused += out.iter().filter(|v| v.is_some()).count() as u64;
        if let Some(store) = &self.store {
            for (k, key) in keys.iter().enumerate() {
                if out[k].is_none() {
                    if let Some(values) = store.get(key) {
                        let values = Arc::new(values);
                        self.cache.put(key, &values);
                        out[k] = Some(values);
                        report.from_store += 1;
                    }
                }
            }
        }
        let missing: Vec<usize> = (0..keys.len()).filter(|&k| out[k].is_none()).collect();
        let computed = compute(&missing, report)?;
        assert_eq!(
            computed.len(),
            missing.len(),
            "one value list per key asked"
        );
        for (k, values) in missing.into_iter().zip(computed) {
            let values = Arc::new(values);
            if let Some(store) = &mut self.store {
                store.put(&keys[k], &values);
            }
            self.cache.put(&keys[k], &values);
            out[k] = Some(values);
        }
        Ok(out
            .into_iter()
            .map(|v| v.expect("every key has its values"))
            .collect())
    }
}
