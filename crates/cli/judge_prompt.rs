//! The `judge-prompt` command: the exact request the judge would get for
//! one metric and one row, read with the run's own settings, sent nowhere.

use std::ffi::OsString;

use arrow::array::{Array, ArrayRef};
use arrow::util::display::array_value_to_string;
use clap::Arg;
use refscore_core::metric::MetricSet;
use refscore_core::{Error, RowBatch};
use refscore_judge::{Endpoint, JudgeOptions, JudgeStage, Prompt};
use refscore_read::Dataset;

use crate::pipeline;
use crate::settings::Settings;

/// Prints the request for `--metric` about the row `--row` names.
pub fn run(words: &[OsString]) -> Result<(), Error> {
    let extra = vec![
        Arg::new("metric").long("metric").required(true),
        Arg::new("row").long("row").required(true),
    ];
    let (settings, matches) = Settings::with_extra(words, extra)?;
    let metric = matches.get_one::<String>("metric").expect("required");
    let row = matches.get_one::<String>("row").expect("required");
    let catalog = settings.judge_metrics.catalog();
    let chosen = catalog
        .find(metric)
        .filter(|m| m.group == refscore_core::metric::Group::Judge)
        .ok_or_else(|| {
            Error::usage(format!(
                "--metric {metric}: not a judge metric (judge metrics: {})",
                settings.judge_metrics.names().join(", ")
            ))
        })?;
    let mut only = MetricSet::new();
    only.insert(&chosen);
    let mut read = pipeline::read_options(&settings);
    read.prompt_columns = settings.judge_metrics.columns_read(&only);
    read.row_filter = None;
    let dataset = Dataset::open(&settings.input, &read)?;
    let (batch, i) = find_row(&dataset, row)?;
    // The request alone: no cascade decides, no cache answers, every row
    // asks.
    let stage = JudgeStage::new(JudgeOptions {
        tiers: Default::default(),
        cache_dir: None,
        where_column: None,
        ..pipeline::judge_options(&settings, endpoint(&settings)?, only)
    })?;
    match stage.request_for(metric, &batch, i)? {
        Prompt::Request(body) => crate::print_out(&format!(
            "{}\n",
            serde_json::to_string_pretty(&body).expect("JSON serialises")
        )),
        Prompt::Decided(why) => crate::print_out(&format!("row {row}: {why}\n")),
    }
}

/// The run's endpoint; without `--judge-url`, the settings stand a
/// placeholder URL in (the request's body names only the model). Never
/// called: no key is read.
fn endpoint(settings: &Settings) -> Result<Endpoint, Error> {
    let j = (settings.judge.as_ref())
        .ok_or_else(|| Error::internal("judge-prompt settings without a judge"))?;
    j.endpoint(&j.url, &j.model, None)
}

/// The batch holding the row whose id reads `id`, and the row's index in it.
fn find_row(dataset: &Dataset, id: &str) -> Result<(RowBatch, usize), Error> {
    for batch in dataset.batches() {
        let batch = batch?;
        if let Some(i) = position(&batch.id, id) {
            return Ok((batch, i));
        }
    }
    let column = dataset.columns().id.as_deref().unwrap_or("(row ordinals)");
    Err(Error::bad_input(format!(
        "no row has id '{id}' (id column: {column})"
    )))
}

/// The first row of `ids` whose value displays as `id`.
fn position(ids: &ArrayRef, id: &str) -> Option<usize> {
    (0..ids.len())
        .find(|&i| ids.is_valid(i) && array_value_to_string(ids, i).is_ok_and(|v| v == id))
}
