//! Anthropic's Messages API: the system prompt as its own field, the key in
//! `x-api-key`, the version named in `anthropic-version`, and no token
//! probabilities (the sampled answer decides, as for any server without
//! them) and no response format (the prompt asks for the JSON object, which
//! refscore parses defensively as for any plain-text answer).

use std::time::Duration;

use serde_json::{json, Value};

use super::{status_failure, system_message, ApiEntry, Ask, ChatProtocol, OutputMode, TEMPERATURE};
use crate::batch::anthropic_batches::AnthropicBatches;
use crate::parse::snippet;
use crate::transport::{Failure, Reply, Usage};

/// Anthropic's Messages API and Message Batches, for hosts under
/// anthropic.com. The key's default variable is the one every judge had
/// before the API was a choice (`OPENAI_API_KEY`), so existing setups keep
/// working; `--judge-api-key-env ANTHROPIC_API_KEY` names Anthropic's.
pub(crate) static API: ApiEntry = ApiEntry {
    name: "anthropic",
    hosts: &["anthropic.com"],
    key_env: "OPENAI_API_KEY",
    endpoint_name: "Messages API",
    protocol: || std::sync::Arc::new(Anthropic),
    batches: |endpoint| Ok(Box::new(AnthropicBatches::new(endpoint)?)),
    // No runner answers Message Batches lines from a folder.
    folder_batches: false,
};

/// The API version every request names (the Messages API's current one).
pub(crate) const VERSION: &str = "2023-06-01";

/// Anthropic's Messages API.
pub(crate) struct Anthropic;

impl ChatProtocol for Anthropic {
    fn path(&self) -> &'static [&'static str] {
        &["messages"]
    }

    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)> {
        let mut h = vec![("anthropic-version", VERSION.to_string())];
        if let Some(key) = api_key {
            h.push(("x-api-key", key.to_string()));
        }
        h
    }

    fn first_mode(&self) -> OutputMode {
        OutputMode::Plain
    }

    fn token_probabilities(&self) -> bool {
        false
    }

    fn body(&self, model: &str, ask: &Ask, mode: OutputMode, _logprobs: bool) -> Value {
        json!({
            "model": model,
            "max_tokens": ask.max_tokens,
            "temperature": TEMPERATURE,
            "system": system_message(ask.template, mode),
            "messages": [{"role": "user", "content": ask.user}],
        })
    }

    fn read(&self, reply: &Value) -> Result<(Reply, Usage), Failure> {
        message_of(reply)
    }

    fn classify(&self, code: u16, wait: Option<Duration>, text: &str, _body: &Value) -> Failure {
        // 529: Anthropic's "overloaded", a 5xx like any other.
        status_failure(code, wait, text)
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({
            "model": model,
            "max_tokens": 1,
            "messages": [{"role": "user", "content": "ping"}],
        })
    }
}

/// Reads a Messages API reply: the text of its text blocks, and the usage.
/// Anthropic counts prompt tokens read from and written to its cache apart
/// from `input_tokens`; the prompt is all three.
pub(crate) fn message_of(v: &Value) -> Result<(Reply, Usage), Failure> {
    let blocks = v["content"].as_array().ok_or_else(|| {
        Failure::Retry(
            format!("reply has no content: {}", snippet(&v.to_string())),
            None,
            false,
        )
    })?;
    let content: String = blocks
        .iter()
        .filter(|b| b["type"] == "text")
        .filter_map(|b| b["text"].as_str())
        .collect();
    let number = |key: &str| {
        v["usage"][key]
            .as_u64()
            .map_or(0, |t| u32::try_from(t).unwrap_or(u32::MAX))
    };
    let cached = number("cache_read_input_tokens");
    let prompt = number("input_tokens")
        .saturating_add(cached)
        .saturating_add(number("cache_creation_input_tokens"));
    Ok((
        Reply {
            content,
            tokens: None,
        },
        Usage {
            prompt_tokens: prompt,
            completion_tokens: number("output_tokens"),
            cached_tokens: cached,
            latency_ms: 0,
        },
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_reads_its_text_blocks_and_every_prompt_token() {
        let v = json!({"type": "message", "role": "assistant",
            "content": [{"type": "text", "text": "{\"verdict\": "}, {"type": "text", "text": "true}"}],
            "usage": {"input_tokens": 10, "output_tokens": 4, "cache_read_input_tokens": 90,
                      "cache_creation_input_tokens": 5}});
        let (reply, usage) = message_of(&v).ok().unwrap();
        assert_eq!(reply.content, "{\"verdict\": true}");
        assert!(reply.tokens.is_none());
        assert_eq!(
            (
                usage.prompt_tokens,
                usage.completion_tokens,
                usage.cached_tokens
            ),
            (105, 4, 90)
        );
        assert!(message_of(&json!({"type": "error"})).is_err());
    }

    #[test]
    fn requests_carry_the_system_prompt_apart_and_the_key_in_its_header() {
        let template = &crate::metric::builtin_rubric(0).template;
        let ask = Ask {
            template,
            user: "Q".into(),
            max_tokens: 10,
            logprobs: true,
        };
        let body = Anthropic.body("claude", &ask, OutputMode::Plain, true);
        assert_eq!(body["messages"], json!([{"role": "user", "content": "Q"}]));
        assert!(body["system"]
            .as_str()
            .unwrap()
            .ends_with("Answer with the JSON object only, no other text."));
        assert!(body.get("logprobs").is_none() && body.get("response_format").is_none());
        let headers = Anthropic.headers(Some("sk-ant"));
        assert!(headers.contains(&("x-api-key", "sk-ant".to_string())));
        assert!(headers.contains(&("anthropic-version", VERSION.to_string())));
    }
}
