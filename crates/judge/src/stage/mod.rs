//! The judge stage: decides each requested metric by rule, band, cache or a
//! call, runs the calls on worker threads and builds the output columns.
//!
//! Meaning Match and similarity are asked verdict first (one word or one
//! number, read with its token probabilities), with a reason as a follow-up
//! turn only where `--judge-reasons` wants one; `always` asks for verdict and
//! reason in one JSON answer. The fact ratio extracts the facts of each
//! distinct reference and output once, then asks one yes/no check per fact
//! and counts in refscore.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, AsArray, StringArray};
use arrow::datatypes::{DataType, Field};
use lru::LruCache;
use refscore_core::{Error, RowBatch, ScoreColumns};
use serde_json::{json, Value};

use crate::batch::{BatchMode, Collected, JudgeBatches};
use crate::cache::{DiskCache, Store};
use crate::client::{AskFailure, Client};
use crate::columns::{self, normalised};
use crate::decide::{
    self, add_usage, fail, rules, Answers, Decided, Outcome, Pending, Row, Source,
};
use crate::definition::{Answer, Rubric};
use crate::keyed_log::KeyedLog;
use crate::metric::{JudgeMetric, JudgeMetrics};
use crate::parse::{self, extract_object, snippet};
use crate::probs::{expected_score, value_token, verdict_p, verdict_word};
use crate::prompts::{Template, FACT_CHECK, FACT_EXTRACT};
use crate::protocol::Ask;
use crate::tiers::ChainValues;
use crate::transport::{Reply, Usage};
use crate::where_column::Wanted;
use crate::{BatchReport, JudgeOptions, JudgeReport, Reasons};

mod core_stage;
mod facts;
mod reasons;
mod rubric;
mod stored;
mod work;

pub use rubric::Prompt;
pub(crate) use work::Work;

use facts::{parse_check, read_word_verdict};
use work::{Check, Question};

/// A row wanting the fact ratio: its row, the metric's index, and the
/// hashes of its reference's and its output's texts.
pub(crate) type FactRow = (usize, usize, String, String);

/// The judge stage: endpoint client, caches and counters.
pub struct JudgeStage {
    client: Client,
    options: JudgeOptions,
    /// The run's judge metrics, in output order.
    metrics: Vec<JudgeMetric>,
    disk: Option<DiskCache>,
    journal: Option<KeyedLog>,
    /// Facts of answers already extracted, by the hash of the answer.
    facts: LruCache<String, Arc<Vec<String>>>,
    report: JudgeReport,
    /// Tokens of answers replayed from the journal, added to the totals so
    /// that a resumed run reports what a clean run would.
    replayed_tokens: (u64, u64, u64),
    /// Follow-up calls for a reason, and fact checks asked of the model.
    reasons_asked: AtomicU64,
    fact_checks: AtomicU64,
    /// Rows of the last batch with a judge failure.
    last_rows_failed: u64,
    last_rows_retryable: u64,
    /// The first of those rows' error.
    last_retry_reason: Option<String>,
    /// The output mode last recorded in the cache and journal folders.
    recorded_mode: String,
    /// `--judge-batch`: the run's judge batches, which answer in place of
    /// calls.
    batches: Option<JudgeBatches>,
}

/// The journal's file in its folder.
const JOURNAL: &str = "answers.jsonl";

/// A parsed reply, what it cost and the output mode that produced it.
type JobResult = Result<(Value, Usage, &'static str), AskFailure>;

/// The output mode under which answers to one-word and free-text requests
/// are stored (they ask for no format).
const NO_FORMAT: &str = "none";

impl JudgeStage {
    /// Sets up the client and opens the cache folder. The error is a
    /// configuration error when the URL is not a usable base URL.
    pub fn new(options: JudgeOptions) -> Result<JudgeStage, Error> {
        let client = Client::new(options.endpoint.clone())?;
        let disk = match &options.cache_dir {
            Some(d) => Some(DiskCache::open(d.clone()).map_err(Error::io)?),
            None => None,
        };
        let api = options.endpoint.api;
        let report = JudgeReport {
            templates: crate::template_versions(),
            tiers: options.tiers.counts(),
            reasons: options.reasons.name().to_string(),
            api: api.recorded().map(String::from),
            token_probabilities: (!client.protocol().token_probabilities()).then(|| {
                format!(
                    "none: the {} API offers none; every verdict and score is the sampled answer, and *_p columns are null",
                    api.name()
                )
            }),
            ..JudgeReport::default()
        };
        let mut stage = JudgeStage {
            client,
            metrics: options.judge_metrics.selected(&options.metrics),
            options,
            disk,
            journal: None,
            facts: LruCache::new(std::num::NonZeroUsize::new(100_000).expect("non-zero")),
            report,
            replayed_tokens: (0, 0, 0),
            reasons_asked: AtomicU64::new(0),
            fact_checks: AtomicU64::new(0),
            last_rows_failed: 0,
            last_rows_retryable: 0,
            last_retry_reason: None,
            recorded_mode: String::new(),
            batches: None,
        };
        stage.resume_mode();
        Ok(stage)
    }

    /// Turns on the "paid answers" journal in `dir`: every successful judge
    /// answer is written there with what it cost, and a later run with the
    /// same journal replays it as a judge answer (source `judge`, the same
    /// tokens and latency) instead of paying again, so a crashed run can
    /// redo a batch and produce exactly what a clean run would. Checked
    /// before the cache. (A setter rather than a [`JudgeOptions`] field so
    /// that code building the options with a struct literal keeps working.)
    pub fn set_journal_dir(&mut self, dir: PathBuf) -> Result<(), Error> {
        self.journal = Some(KeyedLog::open(&dir, JOURNAL).map_err(Error::io)?);
        self.resume_mode();
        Ok(())
    }

    /// Sends what the judge is asked as judge batches kept in `dir` (the
    /// run folder's) instead of calls: answers come from collected batches
    /// and the rest waits for [`JudgeStage::send_out_batches`].
    pub fn use_batches(&mut self, dir: PathBuf, mode: &BatchMode) -> Result<(), Error> {
        let batches = JudgeBatches::open(dir, mode, &self.options.endpoint)?;
        self.client.use_transport(Box::new(batches.transport()));
        self.report.batch = Some(BatchReport {
            mode: mode.name(),
            ..BatchReport::default()
        });
        self.batches = Some(batches);
        Ok(())
    }

    /// In batch mode, before a pass: collects the batches sent out after the
    /// last one, waiting up to `wait` (none: polls once) and telling
    /// `progress` how they stand; `Some(message)` while some still run.
    pub fn batches_still_out(
        &mut self,
        wait: Option<std::time::Duration>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Option<String>, Error> {
        let Some(batches) = self.batches.as_mut() else {
            return Ok(None);
        };
        Ok(match batches.collect(wait, progress)? {
            Collected::Ready => None,
            Collected::Waiting(line) => Some(format!(
                "judge batches still running: {line}; run the same command with --resume to collect"
            )),
        })
    }

    /// In batch mode, after a pass: submits what the pass set aside;
    /// `Some(message)` says what went out and how to collect it.
    pub fn send_out_batches(&mut self) -> Result<Option<String>, Error> {
        match self.batches.as_mut() {
            Some(batches) => Ok(batches.submit()?.map(|s| s.message())),
            None => Ok(None),
        }
    }

    /// Rows of the last [`score_batch`](Self::score_batch) call where at
    /// least one requested judge metric was left null because the judge
    /// failed (the caller's signal for "finished, but incomplete").
    pub fn last_batch_rows_failed(&self) -> u64 {
        self.last_rows_failed
    }

    /// Of those, the rows where the endpoint itself failed (unreachable,
    /// timing out, 429, 5xx) rather than answering badly: a later try may
    /// succeed, so a resumed run scores them again. An answer that does not
    /// parse, or a 4xx, would fail the same way again.
    pub fn last_batch_rows_retryable(&self) -> u64 {
        self.last_rows_retryable
    }

    /// The error of the first of those rows.
    pub fn last_batch_retry_reason(&self) -> Option<String> {
        self.last_retry_reason.clone()
    }

    /// The stage's options.
    /// Each metric's template versions as this run asks them (see
    /// [`JudgeMetric::template_versions_with`]).
    pub(crate) fn template_versions(&self) -> Vec<String> {
        let o = &self.options;
        self.metrics
            .iter()
            .map(|jm| jm.template_versions_with(o.facts, o.fact_check.is_some()))
            .collect()
    }

    pub(crate) fn options(&self) -> &JudgeOptions {
        &self.options
    }

    /// The run's judge metrics, in output order.
    pub(crate) fn metrics(&self) -> &[JudgeMetric] {
        &self.metrics
    }

    /// `--judge-where`, for messages.
    pub(crate) fn where_column(&self) -> Option<&str> {
        self.options.where_column.as_deref()
    }

    /// The judge metrics the run knows, for `--judge-where`.
    pub(crate) fn known(&self) -> &JudgeMetrics {
        &self.options.judge_metrics
    }

    /// The run's defined metrics as the summary records them.
    pub(crate) fn defined(&self) -> std::collections::BTreeMap<String, Value> {
        self.options.judge_metrics.record(&self.options.metrics)
    }

    /// Totals so far.
    pub fn report(&self) -> JudgeReport {
        let c = &self.client.counters;
        JudgeReport {
            calls: c.calls.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            parse_failures: c.parse_failures.load(Ordering::Relaxed),
            prompt_tokens: c.prompt_tokens.load(Ordering::Relaxed) + self.replayed_tokens.0,
            completion_tokens: c.completion_tokens.load(Ordering::Relaxed) + self.replayed_tokens.1,
            prompt_tokens_cached: c.cached_tokens.load(Ordering::Relaxed) + self.replayed_tokens.2,
            replies_with_logprobs: c.with_logprobs.load(Ordering::Relaxed),
            replies_without_logprobs: c.without_logprobs.load(Ordering::Relaxed),
            reasons_asked: self.reasons_asked.load(Ordering::Relaxed),
            fact_checks: self.fact_checks.load(Ordering::Relaxed),
            call_seconds: c.busy_ms.load(Ordering::Relaxed) as f64 / 1000.0,
            response_format: self.client.mode_name().to_string(),
            modes: self.client.mode_summary(),
            batch: self.report.batch.clone().map(|b| {
                let (batches, requests) = self.batches.as_ref().map_or((0, 0), |j| j.totals());
                BatchReport {
                    batches,
                    requests,
                    ..b
                }
            }),
            ..self.report.clone()
        }
    }

    /// The output fields: per selected metric its value, explanation and
    /// source columns, then the judge accounting and template columns.
    pub fn fields(&self) -> Vec<Field> {
        columns::fields_of(&self.metrics)
    }

    /// Judges one batch. `requested[i]` says which metrics row i asks for;
    /// `values` holds the rows' scores that the chain's tiers read.
    pub(crate) fn score_batch(
        &mut self,
        batch: &RowBatch,
        requested: &[Wanted],
        values: &ChainValues,
    ) -> Result<ScoreColumns, Error> {
        let d = self.decide(batch, requested, values)?;
        Ok(columns::build(
            &self.metrics,
            &self.template_versions(),
            batch.len(),
            &d.verdicts,
            &d.usage,
            d.errors,
        ))
    }

    /// Decides every requested metric of every row (see
    /// [`score_batch`](Self::score_batch)), before the columns are built: a
    /// panel of judges combines several stages' decisions.
    pub(crate) fn decide(
        &mut self,
        batch: &RowBatch,
        requested: &[Wanted],
        values: &ChainValues,
    ) -> Result<Decided, Error> {
        self.decide_by(decide::STEPS, batch, requested, values)
    }

    /// Decides the values a panel asks this later judge about (see
    /// [`decide::asking`]): the shared steps, run at the panel's first
    /// judge, already passed them on.
    pub(crate) fn decide_asking(
        &mut self,
        batch: &RowBatch,
        requested: &[Wanted],
    ) -> Result<Decided, Error> {
        self.decide_by(decide::asking(), batch, requested, &ChainValues::none())
    }

    /// Each requested value walks `steps`; the work they queued then runs,
    /// calls first and the fact ratio's checks after.
    fn decide_by(
        &mut self,
        steps: &[&dyn decide::DecisionStep],
        batch: &RowBatch,
        requested: &[Wanted],
        values: &ChainValues,
    ) -> Result<Decided, Error> {
        let metrics = self.metrics.clone();
        let mut work = Pending::new(metrics.len(), batch.len());
        let columns = columns_as_text(batch)?;
        for (i, wanted) in requested.iter().enumerate().take(batch.len()) {
            if batch.unscorable(i).is_some() || !metrics.iter().any(|j| wanted.asks(j.metric())) {
                continue;
            }
            self.report.rows_requested += 1;
            let answers = Answers::of(batch, i);
            for (m, metric) in metrics.iter().enumerate() {
                if wanted.asks(metric.metric()) {
                    let mut row = Row {
                        batch,
                        i,
                        m,
                        metric,
                        answers: &answers,
                        values,
                        columns: &columns,
                        question: None,
                    };
                    decide::walk(steps, self, &mut row, &mut work);
                }
            }
        }
        let extraction_down = self.run_work(&mut work);
        self.check_facts(batch, &work.fact_rows, &extraction_down, &mut work.decided);
        self.close_batch(&work.decided);
        Ok(work.decided)
    }

    /// Counts what a batch's decisions came to, for the report and
    /// [`Self::last_batch_rows_failed`] and its kin.
    fn close_batch(&mut self, d: &Decided) {
        self.record_mode();
        self.report.rows_judged += d.judged.iter().filter(|j| **j).count() as u64;
        (
            self.last_rows_failed,
            self.last_rows_retryable,
            self.last_retry_reason,
        ) = d.failures();
        self.report.rows_failed += self.last_rows_failed;
        let (for_good, first) = d.failures_for_good();
        self.report.rows_failed_for_good += for_good;
        self.report.values_answered += d.values_answered();
        if self.report.first_failure_for_good.is_none() {
            self.report.first_failure_for_good = first;
        }
    }

    /// The run's totals, where the decision steps count what they settle.
    pub(crate) fn counts(&mut self) -> &mut JudgeReport {
        &mut self.report
    }
}

/// The text of each column judge prompts read, for one batch. A value
/// that has no text form (binary that is not UTF-8) is bad input naming
/// the file, column and row, never an empty text in the prompt.
pub(super) fn columns_as_text(batch: &RowBatch) -> Result<Vec<(&str, StringArray)>, Error> {
    batch
        .prompt_columns
        .iter()
        .map(|(name, array)| {
            let at = |detail: String| {
                Error::bad_input(format!("{}: column '{name}': {detail}", batch.source))
            };
            let text =
                arrow::compute::cast(array, &DataType::Utf8).map_err(|e| at(e.to_string()))?;
            let text = text.as_string::<i32>().clone();
            // The cast turns what it cannot convert into nulls.
            if let Some(i) = (0..text.len()).find(|&i| array.is_valid(i) && text.is_null(i)) {
                return Err(at(format!(
                    "row {}: the {} value has no text form (not UTF-8?)",
                    batch.first_row_in_source + i as u64,
                    array.data_type()
                )));
            }
            Ok((name.as_str(), text))
        })
        .collect()
}

/// A rubric's user message for row `i`: its template over the row's
/// question, reference, output and the input columns it reads (a null
/// value is empty text).
pub(crate) fn render(
    rubric: &Rubric,
    batch: &RowBatch,
    i: usize,
    columns: &[(&str, StringArray)],
) -> Result<String, String> {
    let template = &rubric.template;
    let input = batch
        .input
        .as_ref()
        .and_then(|c| c.get(i))
        .unwrap_or("(no question given)");
    let row: std::collections::BTreeMap<&str, &str> = columns
        .iter()
        .filter(|(name, _)| rubric.columns.iter().any(|c| c == name))
        .map(|(name, a)| (*name, if a.is_valid(i) { a.value(i) } else { "" }))
        .collect();
    template.render_row(&minijinja::context! {
        input => input,
        reference => batch.reference().get(i).unwrap_or(""),
        output => batch.output().get(i).unwrap_or(""),
        row => row,
    })
}

#[cfg(test)]
pub(crate) mod tests;

#[cfg(test)]
mod defined_tests;
