//! The OpenAI Batch API (also served by Azure OpenAI, Groq, Together,
//! Fireworks, Mistral and others): upload a request file, create a batch,
//! poll it, download its output and error files, cancel it; and find a
//! batch whose creation we never heard back from by its metadata.

use std::io::Read;
use std::path::Path;
use std::time::Duration;

use refscore_core::Error;
use serde_json::{json, Value};
use url::Url;

use super::ledger::{Chunk, Ledger};
use super::lines::ENDPOINT;
use super::{Poll, Provider};
use crate::parse::snippet;
use crate::redact::{api_url, redact_url, scrub, secrets};
use crate::Endpoint;

/// Attempts per idempotent call (uploads, reads) on a transient failure.
/// Creating a batch is never retried blindly: see [`Api::create`].
const ATTEMPTS: u32 = 3;

/// Most pages of `GET /batches` read when looking for a batch by its
/// metadata (100 each, newest first).
const LIST_PAGES: u32 = 50;

/// A Batch API at the judge's base URL.
pub(crate) struct Api {
    agent: ureq::Agent,
    base: Url,
    key: Option<String>,
    secrets: Vec<String>,
    /// How long a wait between attempts starts at.
    backoff: Duration,
}

impl Api {
    pub(crate) fn new(endpoint: &Endpoint) -> Result<Api, Error> {
        let base = Url::parse(endpoint.url.trim())
            .map_err(|e| Error::usage(format!("--judge-url: {e}")))?;
        // Request files run to 200 MB each way: give transfers room.
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(endpoint.timeout.min(Duration::from_secs(60)))
            .timeout_read(endpoint.timeout.max(Duration::from_secs(600)))
            .timeout_write(Duration::from_secs(600))
            .build();
        Ok(Api {
            agent,
            secrets: secrets(&base, endpoint.api_key.as_deref()),
            base,
            key: endpoint.api_key.clone(),
            backoff: endpoint.backoff,
        })
    }

    fn url(&self, segments: &[&str]) -> Result<Url, Error> {
        api_url(&self.base, segments).map_err(Error::config)
    }

    fn request(&self, method: &str, url: &Url) -> ureq::Request {
        let req = self.agent.request_url(method, url);
        match &self.key {
            Some(key) => req.set("Authorization", &format!("Bearer {key}")),
            None => req,
        }
    }

    /// One call with up to `attempts` tries on a transient failure; the
    /// error is one line naming the (redacted) URL: configuration for a
    /// refusal (401, 403, 404, other 4xx), temporary for the rest.
    fn call(
        &self,
        method: &str,
        url: &Url,
        attempts: u32,
        send: impl Fn(ureq::Request) -> Result<ureq::Response, Box<ureq::Error>>,
    ) -> Result<ureq::Response, Error> {
        let shown = redact_url(url);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match send(self.request(method, url)).map_err(|e| *e) {
                Ok(resp) => return Ok(resp),
                Err(ureq::Error::Status(code, resp)) => {
                    let text = scrub(
                        &snippet(&resp.into_string().unwrap_or_default()),
                        &self.secrets,
                    );
                    let msg =
                        format!("the judge's Batch API: {method} {shown}: HTTP {code}: {text}");
                    if code != 429 && code < 500 {
                        return Err(Error::config(msg));
                    }
                    msg
                }
                Err(ureq::Error::Transport(t)) => scrub(
                    &format!("the judge's Batch API: {method} {shown} failed: {t}"),
                    &self.secrets,
                ),
            };
            if attempt >= attempts {
                return Err(Error::temporary(failure));
            }
            std::thread::sleep(self.backoff * 2u32.pow(attempt - 1));
        }
    }

    fn json(&self, resp: ureq::Response, what: &str) -> Result<Value, Error> {
        let text = resp
            .into_string()
            .map_err(|e| Error::temporary(format!("the judge's Batch API: {what}: {e}")))?;
        serde_json::from_str(&text).map_err(|_| {
            Error::temporary(format!(
                "the judge's Batch API: {what}: not JSON: {}",
                snippet(&text)
            ))
        })
    }

    /// `POST /files` (purpose `batch`), streaming the file as multipart.
    fn upload(&self, path: &Path, name: &str) -> Result<String, Error> {
        let url = self.url(&["files"])?;
        let boundary = format!(
            "refscore-{}",
            crate::prompts::hex(&rand::random::<[u8; 12]>())
        );
        let head = format!(
            "--{boundary}\r\nContent-Disposition: form-data; name=\"purpose\"\r\n\r\nbatch\r\n\
             --{boundary}\r\nContent-Disposition: form-data; name=\"file\"; filename=\"{name}\"\r\n\
             Content-Type: application/jsonl\r\n\r\n"
        );
        let tail = format!("\r\n--{boundary}--\r\n");
        let len = std::fs::metadata(path)
            .map_err(|e| Error::io(format!("{}: {e}", path.display())))?
            .len();
        let total = head.len() as u64 + len + tail.len() as u64;
        let resp = self.call("POST", &url, ATTEMPTS, |req| {
            let file = std::fs::File::open(path).map_err(|e| {
                Box::new(ureq::Error::from(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                )))
            })?;
            let body = head.as_bytes().chain(file).chain(tail.as_bytes());
            req.set(
                "Content-Type",
                &format!("multipart/form-data; boundary={boundary}"),
            )
            .set("Content-Length", &total.to_string())
            .send(body)
            .map_err(Box::new)
        })?;
        self.id_in(resp, "uploading a request file")
    }

    /// The `id` of what a call created (a file, a batch).
    fn id_in(&self, resp: ureq::Response, what: &str) -> Result<String, Error> {
        let v = self.json(resp, what)?;
        v["id"].as_str().map(String::from).ok_or_else(|| {
            Error::temporary(format!(
                "the judge's Batch API: {what}: the answer has no id: {}",
                snippet(&v.to_string())
            ))
        })
    }

    /// `POST /batches`. Never retried here: a creation whose answer was lost
    /// may have happened, and only [`Api::find`] can tell.
    fn create(&self, file_id: &str, metadata: Value) -> Result<String, Error> {
        let url = self.url(&["batches"])?;
        let body = json!({
            "input_file_id": file_id,
            "endpoint": ENDPOINT,
            "completion_window": "24h",
            "metadata": metadata,
        });
        let resp = self.call("POST", &url, 1, |req| {
            req.send_json(body.clone()).map_err(Box::new)
        })?;
        self.id_in(resp, "creating a batch")
    }

    /// The batch this run created for a request file, looked up by its
    /// metadata in `GET /batches` (newest first, [`LIST_PAGES`] pages at
    /// most).
    fn find(&self, tag: &str, name: &str) -> Result<Option<String>, Error> {
        let mut after: Option<String> = None;
        for _ in 0..LIST_PAGES {
            let mut url = self.url(&["batches"])?;
            url.query_pairs_mut().append_pair("limit", "100");
            if let Some(a) = &after {
                url.query_pairs_mut().append_pair("after", a);
            }
            let page = self.json(
                self.call("GET", &url, ATTEMPTS, |r| r.call().map_err(Box::new))?,
                "listing batches",
            )?;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            for b in &data {
                let m = &b["metadata"];
                if m["refscore_tag"] == tag && m["refscore_file"] == name {
                    return Ok(b["id"].as_str().map(String::from));
                }
            }
            if page["has_more"] != true || data.is_empty() {
                return Ok(None);
            }
            after = page["last_id"]
                .as_str()
                .or_else(|| data.last().and_then(|b| b["id"].as_str()))
                .map(String::from);
        }
        Ok(None)
    }

    /// Downloads a file's content to `to`, whole or not at all.
    fn download(&self, file_id: &str, to: &Path) -> Result<(), Error> {
        let url = self.url(&["files", file_id, "content"])?;
        let resp = self.call("GET", &url, ATTEMPTS, |r| r.call().map_err(Box::new))?;
        // A transfer cut short is worth trying again later.
        refscore_core::files::copy_atomically(&mut resp.into_reader(), to).map_err(|e| {
            Error::temporary(format!(
                "the judge's Batch API: downloading {file_id} to {}: {e}",
                to.display()
            ))
        })
    }
}

impl Provider for Api {
    fn submit(&self, ledger: &mut Ledger, chunk: &Chunk, path: &Path) -> Result<String, Error> {
        let n = chunk.number;
        let file_id = match &chunk.file_id {
            Some(id) => id.clone(),
            None => {
                // An upload cut short is simply made again: files cost
                // nothing, and the one that may exist is never used.
                ledger.record(n, "upload", json!({}))?;
                let id = self.upload(path, &chunk.name)?;
                ledger.record(n, "uploaded", json!({"file_id": id}))?;
                id
            }
        };
        if chunk.creating {
            if let Some(id) = self.find(&ledger.tag, &chunk.name)? {
                ledger.record(n, "created", json!({"batch_id": id}))?;
                return Ok(id);
            }
        }
        ledger.record(n, "create", json!({"target": file_id}))?;
        let metadata = json!({
            "refscore_tag": ledger.tag,
            "refscore_file": chunk.name,
            "refscore_requests": chunk.lines.to_string(),
        });
        let id = self.create(&file_id, metadata)?;
        ledger.record(n, "created", json!({"batch_id": id}))?;
        Ok(id)
    }

    fn poll(&self, chunk: &Chunk, into: &Path) -> Result<Poll, Error> {
        let id = chunk.batch_id.as_deref().expect("a created batch");
        let url = self.url(&["batches", id])?;
        let b = self.json(
            self.call("GET", &url, ATTEMPTS, |r| r.call().map_err(Box::new))?,
            "reading a batch",
        )?;
        let status = b["status"].as_str().unwrap_or("unknown").to_string();
        let count = |k: &str| b["request_counts"][k].as_u64().unwrap_or(0);
        if !matches!(
            status.as_str(),
            "completed" | "failed" | "expired" | "cancelled"
        ) {
            return Ok(Poll::Running {
                status,
                done: count("completed") + count("failed"),
                total: count("total").max(chunk.lines),
            });
        }
        let mut results = Vec::new();
        for (key, suffix) in [("output_file_id", "output"), ("error_file_id", "errors")] {
            if let Some(file) = b[key].as_str().filter(|f| !f.is_empty()) {
                let to = into.join(format!(
                    "{}.{suffix}.jsonl",
                    chunk.name.trim_end_matches(".jsonl")
                ));
                self.download(file, &to)?;
                results.push(to);
            }
        }
        let note = b["errors"]["data"]
            .as_array()
            .and_then(|e| e.first())
            .map(|e| {
                format!(
                    "{}: {}",
                    e["code"].as_str().unwrap_or("error"),
                    e["message"].as_str().unwrap_or("")
                )
            });
        Ok(Poll::Ended {
            status,
            results,
            note,
        })
    }

    fn cancel(&self, chunk: &Chunk) -> Result<(), Error> {
        let id = chunk.batch_id.as_deref().expect("a created batch");
        let url = self.url(&["batches", id, "cancel"])?;
        self.call("POST", &url, ATTEMPTS, |r| {
            r.send_json(json!({})).map_err(Box::new)
        })
        .map(|_| ())
    }

    fn name(&self, chunk: &Chunk) -> String {
        format!(
            "batch {}",
            chunk.batch_id.as_deref().unwrap_or("(not created)")
        )
    }
}
