//! The judge's client: it paces requests (`--judge-rpm`, `--judge-tpm`,
//! shared by every worker), retries with exponential backoff and jitter
//! what a transient failure or an unreadable reply spoiled, falls back
//! from a JSON schema to JSON mode to plain text when the server rejects
//! one, and from token probabilities to none. What goes on the wire is the
//! protocol's (`protocol/`); how it gets there is the transport's
//! (`transport.rs`: sent now, or answered from a collected batch).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use refscore_core::Error;
use serde_json::Value;
use url::Url;

use crate::endpoint::{Endpoint, MAX_TIMEOUT, MIN_TIMEOUT};
use crate::limiter::{self, Limiter};
use crate::parse::extract_object;
use crate::prompts::Template;
use crate::protocol::mode::RequestMode;
use crate::protocol::{Ask, ChatProtocol, OutputMode, TEMPERATURE};
use crate::redact::{api_url, excerpt, key_url, redact_url, scrub, secrets};
use crate::transport::{wait_secs, Failure, Http, Reply, Transport, Usage};

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

/// Why a request got no usable answer after its retries.
#[derive(Debug, Clone)]
pub(crate) struct AskFailure {
    /// One line, credentials scrubbed.
    pub message: String,
    /// The endpoint failed (unreachable, timing out, 429, 5xx): another try
    /// later may succeed. False when it answered, but badly.
    pub transient: bool,
}

/// The judge's client over one endpoint.
pub(crate) struct Client {
    endpoint: Endpoint,
    protocol: Arc<dyn ChatProtocol>,
    transport: Box<dyn Transport>,
    /// Where requests go: the base URL with the protocol's path.
    url: Url,
    /// `url` as it may be shown (credentials redacted).
    shown: String,
    /// Credentials to scrub from any message.
    secrets: Vec<String>,
    mode: AtomicU8,
    /// Cleared when the server rejects the `logprobs` parameter (and never
    /// set for a protocol without token probabilities).
    logprobs: AtomicBool,
    limiter: Limiter,
    pub(crate) counters: Counters,
    /// The judge mode's use by this client (`--judge-service-tier flex`):
    /// it shapes each attempt and counts its refusals.
    judge_mode: Option<Arc<dyn RequestMode>>,
}

/// The HTTP transport to `endpoint` in its protocol (with `mode`'s
/// refusals recognised), and the URL it posts to.
fn http(
    endpoint: &Endpoint,
    mode: Option<Arc<dyn RequestMode>>,
) -> Result<(Http, Url, Vec<String>), Error> {
    let base = endpoint.base()?;
    let protocol = endpoint.api.protocol();
    let url = api_url(&base, protocol.path()).map_err(Error::config)?;
    let secrets = secrets(&base, endpoint.api_key.as_deref());
    let timeout = endpoint.timeout.clamp(MIN_TIMEOUT, MAX_TIMEOUT);
    let headers = protocol.headers(endpoint.api_key.as_deref());
    let transport = Http::new(
        protocol,
        url.clone(),
        headers,
        secrets.clone(),
        timeout,
        endpoint.concurrency,
        mode,
    );
    Ok((transport, url, secrets))
}

impl Client {
    /// A client for `endpoint`, sending over HTTP; the error names the
    /// (redacted) URL when it does not parse as an http(s) base URL.
    pub(crate) fn new(endpoint: Endpoint) -> Result<Client, Error> {
        let judge_mode = endpoint.mode.as_ref().map(|m| m.start());
        let (transport, url, secrets) = http(&endpoint, judge_mode.clone())?;
        let protocol = endpoint.api.protocol();
        let limiter = Limiter::new(endpoint.requests_per_minute, endpoint.tokens_per_minute);
        Ok(Client {
            shown: redact_url(&url),
            url,
            secrets,
            mode: AtomicU8::new(protocol.first_mode().as_u8()),
            logprobs: AtomicBool::new(protocol.token_probabilities()),
            protocol,
            transport: Box::new(transport),
            endpoint,
            limiter,
            counters: Counters::default(),
            judge_mode,
        })
    }

    /// The judge mode's summary entry, under its name (none without a
    /// mode).
    pub(crate) fn mode_summary(&self) -> serde_json::Map<String, Value> {
        self.judge_mode
            .iter()
            .map(|m| (m.name().to_string(), m.summary()))
            .collect()
    }

    /// The body of an attempt at `ask` in `mode`, shaped by the judge mode
    /// after `refused` refusals of this request.
    fn body(&self, ask: &Ask, mode: OutputMode, logprobs: bool, refused: u32) -> Value {
        let mut body = self
            .protocol
            .body(&self.endpoint.model, ask, mode, logprobs);
        if let Some(m) = &self.judge_mode {
            m.shape(&mut body, refused);
        }
        body
    }

    /// Sends through `transport` instead (judge batches): where it is not
    /// paced, nothing is paced or retried (looking up an answer is no
    /// call, and reads the same every time).
    pub(crate) fn use_transport(&mut self, transport: Box<dyn Transport>) {
        if !transport.paced() {
            self.limiter = Limiter::new(None, None);
            self.endpoint.retries = 0;
        }
        self.transport = transport;
    }

    /// The protocol the endpoint speaks.
    pub(crate) fn protocol(&self) -> &Arc<dyn ChatProtocol> {
        &self.protocol
    }

    /// The request URL as it may be shown.
    pub(crate) fn shown_url(&self) -> &str {
        &self.shown
    }

    /// The request URL as keys use it: no credentials, so the same server
    /// with other credentials has the same keys.
    pub(crate) fn key_url(&self) -> String {
        key_url(&self.url)
    }

    /// Everything about a request to `template` other than its texts that
    /// can change the answer: where it goes (credentials redacted), the
    /// model, the template, the token limit, the temperature and the output
    /// mode. Part of every cache and journal key.
    pub(crate) fn request_id(&self, template: &Template, mode: &str) -> String {
        crate::cache::DiskCache::key(&[
            &self.key_url(),
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
        let mode = OutputMode::named(name);
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

    /// The output mode a request for `ask` is sent in now.
    fn mode_for(&self, ask: &Ask) -> OutputMode {
        if ask.template.structured {
            self.negotiated()
        } else {
            OutputMode::None
        }
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
        // Times the judge mode refused this request (no capacity).
        let mut refused = 0u32;
        let mut downgrades = 0;
        let mut last: String;
        let mut transient = false;
        let text_len = ask.user.len();
        loop {
            let mode = self.mode_for(ask);
            let logprobs = ask.logprobs && self.logprobs.load(Ordering::Relaxed);
            let body = self.body(ask, mode, logprobs, refused);
            let estimate = u32::try_from((ask.template.system.len() + text_len) / 4)
                .unwrap_or(u32::MAX)
                .saturating_add(ask.max_tokens);
            self.limiter.acquire(estimate);
            let sent = self.transport.send(&body);
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
                // The judge mode's refusal is retried as any 429 is, and
                // counted.
                Err(Failure::Refused(e, wait)) => {
                    refused += 1;
                    let again = attempt < self.endpoint.retries;
                    if let Some(m) = &self.judge_mode {
                        m.count_refusal(refused, again);
                    }
                    last = e;
                    transient = true;
                    if !again {
                        break;
                    }
                    attempt += 1;
                    self.back_off(attempt, wait);
                }
                Err(Failure::Retry(e, wait, endpoint_failed)) => {
                    last = e;
                    transient = endpoint_failed;
                    if attempt >= self.endpoint.retries {
                        break;
                    }
                    attempt += 1;
                    self.back_off(attempt, wait);
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

    /// Counts retry number `attempt` and waits before it: `wait` where the
    /// server said, else the backoff doubling per retry, with jitter,
    /// capped at 30 s.
    fn back_off(&self, attempt: u32, wait: Option<Duration>) {
        self.counters.retries.fetch_add(1, Ordering::Relaxed);
        let backoff = self.endpoint.backoff.as_secs_f64() * 2f64.powi(attempt.min(64) as i32 - 1);
        let jitter = limiter::jitter();
        let delay = wait.unwrap_or_else(|| wait_secs(backoff * jitter, Duration::from_secs(30)));
        std::thread::sleep(delay);
    }

    /// The body of the first request `send_ask` would send for `ask`, in
    /// the output mode in use now (`refscore judge-prompt`).
    pub(crate) fn first_body(&self, ask: &Ask) -> Value {
        let logprobs = ask.logprobs && self.logprobs.load(Ordering::Relaxed);
        self.body(ask, self.mode_for(ask), logprobs, 0)
    }
}

/// Checks, with one minimal request (one token, a trivial message), that
/// the judge endpoint answers before any row is scored, so that a wrong
/// URL, key or model stops the run at once instead of failing every row.
/// Connection failures, timeouts and 5xx are [`Error::temporary`] (worth
/// retrying later); 401/403 and an unknown model are [`Error::config`].
/// Every message names the redacted URL.
pub fn probe(endpoint: &Endpoint) -> Result<(), Error> {
    let (http, _, secrets) = http(endpoint, None)?;
    let mut body = endpoint.api.protocol().probe_body(&endpoint.model);
    if let Some(mode) = &endpoint.mode {
        mode.start().shape(&mut body, 0);
    }
    let url = http.shown_url();
    match http.post(&body).map_err(|e| *e) {
        Ok(resp) => {
            // Drain the reply so a keep-alive connection is left clean.
            let _ = resp.into_string();
            Ok(())
        }
        Err(ureq::Error::Status(code, resp)) => {
            let text = resp.into_string().unwrap_or_default();
            let detail = excerpt(&text, &secrets);
            let model = &endpoint.model;
            let mentions_model = text.to_ascii_lowercase().contains("model");
            match code {
                401 | 403 => Err(Error::config(format!(
                    "the judge refused authentication at {url} (HTTP {code}): check the API key \
                     variable (--judge-api-key-env): {detail}"
                ))),
                404 => Err(Error::config(format!(
                    "model '{model}' unknown at {url}, or no {} endpoint there \
                     (HTTP 404): {detail}",
                    endpoint.api.endpoint_name()
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
            http.transport_message(&t)
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Meaning Match's template.
    fn meaning_match() -> &'static Template {
        &crate::metric::builtin_rubric(0).template
    }
    use crate::protocol::Api;
    use crate::test_server::{chat, start, start_all, Reply};
    use refscore_core::ErrorClass;
    use refscore_test_servers::refused_url;

    fn endpoint(url: &str) -> Endpoint {
        Endpoint {
            url: url.into(),
            api: Api::default(),
            model: "m".into(),
            api_key: None,
            timeout: Duration::from_secs(5),
            retries: 2,
            concurrency: 1,
            requests_per_minute: None,
            tokens_per_minute: None,
            backoff: Duration::from_millis(5),
            mode: None,
        }
    }

    const VERDICT: &str = r#"{"meaning_match": true, "reason": "same"}"#;

    fn ask(client: &Client) -> Result<(Value, Usage, &'static str), String> {
        client
            .ask(meaning_match(), "Q", |v| Ok(v.clone()))
            .map_err(|e| e.message)
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
        let server = start_all(move |_, _| reply());
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
        let server = start_all(|_, _| Reply::Stall);
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
