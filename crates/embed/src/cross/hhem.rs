//! HHEM-2.1-Open (vectara/hallucination_evaluation_model) as its published
//! code runs it (`modeling_hhem_v2.py`, `configuration_hhem_v2.py`):
//! `HHEMv2ForSequenceClassification` wraps a `T5ForTokenClassification`
//! built from the config of the model named by `foundation`
//! (google/flan-t5-base), and `predict` fills the config's `prompt` with
//! each (premise, hypothesis), tokenises the texts with the foundation's
//! tokenizer (padding, no truncation), and returns the softmax of the
//! first position's logits at class 1 ("consistent").
//!
//! The published folder holds `config.json` and the weights only: the
//! tokenizer is read from the folder, where a user has put the
//! foundation's, and a folder without one is refused naming it. The T5
//! config is google/flan-t5-base's (written out here), or that of a
//! foundation folder the config names. The prompt is isolated here, one
//! type and one constant, for a recipe to take over.

use std::path::Path;

use serde_json::Value;

/// `config.json`'s `architectures` entry of HHEM's wrapper.
pub(crate) const ARCHITECTURE: &str = "HHEMv2ForSequenceClassification";

/// The `model_type`s HHEM's config is saved with (the published file says
/// `HHEMv2Config`; its config class, `HHEMv2`).
const MODEL_TYPES: [&str; 2] = ["HHEMv2Config", "HHEMv2"];

/// `HHEMv2Config.prompt`: the text the model reads, premise as `text1`,
/// hypothesis as `text2` (Python's `str.format` fields).
pub const HHEM_PROMPT: &str =
    "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: {text1}\n\nHypothesis: {text2}";

/// The label whose probability `predict` returns ("consistent").
pub const HHEM_CONSISTENT: usize = 1;

/// `HHEMv2Config.foundation`: the model whose config and tokenizer the
/// published code loads by name.
const FLAN_T5_BASE: &str = "google/flan-t5-base";

/// google/flan-t5-base's `config.json`, its keys that shape the encoder
/// (T5 v1.1's base size: gated GELU, 32 buckets up to 128 tokens). Every
/// size is checked against the weights' shapes when they load.
const FLAN_T5_BASE_CONFIG: &str = r#"{
  "model_type": "t5",
  "vocab_size": 32128,
  "d_model": 768,
  "d_kv": 64,
  "d_ff": 2048,
  "num_layers": 12,
  "num_heads": 12,
  "relative_attention_num_buckets": 32,
  "relative_attention_max_distance": 128,
  "layer_norm_epsilon": 1e-06,
  "feed_forward_proj": "gated-gelu",
  "dense_act_fn": "gelu_new",
  "is_gated_act": true,
  "pad_token_id": 0,
  "eos_token_id": 1
}"#;

/// Whether a `config.json` is HHEM's wrapper.
pub(crate) fn is_hhem(architectures: &[String], model_type: Option<&str>) -> bool {
    architectures.first().map(String::as_str) == Some(ARCHITECTURE)
        || model_type.is_some_and(|t| MODEL_TYPES.contains(&t))
}

/// A premise/hypothesis prompt, as Python's `str.format(text1=…,
/// text2=…)` fills it: `{text1}` and `{text2}` replaced, `{{` and `}}`
/// written as one brace, the texts themselves never read as a template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PairPrompt {
    parts: Vec<Part>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Part {
    Text(String),
    Premise,
    Hypothesis,
}

impl PairPrompt {
    /// Parses `template`; any field but `text1` and `text2`, or a lone
    /// brace, is an error naming it.
    pub fn parse(template: &str) -> Result<PairPrompt, String> {
        let mut parts = Vec::new();
        let mut text = String::new();
        let mut rest = template;
        while let Some(c) = rest.chars().next() {
            if rest.starts_with("{{") || rest.starts_with("}}") {
                text.push(c);
                rest = &rest[2..];
            } else if c == '{' {
                let end = rest
                    .find('}')
                    .ok_or_else(|| format!("prompt '{template}': a '{{' without its '}}'"))?;
                let part = match &rest[1..end] {
                    "text1" => Part::Premise,
                    "text2" => Part::Hypothesis,
                    other => {
                        return Err(format!(
                            "prompt '{template}': field '{{{other}}}' is not {{text1}} (the premise) or {{text2}} (the hypothesis)"
                        ))
                    }
                };
                parts.push(Part::Text(std::mem::take(&mut text)));
                parts.push(part);
                rest = &rest[end + 1..];
            } else if c == '}' {
                return Err(format!("prompt '{template}': a '}}' without its '{{'"));
            } else {
                text.push(c);
                rest = &rest[c.len_utf8()..];
            }
        }
        parts.push(Part::Text(text));
        parts.retain(|p| !matches!(p, Part::Text(t) if t.is_empty()));
        Ok(PairPrompt { parts })
    }

    /// The text the model reads for (`premise`, `hypothesis`).
    pub fn fill(&self, premise: &str, hypothesis: &str) -> String {
        self.parts
            .iter()
            .map(|p| match p {
                Part::Text(t) => t.as_str(),
                Part::Premise => premise,
                Part::Hypothesis => hypothesis,
            })
            .collect()
    }
}

/// What HHEM's folder says beyond its weights.
pub(crate) struct Hhem {
    /// The T5 encoder's config (the foundation's).
    pub t5_config: String,
    /// The config's `prompt`, else [`HHEM_PROMPT`].
    pub prompt: PairPrompt,
}

impl Hhem {
    /// Reads `dir`'s HHEM `config` (parsed `config.json`): the foundation's
    /// T5 config, the prompt, and that the folder has a tokenizer. `Err`
    /// says, in one line, what is missing.
    pub(crate) fn read(dir: &Path, config: &Value) -> Result<Hhem, String> {
        let foundation = config
            .get("foundation")
            .and_then(Value::as_str)
            .unwrap_or(FLAN_T5_BASE);
        if !dir.join("tokenizer.json").is_file() {
            return Err(format!(
                "HHEM-2.1-Open's folder holds no tokenizer.json (its code loads {foundation}'s tokenizer by name): copy {foundation}'s tokenizer.json and tokenizer_config.json into {}",
                dir.display()
            ));
        }
        let t5_config = if foundation == FLAN_T5_BASE {
            FLAN_T5_BASE_CONFIG.to_string()
        } else {
            // A folder of the foundation's files, relative to the model's.
            let path = dir.join(foundation).join("config.json");
            let text = std::fs::read_to_string(&path).map_err(|_| {
                format!(
                    "foundation '{foundation}' is neither {FLAN_T5_BASE} nor a folder with a config.json (looked for {})",
                    path.display()
                )
            })?;
            let kind = serde_json::from_str::<Value>(&text)
                .map_err(|e| format!("{}: {e}", path.display()))?
                .get("model_type")
                .and_then(Value::as_str)
                .map(str::to_string);
            if kind.as_deref() != Some("t5") {
                return Err(format!(
                    "{}: model_type {kind:?}: HHEM's foundation is a T5",
                    path.display()
                ));
            }
            text
        };
        let template = config
            .get("prompt")
            .and_then(Value::as_str)
            .unwrap_or(HHEM_PROMPT);
        Ok(Hhem {
            t5_config,
            prompt: PairPrompt::parse(template)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_is_filled_as_python_formats_it() {
        let p = PairPrompt::parse(HHEM_PROMPT).unwrap();
        assert_eq!(
            p.fill("I am in California", "I am in United States."),
            "<pad> Determine if the hypothesis is true given the premise?\n\nPremise: I am in California\n\nHypothesis: I am in United States."
        );
        // Braces in the texts are text; doubled braces in the template are
        // one.
        let p = PairPrompt::parse("{{x}} {text2}|{text1}").unwrap();
        assert_eq!(p.fill("{text2}", "é{}"), "{x} é{}|{text2}");
        for bad in ["{premise}", "{text1", "a } b", "{}"] {
            assert!(PairPrompt::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_folder_without_a_tokenizer_is_refused_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let config: Value = serde_json::json!({
            "architectures": [ARCHITECTURE], "model_type": "HHEMv2Config",
            "foundation": "google/flan-t5-base"
        });
        let Err(err) = Hhem::read(dir.path(), &config) else {
            panic!("read without a tokenizer")
        };
        assert!(
            err.contains("tokenizer.json") && err.contains("google/flan-t5-base"),
            "{err}"
        );
        assert!(!err.contains('\n'), "{err}");
        std::fs::write(dir.path().join("tokenizer.json"), "{}").unwrap();
        let hhem = Hhem::read(dir.path(), &config).unwrap();
        assert!(hhem.t5_config.contains("\"d_model\": 768"));
        assert_eq!(hhem.prompt, PairPrompt::parse(HHEM_PROMPT).unwrap());
        // Another foundation must be a T5 folder.
        let other = serde_json::json!({"foundation": "nowhere"});
        let Err(err) = Hhem::read(dir.path(), &other) else {
            panic!("read with a missing foundation")
        };
        assert!(err.contains("foundation 'nowhere'"), "{err}");
        assert!(is_hhem(&[], Some("HHEMv2Config")));
        assert!(is_hhem(&[ARCHITECTURE.to_string()], None));
        assert!(!is_hhem(
            &["T5ForTokenClassification".to_string()],
            Some("t5")
        ));
    }
}
