//! The cross-encoder metrics as a pipeline stage: each distinct (reference,
//! output) pair of a batch goes through the model once per direction the
//! chosen metrics need, and each metric takes its value from the scores.

use std::collections::HashMap;
use std::sync::Arc;

use super::memo::Memo;
use super::pair_store::PairStore;

use arrow::array::{ArrayRef, Float32Array};
use arrow::datatypes::{DataType, Field};
use refscore_core::metric::{self, MetricSet};
use refscore_core::{Error, RowBatch, ScoreColumns, Stage};
use serde_json::{json, Value};

use super::{
    CrossEncoder, CrossFolder, CrossHead, CrossOptions, CrossReport, NliLabels, NliScores,
};

/// A pair's scores in the directions the run needs, from which each metric
/// takes its value.
struct Scored {
    /// (reference, output): the premise is the reference.
    forward: Option<Arc<Vec<f32>>>,
    /// (output, reference).
    backward: Option<Arc<Vec<f32>>>,
}

/// One cross-encoder metric: its registry entry, the directions it reads,
/// and how it reads them. A new metric is one entry here.
struct Output {
    metric: &'static metric::Builtin,
    /// Whether it reads (reference, output) and (output, reference).
    forward: bool,
    backward: bool,
    /// Whether it reads NLI labels (else: a one-output model's score).
    nli: bool,
    value: fn(&Scored, Option<NliLabels>) -> Option<f32>,
}

fn nli(s: &Scored, labels: Option<NliLabels>) -> Option<NliScores> {
    let labels = labels?;
    let (f, b) = (s.forward.as_deref()?, s.backward.as_deref()?);
    Some(NliScores::of(f, b, labels))
}

/// The cross-encoder metrics, in the order of the output columns.
static OUTPUTS: [Output; 5] = [
    Output {
        metric: &metric::CROSS_SCORE,
        forward: true,
        backward: false,
        nli: false,
        value: |s, _| s.forward.as_ref().map(|v| v[0]),
    },
    Output {
        metric: &metric::NLI_PRECISION,
        forward: true,
        backward: false,
        nli: true,
        value: |s, l| Some(s.forward.as_ref()?[l?.entailment]),
    },
    Output {
        metric: &metric::NLI_RECALL,
        forward: false,
        backward: true,
        nli: true,
        value: |s, l| Some(s.backward.as_ref()?[l?.entailment]),
    },
    Output {
        metric: &metric::NLI_EQUIVALENCE,
        forward: true,
        backward: true,
        nli: true,
        value: |s, l| nli(s, l).map(|n| n.equivalence),
    },
    Output {
        metric: &metric::NLI_CONTRADICTION,
        forward: true,
        backward: true,
        nli: true,
        value: |s, l| nli(s, l).and_then(|n| n.contradiction),
    },
];

/// The output fields of the selected cross-encoder metrics.
pub fn cross_fields(metrics: &MetricSet) -> Vec<Field> {
    OUTPUTS
        .iter()
        .filter(|o| metrics.contains(o.metric))
        .map(|o| Field::new(o.metric.name.clone(), DataType::Float32, true))
        .collect()
}

/// What a cross-encoder can give: a one-output model `cross_score`, an NLI
/// model the `nli_*` metrics its labels allow; for every other cross metric,
/// why not. Read from the folder alone, before the weights load, so that a
/// group (`cross`, `nli`, the default) selects what the model gives and a
/// metric named outright that it cannot give is refused before any work.
#[derive(Debug, Clone)]
pub struct CrossCapability {
    gives: Vec<String>,
    why_not: Vec<(String, String)>,
    nli: Option<NliLabels>,
}

impl CrossCapability {
    /// Reads it from `folder`; `nli_labels` is `--nli-labels`' text, where
    /// given (a malformed one is a usage error).
    pub fn of(folder: &CrossFolder, nli_labels: Option<&str>) -> Result<CrossCapability, Error> {
        let shown = folder.files.dir.display().to_string();
        let labels = folder.labels.len();
        let names = folder.labels.join(", ");
        let arch = &folder.architecture;
        let recipe = &folder.recipe;
        let support = folder
            .recipe
            .score_labels(&folder.labels)
            .ok()
            .flatten()
            .is_some();
        let nli = match (labels, nli_labels) {
            _ if support => Err(format!(
                "recipe '{}' reads one support score of the output given the reference: ask for cross_score (the nli_* metrics read the folder's labels: --cross-recipe nli)",
                recipe.name()
            )),
            (1, _) => Err(format!(
                "the nli_* metrics need an NLI model (labels with entailment); this {arch} has one output: ask for cross_score"
            )),
            (_, Some(spec)) => Ok(NliLabels::parse(spec, labels)
                .map_err(|why| Error::usage(format!("--nli-labels {spec}: {why}")))?),
            (_, None) => NliLabels::from_names(&folder.labels),
        };
        let nli = match folder.head {
            CrossHead::Sequence => nli,
            CrossHead::Tokens => Err(format!(
                "{arch} is a token classifier, run as LettuceDetect's span detector: it gives cross_score (with cross_spans); the nli_* metrics need an NLI sequence classifier"
            )),
        };
        let mut out = CrossCapability {
            gives: Vec::new(),
            why_not: Vec::new(),
            nli: nli.as_ref().ok().copied(),
        };
        for o in &OUTPUTS {
            let why = if !o.nli {
                let one = labels == 1 || support || folder.head == CrossHead::Tokens;
                (!one).then(|| format!(
                    "cross_score needs a one-output model; this {arch} has {labels} labels ({names}): ask for its NLI metrics (--metrics nli)"
                ))
            } else {
                match &nli {
                    Err(e) => Some(e.clone()),
                    Ok(n) if n.contradiction.is_none() && o.metric.name == metric::NLI_CONTRADICTION.name => Some(format!(
                        "nli_contradiction needs a contradiction label; this model's labels are {names} (name one with --nli-labels, or leave the metric out)"
                    )),
                    Ok(_) => None,
                }
            };
            match why {
                None => out.gives.push(o.metric.name.clone()),
                Some(why) => out
                    .why_not
                    .push((o.metric.name.clone(), format!("{shown}: {why}"))),
            }
        }
        Ok(out)
    }

    /// The model's entailment (and contradiction) labels, where it is an
    /// NLI model whose labels are known.
    pub fn nli(&self) -> Option<NliLabels> {
        self.nli
    }

    /// Whether the model gives the metric `name`.
    pub fn gives(&self, name: &str) -> bool {
        self.gives.iter().any(|g| g == name)
    }

    /// Why the model cannot give the metric `name` (`None`: it can, or it
    /// is no cross metric).
    pub fn why_not(&self, name: &str) -> Option<&str> {
        self.why_not
            .iter()
            .find(|(m, _)| m == name)
            .map(|(_, why)| why.as_str())
    }
}

/// A cross-encoder checked against the metrics asked of it, before its
/// weights load.
#[derive(Debug, Clone)]
pub struct CrossPlan {
    folder: CrossFolder,
    metrics: MetricSet,
    nli: Option<NliLabels>,
}

impl CrossPlan {
    /// Checks `folder` against the cross metrics of `metrics` (exit 78 for
    /// one it cannot give); `nli_labels` is `--nli-labels`' text.
    pub fn new(
        folder: CrossFolder,
        metrics: &MetricSet,
        nli_labels: Option<&str>,
    ) -> Result<CrossPlan, Error> {
        let capability = CrossCapability::of(&folder, nli_labels)?;
        let mut chosen = MetricSet::new();
        for o in OUTPUTS.iter().filter(|o| metrics.contains(o.metric)) {
            if let Some(why) = capability.why_not(&o.metric.name) {
                return Err(Error::config(why.to_string()));
            }
            chosen.insert(o.metric);
        }
        let nli = OUTPUTS
            .iter()
            .any(|o| o.nli && chosen.contains(o.metric))
            .then_some(capability.nli)
            .flatten();
        Ok(CrossPlan {
            folder,
            metrics: chosen,
            nli,
        })
    }

    /// The stage's output fields: the chosen metrics', and with a span
    /// detector's `cross_score` its spans ([`CROSS_SPANS`]).
    pub fn fields(&self) -> Vec<Field> {
        let mut fields = cross_fields(&self.metrics);
        if self.folder.head == CrossHead::Tokens && self.metrics.contains(&metric::CROSS_SCORE) {
            fields.push(super::span_stage::spans_field());
        }
        fields
    }

    /// What changes this stage's values, for the run's fingerprint: the
    /// model's files, how its outputs are read, the metrics.
    pub fn fingerprint(&self, options: &CrossOptions) -> Result<(String, Value), Error> {
        let f = &self.folder;
        let mut v = json!({
            "model_sha256": f.files.content_sha256()?,
            "architecture": f.architecture,
            "labels": f.labels,
            "activation": f.activation.name(),
            "max_length": f.max_length(),
            "nli_labels": self.nli.map(|n| json!([n.entailment, n.contradiction])),
            "precision": options.precision.fingerprint_text(),
            "metrics": self.metrics.iter().map(|m| m.name.clone()).collect::<Vec<_>>(),
        });
        if f.drops_token_types() {
            v["token_types"] = json!(false);
        }
        if f.head == CrossHead::Tokens {
            v["detector"] = json!(super::spans::DETECTOR);
            // cross_score became the support (1 − the detector's score):
            // a run started before it must not resume into the other sense.
            v["cross_score"] = json!("support");
        }
        // The plain pair names no recipe, so earlier runs still resume.
        if !f.recipe.is_plain() {
            v["recipe"] = f.recipe.fingerprint();
        }
        Ok(("cross".into(), v))
    }

    /// Loads the model: the stage (a span detector's, for a token
    /// classifier).
    pub fn load(&self, options: &CrossOptions) -> Result<Box<dyn Stage>, Error> {
        if self.folder.head == CrossHead::Tokens {
            return Ok(Box::new(super::span_stage::SpanStage::load(
                self.folder.clone(),
                options,
            )?));
        }
        Ok(Box::new(self.stage(self.load_model(options)?, options)?))
    }

    /// Loads the model alone, to share it with another user of the same
    /// `--cross-model` (the fact ratio's `--fact-check nli`).
    pub fn load_model(&self, options: &CrossOptions) -> Result<Arc<CrossEncoder>, Error> {
        Ok(Arc::new(CrossEncoder::load(self.folder.clone(), options)?))
    }

    /// The stage over a model already loaded from this plan's folder.
    pub fn stage(
        &self,
        model: Arc<CrossEncoder>,
        options: &CrossOptions,
    ) -> Result<CrossStage, Error> {
        let store = match &options.store {
            Some(root) => Some(PairStore::open(
                root,
                &self.folder,
                options,
                self.nli.is_some(),
            )?),
            None => None,
        };
        Ok(CrossStage {
            model,
            plan: self.clone(),
            report: CrossReport::default(),
            memo: Memo::new(options.cache_bytes, store),
        })
    }
}

/// The cross-encoder metrics of a run.
pub struct CrossStage {
    model: Arc<CrossEncoder>,
    plan: CrossPlan,
    report: CrossReport,
    /// Pairs' scores by direction and texts ([`pair_key`]), in memory and
    /// kept between runs (`--embed-cache`).
    memo: Memo,
}

/// The cache's key of (first, second) in a direction: the first text's
/// length before the texts, so no two pairs share a key.
fn pair_key(direction: char, first: &str, second: &str) -> String {
    format!("{direction}{}:{first}{second}", first.len())
}

impl CrossStage {
    fn outputs(&self) -> impl Iterator<Item = &'static Output> + '_ {
        OUTPUTS
            .iter()
            .filter(|o| self.plan.metrics.contains(o.metric))
    }

    /// The scores of `pairs` (as given: first, second), from the cache or
    /// the model; the model sees each pair the cache lacks once.
    fn scores(
        &mut self,
        direction: char,
        pairs: &[(&str, &str)],
    ) -> Result<Vec<Arc<Vec<f32>>>, Error> {
        let keys: Vec<String> = pairs
            .iter()
            .map(|(a, b)| pair_key(direction, a, b))
            .collect();
        let (model, softmax) = (&self.model, self.plan.nli.is_some());
        self.memo
            .values(&keys, &mut self.report, |missing, report| {
                let asked: Vec<(&str, &str)> = missing.iter().map(|&k| pairs[k]).collect();
                Ok(if model.scores_support() {
                    model
                        .support(&asked, report)?
                        .into_iter()
                        .map(|s| vec![s.score])
                        .collect()
                } else {
                    model
                        .predict(&asked, softmax, report)?
                        .into_iter()
                        .map(|p| p.values)
                        .collect()
                })
            })
    }
}

impl Stage for CrossStage {
    fn fields(&self) -> Vec<Field> {
        cross_fields(&self.plan.metrics)
    }

    /// Rows that cannot be scored (see [`RowBatch::unscorable`]) get nulls.
    fn score(&mut self, batch: &RowBatch, _: &ScoreColumns) -> Result<ScoreColumns, Error> {
        let n = batch.len();
        let mut index: HashMap<(&str, &str), usize> = HashMap::new();
        let mut pairs: Vec<(&str, &str)> = Vec::new();
        let rows: Vec<Option<usize>> = (0..n)
            .map(|i| {
                batch.unscorable(i).is_none().then(|| {
                    let key = (
                        batch.reference().get(i).expect("scorable"),
                        batch.output().get(i).expect("scorable"),
                    );
                    *index.entry(key).or_insert_with(|| {
                        pairs.push(key);
                        pairs.len() - 1
                    })
                })
            })
            .collect();
        let (forward, backward) = (
            self.outputs().any(|o| o.forward),
            self.outputs().any(|o| o.backward),
        );
        let f = if forward {
            Some(self.scores('f', &pairs)?)
        } else {
            None
        };
        let swapped: Vec<(&str, &str)> = pairs.iter().map(|&(r, o)| (o, r)).collect();
        let b = if backward {
            Some(self.scores('b', &swapped)?)
        } else {
            None
        };
        let scored: Vec<Scored> = (0..pairs.len())
            .map(|k| Scored {
                forward: f.as_ref().map(|v| Arc::clone(&v[k])),
                backward: b.as_ref().map(|v| Arc::clone(&v[k])),
            })
            .collect();
        let mut out = ScoreColumns::default();
        for o in self.outputs() {
            let array: Float32Array = rows
                .iter()
                .map(|k| k.and_then(|k| (o.value)(&scored[k], self.plan.nli)))
                .collect();
            out.push(
                Field::new(o.metric.name.clone(), DataType::Float32, true),
                Arc::new(array) as ArrayRef,
            );
        }
        Ok(out)
    }

    /// The model, how its outputs are read, and the run's counters.
    fn summary(&self) -> Option<(&'static str, Value)> {
        let f = &self.plan.folder;
        let r = &self.report;
        let forward = r.forward.as_secs_f64();
        Some((
            "cross",
            json!({
                "model": f.files.dir.display().to_string(),
                "family": f.files.family,
                "architecture": f.architecture,
                "labels": f.labels,
                "activation": f.activation.name(),
                "activation_from": f.activation_from,
                "nli_labels": self.plan.nli.map(|n| json!({
                    "entailment": f.labels[n.entailment],
                    "contradiction": n.contradiction.map(|c| f.labels[c].clone()),
                })),
                "recipe": f.recipe.name(),
                "recipe_from": f.recipe.from,
                // null: no limit (HHEM-2.1-Open's predict truncates nothing).
                "max_length": (self.model.max_len() != usize::MAX).then(|| self.model.max_len()),
                "pairs_scored": r.pairs,
                "pairs_chunked": r.chunked,
                "chunks_scored": r.inputs,
                "pairs_truncated": r.truncated,
                "pairs_reused": r.reused,
                "pairs_from_embed_cache": r.from_store,
                "tokens": r.tokens,
                "forward_seconds": forward,
                "pairs_per_second": if forward > 0.0 { r.pairs as f64 / forward } else { 0.0 },
            }),
        ))
    }
}
