//! The `merge-summaries` command: adds the summaries of the shards of one
//! run into the summary the unsharded run would have printed.

use refscore_core::Error;
use refscore_write::{SummaryBuilder, SummaryState};
use serde_json::Value;

use crate::args::MergeArgs;

/// Reads every shard summary, adds up their statistics, prints the table
/// and optionally writes the merged JSON.
pub fn run(args: MergeArgs) -> Result<(), Error> {
    let mut merged: Option<SummaryBuilder> = None;
    let mut seconds: f64 = 0.0;
    let mut shards: Vec<String> = Vec::new();
    let mut run_ids: Vec<String> = Vec::new();
    let mut gold = Vec::new();
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
        if let Some(id) = json["run_id"].as_str() {
            run_ids.push(id.to_string());
        }
        if let Some(s) = json["shard"].as_str() {
            if shards.iter().any(|x| x == s) {
                return Err(Error::config(format!("{shown}: shard {s} is given twice")));
            }
            shards.push(s.to_string());
        }
        crate::gold::merge(
            &mut gold,
            crate::gold::states_of(&json, &shown.to_string())?,
        )
        .map_err(|e| Error::config(format!("{shown}: not a shard of the same run: {e}")))?;
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
    check_complete_set(args.summaries.len(), &shards, &run_ids)?;
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
    if !gold.is_empty() {
        // Exact: the labelled rows are kept whole and the rest are sums.
        crate::gold::insert(&mut summary, &gold);
    }
    if let Some(out) = &args.output {
        let text = serde_json::to_string_pretty(&summary).expect("summary serialises");
        refscore_write::write_atomically(out, &text)?;
    }
    if !args.quiet {
        crate::print_out(&crate::summary_table::table(&summary))?;
    }
    Ok(())
}

/// The summaries must be every shard (1..N, each once, one N) of one run.
fn check_complete_set(count: usize, shards: &[String], run_ids: &[String]) -> Result<(), Error> {
    if shards.len() != count {
        return Err(Error::config(
            "every summary must come from a sharded run (score --shard K/N)",
        ));
    }
    if run_ids.len() != count || run_ids.iter().any(|r| r != &run_ids[0]) {
        return Err(Error::config(
            "not a shard of the same run: the summaries come from runs with other inputs or settings",
        ));
    }
    let parsed: Vec<refscore_job::Shard> = shards
        .iter()
        .map(|s| s.parse().map_err(Error::bad_input))
        .collect::<Result<_, _>>()?;
    let n = parsed[0].count;
    if parsed.iter().any(|s| s.count != n) {
        return Err(Error::config(
            "the shards were cut into different numbers of parts",
        ));
    }
    let missing: Vec<String> = (1..=n)
        .filter(|k| !parsed.iter().any(|s| s.index == *k))
        .map(|k| format!("{k}/{n}"))
        .collect();
    if !missing.is_empty() {
        return Err(Error::config(format!(
            "shards missing: {} (give every shard's summary)",
            missing.join(", ")
        )));
    }
    Ok(())
}
