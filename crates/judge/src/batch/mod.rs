//! Judge batches (`--judge-batch`): what the rules, band, cache and journal
//! leave to the judge goes out as request files instead of calls, through
//! the batch API of the judge's provider (OpenAI's Batch API,
//! [`openai_batches`]; Anthropic's Message Batches, [`anthropic_batches`])
//! or a folder another machine answers ([`folder`]), at about half the
//! price and with no rate limit to pace. One trait, [`BatchBackend`], is
//! each of those; the answers reach the judge's client as its transport
//! ([`BatchTransport`]).
//!
//! A run is a few passes. A pass scores every row it has to; a request no
//! collected batch answers is set aside (its rows stay unfinished), and
//! after the pass the set-aside requests are split into request files and
//! submitted. The next pass (`--resume`) first collects: it polls the open
//! batches, and once all have ended it reads their results into the
//! answers, then scores the unfinished rows again, where every request
//! now finds its answer and goes through the same parsing as an online
//! reply. A request that only an answer makes necessary (a reason asked
//! after a failing verdict, the checks of extracted facts) goes into the
//! next batch, so such a metric takes one more round.
//!
//! Each request line's `custom_id` is a hash of the request, so answers
//! are matched in any order and an answered request is never sent again.
//! The [`ledger`] records each step before it is taken, so a kill at any
//! point neither loses a batch nor creates one twice.

pub(crate) mod anthropic_batches;
mod folder;
mod ledger;
mod lines;
pub(crate) mod openai_batches;
mod rest;
mod transport;

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use refscore_core::Error;
use serde_json::json;

use ledger::{Chunk, Ledger};
use lines::{Outcome, ReadResult, RequestLine};
use transport::Answers;
pub(crate) use transport::BatchTransport;

use crate::{Api, Endpoint};

/// The judge URL of a run whose request files another machine answers
/// (`--judge-batch dir:PATH` without `--judge-url`): it names no server,
/// and keys the answers like any other URL.
pub const OFFLINE_URL: &str = "http://judge-batch.invalid/v1";

/// Where judge batches go (`--judge-batch`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchMode {
    /// The Batch API at the judge's base URL.
    Api,
    /// Request files written to a folder, answered there by another
    /// machine.
    Dir(PathBuf),
}

impl BatchMode {
    /// Reads `api` or `dir:PATH`; the error lists the choices.
    pub fn parse(text: &str) -> Result<BatchMode, String> {
        match text.trim() {
            "api" => Ok(BatchMode::Api),
            t => match t.strip_prefix("dir:") {
                Some(p) if !p.trim().is_empty() => Ok(BatchMode::Dir(PathBuf::from(p.trim()))),
                _ => Err(format!("'{text}': expected api or dir:PATH")),
            },
        }
    }

    /// As `--judge-batch` takes it.
    pub fn name(&self) -> String {
        match self {
            BatchMode::Api => "api".into(),
            BatchMode::Dir(p) => format!("dir:{}", p.display()),
        }
    }

    /// As the ledger records it: a folder made absolute, so a later run
    /// started elsewhere still finds it.
    fn recorded(&self) -> String {
        match self {
            BatchMode::Dir(p) => format!(
                "dir:{}",
                std::path::absolute(p)
                    .unwrap_or_else(|_| p.clone())
                    .display()
            ),
            BatchMode::Api => self.name(),
        }
    }
}

/// Checks that a judge speaking `api` can run batches in `mode`: a folder
/// holds OpenAI-format lines (what `vllm run-batch` reads), and no runner
/// answers another API's.
pub fn check_mode(mode: &BatchMode, api: Api) -> Result<(), Error> {
    match mode {
        BatchMode::Dir(_) if !api.folder_batches() => Err(Error::config(format!(
            "--judge-batch dir: writes OpenAI Batch API lines (for vllm run-batch); \
             a judge speaking --judge-api {} takes --judge-batch api",
            api.name()
        ))),
        _ => Ok(()),
    }
}

/// The backend of a mode for a judge speaking `endpoint.api`, and the
/// folder a `dir:` mode answers in.
fn backend_for(
    mode: &BatchMode,
    endpoint: &Endpoint,
) -> Result<(Box<dyn BatchBackend>, Option<PathBuf>), Error> {
    check_mode(mode, endpoint.api)?;
    Ok(match mode {
        BatchMode::Api => (endpoint.api.batches(endpoint)?, None),
        BatchMode::Dir(p) => (Box::new(folder::Folder::new(p.clone())?), Some(p.clone())),
    })
}

/// A judge URL as the ledger records it: without credentials.
fn recorded_url(url: &str) -> String {
    match url::Url::parse(url.trim()) {
        Ok(u) => crate::redact::key_url(&u),
        Err(_) => crate::redact::redact_text_url(url),
    }
}

/// Cancels every batch a discarded run (`--overwrite`) left open, through
/// the provider its ledger in `dir` names, whatever the new run's settings
/// are (it may judge online, into another folder, or not at all). `current`
/// is the new run's judge endpoint and batch mode, when it has them: its
/// credentials are used where it is the same server and protocol, and its
/// mode where a ledger predates the recorded provider. Another server gets
/// `default_key` (the default key variable's), never this run's own key.
/// Returns the batches cancelled, and a line for each that could not be.
pub fn cancel_discarded(
    dir: &Path,
    current: Option<(&Endpoint, Option<&BatchMode>)>,
    default_key: Option<String>,
) -> Result<(Vec<String>, Vec<String>), Error> {
    let ledger = Ledger::open(dir)?;
    let open: Vec<Chunk> = ledger.chunks().into_iter().filter(Chunk::open).collect();
    if open.is_empty() {
        return Ok((Vec::new(), Vec::new()));
    }
    let recorded = ledger.provider.as_ref();
    let mode = match recorded.and_then(|p| p["mode"].as_str()) {
        Some(m) => BatchMode::parse(m).ok(),
        None => current.and_then(|(_, m)| m.cloned()),
    };
    // A protocol this version does not know is as good as none recorded.
    let api = match recorded.and_then(|p| p["api"].as_str()) {
        Some(a) => Api::parse(a).ok(),
        None => Some(current.map_or(Api::default(), |(e, _)| e.api)),
    };
    let url = recorded
        .and_then(|p| p["url"].as_str().map(String::from))
        .or_else(|| current.map(|(e, _)| recorded_url(&e.url)));
    let (Some(mode), Some(url), Some(api)) = (mode, url, api) else {
        let lines = open
            .iter()
            .map(|c| {
                format!(
                    "{}: its ledger does not say where it went",
                    c.batch_id.as_deref().unwrap_or("?")
                )
            })
            .collect();
        return Ok((Vec::new(), lines));
    };
    let endpoint = match current {
        Some((e, _)) if recorded_url(&e.url) == url && e.api == api => e.clone(),
        _ => Endpoint::new(url, api, String::new(), default_key),
    };
    let (backend, _) = backend_for(&mode, &endpoint)?;
    let mut ledger = ledger;
    Ok(cancel_chunks(backend.as_ref(), &mut ledger))
}

/// Cancels every open batch of a ledger: those cancelled, and a line for
/// each that could not be.
fn cancel_chunks(provider: &dyn BatchBackend, ledger: &mut Ledger) -> (Vec<String>, Vec<String>) {
    let (mut done, mut failed) = (Vec::new(), Vec::new());
    for c in ledger.chunks().into_iter().filter(Chunk::open) {
        let name = provider.name(&c);
        match provider
            .cancel(&c)
            .and_then(|()| ledger.record(c.number, "cancelled", json!({})))
        {
            Ok(()) => done.push(name),
            Err(e) => failed.push(format!("{name}: {}", e.message)),
        }
    }
    (done, failed)
}

/// One way of running request files: a provider's batch API, or a folder
/// another machine answers.
pub(crate) trait BatchBackend: Send + Sync {
    /// How a request is written as a line of a request file.
    fn request_line(&self) -> RequestLine;
    /// How a line of a result file is read.
    fn read_result(&self) -> ReadResult;
    /// The most requests and bytes one request file may hold.
    fn limits(&self) -> (usize, u64);
    /// Hands a request file over, recording each step in the ledger before
    /// taking it; returns the batch's id.
    fn submit(&self, ledger: &mut Ledger, chunk: &Chunk, path: &Path) -> Result<String, Error>;
    /// Where a batch stands; once it ended, its result files (downloaded
    /// into `into` where they are remote).
    fn poll(&self, chunk: &Chunk, into: &Path) -> Result<Poll, Error>;
    /// Cancels a batch.
    fn cancel(&self, chunk: &Chunk) -> Result<(), Error>;
    /// The batch as messages name it.
    fn name(&self, chunk: &Chunk) -> String;
}

/// Where a batch stands.
pub(crate) enum Poll {
    Running {
        status: String,
        done: u64,
        total: u64,
    },
    Ended {
        status: String,
        results: Vec<PathBuf>,
        /// The provider's reason when the whole batch failed.
        note: Option<String>,
    },
}

/// The outcome of [`JudgeBatches::collect`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Collected {
    /// No batch is open: the unfinished rows can be scored again.
    Ready,
    /// Batches are still running; what each is doing, one line.
    Waiting(String),
}

/// What [`JudgeBatches::submit`] handed over.
#[derive(Debug, Clone)]
pub struct Submitted {
    /// Requests, over all the batches.
    pub requests: u64,
    /// The batches (ids, or files written) as messages name them.
    pub batches: Vec<String>,
    /// For a folder: where the results are expected.
    pub folder: Option<PathBuf>,
}

impl Submitted {
    /// The line a run that exits to wait for its batches ends with.
    pub fn message(&self) -> String {
        let n = self.requests;
        let list = self.batches.join(", ");
        let what = if n == 1 {
            "judge request"
        } else {
            "judge requests"
        };
        match &self.folder {
            None => format!(
                "{n} {what} submitted in {list}; run the same command with --resume to collect"
            ),
            Some(dir) => format!(
                "{n} {what} written to {list}; answer each into results-NNN.jsonl beside it in {} (e.g. vllm run-batch -i requests-001.jsonl -o results-001.jsonl), then run the same command with --resume",
                dir.display()
            ),
        }
    }
}

/// A run's judge batches, kept in its run folder: the ledger, the request
/// files, downloaded results and the answers.
pub struct JudgeBatches {
    dir: PathBuf,
    provider: Box<dyn BatchBackend>,
    ledger: Ledger,
    answers: Arc<Answers>,
    folder: Option<PathBuf>,
}

impl JudgeBatches {
    /// Opens the batches kept in `dir` (created if need be).
    pub fn open(
        dir: PathBuf,
        mode: &BatchMode,
        endpoint: &Endpoint,
    ) -> Result<JudgeBatches, Error> {
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("{}: {e}", dir.display())))?;
        let (provider, folder) = backend_for(mode, endpoint)?;
        let mut ledger = Ledger::open(&dir)?;
        ledger.record_provider(json!({"mode": mode.recorded(),
            "url": recorded_url(&endpoint.url), "api": endpoint.api.name()}))?;
        Ok(JudgeBatches {
            ledger,
            answers: Arc::new(Answers::open(&dir, endpoint, provider.request_line())?),
            dir,
            provider,
            folder,
        })
    }

    /// The judge client's transport: answers from the collected batches,
    /// the rest set aside for the next.
    pub(crate) fn transport(&self) -> BatchTransport {
        BatchTransport(Arc::clone(&self.answers))
    }

    /// Batches made over the run, and the requests they held.
    pub(crate) fn totals(&self) -> (u64, u64) {
        let made: Vec<Chunk> = self
            .ledger
            .chunks()
            .into_iter()
            .filter(|c| c.batch_id.is_some())
            .collect();
        (made.len() as u64, made.iter().map(|c| c.lines).sum())
    }

    /// Finishes submissions a kill cut short, then polls the open batches
    /// and reads the results of those that ended. With `wait`, polls until
    /// none is open or the time is up, telling `progress` where they stand.
    pub fn collect(
        &mut self,
        wait: Option<Duration>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Collected, Error> {
        let deadline = wait.and_then(|w| Instant::now().checked_add(w));
        let mut pause = Duration::from_millis(200);
        loop {
            for c in self.ledger.chunks() {
                if !c.name.is_empty() && c.batch_id.is_none() && !c.cancelled {
                    self.provider
                        .submit(&mut self.ledger, &c, &self.dir.join(&c.name))?;
                }
            }
            let mut waiting = Vec::new();
            for c in self.ledger.chunks().into_iter().filter(Chunk::open) {
                match self.provider.poll(&c, &self.dir)? {
                    Poll::Running {
                        status,
                        done,
                        total,
                    } => waiting.push(format!(
                        "{}: {status}, {done} of {total} requests done",
                        self.provider.name(&c)
                    )),
                    Poll::Ended {
                        status,
                        results,
                        note,
                    } => self.read_results(&c, &status, &results, note.as_deref())?,
                }
            }
            if waiting.is_empty() {
                return Ok(Collected::Ready);
            }
            let line = waiting.join("; ");
            // Polls until the deadline itself, the last sleep cut short to
            // end there, and once more at it.
            let now = Instant::now();
            match deadline {
                Some(d) if now < d => {
                    progress(&line);
                    std::thread::sleep(pause.min(d - now));
                    pause = (pause * 2).min(Duration::from_secs(60));
                }
                _ => return Ok(Collected::Waiting(line)),
            }
        }
    }

    /// Reads an ended batch's result files into the answers: each line's
    /// answer, or its failure; a request with no line failed in this batch
    /// (an expired or failed batch), to be sent once more.
    fn read_results(
        &mut self,
        c: &Chunk,
        status: &str,
        results: &[PathBuf],
        note: Option<&str>,
    ) -> Result<(), Error> {
        let ids = lines::request_ids(&self.dir.join(&c.name))?;
        let ours: HashSet<&str> = ids.iter().map(String::as_str).collect();
        let batch = self.provider.name(c);
        let mut seen: HashSet<String> = HashSet::new();
        let (mut answered, mut failed) = (0u64, 0u64);
        for file in results {
            lines::read_results(file, self.provider.read_result(), |id, outcome| {
                if !ours.contains(id.as_str()) {
                    return Ok(());
                }
                match outcome {
                    Outcome::Answer(body) => {
                        self.answers.record_answer(&id, &body)?;
                        answered += 1;
                    }
                    Outcome::Failed(code, message) => {
                        self.answers.record_failure(&id, &batch, code, &message)?;
                        failed += 1;
                    }
                }
                seen.insert(id);
                Ok(())
            })?;
        }
        let why = match note {
            Some(n) => format!("{batch} ended {status} without answering it: {n}"),
            None => format!("{batch} ended {status} without answering it"),
        };
        for id in ids.iter().filter(|id| !seen.contains(*id)) {
            self.answers.record_failure(id, &batch, None, &why)?;
            failed += 1;
        }
        self.ledger.record(
            c.number,
            "collected",
            json!({"status": status, "answered": answered, "failed": failed}),
        )
    }

    /// After a pass: splits the requests it set aside into request files at
    /// the protocol's limits and submits each. `None` when there were none.
    pub fn submit(&mut self) -> Result<Option<Submitted>, Error> {
        let requests = self.answers.deferred() as u64;
        if requests == 0 {
            return Ok(None);
        }
        let spool = self.answers.close_spool()?.to_path_buf();
        let first = self.ledger.next_number();
        let name = |k: usize| format!("requests-{:03}.jsonl", first as usize + k);
        let written = lines::split(&spool, &self.dir, self.provider.limits(), name)?;
        for (k, w) in written.iter().enumerate() {
            let file = w.path.file_name().expect("a file").to_string_lossy();
            self.ledger.record(
                first + k as u32,
                "written",
                json!({"name": file, "lines": w.lines, "bytes": w.bytes}),
            )?;
        }
        let mut batches = Vec::new();
        for k in 0..written.len() {
            let c = self.ledger.chunk(first + k as u32);
            self.provider
                .submit(&mut self.ledger, &c, &self.dir.join(&c.name))?;
            batches.push(self.provider.name(&self.ledger.chunk(c.number)));
        }
        Ok(Some(Submitted {
            requests,
            batches,
            folder: self.folder.clone(),
        }))
    }
}
