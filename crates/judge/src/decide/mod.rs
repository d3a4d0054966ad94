//! Deciding one judge metric for one row: the decision model (what a
//! value is and what settled it) and the ordered steps that settle it.
//!
//! For each value a row asks for, the stage walks [`STEPS`]: each step
//! settles the value, takes it on (queues work for the judge, or fails it)
//! or passes it on to the next. The cheap steps come first, the judge's
//! call last; a new way of deciding is one file here implementing
//! [`DecisionStep`] and its place in [`STEPS`].

mod ask;
mod decided;
mod facts;
mod outcome;
mod prompt;
mod row;
pub(crate) mod rules;
mod stored;
mod tier;

use std::collections::HashSet;

use crate::stage::{FactRow, Work};
use crate::JudgeStage;

pub(crate) use decided::{add_usage, fail, Decided};
pub(crate) use outcome::{Decisions, Outcome, Source};
pub(crate) use row::{Answers, Row};

/// What one step makes of a value.
pub(crate) enum Step {
    /// Settled now: the value and what settled it.
    Settled(Outcome, Source),
    /// Taken on: queued for the judge (settled when the batch's work runs)
    /// or failed (the row's error says why). No later step looks.
    Taken,
    /// Not this step's to decide: the next step looks.
    Pass,
}

/// One way of deciding a judge metric's value for one row: the unit the
/// stage's decision order is made of, so that a new way of deciding is an
/// entry of [`STEPS`] rather than a branch inside the stage.
pub(crate) trait DecisionStep {
    /// Settles `row`'s value, takes it on or passes it on. The step counts
    /// what it settles in the stage's report, and what it queues or fails
    /// goes into `work`.
    fn decide(&self, stage: &mut JudgeStage, row: &mut Row<'_>, work: &mut Pending) -> Step;
}

/// The steps, in the order they are tried: the rules, the chain of tiers,
/// the fact ratio's own path, the rubric's question (a row whose question
/// cannot be rendered fails there), the journal and cache, and last the
/// call to the judge.
pub(crate) const STEPS: &[&dyn DecisionStep] = &[
    &rules::ByRule,
    &tier::ByTier,
    &facts::FactRatio,
    &prompt::Render,
    &stored::Stored,
    &ask::AskJudge,
];

/// How many of [`STEPS`] come before a judge is asked (the rules and the
/// tiers): they decide alike for every judge of a panel, so they run once,
/// at its first judge.
const SHARED: usize = 2;

/// The steps that ask a judge (the fact ratio's path, the question, its
/// stored answers, the call): what a panel's later judge walks for the
/// values passed on to it (escalated to it, or left open for a jury), the
/// shared steps having run at the first.
pub(crate) fn asking() -> &'static [&'static dyn DecisionStep] {
    &STEPS[SHARED..]
}

/// Walks `steps` for one value until a step settles or takes it.
pub(crate) fn walk(
    steps: &[&dyn DecisionStep],
    stage: &mut JudgeStage,
    row: &mut Row<'_>,
    work: &mut Pending,
) {
    for step in steps {
        match step.decide(stage, row, work) {
            Step::Pass => {}
            Step::Settled(outcome, source) => {
                work.decided.verdicts[row.m][row.i] = Some((outcome, source));
                return;
            }
            Step::Taken => return,
        }
    }
}

/// A batch's decisions so far and the work its steps queued for the judge,
/// run once every value has been walked (so calls run concurrently).
pub(crate) struct Pending {
    /// What the steps settled (and the work, once run, settles).
    pub(crate) decided: Decided,
    /// The rubrics to ask and the answers whose facts to extract.
    pub(crate) jobs: Vec<Work>,
    /// The fact-ratio values waiting for their facts.
    pub(crate) fact_rows: Vec<FactRow>,
    /// The texts whose facts an extraction job already asks for.
    pub(crate) extracting: HashSet<String>,
}

impl Pending {
    /// Nothing decided or queued yet for `rows` rows of `metrics` metrics.
    pub(crate) fn new(metrics: usize, rows: usize) -> Pending {
        Pending {
            decided: Decided::new(metrics, rows),
            jobs: Vec::new(),
            fact_rows: Vec::new(),
            extracting: HashSet::new(),
        }
    }
}
