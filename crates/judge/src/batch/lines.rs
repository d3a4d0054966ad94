//! The Batch API's file formats (OpenAI's, which `vllm run-batch` reads and
//! writes too): a request file of one JSON line per request, split at the
//! protocol's limits, and result lines matched to requests by `custom_id`.

use std::fs::File;
use std::io::{BufRead, BufReader, BufWriter, Write};
use std::path::{Path, PathBuf};

use refscore_core::Error;
use serde_json::{json, Value};

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

/// One request file written from the spool.
#[derive(Debug, Clone)]
pub(crate) struct Written {
    pub path: PathBuf,
    pub lines: u64,
    pub bytes: u64,
}

/// Splits the spool into request files of at most `max_lines` lines and
/// `max_bytes` bytes, named by `name(k)` for k = 0, 1, … in `dir`; each
/// file is made durable before the next begins.
pub(crate) fn split(
    spool: &Path,
    dir: &Path,
    (max_lines, max_bytes): (usize, u64),
    name: impl Fn(usize) -> String,
) -> Result<Vec<Written>, Error> {
    let io = |p: &Path, e: std::io::Error| Error::io(format!("{}: {e}", p.display()));
    let reader = BufReader::new(File::open(spool).map_err(|e| io(spool, e))?);
    let mut out: Vec<Written> = Vec::new();
    let mut current: Option<(BufWriter<File>, Written)> = None;
    for line in reader.lines() {
        let line = line.map_err(|e| io(spool, e))?;
        let len = line.len() as u64 + 1;
        if len > max_bytes {
            return Err(Error::config(format!(
                "a judge request of {len} bytes is over the batch file limit of {max_bytes} bytes"
            )));
        }
        let full = current
            .as_ref()
            .is_some_and(|(_, w)| w.lines as usize >= max_lines || w.bytes + len > max_bytes);
        if full {
            out.push(finish(current.take().expect("open"))?);
        }
        let (file, w) = match current.as_mut() {
            Some(c) => c,
            None => {
                let path = dir.join(name(out.len()));
                let file = File::create(&path).map_err(|e| io(&path, e))?;
                let w = Written {
                    path,
                    lines: 0,
                    bytes: 0,
                };
                current.insert((BufWriter::new(file), w))
            }
        };
        writeln!(file, "{line}").map_err(|e| io(&w.path, e))?;
        w.lines += 1;
        w.bytes += len;
    }
    if let Some(c) = current {
        out.push(finish(c)?);
    }
    Ok(out)
}

fn finish((file, w): (BufWriter<File>, Written)) -> Result<Written, Error> {
    let io = |e: std::io::Error| Error::io(format!("{}: {e}", w.path.display()));
    let file = file.into_inner().map_err(|e| io(e.into_error()))?;
    file.sync_all().map_err(io)?;
    Ok(w)
}

/// The `custom_id`s of a request file, in order.
pub(crate) fn request_ids(path: &Path) -> Result<Vec<String>, Error> {
    let io = |e: std::io::Error| Error::io(format!("{}: {e}", path.display()));
    let reader = BufReader::new(File::open(path).map_err(io)?);
    let mut ids = Vec::new();
    for line in reader.lines() {
        let line = line.map_err(io)?;
        let v: Value = serde_json::from_str(&line)
            .map_err(|e| Error::internal(format!("{}: not a request line: {e}", path.display())))?;
        ids.push(v["custom_id"].as_str().unwrap_or_default().to_string());
    }
    Ok(ids)
}

/// What a result line says of its request.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Outcome {
    /// The chat completion, as an online call would have received it.
    Answer(Value),
    /// No answer: the response's HTTP status where there was one, and the
    /// provider's message.
    Failed(Option<u16>, String),
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

/// Hands every result line of a file to `each`, in order, one at a time (a
/// file may hold 200 MB); a line that cannot be read is an error naming the
/// file and line.
pub(crate) fn read_results(
    path: &Path,
    mut each: impl FnMut(String, Outcome) -> Result<(), Error>,
) -> Result<(), Error> {
    let io = |e: std::io::Error| Error::io(format!("{}: {e}", path.display()));
    let reader = BufReader::new(File::open(path).map_err(io)?);
    for (k, line) in reader.lines().enumerate() {
        let line = line.map_err(io)?;
        match read_result(&line) {
            Ok(Some((id, outcome))) => each(id, outcome)?,
            Ok(None) => {}
            Err(e) => {
                return Err(Error::bad_input(format!(
                    "{}: line {}: {e}",
                    path.display(),
                    k + 1
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_spool_splits_at_the_line_and_byte_limits() {
        let dir = tempfile::tempdir().unwrap();
        let spool = dir.path().join("spool.jsonl");
        let lines: Vec<String> = (0..7)
            .map(|k| request_line(&format!("id{k}"), &json!({"k": "x".repeat(k * 10)})))
            .collect();
        std::fs::write(&spool, lines.join("\n") + "\n").unwrap();
        let name = |k: usize| format!("requests-{:03}.jsonl", k + 1);
        let by_lines = split(&spool, dir.path(), (3, u64::MAX), name).unwrap();
        assert_eq!(
            by_lines.iter().map(|w| w.lines).collect::<Vec<_>>(),
            [3, 3, 1]
        );
        let back: Vec<String> = by_lines
            .iter()
            .flat_map(|w| request_ids(&w.path).unwrap())
            .collect();
        assert_eq!(back, (0..7).map(|k| format!("id{k}")).collect::<Vec<_>>());
        // Bytes: each file under the limit, every line kept in order.
        let limit = lines[5].len() as u64 + lines[6].len() as u64 + 1;
        let by_bytes = split(&spool, dir.path(), (100, limit), name).unwrap();
        assert!(by_bytes.len() > 1);
        for w in &by_bytes {
            let bytes = std::fs::metadata(&w.path).unwrap().len();
            assert_eq!(bytes, w.bytes);
            assert!(bytes <= limit, "{bytes} > {limit}");
        }
        assert_eq!(by_bytes.iter().map(|w| w.lines).sum::<u64>(), 7);
        let too_small = split(&spool, dir.path(), (100, 10), name).unwrap_err();
        assert!(
            too_small.message.contains("over the batch file limit"),
            "{}",
            too_small.message
        );
    }

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
