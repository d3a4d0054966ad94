//! Where and how to reach a judge: its base URL, model, key, the wire
//! protocol it speaks, and the limits of the calls made to it.

use std::time::Duration;

use refscore_core::Error;
use url::Url;

use crate::protocol::{Api, Mode};
use crate::redact::{redact_text_url, redact_url};

/// Where and how to reach the judge model.
#[derive(Clone)]
pub struct Endpoint {
    /// Base URL, e.g. `http://127.0.0.1:8080/v1`; the protocol's path
    /// (`/chat/completions`, `/messages`) is appended.
    pub url: String,
    /// The protocol it speaks.
    pub api: Api,
    /// Model name sent in each request.
    pub model: String,
    /// API key (from the environment; never printed or written).
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
    /// The judge mode its requests go in (`--judge-service-tier flex`), if
    /// any.
    pub mode: Option<Mode>,
}

/// By hand so that the API key and any credential in the URL never reach a
/// log line or an error message through `{:?}`.
impl std::fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Endpoint")
            .field("url", &redact_text_url(&self.url))
            .field("api", &self.api)
            .field("model", &self.model)
            .field("api_key", &self.api_key.as_ref().map(|_| "***"))
            .field("timeout", &self.timeout)
            .field("retries", &self.retries)
            .field("concurrency", &self.concurrency)
            .field("requests_per_minute", &self.requests_per_minute)
            .field("tokens_per_minute", &self.tokens_per_minute)
            .field("backoff", &self.backoff)
            .field("mode", &self.mode)
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

impl Endpoint {
    /// An endpoint with one request at a time, no retries, no rate limits,
    /// a 60 s timeout and a 500 ms first backoff; a run sets its own
    /// limits over these.
    pub fn new(url: String, api: Api, model: String, api_key: Option<String>) -> Endpoint {
        Endpoint {
            url,
            api,
            model,
            api_key,
            timeout: Duration::from_secs(60),
            retries: 0,
            concurrency: 1,
            requests_per_minute: None,
            tokens_per_minute: None,
            backoff: Duration::from_millis(500),
            mode: None,
        }
    }

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

    /// The base URL, parsed; the error names the (redacted) URL.
    pub(crate) fn base(&self) -> Result<Url, Error> {
        base_url(&self.url).map_err(|e| Error::usage(format!("--judge-url {e}")))
    }
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
