//! The on-disk judge cache (`--judge-cache DIR`): one small JSON file per
//! answer, keyed by a hash of the endpoint's model, the template hash and
//! the inputs, so a re-run or a resumed run never pays for a call twice.

use std::path::PathBuf;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::prompts::hex;

/// Somewhere answers are kept by key: the user's cache folder, or the
/// run's journal.
pub(crate) trait Store: Sync {
    /// The value kept under `key`, if any (unreadable counts as none).
    fn get(&self, key: &str) -> Option<Value>;
    /// Keeps `value` under `key`; a failure only costs a future call.
    fn put(&self, key: &str, value: &Value);
}

pub(crate) struct DiskCache {
    dir: PathBuf,
}

impl DiskCache {
    pub(crate) fn open(dir: PathBuf) -> Result<DiskCache, String> {
        std::fs::create_dir_all(&dir)
            .map_err(|e| format!("{}: cannot create the judge cache: {e}", dir.display()))?;
        Ok(DiskCache { dir })
    }

    /// The key of a request: every part that changes the answer.
    pub(crate) fn key(parts: &[&str]) -> String {
        let mut h = Sha256::new();
        for p in parts {
            h.update((p.len() as u64).to_le_bytes());
            h.update(p.as_bytes());
        }
        hex(&h.finalize())
    }

    fn path(&self, key: &str) -> PathBuf {
        self.dir.join(&key[..2]).join(format!("{key}.json"))
    }

    fn store(&self, key: &str, value: &Value) -> Result<(), String> {
        let path = self.path(key);
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        refscore_core::files::write_cache_entry(&path, value.to_string().as_bytes()).map_err(fail)
    }
}

impl Store for DiskCache {
    fn get(&self, key: &str) -> Option<Value> {
        let text = std::fs::read_to_string(self.path(key)).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn put(&self, key: &str, value: &Value) {
        let _ = self.store(key, value);
    }
}
