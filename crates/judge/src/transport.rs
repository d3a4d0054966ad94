//! How a request reaches the judge: sent now over HTTP ([`Http`]), or
//! answered from collected judge batches (`batch::BatchTransport`). The
//! client paces and retries through either; what a request and its reply
//! look like on the wire is the protocol's (`protocol/`).

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde_json::Value;
use url::Url;

use crate::protocol::mode::RequestMode;
use crate::protocol::ChatProtocol;
use crate::redact::{excerpt, redact_url, scrub};

/// What a successful call cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// Prompt tokens reported by the server.
    pub prompt_tokens: u32,
    /// Completion tokens reported by the server.
    pub completion_tokens: u32,
    /// Prompt tokens the server took from its prompt cache, where it says
    /// (llama.cpp `timings.cache_n`, OpenAI and vLLM
    /// `usage.prompt_tokens_details.cached_tokens`, Anthropic
    /// `usage.cache_read_input_tokens`).
    pub cached_tokens: u32,
    /// Wall time of the call, retries included.
    pub latency_ms: u32,
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

/// Why one attempt at a request got no usable answer.
pub(crate) enum Failure {
    /// Worth another attempt after `wait` (or the backoff when `None`);
    /// `transient` when the endpoint itself failed (transport, timeout,
    /// 429, 5xx) rather than answering badly.
    Retry(String, Option<Duration>, bool),
    /// Not worth retrying.
    Fatal(String),
    /// The server rejected the structured-output request: fall back and
    /// try again.
    Downgrade,
    /// The server rejected the token-probability request: ask without it.
    NoLogprobs,
    /// Batch mode: no collected batch answers the request yet; it waits
    /// for the next batch.
    Deferred,
    /// The judge mode refused the request for want of capacity (flex's 429
    /// "resource unavailable"): retried after `wait` (or the backoff) as a
    /// [`Failure::Retry`] of the endpoint, and counted.
    Refused(String, Option<Duration>),
}

/// One way of getting a request answered.
pub(crate) trait Transport: Send + Sync {
    /// One attempt at the request whose body is `body`.
    fn send(&self, body: &Value) -> Result<(Reply, Usage), Failure>;
    /// Whether the client paces requests (`--judge-rpm`, `--judge-tpm`) and
    /// retries them through this transport: an HTTP call yes; an answer
    /// looked up in a collected batch is no call, and reads the same every
    /// time.
    fn paced(&self) -> bool;
}

/// The longest wait a `Retry-After` header can impose; a server asking for
/// more gets the normal backoff's retries at this pace instead.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(120);

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

/// Requests sent now, over HTTP, to the protocol's endpoint.
pub(crate) struct Http {
    agent: ureq::Agent,
    protocol: Arc<dyn ChatProtocol>,
    /// Where requests go.
    url: Url,
    /// `url` as it may be shown (credentials redacted).
    shown: String,
    /// The protocol's headers (the key among them).
    headers: Vec<(&'static str, String)>,
    /// Credentials to scrub from any message.
    secrets: Vec<String>,
    /// The judge mode, whose refusals are told apart from other failures.
    mode: Option<Arc<dyn RequestMode>>,
}

impl Http {
    /// Requests to `url` in `protocol`'s format, with `headers`, each
    /// bounded by `timeout`, at most `connections` kept open; `mode`'s
    /// refusals are [`Failure::Refused`].
    pub(crate) fn new(
        protocol: Arc<dyn ChatProtocol>,
        url: Url,
        headers: Vec<(&'static str, String)>,
        secrets: Vec<String>,
        timeout: Duration,
        connections: usize,
        mode: Option<Arc<dyn RequestMode>>,
    ) -> Http {
        let agent = ureq::AgentBuilder::new()
            .timeout(timeout)
            .max_idle_connections_per_host(connections.max(1))
            .build();
        Http {
            agent,
            protocol,
            shown: redact_url(&url),
            url,
            headers,
            secrets,
            mode,
        }
    }

    /// The URL as it may be shown.
    pub(crate) fn shown_url(&self) -> &str {
        &self.shown
    }

    /// Posts a body; the raw outcome.
    pub(crate) fn post(&self, body: &Value) -> Result<ureq::Response, Box<ureq::Error>> {
        let mut req = self
            .agent
            .request_url("POST", &self.url)
            .set("Content-Type", "application/json");
        for (name, value) in &self.headers {
            req = req.set(name, value);
        }
        req.send_string(&body.to_string()).map_err(Box::new)
    }

    /// A transport failure as one line naming the redacted URL (ureq's own
    /// message starts with the URL as given, credentials and all).
    pub(crate) fn transport_message(&self, t: &ureq::Transport) -> String {
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
}

impl Transport for Http {
    fn send(&self, body: &Value) -> Result<(Reply, Usage), Failure> {
        match self.post(body).map_err(|e| *e) {
            Ok(resp) => {
                let text = resp.into_string().map_err(|e| {
                    Failure::Retry(format!("reading the reply failed: {e}"), None, true)
                })?;
                let v: Value = serde_json::from_str(&text).map_err(|_| {
                    Failure::Retry(
                        format!("reply is not JSON: {}", excerpt(&text, &self.secrets)),
                        None,
                        false,
                    )
                })?;
                self.protocol.read(&v)
            }
            Err(ureq::Error::Status(code, resp)) => {
                let wait = resp
                    .header("Retry-After")
                    .and_then(|h| retry_after(h, SystemTime::now()));
                // Credentials out of the whole body before any part of it
                // is cut into a message.
                let text = scrub(&resp.into_string().unwrap_or_default(), &self.secrets);
                if self.mode.as_ref().is_some_and(|m| m.refuses(code, &text)) {
                    let msg = format!("HTTP {code}: {}", crate::parse::snippet(&text));
                    return Err(Failure::Refused(msg, wait));
                }
                Err(self.protocol.classify(code, wait, &text, body))
            }
            Err(ureq::Error::Transport(t)) => {
                Err(Failure::Retry(self.transport_message(&t), None, true))
            }
        }
    }

    fn paced(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
