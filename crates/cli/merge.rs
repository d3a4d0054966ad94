//! The `merge-summaries` command: adds the summaries of the shards of one
//! run into the summary the unsharded run would have printed.

use refscore_batch::Error;
use refscore_write::{SummaryBuilder, SummaryState};
use serde_json::Value;

use crate::args::MergeArgs;

/// Reads every shard summary, adds up their statistics, prints the table
/// and optionally writes the merged JSON.
pub fn run(args: MergeArgs) -> Result<(), Error> {
    let mut merged: Option<SummaryBuilder> = None;
    let mut seconds: f64 = 0.0;
    let mut shards: Vec<String> = Vec::new();
    for path in &args.summaries {
        let shown = path.display();
        let text = std::fs::read_to_string(path)
            .map_err(|e| Error::io(format!("{shown}: cannot read: {e}")))?;
        let json: Value = serde_json::from_str(&text)
            .map_err(|e| Error::bad_input(format!("{shown}: not a summary file: {e}")))?;
        let state: SummaryState = serde_json::from_value(json["state"].clone()).map_err(|e| {
            Error::bad_input(format!(
                "{shown}: has no mergeable statistics ('state'): {e}; it was written by an older refscore"
            ))
        })?;
        seconds = seconds.max(json["seconds"].as_f64().unwrap_or(0.0));
        if let Some(s) = json["shard"].as_str() {
            if shards.iter().any(|x| x == s) {
                return Err(Error::config(format!("{shown}: shard {s} is given twice")));
            }
            shards.push(s.to_string());
        }
        match merged.as_mut() {
            None => {
                merged = Some(
                    SummaryBuilder::from_state(&state)
                        .map_err(|e| Error::bad_input(format!("{shown}: {e}")))?,
                )
            }
            Some(m) => m
                .merge(&state)
                .map_err(|e| Error::config(format!("{shown}: not a shard of the same run: {e}")))?,
        }
    }
    let merged = merged.expect("clap requires one summary");
    let rows = merged.state().rows;
    let mut summary = merged.finish(seconds, rows);
    summary.extra.insert(
        "merged_from".into(),
        args.summaries
            .iter()
            .map(|p| p.display().to_string())
            .collect::<Vec<_>>()
            .into(),
    );
    if !shards.is_empty() {
        summary.extra.insert("shards".into(), shards.into());
    }
    if let Some(out) = &args.output {
        let text = serde_json::to_string_pretty(&summary).expect("summary serialises");
        refscore_write::write_atomically(out, &text)?;
    }
    if !args.quiet {
        crate::print_out(&crate::report::table(&summary))?;
    }
    Ok(())
}
