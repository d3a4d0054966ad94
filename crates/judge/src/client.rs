//! A blocking client for OpenAI-compatible chat completions with the
//! failure handling a nightly batch needs: retries with exponential backoff
//! and jitter on timeouts, connection errors, 429 (honouring Retry-After) and
//! 5xx; no retry on other 4xx; a fallback from JSON-schema structured output
//! to JSON mode to plain text when the server rejects the former; and
//! request/token rate limits shared by all workers.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::time::{Duration, Instant, SystemTime};

use refscore_core::Error;
use serde_json::{json, Value};
use url::Url;

use crate::limiter::{self, Limiter};
use crate::parse::{extract_object, snippet};
use crate::prompts::Template;
use crate::redact::{chat_url, key_url, redact_text_url, redact_url, scrub, secrets};

/// Where and how to reach the judge model.
#[derive(Clone)]
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

/// By hand so that the API key and any credential in the URL never reach a
/// log line or an error message through `{:?}`.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &redact_text_url(&self.url))
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("concurrency", &self.concurrency)
            .field("requests_per_minute", &self.requests_per_minute)
            .field("tokens_per_minute", &self.tokens_per_minute)
            .field("backoff", &self.backoff)
            .finish()
    }
}

/// The longest per-request timeout the client uses: longer values (up to
/// `Duration::MAX`) are cut to it, because the HTTP client fails every
/// request whose deadline does not fit in an `Instant`.
pub const MAX_TIMEOUT: Duration = Duration::from_secs(24 * 3600);

/// The shortest per-request timeout the client uses (a zero timeout is
/// refused by the socket layer).
pub const MIN_TIMEOUT: Duration = Duration::from_millis(1);

/// The longest wait a `Retry-After` header can impose; a server asking for
/// more gets the normal backoff's retries at this pace instead.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

impl Endpoint {
    /// The URL as it may be shown in messages: credentials replaced by `***`.
    pub fn display_url(&self) -> String {
        redact_text_url(&self.url)
    }

    /// Turns `--judge-timeout` seconds into a timeout without panicking:
    /// NaN, infinite, zero or negative values and values above
    /// [`MAX_TIMEOUT`] are a configuration error naming the value.
    pub fn timeout_from_secs(secs: f64) -> Result<Duration, Error> {
        match Duration::try_from_secs_f64(secs) {
            Ok(d) if d >= MIN_TIMEOUT && d <= MAX_TIMEOUT => Ok(d),
            _ => Err(Error::config(format!(
                "--judge-timeout {secs}: expected seconds between {} and {}",
                MIN_TIMEOUT.as_secs_f64(),
                MAX_TIMEOUT.as_secs()
            ))),
        }
    }
}

/// Seconds as a `Duration` for a wait computed from numbers a server or the
/// settings supplied: NaN and negatives are zero, huge values saturate at
/// `cap`. `Duration::from_secs_f64` panics on all of those.
pub(crate) fn wait_secs(secs: f64, cap: Duration) -> Duration {
    if secs.is_nan() || secs <= 0.0 {
        return Duration::ZERO;
    }
    Duration::try_from_secs_f64(secs).map_or(cap, |d| d.min(cap))
}

/// Reads a `Retry-After` header: delta-seconds (integer, or a decimal as
/// some servers send) or an HTTP date, capped at [`MAX_RETRY_AFTER`].
/// Anything else (`NaN`, garbage, a negative number) is `None`: the caller
/// uses its normal backoff.
pub(crate) fn retry_after(value: &str, now: SystemTime) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs).min(MAX_RETRY_AFTER));
    }
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| wait_secs(secs, MAX_RETRY_AFTER));
    }
    let date = httpdate::parse_http_date(v).ok()?;
    Some(
        date.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY_AFTER),
    )
}

/// What a successful call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens reported by the server.
    pub prompt_tokens: u32,
    /// Completion tokens reported by the server.
    pub completion_tokens: u32,
    /// Prompt tokens the server took from its prompt cache, where it says
    /// (llama.cpp `timings.cache_n`, OpenAI and vLLM
    /// `usage.prompt_tokens_details.cached_tokens`).
    pub cached_tokens: u32,
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
    pub cached_tokens: AtomicU64,
    /// Replies that carried token log-probabilities, and replies to a
    /// request for them that did not.
    pub with_logprobs: AtomicU64,
    pub without_logprobs: AtomicU64,
    pub busy_ms: AtomicU64,
}

/// The output format a structured request asks for, negotiated down when a
/// server rejects one: a JSON schema, then JSON mode, then plain text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
enum OutputMode {
    Schema = 0,
    Json = 1,
    Plain = 2,
    /// A request that asks for no output format at all (a one-word verdict
    /// or a free-text reason); never stored as the negotiated mode.
    None = 3,
}

impl OutputMode {
    /// The mode an atomic holds (see [`OutputMode::as_u8`]).
    fn from_u8(v: u8) -> OutputMode {
        match v {
            0 => OutputMode::Schema,
            1 => OutputMode::Json,
            2 => OutputMode::Plain,
            _ => OutputMode::None,
        }
    }

    /// For the atomic that holds the negotiated mode.
    fn as_u8(self) -> u8 {
        self as u8
    }

    /// The name stored in cache and journal keys and in the summary.
    fn name(self) -> &'static str {
        match self {
            OutputMode::Schema => "json_schema",
            OutputMode::Json => "json_object",
            OutputMode::Plain => "plain",
            OutputMode::None => "none",
        }
    }

    /// The mode to try after a server rejected this one.
    fn downgraded(self) -> OutputMode {
        match self {
            OutputMode::Schema => OutputMode::Json,
            OutputMode::Json | OutputMode::Plain => OutputMode::Plain,
            OutputMode::None => OutputMode::None,
        }
    }
}

/// Alternatives asked for per generated token (OpenAI's maximum): enough to
/// hold every spelling of a verdict or a score.
const TOP_LOGPROBS: u32 = 20;

/// The sampling temperature of every request (part of the cache key).
const TEMPERATURE: u32 = 0;

pub(crate) struct Client {
    agent: ureq::Agent,
    endpoint: Endpoint,
    /// Where requests go: the base URL with `/chat/completions` on its path.
    chat: Url,
    /// `chat` as it may be shown (credentials redacted).
    shown: String,
    /// Credentials to scrub from any message.
    secrets: Vec<String>,
    mode: AtomicU8,
    /// Cleared when the server rejects the `logprobs` parameter.
    logprobs: AtomicBool,
    limiter: Limiter,
    pub(crate) counters: Counters,
    /// Batch mode (`--judge-batch`): answers come from collected batches.
    batch: Option<std::sync::Arc<crate::batch::Answers>>,
}

/// Why a request got no usable answer after its retries.
#[derive(Debug, Clone)]
pub(crate) struct AskFailure {
    /// One line, credentials scrubbed.
    pub message: String,
    /// The endpoint failed (unreachable, timing out, 429, 5xx): another try
    /// later may succeed. False when it answered, but badly.
    pub transient: bool,
}

/// One request: a template's system message and the user message. The
/// template says whether it asks for structured output; `max_tokens` may cut
/// an answer shorter than the template allows (a verdict without its reason).
pub(crate) struct Ask<'a> {
    pub template: &'a Template,
    pub user: String,
    pub max_tokens: u32,
    /// Ask for each generated token's log-probability and its alternatives.
    pub logprobs: bool,
}

/// A reply: the message text and, where the server sent them, the
/// generated tokens with their alternatives.
#[derive(Debug, Clone, Default)]
pub(crate) struct Reply {
    pub content: String,
    pub tokens: Option<Vec<Token>>,
}

/// One generated token and the alternatives the server listed for its
/// position (the token itself included), as (text, log-probability).
#[derive(Debug, Clone, Default)]
pub(crate) struct Token {
    pub text: String,
    pub alternatives: Vec<(String, f64)>,
}

/// Reads `choices[0].logprobs.content`; `None` when the server sent no
/// usable log-probabilities.
fn tokens_of(v: &Value) -> Option<Vec<Token>> {
    let list = v.as_array()?;
    let pair = |t: &Value| -> Option<(String, f64)> {
        Some((t["token"].as_str()?.to_string(), t["logprob"].as_f64()?))
    };
    let tokens: Vec<Token> = list
        .iter()
        .filter_map(|t| {
            let (text, logprob) = pair(t)?;
            let mut alternatives: Vec<(String, f64)> = t["top_logprobs"]
                .as_array()
                .map(|a| a.iter().filter_map(pair).collect())
                .unwrap_or_default();
            if !alternatives.iter().any(|(a, _)| *a == text) {
                alternatives.push((text.clone(), logprob));
            }
            Some(Token { text, alternatives })
        })
        .collect();
    (!tokens.is_empty()).then_some(tokens)
}

/// Why one attempt at a request got no usable answer.
pub(crate) enum Failure {
    /// Worth another attempt after `wait` (or the backoff when `None`);
    /// `transient` when the endpoint itself failed (transport, timeout,
    /// 429, 5xx) rather than answering badly.
    Retry(String, Option<Duration>, bool),
    /// Not worth retrying.
    Fatal(String),
    /// The server rejected the response_format: fall back and try again.
    Downgrade,
    /// The server rejected the `logprobs` parameter: ask without it.
    NoLogprobs,
    /// Batch mode: no collected batch answers the request yet; it waits
    /// for the next batch.
    Deferred,
}

/// `text` as an http(s) base URL; the error names the (redacted) URL.
fn base_url(text: &str) -> Result<Url, String> {
    let base = Url::parse(text.trim())
        .map_err(|e| format!("'{}' is not a valid URL: {e}", redact_text_url(text)))?;
    if !matches!(base.scheme(), "http" | "https") {
        return Err(format!(
            "'{}': expected an http:// or https:// URL",
            redact_url(&base)
        ));
    }
    Ok(base)
}

/// Checks a judge URL before anything runs: `Err` says what is wrong with
/// it (the caller names where it came from).
pub fn check_url(text: &str) -> Result<(), String> {
    base_url(text).map(|_| ())
}

impl Client {
    /// A client for `endpoint`; the error names the (redacted) URL when it
    /// does not parse as an http(s) base URL.
    pub(crate) fn new(endpoint: Endpoint) -> Result<Client, Error> {
        let base = base_url(&endpoint.url).map_err(|e| Error::usage(format!("--judge-url {e}")))?;
        let chat = chat_url(&base).map_err(Error::config)?;
        let timeout = endpoint.timeout.clamp(MIN_TIMEOUT, MAX_TIMEOUT);
        let agent = ureq::AgentBuilder::new()
            .timeout(timeout)
            .max_idle_connections_per_host(endpoint.concurrency.max(1))
            .build();
        let limiter = Limiter::new(endpoint.requests_per_minute, endpoint.tokens_per_minute);
        Ok(Client {
            agent,
            shown: redact_url(&chat),
            secrets: secrets(&base, endpoint.api_key.as_deref()),
            chat,
            endpoint,
            mode: AtomicU8::new(OutputMode::Schema.as_u8()),
            logprobs: AtomicBool::new(true),
            limiter,
            counters: Counters::default(),
            batch: None,
        })
    }

    /// The chat-completions URL as it may be shown.
    pub(crate) fn shown_url(&self) -> &str {
        &self.shown
    }

    /// Everything about a request to `template` other than its texts that
    /// can change the answer: where it goes (credentials redacted), the
    /// model, the template, the token limit, the temperature and the output
    /// mode. Part of every cache and journal key.
    pub(crate) fn request_id(&self, template: &Template, mode: &str) -> String {
        crate::cache::DiskCache::key(&[
            &key_url(&self.chat),
            &self.endpoint.model,
            &template.hash(),
            &template.max_tokens.to_string(),
            &TEMPERATURE.to_string(),
            mode,
        ])
    }

    /// Starts from the output mode a previous run negotiated with this
    /// endpoint (so its cached answers are found), by name.
    pub(crate) fn start_in_mode(&self, name: &str) {
        let mode = match name {
            "json_object" => OutputMode::Json,
            "plain" => OutputMode::Plain,
            _ => OutputMode::Schema,
        };
        self.mode.fetch_max(mode.as_u8(), Ordering::Relaxed);
    }

    pub(crate) fn model(&self) -> &str {
        &self.endpoint.model
    }

    /// The negotiated output mode.
    fn negotiated(&self) -> OutputMode {
        OutputMode::from_u8(self.mode.load(Ordering::Relaxed))
    }

    /// The output mode in use: "json_schema", "json_object" or "plain".
    pub(crate) fn mode_name(&self) -> &'static str {
        self.negotiated().name()
    }

    /// Asks `template`'s question about `user` with its structured output
    /// and parses the JSON object in the reply with `parse` (see
    /// [`Client::send_ask`]).
    pub(crate) fn ask<T>(
        &self,
        template: &Template,
        user: &str,
        parse: impl Fn(&Value) -> Result<T, String>,
    ) -> Result<(T, Usage, &'static str), AskFailure> {
        let ask = Ask {
            template,
            user: user.to_string(),
            max_tokens: template.max_tokens,
            logprobs: false,
        };
        self.send_ask(&ask, |reply| {
            extract_object(&reply.content).and_then(|v| parse(&v))
        })
    }

    /// Sends `ask` and parses the reply with `parse`; retries transient
    /// failures and unparseable replies. Returns the parsed reply, what it
    /// cost and the output mode that produced it; the error says what failed
    /// last, with any credential scrubbed.
    pub(crate) fn send_ask<T>(
        &self,
        ask: &Ask,
        parse: impl Fn(&Reply) -> Result<T, String>,
    ) -> Result<(T, Usage, &'static str), AskFailure> {
        let start = Instant::now();
        let mut attempt = 0u32;
        let mut downgrades = 0;
        let mut last: String;
        let mut transient = false;
        let text_len = ask.user.len();
        loop {
            let mode = if ask.template.structured {
                self.negotiated()
            } else {
                OutputMode::None
            };
            let logprobs = ask.logprobs && self.logprobs.load(Ordering::Relaxed);
            let body = self.body(ask, mode, logprobs);
            let estimate = u32::try_from((ask.template.system.len() + text_len) / 4)
                .unwrap_or(u32::MAX)
                .saturating_add(ask.max_tokens);
            self.limiter.acquire(estimate);
            let sent = self.send(&body);
            if !matches!(sent, Err(Failure::Deferred)) {
                self.counters.calls.fetch_add(1, Ordering::Relaxed);
            }
            let outcome = sent.and_then(|(reply, usage)| {
                if logprobs {
                    let counter = if reply.tokens.is_some() {
                        &self.counters.with_logprobs
                    } else {
                        &self.counters.without_logprobs
                    };
                    counter.fetch_add(1, Ordering::Relaxed);
                }
                match parse(&reply) {
                    Ok(t) => Ok((t, usage)),
                    Err(e) => {
                        self.counters.parse_failures.fetch_add(1, Ordering::Relaxed);
                        Err(Failure::Retry(
                            format!("unparseable reply: {e}"),
                            None,
                            false,
                        ))
                    }
                }
            });
            match outcome {
                Ok((t, mut usage)) => {
                    usage.latency_ms = start.elapsed().as_millis().min(u32::MAX as u128) as u32;
                    let c = &self.counters;
                    c.prompt_tokens
                        .fetch_add(usage.prompt_tokens as u64, Ordering::Relaxed);
                    c.completion_tokens
                        .fetch_add(usage.completion_tokens as u64, Ordering::Relaxed);
                    c.cached_tokens
                        .fetch_add(usage.cached_tokens as u64, Ordering::Relaxed);
                    c.busy_ms
                        .fetch_add(usage.latency_ms as u64, Ordering::Relaxed);
                    return Ok((t, usage, mode.name()));
                }
                Err(Failure::NoLogprobs) if logprobs => {
                    self.logprobs.store(false, Ordering::Relaxed);
                    continue;
                }
                Err(Failure::Downgrade) if mode != OutputMode::None && downgrades < 2 => {
                    downgrades += 1;
                    let _ = self.mode.compare_exchange(
                        mode.as_u8(),
                        mode.downgraded().as_u8(),
                        Ordering::Relaxed,
                        Ordering::Relaxed,
                    );
                    continue;
                }
                Err(Failure::Downgrade | Failure::NoLogprobs) => {
                    last = "the server rejects every response format".into();
                    break;
                }
                Err(Failure::Fatal(e)) => {
                    last = e;
                    break;
                }
                Err(Failure::Deferred) => {
                    return Err(AskFailure {
                        message: "waiting for a judge batch".into(),
                        transient: true,
                    });
                }
                Err(Failure::Retry(e, wait, endpoint_failed)) => {
                    last = e;
                    transient = endpoint_failed;
                    if attempt >= self.endpoint.retries {
                        break;
                    }
                    attempt += 1;
                    self.counters.retries.fetch_add(1, Ordering::Relaxed);
                    let backoff =
                        self.endpoint.backoff.as_secs_f64() * 2f64.powi(attempt.min(64) as i32 - 1);
                    let jitter = limiter::jitter();
                    let delay = wait
                        .unwrap_or_else(|| wait_secs(backoff * jitter, Duration::from_secs(30)));
                    std::thread::sleep(delay);
                }
            }
        }
        self.counters
            .busy_ms
            .fetch_add(start.elapsed().as_millis() as u64, Ordering::Relaxed);
        Err(AskFailure {
            message: scrub(
                &format!(
                    "{last} (after {} attempt{})",
                    attempt + 1,
                    if attempt == 0 { "" } else { "s" }
                ),
                &self.secrets,
            ),
            transient,
        })
    }

    /// The body of the first request `send_ask` would send for `ask`, in
    /// the output mode in use now (`refscore judge-prompt`).
    pub(crate) fn first_body(&self, ask: &Ask) -> Value {
        let mode = if ask.template.structured {
            self.negotiated()
        } else {
            OutputMode::None
        };
        self.body(
            ask,
            mode,
            ask.logprobs && self.logprobs.load(Ordering::Relaxed),
        )
    }

    fn body(&self, ask: &Ask, mode: OutputMode, logprobs: bool) -> Value {
        let template = ask.template;
        let system = if mode == OutputMode::Plain {
            format!(
                "{}\nAnswer with the JSON object only, no other text.",
                template.system
            )
        } else {
            template.system.to_string()
        };
        let messages = json!([
            {"role": "system", "content": system},
            {"role": "user", "content": ask.user},
        ]);
        let mut body = json!({
            "model": self.endpoint.model,
            "temperature": TEMPERATURE,
            "max_tokens": ask.max_tokens,
            "messages": messages,
        });
        if logprobs {
            body["logprobs"] = json!(true);
            body["top_logprobs"] = json!(TOP_LOGPROBS);
        }
        match mode {
            OutputMode::Schema => {
                body["response_format"] = json!({"type": "json_schema", "json_schema": {
                    "name": template.name, "strict": true, "schema": template.schema()}});
            }
            OutputMode::Json => body["response_format"] = json!({"type": "json_object"}),
            OutputMode::Plain | OutputMode::None => {}
        }
        body
    }

    fn post(&self, body: &Value) -> Result<ureq::Response, Box<ureq::Error>> {
        let mut req = self
            .agent
            .request_url("POST", &self.chat)
            .set("Content-Type", "application/json");
        if let Some(key) = &self.endpoint.api_key {
            req = req.set("Authorization", &format!("Bearer {key}"));
        }
        req.send_string(&body.to_string()).map_err(Box::new)
    }

    /// A transport failure as one line naming the redacted URL (ureq's own
    /// message starts with the URL as given, credentials and all).
    fn transport_message(&self, t: &ureq::Transport) -> String {
        let mut msg = format!("request to {} failed: {}", self.shown, t.kind());
        if let Some(m) = t.message() {
            msg.push_str(": ");
            msg.push_str(m);
        }
        if let Some(source) = std::error::Error::source(t) {
            msg.push_str(&format!(": {source}"));
        }
        scrub(&msg, &self.secrets)
    }

    /// One attempt at a request: over HTTP, or, in batch mode, the answer
    /// a collected judge batch holds for it (a request it lacks is put
    /// aside for the next batch).
    fn send(&self, body: &Value) -> Result<(Reply, Usage), Failure> {
        if let Some(answers) = &self.batch {
            return answers.answer(&self.batch_id(body), body);
        }
        match self.post(body).map_err(|e| *e) {
            Ok(resp) => {
                let text = resp.into_string().map_err(|e| {
                    Failure::Retry(format!("reading the reply failed: {e}"), None, true)
                })?;
                read_completion(&text)
            }
            Err(ureq::Error::Status(code, resp)) => {
                let wait = resp
                    .header("Retry-After")
                    .and_then(|h| retry_after(h, SystemTime::now()));
                let text = resp.into_string().unwrap_or_default();
                Err(status_failure(code, wait, &text, body))
            }
            Err(ureq::Error::Transport(t)) => {
                Err(Failure::Retry(self.transport_message(&t), None, true))
            }
        }
    }

    /// The `custom_id` of a request in a judge batch: a hash of where it goes
    /// (credentials left out) and its whole body, so an answer finds its
    /// request in any order and a request already answered is never sent
    /// again.
    pub(crate) fn batch_id(&self, body: &Value) -> String {
        crate::cache::DiskCache::key(&[&key_url(&self.chat), &body.to_string()])
    }

    /// Sends requests to a judge batch instead of the endpoint: answers come
    /// from `answers`, and a request it lacks is set aside there. Nothing is
    /// paced (looking up an answer is no call) and nothing is retried (a
    /// batch's answer is the same every time it is read).
    pub(crate) fn use_batch(&mut self, answers: std::sync::Arc<crate::batch::Answers>) {
        self.batch = Some(answers);
        self.limiter = Limiter::new(None, None);
        self.endpoint.retries = 0;
    }
}

/// Reads a chat completion's text (see [`completion_of`]).
fn read_completion(text: &str) -> Result<(Reply, Usage), Failure> {
    let v: Value = serde_json::from_str(text).map_err(|_| {
        Failure::Retry(format!("reply is not JSON: {}", snippet(text)), None, false)
    })?;
    completion_of(&v)
}

/// Reads a chat completion: the message, its tokens' probabilities where
/// sent, and the usage. Online replies and batch result lines go through
/// this one reader.
pub(crate) fn completion_of(v: &Value) -> Result<(Reply, Usage), Failure> {
    let content = v
        .pointer("/choices/0/message/content")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            Failure::Retry(
                format!("reply has no message content: {}", snippet(&v.to_string())),
                None,
                false,
            )
        })?;
    let number = |path: &str| {
        v.pointer(path)
            .and_then(Value::as_u64)
            .map(|t| u32::try_from(t).unwrap_or(u32::MAX))
    };
    let cached = number("/usage/prompt_tokens_details/cached_tokens")
        .or_else(|| number("/timings/cache_n"))
        .unwrap_or(0);
    Ok((
        Reply {
            content: content.to_string(),
            tokens: v.pointer("/choices/0/logprobs/content").and_then(tokens_of),
        },
        Usage {
            prompt_tokens: number("/usage/prompt_tokens").unwrap_or(0),
            completion_tokens: number("/usage/completion_tokens").unwrap_or(0),
            cached_tokens: cached,
            latency_ms: 0,
        },
    ))
}

/// What an HTTP error status on a request means for it: a retry (429, 5xx,
/// after `wait` where the server said), a fallback of the output format or
/// of token probabilities, or a failure not worth retrying. Online replies
/// and batch error lines go through this one reading.
pub(crate) fn status_failure(
    code: u16,
    wait: Option<Duration>,
    text: &str,
    body: &Value,
) -> Failure {
    let lower = text.to_ascii_lowercase();
    let about_format = ["response_format", "json_schema", "schema", "grammar"]
        .iter()
        .any(|w| lower.contains(w));
    if matches!(code, 400 | 422 | 501)
        && lower.contains("logprobs")
        && body.get("logprobs").is_some()
    {
        return Failure::NoLogprobs;
    }
    if matches!(code, 400 | 422 | 501) && about_format && body.get("response_format").is_some() {
        return Failure::Downgrade;
    }
    let msg = format!("HTTP {code}: {}", snippet(text));
    if code == 429 || code >= 500 {
        Failure::Retry(msg, wait, true)
    } else {
        Failure::Fatal(msg)
    }
}

/// Checks, with one minimal request (`max_tokens` 1, a trivial message),
/// that the judge endpoint answers before any row is scored, so that a
/// wrong URL, key or model stops the run at once instead of failing every
/// row. Connection failures, timeouts and 5xx are [`Error::temporary`]
/// (worth retrying later); 401/403 and an unknown model are
/// [`Error::config`]. Every message names the redacted URL.
pub fn probe(endpoint: &Endpoint) -> Result<(), Error> {
    let client = Client::new(endpoint.clone())?;
    let body = json!({
        "model": endpoint.model,
        "max_tokens": 1,
        "temperature": TEMPERATURE,
        "messages": [{"role": "user", "content": "ping"}],
    });
    let url = client.shown_url();
    match client.post(&body).map_err(|e| *e) {
        Ok(resp) => {
            // Drain the reply so a keep-alive connection is left clean.
            let _ = resp.into_string();
            Ok(())
        }
        Err(ureq::Error::Status(code, resp)) => {
            let text = resp.into_string().unwrap_or_default();
            let detail = scrub(&snippet(&text), &client.secrets);
            let model = &endpoint.model;
            let mentions_model = text.to_ascii_lowercase().contains("model");
            match code {
                401 | 403 => Err(Error::config(format!(
                    "the judge refused authentication at {url} (HTTP {code}): check the API key \
                     variable (--judge-api-key-env): {detail}"
                ))),
                404 => Err(Error::config(format!(
                    "model '{model}' unknown at {url}, or no chat-completions endpoint there \
                     (HTTP 404): {detail}"
                ))),
                400 | 422 if mentions_model => Err(Error::config(format!(
                    "model '{model}' unknown at {url} (HTTP {code}): {detail}"
                ))),
                500..=599 => Err(Error::temporary(format!(
                    "the judge at {url} is failing (HTTP {code}): {detail}"
                ))),
                // Reachable and authenticated; a rate limit or a quibble
                // about the probe itself is for the real requests to handle.
                _ => Ok(()),
            }
        }
        Err(ureq::Error::Transport(t)) => Err(Error::temporary(format!(
            "the judge is unreachable: {}",
            client.transport_message(&t)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Meaning Match's template.
    fn meaning_match() -> &'static Template {
        crate::metric::builtin()[0].template().expect("a rubric")
    }
    use crate::test_server::{chat, refused_url, start, Reply};
    use refscore_core::ErrorClass;

    fn endpoint(url: &str) -> Endpoint {
        Endpoint {
            url: url.into(),
            model: "m".into(),
            api_key: None,
            timeout: Duration::from_secs(5),
            retries: 2,
            concurrency: 1,
            requests_per_minute: None,
            tokens_per_minute: None,
            backoff: Duration::from_millis(5),
        }
    }

    const VERDICT: &str = r#"{"meaning_match": true, "reason": "same"}"#;

    fn ask(client: &Client) -> Result<(Value, Usage, &'static str), String> {
        client
            .ask(meaning_match(), "Q", |v| Ok(v.clone()))
            .map_err(|e| e.message)
    }

    #[test]
    fn retry_after_is_parsed_defensively() {
        let now = SystemTime::now();
        let p = |v: &str| retry_after(v, now);
        assert_eq!(p("5"), Some(Duration::from_secs(5)));
        assert_eq!(p(" 1.5 "), Some(Duration::from_millis(1500)));
        assert_eq!(p("0"), Some(Duration::ZERO));
        assert_eq!(
            p("99999999999999999999"),
            Some(MAX_RETRY_AFTER),
            "past u64: capped"
        );
        assert_eq!(p("86400"), Some(MAX_RETRY_AFTER), "capped");
        assert_eq!(p("1e300"), Some(MAX_RETRY_AFTER), "capped, no panic");
        for garbage in ["NaN", "nan", "inf", "-inf", "-3", "", "soon", "1e400"] {
            assert_eq!(p(garbage), None, "{garbage:?} falls back to the backoff");
        }
        let later = httpdate::fmt_http_date(now + Duration::from_secs(30));
        let got = p(&later).unwrap();
        assert!(
            got <= Duration::from_secs(30) && got >= Duration::from_secs(28),
            "{got:?}"
        );
        let past = httpdate::fmt_http_date(now - Duration::from_secs(3600));
        assert_eq!(p(&past), Some(Duration::ZERO));
        let far = httpdate::fmt_http_date(now + Duration::from_secs(100_000));
        assert_eq!(p(&far), Some(MAX_RETRY_AFTER));
        assert_eq!(wait_secs(f64::NAN, MAX_RETRY_AFTER), Duration::ZERO);
        assert_eq!(wait_secs(f64::INFINITY, MAX_RETRY_AFTER), MAX_RETRY_AFTER);
        assert_eq!(wait_secs(-1.0, MAX_RETRY_AFTER), Duration::ZERO);
    }

    #[test]
    fn a_429_with_a_nan_retry_after_is_retried_not_a_panic() {
        let server = start(|_, seen| match seen {
            0 => Reply::Status(429, vec![("Retry-After", "NaN".into())], "slow down".into()),
            1 => Reply::Status(503, vec![("Retry-After", "-inf".into())], "busy".into()),
            _ => chat(VERDICT),
        });
        let client = Client::new(endpoint(&server.url)).unwrap();
        let (v, usage, mode) = ask(&client).unwrap();
        assert_eq!(v["meaning_match"], true);
        assert_eq!((usage.prompt_tokens, mode), (50, "json_schema"));
        assert_eq!(server.requests().len(), 3);
        assert_eq!(client.counters.retries.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn any_timeout_value_is_usable_without_a_panic() {
        let server = start(|_, _| chat(VERDICT));
        for timeout in [
            Duration::MAX,
            Duration::ZERO,
            Duration::from_secs(u64::MAX / 2),
        ] {
            let client = Client::new(Endpoint {
                timeout,
                ..endpoint(&server.url)
            })
            .unwrap();
            if timeout == Duration::ZERO {
                continue; // 1 ms against a local server: may time out; must not panic
            }
            assert!(ask(&client).is_ok(), "timeout {timeout:?}");
        }
        for bad in [1e20, f64::NAN, f64::INFINITY, -1.0, 0.0, 1e6] {
            let e = Endpoint::timeout_from_secs(bad).unwrap_err();
            assert_eq!(e.class, ErrorClass::Config);
            assert!(e.message.contains("--judge-timeout"), "{}", e.message);
        }
        assert_eq!(
            Endpoint::timeout_from_secs(2.5).unwrap(),
            Duration::from_millis(2500)
        );
    }

    #[test]
    fn the_path_goes_before_the_base_query_and_credentials_stay_hidden() {
        let server = start(|_, seen| match seen {
            0 => chat(VERDICT),
            // A server echoing what it got, credentials included.
            _ => Reply::Status(
                400,
                vec![],
                "bad request from user s3cretpw with key k3yk3y-1 and sk-live-999".into(),
            ),
        });
        let base = server.url.replace("http://", "http://bob:s3cretpw@");
        let url = format!("{base}?api-version=2024-01&api-key=k3yk3y-1");
        let ep = Endpoint {
            api_key: Some("sk-live-999".into()),
            retries: 0,
            ..endpoint(&url)
        };
        let debug = format!("{ep:?}");
        for secret in ["s3cretpw", "k3yk3y-1", "sk-live-999"] {
            assert!(!debug.contains(secret), "{secret} in {debug}");
        }
        assert!(debug.contains("***@127.0.0.1") && debug.contains("api_key: Some(\"***\")"));
        let client = Client::new(ep.clone()).unwrap();
        ask(&client).unwrap();
        let got = &server.requests()[0];
        assert_eq!(
            got.target,
            "/v1/chat/completions?api-version=2024-01&api-key=k3yk3y-1"
        );
        assert!(got.headers.contains("Bearer sk-live-999"));
        let err = ask(&client).unwrap_err();
        assert!(err.starts_with("HTTP 400"), "{err}");
        for secret in ["s3cretpw", "k3yk3y-1", "sk-live-999"] {
            assert!(!err.contains(secret), "{secret} in {err}");
        }
        // Transport errors name the URL: redacted.
        let dead = refused_url().replace("http://", "http://bob:s3cretpw@") + "?api-key=k3yk3y-1";
        let client = Client::new(Endpoint {
            api_key: Some("sk-live-999".into()),
            retries: 0,
            ..endpoint(&dead)
        })
        .unwrap();
        let err = ask(&client).unwrap_err();
        assert!(err.contains("***@127.0.0.1"), "{err}");
        assert!(err.contains("api-key=***"), "{err}");
        for secret in ["s3cretpw", "k3yk3y-1", "sk-live-999"] {
            assert!(!err.contains(secret), "{secret} in {err}");
        }
        let bad = Client::new(endpoint("not a url with pw@host"))
            .err()
            .unwrap();
        // A malformed URL is a usage error (64), like any bad flag value.
        assert_eq!(bad.class, ErrorClass::Usage);
        assert!(!bad.message.contains("pw@"), "{}", bad.message);
    }

    #[test]
    fn request_ids_differ_by_everything_that_changes_an_answer() {
        let id = |url: &str, model: &str, mode: &str| {
            let client = Client::new(Endpoint {
                model: model.into(),
                ..endpoint(url)
            })
            .unwrap();
            client.request_id(meaning_match(), mode)
        };
        let a = id("http://a:1/v1", "m", "json_schema");
        assert_ne!(a, id("http://b:1/v1", "m", "json_schema"), "URL");
        assert_ne!(a, id("http://a:1/v1", "n", "json_schema"), "model");
        assert_ne!(a, id("http://a:1/v1", "m", "plain"), "output mode");
        assert_eq!(
            a,
            id("http://user:pw@a:1/v1/", "m", "json_schema"),
            "credentials are not part of the key"
        );
        let client = Client::new(endpoint("http://a:1/v1")).unwrap();
        assert_ne!(
            client.request_id(meaning_match(), "json_schema"),
            client.request_id(
                &Template {
                    max_tokens: 1,
                    ..meaning_match().clone()
                },
                "json_schema"
            ),
            "max_tokens"
        );
    }

    fn probe_with(reply: impl Fn() -> Reply + Send + Sync + 'static) -> Result<(), Error> {
        let server = start(move |_, _| reply());
        probe(&Endpoint {
            api_key: Some("sk-live-999".into()),
            ..endpoint(&format!("{}?api-key=k3yk3y-1", server.url))
        })
    }

    #[test]
    fn the_probe_classifies_what_the_endpoint_answers() {
        assert!(probe_with(|| chat("p")).is_ok());
        assert!(probe_with(|| Reply::Status(429, vec![], "later".into())).is_ok());
        let e = probe_with(|| Reply::Status(503, vec![], "overloaded".into())).unwrap_err();
        assert_eq!(e.class, ErrorClass::Temporary);
        assert!(e.message.contains("HTTP 503"), "{}", e.message);
        for code in [401, 403] {
            let e = probe_with(move || Reply::Status(code, vec![], "no key k3yk3y-1".into()))
                .unwrap_err();
            assert_eq!(e.class, ErrorClass::Config);
            assert!(
                e.message.contains("refused authentication"),
                "{}",
                e.message
            );
            assert!(e.message.contains("api-key=***"), "{}", e.message);
            assert!(!e.message.contains("k3yk3y-1"), "{}", e.message);
        }
        let e = probe_with(|| Reply::Status(404, vec![], "not found".into())).unwrap_err();
        assert_eq!(e.class, ErrorClass::Config);
        assert!(
            e.message.contains("model 'm' unknown at http://127.0.0.1:"),
            "{}",
            e.message
        );
        let e = probe_with(|| {
            Reply::Status(
                400,
                vec![],
                r#"{"error": "The model `m` does not exist"}"#.into(),
            )
        })
        .unwrap_err();
        assert_eq!(e.class, ErrorClass::Config);
        assert!(e.message.contains("model 'm' unknown"), "{}", e.message);
        assert!(probe_with(|| Reply::Status(400, vec![], "max_tokens too small".into())).is_ok());
    }

    #[test]
    fn the_probe_reports_unreachable_endpoints_as_temporary() {
        let dead = refused_url().replace("http://", "http://bob:s3cretpw@");
        let e = probe(&endpoint(&dead)).unwrap_err();
        assert_eq!(e.class, ErrorClass::Temporary);
        assert!(
            e.message.contains("unreachable") && e.message.contains("http://***@127.0.0.1:"),
            "{}",
            e.message
        );
        assert!(!e.message.contains("s3cretpw"));
        assert!(!e.message.contains('\n'));
        let e = probe(&endpoint("http://no-such-host.invalid/v1")).unwrap_err();
        assert_eq!(e.class, ErrorClass::Temporary);
        let server = start(|_, _| Reply::Stall);
        let e = probe(&Endpoint {
            timeout: Duration::from_millis(200),
            ..endpoint(&server.url)
        })
        .unwrap_err();
        assert_eq!(e.class, ErrorClass::Temporary, "{}", e.message);
        // One request, no retries.
        assert_eq!(server.requests().len(), 1);
    }
}
