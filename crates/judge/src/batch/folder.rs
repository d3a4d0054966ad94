//! `--judge-batch dir:PATH`: for a judge on another machine, with no
//! network between. Request files are written to PATH as
//! `requests-NNN.jsonl`; whatever runs them (`vllm run-batch -i
//! requests-001.jsonl -o results-001.jsonl`) leaves `results-NNN.jsonl`
//! beside them, in the same line format as the Batch API's output file.

use std::path::{Path, PathBuf};

use refscore_core::Error;
use serde_json::json;

use super::ledger::{Chunk, Ledger};
use super::lines::{ReadResult, RequestLine};
use super::openai_batches;
use super::{BatchBackend, Poll};

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

/// Whether two files hold the same bytes (compared in blocks, never read
/// whole: request files run to 200 MB).
fn same_content(a: &Path, b: &Path) -> std::io::Result<bool> {
    use std::io::Read;
    let (fa, fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let (mut ra, mut rb) = (std::io::BufReader::new(fa), std::io::BufReader::new(fb));
    let (mut ba, mut bb) = (vec![0u8; 1 << 16], vec![0u8; 1 << 16]);
    loop {
        let n = ra.read(&mut ba)?;
        if n == 0 {
            return Ok(true);
        }
        rb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

/// Request files in the OpenAI Batch API's line format, which `vllm
/// run-batch` reads and writes.
impl BatchBackend for Folder {
    fn request_line(&self) -> RequestLine {
        openai_batches::request_line
    }

    fn read_result(&self) -> ReadResult {
        openai_batches::read_result
    }

    fn limits(&self) -> (usize, u64) {
        (openai_batches::MAX_LINES, openai_batches::MAX_BYTES)
    }

    fn submit(&self, ledger: &mut Ledger, chunk: &Chunk, path: &Path) -> Result<String, Error> {
        let io = |p: &Path, e: std::io::Error| Error::io(format!("{}: {e}", p.display()));
        // A copy begun before a kill is finished under the name it was
        // given, never written twice under two names.
        let mut name = match (&chunk.target, chunk.creating) {
            (Some(name), true) => Some(name.clone()),
            _ => None,
        };
        loop {
            let target = match name.take() {
                Some(n) => n,
                None => {
                    let n = self.free_name();
                    ledger.record(chunk.number, "create", json!({"target": n}))?;
                    n
                }
            };
            let to = self.path.join(&target);
            let mut from = std::fs::File::open(path).map_err(|e| io(path, e))?;
            // The name is claimed atomically: a run sharing the folder that
            // picked the same free name gets the next one, never this file.
            let placed =
                refscore_core::files::copy_exclusively(&mut from, &to).map_err(|e| io(&to, e))?;
            // Taken: by this run before a kill (the same bytes), or by
            // another run (then try the next free name).
            if placed || same_content(path, &to).map_err(|e| io(&to, e))? {
                ledger.record(chunk.number, "created", json!({"batch_id": target}))?;
                return Ok(target);
            }
        }
    }

    fn poll(&self, chunk: &Chunk, _into: &Path) -> Result<Poll, Error> {
        let name = chunk.created()?;
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
        let name = chunk.created()?;
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Chunk `n` of `ledger` as a kill after choosing `target` leaves it:
    /// written, its name chosen, not yet copied.
    fn chosen(ledger: &mut Ledger, n: u32, target: &str) -> Chunk {
        let written = json!({"name": "requests-001.jsonl", "lines": 1});
        ledger.record(n, "written", written).unwrap();
        ledger
            .record(n, "create", json!({"target": target}))
            .unwrap();
        ledger.chunk(n)
    }

    #[test]
    fn a_request_file_never_replaces_another_runs_file_of_the_same_name() {
        let run = tempfile::tempdir().unwrap();
        let shared = tempfile::tempdir().unwrap();
        let folder = Folder::new(shared.path().to_path_buf()).unwrap();
        let ours = run.path().join("requests-001.jsonl");
        std::fs::write(&ours, "our requests\n").unwrap();
        let mut ledger = Ledger::open(run.path()).unwrap();
        // This run chose requests-001.jsonl and recorded it; another run
        // sharing the folder wrote that name before this one could.
        let chunk = chosen(&mut ledger, 1, "requests-001.jsonl");
        let theirs = shared.path().join("requests-001.jsonl");
        std::fs::write(&theirs, "their requests\n").unwrap();
        let name = folder.submit(&mut ledger, &chunk, &ours).unwrap();
        assert_eq!(name, "requests-002.jsonl");
        let read = |p: &Path| std::fs::read_to_string(p).unwrap();
        assert_eq!(read(&theirs), "their requests\n");
        assert_eq!(read(&shared.path().join(&name)), "our requests\n");
        assert_eq!(ledger.chunk(1).batch_id.as_deref(), Some(name.as_str()));
        // Killed after the copy but before recording it: the file found
        // under the recorded name is this run's own, and is kept.
        let chunk = chosen(&mut ledger, 2, "requests-002.jsonl");
        assert_eq!(
            folder.submit(&mut ledger, &chunk, &ours).unwrap(),
            "requests-002.jsonl"
        );
    }
}
