//! The work the decision steps queue for the judge, and how it runs: on
//! worker threads, each paid answer kept the moment it arrives, then each
//! answer settling its value.

use super::*;

/// One question for the model, asked on a worker thread; its paid answer
/// is kept the moment it arrives. `texts` (in each) is the hash of the
/// texts the prompt is made of; with the request's other parameters it
/// makes the cache and journal key (see [`JudgeStage::key`]).
pub(super) trait Question: Sync {
    /// Asks it, with retries: the parsed answer, its cost and the output
    /// mode that produced it.
    fn ask(&self, stage: &JudgeStage) -> JobResult;
    /// Keeps a paid answer in the cache and journal when it parses as this
    /// question's kind of answer (a reply that will be retried is not).
    fn keep(&self, stage: &JudgeStage, v: &Value, u: Usage, mode: &str);
}

/// The first phase's work, queued by the decision steps: the rubrics of
/// the rows, and the facts of the answers the fact ratio needs.
pub(crate) enum Work {
    /// One rubric of one row; `metric` indexes the stage's metrics, `user`
    /// is the rendered user message.
    Ask {
        row: usize,
        metric: usize,
        rubric: Arc<Rubric>,
        texts: String,
        user: String,
    },
    /// The atomic facts of one answer (a reference or an output).
    Extract { texts: String, answer: String },
}

impl Question for Work {
    fn ask(&self, stage: &JudgeStage) -> JobResult {
        match self {
            Work::Extract { answer, .. } => stage.client.ask(
                &FACT_EXTRACT,
                &FACT_EXTRACT.render(&[("answer", answer)]),
                |v| parse::facts(v).map(|_| v.clone()),
            ),
            Work::Ask { rubric, user, .. } => stage.ask_rubric(rubric, user),
        }
    }

    fn keep(&self, stage: &JudgeStage, v: &Value, u: Usage, mode: &str) {
        match self {
            Work::Ask { rubric, texts, .. } => {
                if stage.verdict(rubric, v).is_ok() {
                    stage.record(&rubric.template, mode, texts, v, u);
                }
            }
            Work::Extract { texts, .. } => {
                if parse::facts(v).is_ok() {
                    stage.record(&FACT_EXTRACT, mode, texts, v, u);
                }
            }
        }
    }
}

/// The second phase's work: does `answer` state `fact`? One check of the
/// fact ratio.
pub(super) struct Check {
    pub(super) texts: String,
    pub(super) input: String,
    pub(super) answer: String,
    pub(super) fact: String,
}

impl Question for Check {
    fn ask(&self, stage: &JudgeStage) -> JobResult {
        stage.fact_checks.fetch_add(1, Ordering::Relaxed);
        let ask = Ask {
            template: &FACT_CHECK,
            user: FACT_CHECK.render(&[
                ("input", &self.input),
                ("answer", &self.answer),
                ("fact", &self.fact),
            ]),
            max_tokens: FACT_CHECK.max_tokens,
            logprobs: true,
        };
        stage
            .client
            .send_ask(&ask, read_word_verdict)
            .map(|(v, u, _)| (v, u, NO_FORMAT))
    }

    fn keep(&self, stage: &JudgeStage, v: &Value, u: Usage, mode: &str) {
        if parse_check(v).is_ok() {
            stage.record(&FACT_CHECK, mode, &self.texts, v, u);
        }
    }
}

impl JudgeStage {
    /// Asks `questions` on `concurrency` worker threads; results in their
    /// order. A paid answer is journaled the moment it arrives: a crash
    /// later in the batch must not lose it.
    pub(super) fn run_jobs<Q: Question>(&self, questions: &[Q]) -> Vec<JobResult> {
        let results: Vec<OnceLock<JobResult>> =
            (0..questions.len()).map(|_| OnceLock::new()).collect();
        let next = AtomicUsize::new(0);
        let workers = self
            .options
            .endpoint
            .concurrency
            .clamp(1, questions.len().max(1));
        std::thread::scope(|s| {
            for _ in 0..workers {
                s.spawn(|| loop {
                    let k = next.fetch_add(1, Ordering::Relaxed);
                    if k >= questions.len() {
                        break;
                    }
                    let result = questions[k].ask(self);
                    if let Ok((v, u, mode)) = &result {
                        questions[k].keep(self, v, *u, mode);
                    }
                    let _ = results[k].set(result);
                });
            }
        });
        results
            .into_iter()
            .map(|r| r.into_inner().expect("every question was asked"))
            .collect()
    }

    /// Runs the batch's first-phase work (see [`decide`](Self::decide)):
    /// each rubric's answer settles its value or fails it, each extraction
    /// keeps its facts. The answers whose extraction failed because the
    /// endpoint did come back, for the fact checks' errors.
    pub(super) fn run_work(&mut self, work: &mut Pending) -> HashSet<String> {
        let mut extraction_down = HashSet::new();
        let d = &mut work.decided;
        let results = self.run_jobs(&work.jobs);
        for (job, result) in work.jobs.iter().zip(results) {
            match (job, result) {
                (
                    Work::Ask {
                        row,
                        metric,
                        rubric,
                        ..
                    },
                    Ok((v, u, _)),
                ) => {
                    add_usage(&mut d.usage[*row], u);
                    d.judged[*row] = true;
                    match self.verdict(rubric, &v) {
                        Ok(verdict) => {
                            d.verdicts[*metric][*row] = Some((verdict, Source::Judge));
                        }
                        Err(e) => fail(&mut d.errors[*row], &mut self.report, rubric.name(), &e),
                    }
                }
                (Work::Ask { row, rubric, .. }, Err(e)) => {
                    d.judged[*row] = true;
                    d.transient[*row] |= e.transient;
                    fail(
                        &mut d.errors[*row],
                        &mut self.report,
                        rubric.name(),
                        &e.message,
                    );
                }
                (Work::Extract { texts, .. }, Ok((v, _, _))) => {
                    if let Ok(f) = parse::facts(&v) {
                        self.facts.put(texts.clone(), Arc::new(f));
                    }
                }
                (Work::Extract { texts, .. }, Err(e)) => {
                    if e.transient {
                        extraction_down.insert(texts.clone());
                    }
                }
            }
        }
        extraction_down
    }
}
