//! A scripted OpenAI-compatible server on 127.0.0.1 for judge tests: a
//! handler decides, per request, to answer, fail with a status, stall past
//! the client's timeout, or drop the connection.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{json, Value};

/// What the server does with one request.
pub enum Reply {
    /// Status, extra headers, body.
    Status(u16, Vec<(&'static str, String)>, String),
    /// Close the connection without answering.
    Drop,
    /// Wait, then do the inner reply.
    After(Duration, Box<Reply>),
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

/// One request as received.
#[derive(Clone, Debug)]
pub struct Request {
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
        let s = self.system();
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
    /// The candidate answer in the user message (after "Candidate answer:").
    pub fn candidate(&self) -> &str {
        self.user()
            .rsplit("Candidate answer:\n")
            .next()
            .unwrap_or("")
            .trim()
    }
}

/// A running server; requests are logged in order.
pub struct Server {
    pub url: String,
    pub log: Arc<Mutex<Vec<Request>>>,
}

impl Server {
    /// Requests received so far. refscore's start-up probe (one tiny
    /// "ping" per run) is answered with 200 by the server itself and kept
    /// out of the log.
    pub fn requests(&self) -> Vec<Request> {
        self.log.lock().unwrap().clone()
    }
}

impl Request {
    /// True for refscore's start-up probe: one user message, `ping`.
    pub fn is_probe(&self) -> bool {
        let m = &self.body["messages"];
        m.as_array().is_some_and(|a| a.len() == 1) && m[0]["content"] == "ping"
    }
}

/// Starts a server whose handler sees each request and how many requests
/// with the same candidate answer and template came before it.
pub fn start(handler: impl Fn(&Request, usize) -> Reply + Send + Sync + 'static) -> Server {
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

/// Reads one HTTP/1.1 request from a connection: its head (request line
/// and headers) and its body. `None` once the client has closed it.
pub fn read_request(reader: &mut BufReader<TcpStream>) -> Option<(String, Vec<u8>)> {
    let mut head = String::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        if line == "\r\n" {
            break;
        }
        head.push_str(&line);
    }
    let len = head
        .lines()
        .find_map(|l| {
            l.to_ascii_lowercase()
                .strip_prefix("content-length:")
                .map(|v| v.trim().parse::<usize>().unwrap())
        })
        .unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).ok()?;
    Some((head, body))
}

fn serve(
    stream: TcpStream,
    log: &Mutex<Vec<Request>>,
    handler: &(dyn Fn(&Request, usize) -> Reply + Send + Sync),
) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    loop {
        let Some((headers, body)) = read_request(&mut reader) else {
            return;
        };
        let req = Request {
            headers,
            body: serde_json::from_slice(&body).unwrap_or(Value::Null),
        };
        let seen = if req.is_probe() {
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
        let mut reply = if req.is_probe() {
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
                Reply::Status(code, extra, body) => {
                    let mut out = format!("HTTP/1.1 {code} X\r\nContent-Type: application/json\r\nContent-Length: {}\r\n", body.len());
                    for (k, v) in extra {
                        out.push_str(&format!("{k}: {v}\r\n"));
                    }
                    out.push_str("\r\n");
                    out.push_str(&body);
                    if (&stream).write_all(out.as_bytes()).is_err() {
                        return;
                    }
                    break;
                }
            }
        }
    }
}
