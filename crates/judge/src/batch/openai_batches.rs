//! The OpenAI Batch API (also served by Azure OpenAI, Groq, Together,
//! Fireworks, Mistral and others): upload a request file, create a batch,
//! poll it, download its output and error files, cancel it; and find a
//! batch whose creation we never heard back from by its metadata. Its line
//! formats (which `vllm run-batch` reads and writes too) are here.

use std::io::Read;
use std::path::Path;

use refscore_core::Error;
use serde_json::{json, Value};

use super::ledger::{Chunk, Ledger};
use super::lines::{Outcome, ReadResult, RequestLine};
use super::rest::{Rest, ATTEMPTS};
use super::{BatchBackend, Poll};
use crate::Endpoint;

/// The endpoint every request line and batch names.
pub(crate) const ENDPOINT: &str = "/v1/chat/completions";

/// The protocol's limits per request file: requests and bytes.
pub(crate) const MAX_LINES: usize = 50_000;
pub(crate) const MAX_BYTES: u64 = 200 * 1024 * 1024;

/// A request file's line: `custom_id`, method, endpoint and the body an
/// online call would send.
pub(crate) fn request_line(id: &str, body: &Value) -> String {
    json!({"custom_id": id, "method": "POST", "url": ENDPOINT, "body": body}).to_string()
}

/// Reads one result line (an output or error file's): its `custom_id` and
/// outcome. `None` for a blank line; an error names what is wrong.
pub(crate) fn read_result(line: &str) -> Result<Option<(String, Outcome)>, String> {
    if line.trim().is_empty() {
        return Ok(None);
    }
    let v: Value = serde_json::from_str(line).map_err(|e| format!("not JSON: {e}"))?;
    let id = v["custom_id"].as_str().ok_or("no custom_id")?.to_string();
    let response = &v["response"];
    let status = response["status_code"].as_u64().map(|s| s as u16);
    // OpenAI puts a failed request's error in the response body; vLLM
    // leaves the body empty and says why in `error` (an object or a text).
    let error = match &v["error"] {
        Value::Null => None,
        Value::String(text) => Some(text.clone()),
        e => Some(format!(
            "{}: {}",
            e["code"].as_str().unwrap_or("error"),
            e["message"].as_str().unwrap_or("")
        )),
    };
    let outcome = match (status, error) {
        (Some(200), _) if response["body"].is_object() => Outcome::Answer(response["body"].clone()),
        (Some(code), error) if response["body"].is_null() => Outcome::Failed(
            Some(code),
            error.unwrap_or_else(|| "no response body".into()),
        ),
        (Some(code), _) => Outcome::Failed(Some(code), response["body"].to_string()),
        (None, Some(error)) => Outcome::Failed(None, error),
        (None, None) => {
            Outcome::Failed(None, "a result line with neither response nor error".into())
        }
    };
    Ok(Some((id, outcome)))
}

/// Most pages of `GET /batches` read when looking for a batch by its
/// metadata (100 each, newest first).
const LIST_PAGES: u32 = 50;

/// The OpenAI Batch API at the judge's base URL.
pub(crate) struct OpenAiBatches {
    rest: Rest,
}

impl OpenAiBatches {
    pub(crate) fn new(endpoint: &Endpoint) -> Result<OpenAiBatches, Error> {
        Ok(OpenAiBatches {
            rest: Rest::new(endpoint)?,
        })
    }

    /// `POST /files` (purpose `batch`), streaming the file as multipart.
    fn upload(&self, path: &Path, name: &str) -> Result<String, Error> {
        let url = self.rest.url(&["files"])?;
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
        let resp = self.rest.call("POST", &url, ATTEMPTS, |req| {
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
        self.rest.id_in(resp, "uploading a request file")
    }

    /// `POST /batches`. Never retried here: a creation whose answer was lost
    /// may have happened, and only [`OpenAiBatches::find`] can tell.
    fn create(&self, file_id: &str, metadata: Value) -> Result<String, Error> {
        let url = self.rest.url(&["batches"])?;
        let body = json!({
            "input_file_id": file_id,
            "endpoint": ENDPOINT,
            "completion_window": "24h",
            "metadata": metadata,
        });
        let resp = self.rest.call("POST", &url, 1, |req| {
            req.send_json(body.clone()).map_err(Box::new)
        })?;
        self.rest.id_in(resp, "creating a batch")
    }

    /// The batch this run created for a request file, looked up by its
    /// metadata in `GET /batches` (newest first, [`LIST_PAGES`] pages at
    /// most).
    fn find(&self, tag: &str, name: &str) -> Result<Option<String>, Error> {
        let mut after: Option<String> = None;
        for _ in 0..LIST_PAGES {
            let mut url = self.rest.url(&["batches"])?;
            url.query_pairs_mut().append_pair("limit", "100");
            if let Some(a) = &after {
                url.query_pairs_mut().append_pair("after", a);
            }
            let page = self.rest.get_json(&url, "listing batches")?;
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
}

impl BatchBackend for OpenAiBatches {
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
        let id = chunk.created()?;
        let b = self
            .rest
            .get_json(&self.rest.url(&["batches", id])?, "reading a batch")?;
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
                self.rest
                    .download(&self.rest.url(&["files", file, "content"])?, &to)?;
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
        self.rest
            .post_empty(&["batches", chunk.created()?, "cancel"])
    }

    fn name(&self, chunk: &Chunk) -> String {
        chunk.remote_name()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn result_lines_read_as_answers_or_the_providers_error() {
        let ok = r#"{"id":"r1","custom_id":"a","response":{"status_code":200,"request_id":"q","body":{"choices":[]}},"error":null}"#;
        assert_eq!(
            read_result(ok).unwrap(),
            Some(("a".into(), Outcome::Answer(json!({"choices": []}))))
        );
        let status = r#"{"custom_id":"b","response":{"status_code":429,"body":{"error":{"message":"slow"}}},"error":null}"#;
        let Some((_, Outcome::Failed(Some(429), m))) = read_result(status).unwrap() else {
            panic!()
        };
        assert!(m.contains("slow"));
        let expired = r#"{"custom_id":"c","response":null,"error":{"code":"batch_expired","message":"not done in time"}}"#;
        assert_eq!(
            read_result(expired).unwrap(),
            Some((
                "c".into(),
                Outcome::Failed(None, "batch_expired: not done in time".into())
            ))
        );
        // vLLM's error lines: no body, the reason in `error`.
        let vllm = r#"{"id":"v","custom_id":"d","response":{"status_code":400,"request_id":"q","body":null},"error":"max_tokens is too large"}"#;
        assert_eq!(
            read_result(vllm).unwrap(),
            Some((
                "d".into(),
                Outcome::Failed(Some(400), "max_tokens is too large".into())
            ))
        );
        assert_eq!(read_result("  ").unwrap(), None);
        assert!(read_result("{").is_err());
        assert!(read_result(r#"{"response":{}}"#)
            .unwrap_err()
            .contains("custom_id"));
    }
}
