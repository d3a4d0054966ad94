//! The one place a run's stages come from its settings: which stages run
//! (with the embedding model and the judge endpoint they need), the result's
//! columns, the job's spec and fingerprint, and the stages themselves.
//! `score`, Python's `Scorer` and `judge-prompt` all build through it.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use arrow::datatypes::Field;
use refscore_core::metric::MetricSet;
use refscore_core::{Error, FitInput, Stage, StagePlan};
use refscore_embed::{CrossStagePlan, FactReading, ModelFiles, NliEntailment};
use refscore_job::fit::DatasetFit;
use refscore_job::{Job, JobSpec, Passes};
use refscore_judge::{Endpoint, JudgeOptions, JudgePanel, JudgeParts, JudgePlan, NliFactCheck};
use refscore_lexical::{LexicalStage, Selection};
use refscore_read::{Dataset, ReadOptions};
use serde_json::{json, Value};

use crate::settings::Settings;

/// The stages a run's settings ask for, resolved (the model found, the
/// judge endpoint built) but not loaded.
pub(crate) struct Pipeline<'s> {
    settings: &'s Settings,
    /// Every stage's plan, in data-flow order ([`plans`], the registry).
    plans: Vec<Box<dyn StagePlan>>,
    /// The judge's plan again, for what only the judge does (built per
    /// pass, probed, batched), when the run judges.
    judge: Option<Arc<JudgePlan>>,
}

/// The run's stage plans in data-flow order, and the judge's again for
/// what only it does.
type Plans = (Vec<Box<dyn StagePlan>>, Option<Arc<JudgePlan>>);

/// The judge endpoint (a panel's first) and a panel's judges by name.
type Judges = (Endpoint, Vec<(String, Endpoint)>);

/// The registry of stages: the plan of each stage the run's settings ask
/// for, in data-flow order (each stage sees the columns of those before
/// it). A new stage is its own crate's [`StagePlan`] and one line here.
fn plans(settings: &Settings) -> Result<Plans, Error> {
    let metrics = &settings.metrics.metrics;
    // The judge's endpoints first: a bad URL or key fails before any model
    // is looked for.
    let endpoints = judge_endpoints(settings)?;
    let mut plans: Vec<Box<dyn StagePlan>> = vec![Box::new(LexicalStage(Selection::of(metrics)))];
    if let Some(files) = resolve_model(settings)? {
        plans.push(Box::new(settings.embed.plan(files, metrics.clone())?));
    }
    let mut cross = settings.embed.cross_plan(metrics)?;
    let judge = match endpoints {
        // The fact check may load the cross stage's weights, to share them.
        Some((endpoint, panel)) => Some(Arc::new(judge_plan(
            settings,
            endpoint,
            panel,
            cross.as_mut(),
        )?)),
        None => None,
    };
    plans.extend(cross.map(|c| Box::new(c) as Box<dyn StagePlan>));
    plans.extend(judge.clone().map(|j| Box::new(j) as Box<dyn StagePlan>));
    Ok((plans, judge))
}

impl<'s> Pipeline<'s> {
    /// Resolves the stages `settings` ask for. A model or layer the
    /// settings cannot have fails here, before any work.
    pub(crate) fn plan(settings: &'s Settings) -> Result<Pipeline<'s>, Error> {
        let (plans, judge) = plans(settings)?;
        Ok(Pipeline {
            settings,
            plans,
            judge,
        })
    }

    /// Warnings to give before the run: judges of an escalating panel that
    /// can never be unsure.
    pub(crate) fn warnings(&self) -> Vec<String> {
        self.judge
            .as_ref()
            .map(|j| j.warnings())
            .unwrap_or_default()
    }

    /// The option whose figures a stage fits on the whole input, if one is
    /// set (see [`StagePlan::fitted_on_whole_input`]).
    pub(crate) fn fitted_on_whole_input(&self) -> Option<&'static str> {
        self.plans.iter().find_map(|p| p.fitted_on_whole_input())
    }

    /// The judge endpoint, when the run has judge metrics.
    pub(crate) fn endpoint(&self) -> Option<&Endpoint> {
        self.judge.as_ref().map(|j| j.endpoint())
    }

    /// The metric columns of the result, in order.
    pub(crate) fn metric_fields(&self) -> Vec<Field> {
        self.plans.iter().flat_map(|p| p.fields()).collect()
    }

    /// The job over `dataset`: the output and how to treat one already
    /// there, and the fingerprint a resumed run must match.
    pub(crate) fn job_spec(&self, dataset: &Dataset) -> Result<JobSpec, Error> {
        let s = self.settings;
        Ok(JobSpec {
            output: s.output.clone(),
            overwrite: s.overwrite,
            resume: s.resume,
            shard: s.shard,
            metrics: (s.metrics.metrics.iter()).map(|m| m.name.clone()).collect(),
            settings: self.fingerprint(dataset)?,
            thresholds: s.thresholds.clone(),
            footer: self.footer(),
            commit_intervals: refscore_job::commit_intervals(s.commit_seconds.as_deref()),
        })
    }

    /// Everything beside the chosen metrics (the job's record names them)
    /// that changes a result value: the run's own settings here, each
    /// stage's from its plan.
    fn fingerprint(&self, dataset: &Dataset) -> Result<BTreeMap<String, Value>, Error> {
        let s = self.settings;
        let mut f = BTreeMap::new();
        let cols = dataset.columns();
        f.insert(
            "columns".into(),
            json!([cols.id, cols.input, cols.reference, cols.output]),
        );
        f.insert("keep".into(), json!(s.keep));
        if !s.gold.is_empty() {
            // Labels add columns to the result, and their figures to its
            // summary.
            f.insert("gold".into(), json!(s.gold));
        }
        f.insert("batch_size".into(), json!(s.batch_size));
        for plan in &self.plans {
            f.extend(plan.fingerprint()?);
        }
        Ok(f)
    }

    /// The result file's footer beyond the run hash and thresholds: each
    /// stage's entries, then the `--gold` mapping (so a report finds the
    /// labels).
    fn footer(&self) -> Vec<(String, String)> {
        let s = self.settings;
        let mut out: Vec<(String, String)> = self.plans.iter().flat_map(|p| p.footer()).collect();
        if !s.gold.is_empty() {
            out.push((
                refscore_report::gold::FOOTER.into(),
                refscore_report::gold::mapping_to_json(&s.gold),
            ));
            if s.gold_confidence != refscore_stats::agreement::RATE_CONFIDENCE {
                out.push((
                    refscore_report::gold::CONFIDENCE_FOOTER.into(),
                    s.gold_confidence.to_string(),
                ));
            }
        }
        out
    }

    /// The stages loaded once (all but the judge's), in data-flow order.
    pub(crate) fn load(&self) -> Result<Vec<Box<dyn Stage>>, Error> {
        let mut stages = Vec::new();
        for plan in &self.plans {
            stages.extend(plan.load()?);
        }
        Ok(stages)
    }

    /// The judge stage, when the run judges: calling the endpoints, which
    /// are probed first so that a wrong URL, key or model fails before any
    /// work.
    pub(crate) fn online_judge(&self) -> Result<Option<JudgePanel>, Error> {
        self.judge.as_ref().map(|j| j.online()).transpose()
    }

    /// The stages of a job, built pass by pass as [`Passes`] asks.
    pub(crate) fn for_job(&'s self, input: &'s Dataset) -> JobStages<'s> {
        JobStages {
            pipeline: self,
            input,
            stages: Stages::default(),
            loaded: false,
        }
    }
}

/// How the input is read: the column mapping, `--keep`, batch size and the
/// `--judge-where` column.
pub(crate) fn read_options(settings: &Settings) -> ReadOptions {
    // The label columns of --gold are kept too, each named by its own flag
    // in messages.
    let mut keep = settings.keep.clone();
    let mut keep_asked_by = vec![None; keep.len()];
    for ((_, column), given) in settings.gold.iter().zip(&settings.gold_given) {
        if !keep.contains(column) {
            keep.push(column.clone());
            keep_asked_by.push(Some(given.clone()));
        }
    }
    ReadOptions {
        mapping: settings.mapping.clone(),
        keep,
        keep_asked_by,
        batch_size: settings.batch_size,
        row_filter: settings.judge_where.clone(),
        prompt_columns: settings
            .judge_metrics
            .columns_read(&settings.metrics.metrics),
        source: settings.source.clone(),
    }
}

/// The judge's plan at `endpoint` (and `panel`'s judges), with
/// `--fact-check nli`'s model loaded.
fn judge_plan(
    settings: &Settings,
    endpoint: Endpoint,
    panel: Vec<(String, Endpoint)>,
    cross: Option<&mut CrossStagePlan>,
) -> Result<JudgePlan, Error> {
    Ok(JudgePlan::new(JudgeParts {
        settings: settings.judge.clone().expect("judge settings"),
        endpoint,
        panel,
        fact_check: nli_fact_check(settings, cross)?,
        metrics: settings.metrics.metrics.clone(),
        thresholds: settings.thresholds.clone(),
        judge_metrics: settings.judge_metrics.clone(),
        where_column: settings.judge_where.clone(),
    }))
}

/// `--fact-check nli`'s model: the `--cross-model` NLI model (or checker,
/// under a checker recipe), loaded once for the run (refused before any
/// work without one, or when it is neither). Where the run also has cross
/// metrics (`cross`), their stage gets the same loaded weights.
fn nli_fact_check(
    settings: &Settings,
    cross: Option<&mut CrossStagePlan>,
) -> Result<Option<NliFactCheck>, Error> {
    let Some(threshold) = settings.judge.as_ref().and_then(|j| j.nli_fact_check) else {
        return Ok(None);
    };
    let e = &settings.embed;
    let (Some(spec), Some(folder)) = (e.cross_model.as_deref(), e.cross_folder.as_ref()) else {
        return Err(Error::config(
            "--fact-check nli checks facts with the NLI model of --cross-model: name one (a *ForSequenceClassification folder with an entailment label)",
        ));
    };
    let labels = e.nli_labels.as_deref();
    // The labels (or the recipe's score) are checked before any weights load.
    let mut described = serde_json::json!({
        "model": spec,
        "architecture": folder.architecture,
    });
    match NliEntailment::reading(folder, labels)? {
        FactReading::Entailment(label) => {
            described["entailment_label"] = folder.labels[label].clone().into();
        }
        FactReading::Support => described["recipe"] = folder.recipe.name().into(),
    }
    let model = match cross {
        Some(plan) => {
            let weights = plan.share_model()?;
            NliEntailment::sharing(folder, labels, plan.options(), weights)?
        }
        None => NliEntailment::load(folder.clone(), labels, &e.cross_options()?)?,
    };
    Ok(Some(NliFactCheck {
        fingerprint: model.fingerprint().clone(),
        model: Arc::new(model),
        threshold,
        described,
    }))
}

/// The judge stage's options for `metrics` at `endpoint`, from the run's
/// judge settings (their defaults when the run has none).
pub(crate) fn judge_options(
    settings: &Settings,
    endpoint: Endpoint,
    metrics: MetricSet,
) -> JudgeOptions {
    refscore_judge::options::stage_options(
        settings.judge.as_ref(),
        endpoint,
        metrics,
        settings.thresholds.clone(),
        settings.judge_metrics.clone(),
        settings.judge_where.clone(),
    )
}

/// The judge endpoint when judge metrics are wanted (a panel's first),
/// with a panel's judges by name (none for one judge).
fn judge_endpoints(settings: &Settings) -> Result<Option<Judges>, Error> {
    let (Some(j), true) = (&settings.judge, settings.metrics.wants_judge()) else {
        return Ok(None);
    };
    let endpoint = endpoint_at(settings, &j.url, &j.model)?;
    let panel = j
        .panel
        .iter()
        .map(|p| Ok((p.name.clone(), endpoint_at(settings, &p.url, &p.model)?)))
        .collect::<Result<Vec<_>, Error>>()?;
    Ok(Some((endpoint, panel)))
}

/// The endpoint of the judge at `url` serving `model`, with the run's
/// limits (each judge of a panel gets its own client and rate limits).
fn endpoint_at(settings: &Settings, url: &str, model: &str) -> Result<Endpoint, Error> {
    let j = settings.judge.as_ref().expect("judge settings");
    j.endpoint(url, model, crate::settings::api_key(j))
}

/// The embedding model when embedding metrics are wanted. When the user
/// asked for none by name (and named no model) and none is found, the run
/// goes on without them, with a warning.
fn resolve_model(settings: &Settings) -> Result<Option<ModelFiles>, Error> {
    let plan = &settings.metrics;
    if !plan.wants_embedding() {
        return Ok(None);
    }
    // A model named by the environment is a model asked for, like --model.
    let named = settings.embed.model_asked();
    match settings.embed.find_model() {
        Ok(files) => {
            settings.embed.check_model(&files, settings.given())?;
            Ok(Some(files))
        }
        Err(e) if plan.explicit || named => Err(e),
        Err(e) => {
            let embedding = |score: &&String| {
                refscore_core::metric::find(score)
                    .is_some_and(|m| m.group == refscore_core::metric::Group::Embedding)
            };
            let tiers = settings.judge.iter().flat_map(|j| j.tiers.tiers());
            if let Some((t, score)) = tiers
                .flat_map(|t| t.reads().iter().find(embedding).map(|s| (t, s)))
                .next()
            {
                return Err(Error::config(format!(
                    "{} {} reads {score}, but the embedding model is missing: {e}",
                    refscore_judge::tiers::flag(t.kind()),
                    t.describe(),
                )));
            }
            if !settings.quiet {
                eprintln!("refscore: warning: embedding metrics skipped: {e}");
            }
            Ok(None)
        }
    }
}

/// A job's stages, pass by pass: the judge answers from the run's batches
/// in batch mode, or calls the endpoint (probed first); the models load
/// once, when rows are first left to score.
pub(crate) struct JobStages<'s> {
    pipeline: &'s Pipeline<'s>,
    input: &'s Dataset,
    stages: Stages,
    /// Whether the models have loaded (once, when rows are first left).
    loaded: bool,
}

impl JobStages<'_> {
    /// The stages that ran, for the summary.
    pub(crate) fn ran(&self) -> Vec<&dyn Stage> {
        self.stages.ran()
    }

    /// The judge stage of the last pass, if the run judged.
    pub(crate) fn judge(&self) -> Option<&JudgePanel> {
        self.stages.judge.as_ref()
    }
}

impl Passes for JobStages<'_> {
    fn set_up(&mut self, job: &Job, to_do: u64) -> Result<(), Error> {
        self.stages.judge = None;
        let (Some(plan), true) = (self.pipeline.judge.as_ref(), to_do > 0) else {
            return Ok(());
        };
        let mut stage = plan.stage()?;
        // Answers paid for in this job, kept with its progress: a part
        // scored again after a crash or a judge failure never pays twice.
        stage.set_journal_dir(job.journal_dir())?;
        match plan.batch_mode() {
            Some(mode) => stage.use_batches(job.batch_dir(), mode)?,
            None => plan.probe()?,
        }
        self.stages.judge = Some(stage);
        Ok(())
    }

    fn still_out(&mut self, wait: Option<Duration>) -> Result<Option<String>, Error> {
        let quiet = self.pipeline.settings.quiet;
        let mut tell = |line: &str| {
            if !quiet {
                eprintln!("refscore: judge batches: {line}");
            }
        };
        match self.stages.judge.as_mut() {
            Some(judge) => judge.batches_still_out(wait, &mut tell),
            None => Ok(None),
        }
    }

    fn load(&mut self) -> Result<(), Error> {
        if std::mem::replace(&mut self.loaded, true) {
            return Ok(());
        }
        self.stages.loaded = self.pipeline.load()?;
        let input = DatasetFit {
            name: &self.pipeline.settings.input,
            dataset: self.input,
        };
        self.stages.fit(&input)
    }

    fn stages(&mut self) -> Vec<&mut dyn Stage> {
        self.stages.chain()
    }

    fn send_out(&mut self) -> Result<Option<String>, Error> {
        match self.stages.judge.as_mut() {
            Some(judge) => judge.send_out_batches(),
            None => Ok(None),
        }
    }
}

/// The stages of a run, in data-flow order: those loaded once, then the
/// judge (built per pass) where the run has one.
#[derive(Default)]
pub(crate) struct Stages {
    /// The stages loaded once ([`Pipeline::load`]).
    pub loaded: Vec<Box<dyn Stage>>,
    pub judge: Option<JudgePanel>,
}

impl Stages {
    /// Fits each stage to `input` before it is scored.
    pub(crate) fn fit(&mut self, input: &dyn FitInput) -> Result<(), Error> {
        self.loaded.iter_mut().try_for_each(|s| s.fit(input))
    }

    /// The stages to score a batch with, in order.
    pub(crate) fn chain(&mut self) -> Vec<&mut dyn Stage> {
        let mut chain: Vec<&mut dyn Stage> = Vec::new();
        for s in self.loaded.iter_mut() {
            chain.push(s.as_mut());
        }
        if let Some(s) = self.judge.as_mut() {
            chain.push(s);
        }
        chain
    }

    /// The stages, for what each says in the summary.
    pub(crate) fn ran(&self) -> Vec<&dyn Stage> {
        let mut out: Vec<&dyn Stage> = self.loaded.iter().map(|s| s.as_ref()).collect();
        if let Some(s) = self.judge.as_ref() {
            out.push(s);
        }
        out
    }
}
