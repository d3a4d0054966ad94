//! The judge's wire protocols behind one trait: what a request for one
//! question looks like, how an answer and its token probabilities are read,
//! what an HTTP error status means, and the smallest request that proves
//! the endpoint answers. The client ([`crate::client`]) paces, retries and
//! negotiates the output format through it; the transports send what it
//! builds.
//!
//! Adding a protocol is one module here plus its line in [`of`] (and its
//! name in [`Api`]).

mod anthropic;
mod openai;

use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;

use crate::endpoint::Api;
use crate::prompts::Template;
use crate::transport::{Failure, Reply, Usage};

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

/// The protocol of an API.
pub(crate) fn of(api: Api) -> Arc<dyn ChatProtocol> {
    match api {
        Api::OpenAi => Arc::new(openai::OpenAi),
        Api::Anthropic => Arc::new(anthropic::Anthropic),
    }
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
