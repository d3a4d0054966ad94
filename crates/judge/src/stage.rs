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

use arrow::array::{Array, Float32Array};
use arrow::datatypes::Field;
use lru::LruCache;
use refscore_batch::{Error, RowBatch, ScoreColumns};
use serde_json::{json, Value};

use crate::cache::DiskCache;
use crate::client::{Ask, AskFailure, Client, Reply, Usage};
use crate::columns::{self, normalised, Decisions, Outcome, Source};
use crate::metric::{self, Answer, Asking, JudgeMetric};
use crate::parse::{self, extract_object, snippet};
use crate::probs::{expected_score, value_token, verdict_p, verdict_word};
use crate::prompts::{Template, ALL, FACT_CHECK, FACT_EXTRACT};
use crate::route::Wanted;
use crate::{rules, JudgeOptions, JudgeReport, Reasons};

/// One piece of work for the model. `texts` is the hash of the texts the
/// prompt is made of; with the request's other parameters it makes the
/// cache and journal key (see [`JudgeStage::key`]).
enum Job {
    /// One rubric of one row; `metric` indexes the stage's metrics.
    Ask {
        row: usize,
        metric: usize,
        texts: String,
    },
    /// The atomic facts of one answer (a reference or an output).
    Extract { texts: String, answer: String },
    /// Does `answer` state `fact`? One check of the fact ratio.
    Check {
        texts: String,
        input: String,
        answer: String,
        fact: String,
    },
}

/// The judge stage: endpoint client, caches and counters.
pub struct JudgeStage {
    client: Client,
    options: JudgeOptions,
    /// The run's judge metrics, in output order.
    metrics: Vec<&'static JudgeMetric>,
    disk: Option<DiskCache>,
    journal: Option<DiskCache>,
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
    /// The output mode last recorded in the cache and journal folders.
    recorded_mode: String,
}

/// A parsed reply, what it cost and the output mode that produced it.
type JobResult = Result<(Value, Usage, &'static str), AskFailure>;

/// The output mode under which answers to one-word and free-text requests
/// are stored (they ask for no format).
const NO_FORMAT: &str = "none";

/// The key under which the cache and journal folders record the output mode
/// an endpoint negotiated, so a later run starts in it and finds its answers.
fn mode_key(client: &Client) -> String {
    DiskCache::key(&["negotiated output mode", client.shown_url(), client.model()])
}

impl JudgeStage {
    /// Sets up the client and opens the cache folder. The error is a
    /// configuration error when the URL is not a usable base URL.
    pub fn new(options: JudgeOptions) -> Result<JudgeStage, Error> {
        let client = Client::new(options.endpoint.clone())?;
        let disk = match &options.cache_dir {
            Some(d) => Some(DiskCache::open(d.clone()).map_err(Error::io)?),
            None => None,
        };
        let report = JudgeReport {
            templates: ALL.iter().map(|t| t.hash()).collect(),
            reasons: options.reasons.name().to_string(),
            ..JudgeReport::default()
        };
        let mut stage = JudgeStage {
            client,
            metrics: metric::selected(&options.metrics),
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
            recorded_mode: String::new(),
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
        self.journal = Some(DiskCache::open(dir).map_err(Error::io)?);
        self.resume_mode();
        Ok(())
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

    /// `--judge-where`, for messages.
    pub(crate) fn where_column(&self) -> Option<&str> {
        self.options.where_column.as_deref()
    }

    /// Starts the client in the output mode an earlier run negotiated with
    /// this endpoint, as recorded in the journal or cache folder.
    fn resume_mode(&mut self) {
        let key = mode_key(&self.client);
        for store in [&self.journal, &self.disk].into_iter().flatten() {
            if let Some(mode) = store
                .get(&key)
                .and_then(|v| v["mode"].as_str().map(String::from))
            {
                self.client.start_in_mode(&mode);
            }
        }
        self.recorded_mode = self.client.mode_name().to_string();
    }

    /// Records the output mode when it changed during a batch.
    fn record_mode(&mut self) {
        let mode = self.client.mode_name();
        if mode == self.recorded_mode {
            return;
        }
        let key = mode_key(&self.client);
        for store in [&self.journal, &self.disk].into_iter().flatten() {
            store.put(&key, &json!({ "mode": mode }));
        }
        self.recorded_mode = mode.to_string();
    }

    /// The hash of a row's texts for a rubric, with what else decides
    /// the stored answer: with `failures`, whether a reason was asked
    /// depends on the thresholds.
    fn ask_texts(&self, input: &str, reference: &str, output: &str) -> String {
        match self.options.reasons {
            Reasons::Always => DiskCache::key(&[input, reference, output]),
            Reasons::Never => DiskCache::key(&[input, reference, output, "never"]),
            Reasons::Failures => DiskCache::key(&[
                input,
                reference,
                output,
                "failures",
                &self.options.threshold.to_string(),
                &self.options.similarity_pass.to_string(),
            ]),
        }
    }

    /// The cache and journal key of a request: the template and every other
    /// request parameter that can change the answer (URL, model, token
    /// limit, temperature, output mode), and the hash of its texts.
    fn key(&self, template: &Template, mode: &str, texts: &str) -> String {
        DiskCache::key(&[&self.client.request_id(template, mode), texts])
    }

    /// The output mode a request to `template` is sent in now.
    fn mode_for(&self, template: &Template) -> &'static str {
        if template.structured {
            self.client.mode_name()
        } else {
            NO_FORMAT
        }
    }

    /// A stored answer for a request in the current output mode: from the
    /// journal first (a paid answer replayed with its usage, source
    /// `judge`), else from the cache (source `cache`, no usage).
    fn lookup(&self, template: &Template, texts: &str) -> Option<(Value, Usage, Source)> {
        let key = self.key(template, self.mode_for(template), texts);
        if let Some(entry) = self.journal.as_ref().and_then(|j| j.get(&key)) {
            let u = |k: &str| {
                entry["usage"][k]
                    .as_u64()
                    .map_or(0, |t| u32::try_from(t).unwrap_or(u32::MAX))
            };
            if entry.get("answer").is_some() {
                let usage = Usage {
                    prompt_tokens: u("prompt_tokens"),
                    completion_tokens: u("completion_tokens"),
                    cached_tokens: u("cached_tokens"),
                    latency_ms: u("latency_ms"),
                };
                return Some((entry["answer"].clone(), usage, Source::Judge));
            }
        }
        let v = self.disk.as_ref().and_then(|d| d.get(&key))?;
        Some((v, Usage::default(), Source::Cache))
    }

    /// Counts an answer replayed from the journal like the call it stands for.
    fn count_replay(&mut self, usage: Usage) {
        self.report.replayed += 1;
        self.replayed_tokens.0 += u64::from(usage.prompt_tokens);
        self.replayed_tokens.1 += u64::from(usage.completion_tokens);
        self.replayed_tokens.2 += u64::from(usage.cached_tokens);
    }

    /// Stores a judge answer in the cache and, with its usage, the journal,
    /// under the key of the output mode that produced it.
    fn record(&self, template: &Template, mode: &str, texts: &str, v: &Value, usage: Usage) {
        let key = self.key(template, mode, texts);
        if let Some(d) = &self.disk {
            d.put(&key, v);
        }
        if let Some(j) = &self.journal {
            j.put(
                &key,
                &json!({"answer": v, "usage": {
                    "prompt_tokens": usage.prompt_tokens,
                    "completion_tokens": usage.completion_tokens,
                    "cached_tokens": usage.cached_tokens,
                    "latency_ms": usage.latency_ms,
                }}),
            );
        }
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
            ..self.report.clone()
        }
    }

    /// The output fields: per selected metric its value, explanation and
    /// source columns, then the judge accounting and template columns.
    pub fn fields(&self) -> Vec<Field> {
        columns::fields_of(&self.metrics)
    }

    /// A stored or fresh answer to a rubric as the row's verdict.
    fn verdict(&self, jm: &JudgeMetric, v: &Value) -> Result<Outcome, String> {
        let Asking::Rubric {
            answer,
            value_keys,
            reason_keys,
            ..
        } = &jm.asking
        else {
            unreachable!("the fact ratio is not asked as one question")
        };
        match *answer {
            Answer::Verdict => {
                parse::verdict(v, value_keys, reason_keys).map(|a| Outcome::Verdict {
                    verdict: a.p_true.map_or(a.sampled, |p| p >= self.options.threshold),
                    p_true: a.p_true,
                    reason: a.reason,
                })
            }
            Answer::Score { min, max } => {
                parse::score(v, value_keys, reason_keys, (min, max)).map(|a| Outcome::Score {
                    score: a.score,
                    expected: a.expected,
                    reason: a.reason,
                })
            }
        }
    }

    /// Judges one batch. `requested[i]` says which metrics row i asks for;
    /// `cosine` (when a band is set) holds the rows' cosine scores.
    pub(crate) fn score_batch(
        &mut self,
        batch: &RowBatch,
        requested: &[Wanted],
        cosine: Option<&Float32Array>,
    ) -> Result<ScoreColumns, Error> {
        let n = batch.len();
        let metrics = self.metrics.clone();
        // verdicts[m][row], m indexing `metrics`.
        let mut verdicts: Vec<Decisions> = vec![vec![None; n]; metrics.len()];
        let mut usage: Vec<Usage> = vec![Usage::default(); n];
        let mut errors: Vec<Option<String>> = vec![None; n];
        // Rows with a failure of the endpoint itself (see last_batch_rows_retryable).
        let mut transient: Vec<bool> = vec![false; n];
        let mut extraction_down: HashSet<String> = HashSet::new();
        let mut jobs: Vec<Job> = Vec::new();
        // Fact-ratio rows: (row, metric, hash of its reference's texts, of
        // its output's).
        let mut fact_rows: Vec<(usize, usize, String, String)> = Vec::new();
        let mut extracting: HashSet<String> = HashSet::new();
        let mut judged = vec![false; n];

        for i in 0..n {
            if batch.unscorable(i).is_some() || !metrics.iter().any(|j| requested[i].asks(j.metric))
            {
                continue;
            }
            self.report.rows_requested += 1;
            let (reference, output) = (
                batch.reference.get(i).unwrap_or(""),
                batch.output.get(i).unwrap_or(""),
            );
            let input = batch.input.as_ref().and_then(|c| c.get(i)).unwrap_or("");
            let empty = output.trim().is_empty();
            let same = !empty && rules::same_answer(reference, output);
            for (m, jm) in metrics.iter().enumerate() {
                if !requested[i].asks(jm.metric) {
                    continue;
                }
                if let Some(verdict) = rules::by_rule(jm, empty, same) {
                    self.report.decided_by_rule += 1;
                    verdicts[m][i] = Some((verdict, Source::Rule));
                    continue;
                }
                if let (true, Some(band), Some(cos)) =
                    (jm.rules.cosine_band, self.options.band, cosine)
                {
                    if cos.is_valid(i) {
                        if let Some(verdict) = rules::by_band(cos.value(i), band) {
                            self.report.decided_by_band += 1;
                            verdicts[m][i] = Some((verdict, Source::Band));
                            continue;
                        }
                    }
                }
                let Some(template) = jm.template() else {
                    let mut keys = Vec::with_capacity(2);
                    for answer in [reference, output] {
                        let texts = DiskCache::key(&[answer]);
                        self.want_facts(&texts, answer, &mut extracting, &mut jobs);
                        keys.push(texts);
                    }
                    let out_key = keys.pop().expect("two keys");
                    let ref_key = keys.pop().expect("two keys");
                    fact_rows.push((i, m, ref_key, out_key));
                    continue;
                };
                let texts = self.ask_texts(input, reference, output);
                if let Some((v, u, source)) = self.lookup(template, &texts) {
                    if let Ok(verdict) = self.verdict(jm, &v) {
                        if source == Source::Judge {
                            self.count_replay(u);
                            add_usage(&mut usage[i], u);
                            judged[i] = true;
                        } else {
                            self.report.cached += 1;
                        }
                        verdicts[m][i] = Some((verdict, source));
                        continue;
                    }
                }
                jobs.push(Job::Ask {
                    row: i,
                    metric: m,
                    texts,
                });
            }
        }

        // Phase 1: rubrics and fact extraction.
        let results = self.run_jobs(&jobs, batch);
        for (job, result) in jobs.iter().zip(results) {
            match (job, result) {
                (Job::Ask { row, metric, .. }, Ok((v, u, _))) => {
                    add_usage(&mut usage[*row], u);
                    judged[*row] = true;
                    match self.verdict(metrics[*metric], &v) {
                        Ok(verdict) => {
                            verdicts[*metric][*row] = Some((verdict, Source::Judge));
                        }
                        Err(e) => fail(
                            &mut errors[*row],
                            &mut self.report,
                            metrics[*metric].name(),
                            &e,
                        ),
                    }
                }
                (Job::Ask { row, metric, .. }, Err(e)) => {
                    judged[*row] = true;
                    transient[*row] |= e.transient;
                    fail(
                        &mut errors[*row],
                        &mut self.report,
                        metrics[*metric].name(),
                        &e.message,
                    );
                }
                (Job::Extract { texts, .. }, Ok((v, _, _))) => {
                    if let Ok(f) = parse::facts(&v) {
                        self.facts.put(texts.clone(), Arc::new(f));
                    }
                }
                (Job::Extract { texts, .. }, Err(e)) => {
                    if e.transient {
                        extraction_down.insert(texts.clone());
                    }
                }
                (Job::Check { .. }, _) => unreachable!("checks run in phase 2"),
            }
        }

        // Phase 2: one check per reference fact (does the output state it?)
        // and per output fact (does the reference state it?).
        let mut checks: Vec<Job> = Vec::new();
        let mut check_index: HashMap<String, usize> = HashMap::new();
        // Per use of a check: its row, whether it checks a reference fact,
        // and the check (asked once per batch however many rows need it).
        let mut uses: Vec<(usize, bool, usize)> = Vec::new();
        // Per fact row: (row, reference facts, output facts, supported
        // reference facts, supported output facts).
        let mut tallies: Vec<(usize, usize, usize, usize, usize)> = Vec::new();
        let mut tally_of: HashMap<usize, usize> = HashMap::new();
        // The fact ratio's index in `metrics` (one metric, whatever the row).
        let mut fact_metric = 0;
        for (i, m, ref_key, out_key) in &fact_rows {
            let i = *i;
            fact_metric = *m;
            let (Some(ref_facts), Some(out_facts)) = (
                self.facts.get(ref_key).cloned(),
                self.facts.get(out_key).cloned(),
            ) else {
                transient[i] |=
                    extraction_down.contains(ref_key) || extraction_down.contains(out_key);
                fail(
                    &mut errors[i],
                    &mut self.report,
                    "fact_similarity",
                    "the facts of the reference or the output could not be extracted",
                );
                continue;
            };
            if ref_facts.is_empty() {
                fail(
                    &mut errors[i],
                    &mut self.report,
                    "fact_similarity",
                    "the judge found no facts in the reference",
                );
                continue;
            }
            judged[i] = true;
            let (input, reference, output) = (
                batch.input.as_ref().and_then(|c| c.get(i)).unwrap_or(""),
                batch.reference.get(i).unwrap_or(""),
                batch.output.get(i).unwrap_or(""),
            );
            let mut tally = (i, ref_facts.len(), out_facts.len(), 0, 0);
            let sides = [(true, output, &ref_facts), (false, reference, &out_facts)];
            for (is_ref, answer, facts) in sides {
                for fact in facts.iter() {
                    let texts = DiskCache::key(&[input, answer, fact]);
                    if let Some(&k) = check_index.get(&texts) {
                        uses.push((i, is_ref, k));
                        continue;
                    }
                    if let Some((v, u, source)) = self.lookup(&FACT_CHECK, &texts) {
                        if let Ok(holds) = parse_check(&v) {
                            if source == Source::Judge {
                                self.count_replay(u);
                                add_usage(&mut usage[i], u);
                            } else {
                                self.report.cached += 1;
                            }
                            if holds {
                                if is_ref {
                                    tally.3 += 1;
                                } else {
                                    tally.4 += 1;
                                }
                            }
                            continue;
                        }
                    }
                    check_index.insert(texts.clone(), checks.len());
                    uses.push((i, is_ref, checks.len()));
                    checks.push(Job::Check {
                        texts,
                        input: input.into(),
                        answer: answer.into(),
                        fact: fact.clone(),
                    });
                }
            }
            tally_of.insert(i, tallies.len());
            tallies.push(tally);
        }
        let results = self.run_jobs(&checks, batch);
        let mut paid = vec![false; checks.len()];
        let mut check_failed: HashSet<usize> = HashSet::new();
        for (row, is_ref, k) in uses {
            let t = &mut tallies[tally_of[&row]];
            let outcome = match &results[k] {
                Ok((v, u, _)) => {
                    // What a check cost goes to the first row that used it.
                    if !std::mem::replace(&mut paid[k], true) {
                        add_usage(&mut usage[row], *u);
                    }
                    parse_check(v).map_err(|e| (e, false))
                }
                Err(e) => Err((e.message.clone(), e.transient)),
            };
            match outcome {
                Ok(true) if is_ref => t.3 += 1,
                Ok(true) => t.4 += 1,
                Ok(false) => {}
                Err((e, is_transient)) => {
                    transient[row] |= is_transient;
                    if check_failed.insert(row) {
                        fail(&mut errors[row], &mut self.report, "fact_similarity", &e);
                    }
                }
            }
        }
        for (row, n_ref, n_out, ref_held, out_held) in tallies {
            if check_failed.contains(&row) {
                continue;
            }
            // One-to-one pairs: no more than the facts supported on the
            // side with fewer (docs/metrics.md#fact-ratio).
            let matched = ref_held.min(out_held) as u32;
            verdicts[fact_metric][row] = Some((
                Outcome::Facts(Some((matched, n_ref as u32, n_out as u32))),
                Source::Judge,
            ));
        }

        self.record_mode();
        self.report.rows_judged += judged.iter().filter(|j| **j).count() as u64;
        self.last_rows_failed = errors.iter().filter(|e| e.is_some()).count() as u64;
        self.last_rows_retryable = errors
            .iter()
            .zip(&transient)
            .filter(|(e, t)| e.is_some() && **t)
            .count() as u64;
        self.report.rows_failed += self.last_rows_failed;
        Ok(columns::build(&metrics, n, &verdicts, &usage, errors))
    }

    /// Makes sure the facts of `answer` are known or asked for:
    /// from memory, the journal or cache, else a new extraction job (once
    /// per batch for each distinct text).
    fn want_facts(
        &mut self,
        texts: &str,
        answer: &str,
        extracting: &mut HashSet<String>,
        jobs: &mut Vec<Job>,
    ) {
        if self.facts.contains(texts) || extracting.contains(texts) {
            return;
        }
        if let Some((v, usage, source)) = self.lookup(&FACT_EXTRACT, texts) {
            if let Ok(f) = parse::facts(&v) {
                if source == Source::Judge {
                    self.count_replay(usage);
                }
                self.facts.put(texts.to_string(), Arc::new(f));
                return;
            }
        }
        extracting.insert(texts.to_string());
        jobs.push(Job::Extract {
            texts: texts.to_string(),
            answer: answer.into(),
        });
    }

    /// Runs jobs on `concurrency` worker threads; results in job order.
    fn run_jobs(&self, jobs: &[Job], batch: &RowBatch) -> Vec<JobResult> {
        let results: Vec<OnceLock<JobResult>> = (0..jobs.len()).map(|_| OnceLock::new()).collect();
        let next = AtomicUsize::new(0);
        let workers = self
            .options
            .endpoint
            .concurrency
            .clamp(1, jobs.len().max(1));
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= jobs.len() {
                        break;
                    }
                    let result = self.run_job(&jobs[k], batch);
                    if let Ok((v, u, mode)) = &result {
                        // Journal a paid answer the moment it arrives: a
                        // crash later in the batch must not lose it.
                        self.record_valid(&jobs[k], v, *u, mode);
                    }
                    let _ = results[k].set(result);
                });
            }
        });
        results
            .into_iter()
            .map(|r| r.into_inner().expect("every job ran"))
            .collect()
    }

    /// Records an answer in the cache and journal when it parses as the
    /// job's kind of answer (a reply that will be retried is not kept).
    fn record_valid(&self, job: &Job, v: &Value, u: Usage, mode: &str) {
        match job {
            Job::Ask { metric, texts, .. } => {
                let jm = self.metrics[*metric];
                if let (Ok(_), Some(template)) = (self.verdict(jm, v), jm.template()) {
                    self.record(template, mode, texts, v, u);
                }
            }
            Job::Extract { texts, .. } => {
                if parse::facts(v).is_ok() {
                    self.record(&FACT_EXTRACT, mode, texts, v, u);
                }
            }
            Job::Check { texts, .. } => {
                if parse_check(v).is_ok() {
                    self.record(&FACT_CHECK, mode, texts, v, u);
                }
            }
        }
    }

    fn run_job(&self, job: &Job, batch: &RowBatch) -> JobResult {
        match job {
            Job::Extract { answer, .. } => self.client.ask(
                &FACT_EXTRACT,
                &FACT_EXTRACT.render(&[("answer", answer)]),
                |v| parse::facts(v).map(|_| v.clone()),
            ),
            Job::Check {
                input,
                answer,
                fact,
                ..
            } => {
                self.fact_checks.fetch_add(1, Ordering::Relaxed);
                let ask = Ask {
                    template: &FACT_CHECK,
                    user: FACT_CHECK.render(&[
                        ("input", input),
                        ("answer", answer),
                        ("fact", fact),
                    ]),
                    max_tokens: FACT_CHECK.max_tokens,
                    logprobs: true,
                };
                self.client
                    .send_ask(&ask, read_word_verdict)
                    .map(|(v, u, _)| (v, u, NO_FORMAT))
            }
            Job::Ask { row, metric, .. } => {
                let i = *row;
                let input = batch
                    .input
                    .as_ref()
                    .and_then(|c| c.get(i))
                    .unwrap_or("(no question given)");
                let (reference, output) = (
                    batch.reference.get(i).unwrap_or(""),
                    batch.output.get(i).unwrap_or(""),
                );
                // The metric's own template: similarity's user text equals
                // Meaning Match's today, but nothing kept the two equal.
                let jm = self.metrics[*metric];
                let template = jm.template().expect("a rubric");
                let user = template.render(&[
                    ("input", input),
                    ("reference", reference),
                    ("output", output),
                ]);
                self.ask_metric(jm, user)
            }
        }
    }

    /// Asks a rubric about one row as
    /// `--judge-reasons` says. Every mode sends the same prompt (the JSON
    /// question, verdict before reason): `always` lets the judge write the
    /// whole answer; `failures` and `never` cut it after the verdict
    /// ([`VERDICT_TOKENS`]), and `failures` then asks the whole question
    /// again only where the verdict fails: the prompt is byte for byte the
    /// first one, so the server's prompt cache covers all of it, and the
    /// judge repeats its verdict and goes on to the reason.
    fn ask_metric(&self, jm: &JudgeMetric, user: String) -> JobResult {
        if self.options.reasons == Reasons::Always {
            return self.ask_json(jm, &user, None);
        }
        let (mut v, mut usage, mode) = self.ask_json(jm, &user, Some(VERDICT_TOKENS))?;
        if self.options.reasons == Reasons::Failures && self.fails(jm, &v)? {
            self.reasons_asked.fetch_add(1, Ordering::Relaxed);
            let (full, u, _) = self.ask_json(jm, &user, None)?;
            add_usage(&mut usage, u);
            let key = keys(jm).1;
            v[key] = full.get(key).cloned().unwrap_or(Value::Null);
        }
        Ok((v, usage, mode))
    }

    /// Whether an answer fails: a verdict false, or a score below its pass
    /// threshold (the similarity rubric's: the one score rubric).
    fn fails(&self, jm: &JudgeMetric, v: &Value) -> Result<bool, AskFailure> {
        let bad = |message: String| AskFailure {
            message,
            transient: false,
        };
        Ok(match (self.verdict(jm, v).map_err(bad)?, &jm.asking) {
            (Outcome::Verdict { verdict, .. }, _) => !verdict,
            (
                Outcome::Score {
                    score, expected, ..
                },
                Asking::Rubric {
                    answer: Answer::Score { min, max },
                    ..
                },
            ) => normalised(score, expected, (*min, *max)) < self.options.similarity_pass,
            _ => false,
        })
    }

    /// Asks the JSON question (verdict, then reason), whole or cut after
    /// `cut` tokens, and reads the verdict's token probabilities where the
    /// server gives them. A cut answer keeps only the verdict (what it began
    /// of the reason is dropped).
    fn ask_json(&self, jm: &JudgeMetric, user: &str, cut: Option<u32>) -> JobResult {
        let template = jm.template().expect("a rubric");
        let ask = Ask {
            template,
            user: user.to_string(),
            max_tokens: cut.unwrap_or(template.max_tokens),
            logprobs: true,
        };
        self.client.send_ask(&ask, |reply| {
            let mut v = extract_object(&reply.content)?;
            self.verdict(jm, &v)?;
            let (key, why) = keys(jm);
            if cut.is_some() {
                v[why] = Value::Null;
            }
            if let Some(tokens) = &reply.tokens {
                let at = value_token(tokens, key);
                if matches!(verdict_of(jm), Some(Answer::Verdict)) {
                    v["p_true"] = json!(at.and_then(|k| verdict_p(&tokens[k])));
                } else {
                    v["expected"] = json!(at.and_then(|k| expected_score(tokens, k)));
                }
            }
            Ok(v)
        })
    }
}

/// The JSON keys a rubric's prompt asks for: its value's and its reason's.
fn keys(jm: &JudgeMetric) -> (&'static str, &'static str) {
    match &jm.asking {
        Asking::Rubric {
            value_keys,
            reason_keys,
            ..
        } => (value_keys[0], reason_keys[0]),
        Asking::Facts => unreachable!("the fact ratio is not asked as one question"),
    }
}

/// A rubric's kind of answer.
fn verdict_of(jm: &JudgeMetric) -> Option<Answer> {
    match &jm.asking {
        Asking::Rubric { answer, .. } => Some(*answer),
        Asking::Facts => None,
    }
}

/// Generated tokens that hold a JSON answer's verdict or score: `{"`,
/// `meaning`, `_match`, `":`, ` true` (or the score's digits, "10" being two
/// for some tokenisers), with room for a space or two.
const VERDICT_TOKENS: u32 = 10;

/// A yes/no reply to a fact check, as stored: `{"holds": bool, "p": P(yes)}`.
fn read_word_verdict(reply: &Reply) -> Result<Value, String> {
    let p = reply
        .tokens
        .as_ref()
        .and_then(|t| first_word(t))
        .and_then(verdict_p);
    let sampled = verdict_word(&reply.content).or(p.map(|p| p >= 0.5));
    let sampled = sampled.ok_or_else(|| format!("not yes or no: {}", snippet(&reply.content)))?;
    Ok(json!({"holds": sampled, "p": p}))
}

/// Whether a fact holds: P(yes) ≥ 0.5 where known, else the sampled word.
fn parse_check(v: &Value) -> Result<bool, String> {
    let sampled = v["holds"]
        .as_bool()
        .ok_or_else(|| format!("not a fact check: {v}"))?;
    Ok(v["p"].as_f64().map_or(sampled, |p| p >= 0.5))
}

/// The first token that is not only whitespace.
fn first_word(tokens: &[crate::client::Token]) -> Option<&crate::client::Token> {
    tokens.iter().find(|t| !t.text.trim().is_empty())
}

fn add_usage(total: &mut Usage, u: Usage) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
    total.cached_tokens += u.cached_tokens;
    total.latency_ms += u.latency_ms;
}

fn fail(slot: &mut Option<String>, report: &mut JudgeReport, metric: &str, why: &str) {
    report.failures += 1;
    let msg = format!("{metric}: judge failed: {why}");
    match slot {
        Some(s) => {
            s.push_str("; ");
            s.push_str(&msg);
        }
        None => *slot = Some(msg),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use arrow::array::{ArrayRef, StringArray};
    use refscore_batch::TextColumn;

    use super::*;
    use crate::test_server::{chat, start, Reply, Request, Server};
    use crate::Endpoint;

    fn text(values: &[&str]) -> TextColumn {
        TextColumn::Utf8(StringArray::from(values.to_vec()))
    }

    fn batch() -> RowBatch {
        let refs = ["Paris is the capital of France", "Water boils at 100 C"];
        RowBatch {
            first_row: 0,
            source: "in.parquet".into(),
            first_row_in_source: 0,
            id: Arc::new(StringArray::from(vec!["a", "b"])) as ArrayRef,
            input: Some(text(&["Capital?", "Boiling point?"])),
            reference: text(&refs),
            output: text(&["Lyon", "It boils at 90 C"]),
            passthrough: vec![],
            row_filter: None,
        }
    }

    fn options(url: &str, names: &[&str], cache: Option<PathBuf>) -> JudgeOptions {
        let mut metrics = refscore_batch::metric::MetricSet::new();
        for name in names {
            metrics.insert(refscore_batch::metric::find(name).expect("a metric"));
        }
        JudgeOptions {
            endpoint: Endpoint {
                url: url.into(),
                model: "m".into(),
                api_key: None,
                timeout: Duration::from_secs(5),
                retries: 0,
                concurrency: 2,
                requests_per_minute: None,
                tokens_per_minute: None,
                backoff: Duration::from_millis(5),
            },
            metrics,
            band: None,
            cache_dir: cache,
            reasons: Reasons::Always,
            threshold: 0.5,
            similarity_pass: 0.7,
            where_column: None,
        }
    }

    /// A judge answering every template; Meaning Match says `verdict`.
    fn judge(verdict: bool) -> Server {
        start(move |req: &Request, _| match req.kind() {
            "meaning_match" => chat(&format!(
                r#"{{"meaning_match": {verdict}, "reason": "scripted"}}"#
            )),
            "similarity" => chat(r#"{"score": 3, "rationale": "little overlap"}"#),
            "fact_extract" => chat(r#"{"facts": ["one fact", "another fact"]}"#),
            _ => chat("yes"),
        })
    }

    fn column<'a>(cols: &'a ScoreColumns, name: &str) -> &'a ArrayRef {
        let k = cols.fields.iter().position(|f| f.name() == name).unwrap();
        &cols.arrays[k]
    }

    fn strings(cols: &ScoreColumns, name: &str) -> Vec<Option<String>> {
        use arrow::array::AsArray;
        column(cols, name)
            .as_string::<i32>()
            .iter()
            .map(|s| s.map(String::from))
            .collect()
    }

    #[test]
    fn the_cache_is_keyed_by_the_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (judge(true), judge(false));
        let sel = &["meaning_match"];
        let run = |url: &str| {
            let mut stage =
                JudgeStage::new(options(url, sel, Some(dir.path().to_path_buf()))).unwrap();
            let cols = stage
                .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
                .unwrap();
            (cols, stage.report())
        };
        let (cols, _) = run(&a.url);
        assert_eq!(a.requests().len(), 2);
        assert_eq!(
            strings(&cols, "meaning_match_source"),
            [Some("judge".into()), Some("judge".into())]
        );
        // Same cache folder, another server: B is asked, A's answers unused.
        let (cols, report) = run(&b.url);
        assert_eq!(b.requests().len(), 2, "server B must be called");
        assert_eq!(report.cached, 0);
        assert_eq!(
            strings(&cols, "meaning_match_source"),
            [Some("judge".into()), Some("judge".into())]
        );
        use arrow::array::AsArray;
        assert_eq!(
            column(&cols, "meaning_match")
                .as_boolean()
                .iter()
                .collect::<Vec<_>>(),
            [Some(false), Some(false)]
        );
        // And A again: its own answers come from the cache.
        let (cols, report) = run(&a.url);
        assert_eq!((a.requests().len(), report.cached), (2, 2));
        assert_eq!(
            strings(&cols, "meaning_match_source"),
            [Some("cache".into()), Some("cache".into())]
        );
    }

    #[test]
    fn the_negotiated_output_mode_is_part_of_the_key_and_remembered() {
        // A server without structured output: rejects json_schema, accepts
        // json_object.
        let server = start(|req: &Request, _| {
            if req.body["response_format"]["type"] == "json_schema" {
                Reply::Status(
                    400,
                    vec![],
                    "response_format json_schema unsupported".into(),
                )
            } else {
                chat(r#"{"meaning_match": false, "reason": "scripted"}"#)
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let run = || {
            let mut stage = JudgeStage::new(options(
                &server.url,
                &["meaning_match"],
                Some(dir.path().to_path_buf()),
            ))
            .unwrap();
            let cols = stage
                .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
                .unwrap();
            (strings(&cols, "meaning_match_source"), stage.report())
        };
        let (sources, report) = run();
        assert_eq!(sources, [Some("judge".into()), Some("judge".into())]);
        assert_eq!(report.response_format, "json_object");
        let asked = server.requests().len();
        let (sources, report) = run();
        assert_eq!(sources, [Some("cache".into()), Some("cache".into())]);
        assert_eq!(
            report.response_format, "json_object",
            "starts in the mode it negotiated"
        );
        assert_eq!(server.requests().len(), asked, "a re-run pays nothing");
    }

    #[test]
    fn rows_with_a_judge_failure_are_counted() {
        let server = start(|req: &Request, _| match req.kind() {
            "meaning_match" => Reply::Status(400, vec![], "no".into()),
            _ => chat(r#"{"score": 3, "rationale": "x"}"#),
        });
        let mut stage =
            JudgeStage::new(options(&server.url, &["meaning_match", "similarity"], None)).unwrap();
        let mut b = batch();
        b.output = text(&["Lyon", "Water boils at 100 C."]); // row 1: decided by rule
        stage
            .score_batch(&b, &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        assert_eq!(stage.last_batch_rows_failed(), 1);
        let r = stage.report();
        assert_eq!((r.rows_failed, r.failures), (1, 1));
        stage
            .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        assert_eq!(stage.last_batch_rows_failed(), 2);
        assert_eq!(stage.report().rows_failed, 3);
        stage
            .score_batch(
                &batch(),
                &vec![Wanted::These(vec![&refscore_batch::metric::SIMILARITY]); 2],
                None,
            )
            .unwrap();
        assert_eq!(stage.last_batch_rows_failed(), 0);
    }

    #[test]
    fn the_journal_replays_paid_answers_as_judge_answers() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        let sel = &["meaning_match", "similarity", "fact_similarity"];
        // One endpoint (the key holds its URL) that answers, then, like a
        // judge gone down after a crash, fails every request.
        let down = Arc::new(AtomicBool::new(false));
        let down2 = Arc::clone(&down);
        let server = start(move |req: &Request, _| {
            if down2.load(Ordering::Relaxed) {
                return Reply::Status(500, vec![], "down".into());
            }
            match req.kind() {
                "meaning_match" => chat(r#"{"meaning_match": true, "reason": "scripted"}"#),
                "similarity" => chat(r#"{"score": 3, "rationale": "little overlap"}"#),
                "fact_extract" => chat(r#"{"facts": ["one fact", "another fact"]}"#),
                _ => chat("yes"),
            }
        });
        let run = || {
            let mut stage = JudgeStage::new(options(&server.url, sel, None)).unwrap();
            stage.set_journal_dir(journal.clone()).unwrap();
            let cols = stage
                .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
                .unwrap();
            (cols, stage.report())
        };
        let (first, paid) = run();
        assert!(first.row_errors.is_empty());
        assert_eq!(
            paid.calls, 16,
            "per row: meaning, similarity, two extractions, four fact checks"
        );
        down.store(true, Ordering::Relaxed);
        let asked = server.requests().len();

        let (again, replayed) = run();
        assert_eq!(
            server.requests().len(),
            asked,
            "nothing asked of the failed judge"
        );
        assert!(again.row_errors.is_empty(), "{:?}", again.row_errors);
        assert_eq!(replayed.failures, 0);
        assert_eq!(replayed.rows_failed, 0);
        assert_eq!(again.fields, first.fields);
        for (k, f) in first.fields.iter().enumerate() {
            assert_eq!(
                again.arrays[k].to_data(),
                first.arrays[k].to_data(),
                "column {} differs from the clean run",
                f.name()
            );
        }
        for m in [
            "meaning_match_source",
            "similarity_source",
            "fact_similarity_source",
        ] {
            assert_eq!(
                strings(&again, m),
                [Some("judge".into()), Some("judge".into())]
            );
        }
        assert_eq!(
            (
                replayed.prompt_tokens,
                replayed.completion_tokens,
                replayed.rows_judged
            ),
            (paid.prompt_tokens, paid.completion_tokens, paid.rows_judged)
        );
        assert_eq!((replayed.cached, replayed.calls), (0, 0));
        assert!(replayed.replayed > 0);
    }

    fn floats(cols: &ScoreColumns, name: &str) -> Vec<Option<f32>> {
        use arrow::array::AsArray;
        use arrow::datatypes::Float32Type;
        column(cols, name)
            .as_primitive::<Float32Type>()
            .iter()
            .collect()
    }

    fn bools(cols: &ScoreColumns, name: &str) -> Vec<Option<bool>> {
        use arrow::array::AsArray;
        column(cols, name).as_boolean().iter().collect()
    }

    fn verdict_first(url: &str, names: &[&str], reasons: Reasons) -> JudgeStage {
        JudgeStage::new(JudgeOptions {
            reasons,
            ..options(url, names, None)
        })
        .unwrap()
    }

    /// A Meaning Match answer cut after its verdict, as llama.cpp sends it
    /// with logprobs: P(true) = `p`, "false" generated.
    fn cut_verdict(p: f64) -> Reply {
        use crate::test_server::chat_with_logprobs;
        let verdict: &[(&str, f64)] = &[(" false", 1.0 - p), (" true", p)];
        chat_with_logprobs(
            "{\"meaning_match\": false",
            &[
                ("{\"", &[("{\"", 1.0)]),
                ("meaning", &[("meaning", 1.0)]),
                ("_match", &[("_match", 1.0)]),
                ("\":", &[("\":", 1.0)]),
                (" false", verdict),
            ],
        )
    }

    fn user_of(req: &Request) -> String {
        req.body["messages"][1]["content"]
            .as_str()
            .unwrap()
            .to_string()
    }

    #[test]
    fn the_verdict_is_cut_short_and_a_reason_asked_only_where_it_fails() {
        let server = start(|req: &Request, _| {
            assert_eq!(req.body["logprobs"], true);
            if req.body["max_tokens"] == VERDICT_TOKENS {
                // Row 0 (Lyon): P(true) 0.2. Row 1: 0.8, though "false" was generated.
                cut_verdict(if user_of(req).contains("Lyon") {
                    0.2
                } else {
                    0.8
                })
            } else {
                chat(r#"{"meaning_match": false, "reason": "Lyon is not the capital."}"#)
            }
        });
        let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Failures);
        let cols = stage
            .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        assert_eq!(bools(&cols, "meaning_match"), [Some(false), Some(true)]);
        let p = floats(&cols, "meaning_match_p");
        assert!(
            (p[0].unwrap() - 0.2).abs() < 1e-4 && (p[1].unwrap() - 0.8).abs() < 1e-4,
            "{p:?}"
        );
        assert_eq!(
            strings(&cols, "meaning_match_reason"),
            [Some("Lyon is not the capital.".into()), None],
            "a reason for the failing row only"
        );
        let requests = server.requests();
        assert_eq!(requests.len(), 3);
        let whole: Vec<_> = requests
            .iter()
            .filter(|r| r.body["max_tokens"] != VERDICT_TOKENS)
            .collect();
        assert_eq!(whole.len(), 1);
        let cut = requests
            .iter()
            .find(|r| r.body["max_tokens"] == VERDICT_TOKENS && user_of(r) == user_of(whole[0]))
            .unwrap();
        assert_eq!(
            (&cut.body["messages"], &cut.body["response_format"]),
            (
                &whole[0].body["messages"],
                &whole[0].body["response_format"]
            ),
            "the reason's request repeats the verdict's prompt byte for byte"
        );
        let r = stage.report();
        assert_eq!(
            (r.calls, r.reasons_asked, r.replies_with_logprobs),
            (3, 1, 2)
        );
        assert_eq!(
            r.prompt_tokens_cached, 80,
            "cached tokens of the two verdicts"
        );

        // `never`: the same verdicts, no reasons.
        let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Never);
        let cols = stage
            .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        assert_eq!(bools(&cols, "meaning_match"), [Some(false), Some(true)]);
        assert_eq!(strings(&cols, "meaning_match_reason"), [None, None]);
        assert_eq!(server.requests().len(), 5);
    }

    #[test]
    fn a_ten_split_into_digits_is_read_as_ten() {
        use crate::test_server::chat_with_logprobs;
        let server = start(|_: &Request, _| {
            chat_with_logprobs(
                "{\"score\": 10",
                &[
                    ("{\"", &[("{\"", 1.0)]),
                    ("score", &[("score", 1.0)]),
                    ("\":", &[("\":", 1.0)]),
                    (" ", &[(" ", 1.0)]),
                    ("1", &[("1", 0.7), ("9", 0.3)]),
                    ("0", &[("0", 0.9), (",", 0.1)]),
                ],
            )
        });
        let mut stage = verdict_first(&server.url, &["similarity"], Reasons::Failures);
        let cols = stage
            .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        use arrow::array::AsArray;
        use arrow::datatypes::UInt8Type;
        let scores: Vec<Option<u8>> = column(&cols, "similarity_score")
            .as_primitive::<UInt8Type>()
            .iter()
            .collect();
        assert_eq!(scores, [Some(10), Some(10)]);
        // 0.7 * (0.9 * 10 + 0.1 * 1) + 0.3 * 9 = 9.07
        let sim = floats(&cols, "similarity");
        assert!((sim[0].unwrap() - 0.907).abs() < 1e-4, "{sim:?}");
        assert_eq!(
            strings(&cols, "similarity_rationale"),
            [None, None],
            "passing: no reason"
        );
        assert_eq!(server.requests().len(), 2);
    }

    #[test]
    fn without_logprobs_the_sampled_answer_decides_and_p_is_null() {
        let server = start(|req: &Request, _| {
            let lyon = user_of(req).contains("Lyon");
            match (req.body["max_tokens"] == VERDICT_TOKENS, lyon) {
                (true, true) => chat(r#"{"meaning_match": false, "re"#),
                (true, false) => chat(r#"{"meaning_match": true"#),
                (false, _) => chat(r#"{"meaning_match": false, "reason": "Different city."}"#),
            }
        });
        let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Failures);
        let cols = stage
            .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        assert_eq!(bools(&cols, "meaning_match"), [Some(false), Some(true)]);
        assert_eq!(floats(&cols, "meaning_match_p"), [None, None]);
        assert_eq!(
            strings(&cols, "meaning_match_reason"),
            [Some("Different city.".into()), None]
        );
        let r = stage.report();
        assert_eq!(
            (r.replies_with_logprobs, r.replies_without_logprobs),
            (0, 3)
        );
    }

    #[test]
    fn a_json_reply_cut_after_the_verdict_gives_the_verdict_and_its_p() {
        use crate::test_server::chat_with_logprobs;
        let server = start(|_: &Request, _| {
            let verdict: &[(&str, f64)] = &[(" false", 0.4), (" true", 0.6)];
            chat_with_logprobs(
                "{\"meaning_match\": false, \"rea",
                &[
                    ("{\"", &[("{\"", 1.0)]),
                    ("meaning", &[("meaning", 1.0)]),
                    ("_match", &[("_match", 1.0)]),
                    ("\":", &[("\":", 1.0)]),
                    (" false", verdict),
                    (",", &[(",", 1.0)]),
                    (" \"rea", &[(" \"rea", 1.0)]),
                ],
            )
        });
        let mut stage = verdict_first(&server.url, &["meaning_match"], Reasons::Always);
        let cols = stage
            .score_batch(&batch(), &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        assert!(cols.row_errors.is_empty(), "{:?}", cols.row_errors);
        assert_eq!(
            bools(&cols, "meaning_match"),
            [Some(true), Some(true)],
            "p 0.6 ≥ 0.5"
        );
        let p = floats(&cols, "meaning_match_p");
        assert!((p[0].unwrap() - 0.6).abs() < 1e-5);
        assert_eq!(strings(&cols, "meaning_match_reason"), [None, None]);
    }

    #[test]
    fn the_fact_ratio_counts_checked_facts_in_refscore() {
        // The metric doc's first worked case: 1 of 2 reference facts, 1 of
        // 3 output facts hold on the other side: 1/3.
        let server = start(|req: &Request, _| {
            let user = req.body["messages"][1]["content"].as_str().unwrap();
            match req.kind() {
                "fact_extract" if user.contains("bananas") => {
                    chat(r#"{"facts": ["Amy likes apples", "Amy likes bananas"]}"#)
                }
                "fact_extract" => chat(
                    r#"{"facts": ["Amy likes apples", "Amy likes berries", "Amy likes plums"]}"#,
                ),
                _ => {
                    let fact = user.rsplit("Fact:\n").next().unwrap();
                    chat(if fact == "Amy likes apples" {
                        "yes"
                    } else {
                        "no"
                    })
                }
            }
        });
        let mut b = batch();
        b.input = Some(text(&["What does Amy like?", "What does Amy like?"]));
        b.reference = text(&[
            "Amy likes apples and bananas",
            "Amy likes apples and bananas",
        ]);
        b.output = text(&[
            "Amy likes apples, berries and plums",
            "Amy likes apples, berries and plums",
        ]);
        let mut stage = verdict_first(&server.url, &["fact_similarity"], Reasons::Failures);
        let cols = stage
            .score_batch(&b, &[Wanted::Every, Wanted::Every], None)
            .unwrap();
        assert!(cols.row_errors.is_empty(), "{:?}", cols.row_errors);
        let f = floats(&cols, "fact_similarity");
        assert!((f[0].unwrap() - 1.0 / 3.0).abs() < 1e-6, "{f:?}");
        assert_eq!(f[0], f[1]);
        assert_eq!(floats(&cols, "fact_recall")[0], Some(0.5));
        assert!((floats(&cols, "fact_precision")[0].unwrap() - 1.0 / 3.0).abs() < 1e-6);
        // Two extractions and five checks, asked once for the two equal rows.
        assert_eq!(server.requests().len(), 7);
        assert_eq!(stage.report().fact_checks, 5);
    }
}
