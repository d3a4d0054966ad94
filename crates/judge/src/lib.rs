//! LLM-judge metrics (docs/metrics.md#judge-metrics): Meaning Match, the
//! 0–10 similarity rubric, the fact ratio and the user's own rubrics, asked of any OpenAI-compatible
//! chat-completions endpoint — only for rows that request them and that no
//! cheaper rule already decides.
//!
//! Order of decision per row and metric: not requested → null; empty output
//! → false/0 (`rule`); the same answer up to case, whitespace, articles and
//! sentence-final punctuation → Meaning Match true (`rule`); the first tier
//! of the chain that is sure (a score outside a `--judge-band`) → Meaning
//! Match by its side (`band:SCORE`, [`tiers`]); an answer
//! in the paid-answers journal (`judge`, with its original usage); an answer
//! in the on-disk cache (`cache`); else a call (`judge`). Each is a step of
//! `decide/` (`decide::STEPS`).
//! A call that fails after its retries leaves the metric null and the row's
//! `error` says why; the run goes on.
//!
//! Answers put the verdict first and are read with its token probabilities
//! (`probs`); an answer is cut after the verdict unless [`Reasons`] wants
//! its reason.

pub mod batch;
mod cache;
mod client;
mod columns;
mod decide;
mod definition;
mod endpoint;
mod fingerprint;
mod keyed_log;
mod limiter;
mod local_facts;
mod metric;
pub mod options;
mod panel;
mod parse;
mod plan;
mod probs;
mod prompts;
mod protocol;
mod redact;
mod run_end;
mod stage;
mod summary_lines;
pub mod tiers;
mod where_column;
#[cfg(test)]
use refscore_test_servers::openai as test_server;
mod transport;

use std::path::PathBuf;

use refscore_core::metric::MetricSet;
use serde_json::{json, Value};

pub use client::probe;
pub use endpoint::{check_url, Endpoint, MAX_TIMEOUT, MIN_TIMEOUT};
pub use local_facts::{sentences, FactSource, NliFactCheck, DEFAULT_FACT_CHECK_THRESHOLD};
pub use metric::JudgeMetrics;
pub use options::JudgeArgs;
pub use panel::{escalation_warnings, JudgePanel, PanelMember, PanelMode, DEFAULT_ESCALATE_BAND};
pub use plan::{JudgeParts, JudgePlan};
pub use protocol::{Api, Mode, ModeArgs, ModeContext};
pub use run_end::{lacking_for_now, FailureLimit};
pub use stage::{JudgeStage, Prompt};
pub use summary_lines::summary_lines;
pub use tiers::TierChain;
pub use transport::{Usage, MAX_RETRY_AFTER};
pub use where_column::check_requests;

/// The versions (content hashes) of every prompt template, so a run's
/// fingerprint changes when a prompt does and a resumed run never mixes
/// answers to two versions of a question.
pub fn template_versions() -> Vec<String> {
    metric::builtin_versions()
}

/// When the judge is asked for the reason of its verdict or score
/// (`--judge-reasons`). Generating a reason costs several times the
/// verdict, so by default only rows that fail get one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Reasons {
    /// Every answer runs on from the verdict to its reason.
    Always,
    /// Answers are cut after the verdict; where the verdict is false or the
    /// score below its threshold, the question is asked again in full.
    #[default]
    Failures,
    /// Answers are cut after the verdict, never a reason.
    Never,
}

impl Reasons {
    /// The name `--judge-reasons` takes.
    pub fn name(self) -> &'static str {
        match self {
            Reasons::Always => "always",
            Reasons::Failures => "failures",
            Reasons::Never => "never",
        }
    }

    /// Parses a name; the error lists the choices.
    pub fn parse(name: &str) -> Result<Reasons, String> {
        match name {
            "always" => Ok(Reasons::Always),
            "failures" => Ok(Reasons::Failures),
            "never" => Ok(Reasons::Never),
            other => Err(format!("'{other}': expected always, failures or never")),
        }
    }
}

/// `--judge-threshold`'s default: Meaning Match is true where the judge
/// gives "true" at least even odds.
pub const DEFAULT_THRESHOLD: f32 = 0.5;

/// Settings of the judge stage.
#[derive(Debug, Clone)]
pub struct JudgeOptions {
    /// The endpoint.
    pub endpoint: Endpoint,
    /// The run's metrics (those of the judge group are this stage's).
    pub metrics: MetricSet,
    /// The `--judge-band METRIC:LO..HI` tiers, in order: a row that a
    /// tier's score puts outside its band is decided there, for Meaning
    /// Match (and verdicts defined with band); the rest go to the judge.
    pub tiers: TierChain,
    /// `--facts`: where the fact ratio's facts come from.
    pub facts: FactSource,
    /// `--fact-check nli`: the local model that checks the fact ratio's
    /// facts instead of the judge.
    pub fact_check: Option<NliFactCheck>,
    /// `--judge-cache DIR`.
    pub cache_dir: Option<PathBuf>,
    /// `--judge-reasons`.
    pub reasons: Reasons,
    /// `--judge-threshold`: Meaning Match is true where P(true) is at least
    /// this (where the server gives probabilities).
    pub threshold: f32,
    /// The run's pass thresholds (`--threshold` over the defaults): with
    /// [`Reasons::Failures`] a score below its metric's gets a reason.
    pub thresholds: Vec<(String, f64)>,
    /// The judge metrics the run knows (built-in and defined); those of
    /// `metrics` are this stage's.
    pub judge_metrics: JudgeMetrics,
    /// `--judge-where`: the column that says which rows ask for which
    /// metrics (named in messages; its values arrive as the batch's row
    /// filter).
    pub where_column: Option<String>,
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
    /// Metric values decided by a tier of the chain (all tiers).
    pub decided_by_band: u64,
    /// What each tier decided, in the chain's order.
    pub tiers: Vec<tiers::TierCount>,
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
    /// Rows where at least one requested judge metric was left null because
    /// the judge failed (the run finished, but incompletely).
    pub rows_failed: u64,
    /// Of them, rows whose judge failed for good (it rejected the request or
    /// answered unusably; not the endpoint failing, which a later try may
    /// fix, nor a tied jury), and the first such row's error: more of them
    /// than `--max-judge-failures` accepts, or any where no value came back
    /// usable ([`JudgeReport::values_answered`]), fail the run.
    #[serde(skip)]
    pub rows_failed_for_good: u64,
    #[serde(skip)]
    pub first_failure_for_good: Option<String>,
    /// Metric values a judge answered usably (now, from the cache or the
    /// journal, or through the local NLI model's fact checks): none with
    /// rows failed for good is a judge that rejected every request.
    #[serde(skip)]
    pub values_answered: u64,
    /// Answers replayed from the paid-answers journal (counted as judge
    /// answers, their tokens included in the totals below).
    pub replayed: u64,
    /// Prompt tokens reported by the server.
    pub prompt_tokens: u64,
    /// Of those, the tokens the server took from its prompt cache, where it
    /// says (0 when it does not).
    pub prompt_tokens_cached: u64,
    /// Completion tokens reported by the server.
    pub completion_tokens: u64,
    /// Summed call time over all workers.
    pub call_seconds: f64,
    /// Output mode the server accepted.
    pub response_format: String,
    /// `--judge-reasons`.
    pub reasons: String,
    /// Questions asked again in full for a reason (with `failures`).
    pub reasons_asked: u64,
    /// Replies that carried token probabilities, and replies to a request
    /// for them that did not: where the latter is not 0, those rows'
    /// `meaning_match_p` is null and their `similarity` is the sampled score.
    pub replies_with_logprobs: u64,
    pub replies_without_logprobs: u64,
    /// Fact-ratio yes/no checks made (one per reference and output fact).
    pub fact_checks: u64,
    /// Answers whose facts were their sentences (`--facts sentences`): the
    /// extraction calls not made.
    pub facts_from_sentences: u64,
    /// Fact checks the local NLI model decided (`--fact-check nli`): the
    /// judge questions not asked.
    pub fact_checks_nli: u64,
    /// Of them, checks the model's token limit cut (a long answer as the
    /// premise): a fact stated past the cut counts as unsupported.
    pub fact_checks_nli_truncated: u64,
    /// Template hashes in use.
    pub templates: Vec<String>,
    /// `--judge-batch`: how the answers came.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub batch: Option<BatchReport>,
    /// The judge's protocol, where it is not OpenAI's (`--judge-api`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub api: Option<String>,
    /// Where the protocol offers no token probabilities at all: what that
    /// means for the verdicts and scores (none asked, so none counted in
    /// `replies_without_logprobs`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token_probabilities: Option<String>,
    /// The judge mode's entry under its name (`flex`: its counts), where
    /// the run has one.
    #[serde(flatten)]
    pub modes: serde_json::Map<String, Value>,
}

/// Judge batches over the run, for the summary.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct BatchReport {
    /// `--judge-batch` as given.
    pub mode: String,
    /// Batches created (request files handed over), over every pass.
    pub batches: u64,
    /// Requests they held.
    pub requests: u64,
}

/// A JSON value describing the report, for the summary.
pub fn report_json(r: &JudgeReport) -> Value {
    let mut v = json!(r);
    // Each tier's share of the rows asked, as the printed line gives it.
    v["tiers"] = json!(r
        .tiers
        .iter()
        .cloned()
        .map(|t| t.with_share(r.rows_requested))
        .collect::<Vec<_>>());
    v
}
