//! The one place a run's stages come from its settings: which stages run
//! (with the embedding model and the judge endpoint they need), the result's
//! columns, the job's spec and fingerprint, and the stages themselves.
//! `score`, Python's `Scorer` and `judge-prompt` all build through it.

use std::collections::BTreeMap;
use std::time::Duration;

use arrow::datatypes::Field;
use refscore_core::metric::MetricSet;
use refscore_core::{Error, Stage};
use refscore_embed::{
    CrossOptions, CrossPlan, EmbedOptions, EmbeddingStage, FactReading, ModelFiles, NliEntailment,
};
use refscore_job::{Job, JobSpec, Passes};
use refscore_judge::batch::BatchMode;
use refscore_judge::{Endpoint, JudgeOptions, JudgePanel, NliFactCheck, PanelMember};
use refscore_lexical::{LexicalStage, Selection};
use refscore_read::{Dataset, ReadOptions, Role};
use serde_json::{json, Value};

use crate::settings::Settings;

/// The stages a run's settings ask for, resolved (the model found, the
/// judge endpoint built) but not loaded.
pub(crate) struct Pipeline<'s> {
    settings: &'s Settings,
    /// The model found and the embedding stage's options, built once for
    /// its fingerprint and its loading, when the run embeds.
    embedding: Option<(ModelFiles, EmbedOptions)>,
    /// The cross-encoder checked against the metrics asked of it, and its
    /// options, when the run has cross metrics.
    cross: Option<(CrossPlan, CrossOptions)>,
    endpoint: Option<Endpoint>,
    /// A panel's judges (the first is `endpoint`), by name; empty for one.
    panel: Vec<(String, Endpoint)>,
    /// `--fact-check nli`'s model, loaded, when the run judges with it.
    fact_check: Option<NliFactCheck>,
    /// The cross-encoder's weights when the cross metrics and the fact
    /// check both use them: loaded once, for both.
    shared_cross: Option<std::sync::Arc<refscore_embed::CrossEncoder>>,
}

impl<'s> Pipeline<'s> {
    /// Resolves the stages `settings` ask for. A model or layer the
    /// settings cannot have fails here, before any work.
    pub(crate) fn plan(settings: &'s Settings) -> Result<Pipeline<'s>, Error> {
        let endpoint = judge_endpoint(settings)?;
        let panel = match (&settings.judge, &endpoint) {
            (Some(j), Some(_)) => j
                .panel
                .iter()
                .map(|p| Ok((p.name.clone(), endpoint_at(settings, &p.url, &p.model)?)))
                .collect::<Result<Vec<_>, Error>>()?,
            _ => Vec::new(),
        };
        let embedding = match resolve_model(settings)? {
            Some(files) => Some((
                files,
                settings
                    .embed
                    .stage_options(settings.metrics.metrics.clone())?,
            )),
            None => None,
        };
        let cross = cross_plan(settings)?;
        let (fact_check, shared_cross) = match endpoint {
            Some(_) => nli_fact_check(settings, cross.as_ref())?,
            None => (None, None),
        };
        Ok(Pipeline {
            settings,
            embedding,
            cross,
            endpoint,
            panel,
            fact_check,
            shared_cross,
        })
    }

    /// Warnings to give before the run: judges of an escalating panel that
    /// can never be unsure (see [`refscore_judge::escalation_warnings`]).
    pub(crate) fn warnings(&self) -> Vec<String> {
        let mode = self.settings.judge.as_ref().and_then(|j| j.panel_mode);
        refscore_judge::escalation_warnings(mode, &self.panel)
    }

    /// Whether the run has an embedding stage.
    pub(crate) fn embeds(&self) -> bool {
        self.embedding.is_some()
    }

    /// The judge endpoint, when the run has judge metrics.
    pub(crate) fn endpoint(&self) -> Option<&Endpoint> {
        self.endpoint.as_ref()
    }

    /// The metric columns of the result, in order.
    pub(crate) fn metric_fields(&self) -> Vec<Field> {
        let metrics = &self.settings.metrics.metrics;
        let mut fields = refscore_lexical::fields(Selection::of(metrics));
        if self.embedding.is_some() {
            fields.extend(refscore_embed::fields(metrics));
        }
        if let Some((plan, _)) = &self.cross {
            fields.extend(plan.fields());
        }
        if self.endpoint.is_some() {
            fields.extend(self.settings.judge_metrics.fields(metrics));
            let names: Vec<String> = self.panel.iter().map(|(n, _)| n.clone()).collect();
            let mode = self.settings.judge.as_ref().and_then(|j| j.panel_mode);
            fields.extend(
                self.settings
                    .judge_metrics
                    .panel_fields(metrics, &names, mode),
            );
        }
        fields
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
    /// stage's from its options.
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
        if let Some((files, options)) = &self.embedding {
            f.extend(options.fingerprint(files, &s.embed.device)?);
        }
        if let Some((plan, options)) = &self.cross {
            let (key, value) = plan.fingerprint(options)?;
            f.insert(key, value);
        }
        if let Some(endpoint) = &self.endpoint {
            let batch = s.judge.as_ref().and_then(|j| j.batch.as_ref());
            let options = self.judge_options(endpoint);
            f.extend(options.fingerprint(batch));
            if let (false, Some(mode)) = (
                self.panel.is_empty(),
                s.judge.as_ref().and_then(|j| j.panel_mode),
            ) {
                let judges: Vec<Value> = self
                    .panel
                    .iter()
                    .map(
                        |(name, e)| json!({"name": name, "url": e.display_url(), "model": e.model}),
                    )
                    .collect();
                let band = match mode {
                    refscore_judge::PanelMode::Escalate { band } => Some([band.0, band.1]),
                    refscore_judge::PanelMode::Jury => None,
                };
                f.insert(
                    "judge_panel".into(),
                    json!({"mode": mode.name(), "band": band, "judges": judges}),
                );
            }
        }
        Ok(f)
    }

    /// The result file's footer beyond the run hash and thresholds: the
    /// embedding precision, the defined judge metrics with their versions
    /// (so a report can tell that a rubric changed between two nights), and
    /// the `--gold` mapping (so a report finds the labels).
    fn footer(&self) -> Vec<(String, String)> {
        use refscore_core::schema::footer;
        let s = self.settings;
        let mut out = Vec::new();
        if self.embedding.is_some() {
            out.extend(s.embed.footer());
        }
        let defined = s.judge_metrics.record(&s.metrics.metrics);
        if self.endpoint.is_some() && !defined.is_empty() {
            out.push((footer::JUDGE_METRICS.into(), json!(defined).to_string()));
        }
        if let Some(tiers) = s
            .judge
            .as_ref()
            .filter(|_| self.endpoint.is_some())
            .and_then(|j| j.tiers.footer())
        {
            out.push((footer::TIERS.into(), tiers));
        }
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

    /// The lexical stage.
    pub(crate) fn lexical(&self) -> LexicalStage {
        LexicalStage(Selection::of(&self.settings.metrics.metrics))
    }

    /// The embedding stage with its model loaded, when the run embeds.
    pub(crate) fn load_embedding(&self) -> Result<Option<EmbeddingStage>, Error> {
        match &self.embedding {
            Some((files, options)) => {
                EmbeddingStage::load_found(files.clone(), options.clone()).map(Some)
            }
            None => Ok(None),
        }
    }

    /// The stages between the embeddings and the judge that need only their
    /// model loaded (today the cross-encoder's), in data-flow order: a new
    /// such stage is one line here.
    pub(crate) fn load_local(&self) -> Result<Vec<Box<dyn Stage>>, Error> {
        let mut stages: Vec<Box<dyn Stage>> = Vec::new();
        if let Some((plan, options)) = &self.cross {
            stages.push(match &self.shared_cross {
                Some(model) => Box::new(plan.stage(model.clone(), options)?),
                None => plan.load(options)?,
            });
        }
        Ok(stages)
    }

    /// The judge stage, when the run judges: calling the endpoints, which
    /// are probed first so that a wrong URL, key or model fails before any
    /// work.
    pub(crate) fn online_judge(&self) -> Result<Option<JudgePanel>, Error> {
        if self.endpoint.is_none() {
            return Ok(None);
        }
        self.probe()?;
        self.new_judge().map(Some)
    }

    /// Probes every judge of the run.
    fn probe(&self) -> Result<(), Error> {
        match (&self.endpoint, self.panel.is_empty()) {
            // A wholly local fact ratio: no judge to probe.
            (Some(e), true) if e.display_url() == crate::settings::LOCAL_FACTS_URL => Ok(()),
            (Some(e), true) => refscore_judge::probe(e),
            _ => self
                .panel
                .iter()
                .try_for_each(|(_, e)| refscore_judge::probe(e)),
        }
    }

    /// The judge stage: the one judge, or the panel.
    fn new_judge(&self) -> Result<JudgePanel, Error> {
        let s = self.settings;
        let member = |name: &str, e: &Endpoint| PanelMember {
            name: name.to_string(),
            options: self.judge_options(e),
        };
        let members = match (&self.endpoint, self.panel.is_empty()) {
            (Some(e), true) => vec![member("judge", e)],
            _ => self.panel.iter().map(|(n, e)| member(n, e)).collect(),
        };
        JudgePanel::new(members, s.judge.as_ref().and_then(|j| j.panel_mode))
    }

    /// The stages of a job, built pass by pass as [`Passes`] asks.
    pub(crate) fn for_job(&'s self, input: &'s Dataset) -> JobStages<'s> {
        JobStages {
            pipeline: self,
            input,
            stages: Stages {
                lexical: self.lexical(),
                embed: None,
                local: Vec::new(),
                judge: None,
            },
            loaded: false,
        }
    }
}

/// The cross-encoder found and checked against the run's cross metrics,
/// with its options (the embedding model's device, precision and batch
/// size); `None` when the run has no cross metric.
fn cross_plan(settings: &Settings) -> Result<Option<(CrossPlan, CrossOptions)>, Error> {
    let e = &settings.embed;
    if e.cross_model.is_none() || !settings.metrics.wants_cross() {
        return Ok(None);
    }
    let folder = e.cross_folder()?.expect("a cross model is named");
    let plan = CrossPlan::new(folder, &settings.metrics.metrics, e.nli_labels.as_deref())?;
    Ok(Some((plan, e.cross_options()?)))
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

impl Pipeline<'_> {
    /// The judge stage's options at `endpoint` for the run's metrics, with
    /// the fact checker loaded at planning.
    fn judge_options(&self, endpoint: &Endpoint) -> JudgeOptions {
        let s = self.settings;
        JudgeOptions {
            fact_check: self.fact_check.clone(),
            ..judge_options(s, endpoint.clone(), s.metrics.metrics.clone())
        }
    }
}

/// `--fact-check nli`'s model: the `--cross-model` NLI model (or checker,
/// under a checker recipe), loaded once for the run (refused before any
/// work without one, or when it is neither). Where the run also has cross metrics (`cross`), their stage
/// gets the same loaded weights (the second value).
fn nli_fact_check(
    settings: &Settings,
    cross: Option<&(CrossPlan, CrossOptions)>,
) -> Result<
    (
        Option<NliFactCheck>,
        Option<std::sync::Arc<refscore_embed::CrossEncoder>>,
    ),
    Error,
> {
    let Some(threshold) = settings.judge.as_ref().and_then(|j| j.nli_fact_check) else {
        return Ok((None, None));
    };
    let e = &settings.embed;
    let Some(spec) = e.cross_model.as_deref() else {
        return Err(Error::config(
            "--fact-check nli checks facts with the NLI model of --cross-model: name one (a *ForSequenceClassification folder with an entailment label)",
        ));
    };
    let folder = e.cross_folder()?.expect("a cross model is named");
    let labels = e.nli_labels.as_deref();
    // The labels (or the recipe's score) are checked before any weights load.
    let mut described = serde_json::json!({
        "model": spec,
        "architecture": folder.architecture,
    });
    match NliEntailment::reading(&folder, labels)? {
        FactReading::Entailment(label) => {
            described["entailment_label"] = folder.labels[label].clone().into();
        }
        FactReading::Support => described["recipe"] = folder.recipe.name().into(),
    }
    let (model, shared) = match cross {
        Some((plan, options)) => {
            let weights = plan.load_model(options)?;
            let model = NliEntailment::sharing(&folder, labels, options, weights.clone())?;
            (model, Some(weights))
        }
        None => (
            NliEntailment::load(folder, labels, &e.cross_options()?)?,
            None,
        ),
    };
    let check = NliFactCheck {
        fingerprint: model.fingerprint().clone(),
        model: std::sync::Arc::new(model),
        threshold,
        described,
    };
    Ok((Some(check), shared))
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

/// The judge endpoint when judge metrics are wanted (a panel's first).
pub(crate) fn judge_endpoint(settings: &Settings) -> Result<Option<Endpoint>, Error> {
    let (Some(j), true) = (&settings.judge, settings.metrics.wants_judge()) else {
        return Ok(None);
    };
    endpoint_at(settings, &j.url, &j.model).map(Some)
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
/// in batch mode, or calls the endpoint (probed first); the model loads
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

    fn batch_mode(&self) -> Option<&BatchMode> {
        (self.pipeline.settings.judge.as_ref()).and_then(|j| j.batch.as_ref())
    }
}

impl Passes for JobStages<'_> {
    fn set_up(&mut self, job: &Job, to_do: u64) -> Result<(), Error> {
        self.stages.judge = None;
        let (Some(_), true) = (self.pipeline.endpoint(), to_do > 0) else {
            return Ok(());
        };
        let mut stage = self.pipeline.new_judge()?;
        // Answers paid for in this job, kept with its progress: a part
        // scored again after a crash or a judge failure never pays twice.
        stage.set_journal_dir(job.journal_dir())?;
        match self.batch_mode() {
            Some(mode) => stage.use_batches(job.batch_dir(), mode)?,
            None => self.pipeline.probe()?,
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
        self.stages.local = self.pipeline.load_local()?;
        let Some(mut stage) = self.pipeline.load_embedding()? else {
            return Ok(());
        };
        let input = self.input;
        stage.prepare(
            &self.pipeline.settings.input,
            || {
                Ok(input
                    .text_column(Role::Reference)?
                    .expect("reference column is always mapped"))
            },
            || refscore_job::fit::mismatched_pairs(input, 1000),
        )?;
        self.stages.embed = Some(stage);
        Ok(())
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

/// The stages of a run, in their order: lexical, then embedding, the local
/// model stages and the judge where the run has them.
pub(crate) struct Stages {
    pub lexical: LexicalStage,
    /// The embedding stage (apart: it is fitted to the input before it
    /// scores, [`EmbeddingStage::prepare`]).
    pub embed: Option<EmbeddingStage>,
    /// The stages that need only a model loaded ([`Pipeline::load_local`]).
    pub local: Vec<Box<dyn Stage>>,
    pub judge: Option<JudgePanel>,
}

impl Stages {
    /// The stages to score a batch with, in order.
    pub(crate) fn chain(&mut self) -> Vec<&mut dyn Stage> {
        let mut chain: Vec<&mut dyn Stage> = vec![&mut self.lexical];
        if let Some(s) = self.embed.as_mut() {
            chain.push(s);
        }
        for s in self.local.iter_mut() {
            chain.push(s.as_mut());
        }
        if let Some(s) = self.judge.as_mut() {
            chain.push(s);
        }
        chain
    }

    /// The stages with something to say in the summary.
    pub(crate) fn ran(&self) -> Vec<&dyn Stage> {
        let mut out: Vec<&dyn Stage> = Vec::new();
        if let Some(s) = self.embed.as_ref() {
            out.push(s);
        }
        out.extend(self.local.iter().map(|s| s.as_ref()));
        if let Some(s) = self.judge.as_ref() {
            out.push(s);
        }
        out
    }
}
