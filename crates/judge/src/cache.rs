//! The on-disk judge cache (`--judge-cache DIR`): one small JSON file per
//! answer, keyed by a hash of the endpoint's model, the template hash and
//! the inputs, so a re-run or a resumed run never pays for a call twice.

use std::path::PathBuf;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::prompts::hex;

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

    pub(crate) fn get(&self, key: &str) -> Option<Value> {
        let text = std::fs::read_to_string(self.path(key)).ok()?;
        serde_json::from_str(&text).ok()
    }

    /// Stores an answer; failures only cost a future call, so they are ignored.
    pub(crate) fn put(&self, key: &str, value: &Value) {
        let _ = self.store(key, value);
    }

    /// Stores an answer, saying why it could not (for answers that cannot
    /// be asked again at will: a judge batch's).
    pub(crate) fn store(&self, key: &str, value: &Value) -> Result<(), String> {
        let path = self.path(key);
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir).map_err(fail)?;
        }
        refscore_batch::files::write_cache_entry(&path, value.to_string().as_bytes()).map_err(fail)
    }
}
