//! The judge stage: decides each requested metric by rule, band, cache or a
//! call, runs the calls on worker threads and builds the output columns.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use arrow::array::{Array, Float32Array};
use arrow::datatypes::Field;
use lru::LruCache;
use refscore_batch::{Error, RowBatch, ScoreColumns};
use serde_json::{json, Value};

use crate::cache::DiskCache;
use crate::client::{AskFailure, Client, Usage};
use crate::columns::{self, Source, Verdict};
use crate::prompts::{Template, FACT_EXTRACT, FACT_MATCH, MEANING_MATCH, SIMILARITY};
use crate::{parse, rules, JudgeOptions, JudgeReport, METRICS};

/// One piece of work for the model. `texts` is the hash of the texts the
/// prompt is made of; with the request's other parameters it makes the
/// cache and journal key (see [`JudgeStage::key`]).
enum Job {
    Ask {
        row: usize,
        metric: usize,
        texts: String,
    },
    Extract {
        texts: String,
        input: String,
        reference: String,
    },
}

/// The judge stage: endpoint client, caches and counters.
pub struct JudgeStage {
    client: Client,
    options: JudgeOptions,
    disk: Option<DiskCache>,
    journal: Option<DiskCache>,
    reference_facts: LruCache<String, Arc<Vec<String>>>,
    report: JudgeReport,
    /// Tokens of answers replayed from the journal, added to the totals so
    /// that a resumed run reports what a clean run would.
    replayed_tokens: (u64, u64),
    /// Rows of the last batch with a judge failure.
    last_rows_failed: u64,
    last_rows_retryable: u64,
    /// The output mode last recorded in the cache and journal folders.
    recorded_mode: String,
}

/// A parsed reply, what it cost and the output mode that produced it.
type JobResult = Result<(Value, Usage, &'static str), AskFailure>;

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
            templates: [&MEANING_MATCH, &SIMILARITY, &FACT_EXTRACT, &FACT_MATCH]
                .iter()
                .map(|t| t.hash())
                .collect(),
            ..JudgeReport::default()
        };
        let mut stage = JudgeStage {
            client,
            options,
            disk,
            journal: None,
            reference_facts: LruCache::new(std::num::NonZeroUsize::new(100_000).expect("non-zero")),
            report,
            replayed_tokens: (0, 0),
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

    /// The cache and journal key of a request: the template and every other
    /// request parameter that can change the answer (URL, model, token
    /// limit, temperature, output mode), and the hash of its texts.
    fn key(&self, template: &Template, mode: &str, texts: &str) -> String {
        DiskCache::key(&[&self.client.request_id(template, mode), texts])
    }

    /// A stored answer for a request in the current output mode: from the
    /// journal first (a paid answer replayed with its usage, source
    /// `judge`), else from the cache (source `cache`, no usage).
    fn lookup(&self, template: &Template, texts: &str) -> Option<(Value, Usage, Source)> {
        let key = self.key(template, self.client.mode_name(), texts);
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
        // Rows with a failure of the endpoint itself (see last_batch_rows_retryable).
        let mut transient: Vec<bool> = vec![false; n];
        let mut extraction_down: std::collections::HashSet<String> = Default::default();
        let mut jobs: Vec<Job> = Vec::new();
        let mut fact_rows: Vec<(usize, String)> = Vec::new();
        let mut extract_index: HashMap<String, usize> = HashMap::new();
        let mut judged = vec![false; n];

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
                    let texts = DiskCache::key(&[input, reference]);
                    if !self.reference_facts.contains(&texts) && !extract_index.contains_key(&texts)
                    {
                        if let Some((v, usage, source)) = self.lookup(&FACT_EXTRACT, &texts) {
                            if let Ok(f) = parse::facts(&v) {
                                if source == Source::Judge {
                                    self.count_replay(usage);
                                }
                                self.reference_facts.put(texts.clone(), Arc::new(f));
                            }
                        }
                    }
                    if !self.reference_facts.contains(&texts) && !extract_index.contains_key(&texts)
                    {
                        extract_index.insert(texts.clone(), jobs.len());
                        jobs.push(Job::Extract {
                            texts: texts.clone(),
                            input: input.into(),
                            reference: reference.into(),
                        });
                    }
                    fact_rows.push((i, texts));
                    continue;
                }
                let template = if m == 0 { &MEANING_MATCH } else { &SIMILARITY };
                let texts = DiskCache::key(&[input, reference, output]);
                if let Some((v, u, source)) = self.lookup(template, &texts) {
                    if let Ok(verdict) = read_verdict(m, &v, 0) {
                        if source == Source::Judge {
                            self.count_replay(u);
                            add_usage(&mut usage[i], u);
                            judged[i] = true;
                        } else {
                            self.report.cached += 1;
                        }
                        verdicts[i][m] = Some((verdict, source));
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

        // Phase 1: Meaning Match, similarity and reference-fact extraction.
        let results = self.run_jobs(&jobs, batch, None);
        for (job, result) in jobs.iter().zip(results) {
            match (job, result) {
                (Job::Ask { row, metric, .. }, Ok((v, u, _))) => {
                    add_usage(&mut usage[*row], u);
                    judged[*row] = true;
                    match read_verdict(*metric, &v, 0) {
                        Ok(verdict) => {
                            verdicts[*row][*metric] = Some((verdict, Source::Judge));
                        }
                        Err(e) => fail(&mut errors[*row], &mut self.report, METRICS[*metric], &e),
                    }
                }
                (Job::Ask { row, metric, .. }, Err(e)) => {
                    judged[*row] = true;
                    transient[*row] |= e.transient;
                    fail(
                        &mut errors[*row],
                        &mut self.report,
                        METRICS[*metric],
                        &e.message,
                    );
                }
                (Job::Extract { texts, .. }, Ok((v, _, _))) => {
                    if let Ok(f) = parse::facts(&v) {
                        self.reference_facts.put(texts.clone(), Arc::new(f));
                    }
                }
                (Job::Extract { texts, .. }, Err(e)) => {
                    if e.transient {
                        extraction_down.insert(texts.clone());
                    }
                }
            }
        }

        // Phase 2: match each row's output against its reference's facts.
        let mut match_jobs: Vec<Job> = Vec::new();
        let mut match_facts: Vec<Arc<Vec<String>>> = Vec::new();
        for (i, facts_key) in &fact_rows {
            let Some(facts) = self.reference_facts.get(facts_key).cloned() else {
                transient[*i] |= extraction_down.contains(facts_key);
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
            let texts = DiskCache::key(&[input, reference, &facts.join("\n"), output]);
            if let Some((v, u, source)) = self.lookup(&FACT_MATCH, &texts) {
                if let Ok(verdict) = read_verdict(2, &v, facts.len()) {
                    if source == Source::Judge {
                        self.count_replay(u);
                        add_usage(&mut usage[*i], u);
                        judged[*i] = true;
                    } else {
                        self.report.cached += 1;
                    }
                    verdicts[*i][2] = Some((verdict, source));
                    continue;
                }
            }
            match_jobs.push(Job::Ask {
                row: *i,
                metric: 2,
                texts,
            });
            match_facts.push(facts);
        }
        let results = self.run_jobs(&match_jobs, batch, Some(&match_facts));
        for ((job, result), facts) in match_jobs.iter().zip(results).zip(&match_facts) {
            let Job::Ask { row, .. } = job else {
                continue;
            };
            judged[*row] = true;
            match result {
                Err(e) => {
                    transient[*row] |= e.transient;
                    fail(
                        &mut errors[*row],
                        &mut self.report,
                        "fact_similarity",
                        &e.message,
                    );
                }
                Ok((v, u, _)) => match read_verdict(2, &v, facts.len()) {
                    Ok(verdict) => {
                        add_usage(&mut usage[*row], u);
                        verdicts[*row][2] = Some((verdict, Source::Judge));
                    }
                    Err(e) => fail(&mut errors[*row], &mut self.report, "fact_similarity", &e),
                },
            }
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
                    let result = self.run_job(&jobs[k], k, batch, facts);
                    if let Ok((v, u, mode)) = &result {
                        // Journal a paid answer the moment it arrives: a
                        // crash later in the batch must not lose it.
                        let reference_facts = facts.map_or(0, |f| f[k].len());
                        self.record_valid(&jobs[k], reference_facts, v, *u, mode);
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
    fn record_valid(&self, job: &Job, reference_facts: usize, v: &Value, u: Usage, mode: &str) {
        match job {
            Job::Ask { metric, texts, .. } => {
                if read_verdict(*metric, v, reference_facts).is_ok() {
                    let template = match metric {
                        0 => &MEANING_MATCH,
                        1 => &SIMILARITY,
                        _ => &FACT_MATCH,
                    };
                    self.record(template, mode, texts, v, u);
                }
            }
            Job::Extract { texts, .. } => {
                if parse::facts(v).is_ok() {
                    self.record(&FACT_EXTRACT, mode, texts, v, u);
                }
            }
        }
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

    fn options(url: &str, selection: [bool; 3], cache: Option<PathBuf>) -> JudgeOptions {
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
            selection,
            band: None,
            cache_dir: cache,
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
            _ => chat(r#"{"output_facts": ["x"], "matches": [{"output": 1, "reference": 2}]}"#),
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
        let sel = [true, false, false];
        let run = |url: &str| {
            let mut stage =
                JudgeStage::new(options(url, sel, Some(dir.path().to_path_buf()))).unwrap();
            let cols = stage.score_batch(&batch(), &[[true; 3]; 2], None).unwrap();
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
                [true, false, false],
                Some(dir.path().to_path_buf()),
            ))
            .unwrap();
            let cols = stage.score_batch(&batch(), &[[true; 3]; 2], None).unwrap();
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
        let mut stage = JudgeStage::new(options(&server.url, [true, true, false], None)).unwrap();
        let mut b = batch();
        b.output = text(&["Lyon", "Water boils at 100 C."]); // row 1: decided by rule
        stage.score_batch(&b, &[[true; 3]; 2], None).unwrap();
        assert_eq!(stage.last_batch_rows_failed(), 1);
        let r = stage.report();
        assert_eq!((r.rows_failed, r.failures), (1, 1));
        stage.score_batch(&batch(), &[[true; 3]; 2], None).unwrap();
        assert_eq!(stage.last_batch_rows_failed(), 2);
        assert_eq!(stage.report().rows_failed, 3);
        stage
            .score_batch(&batch(), &[[false, true, false]; 2], None)
            .unwrap();
        assert_eq!(stage.last_batch_rows_failed(), 0);
    }

    #[test]
    fn the_journal_replays_paid_answers_as_judge_answers() {
        use std::sync::atomic::AtomicBool;
        let dir = tempfile::tempdir().unwrap();
        let journal = dir.path().join("journal");
        let sel = [true, true, true];
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
                _ => chat(r#"{"output_facts": ["x"], "matches": [{"output": 1, "reference": 2}]}"#),
            }
        });
        let run = || {
            let mut stage = JudgeStage::new(options(&server.url, sel, None)).unwrap();
            stage.set_journal_dir(journal.clone()).unwrap();
            let cols = stage.score_batch(&batch(), &[[true; 3]; 2], None).unwrap();
            (cols, stage.report())
        };
        let (first, paid) = run();
        assert!(first.row_errors.is_empty());
        assert_eq!(
            paid.calls, 8,
            "per row: meaning, similarity, extraction, fact match"
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
}
