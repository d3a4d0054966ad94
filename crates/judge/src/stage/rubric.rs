//! Asking a rubric about one row: verdict first, read with its token
//! probabilities, and the reason only where `--judge-reasons` wants it.

use super::*;

impl JudgeStage {
    /// A stored or fresh answer to a rubric as the row's verdict.
    pub(crate) fn verdict(&self, r: &Rubric, v: &Value) -> Result<Outcome, String> {
        match r.answer {
            Answer::Verdict => {
                parse::verdict(v, r.value_keys, r.reason_keys).map(|a| Outcome::Verdict {
                    verdict: a.p_true.map_or(a.sampled, |p| p >= self.p_threshold(r)),
                    p_true: a.p_true,
                    reason: a.reason,
                })
            }
            Answer::Score { min, max } => parse::score(v, r.value_keys, r.reason_keys, (min, max))
                .map(|a| Outcome::Score {
                    score: a.score,
                    expected: a.expected,
                    reason: a.reason,
                }),
        }
    }

    /// The exact first request the run would send for `metric` about row
    /// `i` of `batch` (with `--judge-reasons failures` a failing answer is
    /// asked again uncut), for `refscore judge-prompt`: nothing is sent.
    /// The metric may be any the run knows, chosen or not. A row the run
    /// would decide without a call (not scorable, or by a rule) gets that
    /// decision instead of a request.
    pub fn request_for(&self, metric: &str, batch: &RowBatch, i: usize) -> Result<Prompt, Error> {
        let known = &self.options.judge_metrics;
        let jm = known.named(metric).ok_or_else(|| {
            Error::usage(format!(
                "unknown judge metric '{metric}' (known: {})",
                known.names().join(", ")
            ))
        })?;
        let JudgeMetric::Rubric(rubric) = &jm else {
            return Err(Error::usage(format!(
                "{metric} is not asked as one question (the fact ratio extracts facts, then checks each)"
            )));
        };
        if let Some(why) = batch.unscorable(i) {
            return Ok(Prompt::Decided(format!(
                "the row is not scored ({why}): no judge metric is asked for it"
            )));
        }
        let answers = Answers::of(batch, i);
        if rules::by_rule(&jm, answers.empty, answers.same).is_some() {
            let rule = if answers.empty {
                "the output is empty, so it fails"
            } else {
                "the output is the reference's answer, so it passes"
            };
            return Ok(Prompt::Decided(format!(
                "{metric} is decided by a rule without a call: {rule}"
            )));
        }
        let columns = columns_as_text(batch)?;
        let user = render(rubric, batch, i, &columns).map_err(Error::config)?;
        let template = &rubric.template;
        let ask = Ask {
            template,
            user,
            max_tokens: match self.options.reasons {
                Reasons::Always => template.max_tokens,
                _ => VERDICT_TOKENS,
            },
            logprobs: true,
        };
        Ok(Prompt::Request(self.client.first_body(&ask)))
    }

    /// Asks a rubric about one row as
    /// `--judge-reasons` says. Every mode sends the same prompt (the JSON
    /// question, verdict before reason): `always` lets the judge write the
    /// whole answer; `failures` and `never` cut it after the verdict
    /// ([`VERDICT_TOKENS`]), and `failures` then asks the whole question
    /// again only where the verdict fails: the prompt is byte for byte the
    /// first one, so the server's prompt cache covers all of it, and the
    /// judge repeats its verdict and goes on to the reason.
    pub(super) fn ask_rubric(&self, r: &Rubric, user: &str) -> JobResult {
        if self.options.reasons == Reasons::Always {
            return self.ask_json(r, user, None);
        }
        let (mut v, mut usage, mode) = self.ask_json(r, user, Some(VERDICT_TOKENS))?;
        if self.options.reasons == Reasons::Failures && self.fails(r, &v)? {
            self.reasons_asked.fetch_add(1, Ordering::Relaxed);
            let (full, u, _) = self.ask_json(r, user, None)?;
            add_usage(&mut usage, u);
            let key = r.keys().1;
            v[key] = full.get(key).cloned().unwrap_or(Value::Null);
        }
        Ok((v, usage, mode))
    }

    /// The P(true) a verdict passes at: the rubric's own, else
    /// `--judge-threshold`.
    pub(super) fn p_threshold(&self, r: &Rubric) -> f32 {
        r.p_threshold().unwrap_or(self.options.threshold)
    }

    /// The normalised score a score rubric passes at: the run's
    /// `--threshold` for it, else its default.
    pub(super) fn score_pass(&self, r: &Rubric) -> f32 {
        let given = self
            .options
            .thresholds
            .iter()
            .rev()
            .find(|(n, _)| n == r.name());
        given.map_or(r.metric.default_threshold, |(_, t)| *t) as f32
    }

    /// Whether an answer fails: a verdict false, or a score below its
    /// metric's pass threshold.
    pub(super) fn fails(&self, r: &Rubric, v: &Value) -> Result<bool, AskFailure> {
        let bad = |message: String| AskFailure {
            message,
            transient: false,
        };
        Ok(self.fails_outcome(r, &self.verdict(r, v).map_err(bad)?))
    }

    /// Whether a decided answer to `r` fails (see [`Self::fails`]).
    pub(super) fn fails_outcome(&self, r: &Rubric, o: &Outcome) -> bool {
        match (o, r.answer) {
            (Outcome::Verdict { verdict, .. }, _) => !verdict,
            (
                Outcome::Score {
                    score, expected, ..
                },
                Answer::Score { min, max },
            ) => normalised(*score, *expected, (min, max)) < self.score_pass(r),
            _ => false,
        }
    }

    /// Asks the JSON question (verdict, then reason), whole or cut after
    /// `cut` tokens, and reads the verdict's token probabilities where the
    /// server gives them. A cut answer keeps only the verdict (what it began
    /// of the reason is dropped).
    pub(super) fn ask_json(&self, r: &Rubric, user: &str, cut: Option<u32>) -> JobResult {
        let template = &r.template;
        let ask = Ask {
            template,
            user: user.to_string(),
            max_tokens: cut.unwrap_or(template.max_tokens),
            logprobs: true,
        };
        self.client.send_ask(&ask, |reply| {
            let mut v = parse::rubric_answer(
                &extract_object(&reply.content)?,
                r.value_keys,
                r.reason_keys,
            )?;
            self.verdict(r, &v)?;
            let (key, why) = r.keys();
            if cut.is_some() {
                v[why] = Value::Null;
            }
            if let Some(tokens) = &reply.tokens {
                let at = value_token(tokens, key);
                match r.answer {
                    Answer::Verdict => {
                        v["p_true"] = json!(at.and_then(|k| verdict_p(&tokens[k])));
                    }
                    Answer::Score { min, max } => {
                        v["expected"] =
                            json!(at.and_then(|k| expected_score(tokens, k, (min, max))));
                    }
                }
            }
            Ok(v)
        })
    }
}

/// What `refscore judge-prompt` shows for one metric and one row.
#[derive(Debug, Clone, PartialEq)]
pub enum Prompt {
    /// The request's body, as it would be sent.
    Request(Value),
    /// Why no request would be sent: the row is decided without a call.
    Decided(String),
}

/// Generated tokens that hold a JSON answer's verdict or score: `{"`,
/// `meaning`, `_match`, `":`, ` true` (or the score's digits, "10" being two
/// for some tokenisers), with room for a space or two.
pub(super) const VERDICT_TOKENS: u32 = 10;
