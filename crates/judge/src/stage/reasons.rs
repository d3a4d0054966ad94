//! A panel's reasons: with `--judge-reasons failures` its judges answer
//! verdicts only, and a failing value's reason is asked once, after the
//! panel has decided, of the judge whose answer decided it. Asking each
//! judge for a reason wherever its own verdict failed paid for reasons the
//! panel then threw away.

use super::*;

/// The whole question (verdict, then reason) of one rubric about one row,
/// asked for its reason.
struct ReasonAsk {
    rubric: Arc<Rubric>,
    texts: String,
    user: String,
}

impl Question for ReasonAsk {
    fn ask(&self, stage: &JudgeStage) -> JobResult {
        stage.reasons_asked.fetch_add(1, Ordering::Relaxed);
        stage.ask_json(&self.rubric, &self.user, None)
    }

    fn keep(&self, stage: &JudgeStage, v: &Value, u: Usage, mode: &str) {
        if stage.verdict(&self.rubric, v).is_ok() {
            stage.record(&self.rubric.template, mode, &self.texts, v, u);
        }
    }
}

/// The reason a judge gave for one value (`None` where it wrote none) and
/// what asking cost, or why it could not be had.
pub(crate) type ReasonResult = Result<(Option<String>, Usage), AskFailure>;

impl JudgeStage {
    /// Leaves reasons to the panel this judge sits on: with `failures`, the
    /// judge answers verdicts only from now on. True when the panel must
    /// then ask the reasons ([`Self::reasons_for`]).
    pub(crate) fn defer_reasons(&mut self) -> bool {
        if self.options.reasons != Reasons::Failures {
            return false;
        }
        self.options.reasons = Reasons::Never;
        true
    }

    /// Whether the decided value of metric `m` fails: a false verdict, or a
    /// score below its pass threshold (where `failures` wants a reason).
    pub(crate) fn value_fails(&self, m: usize, o: &Outcome) -> bool {
        match &self.metrics[m] {
            JudgeMetric::Rubric(r) => self.fails_outcome(r, o),
            JudgeMetric::FactRatio => false,
        }
    }

    /// The reasons of `wanted` values (row of `batch`, metric index): each
    /// rubric's whole question, found stored or asked.
    pub(crate) fn reasons_for(
        &mut self,
        batch: &RowBatch,
        wanted: &[(usize, usize)],
    ) -> Result<Vec<ReasonResult>, Error> {
        let columns = columns_as_text(batch)?;
        let mut out: Vec<Option<ReasonResult>> = Vec::with_capacity(wanted.len());
        let mut asks: Vec<(usize, ReasonAsk)> = Vec::new();
        for (k, &(i, m)) in wanted.iter().enumerate() {
            let JudgeMetric::Rubric(rubric) = &self.metrics[m] else {
                out.push(Some(Ok((None, Usage::default()))));
                continue;
            };
            let rubric = Arc::clone(rubric);
            let user = match render(&rubric, batch, i, &columns) {
                Ok(user) => user,
                Err(message) => {
                    out.push(Some(Err(AskFailure {
                        message,
                        transient: false,
                    })));
                    continue;
                }
            };
            // The key of the whole answer, as `always` stores it.
            let texts = DiskCache::key(&[&user]);
            if let Some((v, u, source)) = self.lookup(&rubric.template, &texts) {
                if let Ok(o) = self.verdict(&rubric, &v) {
                    let u = if source == Source::Judge {
                        self.count_replay(u);
                        u
                    } else {
                        Usage::default()
                    };
                    out.push(Some(Ok((reason_of(o), u))));
                    continue;
                }
            }
            out.push(None);
            asks.push((
                k,
                ReasonAsk {
                    rubric,
                    texts,
                    user,
                },
            ));
        }
        let (at, questions): (Vec<usize>, Vec<ReasonAsk>) = asks.into_iter().unzip();
        let answers = self.run_jobs(&questions);
        for ((k, ask), answer) in at.into_iter().zip(&questions).zip(answers) {
            out[k] = Some(answer.and_then(|(v, u, _)| {
                self.verdict(&ask.rubric, &v)
                    .map(|o| (reason_of(o), u))
                    .map_err(|message| AskFailure {
                        message,
                        transient: false,
                    })
            }));
        }
        Ok(out
            .into_iter()
            .map(|r| r.expect("every reason found or asked"))
            .collect())
    }
}

/// The reason an answer gave.
fn reason_of(o: Outcome) -> Option<String> {
    match o {
        Outcome::Verdict { reason, .. } | Outcome::Score { reason, .. } => reason,
        Outcome::Facts(_) => None,
    }
}
