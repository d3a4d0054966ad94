//! The batch ledger: an append-only record, in the run folder, of every
//! request file and every step taken with it. An intent is written (and
//! made durable) before each call that creates something at the provider,
//! and the result after, so a run killed at any moment can tell on
//! `--resume` what exists, what may exist, and what was never made.

use std::collections::BTreeMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use refscore_core::Error;
use serde_json::{json, Value};

/// What the ledger knows of one request file.
#[derive(Debug, Clone, Default)]
pub(crate) struct Chunk {
    /// 1, 2, … over the run.
    pub number: u32,
    /// The file in the run folder.
    pub name: String,
    pub lines: u64,
    /// The uploaded file, once the upload answered (an upload begun is
    /// recorded too, but one cut short is simply made again).
    pub file_id: Option<String>,
    /// A batch creation was begun (the provider may have made it without
    /// our hearing), from what (the uploaded file, the file written for
    /// another machine); and the batch, once it answered.
    pub creating: bool,
    pub target: Option<String>,
    /// When the creation was begun (seconds since the epoch), where the
    /// backend needs it to find a batch it never heard of.
    pub create_at: Option<u64>,
    pub batch_id: Option<String>,
    /// Its results are read into the answers: nothing more to do.
    pub collected: bool,
    /// Cancelled by `--overwrite`.
    pub cancelled: bool,
}

impl Chunk {
    /// Created and not yet collected or cancelled: the provider holds it.
    pub(crate) fn open(&self) -> bool {
        self.batch_id.is_some() && !self.collected && !self.cancelled
    }

    /// The provider's id of the batch (a file's name, for a folder): polling
    /// and cancelling happen only after creation, so its absence is a bug.
    pub(crate) fn created(&self) -> Result<&str, Error> {
        self.batch_id
            .as_deref()
            .ok_or_else(|| Error::internal(format!("judge batch {} was never created", self.name)))
    }

    /// The batch as messages name it: its id, once created.
    pub(crate) fn remote_name(&self) -> String {
        format!(
            "batch {}",
            self.batch_id.as_deref().unwrap_or("(not created)")
        )
    }
}

/// The ledger file and what it says.
pub(crate) struct Ledger {
    path: PathBuf,
    file: File,
    /// A random name for this run's batches, in their metadata, so a
    /// batch whose creation we did not hear of can be recognised.
    pub tag: String,
    /// Where the run's batches go (`{"mode": "api" | "dir:PATH", "url": the
    /// judge URL without credentials}`), so a run that discards this one
    /// can cancel them whatever its own settings; none in ledgers written
    /// before it was recorded.
    pub provider: Option<Value>,
    chunks: BTreeMap<u32, Chunk>,
}

impl Ledger {
    /// Opens (or starts) the ledger in `dir`. A last line cut short by a
    /// kill is cut off (its step was never taken: each is recorded before
    /// it is); any other bad line is an error.
    pub(crate) fn open(dir: &Path) -> Result<Ledger, Error> {
        let path = dir.join("ledger.jsonl");
        let io = |e: std::io::Error| Error::io(format!("{}: {e}", path.display()));
        let mut text = match std::fs::read_to_string(&path) {
            Ok(t) => t,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(e) => return Err(io(e)),
        };
        let file = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(io)?;
        if !text.is_empty() && !text.ends_with('\n') {
            let whole = text.rfind('\n').map_or(0, |p| p + 1);
            file.set_len(whole as u64).map_err(io)?;
            text.truncate(whole);
        }
        let mut ledger = Ledger {
            path: path.clone(),
            file,
            tag: String::new(),
            provider: None,
            chunks: BTreeMap::new(),
        };
        for (k, line) in text.lines().enumerate() {
            match serde_json::from_str::<Value>(line) {
                Ok(event) => ledger.apply(&event),
                Err(e) => {
                    return Err(Error::internal(format!(
                        "{}: line {}: {e}",
                        path.display(),
                        k + 1
                    )))
                }
            }
        }
        if ledger.tag.is_empty() {
            let tag = crate::prompts::hex(&rand::random::<[u8; 12]>());
            ledger.append(&json!({"tag": tag}))?;
        }
        Ok(ledger)
    }

    fn apply(&mut self, e: &Value) {
        if let Some(tag) = e["tag"].as_str() {
            self.tag = tag.to_string();
            return;
        }
        if e.get("provider").is_some() {
            self.provider = Some(e["provider"].clone());
            return;
        }
        let Some(number) = e["chunk"].as_u64().map(|n| n as u32) else {
            return;
        };
        let c = self.chunks.entry(number).or_insert_with(|| Chunk {
            number,
            ..Chunk::default()
        });
        let text = |k: &str| e[k].as_str().map(String::from);
        match e["step"].as_str().unwrap_or_default() {
            "written" => {
                c.name = text("name").unwrap_or_default();
                c.lines = e["lines"].as_u64().unwrap_or(0);
            }
            "uploaded" => c.file_id = text("file_id"),
            "create" => {
                c.creating = true;
                c.target = text("target");
                c.create_at = e["at"].as_u64();
            }
            "created" => c.batch_id = text("batch_id"),
            "collected" => c.collected = true,
            "cancelled" => c.cancelled = true,
            _ => {}
        }
    }

    fn append(&mut self, event: &Value) -> Result<(), Error> {
        let io = |e: std::io::Error| Error::io(format!("{}: {e}", self.path.display()));
        let line = format!("{event}\n");
        self.file.write_all(line.as_bytes()).map_err(io)?;
        self.file.sync_data().map_err(io)?;
        self.apply(event);
        Ok(())
    }

    /// Records where the run's batches go, once (see [`Ledger::provider`]).
    pub(crate) fn record_provider(&mut self, provider: Value) -> Result<(), Error> {
        if self.provider.is_none() {
            self.append(&json!({ "provider": provider }))?;
        }
        Ok(())
    }

    /// Records a step of a chunk (with its fields) durably.
    pub(crate) fn record(&mut self, chunk: u32, step: &str, fields: Value) -> Result<(), Error> {
        let mut event = json!({"chunk": chunk, "step": step});
        if let Value::Object(extra) = fields {
            for (k, v) in extra {
                event[k] = v;
            }
        }
        self.append(&event)
    }

    /// Every chunk, in order.
    pub(crate) fn chunks(&self) -> Vec<Chunk> {
        self.chunks.values().cloned().collect()
    }

    /// One chunk as the ledger has it now.
    pub(crate) fn chunk(&self, number: u32) -> Chunk {
        self.chunks.get(&number).cloned().unwrap_or_default()
    }

    /// The number the next request file gets.
    pub(crate) fn next_number(&self) -> u32 {
        self.chunks.keys().next_back().map_or(1, |n| n + 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ledger_survives_a_torn_last_line_and_keeps_its_tag() {
        let dir = tempfile::tempdir().unwrap();
        let mut l = Ledger::open(dir.path()).unwrap();
        let tag = l.tag.clone();
        l.record(
            1,
            "written",
            json!({"name": "requests-001.jsonl", "lines": 3}),
        )
        .unwrap();
        l.record(1, "upload", json!({})).unwrap();
        l.record(1, "uploaded", json!({"file_id": "file-1"}))
            .unwrap();
        l.record(1, "create", json!({})).unwrap();
        drop(l);
        // A kill in the middle of the next line.
        let path = dir.path().join("ledger.jsonl");
        let mut f = OpenOptions::new().append(true).open(&path).unwrap();
        f.write_all(br#"{"chunk":1,"step":"crea"#).unwrap();
        drop(f);
        let mut l = Ledger::open(dir.path()).unwrap();
        assert_eq!(l.tag, tag);
        let c = l.chunk(1);
        assert_eq!((c.lines, c.file_id.as_deref()), (3, Some("file-1")));
        assert!(c.creating && c.batch_id.is_none() && !c.open());
        l.record(1, "created", json!({"batch_id": "batch_1"}))
            .unwrap();
        assert!(Ledger::open(dir.path()).unwrap().chunk(1).open());
        assert_eq!(l.next_number(), 2);
    }
}
