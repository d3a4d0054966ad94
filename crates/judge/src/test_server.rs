//! A scripted OpenAI-compatible server on 127.0.0.1 for the crate's tests:
//! a handler decides each reply from the request; every request is logged.
//! Each connection is answered once and closed, so nothing lingers.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

/// What the server does with one request.
pub(crate) enum Reply {
    /// Status, extra headers, body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// Never answer (until the client gives up).
    Stall,
}

/// A 200 chat completion whose message content is `content`.
pub(crate) fn chat(content: &str) -> Reply {
    let body = json!({
        "choices": [{"index": 0, "message": {"role": "assistant", "content": content}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10}
    });
    Reply::Status(200, vec![], body.to_string())
}

/// A 200 chat completion with token log-probabilities: per generated token
/// its text and the listed alternatives with their probabilities.
pub(crate) fn chat_with_logprobs(content: &str, tokens: &[(&str, &[(&str, f64)])]) -> Reply {
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

/// One request as received: the request target (path and query), the
/// headers and the JSON body.
#[derive(Clone, Debug)]
pub(crate) struct Request {
    pub target: String,
    pub headers: String,
    pub body: Value,
}

impl Request {
    /// Which template the request uses, from its system prompt.
    pub(crate) fn kind(&self) -> &'static str {
        let s = self.body["messages"][0]["content"].as_str().unwrap_or("");
        if s.contains("same core answer") {
            "meaning_match"
        } else if s.contains("integer scale from 0 to 10") {
            "similarity"
        } else if s.contains("into atomic facts") {
            "fact_extract"
        } else {
            "fact_check"
        }
    }
}

/// A running server.
pub(crate) struct Server {
    pub url: String,
    log: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    /// Requests received so far.
    pub(crate) fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

/// Starts a server; the handler sees each request and how many came before.
pub(crate) fn start(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Server {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/v1", listener.local_addr().unwrap());
    let log: Arc<Mutex<Vec<Request>>> = Arc::default();
    let handler = Arc::new(handler);
    let log2 = Arc::clone(&log);
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(stream) = stream else { continue };
            let (log, handler) = (Arc::clone(&log2), Arc::clone(&handler));
            std::thread::spawn(move || serve(stream, &log, &*handler));
        }
    });
    Server { url, log }
}

/// A URL where nothing listens (connection refused).
pub(crate) fn refused_url() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    drop(listener);
    format!("http://127.0.0.1:{port}/v1")
}

fn serve(
    mut stream: TcpStream,
    log: &Mutex<Vec<Request>>,
    handler: &(dyn Fn(&Request, usize) -> Reply + Send + Sync),
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut request_line = String::new();
    if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
        return;
    }
    let target = request_line
        .split_whitespace()
        .nth(1)
        .unwrap_or("")
        .to_string();
    let mut headers = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        headers.push_str(&line);
    }
    let len = headers
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .and_then(|v| v.trim().parse::<usize>().ok())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    if reader.read_exact(&mut body).is_err() {
        return;
    }
    let req = Request {
        target,
        headers,
        body: serde_json::from_slice(&body).unwrap_or(Value::Null),
    };
    let seen = {
        let mut l = log.lock().unwrap();
        l.push(req.clone());
        l.len() - 1
    };
    match handler(&req, seen) {
        Reply::Stall => std::thread::sleep(Duration::from_secs(5)),
        Reply::Status(code, extra, body) => {
            let mut head = format!(
                "HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n",
                body.len()
            );
            for (k, v) in extra {
                head.push_str(&format!("{k}: {v}\r\n"));
            }
            head.push_str("\r\n");
            let _ = stream.write_all(head.as_bytes());
            let _ = stream.write_all(body.as_bytes());
            let _ = stream.flush();
        }
    }
}
