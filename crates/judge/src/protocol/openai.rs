//! OpenAI's chat completions, as OpenAI, Azure OpenAI, vLLM, llama.cpp,
//! Ollama and most servers speak it: structured output by JSON schema or
//! JSON mode, token probabilities with up to 20 alternatives.

use std::time::Duration;

use serde_json::{json, Value};

use super::{status_failure, system_message, ApiEntry, Ask, ChatProtocol, OutputMode, TEMPERATURE};
use crate::batch::openai_batches::OpenAiBatches;
use crate::parse::snippet;
use crate::transport::{Failure, Reply, Token, Usage};

/// OpenAI's chat completions and Batch API: the default, for any URL no
/// other API claims.
pub(crate) static API: ApiEntry = ApiEntry {
    name: "openai",
    hosts: &[],
    key_env: "OPENAI_API_KEY",
    endpoint_name: "chat-completions",
    protocol: || std::sync::Arc::new(OpenAi),
    batches: |endpoint| Ok(Box::new(OpenAiBatches::new(endpoint)?)),
    folder_batches: true,
};

/// Alternatives asked for per generated token (OpenAI's maximum): enough to
/// hold every spelling of a verdict or a score.
const TOP_LOGPROBS: u32 = 20;

/// OpenAI's chat completions.
pub(crate) struct OpenAi;

impl ChatProtocol for OpenAi {
    fn path(&self) -> &'static [&'static str] {
        &["chat", "completions"]
    }

    fn headers(&self, api_key: Option<&str>) -> Vec<(&'static str, String)> {
        api_key
            .map(|key| ("Authorization", format!("Bearer {key}")))
            .into_iter()
            .collect()
    }

    fn first_mode(&self) -> OutputMode {
        OutputMode::Schema
    }

    fn token_probabilities(&self) -> bool {
        true
    }

    fn body(&self, model: &str, ask: &Ask, mode: OutputMode, logprobs: bool) -> Value {
        let template = ask.template;
        let messages = json!([
            {"role": "system", "content": system_message(template, mode)},
            {"role": "user", "content": ask.user},
        ]);
        let mut body = json!({
            "model": model,
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

    fn read(&self, reply: &Value) -> Result<(Reply, Usage), Failure> {
        completion_of(reply)
    }

    fn classify(&self, code: u16, wait: Option<Duration>, text: &str, body: &Value) -> Failure {
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
        if matches!(code, 400 | 422 | 501) && about_format && body.get("response_format").is_some()
        {
            return Failure::Downgrade;
        }
        status_failure(code, wait, text)
    }

    fn probe_body(&self, model: &str) -> Value {
        json!({
            "model": model,
            "max_tokens": 1,
            "temperature": TEMPERATURE,
            "messages": [{"role": "user", "content": "ping"}],
        })
    }
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

/// Reads a chat completion: the message, its tokens' probabilities where
/// sent, and the usage.
fn completion_of(v: &Value) -> Result<(Reply, Usage), Failure> {
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
