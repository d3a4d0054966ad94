//! LLM-judge metrics (docs/metrics.md#judge-metrics): Meaning Match, the
//! 0–10 similarity rubric and the fact ratio, asked of any OpenAI-compatible
//! chat-completions endpoint — only for rows that request them and that no
//! cheaper rule already decides.
//!
//! Order of decision per row and metric: not requested → null; empty output
//! → false/0 (`rule`); normalised exact match → Meaning Match true (`rule`);
//! cosine outside the `--judge-band` → Meaning Match by the band's side
//! (`band`); an answer in the on-disk cache (`cache`); else a call (`judge`).
//! A call that fails after its retries leaves the metric null and the row's
//! `error` says why; the run goes on.

mod cache;
mod client;
mod parse;
mod prompts;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{
    Array, ArrayRef, AsArray, BooleanArray, Float32Array, StringArray, StructArray, UInt32Array,
    UInt8Array,
};
use arrow::datatypes::{DataType, Field, Fields};
use lru::LruCache;
use refscore_batch::{Error, RowBatch, ScoreColumns};
use serde_json::{json, Value};

pub use client::{Endpoint, Usage};

use cache::DiskCache;
use client::Client;
use prompts::{Template, FACT_EXTRACT, FACT_MATCH, MEANING_MATCH, SIMILARITY};

/// The judge metrics, by the name `--metrics` uses.
pub const METRICS: [&str; 3] = ["meaning_match", "similarity", "fact_similarity"];

/// Settings of the judge stage.
#[derive(Debug, Clone)]
pub struct JudgeOptions {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// Which of [`METRICS`] the run computes.
    pub selection: [bool; 3],
    /// `--judge-band cosine:LO..HI`: only rows with cosine in [LO, HI] go to
    /// the judge for Meaning Match.
    pub band: Option<(f32, f32)>,
    /// `--judge-cache DIR`.
    pub cache_dir: Option<PathBuf>,
}

/// How a judge metric was decided, as written to `<metric>_source`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Source {
    Rule,
    Band,
    Cache,
    Judge,
}

impl Source {
    fn name(self) -> &'static str {
        match self {
            Source::Rule => "rule",
            Source::Band => "band",
            Source::Cache => "cache",
            Source::Judge => "judge",
        }
    }
}

/// The result of one metric for one row.
#[derive(Debug, Clone)]
enum Verdict {
    Meaning(bool, String),
    Similarity(u8, String),
    /// (matched, reference facts, output facts); counts unknown when decided by rule.
    Facts(Option<(u32, u32, u32)>),
}

/// Run totals, for the summary.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct JudgeReport {
    /// Rows where at least one judge metric was requested.
    pub rows_requested: u64,
    /// Rows where at least one metric went to the model.
    pub rows_judged: u64,
    /// Metric values decided by a rule (empty output, normalised exact match).
    pub decided_by_rule: u64,
    /// Meaning Match values decided by the cosine band.
    pub decided_by_band: u64,
    /// Answers taken from the on-disk cache.
    pub cached: u64,
    /// HTTP calls made (retries included).
    pub calls: u64,
    /// Retries.
    pub retries: u64,
    /// Replies that could not be parsed (each was retried).
    pub parse_failures: u64,
    /// Metric values left null because the judge failed.
    pub failures: u64,
    /// Prompt tokens reported by the server.
    pub prompt_tokens: u64,
    /// Completion tokens reported by the server.
    pub completion_tokens: u64,
    /// Summed call time over all workers.
    pub call_seconds: f64,
    /// Output mode the server accepted.
    pub response_format: String,
    /// Template hashes in use.
    pub templates: Vec<String>,
}

/// One piece of work for the model.
enum Job {
    Ask {
        row: usize,
        metric: usize,
        key: String,
    },
    Extract {
        facts_key: String,
        input: String,
        reference: String,
    },
}

/// The judge stage: endpoint client, caches and counters.
pub struct JudgeStage {
    client: Client,
    options: JudgeOptions,
    disk: Option<DiskCache>,
    reference_facts: LruCache<String, Arc<Vec<String>>>,
    report: JudgeReport,
}

type JobResult = Result<(Value, Usage), String>;

impl JudgeStage {
    /// Sets up the client and opens the cache folder.
    pub fn new(options: JudgeOptions) -> Result<JudgeStage, Error> {
        let disk = match &options.cache_dir {
            Some(d) => Some(DiskCache::open(d.clone()).map_err(Error::io)?),
            None => None,
        };
        let report = JudgeReport {
            templates: [&MEANING_MATCH, &SIMILARITY, &FACT_EXTRACT, &FACT_MATCH]
                .iter()
                .map(|t| t.hash())
                .collect(),
            ..JudgeReport::default()
        };
        Ok(JudgeStage {
            client: Client::new(options.endpoint.clone()),
            options,
            disk,
            reference_facts: LruCache::new(std::num::NonZeroUsize::new(100_000).expect("non-zero")),
            report,
        })
    }

    /// Totals so far.
    pub fn report(&self) -> JudgeReport {
        let c = &self.client.counters;
        JudgeReport {
            calls: c.calls.load(Ordering::Relaxed),
            retries: c.retries.load(Ordering::Relaxed),
            parse_failures: c.parse_failures.load(Ordering::Relaxed),
            prompt_tokens: c.prompt_tokens.load(Ordering::Relaxed),
            completion_tokens: c.completion_tokens.load(Ordering::Relaxed),
            call_seconds: c.busy_ms.load(Ordering::Relaxed) as f64 / 1000.0,
            response_format: self.client.mode_name().to_string(),
            ..self.report.clone()
        }
    }

    /// The output fields: per selected metric its value, explanation and
    /// source columns, then the judge accounting and template columns.
    pub fn fields(&self) -> Vec<Field> {
        fields(self.options.selection)
    }

    /// Judges one batch. `requested[i][m]` says whether row i asks for metric
    /// m; `cosine` (when a band is set) holds the rows' cosine scores.
    pub fn score_batch(
        &mut self,
        batch: &RowBatch,
        requested: &[[bool; 3]],
        cosine: Option<&Float32Array>,
    ) -> Result<ScoreColumns, Error> {
        let n = batch.len();
        let sel = self.options.selection;
        let mut verdicts: Vec<[Option<(Verdict, Source)>; 3]> = vec![[None, None, None]; n];
        let mut usage: Vec<Usage> = vec![Usage::default(); n];
        let mut errors: Vec<Option<String>> = vec![None; n];
        let mut jobs: Vec<Job> = Vec::new();
        let mut fact_rows: Vec<(usize, String)> = Vec::new();
        let mut extract_index: HashMap<String, usize> = HashMap::new();
        let model = self.client.model().to_string();

        for i in 0..n {
            if batch.unscorable(i).is_some() || !(0..3).any(|m| sel[m] && requested[i][m]) {
                continue;
            }
            self.report.rows_requested += 1;
            let (reference, output) = (
                batch.reference.get(i).unwrap_or(""),
                batch.output.get(i).unwrap_or(""),
            );
            let input = batch.input.as_ref().and_then(|c| c.get(i)).unwrap_or("");
            let empty = output.trim().is_empty();
            let exact = !empty
                && refscore_lexical::normalize(reference) == refscore_lexical::normalize(output);
            for m in 0..3 {
                if !(sel[m] && requested[i][m]) {
                    continue;
                }
                if empty {
                    self.report.decided_by_rule += 1;
                    verdicts[i][m] = Some((
                        match m {
                            0 => Verdict::Meaning(false, "the output is empty".into()),
                            1 => Verdict::Similarity(0, "the output is empty".into()),
                            _ => Verdict::Facts(None),
                        },
                        Source::Rule,
                    ));
                    continue;
                }
                if m == 0 && exact {
                    self.report.decided_by_rule += 1;
                    verdicts[i][m] = Some((
                        Verdict::Meaning(true, "normalised exact match".into()),
                        Source::Rule,
                    ));
                    continue;
                }
                if let (0, Some((lo, hi)), Some(cos)) = (m, self.options.band, cosine) {
                    if cos.is_valid(i) {
                        let c = cos.value(i);
                        if c < lo || c > hi {
                            self.report.decided_by_band += 1;
                            let side = c > hi;
                            let why = format!(
                                "cosine {c:.3} is {} the band {lo}..{hi}",
                                if side { "above" } else { "below" }
                            );
                            verdicts[i][m] = Some((Verdict::Meaning(side, why), Source::Band));
                            continue;
                        }
                    }
                }
                if m == 2 {
                    let facts_key =
                        DiskCache::key(&[&model, &FACT_EXTRACT.hash(), input, reference]);
                    if !self.reference_facts.contains(&facts_key)
                        && !extract_index.contains_key(&facts_key)
                    {
                        if let Some(v) = self.disk.as_ref().and_then(|d| d.get(&facts_key)) {
                            if let Ok(f) = parse::facts(&v) {
                                self.reference_facts.put(facts_key.clone(), Arc::new(f));
                            }
                        }
                    }
                    if !self.reference_facts.contains(&facts_key)
                        && !extract_index.contains_key(&facts_key)
                    {
                        extract_index.insert(facts_key.clone(), jobs.len());
                        jobs.push(Job::Extract {
                            facts_key: facts_key.clone(),
                            input: input.into(),
                            reference: reference.into(),
                        });
                    }
                    fact_rows.push((i, facts_key));
                    continue;
                }
                let template = if m == 0 { &MEANING_MATCH } else { &SIMILARITY };
                let key = DiskCache::key(&[&model, &template.hash(), input, reference, output]);
                if let Some(v) = self.disk.as_ref().and_then(|d| d.get(&key)) {
                    if let Ok(verdict) = read_verdict(m, &v, 0) {
                        self.report.cached += 1;
                        verdicts[i][m] = Some((verdict, Source::Cache));
                        continue;
                    }
                }
                jobs.push(Job::Ask {
                    row: i,
                    metric: m,
                    key,
                });
            }
        }

        // Phase 1: Meaning Match, similarity and reference-fact extraction.
        let results = self.run_jobs(&jobs, batch, None);
        let mut judged = vec![false; n];
        for (job, result) in jobs.iter().zip(results) {
            match (job, result) {
                (Job::Ask { row, metric, key }, Ok((v, u))) => {
                    add_usage(&mut usage[*row], u);
                    judged[*row] = true;
                    match read_verdict(*metric, &v, 0) {
                        Ok(verdict) => {
                            if let Some(d) = &self.disk {
                                d.put(key, &v);
                            }
                            verdicts[*row][*metric] = Some((verdict, Source::Judge));
                        }
                        Err(e) => fail(&mut errors[*row], &mut self.report, METRICS[*metric], &e),
                    }
                }
                (Job::Ask { row, metric, .. }, Err(e)) => {
                    judged[*row] = true;
                    fail(&mut errors[*row], &mut self.report, METRICS[*metric], &e);
                }
                (Job::Extract { facts_key, .. }, Ok((v, _))) => {
                    if let Ok(f) = parse::facts(&v) {
                        if let Some(d) = &self.disk {
                            d.put(facts_key, &v);
                        }
                        self.reference_facts.put(facts_key.clone(), Arc::new(f));
                    }
                }
                (Job::Extract { .. }, Err(_)) => {}
            }
        }

        // Phase 2: match each row's output against its reference's facts.
        let mut match_jobs: Vec<Job> = Vec::new();
        let mut match_facts: Vec<Arc<Vec<String>>> = Vec::new();
        for (i, facts_key) in &fact_rows {
            let Some(facts) = self.reference_facts.get(facts_key).cloned() else {
                fail(
                    &mut errors[*i],
                    &mut self.report,
                    "fact_similarity",
                    "the reference's facts could not be extracted",
                );
                continue;
            };
            if facts.is_empty() {
                fail(
                    &mut errors[*i],
                    &mut self.report,
                    "fact_similarity",
                    "the judge found no facts in the reference",
                );
                continue;
            }
            let (input, reference, output) = (
                batch.input.as_ref().and_then(|c| c.get(*i)).unwrap_or(""),
                batch.reference.get(*i).unwrap_or(""),
                batch.output.get(*i).unwrap_or(""),
            );
            let key = DiskCache::key(&[
                &model,
                &FACT_MATCH.hash(),
                input,
                reference,
                &facts.join("\n"),
                output,
            ]);
            if let Some(v) = self.disk.as_ref().and_then(|d| d.get(&key)) {
                if let Ok(verdict) = read_verdict(2, &v, facts.len()) {
                    self.report.cached += 1;
                    verdicts[*i][2] = Some((verdict, Source::Cache));
                    continue;
                }
            }
            match_jobs.push(Job::Ask {
                row: *i,
                metric: 2,
                key,
            });
            match_facts.push(facts);
        }
        let results = self.run_jobs(&match_jobs, batch, Some(&match_facts));
        for ((job, result), facts) in match_jobs.iter().zip(results).zip(&match_facts) {
            let Job::Ask { row, key, .. } = job else {
                continue;
            };
            judged[*row] = true;
            match result
                .and_then(|(v, u)| read_verdict(2, &v, facts.len()).map(|verdict| (v, u, verdict)))
            {
                Ok((v, u, verdict)) => {
                    add_usage(&mut usage[*row], u);
                    if let Some(d) = &self.disk {
                        d.put(key, &v);
                    }
                    verdicts[*row][2] = Some((verdict, Source::Judge));
                }
                Err(e) => fail(&mut errors[*row], &mut self.report, "fact_similarity", &e),
            }
        }
        self.report.rows_judged += judged.iter().filter(|j| **j).count() as u64;
        Ok(self.columns(n, &verdicts, &usage, errors))
    }

    /// Runs jobs on `concurrency` worker threads; results in job order.
    fn run_jobs(
        &self,
        jobs: &[Job],
        batch: &RowBatch,
        facts: Option<&[Arc<Vec<String>>]>,
    ) -> Vec<JobResult> {
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
                    let _ = results[k].set(self.run_job(&jobs[k], k, batch, facts));
                });
            }
        });
        results
            .into_iter()
            .map(|r| r.into_inner().expect("every job ran"))
            .collect()
    }

    fn run_job(
        &self,
        job: &Job,
        k: usize,
        batch: &RowBatch,
        facts: Option<&[Arc<Vec<String>>]>,
    ) -> JobResult {
        let ask = |t: &Template, user: String| self.client.ask(t, &user, |v| Ok(v.clone()));
        match job {
            Job::Extract {
                input, reference, ..
            } => ask(
                &FACT_EXTRACT,
                FACT_EXTRACT.render(&[("input", input), ("reference", reference)]),
            ),
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
                match metric {
                    0 => self.client.ask(
                        &MEANING_MATCH,
                        &MEANING_MATCH.render(&[
                            ("input", input),
                            ("reference", reference),
                            ("output", output),
                        ]),
                        |v| parse::meaning_match(v).map(|_| v.clone()),
                    ),
                    1 => self.client.ask(
                        &SIMILARITY,
                        &SIMILARITY.render(&[
                            ("input", input),
                            ("reference", reference),
                            ("output", output),
                        ]),
                        |v| parse::similarity(v).map(|_| v.clone()),
                    ),
                    _ => {
                        let facts = &facts.expect("fact jobs carry facts")[k];
                        let numbered: String = facts
                            .iter()
                            .enumerate()
                            .map(|(j, f)| format!("{}. {f}\n", j + 1))
                            .collect();
                        self.client.ask(
                            &FACT_MATCH,
                            &FACT_MATCH.render(&[
                                ("input", input),
                                ("facts", numbered.trim_end()),
                                ("output", output),
                            ]),
                            |v| parse::fact_match(v, facts.len()).map(|_| v.clone()),
                        )
                    }
                }
            }
        }
    }

    fn columns(
        &self,
        n: usize,
        verdicts: &[[Option<(Verdict, Source)>; 3]],
        usage: &[Usage],
        errors: Vec<Option<String>>,
    ) -> ScoreColumns {
        let sel = self.options.selection;
        let mut out = ScoreColumns::default();
        let source = |m: usize| -> ArrayRef {
            Arc::new(
                verdicts
                    .iter()
                    .map(|v| v[m].as_ref().map(|(_, s)| s.name()))
                    .collect::<StringArray>(),
            )
        };
        let mut all = fields(sel).into_iter();
        let mut push =
            |out: &mut ScoreColumns, a: ArrayRef| out.push(all.next().expect("field"), a);
        if sel[0] {
            let get = |i: usize| match &verdicts[i][0] {
                Some((Verdict::Meaning(b, r), _)) => (Some(*b), Some(r.clone())),
                _ => (None, None),
            };
            push(
                &mut out,
                Arc::new((0..n).map(|i| get(i).0).collect::<BooleanArray>()),
            );
            push(
                &mut out,
                Arc::new((0..n).map(|i| get(i).1).collect::<StringArray>()),
            );
            push(&mut out, source(0));
        }
        if sel[1] {
            let get = |i: usize| match &verdicts[i][1] {
                Some((Verdict::Similarity(s, r), _)) => (Some(*s), Some(r.clone())),
                _ => (None, None),
            };
            push(
                &mut out,
                Arc::new((0..n).map(|i| get(i).0).collect::<UInt8Array>()),
            );
            push(
                &mut out,
                Arc::new(
                    (0..n)
                        .map(|i| get(i).0.map(|s| s as f32 / 10.0))
                        .collect::<Float32Array>(),
                ),
            );
            push(
                &mut out,
                Arc::new((0..n).map(|i| get(i).1).collect::<StringArray>()),
            );
            push(&mut out, source(1));
        }
        if sel[2] {
            let counts: Vec<Option<Option<(u32, u32, u32)>>> = (0..n)
                .map(|i| match &verdicts[i][2] {
                    Some((Verdict::Facts(c), _)) => Some(*c),
                    _ => None,
                })
                .collect();
            let ratio = |f: fn(u32, u32, u32) -> f32| -> ArrayRef {
                Arc::new(
                    counts
                        .iter()
                        .map(|c| c.map(|c| c.map_or(0.0, |(m, r, o)| f(m, r, o))))
                        .collect::<Float32Array>(),
                )
            };
            push(
                &mut out,
                ratio(|m, r, o| {
                    if r.max(o) == 0 {
                        0.0
                    } else {
                        m as f32 / r.max(o) as f32
                    }
                }),
            );
            push(
                &mut out,
                ratio(move |m, r, _| if r == 0 { 0.0 } else { m as f32 / r as f32 }),
            );
            push(
                &mut out,
                ratio(move |m, _, o| if o == 0 { 0.0 } else { m as f32 / o as f32 }),
            );
            let part = |k: usize| -> ArrayRef {
                Arc::new(
                    counts
                        .iter()
                        .map(|c| c.flatten().map(|t| [t.0, t.1, t.2][k]))
                        .collect::<UInt32Array>(),
                )
            };
            let valid: Vec<bool> = counts.iter().map(|c| c.flatten().is_some()).collect();
            let struct_array = StructArray::new(
                count_fields(),
                vec![part(0), part(1), part(2)],
                Some(valid.into()),
            );
            push(&mut out, Arc::new(struct_array));
            push(&mut out, source(2));
        }
        let any = |i: usize| {
            verdicts[i]
                .iter()
                .any(|v| matches!(v, Some((_, Source::Judge | Source::Cache))))
        };
        let acc = |f: fn(&Usage) -> u32| -> ArrayRef {
            Arc::new(
                (0..n)
                    .map(|i| {
                        (verdicts[i].iter().any(Option::is_some) || errors[i].is_some())
                            .then(|| f(&usage[i]))
                    })
                    .collect::<UInt32Array>(),
            )
        };
        push(&mut out, acc(|u| u.prompt_tokens));
        push(&mut out, acc(|u| u.completion_tokens));
        push(&mut out, acc(|u| u.latency_ms));
        let templates: Vec<Option<String>> = (0..n)
            .map(|i| {
                any(i).then(|| {
                    let mut t = Vec::new();
                    if matches!(verdicts[i][0], Some((_, Source::Judge | Source::Cache))) {
                        t.push(MEANING_MATCH.hash());
                    }
                    if matches!(verdicts[i][1], Some((_, Source::Judge | Source::Cache))) {
                        t.push(SIMILARITY.hash());
                    }
                    if matches!(verdicts[i][2], Some((_, Source::Judge | Source::Cache))) {
                        t.push(FACT_EXTRACT.hash());
                        t.push(FACT_MATCH.hash());
                    }
                    t.join(",")
                })
            })
            .collect();
        push(&mut out, Arc::new(StringArray::from(templates)));
        for (i, e) in errors.into_iter().enumerate() {
            if let Some(e) = e {
                out.fail_row(n, i, e);
            }
        }
        out
    }
}

fn add_usage(total: &mut Usage, u: Usage) {
    total.prompt_tokens += u.prompt_tokens;
    total.completion_tokens += u.completion_tokens;
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

fn read_verdict(metric: usize, v: &Value, reference_facts: usize) -> Result<Verdict, String> {
    match metric {
        0 => parse::meaning_match(v).map(|(b, r)| Verdict::Meaning(b, r)),
        1 => parse::similarity(v).map(|(s, r)| Verdict::Similarity(s, r)),
        _ => parse::fact_match(v, reference_facts)
            .map(|(m, o)| Verdict::Facts(Some((m as u32, reference_facts as u32, o as u32)))),
    }
}

fn count_fields() -> Fields {
    Fields::from(vec![
        Field::new("matched", DataType::UInt32, true),
        Field::new("reference", DataType::UInt32, true),
        Field::new("output", DataType::UInt32, true),
    ])
}

/// The output fields for a selection of judge metrics.
pub fn fields(selection: [bool; 3]) -> Vec<Field> {
    let mut f = Vec::new();
    let text = |n: &str| Field::new(n, DataType::Utf8, true);
    if selection[0] {
        f.push(Field::new("meaning_match", DataType::Boolean, true));
        f.push(text("meaning_match_reason"));
        f.push(text("meaning_match_source"));
    }
    if selection[1] {
        f.push(Field::new("similarity_score", DataType::UInt8, true));
        f.push(Field::new("similarity", DataType::Float32, true));
        f.push(text("similarity_rationale"));
        f.push(text("similarity_source"));
    }
    if selection[2] {
        f.push(Field::new("fact_similarity", DataType::Float32, true));
        f.push(Field::new("fact_recall", DataType::Float32, true));
        f.push(Field::new("fact_precision", DataType::Float32, true));
        f.push(Field::new(
            "fact_counts",
            DataType::Struct(count_fields()),
            true,
        ));
        f.push(text("fact_similarity_source"));
    }
    f.push(Field::new("judge_prompt_tokens", DataType::UInt32, true));
    f.push(Field::new(
        "judge_completion_tokens",
        DataType::UInt32,
        true,
    ));
    f.push(Field::new("judge_latency_ms", DataType::UInt32, true));
    f.push(text("judge_templates"));
    f
}

/// Reads a `--judge-where` column's value for row `i` into per-metric
/// requests: a boolean (true = every selected judge metric), a string of
/// comma-separated metric names, or a list of names. Unknown names are an
/// error naming the column and row.
pub fn requested_by(
    column: &ArrayRef,
    i: usize,
    describe: &dyn Fn() -> String,
) -> Result<[bool; 3], Error> {
    if column.is_null(i) {
        return Ok([false; 3]);
    }
    let names: Vec<String> = match column.data_type() {
        DataType::Boolean => return Ok([column.as_boolean().value(i); 3]),
        DataType::Utf8 => split(column.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => split(column.as_string::<i64>().value(i)),
        DataType::Utf8View => split(column.as_string_view().value(i)),
        DataType::List(_) | DataType::LargeList(_) => {
            let items = match column.data_type() {
                DataType::List(_) => column.as_list::<i32>().value(i),
                _ => column.as_list::<i64>().value(i),
            };
            let items = arrow::compute::cast(&items, &DataType::Utf8)
                .map_err(|e| Error::bad_input(format!("{}: {e}", describe())))?;
            items
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        }
        other => {
            return Err(Error::bad_input(format!(
                "{}: type {other} is not boolean, string or list of strings",
                describe()
            )))
        }
    };
    let mut out = [false; 3];
    for name in names {
        let name = if name == "similarity_score" {
            "similarity".to_string()
        } else {
            name
        };
        match METRICS.iter().position(|m| *m == name) {
            Some(k) => out[k] = true,
            None => {
                return Err(Error::bad_input(format!(
                    "{}: unknown judge metric '{name}' (expected {})",
                    describe(),
                    METRICS.join(", ")
                )))
            }
        }
    }
    Ok(out)
}

fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// A JSON value describing the report, for the summary.
pub fn report_json(r: &JudgeReport) -> Value {
    json!(r)
}
