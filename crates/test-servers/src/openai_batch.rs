//! A scripted OpenAI Batch API on 127.0.0.1 for judge-batch tests: files
//! (multipart upload, content download), batches (create, get, list,
//! cancel) walking validating → in_progress → finalizing → an end status
//! the test chooses per batch (completed, failed, expired), answer lines
//! written in reverse order, some lines into the error file; and a hang at
//! a chosen call, so a test can kill -9 the client there.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use serde_json::{json, Value};

use crate::faults::{self, Faults};
use crate::http::listen;

/// What a batch's request line gets: a chat completion body, or an HTTP
/// status and error body (the line goes to the error file); status 0: the
/// request was not run before the batch expired.
pub type Answer = Result<Value, (u16, Value)>;

/// Decides a request line's answer from its body, how many times that
/// request was answered before, and the batch's number (0, 1, …).
pub type AnswerFn = dyn Fn(&Value, usize, usize) -> Answer + Send + Sync;

/// How the batch numbered `k` (0, 1, …) ends.
pub type EndOf = dyn Fn(usize) -> &'static str + Send + Sync;

/// One batch as the server holds it.
#[derive(Clone, Debug)]
pub struct Batch {
    pub id: String,
    pub input_file_id: String,
    pub metadata: Value,
    pub status: String,
    pub polls: usize,
    pub output_file_id: Option<String>,
    pub error_file_id: Option<String>,
    pub request_ids: Vec<String>,
}

#[derive(Default)]
pub struct State {
    pub files: HashMap<String, Vec<u8>>,
    pub batches: Vec<Batch>,
    /// Times each custom_id was answered with a 200 (what is paid).
    pub paid: HashMap<String, usize>,
    /// The calls got, and the one to hang at.
    pub faults: Faults,
}

/// A running server.
pub struct BatchServer {
    pub url: String,
    pub state: Arc<Mutex<State>>,
}

impl BatchServer {
    /// Lets a hung call go (its client is gone by then).
    pub fn release(&self) {
        self.state.lock().unwrap().faults.release = true;
    }

    pub fn batches(&self) -> Vec<Batch> {
        self.state.lock().unwrap().batches.clone()
    }

    /// The most times any request was paid for.
    pub fn most_paid(&self) -> usize {
        self.state
            .lock()
            .unwrap()
            .paid
            .values()
            .copied()
            .max()
            .unwrap_or(0)
    }

    /// Whether the server got a call ("METHOD /path").
    pub fn called(&self, call: &str) -> bool {
        self.state
            .lock()
            .unwrap()
            .faults
            .calls
            .iter()
            .any(|c| c == call)
    }

    /// Requests answered, each counted once.
    pub fn answered(&self) -> usize {
        self.state.lock().unwrap().paid.len()
    }
}

/// Starts a server: `answer` decides each request line's answer, `end` how
/// each batch ends, and `hang_at` the call to hang at once.
pub fn start(
    answer: impl Fn(&Value, usize, usize) -> Answer + Send + Sync + 'static,
    end: impl Fn(usize) -> &'static str + Send + Sync + 'static,
    hang_at: Option<&str>,
) -> BatchServer {
    let (listener, url) = listen();
    let state = Arc::new(Mutex::new(State {
        faults: Faults {
            hang_at: hang_at.map(String::from),
            ..Faults::default()
        },
        ..State::default()
    }));
    let answer: Arc<AnswerFn> = Arc::new(answer);
    let end: Arc<EndOf> = Arc::new(end);
    let st = Arc::clone(&state);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (st, answer, end) = (Arc::clone(&st), Arc::clone(&answer), Arc::clone(&end));
            std::thread::spawn(move || {
                // Creating a batch hangs after the batch exists: the client
                // never hears of a batch the provider made.
                faults::serve(stream, &st, |s| &mut s.faults, "POST /v1/batches", &|r| {
                    let (code, reply) = handle(
                        &st, r.method, r.path, r.target, r.head, r.body, &*answer, &*end,
                    );
                    let bytes = match reply {
                        Reply::Json(v) => v.to_string().into_bytes(),
                        Reply::Bytes(b) => b,
                    };
                    (code, bytes)
                })
            });
        }
    });
    BatchServer { url, state }
}

enum Reply {
    Json(Value),
    Bytes(Vec<u8>),
}

#[allow(clippy::too_many_arguments)]
fn handle(
    state: &Mutex<State>,
    method: &str,
    path: &str,
    target: &str,
    head: &str,
    body: &[u8],
    answer: &AnswerFn,
    end: &EndOf,
) -> (u16, Reply) {
    let mut s = state.lock().unwrap();
    let segments: Vec<&str> = path.trim_start_matches("/v1/").split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["files"]) => {
            let Some(content) = multipart_file(head, body) else {
                return (
                    400,
                    Reply::Json(json!({"error": {"message": "no file part"}})),
                );
            };
            let purpose_ok = String::from_utf8_lossy(body).contains("\r\n\r\nbatch\r\n");
            if !purpose_ok {
                return (
                    400,
                    Reply::Json(json!({"error": {"message": "purpose must be batch"}})),
                );
            }
            let id = format!("file-{}", s.files.len() + 1);
            s.files.insert(id.clone(), content);
            (
                200,
                Reply::Json(json!({"id": id, "object": "file", "purpose": "batch"})),
            )
        }
        ("GET", ["files", id, "content"]) => match s.files.get(*id) {
            Some(b) => (200, Reply::Bytes(b.clone())),
            None => (
                404,
                Reply::Json(json!({"error": {"message": "no such file"}})),
            ),
        },
        ("POST", ["batches"]) => {
            let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
            let file = v["input_file_id"].as_str().unwrap_or_default().to_string();
            if v["endpoint"] != "/v1/chat/completions" || v["completion_window"] != "24h" {
                return (400, Reply::Json(json!({"error": {"message": "bad batch"}})));
            }
            let Some(content) = s.files.get(&file).cloned() else {
                return (
                    400,
                    Reply::Json(json!({"error": {"message": "no such input file"}})),
                );
            };
            let request_ids = String::from_utf8_lossy(&content)
                .lines()
                .filter_map(|l| serde_json::from_str::<Value>(l).ok())
                .map(|l| l["custom_id"].as_str().unwrap_or_default().to_string())
                .collect();
            let b = Batch {
                id: format!("batch_{}", s.batches.len() + 1),
                input_file_id: file,
                metadata: v["metadata"].clone(),
                status: "validating".into(),
                polls: 0,
                output_file_id: None,
                error_file_id: None,
                request_ids,
            };
            s.batches.push(b.clone());
            (200, Reply::Json(batch_json(&b)))
        }
        ("GET", ["batches"]) => {
            // Newest first, two per page, to exercise paging.
            let after = target
                .split_once("after=")
                .map(|(_, a)| a.split('&').next().unwrap_or_default().to_string());
            let mut all: Vec<Value> = s.batches.iter().rev().map(batch_json).collect();
            if let Some(a) = after {
                let at = all
                    .iter()
                    .position(|b| b["id"] == a.as_str())
                    .map_or(0, |p| p + 1);
                all.drain(..at);
            }
            let page: Vec<Value> = all.iter().take(2).cloned().collect();
            let more = all.len() > 2;
            let last = page.last().map(|b| b["id"].clone()).unwrap_or(Value::Null);
            (
                200,
                Reply::Json(
                    json!({"object": "list", "data": page, "has_more": more, "last_id": last}),
                ),
            )
        }
        ("GET", ["batches", id]) => {
            let Some(k) = s.batches.iter().position(|b| b.id == *id) else {
                return (
                    404,
                    Reply::Json(json!({"error": {"message": "no such batch"}})),
                );
            };
            advance(&mut s, k, answer, end);
            (200, Reply::Json(batch_json(&s.batches[k])))
        }
        ("POST", ["batches", id, "cancel"]) => {
            let Some(b) = s.batches.iter_mut().find(|b| b.id == *id) else {
                return (
                    404,
                    Reply::Json(json!({"error": {"message": "no such batch"}})),
                );
            };
            b.status = "cancelled".into();
            let v = batch_json(b);
            (200, Reply::Json(v))
        }
        _ => (
            404,
            Reply::Json(json!({"error": {"message": format!("no route {method} {path}")}})),
        ),
    }
}

/// One poll of batch `k`: validating → in_progress → finalizing → its end.
fn advance(s: &mut State, k: usize, answer: &AnswerFn, end: &EndOf) {
    let b = &mut s.batches[k];
    b.polls += 1;
    let next: &'static str = match b.status.as_str() {
        "validating" => "in_progress",
        "in_progress" => "finalizing",
        "finalizing" => end(k),
        _ => return,
    };
    let ending = !matches!(next, "in_progress" | "finalizing");
    s.batches[k].status = next.to_string();
    if !ending || next == "failed" || next == "cancelled" {
        return;
    }
    let input = s.files[&s.batches[k].input_file_id].clone();
    let lines: Vec<Value> = String::from_utf8_lossy(&input)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .collect();
    let (mut out, mut err) = (Vec::new(), Vec::new());
    for (n, line) in lines.iter().enumerate() {
        let id = line["custom_id"].as_str().unwrap_or_default().to_string();
        let seen = s.paid.get(&id).copied().unwrap_or(0);
        match answer(&line["body"], seen, k) {
            Err((0, _)) => err.push(json!({"id": format!("r{n}"), "custom_id": id, "response": null,
                "error": {"code": "batch_expired", "message": "This request could not be executed before the completion window expired."}})),
            Ok(body) => {
                *s.paid.entry(id.clone()).or_default() += 1;
                out.push(json!({"id": format!("r{n}"), "custom_id": id,
                    "response": {"status_code": 200, "request_id": format!("q{n}"), "body": body}, "error": null}));
            }
            Err((code, body)) => err.push(json!({"id": format!("r{n}"), "custom_id": id,
                "response": {"status_code": code, "request_id": format!("q{n}"), "body": body}, "error": null})),
        }
    }
    // Results come in any order.
    out.reverse();
    let mut file = |lines: Vec<Value>| -> Option<String> {
        if lines.is_empty() {
            return None;
        }
        let id = format!("file-{}", s.files.len() + 1);
        let text: String = lines.iter().map(|l| format!("{l}\n")).collect();
        s.files.insert(id.clone(), text.into_bytes());
        Some(id)
    };
    let (o, e) = (file(out), file(err));
    let b = &mut s.batches[k];
    b.output_file_id = o;
    b.error_file_id = e;
}

fn batch_json(b: &Batch) -> Value {
    let total = b.request_ids.len();
    let done = matches!(b.status.as_str(), "completed" | "expired");
    let mut v = json!({
        "id": b.id, "object": "batch", "endpoint": "/v1/chat/completions",
        "input_file_id": b.input_file_id, "completion_window": "24h",
        "status": b.status, "output_file_id": b.output_file_id, "error_file_id": b.error_file_id,
        "metadata": b.metadata,
        "request_counts": {"total": total, "completed": if done { total } else { 0 }, "failed": 0},
    });
    if b.status == "failed" {
        v["errors"] = json!({"object": "list", "data": [{"code": "invalid_request", "message": "scripted validation failure"}]});
    }
    v
}

/// The file part of a multipart body.
fn multipart_file(head: &str, body: &[u8]) -> Option<Vec<u8>> {
    let boundary = head
        .lines()
        .find_map(|l| l.split_once("boundary=").map(|(_, b)| b.trim().to_string()))?;
    let text = body;
    let marker = b"filename=";
    let at = text.windows(marker.len()).position(|w| w == marker)?;
    let start = at + text[at..].windows(4).position(|w| w == b"\r\n\r\n")? + 4;
    let close = format!("\r\n--{boundary}--");
    let end = text
        .windows(close.len())
        .rposition(|w| w == close.as_bytes())?;
    Some(text[start..end].to_vec())
}
