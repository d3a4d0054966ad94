//! A panel of judges: several endpoints answering the same metrics, each
//! with its own client, cache, journal, batches, rate limits and
//! accounting. `escalate` asks the next judge only where the one before was
//! uncertain (P(true), or a score's expected value, inside the escalation
//! band), so a small judge answers most rows and a big one the hard ones;
//! `jury` asks every judge and takes the majority (verdicts; a tie fails the
//! row) or the mean (scores). A panel of one is the plain judge, its output
//! unchanged.
//!
//! The result gets, beside the panel's own columns, each judge's verdict or
//! score (`<metric>__<judge>`, and `<metric>__<judge>_p` for a verdict's
//! P(true)), so every judge can be calibrated against labels, and in a jury
//! `<metric>_agreement`: the share of judges siding with the majority (a
//! verdict) or 1 − the spread of their scores (a score).

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, BooleanArray, Float32Array, StringArray};
use arrow::datatypes::{DataType, Field};
use refscore_core::schema::source;
use refscore_core::{Error, RowBatch, ScoreColumns, Stage};
use serde_json::{json, Value};

use crate::batch::BatchMode;
use crate::columns::{self, normalised};
use crate::decide::{add_usage, Decided, Outcome, Source};
use crate::definition::Answer;
use crate::metric::JudgeMetric;
use crate::tiers::ChainValues;
use crate::where_column::{self, Wanted};
use crate::{report_json, JudgeOptions, JudgeReport, JudgeStage};

mod escalate;
mod jury;

pub use escalate::{escalation_warnings, DEFAULT_ESCALATE_BAND};

/// How a panel of several judges decides.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum PanelMode {
    /// The next judge answers only where the previous one's P(true) (or
    /// expected score on 0..1) lies inside `band` (inclusive).
    Escalate {
        /// Uncertainty band, on 0..1.
        band: (f32, f32),
    },
    /// Every judge answers; the majority (verdicts, ties fail) or the mean
    /// (scores) decides.
    Jury,
}

impl PanelMode {
    /// Parses `escalate` or `jury`; `band` is `--judge-escalate-band`.
    pub fn parse(word: &str, band: (f32, f32)) -> Result<PanelMode, String> {
        match word {
            "escalate" => Ok(PanelMode::Escalate { band }),
            "jury" => Ok(PanelMode::Jury),
            other => Err(format!("{other}: expected escalate or jury")),
        }
    }

    /// The name, as the flag takes it.
    pub fn name(&self) -> &'static str {
        match self {
            PanelMode::Escalate { .. } => "escalate",
            PanelMode::Jury => "jury",
        }
    }
}

/// One judge of a panel: its name (for columns, sources and folders) and
/// its stage's options.
#[derive(Debug, Clone)]
pub struct PanelMember {
    /// A short name: letters, digits and `_`.
    pub name: String,
    /// The judge's own settings.
    pub options: JudgeOptions,
}

/// The judge stage of a run: one judge, or a panel (see the module text).
pub struct JudgePanel {
    members: Vec<(String, JudgeStage)>,
    mode: Option<PanelMode>,
    /// The metrics judged, as the first member has them.
    metrics: Vec<JudgeMetric>,
    /// Per member: metric values it was asked for (the first judge, and
    /// every juror: all requested; a later judge: those escalated to it).
    asked: Vec<u64>,
    /// Per member: metric values its answer decided.
    decided: Vec<u64>,
    /// Jury verdicts that tied.
    ties: u64,
    /// Per verdict metric: Fleiss' kappa tallies over the rows every juror
    /// answered.
    fleiss: Vec<refscore_stats::agreement::FleissTally>,
    rows_judged: u64,
    rows_failed: u64,
    /// Rows whose final value the judges failed for good, and the first
    /// one's error ([`crate::JudgeReport::rows_failed_for_good`]).
    rows_failed_for_good: u64,
    first_failure_for_good: Option<String>,
    /// Final values a judge answered usably.
    values_answered: u64,
    /// The judges answer verdicts only and the panel asks each failing
    /// value's reason once, of the judge that decided it
    /// (`--judge-reasons failures`).
    asks_reasons: bool,
}

/// The per-judge and agreement columns a panel adds after the judge's.
pub(crate) fn panel_fields(
    metrics: &[JudgeMetric],
    names: &[String],
    mode: Option<PanelMode>,
) -> Vec<Field> {
    let mut out = Vec::new();
    if mode.is_none() {
        return out;
    }
    for jm in metrics {
        let Some(r) = jm.rubric() else { continue };
        let name = jm.name();
        if mode == Some(PanelMode::Jury) {
            out.push(Field::new(
                format!("{name}_agreement"),
                DataType::Float32,
                true,
            ));
        }
        for judge in names {
            match r.answer {
                Answer::Verdict => {
                    out.push(Field::new(
                        format!("{name}__{judge}"),
                        DataType::Boolean,
                        true,
                    ));
                    out.push(Field::new(
                        format!("{name}__{judge}_p"),
                        DataType::Float32,
                        true,
                    ));
                }
                Answer::Score { .. } => {
                    out.push(Field::new(
                        format!("{name}__{judge}"),
                        DataType::Float32,
                        true,
                    ));
                }
            }
        }
    }
    out
}

/// A decided value read as a number on 0..1 (a verdict's P(true), else 0
/// or 1; a score normalised), for the escalation band and the jury's mean.
fn level(jm: &JudgeMetric, o: &Outcome) -> Option<f32> {
    match (o, jm.rubric().map(|r| r.answer)) {
        (Outcome::Verdict { p_true, .. }, _) => *p_true,
        (
            Outcome::Score {
                score, expected, ..
            },
            Some(Answer::Score { min, max }),
        ) => Some(normalised(*score, *expected, (min, max))),
        _ => None,
    }
}

impl JudgePanel {
    /// One stage per member; `mode` is needed with more than one.
    pub fn new(members: Vec<PanelMember>, mode: Option<PanelMode>) -> Result<JudgePanel, Error> {
        if members.len() > 1 && mode.is_none() {
            return Err(Error::config(
                "several judges need --judge-panel escalate or jury",
            ));
        }
        let mode = if members.len() > 1 { mode } else { None };
        let mut stages = members
            .into_iter()
            .map(|m| Ok((m.name, JudgeStage::new(m.options)?)))
            .collect::<Result<Vec<_>, Error>>()?;
        let mut asks_reasons = false;
        if mode.is_some() {
            for (_, stage) in &mut stages {
                asks_reasons |= stage.defer_reasons();
            }
        }
        let metrics = stages[0].1.metrics().to_vec();
        let verdicts = metrics.len();
        let k = stages.len();
        Ok(JudgePanel {
            members: stages,
            mode,
            metrics,
            asked: vec![0; k],
            decided: vec![0; k],
            ties: 0,
            fleiss: (0..verdicts)
                .map(|_| refscore_stats::agreement::FleissTally::new(k as u64))
                .collect(),
            rows_judged: 0,
            rows_failed: 0,
            rows_failed_for_good: 0,
            first_failure_for_good: None,
            values_answered: 0,
            asks_reasons,
        })
    }

    /// The judges' names, in order.
    pub fn names(&self) -> Vec<String> {
        self.members.iter().map(|(n, _)| n.clone()).collect()
    }

    /// The only judge, where there is one (its options, its report).
    pub fn single(&self) -> Option<&JudgeStage> {
        (self.members.len() == 1).then(|| &self.members[0].1)
    }

    /// A member's folder under `dir`: `dir` itself for a single judge (so
    /// runs started before panels existed resume), else `dir/<name>`.
    fn folder(&self, dir: &std::path::Path, k: usize) -> PathBuf {
        if self.members.len() == 1 {
            dir.to_path_buf()
        } else {
            dir.join(&self.members[k].0)
        }
    }

    /// Sets up every judge with its folder under `dir`.
    fn in_folders(
        &mut self,
        dir: &std::path::Path,
        set_up: impl Fn(&mut JudgeStage, PathBuf) -> Result<(), Error>,
    ) -> Result<(), Error> {
        for k in 0..self.members.len() {
            let d = self.folder(dir, k);
            set_up(&mut self.members[k].1, d)?;
        }
        Ok(())
    }

    /// Each judge's paid-answers journal, under `dir`.
    pub fn set_journal_dir(&mut self, dir: PathBuf) -> Result<(), Error> {
        self.in_folders(&dir, |stage, d| stage.set_journal_dir(d))
    }

    /// Each judge's batches, under `dir`.
    pub fn use_batches(&mut self, dir: PathBuf, mode: &BatchMode) -> Result<(), Error> {
        self.in_folders(&dir, |stage, d| stage.use_batches(d, mode))
    }

    /// What the judges say, in order, each line naming its judge on a
    /// panel (each judge numbers its own batches); `None` when none says
    /// anything.
    fn gather(
        &mut self,
        mut say: impl FnMut(&str, &mut JudgeStage) -> Result<Option<String>, Error>,
    ) -> Result<Option<String>, Error> {
        let panel = self.members.len() > 1;
        let mut out = Vec::new();
        for (name, stage) in &mut self.members {
            if let Some(m) = say(name, stage)? {
                out.push(if panel {
                    format!("judge {name}: {m}")
                } else {
                    m
                });
            }
        }
        Ok((!out.is_empty()).then(|| out.join("; ")))
    }

    /// Collects every judge's batches; `Some` while any still run.
    pub fn batches_still_out(
        &mut self,
        wait: Option<std::time::Duration>,
        progress: &mut dyn FnMut(&str),
    ) -> Result<Option<String>, Error> {
        self.gather(|name, stage| {
            let mut tell = |line: &str| progress(&format!("{name}: {line}"));
            stage.batches_still_out(wait, &mut tell)
        })
    }

    /// Submits what each judge set aside.
    pub fn send_out_batches(&mut self) -> Result<Option<String>, Error> {
        self.gather(|_, stage| stage.send_out_batches())
    }

    /// The judges' totals: calls, tokens and seconds summed; rows requested
    /// and decided by rule or band as the first judge counted them; rows
    /// judged and failed as the panel counted them.
    pub fn report(&self) -> JudgeReport {
        let mut total = self.members[0].1.report();
        if self.mode.is_none() {
            return total;
        }
        for (_, stage) in &self.members[1..] {
            let r = stage.report();
            total.cached += r.cached;
            total.calls += r.calls;
            total.retries += r.retries;
            total.parse_failures += r.parse_failures;
            total.replayed += r.replayed;
            total.prompt_tokens += r.prompt_tokens;
            total.prompt_tokens_cached += r.prompt_tokens_cached;
            total.completion_tokens += r.completion_tokens;
            total.call_seconds += r.call_seconds;
            total.reasons_asked += r.reasons_asked;
            total.replies_with_logprobs += r.replies_with_logprobs;
            total.replies_without_logprobs += r.replies_without_logprobs;
            total.fact_checks += r.fact_checks;
            total.facts_from_sentences += r.facts_from_sentences;
            total.fact_checks_nli += r.fact_checks_nli;
            total.fact_checks_nli_truncated += r.fact_checks_nli_truncated;
            crate::protocol::mode::add_counts(&mut total.modes, &r.modes);
        }
        total.rows_judged = self.rows_judged;
        total.rows_failed = self.rows_failed;
        total.rows_failed_for_good = self.rows_failed_for_good;
        total.first_failure_for_good = self.first_failure_for_good.clone();
        total.values_answered = self.values_answered;
        total
    }

    /// The panel's part of the summary: mode, each judge's accounting, the
    /// values each was asked and decided, jury ties and Fleiss' kappa.
    fn panel_summary(&self) -> Value {
        let first = self.members[0].1.report();
        let judges: Vec<Value> = self
            .members
            .iter()
            .enumerate()
            .map(|(k, (name, stage))| {
                let o = stage.options();
                let report = match self.mode {
                    Some(PanelMode::Jury) => jury::with_shared_counts(stage.report(), &first),
                    _ => stage.report(),
                };
                json!({
                    "name": name,
                    "url": o.endpoint.display_url(),
                    "model": o.endpoint.model,
                    "values_asked": self.asked[k],
                    "values_decided": self.decided[k],
                    "report": report_json(&report),
                })
            })
            .collect();
        let mut v = json!({"mode": self.mode.map(|m| m.name()), "judges": judges});
        match self.mode {
            // As the flag takes it (f32 digits, not their f64 expansion).
            Some(PanelMode::Escalate { band }) => {
                v["escalate_band"] = json!(format!("{}..{}", band.0, band.1))
            }
            Some(PanelMode::Jury) => {
                v["ties"] = json!(self.ties);
                let kappas: serde_json::Map<String, Value> = self
                    .metrics
                    .iter()
                    .zip(&self.fleiss)
                    .filter(|(jm, _)| {
                        matches!(jm.rubric().map(|r| r.answer), Some(Answer::Verdict))
                    })
                    .map(|(jm, f)| {
                        (
                            jm.name().to_string(),
                            json!({"rows": f.rows(), "fleiss_kappa": f.kappa()}),
                        )
                    })
                    .collect();
                v["agreement"] = Value::Object(kappas);
            }
            None => {}
        }
        v
    }

    /// Metric values the rows ask for.
    fn requested_values(&self, requested: &[Wanted]) -> u64 {
        requested
            .iter()
            .map(|w| self.metrics.iter().filter(|jm| w.asks(jm.metric())).count() as u64)
            .sum()
    }

    /// Per row, the metrics `pick(m, i)` chooses (m indexing the panel's
    /// metrics, i the row): what a later judge of the panel is asked.
    fn wanted(&self, rows: usize, pick: impl Fn(usize, usize) -> bool) -> Vec<Wanted> {
        (0..rows)
            .map(|i| {
                let list = self.metrics.iter().enumerate();
                let list = list.filter(|(m, _)| pick(*m, i));
                Wanted::These(list.map(|(_, jm)| Arc::clone(jm.metric())).collect())
            })
            .collect()
    }

    /// Judges one batch: the first judge walks every decision step, the
    /// shared ones (rules, tiers) for the whole panel; the panel's mode
    /// then asks the other judges about the values left open and combines
    /// their answers.
    fn judge(
        &mut self,
        batch: &RowBatch,
        requested: &[Wanted],
        values: &ChainValues,
    ) -> Result<Judged, Error> {
        let first = self.members[0].1.decide(batch, requested, values)?;
        // Which member decided each value (None: a shared step, or failed).
        let decider: Vec<Vec<Option<usize>>> = first
            .verdicts
            .iter()
            .map(|rows| {
                rows.iter()
                    .map(|v| matches!(v, Some((_, Source::Judge | Source::Cache))).then_some(0))
                    .collect()
            })
            .collect();
        match self.mode {
            None => Ok((first, Vec::new(), decider)),
            Some(PanelMode::Escalate { band }) => {
                self.escalate(batch, requested, first, decider, band)
            }
            Some(PanelMode::Jury) => self.jury(batch, requested, first, decider),
        }
    }

    /// Judges one batch: every member's decisions, combined.
    /// The panel's columns: the combined judge columns with each value's
    /// source naming the judge that decided it, then the agreement and
    /// per-judge columns.
    fn columns(
        &mut self,
        n: usize,
        fin: Decided,
        each: &[Decided],
        decider: &[Vec<Option<usize>>],
    ) -> ScoreColumns {
        let versions = self.members[0].1.template_versions();
        let mut out = columns::build(
            &self.metrics,
            &versions,
            n,
            &fin.verdicts,
            &fin.usage,
            fin.errors,
        );
        let Some(mode) = self.mode else {
            return out;
        };
        let judges = self.names();
        for (m, jm) in self.metrics.iter().enumerate() {
            let Some(source_name) = jm.metric().source_column.as_deref() else {
                continue;
            };
            let names: Vec<Option<String>> = (0..n)
                .map(|i| {
                    let (_, s) = fin.verdicts[m][i].as_ref()?;
                    Some(match (mode, decider[m][i], s) {
                        // A judge's cached answer cost no call: named as a
                        // single judge's is, so accounting never counts it.
                        (_, Some(_), Source::Cache) => s.name().to_string(),
                        (_, Some(k), _) => {
                            self.decided[k] += 1;
                            format!("{}{}", source::PANEL_JUDGE_PREFIX, judges[k])
                        }
                        (PanelMode::Jury, None, Source::Judge | Source::Cache) => {
                            source::JURY.into()
                        }
                        (_, _, s) => s.name().to_string(),
                    })
                })
                .collect();
            if let Some(at) = out.fields.iter().position(|f| f.name() == source_name) {
                out.arrays[at] = Arc::new(StringArray::from(names)) as ArrayRef;
            }
        }
        let fields = panel_fields(&self.metrics, &judges, self.mode);
        let mut fields = fields.into_iter();
        let mut push =
            |out: &mut ScoreColumns, a: ArrayRef| out.push(fields.next().expect("panel field"), a);
        for (m, jm) in self.metrics.iter().enumerate() {
            let Some(r) = jm.rubric() else { continue };
            if mode == PanelMode::Jury {
                push(&mut out, Arc::new(jury::agreement(jm, m, n, each)));
            }
            for d in each {
                let get = |i: usize| d.verdicts[m][i].as_ref().map(|(o, _)| o);
                match r.answer {
                    Answer::Verdict => {
                        let v: BooleanArray = (0..n)
                            .map(|i| match get(i) {
                                Some(Outcome::Verdict { verdict, .. }) => Some(*verdict),
                                _ => None,
                            })
                            .collect();
                        let p: Float32Array = (0..n)
                            .map(|i| match get(i) {
                                Some(Outcome::Verdict { p_true, .. }) => *p_true,
                                _ => None,
                            })
                            .collect();
                        push(&mut out, Arc::new(v));
                        push(&mut out, Arc::new(p));
                    }
                    Answer::Score { .. } => {
                        let v: Float32Array =
                            (0..n).map(|i| get(i).and_then(|o| level(jm, o))).collect();
                        push(&mut out, Arc::new(v));
                    }
                }
            }
        }
        out
    }
}

impl JudgePanel {
    /// Asks each failing value's reason once, of the judge whose answer
    /// decided it: in escalation the judge that answered last, in a jury the
    /// first juror whose own answer fails too. A reason that cannot be had
    /// fails the value as the single judge's follow-up does (a resumed run
    /// asks again; the verdicts are replayed from the journals).
    fn ask_reasons(
        &mut self,
        batch: &RowBatch,
        fin: &mut Decided,
        each: &[Decided],
        decider: &[Vec<Option<usize>>],
    ) -> Result<(), Error> {
        let mut wanted: Vec<Vec<(usize, usize)>> = vec![Vec::new(); self.members.len()];
        for (m, rows) in fin.verdicts.iter().enumerate() {
            for (i, value) in rows.iter().enumerate() {
                let Some((o, Source::Judge | Source::Cache)) = value else {
                    continue;
                };
                let fails = |k: usize, o: &Outcome| self.members[k].1.value_fails(m, o);
                if !fails(0, o) {
                    continue;
                }
                let by = decider[m][i].or_else(|| {
                    (0..each.len()).find(
                        |&k| matches!(&each[k].verdicts[m][i], Some((own, _)) if fails(k, own)),
                    )
                });
                if let Some(k) = by {
                    wanted[k].push((i, m));
                }
            }
        }
        for (k, list) in wanted.iter().enumerate() {
            if list.is_empty() {
                continue;
            }
            let reasons = self.members[k].1.reasons_for(batch, list)?;
            for (&(i, m), got) in list.iter().zip(reasons) {
                match got {
                    Ok((reason, usage)) => {
                        add_usage(&mut fin.usage[i], usage);
                        // A reason found in the cache cost no call.
                        fin.judged[i] |= usage != crate::Usage::default();
                        if let Some((
                            Outcome::Verdict { reason: slot, .. }
                            | Outcome::Score { reason: slot, .. },
                            _,
                        )) = &mut fin.verdicts[m][i]
                        {
                            *slot = reason;
                        }
                    }
                    Err(e) => {
                        fin.verdicts[m][i] = None;
                        fin.transient[i] |= e.transient;
                        let why = format!(
                            "{}: judge {} gave no reason: {}",
                            self.metrics[m].name(),
                            self.members[k].0,
                            e.message
                        );
                        note(&mut fin.errors[i], why);
                    }
                }
            }
        }
        Ok(())
    }
}

/// A batch judged by a panel: the combined decisions, each member's, and
/// which member decided each value (`[metric][row]`; None: a rule, the
/// band, the jury, or a failure).
type Judged = (Decided, Vec<Decided>, Vec<Vec<Option<usize>>>);

/// Adds `why` to a row's error (a row may fail for several metrics).
fn note(slot: &mut Option<String>, why: String) {
    match slot {
        Some(e) => {
            e.push_str("; ");
            e.push_str(&why);
        }
        None => *slot = Some(why),
    }
}

impl Stage for JudgePanel {
    fn fields(&self) -> Vec<Field> {
        let mut f = self.members[0].1.fields();
        f.extend(panel_fields(&self.metrics, &self.names(), self.mode));
        f
    }

    fn score(&mut self, batch: &RowBatch, earlier: &ScoreColumns) -> Result<ScoreColumns, Error> {
        if self.mode.is_none() {
            return self.members[0].1.score(batch, earlier);
        }
        let first = &self.members[0].1;
        let requested = where_column::requested_rows(batch, first.where_column(), first.known())?;
        let values = first.tier_values(earlier);
        let (mut fin, each, decider) = self.judge(batch, &requested, &values)?;
        if self.asks_reasons {
            self.ask_reasons(batch, &mut fin, &each, &decider)?;
        }
        let (failed, retryable, reason) = fin.failures();
        self.rows_failed += failed;
        let (for_good, first) = fin.failures_for_good();
        self.rows_failed_for_good += for_good;
        self.values_answered += fin.values_answered();
        if self.first_failure_for_good.is_none() {
            self.first_failure_for_good = first;
        }
        self.rows_judged += fin.judged.iter().filter(|j| **j).count() as u64;
        let mut out = self.columns(batch.len(), fin, &each, &decider);
        out.retryable_rows = retryable;
        out.retry_reason = reason;
        Ok(out)
    }

    fn summary(&self) -> Option<(&'static str, Value)> {
        let (key, mut v) = match self.single() {
            Some(stage) => return stage.summary(),
            None => self.members[0].1.summary_of(&self.report())?,
        };
        v["panel"] = self.panel_summary();
        Some((key, v))
    }
}
