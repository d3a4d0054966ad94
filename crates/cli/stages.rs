//! The run's stages built from its settings: which stages run, the model
//! and the judge endpoint they need, the passes before scoring. Shared by
//! the job (`score.rs`) and Python's `Scorer`.

use std::path::PathBuf;

use refscore_core::Error;
use refscore_embed::{EmbedOptions, EmbeddingStage};
use refscore_judge::{Endpoint, JudgeOptions, JudgeStage};
use refscore_lexical::Selection;

use crate::settings::{Rescale, Settings, KERNELS_ENV};

/// The metric columns of the result, in order, for the stages that run.
pub(crate) fn metric_fields(
    settings: &Settings,
    embedding: bool,
    judge: bool,
) -> Vec<arrow::datatypes::Field> {
    let metrics = &settings.metrics.metrics;
    let mut fields = refscore_lexical::fields(Selection::of(metrics));
    if embedding {
        fields.extend(refscore_embed::fields(metrics));
    }
    if judge {
        fields.extend(settings.judge_metrics.fields(metrics));
    }
    fields
}

/// The embedding model when embedding metrics are wanted. When the user
/// asked for none by name (and named no model) and none is found, the run
/// goes on without them, with a warning.
pub(crate) fn resolve_embedding(
    settings: &Settings,
) -> Result<Option<refscore_embed::ModelFiles>, Error> {
    let plan = &settings.metrics;
    if !plan.wants_embedding() {
        return Ok(None);
    }
    let model = settings.embed.model.as_deref();
    // A model named by the environment is a model asked for, like --model.
    let named = model.is_some() || settings.embed.model_dir_named;
    match refscore_embed::resolve(model, &settings.embed.lookup) {
        Ok(files) => {
            if let Some(n) = settings.embed.layer {
                if n > files.layers {
                    return Err(settings.bad_value(
                        "layer",
                        &n.to_string(),
                        &format!("the model has {} layers (0 = the embeddings)", files.layers),
                    ));
                }
            }
            if let Some(n) = settings.embed.max_seq_length {
                if n < 2 || n > files.max_positions {
                    return Err(settings.bad_value(
                        "max_seq_length",
                        &n.to_string(),
                        &format!(
                            "must be between 2 and the model's position limit {}",
                            files.max_positions
                        ),
                    ));
                }
            }
            refscore_embed::parse_device(&settings.embed.device)?;
            let kernels = settings.embed.kernels.as_deref();
            refscore_embed::use_kernels(kernels).map_err(|e| {
                Error::config(format!("{KERNELS_ENV}={}: {e}", kernels.unwrap_or("")))
            })?;
            Ok(Some(files))
        }
        Err(e) if plan.explicit || named => Err(e),
        Err(e) => {
            if settings.judge.as_ref().is_some_and(|j| j.band.is_some()) {
                return Err(Error::config(format!(
                    "--judge-band needs cosine, but the embedding model is missing: {e}"
                )));
            }
            if !settings.quiet {
                eprintln!("refscore: warning: embedding metrics skipped: {e}");
            }
            Ok(None)
        }
    }
}

pub(crate) fn load_embedding(settings: &Settings) -> Result<EmbeddingStage, Error> {
    let options = EmbedOptions {
        model: settings.embed.model.clone(),
        device: refscore_embed::parse_device(&settings.embed.device)?,
        metrics: settings.metrics.metrics.clone(),
        max_seq_length: settings.embed.max_seq_length,
        cache_bytes: settings.embed.cache_mb << 20,
        store: settings.embed.store.clone(),
        store_outputs: settings.embed.store_outputs,
        precision: settings.embed.precision,
        layer: settings.embed.layer,
        prompt: settings.embed.prompt.clone(),
        lookup: settings.embed.lookup.clone(),
        ..EmbedOptions::default()
    };
    EmbeddingStage::load(options)
}

/// The judge endpoint when judge metrics are wanted.
pub(crate) fn judge_endpoint(settings: &Settings) -> Result<Option<Endpoint>, Error> {
    let (Some(j), true) = (&settings.judge, settings.metrics.wants_judge()) else {
        return Ok(None);
    };
    let api_key = j.api_key();
    Ok(Some(Endpoint {
        url: j.url.clone(),
        api: j.api,
        model: j.model.clone(),
        api_key,
        timeout: Endpoint::timeout_from_secs(j.timeout)?,
        retries: j.retries,
        concurrency: j.concurrency,
        requests_per_minute: j.rpm,
        tokens_per_minute: j.tpm,
        backoff: std::time::Duration::from_millis(500),
    }))
}

pub(crate) fn load_judge(
    settings: &Settings,
    endpoint: Endpoint,
    journal: PathBuf,
) -> Result<JudgeStage, Error> {
    let mut stage = new_judge(settings, endpoint)?;
    // Answers paid for in this job, kept with its progress: a part scored
    // again after a crash or a judge failure never pays twice.
    stage.set_journal_dir(journal)?;
    Ok(stage)
}

/// The judge stage for `endpoint` with the run's metrics, band and cache.
pub(crate) fn new_judge(settings: &Settings, endpoint: Endpoint) -> Result<JudgeStage, Error> {
    let j = settings
        .judge
        .as_ref()
        .expect("endpoint implies judge settings");
    JudgeStage::new(JudgeOptions {
        endpoint,
        metrics: settings.metrics.metrics.clone(),
        band: j.band,
        cache_dir: j.cache.clone(),
        reasons: j.reasons,
        threshold: j.threshold,
        thresholds: settings.thresholds.clone(),
        judge_metrics: settings.judge_metrics.clone(),
        where_column: settings.judge_where.clone(),
    })
}

/// The passes some embedding settings need before scoring: IDF over the
/// input's references, and an automatic rescaling baseline from mismatched
/// pairs of its rows. `input` names the input in messages.
pub(crate) fn prepare_embedding<R>(
    stage: &mut EmbeddingStage,
    settings: &Settings,
    input: &str,
    references: impl FnOnce() -> Result<R, Error>,
    pairs: impl FnOnce() -> Result<Vec<(String, String)>, Error>,
) -> Result<(), Error>
where
    R: Iterator<Item = Result<refscore_core::TextColumn, Error>>,
{
    if settings.embed.idf {
        stage.fit_idf(references()?)?;
    }
    match &settings.embed.rescale {
        Some(Rescale::Given(b)) => stage.set_baseline(*b, "given"),
        Some(Rescale::File(path)) => {
            let b = refscore_embed::read_baseline(path, stage.score_layer())?;
            stage.set_baseline(b, &path.display().to_string());
        }
        Some(Rescale::Auto) => {
            let pairs = pairs()?;
            if pairs.len() < 2 {
                return Err(Error::bad_input(format!(
                    "{input}: --rescale-baseline auto needs at least 2 scorable rows with different texts"
                )));
            }
            let b = stage.fit_baseline(&pairs)?;
            stage.set_baseline(b, "auto");
        }
        None => {}
    }
    Ok(())
}
