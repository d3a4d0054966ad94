//! The judge stage: decides each requested metric by rule, band, cache or a
//! call, runs the calls on worker threads and builds the output columns.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, Float32Array};
use arrow::datatypes::Field;
use lru::LruCache;
use refscore_batch::{Error, RowBatch, ScoreColumns};
use serde_json::Value;

use crate::cache::DiskCache;
use crate::client::{Client, Usage};
use crate::columns::{self, Source, Verdict};
use crate::prompts::{Template, FACT_EXTRACT, FACT_MATCH, MEANING_MATCH, SIMILARITY};
use crate::{parse, rules, JudgeOptions, JudgeReport, METRICS};

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
        columns::fields(self.options.selection)
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
            let same = !empty && rules::same_answer(reference, output);
            for m in 0..3 {
                if !(sel[m] && requested[i][m]) {
                    continue;
                }
                if let Some(verdict) = rules::by_rule(m, empty, same) {
                    self.report.decided_by_rule += 1;
                    verdicts[i][m] = Some((verdict, Source::Rule));
                    continue;
                }
                if let (0, Some(band), Some(cos)) = (m, self.options.band, cosine) {
                    if cos.is_valid(i) {
                        if let Some(verdict) = rules::by_band(cos.value(i), band) {
                            self.report.decided_by_band += 1;
                            verdicts[i][m] = Some((verdict, Source::Band));
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
        Ok(columns::build(
            self.options.selection,
            n,
            &verdicts,
            &usage,
            errors,
        ))
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
