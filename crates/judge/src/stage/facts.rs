//! The fact ratio's parts: extracting an answer's facts once, and reading a
//! fact check's yes/no with its probability.

use super::*;

impl JudgeStage {
    /// Phase 2 of a batch: one check per reference fact (does the output
    /// state it?) and per output fact (does the reference state it?), each
    /// asked once per batch however many rows need it, then each row's
    /// fact ratio. `extraction_down`: answers whose extraction failed
    /// because the endpoint did.
    pub(super) fn check_facts(
        &mut self,
        batch: &RowBatch,
        fact_rows: &[FactRow],
        extraction_down: &HashSet<String>,
        d: &mut Decided,
    ) {
        let local = self.options.fact_check.is_some();
        let mut checks: Vec<Check> = Vec::new();
        let mut check_index: HashMap<String, usize> = HashMap::new();
        // With --fact-check nli: the distinct (answer, fact) pairs to check.
        let mut nli_pairs: Vec<(String, String)> = Vec::new();
        // Per use of a check: its row, whether it checks a reference fact,
        // and the check (asked once per batch however many rows need it).
        let mut uses: Vec<(usize, bool, usize)> = Vec::new();
        // Per fact row: (row, reference facts, output facts, supported
        // reference facts, supported output facts).
        let mut tallies: Vec<(usize, usize, usize, usize, usize)> = Vec::new();
        let mut tally_of: HashMap<usize, usize> = HashMap::new();
        // The fact ratio's index in `metrics` (one metric, whatever the row).
        let mut fact_metric = 0;
        for (i, m, ref_key, out_key) in fact_rows {
            let i = *i;
            fact_metric = *m;
            let (Some(ref_facts), Some(out_facts)) = (
                self.facts.get(ref_key).cloned(),
                self.facts.get(out_key).cloned(),
            ) else {
                d.transient[i] |=
                    extraction_down.contains(ref_key) || extraction_down.contains(out_key);
                fail(
                    &mut d.errors[i],
                    &mut self.report,
                    "fact_similarity",
                    "the facts of the reference or the output could not be extracted",
                );
                continue;
            };
            if ref_facts.is_empty() {
                fail(
                    &mut d.errors[i],
                    &mut self.report,
                    "fact_similarity",
                    "the judge found no facts in the reference",
                );
                continue;
            }
            // A row is judged where the judge extracted its facts or
            // checks them; all local, no judge was asked.
            d.judged[i] |= self.options.facts == crate::FactSource::Judge || !local;
            let (input, reference, output) = (
                batch.input.as_ref().and_then(|c| c.get(i)).unwrap_or(""),
                batch.reference().get(i).unwrap_or(""),
                batch.output().get(i).unwrap_or(""),
            );
            let mut tally = (i, ref_facts.len(), out_facts.len(), 0, 0);
            let sides = [(true, output, &ref_facts), (false, reference, &out_facts)];
            for (is_ref, answer, facts) in sides {
                for fact in facts.iter() {
                    if local {
                        // The NLI model's check: premise the other answer,
                        // hypothesis the fact; asked below, once per pair.
                        let key = DiskCache::key(&[answer, fact]);
                        let k = *check_index.entry(key).or_insert_with(|| {
                            nli_pairs.push((answer.to_string(), fact.clone()));
                            nli_pairs.len() - 1
                        });
                        uses.push((i, is_ref, k));
                        continue;
                    }
                    let texts = DiskCache::key(&[input, answer, fact]);
                    if let Some(&k) = check_index.get(&texts) {
                        uses.push((i, is_ref, k));
                        continue;
                    }
                    if let Some((v, u, source)) = self.lookup(&FACT_CHECK, &texts) {
                        if let Ok(holds) = parse_check(&v) {
                            if source == Source::Judge {
                                self.count_replay(u);
                                add_usage(&mut d.usage[i], u);
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
                    checks.push(Check {
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
        let results = if local {
            self.check_locally(&nli_pairs)
        } else {
            self.run_jobs(&checks)
        };
        let mut paid = vec![false; results.len()];
        let mut check_failed: HashSet<usize> = HashSet::new();
        for (row, is_ref, k) in uses {
            let t = &mut tallies[tally_of[&row]];
            let outcome = match &results[k] {
                Ok((v, u, _)) => {
                    // What a check cost goes to the first row that used it.
                    if !std::mem::replace(&mut paid[k], true) {
                        add_usage(&mut d.usage[row], *u);
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
                    d.transient[row] |= is_transient;
                    if check_failed.insert(row) {
                        fail(&mut d.errors[row], &mut self.report, "fact_similarity", &e);
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
            d.verdicts[fact_metric][row] = Some((
                Outcome::Facts(Some((matched, n_ref as u32, n_out as u32))),
                if local { Source::Nli } else { Source::Judge },
            ));
        }
    }

    /// The local NLI model's checks of (premise, hypothesis) `pairs`, as the
    /// judge's would come back: a fact holds where P(entailment) reaches
    /// `--fact-check-threshold`. A model that fails fails every check
    /// (not transient: a resumed run would fail the same way).
    fn check_locally(&mut self, pairs: &[(String, String)]) -> Vec<JobResult> {
        let Some(check) = self.options.fact_check.clone() else {
            return Vec::new();
        };
        if pairs.is_empty() {
            return Vec::new();
        }
        self.report.fact_checks_nli += pairs.len() as u64;
        let asked: Vec<(&str, &str)> = pairs
            .iter()
            .map(|(a, f)| (a.as_str(), f.as_str()))
            .collect();
        match check.model.entailment(&asked) {
            Ok(p) => p
                .into_iter()
                .map(|e| {
                    // A fact past the cut of a long premise reads as
                    // unsupported: counted, for the summary and a warning.
                    self.report.fact_checks_nli_truncated += u64::from(e.truncated);
                    Ok((
                        json!({"holds": e.p >= check.threshold}),
                        Usage::default(),
                        NO_FORMAT,
                    ))
                })
                .collect(),
            Err(e) => {
                let message = format!("--fact-check nli: {e}");
                pairs
                    .iter()
                    .map(|_| {
                        Err(AskFailure {
                            message: message.clone(),
                            transient: false,
                        })
                    })
                    .collect()
            }
        }
    }

    /// Makes sure the facts of `answer` are known or asked for:
    /// from memory, the journal or cache, else a new extraction job (once
    /// per batch for each distinct text).
    pub(crate) fn want_facts(
        &mut self,
        texts: &str,
        answer: &str,
        extracting: &mut HashSet<String>,
        jobs: &mut Vec<Work>,
    ) {
        if self.facts.contains(texts) || extracting.contains(texts) {
            return;
        }
        if self.options.facts == crate::FactSource::Sentences {
            self.report.facts_from_sentences += 1;
            self.facts
                .put(texts.to_string(), Arc::new(crate::sentences(answer)));
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
        jobs.push(Work::Extract {
            texts: texts.to_string(),
            answer: answer.into(),
        });
    }
}

/// A yes/no reply to a fact check, as stored: `{"holds": bool, "p": P(yes)}`.
pub(super) fn read_word_verdict(reply: &Reply) -> Result<Value, String> {
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
pub(super) fn parse_check(v: &Value) -> Result<bool, String> {
    let sampled = v["holds"]
        .as_bool()
        .ok_or_else(|| format!("not a fact check: {v}"))?;
    Ok(v["p"].as_f64().map_or(sampled, |p| p >= 0.5))
}

/// The first token that is not only whitespace.
pub(super) fn first_word(tokens: &[crate::transport::Token]) -> Option<&crate::transport::Token> {
    tokens.iter().find(|t| !t.text.trim().is_empty())
}
