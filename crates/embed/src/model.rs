//! Finding a sentence-transformers model folder and reading its settings
//! from its own files (modules.json, 1_Pooling/config.json,
//! sentence_bert_config.json, config.json), never from constants.

use std::path::{Path, PathBuf};

use refscore_core::Error;
use serde::Deserialize;

use crate::static_model::StaticLayout;

/// The default model folder, relative to the working directory, used when
/// neither `--model` nor `REFSCORE_MODEL_DIR` names one.
pub const DEFAULT_MODEL_DIR: &str = "models/all-MiniLM-L6-v2";

/// Files a sentence-transformers folder provides (the first three are required).
const FILES: [&str; 6] = [
    "config.json",
    "tokenizer.json",
    "model.safetensors",
    "modules.json",
    "1_Pooling/config.json",
    "sentence_bert_config.json",
];

/// How token vectors become one sentence vector (from 1_Pooling/config.json).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pooling {
    /// Mean over the real tokens (including [CLS] and [SEP]). Also serves
    /// `mean_sqrt_len_tokens`, which differs only in length, and vectors
    /// are compared by direction.
    Mean,
    /// The first token's vector ([CLS], `<s>`).
    Cls,
    /// Element-wise maximum over the real tokens.
    Max,
    /// Mean weighted by position (1 for the first token, 2 for the next…).
    WeightedMean,
    /// The last real token's vector.
    LastToken,
}

impl Pooling {
    /// The name used in the summary, fingerprint and cache key.
    pub fn name(self) -> &'static str {
        match self {
            Pooling::Mean => "mean",
            Pooling::Cls => "cls",
            Pooling::Max => "max",
            Pooling::WeightedMean => "weightedmean",
            Pooling::LastToken => "lasttoken",
        }
    }
}

/// A resolved model folder and the settings read from it.
#[derive(Debug, Clone)]
pub struct ModelFiles {
    /// The folder holding the files.
    pub dir: PathBuf,
    /// Pooling mode.
    pub pooling: Pooling,
    /// Truncation length in word-pieces, including [CLS]/[SEP].
    pub max_seq_length: usize,
    /// The model's position limit (max_position_embeddings).
    pub max_positions: usize,
    /// The modules modules.json lists after the Pooling (Dense layers,
    /// Normalize), in order: they turn the pooled vector into the
    /// sentence embedding.
    pub after_pooling: Vec<AfterPooling>,
    /// Whether pooling covers a prompt's tokens (the pooling config's
    /// `include_prompt`, true by default).
    pub include_prompt: bool,
    /// `sentence_bert_config.json`'s `do_lower_case`: texts are lower-cased
    /// before tokenising.
    pub lower_case: bool,
    /// Named prompts of `config_sentence_transformers.json` (e5's
    /// `query: `), and the one used when none is asked for.
    pub prompts: std::collections::BTreeMap<String, String>,
    pub default_prompt: Option<String>,
    /// The encoder's layers (num_hidden_layers): the deepest `--layer`.
    pub layers: usize,
    /// The model family (`config.json`'s `model_type`; `bert` when absent).
    pub family: String,
    /// `config.json`'s text, read once here: the family's loader parses
    /// the fields its arithmetic needs from it.
    pub config: String,
    /// `config.json`'s `pad_token_id` (0 when absent): the id padded
    /// batches are filled with.
    pub pad_token_id: u32,
    /// `tokenizer_config.json`'s `tokenizer_class`, when it names one: the
    /// Python class bert_score would encode with.
    pub tokenizer_class: Option<String>,
    /// The `cls_token` and `sep_token` `tokenizer_config.json` names (none
    /// for Qwen's tokenizer): the tokens bert_score gives no weight.
    /// `None` without that file.
    pub cls_sep_tokens: Option<Vec<String>>,
    /// What computes the folder's vectors.
    pub kind: ModelKind,
}

/// What computes a folder's vectors: the one place the two kinds of
/// embedding model part.
#[derive(Debug, Clone, PartialEq)]
pub enum ModelKind {
    /// A transformer run in Candle (its family in [`ModelFiles::family`]).
    Transformer,
    /// A table of token vectors, looked up and averaged.
    Static(StaticLayout),
}

impl ModelFiles {
    /// The width of the sentence embedding `encode` returns: the last
    /// Dense module's, else the encoder's hidden size as config.json names
    /// it (`hidden_size`; DistilBERT's `dim`, GPT-2-style `n_embd`).
    /// `None` when the config names none of them. Read before the weights
    /// load, so `--truncate-dim` is checked before any work.
    pub fn sentence_width(&self) -> Option<usize> {
        if let ModelKind::Static(layout) = &self.kind {
            return Some(self.last_dense_width().unwrap_or(layout.width));
        }
        self.last_dense_width().or_else(|| {
            let config: serde_json::Value = serde_json::from_str(&self.config).ok()?;
            ["hidden_size", "dim", "n_embd", "d_model"]
                .iter()
                .find_map(|k| config.get(*k).and_then(serde_json::Value::as_u64))
                .map(|w| w as usize)
        })
    }

    /// Whether the folder is a static embedding model.
    pub fn is_static(&self) -> bool {
        matches!(self.kind, ModelKind::Static(_))
    }

    fn last_dense_width(&self) -> Option<usize> {
        self.after_pooling.iter().rev().find_map(|m| match m {
            AfterPooling::Dense(d) => Some(d.outputs),
            AfterPooling::Normalize => None,
        })
    }

    /// SHA-256 (hex) over the files that determine an embedding (config,
    /// tokenizer, weights): what identifies "the same model" for the
    /// embedding cache and for a resumed run's fingerprint.
    pub fn content_sha256(&self) -> Result<String, Error> {
        use sha2::{Digest, Sha256};
        let mut h = Sha256::new();
        let dense = self.after_pooling.iter().filter_map(|m| match m {
            AfterPooling::Dense(d) => Some(d),
            AfterPooling::Normalize => None,
        });
        // A folder without Dense modules hashes as it always did, so its
        // cached embeddings and resumable runs stay valid.
        let own: Vec<PathBuf> = match &self.kind {
            ModelKind::Transformer => FILES[..3].iter().map(PathBuf::from).collect(),
            ModelKind::Static(layout) => layout
                .identity
                .iter()
                .map(|p| p.strip_prefix(&self.dir).unwrap_or(p).to_path_buf())
                .collect(),
        };
        let names = own
            .into_iter()
            .chain(dense.flat_map(|d| [d.config.clone(), d.weights.clone()]));
        for name in names {
            let path = self.dir.join(&name);
            let mut f = std::fs::File::open(&path)
                .map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
            h.update(name.to_string_lossy().as_bytes());
            std::io::copy(&mut f, &mut h)
                .map_err(|e| Error::io(format!("{}: {e}", path.display())))?;
        }
        Ok(format!("{:x}", h.finalize()))
    }
}

#[derive(Deserialize)]
struct Module {
    #[serde(rename = "type")]
    kind: String,
    path: String,
}

impl Module {
    /// The class name without its Python module path
    /// (`sentence_transformers.models.Pooling` → `Pooling`).
    fn class(&self) -> &str {
        self.kind.rsplit('.').next().unwrap_or("")
    }
}

/// One sentence-transformers module after the Pooling.
#[derive(Debug, Clone, PartialEq)]
pub enum AfterPooling {
    /// A `Dense` module: a linear layer and an activation on the vector.
    Dense(DenseFiles),
    /// A `Normalize` module: the vector scaled to unit length.
    Normalize,
}

impl AfterPooling {
    /// How the summary names it: `Dense(768→512, Tanh)`, `Normalize`.
    pub fn describe(&self) -> String {
        match self {
            AfterPooling::Dense(d) => {
                format!("Dense({}→{}, {:?})", d.inputs, d.outputs, d.activation)
            }
            AfterPooling::Normalize => "Normalize".into(),
        }
    }
}

/// A `Dense` module's settings (its `config.json`) and weights file, both
/// relative to the model folder so the content hash names them portably.
#[derive(Debug, Clone, PartialEq)]
pub struct DenseFiles {
    /// The module's `config.json`.
    pub config: PathBuf,
    /// `model.safetensors`, or `pytorch_model.bin` in older folders.
    pub weights: PathBuf,
    /// `in_features`: the width it takes.
    pub inputs: usize,
    /// `out_features`: the width it gives.
    pub outputs: usize,
    /// Whether the layer adds a bias.
    pub bias: bool,
    /// The activation after the linear map.
    pub activation: Activation,
}

/// The activations sentence-transformers' Dense modules are saved with
/// that refscore applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Activation {
    /// `torch.nn.Identity` (EmbeddingGemma, most Matryoshka heads).
    Identity,
    /// `torch.nn.Tanh`, sentence-transformers' default (distiluse, LaBSE).
    Tanh,
    /// `torch.nn.ReLU`.
    Relu,
    /// `torch.nn.GELU` (exact).
    Gelu,
    /// `torch.nn.Sigmoid`.
    Sigmoid,
}

impl Activation {
    /// The activation a Dense `config.json` names (a class path such as
    /// `torch.nn.modules.activation.Tanh`), if refscore applies it.
    fn named(path: &str) -> Option<Activation> {
        Some(match path.rsplit('.').next().unwrap_or("") {
            "Identity" => Activation::Identity,
            "Tanh" => Activation::Tanh,
            "ReLU" => Activation::Relu,
            "GELU" => Activation::Gelu,
            "Sigmoid" => Activation::Sigmoid,
            _ => return None,
        })
    }
}

/// What `modules.json` asks for after the transformer: where the pooling
/// settings are, and the modules after it.
struct Modules {
    pooling_dir: PathBuf,
    after_pooling: Vec<AfterPooling>,
}

#[derive(Deserialize)]
struct DenseConfig {
    in_features: usize,
    out_features: usize,
    #[serde(default = "yes")]
    bias: bool,
    #[serde(default = "tanh")]
    activation_function: String,
    /// sentence-transformers 5.x: which vector the module reads and
    /// writes (`sentence_embedding`), and a residual connection.
    #[serde(default)]
    module_input_name: Option<String>,
    #[serde(default)]
    module_output_name: Option<String>,
    #[serde(default)]
    use_residual: bool,
}

fn tanh() -> String {
    "torch.nn.modules.activation.Tanh".into()
}

/// Reads `modules.json` (when present) as sentence-transformers would run
/// it, module by module. refscore applies a Transformer (the folder
/// itself), then a Pooling, then any number of Dense and Normalize modules;
/// any other module would change the embedding, so a folder listing one is
/// refused by name rather than scored without it, and a module whose files
/// are missing is refused as sentence-transformers refuses it. Without
/// `modules.json`: `1_Pooling` if present, else mean pooling.
fn read_modules(dir: &Path, needs_pooling: bool) -> Result<Modules, Error> {
    let path = dir.join("modules.json");
    if !path.is_file() {
        return Ok(Modules {
            pooling_dir: dir.join("1_Pooling"),
            after_pooling: Vec::new(),
        });
    }
    let modules: Vec<Module> = read_json(&path)?;
    let refuse = |k: usize, m: &Module, why: &str| refuse_module(&path, k, m, why);
    let mut pooling_dir = None;
    let mut after_pooling = Vec::new();
    for (k, m) in modules.iter().enumerate() {
        match (k, m.class()) {
            (0, "Transformer") if m.path.is_empty() || m.path == "." => {}
            (0, "Transformer") => return Err(refuse(
                k,
                m,
                "refscore reads the transformer from the model folder itself, not from a subfolder",
            )),
            (0, _) => {
                return Err(refuse(
                    k,
                    m,
                    "the first module must be the Transformer that refscore runs",
                ))
            }
            (_, "Pooling") if pooling_dir.is_none() => {
                let pd = dir.join(&m.path);
                if !pd.join("config.json").is_file() {
                    return Err(refuse(
                        k,
                        m,
                        &format!("{} is missing", pd.join("config.json").display()),
                    ));
                }
                pooling_dir = Some(pd);
            }
            (_, "Normalize") if pooling_dir.is_some() => {
                after_pooling.push(AfterPooling::Normalize)
            }
            (_, "Dense") if pooling_dir.is_some() => {
                let dense = read_dense(dir, &m.path).map_err(|why| refuse(k, m, &why))?;
                after_pooling.push(AfterPooling::Dense(dense));
            }
            _ => {
                return Err(refuse(
                    k,
                    m,
                    "refscore applies a Transformer, a Pooling, then Dense and Normalize modules, \
                     and does not score a folder without every module it lists",
                ))
            }
        }
    }
    let pooling_dir = match pooling_dir {
        None if !needs_pooling && modules.len() == 1 => Some(dir.join("1_Pooling")),
        other => other,
    };
    let Some(pooling_dir) = pooling_dir else {
        return Err(Error::config(format!(
            "{}: no Pooling module: the folder gives no sentence embedding",
            path.display()
        )));
    };
    Ok(Modules {
        pooling_dir,
        after_pooling,
    })
}

/// The folder of a `StaticEmbedding` first module and the Dense and
/// Normalize modules after it, when `dir`'s modules.json starts with one
/// (`None` for any other folder). A static module pools by itself, so no
/// Pooling follows it.
pub(crate) fn after_static_embedding(
    dir: &Path,
) -> Result<Option<(PathBuf, Vec<AfterPooling>)>, Error> {
    let path = dir.join("modules.json");
    if !path.is_file() {
        return Ok(None);
    }
    let modules: Vec<Module> = read_json(&path)?;
    match modules.first() {
        Some(m) if m.class() == "StaticEmbedding" => {}
        _ => return Ok(None),
    }
    let mut after = Vec::new();
    for (k, m) in modules.iter().enumerate().skip(1) {
        match m.class() {
            "Normalize" => after.push(AfterPooling::Normalize),
            "Dense" => {
                let dense =
                    read_dense(dir, &m.path).map_err(|why| refuse_module(&path, k, m, &why))?;
                after.push(AfterPooling::Dense(dense));
            }
            _ => {
                return Err(refuse_module(
                    &path,
                    k,
                    m,
                    "after a StaticEmbedding refscore applies Dense and Normalize modules, \
                     and does not score a folder without every module it lists",
                ))
            }
        }
    }
    Ok(Some((dir.join(&modules[0].path), after)))
}

/// A module of `path` (modules.json) refused, saying why.
fn refuse_module(path: &Path, k: usize, m: &Module, why: &str) -> Error {
    Error::config(format!(
        "{}: module {k} ({}, path '{}'): {why}",
        path.display(),
        m.kind,
        m.path
    ))
}

/// A Dense module's settings, from its folder `sub` under `dir`; `Err` says
/// what is missing or not applied.
fn read_dense(dir: &Path, sub: &str) -> Result<DenseFiles, String> {
    let config = Path::new(sub).join("config.json");
    if !dir.join(&config).is_file() {
        return Err(format!("{} is missing", dir.join(&config).display()));
    }
    let c: DenseConfig = read_json(&dir.join(&config)).map_err(|e| e.to_string())?;
    let activation = Activation::named(&c.activation_function).ok_or_else(|| {
        format!(
            "activation_function '{}' is not applied by refscore (Identity, Tanh, ReLU, GELU, Sigmoid)",
            c.activation_function
        )
    })?;
    for (key, value) in [
        ("module_input_name", &c.module_input_name),
        ("module_output_name", &c.module_output_name),
    ] {
        if let Some(v) = value.as_deref().filter(|v| *v != "sentence_embedding") {
            return Err(format!(
                "{key} '{v}' is not applied by refscore (Dense on the sentence embedding only)"
            ));
        }
    }
    if c.use_residual {
        return Err("use_residual true is not applied by refscore".into());
    }
    let weights = ["model.safetensors", "pytorch_model.bin"]
        .iter()
        .map(|name| Path::new(sub).join(name))
        .find(|p| dir.join(p).is_file())
        .ok_or_else(|| {
            format!(
                "{} has no weights (model.safetensors or pytorch_model.bin)",
                dir.join(sub).display()
            )
        })?;
    if c.in_features == 0 || c.out_features == 0 {
        return Err(format!(
            "{}: in_features and out_features must be positive",
            dir.join(&config).display()
        ));
    }
    Ok(DenseFiles {
        config,
        weights,
        inputs: c.in_features,
        outputs: c.out_features,
        bias: c.bias,
        activation,
    })
}

#[derive(Deserialize)]
struct PoolingConfig {
    #[serde(default)]
    pooling_mode_cls_token: bool,
    #[serde(default)]
    pooling_mode_mean_tokens: bool,
    #[serde(default)]
    pooling_mode_max_tokens: bool,
    #[serde(default)]
    pooling_mode_mean_sqrt_len_tokens: bool,
    #[serde(default)]
    pooling_mode_weightedmean_tokens: bool,
    #[serde(default)]
    pooling_mode_lasttoken: bool,
    #[serde(default = "yes")]
    include_prompt: bool,
    /// sentence-transformers 6's form: one mode's name (or a list).
    #[serde(default)]
    pooling_mode: Option<serde_json::Value>,
}

/// A pooling mode by its sentence-transformers name.
fn pooling_named(name: &str) -> Option<Pooling> {
    Some(match name {
        "cls" => Pooling::Cls,
        "mean" | "mean_sqrt_len_tokens" => Pooling::Mean,
        "max" => Pooling::Max,
        "weightedmean" => Pooling::WeightedMean,
        "lasttoken" => Pooling::LastToken,
        _ => return None,
    })
}

fn yes() -> bool {
    true
}

#[derive(Deserialize, Default)]
struct StConfig {
    #[serde(default)]
    prompts: std::collections::BTreeMap<String, String>,
    #[serde(default)]
    default_prompt_name: Option<String>,
}

#[derive(Deserialize)]
struct SbertConfig {
    max_seq_length: Option<usize>,
    #[serde(default)]
    do_lower_case: bool,
}

#[derive(Deserialize)]
struct ConfigHead {
    model_type: Option<String>,
    /// nomic-ai's own NomicBERT config calls it `n_positions`.
    #[serde(alias = "n_positions")]
    max_position_embeddings: Option<usize>,
    pad_token_id: Option<u32>,
    /// DistilBERT calls it `n_layers`, nomic-ai's NomicBERT `n_layer`.
    #[serde(alias = "n_layers", alias = "n_layer")]
    num_hidden_layers: Option<usize>,
    /// T5's name for it (where `num_hidden_layers` is absent).
    num_layers: Option<usize>,
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<T, Error> {
    parse_json(path, &read_text(path)?)
}

fn read_text(path: &Path) -> Result<String, Error> {
    std::fs::read_to_string(path).map_err(|e| Error::io(format!("{}: {e}", path.display())))
}

/// `text` (the contents of `path`) parsed, errors naming the file.
fn parse_json<T: for<'de> Deserialize<'de>>(path: &Path, text: &str) -> Result<T, Error> {
    serde_json::from_str(text).map_err(|e| Error::config(format!("{}: {e}", path.display())))
}

/// Where a model is looked for when none is named, and whether the Hugging
/// Face hub may be called: settings the caller decides (the CLI reads them
/// from `REFSCORE_MODEL_DIR` and `HF_HUB_OFFLINE`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelLookup {
    /// The folder used when no model is named.
    pub default_dir: PathBuf,
    /// Never call the hub: a hub id must be in the local cache.
    pub offline: bool,
}

impl Default for ModelLookup {
    fn default() -> Self {
        ModelLookup {
            default_dir: PathBuf::from(DEFAULT_MODEL_DIR),
            offline: false,
        }
    }
}

/// Finds the model: `spec` is a folder path or a Hugging Face id
/// (`ORG/NAME`, looked up in the local HF cache, and on the hub unless
/// `lookup.offline`); `None` means `lookup.default_dir`.
pub fn resolve(spec: Option<&str>, lookup: &ModelLookup) -> Result<ModelFiles, Error> {
    let dir = match spec {
        Some(s) if Path::new(s).is_dir() => PathBuf::from(s),
        Some(s) if looks_like_hub_id(s) => from_hub(s, lookup.offline)?,
        Some(s) => {
            return Err(Error::config(format!(
                "--model {s}: no such folder, and not a Hugging Face id (ORG/NAME)"
            )))
        }
        None => {
            let dir = lookup.default_dir.clone();
            if !dir.join("config.json").is_file() {
                return Err(Error::config(format!(
                    "no embedding model at {}: run scripts/fetch-model.sh to fetch the default \
                     (all-MiniLM-L6-v2), or pass --model PATH|ORG/NAME",
                    dir.display()
                )));
            }
            dir
        }
    };
    read_settings(&dir)
}

pub(crate) fn looks_like_hub_id(s: &str) -> bool {
    let parts: Vec<&str> = s.split('/').collect();
    parts.len() == 2 && parts.iter().all(|p| !p.is_empty() && !p.starts_with('.'))
}

/// Resolves a hub id to a snapshot folder in the local Hugging Face cache
/// (hf-hub finds it from `HF_HOME`), downloading the files only when not
/// offline.
pub(crate) fn from_hub(id: &str, offline: bool) -> Result<PathBuf, Error> {
    let cache = hf_hub::Cache::from_env();
    let repo = cache.model(id.to_string());
    let mut found = Vec::new();
    for f in FILES {
        found.push(repo.get(f));
    }
    if found[..3].iter().all(Option::is_some) {
        let config = found[0].as_ref().expect("checked");
        return Ok(config
            .parent()
            .expect("file in a snapshot folder")
            .to_path_buf());
    }
    if offline {
        return Err(Error::config(format!(
            "--model {id}: not in the local Hugging Face cache ({}) and offline (HF_HUB_OFFLINE)",
            cache.path().display()
        )));
    }
    let api = hf_hub::api::sync::ApiBuilder::from_env()
        .build()
        .map_err(|e| {
            Error::temporary(format!(
                "--model {id}: cannot reach the Hugging Face hub: {e}"
            ))
        })?;
    let remote = api.model(id.to_string());
    let mut config_path = None;
    for (k, f) in FILES.iter().enumerate() {
        match remote.get(f) {
            Ok(p) if k == 0 => config_path = Some(p),
            Ok(_) => {}
            Err(e) if k < 3 => {
                return Err(Error::temporary(format!(
                    "--model {id}: cannot download {f}: {e}"
                )))
            }
            Err(_) => {}
        }
    }
    let config = config_path.expect("config.json downloaded");
    Ok(config.parent().expect("snapshot folder").to_path_buf())
}

/// Reads pooling, truncation and normalisation settings from a folder.
pub fn read_settings(dir: &Path) -> Result<ModelFiles, Error> {
    read_folder(dir, true)
}

/// [`read_settings`] for an embedding model (`needs_pooling`: a
/// `modules.json` must list a Pooling module) or a cross-encoder (whose
/// `modules.json`, written by sentence-transformers ≥ 5, lists the
/// Transformer alone).
pub(crate) fn read_folder(dir: &Path, needs_pooling: bool) -> Result<ModelFiles, Error> {
    read_folder_with(dir, needs_pooling, None)
}

/// [`read_folder`], the encoder's `config.json` text given where it is not
/// the folder's own (HHEM-2.1-Open's folder names its T5 config by the
/// model it was made from: [`crate::cross`]).
pub(crate) fn read_folder_with(
    dir: &Path,
    needs_pooling: bool,
    encoder_config: Option<String>,
) -> Result<ModelFiles, Error> {
    if encoder_config.is_none() {
        if let Some((layout, after)) = crate::static_model::detect(dir)? {
            return Ok(static_files(dir, layout, after));
        }
    }
    for f in &FILES[..3] {
        if !dir.join(f).is_file() {
            return Err(Error::config(format!(
                "{}: not a usable model folder: {f} is missing (a sentence-transformers folder needs config.json, tokenizer.json and model.safetensors)",
                dir.display()
            )));
        }
    }
    let config = match encoder_config {
        Some(text) => text,
        None => read_text(&dir.join("config.json"))?,
    };
    let head: ConfigHead = parse_json(&dir.join("config.json"), &config)?;
    if let Some(t) = &head.model_type {
        if !crate::family::has(t) {
            return Err(Error::config(format!(
                "{}: model_type is '{t}'; refscore has model families for: {}",
                dir.join("config.json").display(),
                crate::family::supported().join(", ")
            )));
        }
    }
    // Families whose positions start past the padding id have that many
    // fewer usable positions (RoBERTa's 514 hold 512 tokens).
    let max_positions = crate::family::usable_positions(
        head.model_type.as_deref(),
        head.max_position_embeddings,
        head.pad_token_id,
    );
    let modules = read_modules(dir, needs_pooling)?;
    let pooling_dir = modules.pooling_dir;
    let (pooling, include_prompt) = if pooling_dir.join("config.json").is_file() {
        let path = pooling_dir.join("config.json");
        let p: PoolingConfig = read_json(&path)?;
        let modes = [
            (p.pooling_mode_cls_token, Pooling::Cls),
            (
                p.pooling_mode_mean_tokens || p.pooling_mode_mean_sqrt_len_tokens,
                Pooling::Mean,
            ),
            (p.pooling_mode_max_tokens, Pooling::Max),
            (p.pooling_mode_weightedmean_tokens, Pooling::WeightedMean),
            (p.pooling_mode_lasttoken, Pooling::LastToken),
        ];
        let mut set: Vec<Pooling> = modes.iter().filter(|(on, _)| *on).map(|m| m.1).collect();
        match &p.pooling_mode {
            None => {}
            Some(serde_json::Value::String(name)) => set.extend(pooling_named(name)),
            Some(serde_json::Value::Array(names)) => set.extend(
                names
                    .iter()
                    .filter_map(|n| n.as_str().and_then(pooling_named)),
            ),
            Some(other) => {
                return Err(Error::config(format!(
                    "{}: pooling_mode {other} is not a mode's name",
                    path.display()
                )))
            }
        }
        match set.as_slice() {
            [one] => (*one, p.include_prompt),
            _ => {
                return Err(Error::config(format!(
                "{}: exactly one pooling mode must be set (refscore does not concatenate modes)",
                path.display()
            )))
            }
        }
    } else {
        (Pooling::Mean, true)
    };
    let sbert: Option<SbertConfig> = if dir.join("sentence_bert_config.json").is_file() {
        Some(read_json(&dir.join("sentence_bert_config.json"))?)
    } else {
        None
    };
    // Without one in sentence_bert_config.json (sentence-transformers 6
    // writes none), the tokenizer's model_max_length, as it then uses.
    let tokenizer_config = || -> Option<serde_json::Value> {
        let text = std::fs::read_to_string(dir.join("tokenizer_config.json")).ok()?;
        serde_json::from_str(&text).ok()
    };
    let tokenizer_limit = || -> Option<usize> {
        let v = tokenizer_config()?;
        let n = v.get("model_max_length")?.as_f64()?;
        (n >= 1.0).then(|| n.min(usize::MAX as f64) as usize)
    };
    let (max_seq_length, limit_from) = match sbert.as_ref().and_then(|s| s.max_seq_length) {
        Some(n) => (n, "sentence_bert_config.json"),
        None => match tokenizer_limit() {
            Some(n) => (n, "tokenizer_config.json"),
            None => (max_positions, "config.json"),
        },
    };
    // Below 2 no word-piece fits beside [CLS] and [SEP]; the tokenizer
    // would then truncate nothing at all while the summary said it did.
    if max_seq_length < 2 {
        return Err(Error::config(format!(
            "{}: max_seq_length {max_seq_length}: at least 2 word-pieces are needed (the special tokens and one piece)",
            dir.join(limit_from).display()
        )));
    }
    let max_seq_length = max_seq_length.min(max_positions);
    let st: StConfig = if dir.join("config_sentence_transformers.json").is_file() {
        read_json(&dir.join("config_sentence_transformers.json"))?
    } else {
        StConfig::default()
    };
    Ok(ModelFiles {
        dir: dir.to_path_buf(),
        pooling,
        max_seq_length,
        max_positions,
        after_pooling: modules.after_pooling,
        include_prompt,
        lower_case: sbert.is_some_and(|s| s.do_lower_case),
        prompts: st.prompts,
        default_prompt: st.default_prompt_name,
        layers: head.num_hidden_layers.or(head.num_layers).unwrap_or(12),
        family: head.model_type.clone().unwrap_or_else(|| "bert".into()),
        pad_token_id: head.pad_token_id.unwrap_or(0),
        config,
        cls_sep_tokens: tokenizer_config().map(|v| {
            ["cls_token", "sep_token"]
                .iter()
                .filter_map(|k| {
                    let t = v.get(*k)?;
                    // A string, or an AddedToken's `{"content": ...}`.
                    t.as_str()
                        .or_else(|| t.get("content").and_then(|c| c.as_str()))
                        .map(str::to_string)
                })
                .collect()
        }),
        tokenizer_class: tokenizer_config().and_then(|v| {
            v.get("tokenizer_class")
                .and_then(|c| c.as_str())
                .map(str::to_string)
        }),
        kind: ModelKind::Transformer,
    })
}

/// The settings of a static folder, in the fields every model has.
fn static_files(dir: &Path, layout: StaticLayout, after: Vec<AfterPooling>) -> ModelFiles {
    let unbounded = usize::MAX;
    ModelFiles {
        dir: dir.to_path_buf(),
        pooling: Pooling::Mean,
        max_seq_length: layout.max_length.unwrap_or(unbounded),
        max_positions: unbounded,
        after_pooling: after,
        include_prompt: true,
        lower_case: false,
        prompts: Default::default(),
        default_prompt: None,
        layers: 0,
        family: layout.rules.name().to_string(),
        config: std::fs::read_to_string(dir.join("config.json")).unwrap_or_else(|_| "{}".into()),
        pad_token_id: 0,
        tokenizer_class: None,
        cls_sep_tokens: None,
        kind: ModelKind::Static(layout),
    }
}
