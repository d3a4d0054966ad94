//! Checker recipes: how a cross-encoder's input is built from a premise
//! (the reference, a document) and a hypothesis (the output, a claim), and
//! how its outputs become a score, as data (a small JSON file) rather than a
//! code path per model. A recipe says
//!
//! * `input`: `"pair"` (the tokenizer's pair template, truncated
//!   `longest_first`: sentence-transformers' `CrossEncoder`) or
//!   `{"template": "..."}`, one text built from `{premise}`, `{hypothesis}`
//!   and the tokenizer's special tokens (`{eos}`, `{bos}`, `{cls}`, `{sep}`),
//!   truncated at its end as `tokenizer(text, truncation=True)` truncates;
//! * `max_length`: the tokens an input may have (a number, or one per
//!   `model_type`; absent: the folder's own limit);
//! * `chunk`: how a long premise is cut ([`Chunking`]), each chunk checked
//!   against the whole hypothesis;
//! * `score`: `"model"` (the folder's labels and activation, as today:
//!   `cross_score` for one output, the `nli_*` metrics for an NLI model), or
//!   one value: a label's probability after a softmax, or a logit (less
//!   another) through a sigmoid or as it is;
//! * `aggregate`: how the chunks' scores make the pair's (`max`, `min`,
//!   `mean`).
//!
//! The shipped recipes (`recipes/*.json`) are `nli` (the plain pair, the
//! default), `factcg`, `minicheck` and `hhem` (HHEM-2.1-Open's prompt and
//! its consistent label); `--cross-recipe FILE` reads one from a
//! file, and a model folder may name or hold its own in
//! `refscore_recipe.json`.

mod chunk;
pub mod punkt;
pub mod words;

use std::collections::BTreeMap;
use std::path::Path;

use refscore_core::Error;
use serde::{Deserialize, Serialize};
use serde_json::Value;

pub use chunk::{Chunking, Pack, Sentences, Unit};

/// The file beside config.json that names a folder's recipe or holds one.
pub const FOLDER_RECIPE: &str = "refscore_recipe.json";

/// The recipes shipped with refscore, by name.
const BUILTIN: [(&str, &str); 4] = [
    ("nli", include_str!("recipes/nli.json")),
    ("factcg", include_str!("recipes/factcg.json")),
    ("minicheck", include_str!("recipes/minicheck.json")),
    ("hhem", include_str!("recipes/hhem.json")),
];

/// The recipe used when none is named: the plain pair, the folder's labels.
pub const DEFAULT_RECIPE: &str = "nli";

/// A recipe as its file writes it (every field that changes a score).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct RecipeFile {
    name: String,
    /// What it is and where it comes from (not part of the fingerprint).
    #[serde(default, skip_serializing)]
    about: Option<String>,
    input: InputFile,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    max_length: Option<MaxLength>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    chunk: Option<Chunking>,
    score: ScoreFile,
    #[serde(default)]
    aggregate: Aggregate,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum InputFile {
    Named(String),
    Template { template: String },
}

/// The tokens an input may have.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum MaxLength {
    /// The same for every model.
    Fixed(usize),
    /// By `config.json`'s `model_type` (a type not listed keeps the
    /// folder's own limit).
    ByModelType(BTreeMap<String, usize>),
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
enum ScoreFile {
    Named(String),
    Label {
        label: LabelRef,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        minus: Option<LabelRef>,
        activation: Activation,
    },
}

/// A label by index or by its `id2label` name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum LabelRef {
    Index(usize),
    Name(String),
}

/// What turns the logits into the score.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Activation {
    /// A softmax over all the logits; the label's probability.
    Softmax,
    /// The logit (less `minus`'s) through a sigmoid.
    Sigmoid,
    /// The logit (less `minus`'s) as it is.
    None,
}

/// How the chunks' scores become the pair's.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Aggregate {
    /// The best-supported chunk (FactCG, MiniCheck).
    #[default]
    Max,
    Min,
    Mean,
}

impl Aggregate {
    /// The aggregate of `values` (not empty).
    pub fn of(self, values: &[f64]) -> f64 {
        match self {
            Aggregate::Max => values.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            Aggregate::Min => values.iter().copied().fold(f64::INFINITY, f64::min),
            Aggregate::Mean => values.iter().sum::<f64>() / values.len() as f64,
        }
    }
}

/// The value a one-value score reads, resolved against a model's labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScoreLabels {
    pub label: usize,
    pub minus: Option<usize>,
    pub activation: Activation,
}

impl ScoreLabels {
    /// The score of one input's logits, in f64.
    pub fn apply(&self, logits: &[f32]) -> f64 {
        let x = |i: usize| f64::from(logits[i]);
        match self.activation {
            Activation::Softmax => {
                let top = logits
                    .iter()
                    .map(|&v| f64::from(v))
                    .fold(f64::NEG_INFINITY, f64::max);
                let sum: f64 = logits.iter().map(|&v| (f64::from(v) - top).exp()).sum();
                (x(self.label) - top).exp() / sum
            }
            Activation::Sigmoid | Activation::None => {
                let v = x(self.label) - self.minus.map_or(0.0, x);
                if self.activation == Activation::Sigmoid {
                    1.0 / (1.0 + (-v).exp())
                } else {
                    v
                }
            }
        }
    }
}

/// One piece of an input template.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Text(String),
    Premise,
    Hypothesis,
    /// A special token of the tokenizer, by its `tokenizer_config.json` key
    /// (`eos_token`...).
    Special(&'static str),
}

/// How an input is built.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// The tokenizer's pair template on (premise, hypothesis).
    Pair,
    /// One text.
    Template(Vec<Piece>),
}

/// Which value of the outputs is the score.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Score {
    /// The folder's labels and activation, read by the metrics.
    Model,
    /// One value.
    Label {
        label: LabelRef,
        minus: Option<LabelRef>,
        activation: Activation,
    },
}

/// A checked recipe.
#[derive(Debug, Clone, PartialEq)]
pub struct Recipe {
    file: RecipeFile,
    /// Where it came from: `built-in`, a file's path.
    pub from: String,
    pub input: Input,
    pub score: Score,
}

impl Recipe {
    /// The names of the shipped recipes.
    pub fn names() -> Vec<&'static str> {
        BUILTIN.iter().map(|(n, _)| *n).collect()
    }

    /// A shipped recipe by name.
    pub fn builtin(name: &str) -> Option<Recipe> {
        BUILTIN.iter().find(|(n, _)| *n == name).map(|(_, text)| {
            Recipe::parse(text, "built-in".into()).expect("the shipped recipes are valid")
        })
    }

    /// The default: the plain pair.
    pub fn default_recipe() -> Recipe {
        Recipe::builtin(DEFAULT_RECIPE).expect("the default recipe ships")
    }

    /// `--cross-recipe NAME|FILE`: a shipped recipe by name, else a file.
    pub fn resolve(spec: &str) -> Result<Recipe, Error> {
        if let Some(r) = Recipe::builtin(spec) {
            return Ok(r);
        }
        let path = Path::new(spec);
        if !path.is_file() {
            return Err(Error::usage(format!(
                "--cross-recipe {spec}: not a recipe's name ({}) and no such file",
                Recipe::names().join(", ")
            )));
        }
        Recipe::read(path)
    }

    /// Reads a recipe file (exit 78 naming the file and what is wrong).
    pub fn read(path: &Path) -> Result<Recipe, Error> {
        let text = refscore_core::files::read_text(path, "recipe file")?;
        Recipe::parse(&text, path.display().to_string())
            .map_err(|why| Error::config(format!("{}: {why}", path.display())))
    }

    /// A folder's `refscore_recipe.json`, where it has one: `{"recipe":
    /// "NAME"}` naming a shipped recipe, or a whole recipe.
    pub fn of_folder(dir: &Path) -> Result<Option<Recipe>, Error> {
        let path = dir.join(FOLDER_RECIPE);
        if !path.is_file() {
            return Ok(None);
        }
        let text = refscore_core::files::read_text(&path, "recipe file")?;
        let bad = |why: String| Error::config(format!("{}: {why}", path.display()));
        let v: Value = serde_json::from_str(&text).map_err(|e| bad(e.to_string()))?;
        if let Some(obj) = v.as_object() {
            if obj.len() == 1 {
                if let Some(name) = obj.get("recipe") {
                    let name = name.as_str().unwrap_or_default();
                    return Recipe::builtin(name)
                        .map(|mut r| {
                            r.from = format!("{} (built-in)", path.display());
                            Some(r)
                        })
                        .ok_or_else(|| {
                            bad(format!(
                                "recipe '{name}' is not a shipped recipe ({})",
                                Recipe::names().join(", ")
                            ))
                        });
                }
            }
        }
        Recipe::parse(&text, path.display().to_string())
            .map(Some)
            .map_err(bad)
    }

    /// Parses and checks a recipe's JSON.
    pub fn parse(text: &str, from: String) -> Result<Recipe, String> {
        let file: RecipeFile = serde_json::from_str(text).map_err(|e| e.to_string())?;
        if file.name.trim().is_empty() {
            return Err("name must not be empty".into());
        }
        let input = match &file.input {
            InputFile::Named(n) if n == "pair" => Input::Pair,
            InputFile::Named(n) => {
                return Err(format!(
                    "input '{n}': expected \"pair\" or {{\"template\": \"...\"}}"
                ))
            }
            InputFile::Template { template } => Input::Template(parse_template(template)?),
        };
        let score = match &file.score {
            ScoreFile::Named(n) if n == "model" => Score::Model,
            ScoreFile::Named(n) => {
                return Err(format!(
                    "score '{n}': expected \"model\" or {{\"label\": L, \"activation\": \"softmax\"|\"sigmoid\"|\"none\"}}"
                ))
            }
            ScoreFile::Label {
                label,
                minus,
                activation,
            } => {
                if minus.is_some() && *activation == Activation::Softmax {
                    return Err("score.minus goes with activation sigmoid or none (a softmax reads every logit)".into());
                }
                Score::Label {
                    label: label.clone(),
                    minus: minus.clone(),
                    activation: *activation,
                }
            }
        };
        if let Some(chunk) = &file.chunk {
            chunk.check()?;
            if score == Score::Model {
                return Err("chunk needs a score of one value (score \"model\" gives a distribution per direction; name a label)".into());
            }
        }
        match &file.max_length {
            Some(MaxLength::Fixed(n)) if *n < 2 => {
                return Err("max_length must be at least 2".into())
            }
            Some(MaxLength::ByModelType(m)) if m.values().any(|n| *n < 2) => {
                return Err("max_length must be at least 2".into())
            }
            _ => {}
        }
        Ok(Recipe {
            file,
            from,
            input,
            score,
        })
    }

    /// Its name.
    pub fn name(&self) -> &str {
        &self.file.name
    }

    /// The plain pair with the folder's labels, and no chunking: today's
    /// cross-encoder, whose fingerprint and caches name no recipe.
    pub fn is_plain(&self) -> bool {
        self.input == Input::Pair
            && self.score == Score::Model
            && self.file.chunk.is_none()
            && self.file.max_length.is_none()
    }

    /// Its chunking, where it has one.
    pub fn chunking(&self) -> Option<&Chunking> {
        self.file.chunk.as_ref()
    }

    /// How chunk scores combine.
    pub fn aggregate(&self) -> Aggregate {
        self.file.aggregate
    }

    /// Its `max_length` for a model of `model_type` (None: the folder's).
    pub fn max_length(&self, model_type: &str) -> Option<usize> {
        match self.file.max_length.as_ref()? {
            MaxLength::Fixed(n) => Some(*n),
            MaxLength::ByModelType(m) => m.get(model_type).copied(),
        }
    }

    /// Everything in it that changes a score, for fingerprints and cache
    /// keys.
    pub fn fingerprint(&self) -> Value {
        serde_json::to_value(&self.file).expect("a recipe serialises")
    }

    /// The indices its score reads in a model of `labels`, where it reads
    /// one value (None for `score "model"`); the error says what is missing.
    pub fn score_labels(&self, labels: &[String]) -> Result<Option<ScoreLabels>, String> {
        let Score::Label {
            label,
            minus,
            activation,
        } = &self.score
        else {
            return Ok(None);
        };
        let find = |l: &LabelRef| match l {
            LabelRef::Index(i) if *i < labels.len() => Ok(*i),
            LabelRef::Index(i) => Err(format!(
                "recipe '{}' reads label {i}; the model has {} ({})",
                self.name(),
                labels.len(),
                labels.join(", ")
            )),
            LabelRef::Name(n) => labels.iter().position(|l| l == n).ok_or_else(|| {
                format!(
                    "recipe '{}' reads label '{n}'; the model's labels are {}",
                    self.name(),
                    labels.join(", ")
                )
            }),
        };
        Ok(Some(ScoreLabels {
            label: find(label)?,
            minus: minus.as_ref().map(find).transpose()?,
            activation: *activation,
        }))
    }

    /// The template's special tokens (`tokenizer_config.json` keys).
    pub fn specials(&self) -> Vec<&'static str> {
        match &self.input {
            Input::Template(pieces) => pieces
                .iter()
                .filter_map(|p| match p {
                    Piece::Special(k) => Some(*k),
                    _ => None,
                })
                .collect(),
            Input::Pair => Vec::new(),
        }
    }

    /// What the summary says of it.
    pub fn describe(&self) -> Value {
        let mut v = self.fingerprint();
        v["from"] = Value::String(self.from.clone());
        v
    }
}

/// Splits a template into its pieces: `{premise}`, `{hypothesis}`, the
/// special tokens `{eos}`, `{bos}`, `{cls}`, `{sep}`, and text (`{{` and
/// `}}` for literal braces, as in Python's `str.format`).
fn parse_template(template: &str) -> Result<Vec<Piece>, String> {
    let mut pieces = Vec::new();
    let mut text = String::new();
    let mut rest = template;
    while let Some(c) = rest.chars().next() {
        if rest.starts_with("{{") || rest.starts_with("}}") {
            text.push(c);
            rest = &rest[2..];
            continue;
        }
        if c == '}' {
            return Err("input.template: a single '}' (write '}}' for a brace)".into());
        }
        if c != '{' {
            text.push(c);
            rest = &rest[c.len_utf8()..];
            continue;
        }
        let end = rest
            .find('}')
            .ok_or("input.template: a '{' is not closed (write '{{' for a brace)")?;
        let piece = match &rest[1..end] {
            "premise" => Piece::Premise,
            "hypothesis" => Piece::Hypothesis,
            "eos" => Piece::Special("eos_token"),
            "bos" => Piece::Special("bos_token"),
            "cls" => Piece::Special("cls_token"),
            "sep" => Piece::Special("sep_token"),
            other => {
                return Err(format!(
                    "input.template: {{{other}}} is not a field (premise, hypothesis, eos, bos, cls, sep)"
                ))
            }
        };
        if !text.is_empty() {
            pieces.push(Piece::Text(std::mem::take(&mut text)));
        }
        pieces.push(piece);
        rest = &rest[end + 1..];
    }
    if !text.is_empty() {
        pieces.push(Piece::Text(text));
    }
    for (want, name) in [
        (Piece::Premise, "premise"),
        (Piece::Hypothesis, "hypothesis"),
    ] {
        if !pieces.contains(&want) {
            return Err(format!("input.template has no {{{name}}}"));
        }
    }
    Ok(pieces)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_recipes_parse() {
        for name in Recipe::names() {
            let r = Recipe::builtin(name).unwrap();
            assert_eq!(r.name(), name);
        }
        assert!(Recipe::default_recipe().is_plain());
        let f = Recipe::builtin("factcg").unwrap();
        assert!(!f.is_plain());
        assert_eq!(f.max_length("deberta-v2"), Some(2048));
        let m = Recipe::builtin("minicheck").unwrap();
        assert_eq!(m.max_length("roberta"), Some(512));
        assert_eq!(m.max_length("deberta-v2"), Some(2048));
        assert_ne!(f.fingerprint(), m.fingerprint());
    }

    #[test]
    fn the_hhem_recipe_is_hhems_prompt_and_label() {
        let r = Recipe::builtin("hhem").unwrap();
        let Input::Template(pieces) = &r.input else {
            panic!("hhem's input is a template")
        };
        let filled: String = pieces
            .iter()
            .map(|p| match p {
                Piece::Text(t) => t.as_str(),
                Piece::Premise => "a {text2} premise",
                Piece::Hypothesis => "a hypothesis",
                Piece::Special(k) => panic!("hhem names no special token ({k})"),
            })
            .collect();
        let prompt = crate::cross::PairPrompt::parse(crate::cross::HHEM_PROMPT).unwrap();
        assert_eq!(filled, prompt.fill("a {text2} premise", "a hypothesis"));
        let labels = ["hallucinated".to_string(), "consistent".to_string()];
        let score = r.score_labels(&labels).unwrap().unwrap();
        assert_eq!(score.label, crate::cross::HHEM_CONSISTENT);
        assert_eq!(score.activation, Activation::Softmax);
        assert!(r.chunking().is_none() && r.max_length("t5").is_none());
    }

    #[test]
    fn templates_and_bad_recipes_are_checked() {
        let t = parse_template("{premise}{eos}{hypothesis} {{x}}").unwrap();
        assert_eq!(
            t,
            [
                Piece::Premise,
                Piece::Special("eos_token"),
                Piece::Hypothesis,
                Piece::Text(" {x}".into())
            ]
        );
        assert!(parse_template("{premise}").is_err());
        assert!(parse_template("{premise} {claim} {hypothesis}").is_err());
        let bad = |json: &str| Recipe::parse(json, "test".into()).unwrap_err();
        assert!(bad(r#"{"name": "x", "input": "pair", "score": "model", "chunk": {"sentences": "punkt", "unit": "words", "size": 5, "join": " ", "pack": "minicheck"}}"#).contains("one value"));
        assert!(bad(r#"{"name": "x", "input": "pairs", "score": "model"}"#).contains("pair"));
        assert!(
            bad(r#"{"name": "x", "input": "pair", "score": "model", "extra": 1}"#)
                .contains("extra")
        );
        assert!(bad(r#"{"name": "x", "input": "pair", "score": {"label": 1, "minus": 0, "activation": "softmax"}}"#).contains("minus"));
        // The description does not change the fingerprint.
        let a = Recipe::parse(
            r#"{"name": "x", "about": "a", "input": "pair", "score": "model"}"#,
            "t".into(),
        )
        .unwrap();
        let b = Recipe::parse(
            r#"{"name": "x", "about": "b", "input": "pair", "score": "model"}"#,
            "t".into(),
        )
        .unwrap();
        assert_eq!(a.fingerprint(), b.fingerprint());
    }
}
