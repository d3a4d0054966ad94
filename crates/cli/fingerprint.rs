//! The run's fingerprint: every setting that changes a result value,
//! written as explicit text so that a resumed run is checked against the
//! run it continues.

use std::collections::BTreeMap;

use refscore_core::metric::Group;
use refscore_core::Error;
use refscore_read::Dataset;
use serde_json::{json, Value};

use crate::settings::{Rescale, Settings};

/// Everything that changes a result value, for the run's fingerprint: a
/// resumed run must match it.
pub(crate) fn fingerprint(
    settings: &Settings,
    dataset: &Dataset,
    model: Option<&refscore_embed::ModelFiles>,
    judge_url: Option<&str>,
) -> Result<BTreeMap<String, Value>, Error> {
    let mut f = BTreeMap::new();
    let plan = &settings.metrics;
    // Explicit text, not a type's Debug form, so that changing a Debug
    // impl never breaks --resume; it is the text that form gave, so runs
    // started by earlier versions still resume.
    // Selections as the flags per registry metric of each group that
    // earlier versions stored.
    let flags = |g: Group| {
        let b = plan.metrics.flags(g);
        b.iter().map(bool::to_string).collect::<Vec<_>>().join(", ")
    };
    f.insert(
        "lexical".into(),
        json!(format!("Selection([{}])", flags(Group::Lexical))),
    );
    let cols = dataset.columns();
    f.insert(
        "columns".into(),
        json!([cols.id, cols.input, cols.reference, cols.output]),
    );
    f.insert("keep".into(), json!(settings.keep));
    f.insert("batch_size".into(), json!(settings.batch_size));
    if let Some(files) = model {
        let e = &settings.embed;
        f.insert(
            "embedding".into(),
            json!(plan.metrics.flags(Group::Embedding)),
        );
        f.insert("model_files".into(), json!(files.content_sha256()?));
        // The folder's settings beyond its three checksummed files.
        if files.pooling != refscore_embed::Pooling::Mean || !files.include_prompt {
            f.insert(
                "pooling".into(),
                json!({"mode": files.pooling.name(), "include_prompt": files.include_prompt}),
            );
        }
        if let Some(name) = &files.default_prompt {
            f.insert("default_prompt_name".into(), json!(name));
        }
        // Kernel paths give the same bits (tests/precision.rs); the path is
        // kept so that a run resumes only as it started.
        f.insert(
            "kernels".into(),
            json!(refscore_embed::kernel_path().name()),
        );
        f.insert(
            "embed".into(),
            json!({
                "device": e.device,
                "precision": e.precision.name(),
                "idf": e.idf,
                "rescale": match &e.rescale {
                    None => "None".to_string(),
                    Some(Rescale::Auto) => "Some(Auto)".to_string(),
                    Some(Rescale::Given([p, r, f])) => format!("Some(Given([{p:?}, {r:?}, {f:?}]))"),
                    Some(Rescale::File(path)) => format!("file:{}", path.display()),
                },
                "max_seq_length": e.max_seq_length,
            }),
        );
        // Added with the model families; only when not the default, so
        // runs started before still resume.
        if let Some(layer) = e.layer {
            f.insert("bertscore_layer".into(), json!(layer));
        }
        match &e.prompt {
            Some(refscore_embed::Prompt::Named(name)) => {
                f.insert("prompt_name".into(), json!(name));
            }
            Some(refscore_embed::Prompt::Text(text)) => {
                f.insert("prompt".into(), json!(text));
            }
            None => {}
        }
        if let Some(Rescale::File(path)) = &e.rescale {
            // A few dozen short lines: the content itself, so an edited
            // file is a different run.
            let text = std::fs::read_to_string(path).map_err(|err| {
                Error::io(format!("--rescale-baseline {}: {err}", path.display()))
            })?;
            f.insert("rescale_file".into(), json!(text));
        }
    }
    if let (Some(url), Some(j)) = (judge_url, &settings.judge) {
        // The URL as shown (credentials redacted): the fingerprint is stored.
        f.insert("judge".into(), json!(plan.metrics.flags(Group::Judge)));
        f.insert(
            "judge_endpoint".into(),
            json!({"url": url, "model": j.model, "band": j.band, "where": settings.judge_where,
                   "reasons": j.reasons.name(), "threshold": j.threshold}),
        );
        f.insert(
            "judge_templates".into(),
            json!(refscore_judge::template_versions()),
        );
        // The protocol changes every request; only when not OpenAI's, so
        // runs started before it was a choice still resume.
        if j.api != refscore_judge::Api::OpenAi {
            f.insert("judge_api".into(), json!(j.api.name()));
        }
        // A run's open batches are collected only by the same mode; only
        // when set, so online runs started before still resume.
        if let Some(mode) = &j.batch {
            f.insert("judge_batch".into(), json!(mode.name()));
        }
        // Only with a defined metric chosen, so earlier runs still resume.
        let defined = settings.judge_metrics.record(&plan.metrics);
        if !defined.is_empty() {
            f.insert("judge_metrics".into(), json!(defined));
        }
    }
    Ok(f)
}
