//! The calls a provider's batch API is made of, whatever the provider:
//! requests under the judge's base URL with the protocol's headers, a few
//! tries on a transient failure, JSON answers read, files streamed to disk
//! whole or not at all, and every message one line with no credential.

use std::path::Path;
use std::time::Duration;

use refscore_core::Error;
use serde_json::Value;
use url::Url;

use crate::redact::{api_url, excerpt, redact_url, scrub, secrets, ScrubbedLines};
use crate::Endpoint;

/// Attempts per idempotent call (uploads, reads) on a transient failure.
/// Creating a batch is never retried blindly: a creation whose answer was
/// lost may have happened, and only looking it up can tell.
pub(crate) const ATTEMPTS: u32 = 3;

/// A provider's batch API at the judge's base URL.
pub(crate) struct Rest {
    agent: ureq::Agent,
    base: Url,
    headers: Vec<(&'static str, String)>,
    secrets: Vec<String>,
    /// How long a wait between attempts starts at.
    backoff: Duration,
}

impl Rest {
    /// Calls under `endpoint`'s base URL with its protocol's headers.
    pub(crate) fn new(endpoint: &Endpoint) -> Result<Rest, Error> {
        let base = endpoint.base()?;
        // Request files run to hundreds of MB each way: give transfers room.
        let agent = ureq::AgentBuilder::new()
            .timeout_connect(endpoint.timeout.min(Duration::from_secs(60)))
            .timeout_read(endpoint.timeout.max(Duration::from_secs(600)))
            .timeout_write(Duration::from_secs(600))
            .build();
        Ok(Rest {
            agent,
            secrets: secrets(&base, endpoint.api_key.as_deref()),
            headers: endpoint.api.protocol().headers(endpoint.api_key.as_deref()),
            base,
            backoff: endpoint.backoff,
        })
    }

    /// The URL of `segments` under the base URL.
    pub(crate) fn url(&self, segments: &[&str]) -> Result<Url, Error> {
        api_url(&self.base, segments).map_err(Error::config)
    }

    fn request(&self, method: &str, url: &Url) -> ureq::Request {
        let mut req = self.agent.request_url(method, url);
        for (name, value) in &self.headers {
            req = req.set(name, value);
        }
        req
    }

    /// One call with up to `attempts` tries on a transient failure; the
    /// error is one line naming the (redacted) URL: configuration for a
    /// refusal (401, 403, 404, other 4xx), temporary for the rest.
    pub(crate) fn call(
        &self,
        method: &str,
        url: &Url,
        attempts: u32,
        send: impl Fn(ureq::Request) -> Result<ureq::Response, Box<ureq::Error>>,
    ) -> Result<ureq::Response, Error> {
        let shown = redact_url(url);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let failure = match send(self.request(method, url)).map_err(|e| *e) {
                Ok(resp) => return Ok(resp),
                Err(ureq::Error::Status(code, resp)) => {
                    let text = excerpt(&resp.into_string().unwrap_or_default(), &self.secrets);
                    let msg =
                        format!("the judge's Batch API: {method} {shown}: HTTP {code}: {text}");
                    if code != 429 && code < 500 {
                        return Err(Error::config(msg));
                    }
                    msg
                }
                Err(ureq::Error::Transport(t)) => scrub(
                    &format!("the judge's Batch API: {method} {shown} failed: {t}"),
                    &self.secrets,
                ),
            };
            if attempt >= attempts {
                return Err(Error::temporary(failure));
            }
            std::thread::sleep(self.backoff * 2u32.pow(attempt - 1));
        }
    }

    /// A `POST` of an empty JSON object to `segments` under the base URL
    /// (a batch's cancel), with [`ATTEMPTS`] tries.
    pub(crate) fn post_empty(&self, segments: &[&str]) -> Result<(), Error> {
        let url = self.url(segments)?;
        self.call("POST", &url, ATTEMPTS, |r| {
            r.send_json(serde_json::json!({})).map_err(Box::new)
        })
        .map(|_| ())
    }

    /// A `GET` of JSON, with [`ATTEMPTS`] tries.
    pub(crate) fn get_json(&self, url: &Url, what: &str) -> Result<Value, Error> {
        self.json(
            self.call("GET", url, ATTEMPTS, |r| r.call().map_err(Box::new))?,
            what,
        )
    }

    /// A call's answer as JSON; `what` says what the call was, for messages.
    pub(crate) fn json(&self, resp: ureq::Response, what: &str) -> Result<Value, Error> {
        let text = resp
            .into_string()
            .map_err(|e| Error::temporary(format!("the judge's Batch API: {what}: {e}")))?;
        serde_json::from_str(&text).map_err(|_| {
            Error::temporary(format!(
                "the judge's Batch API: {what}: not JSON: {}",
                excerpt(&text, &self.secrets)
            ))
        })
    }

    /// The `id` of what a call created (a file, a batch).
    pub(crate) fn id_in(&self, resp: ureq::Response, what: &str) -> Result<String, Error> {
        let v = self.json(resp, what)?;
        v["id"].as_str().map(String::from).ok_or_else(|| {
            Error::temporary(format!(
                "the judge's Batch API: {what}: the answer has no id: {}",
                excerpt(&v.to_string(), &self.secrets)
            ))
        })
    }

    /// Downloads what `url` holds to `to`, whole or not at all.
    pub(crate) fn download(&self, url: &Url, to: &Path) -> Result<(), Error> {
        let resp = self.call("GET", url, ATTEMPTS, |r| r.call().map_err(Box::new))?;
        // A transfer cut short is worth trying again later.
        let mut lines =
            ScrubbedLines::new(std::io::BufReader::new(resp.into_reader()), &self.secrets);
        refscore_core::files::copy_atomically(&mut lines, to).map_err(|e| {
            Error::temporary(format!(
                "the judge's Batch API: downloading {} to {}: {e}",
                redact_url(url),
                to.display()
            ))
        })
    }
}
