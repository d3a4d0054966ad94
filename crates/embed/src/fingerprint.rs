//! The embedding stage's part of a run's fingerprint: the model's files
//! and every embedding setting that changes a result value, as explicit
//! text, so that `--resume` continues only the run it was started as. On
//! the options, not the loaded stage: a run is checked before the model
//! loads.

use refscore_core::Error;
use serde_json::{json, Value};

use crate::{kernel_path, EmbedOptions, ModelFiles, Pooling, Prompt, Rescale};

impl EmbedOptions {
    /// The fingerprint entries of a run with `files` as its model, on the
    /// device the user named as `device`. The keys and texts are those
    /// earlier versions stored, so their interrupted runs still resume.
    pub fn fingerprint(
        &self,
        files: &ModelFiles,
        device: &str,
    ) -> Result<Vec<(String, Value)>, Error> {
        // The chosen metrics are the run record's, by name (crates/job).
        let mut f = vec![("model_files".to_string(), json!(files.content_sha256()?))];
        // The folder's settings beyond its three checksummed files.
        if files.pooling != Pooling::Mean || !files.include_prompt {
            f.push((
                "pooling".into(),
                json!({"mode": files.pooling.name(), "include_prompt": files.include_prompt}),
            ));
        }
        if let Some(name) = &files.default_prompt {
            f.push(("default_prompt_name".into(), json!(name)));
        }
        // Kernel paths give the same bits (tests/precision.rs); the path is
        // kept so that a run resumes only as it started.
        f.push(("kernels".into(), json!(kernel_path().name())));
        f.push((
            "embed".into(),
            json!({
                "device": device,
                "precision": self.precision.fingerprint_text(),
                "idf": self.idf,
                "rescale": match &self.rescale {
                    None => "None".to_string(),
                    Some(Rescale::Auto) => "Some(Auto)".to_string(),
                    Some(Rescale::Given([p, r, f])) => format!("Some(Given([{p:?}, {r:?}, {f:?}]))"),
                    Some(Rescale::File(path)) => format!("file:{}", path.display()),
                },
                "max_seq_length": self.max_seq_length,
            }),
        ));
        // Added with the model families; only when not the default, so
        // runs started before still resume.
        if let Some(layer) = self.layer {
            f.push(("bertscore_layer".into(), json!(layer)));
        }
        if let Some(dims) = self.truncate_dim {
            f.push(("truncate_dim".into(), json!(dims)));
        }
        match &self.prompt {
            Some(Prompt::Named(name)) => f.push(("prompt_name".into(), json!(name))),
            Some(Prompt::Text(text)) => f.push(("prompt".into(), json!(text))),
            None => {}
        }
        if let Some(Rescale::File(path)) = &self.rescale {
            // A few dozen short lines: the content itself, so an edited
            // file is a different run.
            let text = std::fs::read_to_string(path).map_err(|err| {
                Error::io(format!("--rescale-baseline {}: {err}", path.display()))
            })?;
            f.push(("rescale_file".into(), json!(text)));
        }
        Ok(f)
    }
}
