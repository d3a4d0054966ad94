//! What a cross-encoder folder says about itself: that it is a sequence
//! classifier refscore can run, its labels, and the activation
//! sentence-transformers' `CrossEncoder` puts on its logits, read from
//! whichever of the three layouts users meet (a plain transformers folder,
//! the legacy `sentence_transformers` block of `config.json`, and
//! sentence-transformers ≥ 5's `config_sentence_transformers.json`).

use std::path::Path;

use refscore_core::Error;
use serde::Deserialize;

use super::hhem::{self, Hhem, PairPrompt};
use super::recipe::Recipe;
use crate::model::{
    from_hub, looks_like_hub_id, read_folder, read_folder_with, ModelFiles, ModelKind, ModelLookup,
};

/// The function `CrossEncoder.predict` applies to the logits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScoreActivation {
    /// `torch.nn.Sigmoid`: sentence-transformers' default for one output.
    Sigmoid,
    /// `torch.nn.Identity`: the default for more than one output.
    Identity,
    /// `torch.nn.Tanh`.
    Tanh,
}

impl ScoreActivation {
    /// The name the summary and fingerprint give it.
    pub fn name(self) -> &'static str {
        match self {
            ScoreActivation::Sigmoid => "sigmoid",
            ScoreActivation::Identity => "identity",
            ScoreActivation::Tanh => "tanh",
        }
    }

    /// The activation a dotted torch path names (`torch.nn.Sigmoid`,
    /// `torch.nn.modules.activation.Sigmoid`, ...); `None` for others.
    fn from_path(path: &str) -> Option<ScoreActivation> {
        match path.rsplit('.').next()? {
            "Sigmoid" => Some(ScoreActivation::Sigmoid),
            "Identity" => Some(ScoreActivation::Identity),
            "Tanh" => Some(ScoreActivation::Tanh),
            _ => None,
        }
    }

    /// Applies it to one logit.
    pub(crate) fn apply(self, x: f64) -> f64 {
        match self {
            ScoreActivation::Sigmoid => 1.0 / (1.0 + (-x).exp()),
            ScoreActivation::Identity => x,
            ScoreActivation::Tanh => x.tanh(),
        }
    }
}

/// A sequence-classification folder, checked and read.
#[derive(Debug, Clone)]
pub struct CrossFolder {
    /// The encoder's files and settings, as for an embedding model.
    pub files: ModelFiles,
    /// `config.json`'s `architectures` entry (`BertForSequenceClassification`).
    pub architecture: String,
    /// Label names by index (`id2label`; `LABEL_k` where none are named).
    pub labels: Vec<String>,
    /// What `CrossEncoder.predict` applies to the logits.
    pub activation: ScoreActivation,
    /// Where the activation came from, for the summary.
    pub activation_from: &'static str,
    /// Whether the tokenizer gives the model token types (a pair's second
    /// text as type 1), as transformers decides from the tokenizer's
    /// `model_input_names`: false for a class without `token_type_ids`
    /// (DistilBERT's, RoBERTa's...), whose every token is type 0.
    pub token_types: bool,
    /// `config.json`'s `type_vocab_size`: the token types the model embeds.
    type_vocab_size: usize,
    /// How inputs are built and outputs read: `--cross-recipe`'s, else the
    /// folder's `refscore_recipe.json`, else the plain pair (`nli`).
    pub recipe: Recipe,
    /// How the folder reads a (premise, hypothesis) pair: the input a
    /// recipe's `"pair"` builds.
    pub input: CrossInput,
    /// Whether the model labels the pair as a whole or every token.
    pub head: CrossHead,
}

/// What a cross-encoder's head gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrossHead {
    /// One set of label scores per pair (`*ForSequenceClassification`).
    Sequence,
    /// Label probabilities per token (`*ForTokenClassification`), run as
    /// LettuceDetect's span detector ([`super::SpanDetector`]).
    Tokens,
}

/// How a cross-encoder reads a (premise, hypothesis) pair.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrossInput {
    /// As a pair, in the tokenizer's pair template (sentence-transformers'
    /// `CrossEncoder`).
    Pair,
    /// As one text, the pair filled into a prompt (HHEM-2.1-Open's
    /// `predict`), untruncated.
    Prompt(PairPrompt),
}

/// The `config.json` keys of a classifier's folder.
#[derive(Deserialize, Default)]
pub(crate) struct ClassifierConfig {
    #[serde(default)]
    pub(crate) architectures: Vec<String>,
    model_type: Option<String>,
    num_labels: Option<usize>,
    id2label: Option<std::collections::BTreeMap<String, String>>,
    problem_type: Option<String>,
    type_vocab_size: Option<usize>,
    sentence_transformers: Option<serde_json::Value>,
    sbert_ce_default_activation_function: Option<String>,
}

#[derive(Deserialize, Default)]
struct StCrossConfig {
    model_type: Option<String>,
    activation_fn: Option<String>,
}

impl CrossFolder {
    /// `--cross-model`: a folder, or a Hugging Face id from the local cache
    /// (downloaded only when `lookup` allows it), read and checked.
    pub fn find(spec: &str, lookup: &ModelLookup) -> Result<CrossFolder, Error> {
        let path = Path::new(spec);
        let dir = if path.is_dir() {
            path.to_path_buf()
        } else if looks_like_hub_id(spec) {
            from_hub(spec, lookup.offline)?
        } else {
            return Err(Error::config(format!(
                "--cross-model {spec}: no such folder, and not a Hugging Face id (ORG/NAME)"
            )));
        };
        CrossFolder::read(&dir)
    }

    /// Reads and checks `dir`: exit 78 naming the reason for anything that
    /// is not a single-label sequence classifier of a family with a head.
    pub fn read(dir: &Path) -> Result<CrossFolder, Error> {
        let config_path = dir.join("config.json");
        let refuse = |why: String| Error::config(format!("{}: {why}", config_path.display()));
        let text = std::fs::read_to_string(&config_path).map_err(|e| {
            Error::config(format!(
                "{}: not a usable cross-encoder folder: {e}",
                config_path.display()
            ))
        })?;
        let c: ClassifierConfig = serde_json::from_str(&text).map_err(|e| refuse(e.to_string()))?;
        if hhem::is_hhem(&c.architectures, c.model_type.as_deref()) {
            let value: serde_json::Value =
                serde_json::from_str(&text).map_err(|e| refuse(e.to_string()))?;
            let hhem = Hhem::read(dir, &value).map_err(refuse)?;
            return CrossFolder::hhem(dir, &c, hhem);
        }
        let model_type = c.model_type.clone().unwrap_or_else(|| "bert".into());
        let architecture = c
            .architectures
            .first()
            .cloned()
            .ok_or_else(|| refuse("names no architectures: a cross-encoder is a *ForSequenceClassification checkpoint".into()))?;
        if architecture.ends_with("ForTokenClassification") {
            return CrossFolder::tokens(dir, &c, architecture);
        }
        if !architecture.ends_with("ForSequenceClassification") {
            let what = if architecture.ends_with("ForMaskedLM") || architecture.ends_with("Model") {
                "an encoder without a classification head (an embedding model: use --model)"
            } else {
                "not a sequence classifier"
            };
            return Err(refuse(format!(
                "{architecture} is {what}; --cross-model takes a *ForSequenceClassification checkpoint"
            )));
        }
        let heads = crate::family::with_heads();
        if crate::family::is_decoder(&model_type) {
            return Err(refuse(format!(
                "{architecture} is a decoder's classifier (model_type '{model_type}'); refscore runs encoder cross-encoders only ({})",
                heads.join(", ")
            )));
        }
        if !heads.contains(&model_type.as_str()) {
            return Err(refuse(format!(
                "model_type '{model_type}' has no sequence-classification head in refscore (it has: {})",
                heads.join(", ")
            )));
        }
        if model_type == "t5" {
            return Err(refuse(format!(
                "{architecture}: refscore runs T5's encoder with HHEM-2.1-Open's head ({}) only; transformers' T5ForSequenceClassification reads T5's decoder",
                hhem::ARCHITECTURE
            )));
        }
        if let Some(p) = c.problem_type.as_deref() {
            if p == "multi_label_classification" {
                return Err(refuse(format!(
                    "problem_type '{p}': a multi-label classifier's outputs are not one distribution; refscore runs single-label and regression heads"
                )));
            }
        }
        let labels = labels(&c).map_err(refuse)?;
        let st_config = dir.join("config_sentence_transformers.json");
        // sentence-transformers reads this file only beside a modules.json.
        let st: StCrossConfig = match std::fs::read_to_string(&st_config) {
            Ok(t) if dir.join("modules.json").is_file() => serde_json::from_str(&t)
                .map_err(|e| Error::config(format!("{}: {e}", st_config.display())))?,
            _ => StCrossConfig::default(),
        };
        if let Some(kind) = st.model_type.as_deref() {
            if kind != "CrossEncoder" {
                return Err(Error::config(format!(
                    "{}: model_type '{kind}': not a CrossEncoder folder (an embedding model goes to --model)",
                    st_config.display()
                )));
            }
        }
        let st = match st.model_type {
            Some(_) => st,
            // Without model_type CrossEncoder, sentence-transformers ignores it.
            None => StCrossConfig::default(),
        };
        let (activation, activation_from) = activation(&c, &st, labels.len()).map_err(refuse)?;
        let files = read_folder(dir, false)?;
        if files.kind != ModelKind::Transformer {
            return Err(refuse(
                "a static embedding table has no classification head".into(),
            ));
        }
        let token_types = gives_token_types(dir, files.tokenizer_class.as_deref())?;
        let folder = CrossFolder {
            files,
            architecture,
            labels,
            activation,
            activation_from,
            token_types,
            type_vocab_size: c.type_vocab_size.unwrap_or(0),
            recipe: Recipe::of_folder(dir)?.unwrap_or_else(Recipe::default_recipe),
            input: CrossInput::Pair,
            head: CrossHead::Sequence,
        };
        folder.check_recipe()?;
        Ok(folder)
    }

    /// A token classifier's folder, read as a span detector: two labels
    /// (LettuceDetect's: 0 supported, 1 hallucinated), no recipe (the
    /// detector builds its own input), the detector's limit.
    fn tokens(
        dir: &Path,
        c: &ClassifierConfig,
        architecture: String,
    ) -> Result<CrossFolder, Error> {
        let refuse =
            |why: String| Error::config(format!("{}: {why}", dir.join("config.json").display()));
        let labels = labels(c).map_err(refuse)?;
        if labels.len() != 2 {
            return Err(refuse(format!(
                "{architecture} is a token classifier with {} labels; refscore runs token classifiers as LettuceDetect's span detector, which reads two (0 supported, 1 hallucinated)",
                labels.len()
            )));
        }
        let model_type = c.model_type.clone().unwrap_or_else(|| "bert".into());
        let heads = crate::family::with_heads();
        if !heads.contains(&model_type.as_str()) {
            return Err(refuse(format!(
                "model_type '{model_type}' has no token-classification head in refscore (it has: {})",
                heads.join(", ")
            )));
        }
        let files = read_folder(dir, false)?;
        if files.kind != ModelKind::Transformer {
            return Err(refuse("a static embedding table has no token head".into()));
        }
        let token_types = gives_token_types(dir, files.tokenizer_class.as_deref())?;
        Ok(CrossFolder {
            files,
            architecture,
            labels,
            activation: ScoreActivation::Identity,
            activation_from: "LettuceDetect's inference (a softmax over each token's labels)",
            token_types,
            type_vocab_size: c.type_vocab_size.unwrap_or(0),
            recipe: Recipe::default_recipe(),
            input: CrossInput::Pair,
            head: CrossHead::Tokens,
        })
    }

    /// `--cross-recipe NAME|FILE` (None: the folder's own, else `nli`),
    /// checked against the model; refused for a span detector, which
    /// builds its input as LettuceDetect does.
    pub fn with_recipe(mut self, spec: Option<&str>) -> Result<CrossFolder, Error> {
        if let (Some(spec), CrossHead::Tokens) = (spec, self.head) {
            return Err(Error::config(format!(
                "--cross-recipe {spec}: {} is a token classifier ({}), run as LettuceDetect's span detector, which builds its own input; recipes are for sequence classifiers: leave --cross-recipe out",
                self.files.dir.display(),
                self.architecture
            )));
        }
        if let Some(spec) = spec {
            self.recipe = Recipe::resolve(spec)?;
            self.check_recipe()?;
        }
        Ok(self)
    }

    /// The recipe's fit to the model: the labels its score reads, the
    /// special tokens its template names, its length (exit 78 naming what
    /// does not fit).
    fn check_recipe(&self) -> Result<(), Error> {
        let r = &self.recipe;
        let refuse = |why: String| {
            Error::config(format!(
                "{}: recipe '{}' ({}): {why}",
                self.files.dir.display(),
                r.name(),
                r.from
            ))
        };
        r.score_labels(&self.labels).map_err(refuse)?;
        for key in r.specials() {
            if special_token(&self.files.dir, key).is_none() {
                return Err(refuse(format!(
                    "its template names the tokenizer's {key}, which tokenizer_config.json does not set"
                )));
            }
        }
        if let Some(n) = r.max_length(&self.files.family) {
            let limit = crate::family::token_limit(&self.files);
            if n > limit {
                return Err(refuse(format!(
                    "max_length {n} is more than this {} reads ({limit} positions)",
                    self.architecture
                )));
            }
        }
        Ok(())
    }

    /// The tokens an input may have: a span detector's limit; else the
    /// recipe's `max_length` for this model, else the folder's.
    pub fn max_length(&self) -> usize {
        if self.head == CrossHead::Tokens {
            return super::spans::detector_max_length(self.files.max_seq_length);
        }
        self.recipe
            .max_length(&self.files.family)
            .unwrap_or(self.files.max_seq_length)
    }

    /// HHEM-2.1-Open's folder ([`Hhem`]): its T5 encoder with the
    /// foundation's config, the first position's logits of its token
    /// classifier, the prompt, no truncation (its `predict` has none), and
    /// the logits as they are (`predict` takes their softmax).
    fn hhem(dir: &Path, c: &ClassifierConfig, hhem: Hhem) -> Result<CrossFolder, Error> {
        let mut files = read_folder_with(dir, false, Some(hhem.t5_config))?;
        files.max_seq_length = usize::MAX;
        let folder = CrossFolder {
            files,
            architecture: hhem::ARCHITECTURE.to_string(),
            labels: labels(c).map_err(|e| {
                Error::config(format!("{}: {e}", dir.join("config.json").display()))
            })?,
            activation: ScoreActivation::Identity,
            activation_from: "HHEM-2.1-Open's predict (a softmax over the logits)",
            token_types: false,
            type_vocab_size: 0,
            recipe: Recipe::of_folder(dir)?.unwrap_or_else(Recipe::default_recipe),
            input: CrossInput::Prompt(hhem.prompt),
            head: CrossHead::Sequence,
        };
        folder.check_recipe()?;
        Ok(folder)
    }

    /// Whether the tokenizer's want of token types changes the scores: the
    /// model embeds a second token type. The fingerprint and the pair store
    /// name it only then, so that earlier runs of every other model still
    /// resume and reuse their scores.
    pub(crate) fn drops_token_types(&self) -> bool {
        !self.token_types && self.type_vocab_size > 1
    }
}

/// A special token `tokenizer_config.json` names under `key`
/// (`eos_token`...): a string, or an AddedToken's `content`.
pub(crate) fn special_token(dir: &Path, key: &str) -> Option<String> {
    let text = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let t = v.get(key)?;
    t.as_str()
        .or_else(|| t.get("content").and_then(|c| c.as_str()))
        .map(str::to_string)
}

/// Tokenizer classes (and their `Fast` twins) whose `model_input_names`
/// lack `token_type_ids` in transformers: they send the model no token
/// types. Every other class has transformers' default, which has them.
const NO_TOKEN_TYPES: &[&str] = &[
    "BartTokenizer",
    "BigBirdTokenizer",
    "CamembertTokenizer",
    "DistilBertTokenizer",
    "GPT2Tokenizer",
    "LlamaTokenizer",
    "LongformerTokenizer",
    "MPNetTokenizer",
    "RobertaTokenizer",
    "T5Tokenizer",
    "XLMRobertaTokenizer",
];

/// Whether transformers' tokenizer for `dir` returns `token_type_ids`:
/// where `tokenizer_config.json` lists `model_input_names`, whether they
/// name them (the list overrides the class's); else whether the
/// `tokenizer_class` keeps transformers' default list, which names them.
pub(crate) fn gives_token_types(dir: &Path, class: Option<&str>) -> Result<bool, Error> {
    let path = dir.join("tokenizer_config.json");
    if let Ok(text) = std::fs::read_to_string(&path) {
        let v: serde_json::Value = serde_json::from_str(&text)
            .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
        if let Some(names) = v.get("model_input_names").and_then(|n| n.as_array()) {
            return Ok(names.iter().any(|n| n == "token_type_ids"));
        }
    }
    Ok(class.is_none_or(|c| !NO_TOKEN_TYPES.contains(&c.strip_suffix("Fast").unwrap_or(c))))
}

/// The label names by index: `id2label`, else `LABEL_k` for `num_labels`
/// (transformers' defaults: two labels). Keys are read as transformers
/// reads them (`int(key)`), so two spellings of one index ("0" and "00")
/// are one index named twice: refused, since which name it has is unknown.
pub(crate) fn labels(c: &ClassifierConfig) -> Result<Vec<String>, String> {
    match &c.id2label {
        Some(map) if !map.is_empty() => {
            let mut labels: Vec<Option<(&str, &str)>> = vec![None; map.len()];
            for (k, v) in map {
                let i: usize = k.parse().ok().filter(|&i| i < map.len()).ok_or_else(|| {
                    format!("id2label key '{k}' is not an index below {}", map.len())
                })?;
                if let Some((first, _)) = labels[i] {
                    return Err(format!(
                        "id2label names index {i} twice ('{first}' and '{k}'); each of the {} labels needs its own index",
                        map.len()
                    ));
                }
                labels[i] = Some((k, v));
            }
            // n distinct indices below n: every index is named.
            Ok(labels
                .into_iter()
                .map(|l| l.map_or_else(String::new, |(_, v)| v.to_string()))
                .collect())
        }
        _ => Ok((0..c.num_labels.unwrap_or(2))
            .map(|i| format!("LABEL_{i}"))
            .collect()),
    }
}

/// sentence-transformers' rule: the folder's activation where it names a
/// `torch.` one, else Sigmoid for one output and Identity for more. (A
/// path outside `torch.` is code sentence-transformers runs only with
/// `trust_remote_code`; without it, it uses the default, and so does
/// refscore.)
fn activation(
    c: &ClassifierConfig,
    st: &StCrossConfig,
    labels: usize,
) -> Result<(ScoreActivation, &'static str), String> {
    let legacy = c
        .sentence_transformers
        .as_ref()
        .and_then(|v| v.get("activation_fn"))
        .and_then(|v| v.as_str());
    // In sentence-transformers' order: its own config file (read only in a
    // CrossEncoder folder with modules.json), then the block older
    // versions wrote into config.json, then the oldest key.
    let named = [
        (
            st.activation_fn.as_deref(),
            "config_sentence_transformers.json activation_fn",
        ),
        (legacy, "config.json sentence_transformers.activation_fn"),
        (
            c.sbert_ce_default_activation_function.as_deref(),
            "config.json sbert_ce_default_activation_function",
        ),
    ];
    if let Some((path, from)) = named
        .into_iter()
        .find_map(|(p, from)| p.filter(|p| p.starts_with("torch.")).map(|p| (p, from)))
    {
        return ScoreActivation::from_path(path)
            .map(|a| (a, from))
            .ok_or_else(|| {
                format!("{from} is '{path}'; refscore applies Sigmoid, Identity or Tanh")
            });
    }
    Ok(if labels == 1 {
        (ScoreActivation::Sigmoid, "default for one output")
    } else {
        (ScoreActivation::Identity, "default for several outputs")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(
        config: &str,
        st: &str,
        labels: usize,
    ) -> Result<(ScoreActivation, &'static str), String> {
        let c: ClassifierConfig = serde_json::from_str(config).unwrap();
        let st: StCrossConfig = serde_json::from_str(st).unwrap();
        activation(&c, &st, labels)
    }

    #[test]
    fn the_activation_is_read_as_sentence_transformers_reads_it() {
        // Defaults: Sigmoid for one output, Identity for more.
        assert_eq!(read("{}", "{}", 1).unwrap().0, ScoreActivation::Sigmoid);
        assert_eq!(read("{}", "{}", 3).unwrap().0, ScoreActivation::Identity);
        // The legacy block: a one-output model with Identity (ms-marco's).
        let legacy =
            r#"{"sentence_transformers": {"activation_fn": "torch.nn.modules.linear.Identity"}}"#;
        assert_eq!(read(legacy, "{}", 1).unwrap().0, ScoreActivation::Identity);
        // sentence-transformers' own file wins over the block.
        let st = r#"{"model_type": "CrossEncoder", "activation_fn": "torch.nn.modules.activation.Sigmoid"}"#;
        let (a, from) = read(legacy, st, 1).unwrap();
        assert_eq!(
            (a, from),
            (
                ScoreActivation::Sigmoid,
                "config_sentence_transformers.json activation_fn"
            )
        );
        // The oldest key.
        let oldest = r#"{"sbert_ce_default_activation_function": "torch.nn.Tanh"}"#;
        assert_eq!(read(oldest, "{}", 1).unwrap().0, ScoreActivation::Tanh);
        // Code outside torch: the default, as without trust_remote_code.
        let remote = r#"{"sentence_transformers": {"activation_fn": "my_pkg.Scaled"}}"#;
        assert_eq!(read(remote, "{}", 1).unwrap().0, ScoreActivation::Sigmoid);
        // A torch function refscore does not apply is refused by name.
        let relu =
            r#"{"sentence_transformers": {"activation_fn": "torch.nn.modules.activation.ReLU"}}"#;
        let err = read(relu, "{}", 1).unwrap_err();
        assert!(err.contains("ReLU"), "{err}");
    }

    #[test]
    fn token_types_follow_the_tokenizers_input_names() {
        let dir = tempfile::tempdir().unwrap();
        assert!(gives_token_types(dir.path(), None).unwrap());
        assert!(gives_token_types(dir.path(), Some("BertTokenizer")).unwrap());
        assert!(!gives_token_types(dir.path(), Some("DistilBertTokenizerFast")).unwrap());
        assert!(!gives_token_types(dir.path(), Some("XLMRobertaTokenizer")).unwrap());
        let config = dir.path().join("tokenizer_config.json");
        std::fs::write(
            &config,
            r#"{"model_input_names": ["input_ids", "token_type_ids"]}"#,
        )
        .unwrap();
        assert!(gives_token_types(dir.path(), Some("DistilBertTokenizer")).unwrap());
        std::fs::write(
            &config,
            r#"{"model_input_names": ["input_ids", "attention_mask"]}"#,
        )
        .unwrap();
        assert!(!gives_token_types(dir.path(), Some("BertTokenizer")).unwrap());
    }

    #[test]
    fn labels_default_as_transformers_does() {
        let c: ClassifierConfig = serde_json::from_str("{}").unwrap();
        assert_eq!(labels(&c).unwrap(), ["LABEL_0", "LABEL_1"]);
        let c: ClassifierConfig =
            serde_json::from_str(r#"{"id2label": {"1": "entailment", "0": "contradiction"}}"#)
                .unwrap();
        assert_eq!(labels(&c).unwrap(), ["contradiction", "entailment"]);
        let c: ClassifierConfig =
            serde_json::from_str(r#"{"id2label": {"0": "a", "2": "b"}}"#).unwrap();
        assert!(labels(&c).is_err());
        // One index spelt twice is one index named twice, not a panic.
        let c: ClassifierConfig =
            serde_json::from_str(r#"{"id2label": {"0": "a", "00": "b"}}"#).unwrap();
        let err = labels(&c).unwrap_err();
        assert!(err.contains("index 0 twice"), "{err}");
    }
}
