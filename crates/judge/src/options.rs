//! The judge's options: one clap group ([`JudgeArgs`], flattened into
//! `refscore score`, so its flags, the config file's keys and Python's
//! keywords come from these definitions), their checks (a bad flag is a
//! usage error, 64; a bad config line a configuration error, 78: the
//! [`Given`] the CLI passes knows which), and the resolved settings
//! ([`JudgeSettings`]), from which each judge's endpoint and stage options
//! are made.

use std::path::PathBuf;
use std::time::Duration;

use refscore_core::metric::{self, MetricSet};
use refscore_core::{Error, Given};

use crate::batch::BatchMode;
use crate::{Api, Endpoint, JudgeMetrics, JudgeOptions, ModeArgs};

/// The judge's options, as `refscore score` takes them.
#[derive(Debug, Default, clap::Args)]
pub struct JudgeArgs {
    /// Base URL of the judge endpoint, e.g. http://127.0.0.1:8080/v1 (vLLM, llama.cpp,
    /// Ollama, OpenAI) or https://api.anthropic.com/v1. Judge metrics run only with it.
    /// Repeat it (with --judge-model in the same order) for a panel of judges, see
    /// --judge-panel
    #[arg(long, value_name = "URL")]
    pub judge_url: Vec<String>,

    /// The judge's protocol: openai (chat completions; nearly every server) or anthropic
    /// (the Messages API: no token probabilities, so the sampled answer decides) [default:
    /// anthropic for a host under anthropic.com, else openai]
    #[arg(long, value_name = "API")]
    pub judge_api: Option<String>,

    /// Model name sent to the judge endpoint; one per --judge-url in a panel (the name
    /// of its columns and folders is the model's, or judge1, judge2, ... where two are
    /// equal) [default: default]
    #[arg(long, value_name = "NAME")]
    pub judge_model: Vec<String>,

    /// How a panel of several judges (--judge-url repeated) decides: `escalate` asks the
    /// next judge only where the one before was uncertain (P(true), or the score on 0..1,
    /// inside --judge-escalate-band), so a small judge answers most rows; `jury` asks them
    /// all and takes the majority (verdicts; a tie fails the value) or the mean (scores).
    /// Each judge's verdicts land in <metric>__<judge> columns, its source as judge:NAME
    #[arg(long, value_name = "escalate|jury")]
    pub judge_panel: Option<String>,

    /// With --judge-panel escalate: the uncertainty band on 0..1 [default: 0.2..0.8]
    #[arg(long, value_name = "LO..HI")]
    pub judge_escalate_band: Option<String>,

    /// Environment variable holding the judge API key (sent as a bearer token, or as
    /// x-api-key to Anthropic; never printed or written) [default: OPENAI_API_KEY]
    #[arg(long, value_name = "VAR")]
    pub judge_api_key_env: Option<String>,

    /// Seconds before a judge request times out (then it is retried), above 0 and at most
    /// 86400 [default: 60]
    #[arg(long, value_name = "SECS")]
    pub judge_timeout: Option<f64>,

    /// Retries per judge request on timeouts, connection errors, 429 and 5xx [default: 4]
    #[arg(long, value_name = "N")]
    pub judge_retries: Option<u32>,

    /// Judge requests in flight at once [default: 4]
    #[arg(long, value_name = "N")]
    pub judge_concurrency: Option<usize>,

    /// Limit judge requests per minute (at least 1)
    #[arg(long, value_name = "N")]
    pub judge_rpm: Option<u32>,

    /// Limit judge tokens (prompt + completion) per minute (at least 1)
    #[arg(long, value_name = "N")]
    pub judge_tpm: Option<u32>,

    /// Column saying per row which judge metrics to run: boolean (all selected judge
    /// metrics), or metric names as a comma-separated string or a list [default: every row]
    #[arg(long, value_name = "COL")]
    pub judge_where: Option<String>,

    /// TOML file of judge metrics you define, as [judge.metric.NAME] tables (answer =
    /// "verdict" or "score", scale = [1, 5], threshold, instructions, prompt with {{ input }},
    /// {{ reference }}, {{ output }} and {{ row.COLUMN }}, band); the config file may hold the
    /// same tables. Defined metrics join the judge group. See docs/metrics.md and `refscore
    /// judge-metrics` (repeatable)
    #[arg(long, value_name = "FILE")]
    pub judge_metrics: Vec<PathBuf>,

    /// Cascade: send Meaning Match (and defined verdicts with band = true) to the judge only
    /// for rows whose METRIC (a lexical, embedding or cross-encoder score computed in the same
    /// run: cosine, bertscore_f1, token_f1, nli_equivalence, ...) lies in LO..HI; decide the
    /// others by the band's side (above: true, below: false; source = band:METRIC).
    /// Repeatable: a chain of tiers, tried in the order given; a row goes to the judge only
    /// when no tier decides it (a null score passes it on). `refscore calibrate-band` fits
    /// one band, or a chain, from human labels; fitted with --confidence, the band carries
    /// its guarantee after the range (METRIC:LO..HI,max_error=E,confidence=C,sides=S), and
    /// with --gold the run checks it against the labelled rows each side decides
    #[arg(long, value_name = "METRIC:LO..HI")]
    pub judge_band: Vec<String>,

    /// Where fact_similarity's facts come from: `judge` (the judge extracts each answer's
    /// atomic facts, one call per distinct answer) or `sentences` (each answer's sentences,
    /// by Unicode sentence boundaries, are its facts: no call) [default: judge]
    #[arg(long, value_name = "SOURCE")]
    pub facts: Option<String>,

    /// How fact_similarity checks each fact: `judge` (one yes/no question per fact) or
    /// `nli` (the --cross-model NLI model: the fact holds where P(entailment | the other
    /// answer, the fact) reaches --fact-check-threshold; no call; with a checker
    /// --cross-recipe, factcg|minicheck|hhem, the recipe's support over the other answer's
    /// chunks). With --facts sentences, fact_similarity needs no judge at all [default: judge]
    #[arg(long, value_name = "CHECK")]
    pub fact_check: Option<String>,

    /// With --fact-check nli: the P(entailment), or a checker recipe's support, at which a
    /// fact holds [default: 0.5]
    #[arg(long, value_name = "P")]
    pub fact_check_threshold: Option<f64>,

    /// Folder for the persistent judge cache: a re-run never pays for a call twice
    #[arg(long, value_name = "DIR")]
    pub judge_cache: Option<PathBuf>,

    /// Send what the judge is asked as batch jobs, at the providers' batch price, instead
    /// of calls: `api` uses the OpenAI Batch API at --judge-url (upload, create, poll,
    /// download); `dir:PATH` writes requests-NNN.jsonl to PATH for another machine to
    /// answer into results-NNN.jsonl there (e.g. `vllm run-batch -i requests-001.jsonl -o
    /// results-001.jsonl`; no --judge-url needed). The run scores everything else,
    /// submits, and exits 75; run the same command with --resume to collect (75 again
    /// while batches run). Answers needing an answer first (reasons for failures, the
    /// fact ratio's checks) take one more round each
    #[arg(long, value_name = "api|dir:PATH")]
    pub judge_batch: Option<String>,

    /// With --judge-batch: wait in the foreground up to this long (e.g. 90m, 2h 30m) for
    /// the batches, with a progress line, collecting and submitting further rounds, instead
    /// of exiting 75 at once; exits 75 if they are not done by then
    #[arg(long, value_name = "DURATION")]
    pub judge_batch_wait: Option<String>,

    /// When the judge writes the reason for its verdict: `failures` cuts the judge's answer
    /// right after the verdict (read with its token probabilities) and asks again for the
    /// reason only where a verdict is false or a score is below its threshold (same
    /// prompt, so the server's prompt cache covers it); `never` asks for no reason; `always`
    /// lets every answer run to its reason (several times the generated tokens). Reason
    /// columns are null where none was asked for [default: failures]
    #[arg(long, value_name = "always|failures|never")]
    pub judge_reasons: Option<String>,

    /// Meaning Match (and defined verdicts without a threshold of their own) is true where the
    /// judge's P(true) (the `meaning_match_p` column) is at least this; where the server gives
    /// no probabilities, its sampled answer decides [default: 0.5]
    #[arg(long, value_name = "P")]
    pub judge_threshold: Option<f64>,

    /// The judge modes' options (`--judge-service-tier`, ...), each mode's
    /// defined in its module of `protocol/`.
    #[command(flatten)]
    pub modes: ModeArgs,
}

/// Settings of the judge stage (present when a judge URL is given).
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    /// The first (or only) judge.
    pub url: String,
    /// `--judge-api`, or the protocol the URL implies.
    pub api: crate::Api,
    pub model: String,
    pub api_key_env: String,
    pub timeout: f64,
    pub retries: u32,
    pub concurrency: usize,
    pub rpm: Option<u32>,
    pub tpm: Option<u32>,
    /// The `--judge-band` tiers, in order.
    pub tiers: crate::TierChain,
    /// `--facts`.
    pub facts: crate::FactSource,
    /// `--fact-check nli`: the fact ratio's checks by the cross-encoder, at
    /// this P(entailment).
    pub nli_fact_check: Option<f32>,
    pub cache: Option<PathBuf>,
    /// `--judge-reasons`.
    pub reasons: crate::Reasons,
    /// `--judge-threshold`.
    pub threshold: f32,
    /// `--judge-batch`.
    pub batch: Option<crate::batch::BatchMode>,
    /// `--judge-batch-wait`.
    pub batch_wait: Option<std::time::Duration>,
    /// A panel's judges, the first included (empty for a single judge).
    pub panel: Vec<PanelJudge>,
    /// The judge mode (`--judge-service-tier flex`), if any.
    pub mode: Option<crate::Mode>,
    /// `--judge-panel`, with its band (a panel only).
    pub panel_mode: Option<crate::PanelMode>,
}

/// One judge of a panel.
#[derive(Debug, Clone)]
pub struct PanelJudge {
    /// Its name in columns, sources and folders.
    pub name: String,
    pub url: String,
    pub model: String,
}

/// `--judge-concurrency`'s default: a local server's few slots.
pub const DEFAULT_CONCURRENCY: usize = 4;
/// `--judge-timeout`'s default, in seconds.
const DEFAULT_TIMEOUT_SECS: f64 = 60.0;
/// `--judge-retries`' default.
const DEFAULT_RETRIES: u32 = 4;
/// `--judge-model`'s default: the name llama-server and vLLM answer to
/// whatever they serve.
const DEFAULT_MODEL: &str = "default";

/// The longest `--judge-batch-wait`: a week, well past any provider's
/// completion window (24 hours), and far from where adding it to the clock
/// would overflow.
const MAX_BATCH_WAIT: std::time::Duration = std::time::Duration::from_secs(7 * 24 * 3600);

/// Where the judge's answers come from, read before the metrics: the run
/// has judge metrics by default when it has a judge.
pub struct JudgeTarget {
    /// `--judge-url`, or the placeholder of a `dir:` batch run without one
    /// (or of a run whose fact ratio is wholly local, [`LOCAL_FACTS_URL`]).
    pub url: Option<String>,
    /// No judge: `--facts sentences --fact-check nli` without `--judge-url`,
    /// so only fact_similarity runs, on this machine.
    pub local_facts_only: bool,
    /// Further `--judge-url`s: a panel's other judges.
    more: Vec<String>,
    batch: Option<BatchMode>,
    batch_wait: Option<Duration>,
}

/// The judge "endpoint" of a run without `--judge-url` whose only judge
/// metric is a wholly local fact ratio: it names no server and is never
/// called (nor probed).
pub const LOCAL_FACTS_URL: &str = "http://local-facts.invalid/v1";

/// Where `judge-prompt` says a request without `--judge-url` would go: it
/// prints the request and sends nothing, so the protocol and model named
/// still shape it.
const PROMPT_ONLY_URL: &str = "http://127.0.0.1/v1";

/// Reads `--judge-url`, `--judge-batch` and `--judge-batch-wait`;
/// `prompt_only` (`judge-prompt`) stands a placeholder in for a missing URL.
pub fn target(
    args: &mut JudgeArgs,
    origin: &impl Given,
    prompt_only: bool,
) -> Result<JudgeTarget, Error> {
    let mut urls = Vec::new();
    for (k, url) in std::mem::take(&mut args.judge_url).into_iter().enumerate() {
        crate::check_url(&url).map_err(|e| {
            if origin.in_file("judge_url") {
                origin.in_file_error("judge_url", k, &format!("judge_url = {e}"))
            } else {
                Error::usage(format!("--judge-url {e}"))
            }
        })?;
        urls.push(url);
    }
    let mut urls = urls.into_iter();
    let url = urls.next();
    let more: Vec<String> = urls.collect();
    let batch = origin.parsed(args.judge_batch.take(), "judge_batch", BatchMode::parse)?;
    let batch_wait = origin.parsed(args.judge_batch_wait.take(), "judge_batch_wait", |t| {
        match humantime::parse_duration(t) {
            Ok(d) if d <= MAX_BATCH_WAIT => Ok(d),
            Ok(_) => Err(format!(
                "'{t}': longer than a batch can run (at most {})",
                humantime::format_duration(MAX_BATCH_WAIT)
            )),
            Err(e) => Err(format!("'{t}': {e} (expected e.g. 90s, 45m, 2h 30m)")),
        }
    })?;
    if batch_wait.is_some() && batch.is_none() {
        return Err(Error::config(
            "--judge-batch-wait needs --judge-batch (api or dir:PATH)",
        ));
    }
    if batch == Some(BatchMode::Api) && url.is_none() {
        return Err(Error::config(
            "--judge-batch api needs --judge-url: the Batch API is found under it",
        ));
    }
    // Request files for another machine name no server: the judge is
    // whatever answers them.
    // Sentences as facts and an NLI model checking them need no judge.
    let local_facts_only = url.is_none()
        && batch.is_none()
        && !prompt_only
        && args.facts.as_deref() == Some("sentences")
        && args.fact_check.as_deref() == Some("nli");
    let url = match (&batch, url) {
        (Some(BatchMode::Dir(_)), None) => Some(crate::batch::OFFLINE_URL.to_string()),
        (_, None) if prompt_only => Some(PROMPT_ONLY_URL.to_string()),
        (_, None) if local_facts_only => Some(LOCAL_FACTS_URL.to_string()),
        (_, url) => url,
    };
    Ok(JudgeTarget {
        url,
        local_facts_only,
        more,
        batch,
        batch_wait,
    })
}

/// Reads the rest of the judge's settings out of `args`, for a run with
/// `metrics` (of which `banded` the band may decide); none without a judge.
pub fn resolve(
    args: &mut JudgeArgs,
    origin: &impl Given,
    target: JudgeTarget,
    metrics: &MetricSet,
    banded: bool,
) -> Result<Option<JudgeSettings>, Error> {
    let tiers = tiers(args, origin, metrics, banded && target.url.is_some())?;
    let facts = origin
        .parsed(args.facts.take(), "facts", crate::FactSource::parse)?
        .unwrap_or_default();
    let nli_check = origin.parsed(args.fact_check.take(), "fact_check", |s| match s {
        "judge" => Ok(false),
        "nli" => Ok(true),
        other => Err(format!("'{other}': expected judge or nli")),
    })?;
    let threshold_given = args.fact_check_threshold.is_some();
    let fact_threshold = origin
        .ranged(
            args.fact_check_threshold,
            "fact_check_threshold",
            |p| (0.0..=1.0).contains(&p),
            "a probability from 0 to 1",
        )?
        .map_or(crate::DEFAULT_FACT_CHECK_THRESHOLD, |p| p as f32);
    if threshold_given && nli_check != Some(true) {
        return Err(Error::usage(
            "--fact-check-threshold is for --fact-check nli".to_string(),
        ));
    }
    let local_facts = facts != crate::FactSource::Judge || nli_check == Some(true);
    if (local_facts || nli_check.is_some()) && target.url.is_none() {
        return Err(Error::config(
            "--facts and --fact-check are about fact_similarity, a judge metric: pass --judge-url, or both --facts sentences and --fact-check nli to run it without a judge".to_string(),
        ));
    }
    if local_facts && target.url.is_some() && !metrics.contains(&metric::FACT_SIMILARITY) {
        return Err(Error::config(
            "--facts and --fact-check are about fact_similarity, which this run does not compute (add it to --metrics)".to_string(),
        ));
    }
    let nli_fact_check = (nli_check == Some(true)).then_some(fact_threshold);
    let reasons = origin
        .parsed(
            args.judge_reasons.take(),
            "judge_reasons",
            crate::Reasons::parse,
        )?
        .unwrap_or_default();
    let threshold = origin
        .ranged(
            args.judge_threshold,
            "judge_threshold",
            |p| (0.0..=1.0).contains(&p),
            "a probability from 0 to 1",
        )?
        .map_or(crate::DEFAULT_THRESHOLD, |p| p as f32);
    let api = origin.parsed(args.judge_api.take(), "judge_api", Api::parse)?;
    let Some(url) = target.url else {
        return Ok(None);
    };
    let api = api.unwrap_or_else(|| Api::for_url(&url));
    if let Some(mode) = &target.batch {
        crate::batch::check_mode(mode, api)?;
    }
    let timeout = origin.ranged(
        args.judge_timeout,
        "judge_timeout",
        |t| t > 0.0 && t <= 86_400.0,
        "seconds above 0 and at most 86400",
    )?;
    let concurrency = origin
        .ranged(
            args.judge_concurrency,
            "judge_concurrency",
            |n| (1..=256).contains(&n),
            "1 to 256",
        )?
        .unwrap_or(DEFAULT_CONCURRENCY);
    let retries = origin
        .ranged(
            args.judge_retries,
            "judge_retries",
            |n| n <= 100,
            "0 to 100",
        )?
        .unwrap_or(DEFAULT_RETRIES);
    let rpm = origin.ranged(
        args.judge_rpm,
        "judge_rpm",
        |n| n >= 1,
        "at least 1 request per minute",
    )?;
    let tpm = origin.ranged(
        args.judge_tpm,
        "judge_tpm",
        |n| n >= 1,
        "at least 1 token per minute",
    )?;
    let mode = args.modes.resolve(&crate::ModeContext {
        api,
        batch: target.batch.as_ref(),
        retries,
        given: origin,
    })?;
    // A mode may want longer waits (flex: 15 minutes) unless told.
    let timeout = timeout
        .or_else(|| mode.as_ref().and_then(crate::Mode::timeout))
        .unwrap_or(DEFAULT_TIMEOUT_SECS);
    let models = std::mem::take(&mut args.judge_model);
    let (panel, panel_mode) = panel(args, origin, &url, &target.more, &models, metrics)?;
    Ok(Some(JudgeSettings {
        url,
        api,
        model: models
            .into_iter()
            .next()
            .unwrap_or_else(|| DEFAULT_MODEL.into()),
        panel,
        panel_mode,
        mode,
        api_key_env: args
            .judge_api_key_env
            .take()
            .unwrap_or_else(|| api.key_env().into()),
        timeout,
        retries,
        concurrency,
        rpm,
        tpm,
        tiers,
        facts,
        nli_fact_check,
        reasons,
        threshold,
        cache: args.judge_cache.take(),
        batch: target.batch,
        batch_wait: target.batch_wait,
    }))
}

/// A panel's judges and how it decides: from the repeated `--judge-url`
/// and `--judge-model` (paired in order), `--judge-panel` and
/// `--judge-escalate-band`; none for a single judge.
fn panel(
    args: &mut JudgeArgs,
    origin: &impl Given,
    first: &str,
    more: &[String],
    models: &[String],
    metrics: &MetricSet,
) -> Result<(Vec<PanelJudge>, Option<crate::PanelMode>), Error> {
    let band = origin.parsed(
        args.judge_escalate_band.take(),
        "judge_escalate_band",
        |t| {
            let bad = || format!("{t}: expected LO..HI with 0 <= LO <= HI <= 1, e.g. 0.2..0.8");
            let (lo, hi) = t.split_once("..").ok_or_else(bad)?;
            let (lo, hi): (f32, f32) = (
                lo.trim().parse().map_err(|_| bad())?,
                hi.trim().parse().map_err(|_| bad())?,
            );
            ((0.0..=1.0).contains(&lo) && (0.0..=1.0).contains(&hi) && lo <= hi)
                .then_some((lo, hi))
                .ok_or_else(bad)
        },
    )?;
    let mode = origin.parsed(args.judge_panel.take(), "judge_panel", |w| {
        crate::PanelMode::parse(w, band.unwrap_or(crate::DEFAULT_ESCALATE_BAND))
    })?;
    if more.is_empty() {
        if mode.is_some() || band.is_some() || models.len() > 1 {
            return Err(Error::config(
                "--judge-panel, --judge-escalate-band and a second --judge-model need a second --judge-url: a panel has several judges",
            ));
        }
        return Ok((Vec::new(), None));
    }
    let Some(mode) = mode else {
        return Err(Error::config(
            "several --judge-url: say how the panel decides with --judge-panel escalate or jury",
        ));
    };
    if band.is_some() && mode == crate::PanelMode::Jury {
        return Err(Error::config(
            "--judge-escalate-band is for --judge-panel escalate",
        ));
    }
    let urls: Vec<&str> = std::iter::once(first)
        .chain(more.iter().map(String::as_str))
        .collect();
    if models.len() != urls.len() {
        return Err(Error::config(format!(
            "a panel of {} judges (--judge-url) needs as many --judge-model, in the same order; got {}",
            urls.len(),
            models.len()
        )));
    }
    if metrics.contains(&metric::FACT_SIMILARITY) {
        return Err(Error::config(
            "a panel judges verdicts and scores; fact_similarity (counted by refscore from fact checks) takes one judge",
        ));
    }
    let clean = |m: &str| -> String {
        m.chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect()
    };
    let mut names: Vec<String> = models.iter().map(|m| clean(m)).collect();
    let distinct: std::collections::BTreeSet<&String> = names.iter().collect();
    if distinct.len() != names.len() {
        names = (1..=names.len()).map(|k| format!("judge{k}")).collect();
    }
    let judges = urls
        .iter()
        .zip(models)
        .zip(names)
        .map(|((url, model), name)| PanelJudge {
            name,
            url: url.to_string(),
            model: model.clone(),
        })
        .collect();
    Ok((judges, Some(mode)))
}

/// The chain of tiers (`--judge-band`, …: each kind of
/// [`crate::tiers::KINDS`] in turn, its values in the order given), each
/// parsed and checked against the run by its kind: the run must compute
/// the scores it reads and have a judge metric a tier decides
/// (`decidable`).
fn tiers(
    args: &mut JudgeArgs,
    origin: &impl Given,
    metrics: &MetricSet,
    decidable: bool,
) -> Result<crate::TierChain, Error> {
    let mut tiers = Vec::new();
    for &kind in crate::tiers::KINDS {
        let key = kind.key();
        let in_file = origin.file_values(key);
        for (k, spec) in kind.take_specs(args).into_iter().enumerate() {
            // A bad value names its flag (64) or its line in the config file (78).
            let bad = |why: String| {
                if k < in_file {
                    origin.in_file_error(key, k, &format!("{key} = {why}"))
                } else {
                    Error::usage(format!("{} {why}", crate::tiers::flag(kind)))
                }
            };
            let tier = kind.parse(&spec).map_err(bad)?;
            tier.check(&spec, metrics, decidable)?;
            tiers.push(tier);
        }
    }
    Ok(crate::TierChain::new(tiers))
}

impl JudgeSettings {
    /// The endpoint of the judge at `url` serving `model` (the first judge's,
    /// or a panel's), with the run's limits and mode; `api_key` read by the
    /// caller from the variable `api_key_env` names.
    pub fn endpoint(
        &self,
        url: &str,
        model: &str,
        api_key: Option<String>,
    ) -> Result<Endpoint, Error> {
        Ok(Endpoint {
            timeout: Endpoint::timeout_from_secs(self.timeout)?,
            retries: self.retries,
            concurrency: self.concurrency,
            requests_per_minute: self.rpm,
            tokens_per_minute: self.tpm,
            mode: self.mode.clone(),
            ..Endpoint::new(url.to_string(), self.api, model.to_string(), api_key)
        })
    }
}

/// The judge stage's options for `metrics` at `endpoint`, from the run's
/// judge settings (their defaults when the run has none), its pass
/// `thresholds`, the judge metrics it knows and `--judge-where`.
pub fn stage_options(
    judge: Option<&JudgeSettings>,
    endpoint: Endpoint,
    metrics: MetricSet,
    thresholds: Vec<(String, f64)>,
    judge_metrics: JudgeMetrics,
    where_column: Option<String>,
) -> JudgeOptions {
    JudgeOptions {
        endpoint,
        metrics,
        tiers: judge.map(|j| j.tiers.clone()).unwrap_or_default(),
        facts: judge.map(|j| j.facts).unwrap_or_default(),
        fact_check: None,
        cache_dir: judge.and_then(|j| j.cache.clone()),
        reasons: judge.map(|j| j.reasons).unwrap_or_default(),
        threshold: judge.map_or(crate::DEFAULT_THRESHOLD, |j| j.threshold),
        thresholds,
        judge_metrics,
        where_column,
    }
}
