//! Anthropic's Message Batches API: a batch is created with its requests
//! inline (`POST /messages/batches`, the request file streamed as the JSON
//! array), polled (`GET /messages/batches/ID` until `processing_status` is
//! `ended`), its results read from `results_url` as JSONL, and cancelled
//! (`POST /messages/batches/ID/cancel`). A batch carries no metadata, so
//! one whose creation was never acknowledged is found by when it was made
//! and how many requests it holds (see [`AnthropicBatches::find`]).

use std::io::Read;
use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use refscore_core::Error;
use serde_json::{json, Value};
use url::Url;

use super::ledger::{Chunk, Ledger};
use super::lines::{Outcome, ReadResult, RequestLine};
use super::rest::Rest;
use super::{BatchBackend, Poll};
use crate::Endpoint;

/// The API's limits per batch: requests, and bytes (256 MB, less room
/// for the JSON around the requests).
pub(crate) const MAX_LINES: usize = 100_000;
pub(crate) const MAX_BYTES: u64 = 250 * 1024 * 1024;

/// Most pages of `GET /messages/batches` read when looking for a batch
/// (100 each, newest first).
const LIST_PAGES: u32 = 50;

/// How much earlier than the recorded intent a batch may have been made
/// and still be the one this run asked for (clocks differ).
const CLOCK_SLACK: Duration = Duration::from_secs(120);

/// A request line: `custom_id` and the Messages API request.
pub(crate) fn request_line(id: &str, body: &Value) -> String {
    json!({"custom_id": id, "params": body}).to_string()
}

/// The HTTP status an error type of the API stands for, so a batch's
/// errored line is classified as an online reply with that status would
/// be (a refusal is not sent again; an overload or rate limit is).
fn status_of(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "billing_error" => 402,
        "permission_error" => 403,
        "not_found_error" => 404,
        "request_too_large" => 413,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// Reads one result line: `{"custom_id", "result": {"type": "succeeded",
/// "message": …}}`, or `errored` (with the API's error), `canceled` or
/// `expired`.
pub(crate) fn read_result(line: &str) -> Result<Option<(String, Outcome)>, String> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let id = v["custom_id"].as_str().ok_or("no custom_id")?.to_string();
    let result = &v["result"];
    let outcome = match result["type"].as_str() {
        Some("succeeded") if result["message"].is_object() => {
            Outcome::Answer(result["message"].clone())
        }
        Some("errored") => {
            // The error object, whether or not wrapped in {"type": "error"}.
            let e = if result["error"]["error"].is_object() {
                &result["error"]["error"]
            } else {
                &result["error"]
            };
            let kind = e["type"].as_str().unwrap_or("api_error");
            let message = e["message"].as_str().unwrap_or("");
            Outcome::Failed(
                Some(status_of(kind)),
                json!({"error": {"type": kind, "message": message}}).to_string(),
            )
        }
        Some(other @ ("canceled" | "expired")) => {
            Outcome::Failed(None, format!("the request was {other} before it ran"))
        }
        _ => {
            return Err(format!(
                "an unknown result: {}",
                crate::parse::snippet(line)
            ))
        }
    };
    Ok(Some((id, outcome)))
}

/// Turns the newlines of a request file into the commas of a JSON array.
struct Commas<R>(R);

impl<R: Read> Read for Commas<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.0.read(buf)?;
        for b in &mut buf[..n] {
            if *b == b'\n' {
                *b = b',';
            }
        }
        Ok(n)
    }
}

/// Seconds since the epoch, for the ledger.
fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// Anthropic's Message Batches API at the judge's base URL.
pub(crate) struct AnthropicBatches {
    rest: Rest,
}

impl AnthropicBatches {
    pub(crate) fn new(endpoint: &Endpoint) -> Result<AnthropicBatches, Error> {
        Ok(AnthropicBatches {
            rest: Rest::new(endpoint)?,
        })
    }

    /// `POST /messages/batches` with the request file as the `requests`
    /// array, streamed (a file runs to hundreds of MB). Never retried: a
    /// creation whose answer was lost may have happened.
    fn create(&self, path: &Path) -> Result<String, Error> {
        let url = self.rest.url(&["messages", "batches"])?;
        let len = std::fs::metadata(path)
            .map_err(|e| Error::io(format!("{}: {e}", path.display())))?
            .len();
        let (head, tail) = (&b"{\"requests\":["[..], &b"]}"[..]);
        // Every line ends with a newline: all but the last become commas.
        let total = head.len() as u64 + len.saturating_sub(1) + tail.len() as u64;
        let resp = self.rest.call("POST", &url, 1, |req| {
            let file = std::fs::File::open(path).map_err(|e| {
                Box::new(ureq::Error::from(std::io::Error::new(
                    e.kind(),
                    format!("{}: {e}", path.display()),
                )))
            })?;
            let body = head
                .chain(Commas(file.take(len.saturating_sub(1))))
                .chain(tail);
            req.set("Content-Type", "application/json")
                .set("Content-Length", &total.to_string())
                .send(body)
                .map_err(Box::new)
        })?;
        self.rest.id_in(resp, "creating a batch")
    }

    /// The batch this run created for `chunk` when the creation's answer
    /// was lost: among the batches listed (newest first), the one made no
    /// earlier than the recorded intent with as many requests as the file.
    /// Two such batches cannot be told apart: that is an error naming them,
    /// rather than a guess that could collect another run's answers.
    fn find(&self, chunk: &Chunk) -> Result<Option<String>, Error> {
        let since = chunk
            .create_at
            .map_or(0, |t| t.saturating_sub(CLOCK_SLACK.as_secs()));
        let mut found: Vec<String> = Vec::new();
        let mut after: Option<String> = None;
        'pages: for _ in 0..LIST_PAGES {
            let mut url = self.rest.url(&["messages", "batches"])?;
            url.query_pairs_mut().append_pair("limit", "100");
            if let Some(a) = &after {
                url.query_pairs_mut().append_pair("after_id", a);
            }
            let page = self.rest.get_json(&url, "listing batches")?;
            let data = page["data"].as_array().cloned().unwrap_or_default();
            for b in &data {
                let made = b["created_at"]
                    .as_str()
                    .and_then(|t| humantime::parse_rfc3339_weak(t).ok())
                    .and_then(|t| t.duration_since(UNIX_EPOCH).ok())
                    .map_or(0, |d| d.as_secs());
                if made < since {
                    break 'pages;
                }
                let counts = &b["request_counts"];
                let size: u64 = ["processing", "succeeded", "errored", "canceled", "expired"]
                    .iter()
                    .map(|k| counts[k].as_u64().unwrap_or(0))
                    .sum();
                if size == chunk.lines {
                    found.extend(b["id"].as_str().map(String::from));
                }
            }
            if page["has_more"] != true || data.is_empty() {
                break;
            }
            after = page["last_id"].as_str().map(String::from);
        }
        match found.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(one.clone())),
            several => Err(Error::config(format!(
                "judge batch for {}: its creation was never acknowledged, and batches {} \
                 could each be it; cancel the ones that are not this run's at the provider, \
                 then run again",
                chunk.name,
                several.join(", ")
            ))),
        }
    }
}

impl BatchBackend for AnthropicBatches {
    fn request_line(&self) -> RequestLine {
        request_line
    }

    fn read_result(&self) -> ReadResult {
        read_result
    }

    fn limits(&self) -> (usize, u64) {
        (MAX_LINES, MAX_BYTES)
    }

    fn submit(&self, ledger: &mut Ledger, chunk: &Chunk, path: &Path) -> Result<String, Error> {
        let n = chunk.number;
        if chunk.creating {
            if let Some(id) = self.find(chunk)? {
                ledger.record(n, "created", json!({"batch_id": id}))?;
                return Ok(id);
            }
        }
        ledger.record(n, "create", json!({"target": chunk.name, "at": now_secs()}))?;
        let id = self.create(path)?;
        ledger.record(n, "created", json!({"batch_id": id}))?;
        Ok(id)
    }

    fn poll(&self, chunk: &Chunk, into: &Path) -> Result<Poll, Error> {
        let id = chunk.created()?;
        let b = self.rest.get_json(
            &self.rest.url(&["messages", "batches", id])?,
            "reading a batch",
        )?;
        let status = b["processing_status"]
            .as_str()
            .unwrap_or("unknown")
            .to_string();
        let count = |k: &str| b["request_counts"][k].as_u64().unwrap_or(0);
        let done = count("succeeded") + count("errored") + count("canceled") + count("expired");
        if status != "ended" {
            return Ok(Poll::Running {
                status,
                done,
                total: (done + count("processing")).max(chunk.lines),
            });
        }
        let mut results = Vec::new();
        if let Some(url) = b["results_url"].as_str().filter(|u| !u.is_empty()) {
            let url = Url::parse(url).map_err(|e| {
                Error::temporary(format!(
                    "the judge's Batch API: batch {id} names no usable results_url: {e}"
                ))
            })?;
            let to = into.join(format!(
                "{}.results.jsonl",
                chunk.name.trim_end_matches(".jsonl")
            ));
            self.rest.download(&url, &to)?;
            results.push(to);
        }
        Ok(Poll::Ended {
            status,
            results,
            note: None,
        })
    }

    fn cancel(&self, chunk: &Chunk) -> Result<(), Error> {
        self.rest
            .post_empty(&["messages", "batches", chunk.created()?, "cancel"])
    }

    fn name(&self, chunk: &Chunk) -> String {
        chunk.remote_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_read_as_answers_or_the_apis_error() {
        let ok = r#"{"custom_id":"a","result":{"type":"succeeded","message":{"content":[]}}}"#;
        assert_eq!(
            read_result(ok).unwrap(),
            Some(("a".into(), Outcome::Answer(json!({"content": []}))))
        );
        let refused = r#"{"custom_id":"b","result":{"type":"errored","error":{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: too large"}}}}"#;
        let Some((_, Outcome::Failed(Some(400), m))) = read_result(refused).unwrap() else {
            panic!()
        };
        assert!(m.contains("max_tokens: too large"), "{m}");
        let busy = r#"{"custom_id":"c","result":{"type":"errored","error":{"type":"overloaded_error","message":"busy"}}}"#;
        assert!(matches!(
            read_result(busy).unwrap(),
            Some((_, Outcome::Failed(Some(529), _)))
        ));
        let expired = r#"{"custom_id":"d","result":{"type":"expired"}}"#;
        assert!(matches!(
            read_result(expired).unwrap(),
            Some((_, Outcome::Failed(None, _)))
        ));
        assert_eq!(read_result(" ").unwrap(), None);
        assert!(read_result(r#"{"custom_id":"e","result":{"type":"odd"}}"#).is_err());
    }

    #[test]
    fn a_request_file_streams_as_the_requests_array() {
        let text = format!(
            "{}\n{}\n",
            request_line("a", &json!({"model": "m"})),
            request_line("b", &json!({"model": "m"}))
        );
        let mut out = String::new();
        Commas(text.as_bytes().take(text.len() as u64 - 1))
            .read_to_string(&mut out)
            .unwrap();
        let v: Value = serde_json::from_str(&format!("{{\"requests\":[{out}]}}")).unwrap();
        assert_eq!(v["requests"][1]["custom_id"], "b");
        assert_eq!(v["requests"][0]["params"]["model"], "m");
    }
}
