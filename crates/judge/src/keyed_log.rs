//! An append-only file of JSON values by key, with its index in memory: the
//! run's paid-answers journal and its judge batches' answers. One file
//! instead of one file per answer: creating a file per answer cost most of
//! the client's CPU at high concurrency (ext4 inode allocation), and a run
//! of a million answers would leave a million files.
//!
//! Each line is `KEY JSON`; a later line for a key replaces an earlier one.
//! Lines are written whole with one `write`, so a killed process leaves at
//! most a last line cut short, which the next open cuts off. A journal
//! written by an earlier version (one file per answer in `xx/KEY.json`) is
//! still read.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::cache::{DiskCache, Store};

/// The log file and the place of each key's latest line.
pub(crate) struct KeyedLog {
    path: PathBuf,
    inner: Mutex<Inner>,
    /// The one-file-per-answer layout of earlier versions, where present.
    legacy: Option<DiskCache>,
}

struct Inner {
    writer: File,
    reader: File,
    /// Key (its first 128 bits) → (offset, length) of its latest line.
    index: HashMap<u128, (u64, u32)>,
    end: u64,
}

/// The first 128 bits of a hex key (every key here is a SHA-256 in hex);
/// any other key is hashed first.
fn short(key: &str) -> u128 {
    key.get(..32)
        .and_then(|h| u128::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| {
            let d = Sha256::digest(key.as_bytes());
            u128::from_be_bytes(d[..16].try_into().expect("16 bytes"))
        })
}

impl KeyedLog {
    /// Opens (or starts) `dir/name`, reading its index.
    pub(crate) fn open(dir: &Path, name: &str) -> Result<KeyedLog, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let path = dir.join(name);
        let fail = |e: std::io::Error| format!("{}: {e}", path.display());
        let writer = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(fail)?;
        let mut reader = File::open(&path).map_err(fail)?;
        let mut index = HashMap::new();
        let mut end = 0u64;
        let mut lines = BufReader::new(&mut reader);
        let mut line = Vec::new();
        loop {
            line.clear();
            let n = lines.read_until(b'\n', &mut line).map_err(fail)?;
            if n == 0 || line.last() != Some(&b'\n') {
                break;
            }
            if let Some(key) = line.split(|b| *b == b' ').next() {
                let key = String::from_utf8_lossy(key);
                index.insert(short(&key), (end, n as u32));
            }
            end += n as u64;
        }
        // A last line cut short by a kill: its answer was never recorded.
        writer.set_len(end).map_err(fail)?;
        let legacy = std::fs::read_dir(dir)
            .map_err(|e| format!("{}: {e}", dir.display()))?
            .flatten()
            .any(|e| e.file_name().len() == 2 && e.path().is_dir())
            .then(|| DiskCache::open(dir.to_path_buf()))
            .transpose()?;
        Ok(KeyedLog {
            path,
            inner: Mutex::new(Inner {
                writer,
                reader,
                index,
                end,
            }),
            legacy,
        })
    }

    fn read(&self, key: &str) -> Result<Option<Value>, std::io::Error> {
        let mut inner = self.inner.lock().expect("log lock");
        let Some(&(at, len)) = inner.index.get(&short(key)) else {
            return Ok(None);
        };
        let mut line = vec![0; len as usize];
        inner.reader.seek(SeekFrom::Start(at))?;
        inner.reader.read_exact(&mut line)?;
        drop(inner);
        let text = String::from_utf8_lossy(&line);
        let Some((k, json)) = text.trim_end().split_once(' ') else {
            return Ok(None);
        };
        Ok((k == key)
            .then(|| serde_json::from_str(json).ok())
            .flatten())
    }

    /// Stores `value` under `key`, saying why it could not.
    pub(crate) fn store(&self, key: &str, value: &Value) -> Result<(), String> {
        let line = format!("{key} {value}\n");
        let mut inner = self.inner.lock().expect("log lock");
        inner
            .writer
            .write_all(line.as_bytes())
            .map_err(|e| format!("{}: {e}", self.path.display()))?;
        let at = inner.end;
        inner.index.insert(short(key), (at, line.len() as u32));
        inner.end += line.len() as u64;
        Ok(())
    }
}

impl Store for KeyedLog {
    fn get(&self, key: &str) -> Option<Value> {
        match self.read(key) {
            Ok(Some(v)) => Some(v),
            _ => self.legacy.as_ref().and_then(|l| l.get(key)),
        }
    }

    fn put(&self, key: &str, value: &Value) {
        let _ = self.store(key, value);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn values_survive_reopening_a_torn_tail_and_the_old_layout() {
        let dir = tempfile::tempdir().unwrap();
        let key = |k: u8| DiskCache::key(&[&k.to_string()]);
        {
            let log = KeyedLog::open(dir.path(), "log.jsonl").unwrap();
            log.put(&key(1), &json!({"a": 1}));
            log.put(&key(2), &json!("two"));
            log.put(&key(1), &json!({"a": "replaced"}));
            assert_eq!(log.get(&key(1)), Some(json!({"a": "replaced"})));
            assert_eq!(log.get(&key(3)), None);
        }
        // A kill in the middle of a line.
        let path = dir.path().join("log.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(format!("{} {{\"cut", key(3)).as_bytes())
            .unwrap();
        drop(f);
        // An answer of an earlier version's journal.
        DiskCache::open(dir.path().to_path_buf())
            .unwrap()
            .put(&key(4), &json!("old"));
        let log = KeyedLog::open(dir.path(), "log.jsonl").unwrap();
        assert_eq!(log.get(&key(1)), Some(json!({"a": "replaced"})));
        assert_eq!(log.get(&key(2)), Some(json!("two")));
        assert_eq!(log.get(&key(3)), None, "the torn line is gone");
        assert_eq!(log.get(&key(4)), Some(json!("old")));
        log.put(&key(3), &json!(3));
        drop(log);
        let log = KeyedLog::open(dir.path(), "log.jsonl").unwrap();
        assert_eq!(log.get(&key(3)), Some(json!(3)));
        // Keys that are not hex still work.
        log.put("mode", &json!({"mode": "plain"}));
        assert_eq!(log.get("mode"), Some(json!({"mode": "plain"})));
    }
}
