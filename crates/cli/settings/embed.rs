//! The local models' settings: `--model`, `--cross-model`, `--device`, `--precision`,
//! BERTScore's layer, IDF and rescaling, prompts, the caches, and the
//! environment variables that name the model folder and kernel path.

use std::path::{Path, PathBuf};

use refscore_core::Error;
use refscore_embed::Rescale;

use super::env_text;
use super::origin::Origin;
use crate::args::ScoreArgs;

/// Settings of the embedding stage.
#[derive(Debug, Clone)]
pub struct EmbedSettings {
    pub model: Option<String>,
    pub device: String,
    /// `--precision`.
    pub precision: refscore_embed::Precision,
    pub idf: bool,
    pub rescale: Option<Rescale>,
    /// `--layer`: BERTScore's layer (None: the model's last).
    pub layer: Option<usize>,
    /// `--truncate-dim`: the sentence embedding's first N values (None:
    /// all).
    pub truncate_dim: Option<usize>,
    /// `--prompt-name` / `--prompt`.
    pub prompt: Option<refscore_embed::Prompt>,
    pub max_seq_length: Option<usize>,
    pub cache_mb: usize,
    /// `--embed-cache`.
    pub store: Option<PathBuf>,
    /// `--embed-cache-outputs`.
    pub store_outputs: bool,
    /// `REFSCORE_KERNELS`: the fused CPU kernels' path by name (None: auto).
    pub kernels: Option<String>,
    /// Where the model is looked for when none is named (`REFSCORE_MODEL_DIR`)
    /// and whether the hub may be called (`HF_HUB_OFFLINE`).
    pub lookup: refscore_embed::ModelLookup,
    /// True when `REFSCORE_MODEL_DIR` named the model: a model asked for,
    /// like `--model`, so its absence is an error.
    pub model_dir_named: bool,
    /// `--cross-model`: the cross-encoder (it shares `device`, `precision`
    /// and `lookup` with the embedding model).
    pub cross_model: Option<String>,
    /// `--nli-labels`.
    pub nli_labels: Option<String>,
    /// `--cross-recipe`: a shipped recipe's name or a recipe file (None:
    /// the folder's own, else `nli`).
    pub cross_recipe: Option<String>,
}

/// Forces the fused CPU kernels' path (`auto`, `avx512`, `avx2`, `portable`).
pub(crate) const KERNELS_ENV: &str = "REFSCORE_KERNELS";
/// The model folder used when `--model` is not given.
const MODEL_DIR_ENV: &str = "REFSCORE_MODEL_DIR";

/// `--embed-cache-mb`'s default: enough for the distinct texts of a
/// nightly batch of short answers.
const DEFAULT_CACHE_MB: usize = 256;

impl EmbedSettings {
    /// What `--cross-model`'s model can give, read from its folder (exit
    /// 78 for a folder that is no cross-encoder); `None` without one.
    pub(super) fn cross_capability(
        &self,
        origin: &Origin,
    ) -> Result<Option<refscore_embed::CrossCapability>, Error> {
        let Some(folder) = self.cross_folder()? else {
            if let Some(recipe) = &self.cross_recipe {
                return Err(origin.bad(
                    "cross_recipe",
                    recipe,
                    "says how --cross-model's model reads its input: pass --cross-model too",
                ));
            }
            return match &self.nli_labels {
                Some(labels) => Err(origin.bad(
                    "nli_labels",
                    labels,
                    "names labels of --cross-model's model: pass --cross-model too",
                )),
                None => Ok(None),
            };
        };
        if let Some(labels) = &self.nli_labels {
            refscore_embed::NliLabels::parse(labels, folder.labels.len())
                .map_err(|why| origin.bad("nli_labels", labels, &why))?;
        }
        refscore_embed::CrossCapability::of(&folder, self.nli_labels.as_deref()).map(Some)
    }
}

impl EmbedSettings {
    /// `--cross-model`'s folder with its recipe (`--cross-recipe`, else the
    /// folder's `refscore_recipe.json`, else `nli`), read and checked;
    /// `None` without a cross-encoder.
    pub(crate) fn cross_folder(&self) -> Result<Option<refscore_embed::CrossFolder>, Error> {
        let Some(spec) = self.cross_model.as_deref() else {
            return Ok(None);
        };
        refscore_embed::CrossFolder::find(spec, &self.lookup)?
            .with_recipe(self.cross_recipe.as_deref())
            .map(Some)
    }
}

/// Reads the embedding settings out of `args`.
pub(super) fn resolve(args: &mut ScoreArgs, origin: &Origin) -> Result<EmbedSettings, Error> {
    let precision = origin
        .parsed(args.precision.take(), "precision", parse_precision)?
        .unwrap_or_default();
    let model_dir = env_text(MODEL_DIR_ENV);
    let device = origin
        .parsed(args.device.take(), "device", |d| {
            refscore_embed::device_ordinal(d).map(|_| d.to_string())
        })?
        .unwrap_or_else(|| "cpu".into());
    check_precision_on(precision, &device, origin)?;
    Ok(EmbedSettings {
        model: args.model.take(),
        device,
        precision,
        idf: args.idf,
        rescale: rescale(args.rescale_baseline.take(), origin)?,
        layer: origin.ranged(args.layer, "layer", |n| n <= 1000, "0 to 1000")?,
        truncate_dim: origin.ranged(
            args.truncate_dim,
            "truncate_dim",
            |n| n >= 1,
            "1 to the embedding's width",
        )?,
        prompt: match (args.prompt_name.take(), args.prompt.take()) {
            (Some(name), _) => Some(refscore_embed::Prompt::Named(name)),
            (None, Some(text)) => Some(refscore_embed::Prompt::Text(text)),
            (None, None) => None,
        },
        max_seq_length: origin.ranged(
            args.max_seq_length,
            "max_seq_length",
            |n| (2..=1_000_000).contains(&n),
            "2 or more word-pieces (at most the model's position limit)",
        )?,
        cache_mb: origin
            .ranged(
                args.embed_cache_mb,
                "embed_cache_mb",
                |n| n <= 1 << 20,
                "0 to 1048576 MiB",
            )?
            .unwrap_or(DEFAULT_CACHE_MB),
        store: args.embed_cache.take(),
        store_outputs: args.embed_cache_outputs,
        kernels: env_text(KERNELS_ENV),
        lookup: refscore_embed::ModelLookup {
            default_dir: model_dir
                .clone()
                .map_or_else(|| refscore_embed::DEFAULT_MODEL_DIR.into(), PathBuf::from),
            offline: env_text("HF_HUB_OFFLINE").is_some_and(|v| v != "0"),
        },
        model_dir_named: model_dir.is_some(),
        cross_model: args.cross_model.take(),
        nli_labels: args.nli_labels.take(),
        cross_recipe: cross_recipe(args.cross_recipe.take(), origin)?,
    })
}

/// A `--cross-recipe` value: a shipped recipe's name or an existing file
/// (what the file holds is read with the model, exit 78 naming the file).
fn cross_recipe(value: Option<String>, origin: &Origin) -> Result<Option<String>, Error> {
    if let Some(spec) = &value {
        if refscore_embed::Recipe::builtin(spec).is_none() && !Path::new(spec).is_file() {
            let why = format!(
                "not a recipe's name ({}) and no such file",
                refscore_embed::Recipe::names().join(", ")
            );
            return Err(origin.bad("cross_recipe", spec, &why));
        }
    }
    Ok(value)
}

/// A `--rescale-baseline` value: `auto`, `P,R,F`, or a baseline file.
fn rescale(value: Option<String>, origin: &Origin) -> Result<Option<Rescale>, Error> {
    Ok(match value {
        None => None,
        Some(r) if r == "auto" => Some(Rescale::Auto),
        // Anything naming a file is a baseline file; it must exist.
        Some(r) if !r.contains(',') => {
            if !Path::new(&r).is_file() {
                return Err(origin.bad(
                    "rescale_baseline",
                    &r,
                    "no such file (expected auto, P,R,F or a bert_score baseline file)",
                ));
            }
            Some(Rescale::File(PathBuf::from(r)))
        }
        Some(r) => {
            let parts: Vec<f32> = r
                .split(',')
                .map(|p| p.trim().parse().unwrap_or(f32::NAN))
                .collect();
            match parts.as_slice() {
                [p, rr, f] if [p, rr, f].iter().all(|b| b.is_finite() && **b < 1.0) => {
                    Some(Rescale::Given([*p, *rr, *f]))
                }
                _ => {
                    return Err(origin.bad(
                        "rescale_baseline",
                        &r,
                        "expected auto or three finite numbers below 1, as P,R,F",
                    ))
                }
            }
        }
    })
}

/// A `--precision` value.
fn parse_precision(name: &str) -> Result<refscore_embed::Precision, String> {
    refscore_embed::Precision::from_name(name.trim())
        .ok_or_else(|| format!("{name}: expected fp32, bf16, int8 or fp16"))
}

/// Refuses, before any work, a precision the named device cannot run:
/// fp16 on the CPU, int8 on a GPU (`auto` is settled when the model loads).
fn check_precision_on(
    precision: refscore_embed::Precision,
    device: &str,
    origin: &Origin,
) -> Result<(), Error> {
    use refscore_embed::Precision;
    let why = match precision {
        Precision::Fp16 if device == "cpu" => {
            "runs on a GPU only (--device cuda); on the CPU use bf16 or int8"
        }
        Precision::Int8 if device.starts_with("cuda") => {
            "runs on the CPU only; on a GPU use bf16 or fp16"
        }
        _ => return Ok(()),
    };
    Err(origin.bad("precision", precision.name(), why))
}
