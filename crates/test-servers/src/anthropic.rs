//! A scripted Anthropic API on 127.0.0.1: the Messages API (`POST
//! /v1/messages`) and the Message Batches API (create with the requests
//! inline, poll `processing_status` in_progress → ended, the results JSONL
//! at `results_url`, list newest first with paging, cancel). The same
//! handler answers a request online and in a batch, so a test can compare
//! the two. Requests without `x-api-key` or `anthropic-version` are refused
//! as the real API refuses them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use crate::faults::{self, Faults, Incoming};
use crate::http::listen;

/// What a request gets: the assistant's text, or an error (the API's error
/// type, e.g. `invalid_request_error`, and a message).
pub type Answer = Result<String, (&'static str, String)>;

/// Decides a request's answer from its Messages API body and how many
/// times that request was answered before.
pub type AnswerFn = dyn Fn(&Value, usize) -> Answer + Send + Sync;

/// One batch as the server holds it.
#[derive(Clone, Debug)]
pub struct Batch {
    pub id: String,
    pub status: String,
    pub polls: usize,
    pub created_at: String,
    pub requests: Vec<Value>,
    /// The results file, once ended.
    pub results: Option<String>,
    pub cancelled: bool,
}

#[derive(Default)]
pub struct State {
    pub batches: Vec<Batch>,
    /// Messages requests answered online, in order (the probe left out).
    pub online: Vec<Value>,
    /// Times each request (its body, as text) was answered successfully.
    pub paid: HashMap<String, usize>,
    /// The calls got, and the one to hang at.
    pub faults: Faults,
}

/// A running server.
pub struct Server {
    pub url: String,
    pub state: Arc<Mutex<State>>,
}

impl Server {
    pub fn batches(&self) -> Vec<Batch> {
        self.state.lock().unwrap().batches.clone()
    }

    /// The most times any request was paid for, online and in batches.
    pub fn most_paid(&self) -> usize {
        let s = self.state.lock().unwrap();
        s.paid.values().copied().max().unwrap_or(0)
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

    /// Lets a hung call go (its client is gone by then).
    pub fn release(&self) {
        self.state.lock().unwrap().faults.release = true;
    }
}

/// Starts a server whose requests `answer` decides, hanging once at the
/// call `hang_at` names (a creation hangs after the batch exists).
pub fn start(
    answer: impl Fn(&Value, usize) -> Answer + Send + Sync + 'static,
    hang_at: Option<&str>,
) -> Server {
    let (listener, url) = listen();
    let state = Arc::new(Mutex::new(State {
        faults: Faults {
            hang_at: hang_at.map(String::from),
            ..Faults::default()
        },
        ..State::default()
    }));
    let answer: Arc<AnswerFn> = Arc::new(answer);
    let st = Arc::clone(&state);
    let base = url.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (st, answer, base) = (Arc::clone(&st), Arc::clone(&answer), base.clone());
            std::thread::spawn(move || {
                faults::serve(
                    stream,
                    &st,
                    |s| &mut s.faults,
                    "POST /v1/messages/batches",
                    &|r| reply(&st, r, &*answer, &base),
                )
            });
        }
    });
    Server { url, state }
}

/// The reply to one request: refused without Anthropic's headers.
fn reply(state: &Mutex<State>, r: &Incoming, answer: &AnswerFn, base: &str) -> (u16, Vec<u8>) {
    let lower = r.head.to_ascii_lowercase();
    let (code, reply) =
        if !lower.contains("\r\nx-api-key:") || !lower.contains("\r\nanthropic-version:") {
            (
                401,
                error_body(
                    "authentication_error",
                    "x-api-key and anthropic-version are required",
                ),
            )
        } else {
            handle(state, r.method, r.path, r.target, r.body, answer, base)
        };
    (code, reply.into_bytes())
}

fn error_body(kind: &str, message: &str) -> String {
    json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
}

/// The HTTP status the API answers an error type with.
fn status_of(kind: &str) -> u16 {
    match kind {
        "invalid_request_error" => 400,
        "authentication_error" => 401,
        "not_found_error" => 404,
        "rate_limit_error" => 429,
        "overloaded_error" => 529,
        _ => 500,
    }
}

/// A Messages API reply holding `text`.
pub fn message(text: &str, params: &Value) -> Value {
    let prompt = params.to_string().len() / 4;
    json!({"id": "msg_scripted", "type": "message", "role": "assistant",
           "model": params["model"], "content": [{"type": "text", "text": text}],
           "stop_reason": "end_turn",
           "usage": {"input_tokens": prompt, "output_tokens": text.len() / 4 + 1,
                     "cache_read_input_tokens": 0}})
}

fn now_rfc3339() -> String {
    // Whole seconds since the epoch, written as RFC 3339 without a crate:
    // days from the civil calendar (Howard Hinnant's algorithm).
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000000Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn batch_json(b: &Batch, base: &str) -> Value {
    let total = b.requests.len();
    let ended = b.status == "ended";
    let (mut ok, mut errored, mut canceled, mut expired) = (0, 0, 0, 0);
    if let Some(results) = &b.results {
        for line in results.lines() {
            let v: Value = serde_json::from_str(line).unwrap();
            match v["result"]["type"].as_str().unwrap_or("") {
                "succeeded" => ok += 1,
                "errored" => errored += 1,
                "canceled" => canceled += 1,
                _ => expired += 1,
            }
        }
    }
    json!({"id": b.id, "type": "message_batch", "processing_status": b.status,
           "request_counts": {"processing": if ended { 0 } else { total }, "succeeded": ok,
                              "errored": errored, "canceled": canceled, "expired": expired},
           "created_at": b.created_at, "ended_at": if ended { json!(b.created_at) } else { Value::Null },
           "expires_at": b.created_at, "cancel_initiated_at": Value::Null,
           "results_url": if ended { json!(format!("{base}/messages/batches/{}/results", b.id)) } else { Value::Null }})
}

/// Answers one request, counting what is paid.
fn run(s: &mut State, params: &Value, answer: &AnswerFn) -> Answer {
    let key = params.to_string();
    let seen = s.paid.get(&key).copied().unwrap_or(0);
    let a = answer(params, seen);
    if a.is_ok() {
        *s.paid.entry(key).or_default() += 1;
    }
    a
}

fn handle(
    state: &Mutex<State>,
    method: &str,
    path: &str,
    target: &str,
    body: &[u8],
    answer: &AnswerFn,
    base: &str,
) -> (u16, String) {
    let mut s = state.lock().unwrap();
    let v: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let segments: Vec<&str> = path.trim_start_matches("/v1/").split('/').collect();
    match (method, segments.as_slice()) {
        ("POST", ["messages"]) => {
            if v["messages"][0]["content"] == "ping" {
                return (200, message("ok", &v).to_string());
            }
            s.online.push(v.clone());
            match run(&mut s, &v, answer) {
                Ok(text) => (200, message(&text, &v).to_string()),
                Err((kind, m)) => (status_of(kind), error_body(kind, &m)),
            }
        }
        ("POST", ["messages", "batches"]) => {
            let Some(requests) = v["requests"].as_array().filter(|r| !r.is_empty()) else {
                return (400, error_body("invalid_request_error", "requests: empty"));
            };
            let valid = |r: &Value| {
                r["params"].is_object()
                    && r["custom_id"].as_str().is_some_and(|id| {
                        (1..=64).contains(&id.len())
                            && id
                                .bytes()
                                .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
                    })
            };
            if !requests.iter().all(valid) {
                return (
                    400,
                    error_body("invalid_request_error", "requests: bad custom_id or params"),
                );
            }
            let b = Batch {
                id: format!("msgbatch_{:02}", s.batches.len() + 1),
                status: "in_progress".into(),
                polls: 0,
                created_at: now_rfc3339(),
                requests: requests.clone(),
                results: None,
                cancelled: false,
            };
            s.batches.push(b.clone());
            (200, batch_json(&b, base).to_string())
        }
        ("GET", ["messages", "batches"]) => {
            // Newest first, two per page, to exercise paging.
            let after = target
                .split_once("after_id=")
                .map(|(_, a)| a.split('&').next().unwrap_or_default().to_string());
            let mut all: Vec<Value> = s
                .batches
                .iter()
                .rev()
                .map(|b| batch_json(b, base))
                .collect();
            if let Some(a) = after {
                let at = all
                    .iter()
                    .position(|b| b["id"] == a.as_str())
                    .map_or(0, |p| p + 1);
                all.drain(..at);
            }
            let page: Vec<Value> = all.iter().take(2).cloned().collect();
            let more = all.len() > 2;
            let first = page.first().map(|b| b["id"].clone()).unwrap_or(Value::Null);
            let last = page.last().map(|b| b["id"].clone()).unwrap_or(Value::Null);
            (
                200,
                json!({"data": page, "has_more": more, "first_id": first, "last_id": last})
                    .to_string(),
            )
        }
        ("GET", ["messages", "batches", id]) => {
            let Some(k) = s.batches.iter().position(|b| b.id == *id) else {
                return (404, error_body("not_found_error", "no such batch"));
            };
            s.batches[k].polls += 1;
            if s.batches[k].status == "in_progress" && s.batches[k].polls >= 2 {
                end_batch(&mut s, k, answer);
            }
            (200, batch_json(&s.batches[k], base).to_string())
        }
        ("GET", ["messages", "batches", id, "results"]) => {
            match s
                .batches
                .iter()
                .find(|b| b.id == *id)
                .and_then(|b| b.results.clone())
            {
                Some(r) => (200, r),
                None => (404, error_body("not_found_error", "no results yet")),
            }
        }
        ("POST", ["messages", "batches", id, "cancel"]) => {
            let Some(k) = s.batches.iter().position(|b| b.id == *id) else {
                return (404, error_body("not_found_error", "no such batch"));
            };
            s.batches[k].cancelled = true;
            if s.batches[k].status == "in_progress" {
                end_batch(&mut s, k, answer);
            }
            (200, batch_json(&s.batches[k], base).to_string())
        }
        _ => (
            404,
            error_body("not_found_error", &format!("no route {method} {path}")),
        ),
    }
}

/// Ends batch `k`: each request's result line, in reverse order (results
/// come in any order); a cancelled batch's lines are `canceled`.
fn end_batch(s: &mut State, k: usize, answer: &AnswerFn) {
    let requests = s.batches[k].requests.clone();
    let cancelled = s.batches[k].cancelled;
    let mut lines = Vec::new();
    for r in &requests {
        let result = if cancelled {
            json!({"type": "canceled"})
        } else {
            match run(s, &r["params"], answer) {
                Ok(text) => json!({"type": "succeeded", "message": message(&text, &r["params"])}),
                Err(("expired", _)) => json!({"type": "expired"}),
                Err((kind, m)) => json!({"type": "errored",
                    "error": {"type": "error", "error": {"type": kind, "message": m}}}),
            }
        };
        lines.push(json!({"custom_id": r["custom_id"], "result": result}).to_string());
    }
    lines.reverse();
    let b = &mut s.batches[k];
    b.results = Some(lines.join("\n") + "\n");
    b.status = "ended".into();
}
