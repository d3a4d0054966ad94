//! The answers of collected judge batches, by request (`custom_id`), and
//! the requests a pass sets aside for the next batch: the judge's
//! transport in batch mode ([`BatchTransport`]).

use std::collections::HashSet;
use std::fs::File;
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use refscore_core::Error;
use serde_json::{json, Value};

use super::lines::RequestLine;
use crate::cache::{DiskCache, Store};
use crate::keyed_log::KeyedLog;
use crate::protocol::ChatProtocol;
use crate::redact::{api_url, key_url, scrub, secrets};
use crate::transport::{Failure, Reply, Transport, Usage};
use crate::Endpoint;

/// How many batches a request may fail in (expired, a server error, a
/// rate limit, no line at all) before its rows are left `partial` with the
/// provider's error, in one invocation of refscore: the provider failed,
/// not the request, so the run exits 75 and a later `--resume` gives the
/// request this many batches again.
pub(crate) const ATTEMPTS: usize = 2;

/// This process, as the answers record who gave a request up: a give-up
/// recorded by another process (an earlier invocation) is a request to
/// try again, one recorded by this process is final for its passes.
fn session() -> &'static str {
    static SESSION: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    SESSION.get_or_init(|| crate::prompts::hex(&rand::random::<[u8; 8]>()))
}

/// Answers of collected batches, and this pass's requests that no batch
/// has answered yet.
pub(crate) struct Answers {
    store: KeyedLog,
    /// How answers are read and failures classified.
    protocol: Arc<dyn ChatProtocol>,
    /// The request URL without credentials: with the body, a request's id.
    url_key: String,
    /// Credentials to scrub from a failure's text before it is kept (a
    /// result file may echo them).
    secrets: Vec<String>,
    /// How a set-aside request is written.
    line: RequestLine,
    spool_path: PathBuf,
    spool: Mutex<Spool>,
}

/// The requests set aside in this pass, each once.
struct Spool {
    file: BufWriter<File>,
    seen: HashSet<String>,
}

impl Answers {
    /// Opens the answers kept in `dir` for requests to `endpoint` and
    /// starts an empty spool there, of lines written by `line` (a spool
    /// left by a killed pass is rebuilt by the pass that redoes it).
    pub(crate) fn open(
        dir: &Path,
        endpoint: &Endpoint,
        line: RequestLine,
    ) -> Result<Answers, Error> {
        let store = KeyedLog::open(dir, "answers.jsonl").map_err(Error::io)?;
        let protocol = endpoint.api.protocol();
        let base = endpoint.base()?;
        let url = api_url(&base, protocol.path()).map_err(Error::config)?;
        let spool_path = dir.join("spool.jsonl");
        let file = File::create(&spool_path)
            .map_err(|e| Error::io(format!("{}: {e}", spool_path.display())))?;
        Ok(Answers {
            store,
            protocol,
            url_key: key_url(&url),
            secrets: secrets(&base, endpoint.api_key.as_deref()),
            line,
            spool_path,
            spool: Mutex::new(Spool {
                file: BufWriter::new(file),
                seen: HashSet::new(),
            }),
        })
    }

    /// The `custom_id` of a request in a judge batch: a hash of where it
    /// goes (credentials left out) and its whole body, so an answer finds
    /// its request in any order and a request already answered is never
    /// sent again.
    fn id(&self, body: &Value) -> String {
        DiskCache::key(&[&self.url_key, &body.to_string()])
    }

    /// One request's answer: the reply a batch gave it, read as an online
    /// reply is; its error where it failed for good; else it is set aside
    /// for the next batch and [`Failure::Deferred`].
    fn answer(&self, body: &Value) -> Result<(Reply, Usage), Failure> {
        let id = self.id(body);
        let id = id.as_str();
        let Some(entry) = self.store.get(id) else {
            return self.defer(id, body);
        };
        if let Some(response) = entry.get("response") {
            return self.protocol.read(response);
        }
        let failed = &entry["failed"];
        let message = failed["message"]
            .as_str()
            .unwrap_or("no answer")
            .to_string();
        let status = failed["status"].as_u64().map(|s| s as u16);
        let attempts = failed["batches"].as_array().map_or(0, Vec::len);
        match status.map(|code| self.protocol.classify(code, None, &message, body)) {
            // A refusal of the request itself would be refused again.
            Some(Failure::Fatal(m)) => Err(Failure::Fatal(format!("judge batch: {m}"))),
            Some(f @ (Failure::Downgrade | Failure::NoLogprobs)) => Err(f),
            _ if attempts < ATTEMPTS => self.defer(id, body),
            // Given up by an earlier invocation: this one is its retry.
            _ if failed["given_up_by"]
                .as_str()
                .is_some_and(|s| s != session()) =>
            {
                self.store
                    .store(
                        id,
                        &json!({"failed": {"batches": [], "status": null, "message": message}}),
                    )
                    .map_err(|e| Failure::Fatal(format!("judge batch: {e}")))?;
                self.defer(id, body)
            }
            _ => {
                if failed["given_up_by"].is_null() {
                    let mut given_up = entry.clone();
                    given_up["failed"]["given_up_by"] = json!(session());
                    self.store
                        .store(id, &given_up)
                        .map_err(|e| Failure::Fatal(format!("judge batch: {e}")))?;
                }
                // The provider failed, not the request: worth a later try.
                Err(Failure::Retry(
                    format!("judge batch: no answer after {attempts} batches: {message}"),
                    None,
                    true,
                ))
            }
        }
    }

    fn defer(&self, id: &str, body: &Value) -> Result<(Reply, Usage), Failure> {
        let mut spool = self.spool.lock().expect("spool lock");
        if spool.seen.insert(id.to_string()) {
            let line = (self.line)(id, body);
            // A write error surfaces when the spool is closed.
            let _ = writeln!(spool.file, "{line}");
        }
        Err(Failure::Deferred)
    }

    /// Requests set aside in this pass.
    pub(crate) fn deferred(&self) -> usize {
        self.spool.lock().expect("spool lock").seen.len()
    }

    /// Makes the spool durable and returns its path.
    pub(crate) fn close_spool(&self) -> Result<&Path, Error> {
        let mut spool = self.spool.lock().expect("spool lock");
        let io = |e: std::io::Error| Error::io(format!("{}: {e}", self.spool_path.display()));
        spool.file.flush().map_err(io)?;
        spool.file.get_ref().sync_all().map_err(io)?;
        Ok(&self.spool_path)
    }

    /// Whether a request has its answer.
    pub(crate) fn answered(&self, id: &str) -> bool {
        self.store
            .get(id)
            .is_some_and(|e| e.get("response").is_some())
    }

    /// Keeps a batch's answer to a request.
    pub(crate) fn record_answer(&self, id: &str, body: &Value) -> Result<(), Error> {
        self.store
            .store(id, &json!({ "response": body }))
            .map_err(Error::io)
    }

    /// Counts a batch that gave a request no answer; each batch is counted
    /// once however often its results are read. `status` is the HTTP status
    /// of the line's response, where it had one.
    pub(crate) fn record_failure(
        &self,
        id: &str,
        batch: &str,
        status: Option<u16>,
        message: &str,
    ) -> Result<(), Error> {
        if self.answered(id) {
            return Ok(());
        }
        let mut batches: Vec<Value> = self
            .store
            .get(id)
            .and_then(|e| e["failed"]["batches"].as_array().cloned())
            .unwrap_or_default();
        if !batches.iter().any(|b| b == batch) {
            batches.push(json!(batch));
        }
        self.store
            .store(
                id,
                &json!({"failed": {"batches": batches, "status": status,
                                   "message": scrub(message, &self.secrets)}}),
            )
            .map_err(Error::io)
    }
}

/// The judge client's transport in batch mode: a request is answered from
/// the collected batches, or set aside for the next one.
pub(crate) struct BatchTransport(pub(crate) Arc<Answers>);

impl Transport for BatchTransport {
    fn send(&self, body: &Value) -> Result<(Reply, Usage), Failure> {
        self.0.answer(body)
    }

    fn paced(&self) -> bool {
        false
    }
}
