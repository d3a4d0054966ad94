//! A scripted OpenAI-compatible chat-completions server: a handler decides,
//! per request, to answer, fail with a status, stall past the client's
//! timeout, or drop the connection. Every request is logged.

use std::io::BufReader;
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

use crate::http::{listen, read_request, write_reply};

/// What the server does with one request.
pub enum Reply {
    /// Status, extra headers, body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// Close the connection without answering.
    Drop,
    /// Wait, then do the inner reply.
    After(Duration, Box<Reply>),
    /// Never answer (until well after any client has given up).
    Stall,
}

/// A 200 chat completion whose message content is `content`.
pub fn chat(content: &str) -> Reply {
    let body = json!({
        "id": "x", "object": "chat.completion", "model": "scripted",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10, "total_tokens": 60}
    });
    Reply::Status(200, vec![], body.to_string())
}

/// A 200 chat completion with token log-probabilities: per generated token
/// its text and the listed alternatives with their probabilities.
pub fn chat_with_logprobs(content: &str, tokens: &[(&str, &[(&str, f64)])]) -> Reply {
    let content_tokens: Vec<Value> = tokens
        .iter()
        .map(|(text, alternatives)| {
            let top: Vec<Value> = alternatives
                .iter()
                .map(|(t, p)| json!({"token": t, "logprob": p.ln()}))
                .collect();
            let own = alternatives
                .iter()
                .find(|(t, _)| t == text)
                .map_or(-20.0, |(_, p)| p.ln());
            json!({"token": text, "logprob": own, "top_logprobs": top})
        })
        .collect();
    let body = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content},
                     "logprobs": {"content": content_tokens}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": tokens.len(),
                  "prompt_tokens_details": {"cached_tokens": 40}}
    });
    Reply::Status(200, vec![], body.to_string())
}

/// One request as received.
#[derive(Clone, Debug)]
pub struct Request {
    /// The request target (path and query).
    pub target: String,
    pub headers: String,
    pub body: Value,
}

impl Request {
    /// The system prompt.
    pub fn system(&self) -> &str {
        self.body["messages"][0]["content"].as_str().unwrap_or("")
    }
    /// The user message.
    pub fn user(&self) -> &str {
        self.body["messages"][1]["content"].as_str().unwrap_or("")
    }
    /// Which template the request uses, from the system prompt.
    pub fn kind(&self) -> &'static str {
        kind_of(self.system())
    }
    /// The candidate answer in the user message (after "Candidate answer:").
    pub fn candidate(&self) -> &str {
        self.user()
            .rsplit("Candidate answer:\n")
            .next()
            .unwrap_or("")
            .trim()
    }
    /// True for refscore's start-up probe: one user message, `ping`.
    pub fn is_probe(&self) -> bool {
        let m = &self.body["messages"];
        m.as_array().is_some_and(|a| a.len() == 1) && m[0]["content"] == "ping"
    }
}

/// Which of refscore's templates a system prompt belongs to.
pub fn kind_of(system: &str) -> &'static str {
    if system.contains("same core answer") {
        "meaning_match"
    } else if system.contains("integer scale from 0 to 10") {
        "similarity"
    } else if system.contains("into atomic facts") {
        "fact_extract"
    } else {
        "fact_check"
    }
}

/// A running server; requests are logged in order.
pub struct Server {
    pub url: String,
    pub log: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    /// Requests received so far (the start-up probe left out where the
    /// server answers it itself, see [`start`]).
    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

/// The handler of a server: each request, and how many requests with the
/// same template, candidate and user message came before it.
pub type Handler = dyn Fn(&Request, usize) -> Reply + Send + Sync;

/// Starts a server for a scoring run: refscore's start-up probe (one tiny
/// "ping" per run) is answered with 200 by the server itself and kept out
/// of the log; every other request goes to `handler`.
pub fn start(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Server {
    serve_with(Arc::new(handler), true)
}

/// Starts a server whose handler sees every request, the probe included
/// (for tests of the probe itself).
pub fn start_all(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Server {
    serve_with(Arc::new(handler), false)
}

fn serve_with(handler: Arc<Handler>, answer_probe: bool) -> Server {
    let (listener, url) = listen();
    let log: Arc<Mutex<Vec<Request>>> = Arc::default();
    let log2 = Arc::clone(&log);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (log, handler) = (Arc::clone(&log2), Arc::clone(&handler));
            std::thread::spawn(move || serve(stream, &log, &*handler, answer_probe));
        }
    });
    Server { url, log }
}

fn serve(stream: TcpStream, log: &Mutex<Vec<Request>>, handler: &Handler, answer_probe: bool) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let Some((head, body)) = read_request(&mut reader) else {
            return;
        };
        let target = head
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(1))
            .unwrap_or("")
            .to_string();
        let req = Request {
            target,
            headers: head,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let own_probe = answer_probe && req.is_probe();
        let seen = if own_probe {
            0
        } else {
            let mut l = log.lock().unwrap();
            let seen = l
                .iter()
                .filter(|r| {
                    r.kind() == req.kind()
                        && r.candidate() == req.candidate()
                        && r.user() == req.user()
                })
                .count();
            l.push(req.clone());
            seen
        };
        let mut reply = if own_probe {
            chat("ok")
        } else {
            handler(&req, seen)
        };
        loop {
            match reply {
                Reply::After(d, inner) => {
                    std::thread::sleep(d);
                    reply = *inner;
                }
                Reply::Drop => {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    return;
                }
                Reply::Stall => {
                    std::thread::sleep(Duration::from_secs(5));
                    return;
                }
                Reply::Status(code, extra, body) => {
                    if !write_reply(&stream, code, &extra, body.as_bytes()) {
                        return;
                    }
                    break;
                }
            }
        }
    }
}
