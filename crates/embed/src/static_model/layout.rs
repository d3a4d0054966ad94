//! Telling a static embedding folder apart from a transformer folder, and
//! which library's rules it follows: a model2vec folder (`config.json`
//! with `model_type: model2vec`, the table under `embeddings`) is computed
//! as model2vec computes it; a sentence-transformers folder whose first
//! module is `StaticEmbedding` (the table under `embedding.weight`, at the
//! root or in the module's own folder) as sentence-transformers does.

use std::path::{Path, PathBuf};

use candle_core::safetensors::MmapedSafetensors;
use refscore_core::Error;
use serde::Deserialize;

use crate::model::{after_static_embedding, AfterPooling};

/// Which library defines the vectors of a static folder.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StaticRules {
    /// model2vec's `StaticModel.encode`: no special tokens, the unknown
    /// token dropped, per-token `weights` and a `mapping` applied, the mean
    /// normalised where the config says.
    Model2Vec,
    /// sentence-transformers' `StaticEmbedding`: the saved tokenizer as it
    /// is, an EmbeddingBag mean, then the folder's later modules.
    SentenceTransformers,
}

impl StaticRules {
    /// The family name in the summary.
    pub fn name(self) -> &'static str {
        match self {
            StaticRules::Model2Vec => "model2vec",
            StaticRules::SentenceTransformers => "static-embedding",
        }
    }
}

/// Where a static folder keeps its table and tokenizer, and the settings
/// read from it.
#[derive(Debug, Clone, PartialEq)]
pub struct StaticLayout {
    /// The library whose rules the vectors follow.
    pub rules: StaticRules,
    /// The safetensors file holding the table.
    pub weights: PathBuf,
    /// The table's tensor name in it.
    pub table: &'static str,
    /// `tokenizer.json`.
    pub tokenizer: PathBuf,
    /// The files whose bytes identify the model (fingerprint, cache keys).
    pub identity: Vec<PathBuf>,
    /// Rows and width of the table.
    pub rows: usize,
    /// Width of each vector.
    pub width: usize,
    /// model2vec's `normalize` (false for sentence-transformers, whose
    /// Normalize is a module after the embedding).
    pub normalize: bool,
    /// model2vec's `max_length` in tokens (`None`: no truncation); for
    /// sentence-transformers, what its saved tokenizer truncates at.
    pub max_length: Option<usize>,
}

#[derive(Deserialize)]
struct Model2VecConfig {
    #[serde(default)]
    model_type: Option<String>,
    #[serde(default)]
    normalize: Option<bool>,
    /// Absent: model2vec's default, 512; `null`: no truncation.
    #[serde(default = "default_max_length")]
    max_length: Option<usize>,
}

/// model2vec's `DEFAULT_MAX_LENGTH`.
fn default_max_length() -> Option<usize> {
    Some(512)
}

/// The static layout of `dir`, if it holds a static model (`Ok(None)` for
/// any other folder), with the modules after the embedding. A folder is
/// model2vec's when its config says `model_type: model2vec`, or when its
/// `StaticEmbedding` module keeps the table under model2vec's name
/// (`embeddings`: model2vec's `save_pretrained` writes such a modules.json
/// and may write no `model_type`); sentence-transformers' when the table
/// is under `embedding.weight`.
pub(crate) fn detect(dir: &Path) -> Result<Option<(StaticLayout, Vec<AfterPooling>)>, Error> {
    let config = dir.join("config.json");
    let m2v = if config.is_file() {
        let text = std::fs::read_to_string(&config)
            .map_err(|e| Error::io(format!("{}: {e}", config.display())))?;
        serde_json::from_str::<Model2VecConfig>(&text).ok()
    } else {
        None
    };
    if let Some(c) = m2v
        .as_ref()
        .filter(|c| c.model_type.as_deref() == Some("model2vec"))
    {
        return model2vec(dir, c).map(|l| Some((l, Vec::new())));
    }
    let Some((module, after)) = after_static_embedding(dir)? else {
        return Ok(None);
    };
    let weights = required(&module, "model.safetensors")?;
    if holds_model2vec_table(&weights)? {
        let c = m2v.ok_or_else(|| {
            Error::config(format!(
                "{}: a model2vec folder needs config.json, and it is missing or not JSON",
                dir.display()
            ))
        })?;
        // model2vec normalises by its config; its Normalize module is
        // for sentence-transformers' reading of the folder.
        return model2vec(&module, &c).map(|l| Some((l, Vec::new())));
    }
    sentence_transformers(dir, &module).map(|l| Some((l, after)))
}

/// Whether the file names its table as model2vec does (`embeddings`) and
/// not as sentence-transformers does (`embedding.weight`).
fn holds_model2vec_table(path: &Path) -> Result<bool, Error> {
    // SAFETY: mapped read-only; refscore never writes model files.
    let file = unsafe { MmapedSafetensors::new(path) }
        .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
    Ok(file.get("embeddings").is_ok() && file.get("embedding.weight").is_err())
}

fn model2vec(dir: &Path, c: &Model2VecConfig) -> Result<StaticLayout, Error> {
    let weights = required(dir, "model.safetensors")?;
    let tokenizer = required(dir, "tokenizer.json")?;
    let (rows, width) = table_shape(&weights, "embeddings")?;
    Ok(StaticLayout {
        rules: StaticRules::Model2Vec,
        identity: vec![dir.join("config.json"), tokenizer.clone(), weights.clone()],
        weights,
        table: "embeddings",
        tokenizer,
        rows,
        width,
        normalize: c.normalize.unwrap_or(false),
        max_length: c.max_length,
    })
}

fn sentence_transformers(dir: &Path, module: &Path) -> Result<StaticLayout, Error> {
    let weights = required(module, "model.safetensors")?;
    let tokenizer = required(module, "tokenizer.json")?;
    let (rows, width) = table_shape(&weights, "embedding.weight")?;
    let max_length = std::fs::read_to_string(&tokenizer)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .and_then(|v| v["truncation"]["max_length"].as_u64())
        .map(|n| n as usize);
    Ok(StaticLayout {
        rules: StaticRules::SentenceTransformers,
        identity: vec![dir.join("modules.json"), tokenizer.clone(), weights.clone()],
        weights,
        table: "embedding.weight",
        tokenizer,
        rows,
        width,
        normalize: false,
        max_length,
    })
}

fn required(dir: &Path, name: &str) -> Result<PathBuf, Error> {
    let path = dir.join(name);
    if path.is_file() {
        Ok(path)
    } else {
        Err(Error::config(format!(
            "{}: a static embedding folder needs {name}, and it is missing",
            dir.display()
        )))
    }
}

/// Rows and width of the 2-D tensor `name`, read from the file's header
/// only.
fn table_shape(path: &Path, name: &str) -> Result<(usize, usize), Error> {
    // SAFETY: mapped read-only; refscore never writes model files.
    let file = unsafe { MmapedSafetensors::new(path) }
        .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
    let view = file.get(name).map_err(|_| {
        Error::config(format!(
            "{}: no tensor '{name}': a static embedding folder keeps its vectors there",
            path.display()
        ))
    })?;
    match view.shape() {
        [rows, width] if *rows > 0 && *width > 0 => Ok((*rows, *width)),
        shape => Err(Error::config(format!(
            "{}: tensor '{name}' has shape {shape:?}; a table of vectors (rows × width) is needed",
            path.display()
        ))),
    }
}
