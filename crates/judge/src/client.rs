//! A blocking client for OpenAI-compatible chat completions with the
//! failure handling a nightly batch needs: retries with exponential backoff
//! and jitter on timeouts, connection errors, 429 (honouring Retry-After) and
//! 5xx; no retry on other 4xx; a fallback from JSON-schema structured output
//! to JSON mode to plain text when the server rejects the former; and
//! request/token rate limits shared by all workers.

use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::parse::{extract_object, snippet};
use crate::prompts::Template;

/// Where and how to reach the judge model.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Base URL, e.g. `http://127.0.0.1:8080/v1`; `/chat/completions` is appended.
    pub url: String,
    /// Model name sent in each request.
    pub model: String,
    /// Bearer token (from the environment; never printed or written).
    pub api_key: Option<String>,
    /// Per-request timeout.
    pub timeout: Duration,
    /// Retries after the first attempt.
    pub retries: u32,
    /// Requests in flight at once.
    pub concurrency: usize,
    /// Requests per minute, if limited.
    pub requests_per_minute: Option<u32>,
    /// Prompt + completion tokens per minute, if limited (estimated before a
    /// request as characters/4 plus max_tokens).
    pub tokens_per_minute: Option<u32>,
    /// First backoff delay; doubles per retry (with ±50% jitter), capped at 30 s.
    pub backoff: Duration,
}

/// What a successful call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens reported by the server.
    pub prompt_tokens: u32,
    /// Completion tokens reported by the server.
    pub completion_tokens: u32,
    /// Wall time of the call, retries included.
    pub latency_ms: u32,
}

/// Counters over the run.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub calls: AtomicU64,
    pub retries: AtomicU64,
    pub parse_failures: AtomicU64,
    pub prompt_tokens: AtomicU64,
    pub completion_tokens: AtomicU64,
    pub busy_ms: AtomicU64,
}

const MODE_SCHEMA: u8 = 0;
const MODE_JSON: u8 = 1;
const MODE_PLAIN: u8 = 2;

pub(crate) struct Client {
    agent: ureq::Agent,
    endpoint: Endpoint,
    mode: AtomicU8,
    limiter: Limiter,
    pub(crate) counters: Counters,
}

enum Failure {
    /// Worth another attempt after `wait` (or the backoff when `None`).
    Retry(String, Option<Duration>),
    /// Not worth retrying.
    Fatal(String),
    /// The server rejected the response_format: fall back and try again.
    Downgrade,
}

impl Client {
    pub(crate) fn new(endpoint: Endpoint) -> Client {
        let agent = ureq::AgentBuilder::new()
            .timeout(endpoint.timeout)
            .max_idle_connections_per_host(endpoint.concurrency.max(1))
            .build();
        let limiter = Limiter::new(endpoint.requests_per_minute, endpoint.tokens_per_minute);
        Client {
            agent,
            endpoint,
            mode: AtomicU8::new(MODE_SCHEMA),
            limiter,
            counters: Counters::default(),
        }
    }

    pub(crate) fn model(&self) -> &str {
        &self.endpoint.model
    }

    /// The output mode in use: "json_schema", "json_object" or "plain".
    pub(crate) fn mode_name(&self) -> &'static str {
        match self.mode.load(Ordering::Relaxed) {
            MODE_SCHEMA => "json_schema",
            MODE_JSON => "json_object",
            _ => "plain",
        }
    }

    /// Asks the judge and parses the reply with `parse`; retries transient
    /// failures and unparseable replies. The error says what failed last.
    pub(crate) fn ask<T>(
        &self,
        template: &Template,
        user: &str,
        parse: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<(T, Usage), String> {
        let start = Instant::now();
        let mut attempt = 0u32;
        let mut downgrades = 0;
        let mut last: String;
        let mut rng = seed();
        loop {
            let mode = self.mode.load(Ordering::Relaxed);
            let body = self.body(template, user, mode);
            let estimate = (template.system.len() + user.len()) as u32 / 4 + template.max_tokens;
            self.limiter.acquire(estimate);
            self.counters.calls.fetch_add(1, Ordering::Relaxed);
            let outcome = self.send(&body).and_then(|(content, usage)| {
                let parsed = extract_object(&content).and_then(|v| parse(&v));
                match parsed {
                    Ok(t) => Ok((t, usage)),
                    Err(e) => {
                        self.counters.parse_failures.fetch_add(1, Ordering::Relaxed);
                        Err(Failure::Retry(format!("unparseable reply: {e}"), None))
                    }
                }
            });
            match outcome {
                Ok((t, mut usage)) => {
                    usage.latency_ms = start.elapsed().as_millis().min(u32::MAX as u128) as u32;
                    self.counters
                        .prompt_tokens
                        .fetch_add(usage.prompt_tokens as u64, Ordering::Relaxed);
                    self.counters
                        .completion_tokens
                        .fetch_add(usage.completion_tokens as u64, Ordering::Relaxed);
                    self.counters
                        .busy_ms
                        .fetch_add(usage.latency_ms as u64, Ordering::Relaxed);
                    return Ok((t, usage));
                }
                Err(Failure::Downgrade) if downgrades < 2 => {
                    downgrades += 1;
                    let _ = self.mode.compare_exchange(
                        mode,
                        (mode + 1).min(MODE_PLAIN),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    continue;
                }
                Err(Failure::Downgrade) => {
                    last = "the server rejects every response format".into();
                    break;
                }
                Err(Failure::Fatal(e)) => {
                    last = e;
                    break;
                }
                Err(Failure::Retry(e, wait)) => {
                    last = e;
                    if attempt >= self.endpoint.retries {
                        break;
                    }
                    attempt += 1;
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    let backoff =
                        self.endpoint.backoff.as_secs_f64() * 2f64.powi(attempt as i32 - 1);
                    let jitter = 0.5 + next_unit(&mut rng);
                    let delay = wait
                        .unwrap_or_else(|| Duration::from_secs_f64((backoff * jitter).min(30.0)));
                    std::thread::sleep(delay);
                }
            }
        }
        self.counters
            .busy_ms
            .fetch_add(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        Err(format!(
            "{last} (after {} attempt{})",
            attempt + 1,
            if attempt == 0 { "" } else { "s" }
        ))
    }

    fn body(&self, template: &Template, user: &str, mode: u8) -> Value {
        let system = if mode == MODE_PLAIN {
            format!(
                "{}\nAnswer with the JSON object only, no other text.",
                template.system
            )
        } else {
            template.system.to_string()
        };
        let mut body = json!({
            "model": self.endpoint.model,
            "temperature": 0,
            "max_tokens": template.max_tokens,
            "messages": [{"role": "system", "content": system}, {"role": "user", "content": user}],
        });
        match mode {
            MODE_SCHEMA => {
                body["response_format"] = json!({"type": "json_schema", "json_schema": {
                    "name": template.name, "strict": true, "schema": (template.schema)()}});
            }
            MODE_JSON => body["response_format"] = json!({"type": "json_object"}),
            _ => {}
        }
        body
    }

    fn send(&self, body: &Value) -> Result<(String, Usage), Failure> {
        let url = format!(
            "{}/chat/completions",
            self.endpoint.url.trim_end_matches('/')
        );
        let mut req = self
            .agent
            .post(&url)
            .set("Content-Type", "application/json");
        if let Some(key) = &self.endpoint.api_key {
            req = req.set("Authorization", &format!("Bearer {key}"));
        }
        match req.send_string(&body.to_string()) {
            Ok(resp) => {
                let text = resp
                    .into_string()
                    .map_err(|e| Failure::Retry(format!("reading the reply failed: {e}"), None))?;
                let v: Value = serde_json::from_str(&text).map_err(|_| {
                    Failure::Retry(format!("reply is not JSON: {}", snippet(&text)), None)
                })?;
                let content = v
                    .pointer("/choices/0/message/content")
                    .and_then(Value::as_str)
                    .ok_or_else(|| {
                        Failure::Retry(
                            format!("reply has no message content: {}", snippet(&text)),
                            None,
                        )
                    })?;
                let tokens = |k: &str| {
                    v.pointer(&format!("/usage/{k}"))
                        .and_then(Value::as_u64)
                        .unwrap_or(0) as u32
                };
                Ok((
                    content.to_string(),
                    Usage {
                        prompt_tokens: tokens("prompt_tokens"),
                        completion_tokens: tokens("completion_tokens"),
                        latency_ms: 0,
                    },
                ))
            }
            Err(ureq::Error::Status(code, resp)) => {
                let retry_after = resp
                    .header("Retry-After")
                    .and_then(|h| h.trim().parse::<f64>().ok());
                let text = resp.into_string().unwrap_or_default();
                let lower = text.to_ascii_lowercase();
                let about_format = ["response_format", "json_schema", "schema", "grammar"]
                    .iter()
                    .any(|w| lower.contains(w));
                if matches!(code, 400 | 422 | 501)
                    && about_format
                    && body.get("response_format").is_some()
                {
                    return Err(Failure::Downgrade);
                }
                let msg = format!("HTTP {code}: {}", snippet(&text));
                if code == 429 || code >= 500 {
                    Err(Failure::Retry(
                        msg,
                        retry_after.map(|s| Duration::from_secs_f64(s.clamp(0.0, 120.0))),
                    ))
                } else {
                    Err(Failure::Fatal(msg))
                }
            }
            Err(ureq::Error::Transport(t)) => {
                Err(Failure::Retry(format!("request failed: {t}"), None))
            }
        }
    }
}

/// Token buckets for requests and tokens per minute, shared by all workers.
struct Limiter {
    rpm: Option<f64>,
    tpm: Option<f64>,
    state: Mutex<(Instant, f64, f64)>,
}

impl Limiter {
    fn new(rpm: Option<u32>, tpm: Option<u32>) -> Limiter {
        let (r, t) = (rpm.map(|v| v as f64), tpm.map(|v| v as f64));
        Limiter {
            rpm: r,
            tpm: t,
            state: Mutex::new((Instant::now(), r.unwrap_or(0.0), t.unwrap_or(0.0))),
        }
    }

    fn acquire(&self, tokens: u32) {
        if self.rpm.is_none() && self.tpm.is_none() {
            return;
        }
        loop {
            let wait = {
                let mut s = self.state.lock().expect("limiter lock");
                let now = Instant::now();
                let minutes = now.duration_since(s.0).as_secs_f64() / 60.0;
                s.0 = now;
                if let Some(r) = self.rpm {
                    s.1 = (s.1 + r * minutes).min(r);
                }
                if let Some(t) = self.tpm {
                    s.2 = (s.2 + t * minutes).min(t);
                }
                let need_t = (tokens as f64).min(self.tpm.unwrap_or(f64::MAX));
                let r_ok = self.rpm.is_none_or(|_| s.1 >= 1.0);
                let t_ok = self.tpm.is_none_or(|_| s.2 >= need_t);
                if r_ok && t_ok {
                    if self.rpm.is_some() {
                        s.1 -= 1.0;
                    }
                    if self.tpm.is_some() {
                        s.2 -= need_t;
                    }
                    return;
                }
                let r_wait = self.rpm.map_or(0.0, |r| ((1.0 - s.1) / r * 60.0).max(0.0));
                let t_wait = self
                    .tpm
                    .map_or(0.0, |t| ((need_t - s.2) / t * 60.0).max(0.0));
                r_wait.max(t_wait).max(0.001)
            };
            std::thread::sleep(Duration::from_secs_f64(wait.min(60.0)));
        }
    }
}

fn seed() -> u64 {
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(1);
    let addr = &t as *const u64 as u64;
    (t ^ addr.rotate_left(32)) | 1
}

fn next_unit(state: &mut u64) -> f64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    (*state >> 11) as f64 / (1u64 << 53) as f64
}
