//! `--judge-batch dir:PATH`: for a judge on another machine, with no
//! network between. Request files are written to PATH as
//! `requests-NNN.jsonl`; whatever runs them (`vllm run-batch -i
//! requests-001.jsonl -o results-001.jsonl`) leaves `results-NNN.jsonl`
//! beside them, in the same line format as the Batch API's output file.

use std::path::{Path, PathBuf};

use refscore_batch::Error;
use serde_json::json;

use super::ledger::{Chunk, Ledger};
use super::{Poll, Provider};

/// A folder shared with the machine that runs the requests.
pub(crate) struct Folder {
    path: PathBuf,
}

impl Folder {
    pub(crate) fn new(path: PathBuf) -> Result<Folder, Error> {
        std::fs::create_dir_all(&path).map_err(|e| {
            Error::config(format!(
                "--judge-batch dir:{}: cannot create the folder: {e}",
                path.display()
            ))
        })?;
        Ok(Folder { path })
    }

    /// The results file that answers a requests file.
    fn results(&self, requests: &str) -> PathBuf {
        self.path
            .join(requests.replacen("requests-", "results-", 1))
    }

    /// The first `requests-NNN.jsonl` with neither it nor its results in
    /// the folder (it may hold other nights' files).
    fn free_name(&self) -> String {
        (1..)
            .map(|k| format!("requests-{k:03}.jsonl"))
            .find(|n| !self.path.join(n).exists() && !self.results(n).exists())
            .expect("a free name")
    }
}

impl Provider for Folder {
    fn submit(&self, ledger: &mut Ledger, chunk: &Chunk, path: &Path) -> Result<String, Error> {
        // A copy begun before a kill is finished under the name it was
        // given, never written twice under two names.
        let name = match (&chunk.target, chunk.creating) {
            (Some(name), true) => name.clone(),
            _ => {
                let name = self.free_name();
                ledger.record(chunk.number, "create", json!({"target": name}))?;
                name
            }
        };
        let to = self.path.join(&name);
        let mut from =
            std::fs::File::open(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        refscore_batch::files::copy_atomically(&mut from, &to)
            .map_err(|e| Error::io(format!("{}: {e}", to.display())))?;
        ledger.record(chunk.number, "created", json!({"batch_id": name}))?;
        Ok(name)
    }

    fn poll(&self, chunk: &Chunk, _into: &Path) -> Result<Poll, Error> {
        let name = chunk.batch_id.as_deref().expect("a written file");
        let results = self.results(name);
        if results.exists() {
            return Ok(Poll::Ended {
                status: "completed".into(),
                results: vec![results],
                note: None,
            });
        }
        Ok(Poll::Running {
            status: format!("waiting for {}", results.display()),
            done: 0,
            total: chunk.lines,
        })
    }

    fn cancel(&self, chunk: &Chunk) -> Result<(), Error> {
        let name = chunk.batch_id.as_deref().expect("a written file");
        if !self.results(name).exists() {
            let _ = std::fs::remove_file(self.path.join(name));
        }
        Ok(())
    }

    fn name(&self, chunk: &Chunk) -> String {
        self.path
            .join(chunk.batch_id.as_deref().unwrap_or("(not written)"))
            .display()
            .to_string()
    }
}
