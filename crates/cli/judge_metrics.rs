//! The `judge-metrics` command: the judge metrics a run can ask for, or one
//! definition as TOML, built-in or the user's, to start a rubric from.

use refscore_core::Error;
use refscore_judge::JudgeMetrics;

use crate::args::JudgeMetricsArgs;

/// Lists the judge metrics, or prints the definition `--show` names.
pub fn run(args: JudgeMetricsArgs) -> Result<(), Error> {
    let mut known = JudgeMetrics::builtin();
    let mut files = args.judge_metrics.clone();
    if let Some(path) = &args.config {
        let file = crate::config::ConfigFile::read(path)?;
        known = file.judge_metrics.clone();
        // The files its `judge_metrics` key names, as `score --config` reads them.
        files.splice(0..0, crate::config::judge_metrics_files(&file)?);
    }
    for path in &files {
        known.read(path, true)?;
    }
    match &args.show {
        None => crate::print_out(&known.listing()),
        Some(name) => match known.show(name) {
            Some(toml) => crate::print_out(&toml),
            None if known.names().contains(name) => Err(Error::usage(format!(
                "{name} has no definition to show: the fact ratio extracts facts, then checks each, with prompts of its own"
            ))),
            None => Err(Error::usage(format!(
                "unknown judge metric '{name}' (known: {})",
                known.names().join(", ")
            ))),
        },
    }
}
