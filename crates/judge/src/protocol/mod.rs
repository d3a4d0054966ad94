//! The judge APIs, one self-describing entry each ([`ApiEntry`]): its
//! name, which URLs select it, the variable its key is read from, its wire
//! protocol behind one trait ([`ChatProtocol`]: what a request for one
//! question looks like, how an answer and its token probabilities are
//! read, what an HTTP error status means, the smallest request that proves
//! the endpoint answers) and its batch backend. The client
//! ([`crate::client`]) paces, retries and negotiates the output format
//! through the protocol; the transports send what it builds. Nothing
//! outside this module tells one API from another: the rest of refscore
//! holds an [`Api`] and asks it.
//!
//! Adding an API is one module here (its protocol and its `API` entry)
//! plus its line in [`APIS`]; its batch backend, if it has one, is a
//! module of `batch/`. A judge mode (a way of asking an API, as OpenAI's
//! flex processing) is one module here plus its line in `judge_modes!`
//! ([`mode`]).

mod anthropic;
#[macro_use]
pub(crate) mod mode;
mod openai;

pub use mode::{Mode, ModeContext};

// The judge modes, one line each (module::Options).
judge_modes! { flex::FlexOptions }

use std::sync::Arc;
use std::time::Duration;

use refscore_core::Error;
use serde_json::Value;
use url::Url;

use crate::batch::BatchBackend;
use crate::endpoint::Endpoint;
use crate::prompts::Template;
use crate::transport::{Failure, Reply, Usage};

/// Everything refscore knows about one judge API.
pub(crate) struct ApiEntry {
    /// The name `--judge-api` takes, and the fingerprint and summary record.
    pub name: &'static str,
    /// Hosts whose URLs (the host itself or any name under it) select this
    /// API when `--judge-api` is not given; a URL no entry claims gets the
    /// first entry of [`APIS`].
    pub hosts: &'static [&'static str],
    /// The variable the key is read from unless `--judge-api-key-env`
    /// names another.
    pub key_env: &'static str,
    /// How messages name the endpoint that answers questions (a probe's
    /// 404: "no chat-completions endpoint there").
    pub endpoint_name: &'static str,
    /// The wire protocol.
    pub protocol: fn() -> Arc<dyn ChatProtocol>,
    /// The provider's batch API (`--judge-batch api`) under the judge's
    /// base URL.
    pub batches: fn(&Endpoint) -> Result<Box<dyn BatchBackend>, Error>,
    /// Whether its requests are OpenAI Batch API lines, which a folder of
    /// request files (`--judge-batch dir:`, answered by `vllm run-batch`)
    /// holds.
    pub folder_batches: bool,
}

/// Every judge API, the default first (the protocol nearly every server
/// speaks).
static APIS: &[&ApiEntry] = &[&openai::API, &anthropic::API];

/// A judge API (`--judge-api`, or the one its URL implies): a handle on
/// its [`ApiEntry`].
#[derive(Clone, Copy)]
pub struct Api(&'static ApiEntry);

impl PartialEq for Api {
    fn eq(&self, other: &Api) -> bool {
        std::ptr::eq(self.0, other.0)
    }
}

impl Eq for Api {}

impl std::fmt::Debug for Api {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_tuple("Api").field(&self.0.name).finish()
    }
}

/// The first API of [`APIS`]: OpenAI's chat completions.
impl Default for Api {
    fn default() -> Api {
        Api(APIS[0])
    }
}

impl Api {
    /// Every API, the default first.
    pub fn all() -> impl Iterator<Item = Api> {
        APIS.iter().map(|e| Api(e))
    }

    /// The name `--judge-api` takes.
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// Reads a `--judge-api` value; the error lists the choices.
    pub fn parse(name: &str) -> Result<Api, String> {
        Api::all().find(|a| a.name() == name.trim()).ok_or_else(|| {
            let names: Vec<&str> = Api::all().map(Api::name).collect();
            let choices = match names.split_last() {
                Some((last, [])) => last.to_string(),
                Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
                None => String::new(),
            };
            format!("'{name}': expected {choices}")
        })
    }

    /// The API of a judge URL when `--judge-api` is not given: the entry
    /// whose hosts hold the URL's host, else the default.
    pub fn for_url(url: &str) -> Api {
        let host = Url::parse(url.trim())
            .ok()
            .and_then(|u| u.host_str().map(str::to_ascii_lowercase));
        let claims = |h: &str, entry: &ApiEntry| {
            entry
                .hosts
                .iter()
                .any(|own| h == *own || h.strip_suffix(own).is_some_and(|s| s.ends_with('.')))
        };
        host.and_then(|h| Api::all().find(|a| claims(&h, a.0)))
            .unwrap_or_default()
    }

    /// The variable the key is read from unless `--judge-api-key-env`
    /// names another.
    pub fn key_env(self) -> &'static str {
        self.0.key_env
    }

    /// The name as a run's fingerprint and summary record it: none for the
    /// default API, so runs started before the API was a choice still
    /// resume and their summaries read the same.
    pub fn recorded(self) -> Option<&'static str> {
        (self != Api::default()).then_some(self.0.name)
    }

    /// Its wire protocol.
    pub(crate) fn protocol(self) -> Arc<dyn ChatProtocol> {
        (self.0.protocol)()
    }

    /// How messages name the endpoint that answers questions.
    pub(crate) fn endpoint_name(self) -> &'static str {
        self.0.endpoint_name
    }

    /// The provider's batch API for `endpoint`.
    pub(crate) fn batches(self, endpoint: &Endpoint) -> Result<Box<dyn BatchBackend>, Error> {
        (self.0.batches)(endpoint)
    }

    /// Whether a folder of OpenAI Batch API request lines can hold its
    /// requests.
    pub(crate) fn folder_batches(self) -> bool {
        self.0.folder_batches
    }
}

/// One question to the judge: a template's system message and the user
/// message. The template says whether it asks for structured output;
/// `max_tokens` may cut an answer shorter than the template allows (a
/// verdict without its reason).
pub(crate) struct Ask<'a> {
    pub template: &'a Template,
    pub user: String,
    pub max_tokens: u32,
    /// Ask for each generated token's log-probability and its alternatives
    /// (where the protocol offers them).
    pub logprobs: bool,
}

/// The output format a structured request asks for, negotiated down when a
/// server rejects one: a JSON schema, then JSON mode, then plain text
/// asking for JSON.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[repr(u8)]
pub(crate) enum OutputMode {
    Schema = 0,
    Json = 1,
    Plain = 2,
    /// A request that asks for no output format at all (a one-word verdict
    /// or a free-text reason); never stored as the negotiated mode.
    None = 3,
}

impl OutputMode {
    /// The mode an atomic holds (see [`OutputMode::as_u8`]).
    pub(crate) fn from_u8(v: u8) -> OutputMode {
        match v {
            0 => OutputMode::Schema,
            1 => OutputMode::Json,
            2 => OutputMode::Plain,
            _ => OutputMode::None,
        }
    }

    /// For the atomic that holds the negotiated mode.
    pub(crate) fn as_u8(self) -> u8 {
        self as u8
    }

    /// The name stored in cache and journal keys and in the summary.
    pub(crate) fn name(self) -> &'static str {
        match self {
            OutputMode::Schema => "json_schema",
            OutputMode::Json => "json_object",
            OutputMode::Plain => "plain",
            OutputMode::None => "none",
        }
    }

    /// A mode by its name (the one an earlier run recorded).
    pub(crate) fn named(name: &str) -> OutputMode {
        match name {
            "json_object" => OutputMode::Json,
            "plain" => OutputMode::Plain,
            _ => OutputMode::Schema,
        }
    }

    /// The mode to try after a server rejected this one.
    pub(crate) fn downgraded(self) -> OutputMode {
        match self {
            OutputMode::Schema => OutputMode::Json,
            OutputMode::Json | OutputMode::Plain => OutputMode::Plain,
            OutputMode::None => OutputMode::None,
        }
    }
}

/// The sampling temperature of every request (part of the cache key).
pub(crate) const TEMPERATURE: u32 = 0;

/// A judge's wire protocol.
pub(crate) trait ChatProtocol: Send + Sync {
    /// The path under the base URL that answers a question
    /// (`chat/completions`, `messages`).
    fn path(&self) -> &'static [&'static str];
    /// The headers every request carries: the key, and any version the
    /// protocol wants named.
    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)>;
    /// The strongest output format the protocol can ask for; the client
    /// negotiates down from it.
    fn first_mode(&self) -> OutputMode;
    /// Whether replies can carry token probabilities.
    fn token_probabilities(&self) -> bool;
    /// The body of a request for `ask` to `model` in `mode`, with token
    /// probabilities asked for when `logprobs`.
    fn body(&self, model: &str, ask: &Ask, mode: OutputMode, logprobs: bool) -> Value;
    /// Reads a reply: the message, its tokens' probabilities where sent,
    /// and the usage. Online replies and batch answers go through it.
    fn read(&self, reply: &Value) -> Result<(Reply, Usage), Failure>;
    /// What an HTTP error status on the request whose body was `body`
    /// means: a retry (after `wait` where the server said), a fallback of
    /// the output format or of token probabilities, or a failure not worth
    /// retrying. Online replies and batch error lines go through it.
    fn classify(&self, code: u16, wait: Option<Duration>, text: &str, body: &Value) -> Failure;
    /// The smallest request that shows the endpoint answers (one token).
    fn probe_body(&self, model: &str) -> Value;
}

/// The system message as sent: in plain mode it asks for the JSON object
/// alone (no format is enforced there).
pub(crate) fn system_message(template: &Template, mode: OutputMode) -> String {
    if mode == OutputMode::Plain {
        format!(
            "{}\nAnswer with the JSON object only, no other text.",
            template.system
        )
    } else {
        template.system.to_string()
    }
}

/// The failure of an HTTP status common to every protocol: 429 and 5xx
/// are worth a retry, any other refusal is not.
pub(crate) fn status_failure(code: u16, wait: Option<Duration>, text: &str) -> Failure {
    let msg = format!("HTTP {code}: {}", crate::parse::snippet(text));
    if code == 429 || code >= 500 {
        Failure::Retry(msg, wait, true)
    } else {
        Failure::Fatal(msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_protocol_follows_the_host_unless_named() {
        let of = |url: &str| Api::for_url(url).name();
        assert_eq!(of("https://api.anthropic.com/v1"), "anthropic");
        assert_eq!(of("https://API.Anthropic.com/v1"), "anthropic");
        assert_eq!(of("https://anthropic.com/v1"), "anthropic");
        assert_eq!(of("https://api.openai.com/v1"), "openai");
        assert_eq!(of("http://127.0.0.1:8080/v1"), "openai");
        assert_eq!(of("https://anthropic.com.evil.test/v1"), "openai");
        assert_eq!(of("https://evilanthropic.com/v1"), "openai");
        assert_eq!(of("not a url"), "openai");
        assert_eq!(Api::parse("anthropic").map(Api::name), Ok("anthropic"));
        assert_eq!(Api::parse(" openai "), Ok(Api::default()));
        assert_eq!(
            Api::parse("gemini").unwrap_err(),
            "'gemini': expected openai or anthropic"
        );
    }

    #[test]
    fn only_an_api_other_than_the_default_is_recorded() {
        assert_eq!(Api::default().recorded(), None);
        assert_eq!(
            Api::parse("anthropic").unwrap().recorded(),
            Some("anthropic")
        );
    }
}
