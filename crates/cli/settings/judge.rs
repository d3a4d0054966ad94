//! The judge stage's settings: where the judge is and how it is spoken
//! to (`--judge-url`, `--judge-api`, batches), how hard it is pushed
//! (timeouts, retries, concurrency, rate limits), and what it decides
//! (band, reasons, threshold).

use std::path::PathBuf;
use std::time::Duration;

use refscore_core::metric;
use refscore_core::Error;
use refscore_judge::batch::BatchMode;
use refscore_judge::Api;

use super::env_text;
use super::origin::Origin;
use crate::args::ScoreArgs;
use crate::metrics::MetricPlan;

/// Settings of the judge stage (present when a judge URL is given).
#[derive(Debug, Clone)]
pub struct JudgeSettings {
    /// The first (or only) judge.
    pub url: String,
    /// `--judge-api`, or the protocol the URL implies.
    pub api: refscore_judge::Api,
    pub model: String,
    pub api_key_env: String,
    pub timeout: f64,
    pub retries: u32,
    pub concurrency: usize,
    pub rpm: Option<u32>,
    pub tpm: Option<u32>,
    /// The `--judge-band` tiers, in order.
    pub tiers: refscore_judge::TierChain,
    /// `--facts`.
    pub facts: refscore_judge::FactSource,
    /// `--fact-check nli`: the fact ratio's checks by the cross-encoder, at
    /// this P(entailment).
    pub nli_fact_check: Option<f32>,
    pub cache: Option<PathBuf>,
    /// `--judge-reasons`.
    pub reasons: refscore_judge::Reasons,
    /// `--judge-threshold`.
    pub threshold: f32,
    /// `--judge-batch`.
    pub batch: Option<refscore_judge::batch::BatchMode>,
    /// `--judge-batch-wait`.
    pub batch_wait: Option<std::time::Duration>,
    /// A panel's judges, the first included (empty for a single judge).
    pub panel: Vec<PanelJudge>,
    /// The judge mode (`--judge-service-tier flex`), if any.
    pub mode: Option<refscore_judge::Mode>,
    /// `--judge-panel`, with its band (a panel only).
    pub panel_mode: Option<refscore_judge::PanelMode>,
}

/// One judge of a panel.
#[derive(Debug, Clone)]
pub struct PanelJudge {
    /// Its name in columns, sources and folders.
    pub name: String,
    pub url: String,
    pub model: String,
}

impl JudgeSettings {
    /// The API key, from the variable `--judge-api-key-env` names (none when
    /// unset or blank). Read when the endpoint is built, never stored in
    /// the settings, so no printout of them can show it.
    pub(crate) fn api_key(&self) -> Option<String> {
        env_text(&self.api_key_env)
    }
}

/// `--judge-concurrency`'s default: a local server's few slots.
pub(super) const DEFAULT_CONCURRENCY: usize = 4;
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
pub(super) struct JudgeTarget {
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
pub(crate) const LOCAL_FACTS_URL: &str = "http://local-facts.invalid/v1";

/// Where `judge-prompt` says a request without `--judge-url` would go: it
/// prints the request and sends nothing, so the protocol and model named
/// still shape it.
const PROMPT_ONLY_URL: &str = "http://127.0.0.1/v1";

/// Reads `--judge-url`, `--judge-batch` and `--judge-batch-wait`;
/// `prompt_only` (`judge-prompt`) stands a placeholder in for a missing URL.
pub(super) fn target(
    args: &mut ScoreArgs,
    origin: &Origin,
    prompt_only: bool,
) -> Result<JudgeTarget, Error> {
    let mut urls = Vec::new();
    for (k, url) in std::mem::take(&mut args.judge_url).into_iter().enumerate() {
        refscore_judge::check_url(&url).map_err(|e| {
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
        (Some(BatchMode::Dir(_)), None) => Some(refscore_judge::batch::OFFLINE_URL.to_string()),
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
pub(super) fn resolve(
    args: &mut ScoreArgs,
    origin: &Origin,
    target: JudgeTarget,
    metrics: &MetricPlan,
    banded: bool,
) -> Result<Option<JudgeSettings>, Error> {
    let tiers = tiers(args, origin, metrics, banded && target.url.is_some())?;
    let facts = origin
        .parsed(
            args.facts.take(),
            "facts",
            refscore_judge::FactSource::parse,
        )?
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
        .map_or(refscore_judge::DEFAULT_FACT_CHECK_THRESHOLD, |p| p as f32);
    if threshold_given && nli_check != Some(true) {
        return Err(Error::usage(
            "--fact-check-threshold is for --fact-check nli".to_string(),
        ));
    }
    let local_facts = facts != refscore_judge::FactSource::Judge || nli_check == Some(true);
    if (local_facts || nli_check.is_some()) && target.url.is_none() {
        return Err(Error::config(
            "--facts and --fact-check are about fact_similarity, a judge metric: pass --judge-url, or both --facts sentences and --fact-check nli to run it without a judge".to_string(),
        ));
    }
    if local_facts && target.url.is_some() && !metrics.metrics.contains(&metric::FACT_SIMILARITY) {
        return Err(Error::config(
            "--facts and --fact-check are about fact_similarity, which this run does not compute (add it to --metrics)".to_string(),
        ));
    }
    let nli_fact_check = (nli_check == Some(true)).then_some(fact_threshold);
    let reasons = origin
        .parsed(
            args.judge_reasons.take(),
            "judge_reasons",
            refscore_judge::Reasons::parse,
        )?
        .unwrap_or_default();
    let threshold = origin
        .ranged(
            args.judge_threshold,
            "judge_threshold",
            |p| (0.0..=1.0).contains(&p),
            "a probability from 0 to 1",
        )?
        .map_or(refscore_judge::DEFAULT_THRESHOLD, |p| p as f32);
    let api = origin.parsed(args.judge_api.take(), "judge_api", Api::parse)?;
    let Some(url) = target.url else {
        return Ok(None);
    };
    let api = api.unwrap_or_else(|| Api::for_url(&url));
    if let Some(mode) = &target.batch {
        refscore_judge::batch::check_mode(mode, api)?;
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
    let mode = args.judge_modes.resolve(&refscore_judge::ModeContext {
        api,
        batch: target.batch.as_ref(),
        retries,
        given: origin,
    })?;
    // A mode may want longer waits (flex: 15 minutes) unless told.
    let timeout = timeout
        .or_else(|| mode.as_ref().and_then(refscore_judge::Mode::timeout))
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

/// The API key sent when `--overwrite` cancels a discarded run's batches
/// at a server other than this run's judge: the default API's variable's.
pub(super) fn default_api_key() -> Option<String> {
    env_text(Api::default().key_env())
}

/// A panel's judges and how it decides: from the repeated `--judge-url`
/// and `--judge-model` (paired in order), `--judge-panel` and
/// `--judge-escalate-band`; none for a single judge.
fn panel(
    args: &mut ScoreArgs,
    origin: &Origin,
    first: &str,
    more: &[String],
    models: &[String],
    metrics: &MetricPlan,
) -> Result<(Vec<PanelJudge>, Option<refscore_judge::PanelMode>), Error> {
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
        refscore_judge::PanelMode::parse(w, band.unwrap_or(refscore_judge::DEFAULT_ESCALATE_BAND))
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
    if band.is_some() && mode == refscore_judge::PanelMode::Jury {
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
    if metrics.metrics.contains(&metric::FACT_SIMILARITY) {
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

/// The chain of `--judge-band` tiers, in the order given, each checked
/// against the run: it must read a score the run computes before judging,
/// and the run must have a judge metric a tier decides (`decidable`).
fn tiers(
    args: &mut ScoreArgs,
    origin: &Origin,
    metrics: &MetricPlan,
    decidable: bool,
) -> Result<refscore_judge::TierChain, Error> {
    let specs = std::mem::take(&mut args.judge_band);
    let in_file = origin.file_values("judge_band");
    let readable =
        |m: &metric::Metric| m.group != metric::Group::Judge && m.kind == metric::Kind::Score;
    let mut tiers = Vec::with_capacity(specs.len());
    for (k, spec) in specs.into_iter().enumerate() {
        // A bad value names its flag (64) or its line in the config file (78).
        let bad = |why: String| {
            if k < in_file {
                origin.in_file_error("judge_band", k, &format!("judge_band = {why}"))
            } else {
                Error::usage(format!("--judge-band {why}"))
            }
        };
        let tier = refscore_judge::tiers::parse(&spec).map_err(bad)?;
        let score = tier.reads();
        let Some(read) = metric::find(score).filter(|m| readable(m)) else {
            let scores: Vec<&str> = metric::BUILTIN
                .iter()
                .filter(|m| readable(m))
                .map(|m| m.name.as_str())
                .collect();
            return Err(Error::config(format!(
                "--judge-band {spec}: a tier reads a lexical, embedding or cross-encoder score ({}), not '{score}'",
                scores.join(", "),
            )));
        };
        if !(decidable && metrics.metrics.contains(&read)) {
            return Err(Error::config(format!(
                "--judge-band {spec} needs the {score} metric and a judge metric a tier decides (meaning_match, or one defined with band = true) in the run",
            )));
        }
        tiers.push(tier);
    }
    Ok(refscore_judge::TierChain::new(tiers))
}
