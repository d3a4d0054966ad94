//! The judge stage as the pipeline plans it: the endpoints built (one
//! judge or a panel), the fact checker loaded, not yet probed. Its columns,
//! fingerprint and footer come through the pipeline's loop over stage
//! plans; the stage itself is built per job pass through
//! [`JudgePlan::stage`] (its journal and batches are the pass's) and probed
//! here.

use arrow::datatypes::Field;
use refscore_core::metric::MetricSet;
use refscore_core::schema::footer;
use refscore_core::{Error, Stage, StagePlan};
use serde_json::{json, Value};

use crate::batch::BatchMode;
use crate::options::{stage_options, JudgeSettings, LOCAL_FACTS_URL};
use crate::{
    Endpoint, JudgeMetrics, JudgeOptions, JudgePanel, NliFactCheck, PanelMember, PanelMode,
};

/// The judge stage of a run, resolved: what it needs to be built, pass by
/// pass or once (an in-memory scorer).
pub struct JudgePlan {
    settings: JudgeSettings,
    /// The judge (a panel's first).
    endpoint: Endpoint,
    /// A panel's judges (the first is `endpoint`), by name; empty for one.
    panel: Vec<(String, Endpoint)>,
    /// `--fact-check nli`'s model, loaded, when the run checks facts so.
    fact_check: Option<NliFactCheck>,
    metrics: MetricSet,
    thresholds: Vec<(String, f64)>,
    judge_metrics: JudgeMetrics,
    where_column: Option<String>,
}

/// What a [`JudgePlan`] is made of, as the run's settings give it.
pub struct JudgeParts {
    /// The run's judge settings.
    pub settings: JudgeSettings,
    /// The judge (a panel's first).
    pub endpoint: Endpoint,
    /// A panel's judges by name; empty for one judge.
    pub panel: Vec<(String, Endpoint)>,
    /// `--fact-check nli`'s model, loaded.
    pub fact_check: Option<NliFactCheck>,
    /// The run's metrics (the judge's are those of its group).
    pub metrics: MetricSet,
    /// Pass thresholds by metric.
    pub thresholds: Vec<(String, f64)>,
    /// The judge metrics the run knows.
    pub judge_metrics: JudgeMetrics,
    /// `--judge-where`.
    pub where_column: Option<String>,
}

impl JudgePlan {
    /// The plan of `parts`.
    pub fn new(parts: JudgeParts) -> JudgePlan {
        JudgePlan {
            settings: parts.settings,
            endpoint: parts.endpoint,
            panel: parts.panel,
            fact_check: parts.fact_check,
            metrics: parts.metrics,
            thresholds: parts.thresholds,
            judge_metrics: parts.judge_metrics,
            where_column: parts.where_column,
        }
    }

    /// The judge endpoint (a panel's first).
    pub fn endpoint(&self) -> &Endpoint {
        &self.endpoint
    }

    /// `--judge-batch`'s mode, when the run's judge answers in batches.
    pub fn batch_mode(&self) -> Option<&BatchMode> {
        self.settings.batch.as_ref()
    }

    fn panel_mode(&self) -> Option<PanelMode> {
        self.settings.panel_mode
    }

    /// Warnings to give before the run: judges of an escalating panel that
    /// can never be unsure (see [`crate::escalation_warnings`]).
    pub fn warnings(&self) -> Vec<String> {
        crate::escalation_warnings(self.panel_mode(), &self.panel)
    }

    /// The judge stage's options at `endpoint`, with the fact checker
    /// loaded at planning.
    fn options(&self, endpoint: &Endpoint) -> JudgeOptions {
        JudgeOptions {
            fact_check: self.fact_check.clone(),
            ..stage_options(
                Some(&self.settings),
                endpoint.clone(),
                self.metrics.clone(),
                self.thresholds.clone(),
                self.judge_metrics.clone(),
                self.where_column.clone(),
            )
        }
    }

    /// Probes every judge of the run, so that a wrong URL, key or model
    /// fails before any work.
    pub fn probe(&self) -> Result<(), Error> {
        if !self.panel.is_empty() {
            return self.panel.iter().try_for_each(|(_, e)| crate::probe(e));
        }
        if self.endpoint.display_url() == LOCAL_FACTS_URL {
            // A wholly local fact ratio: no judge to probe.
            return Ok(());
        }
        crate::probe(&self.endpoint)
    }

    /// The judge stage, not probed: the one judge, or the panel.
    pub fn stage(&self) -> Result<JudgePanel, Error> {
        let member = |name: &str, e: &Endpoint| PanelMember {
            name: name.to_string(),
            options: self.options(e),
        };
        let members = match self.panel.is_empty() {
            true => vec![member("judge", &self.endpoint)],
            false => self.panel.iter().map(|(n, e)| member(n, e)).collect(),
        };
        JudgePanel::new(members, self.panel_mode())
    }

    /// The judge stage calling the endpoints, probed first.
    pub fn online(&self) -> Result<JudgePanel, Error> {
        self.probe()?;
        self.stage()
    }
}

impl StagePlan for JudgePlan {
    fn fields(&self) -> Vec<Field> {
        let mut fields = self.judge_metrics.fields(&self.metrics);
        let names: Vec<String> = self.panel.iter().map(|(n, _)| n.clone()).collect();
        fields.extend(
            self.judge_metrics
                .panel_fields(&self.metrics, &names, self.panel_mode()),
        );
        fields
    }

    fn fingerprint(&self) -> Result<Vec<(String, Value)>, Error> {
        let mut f = self.options(&self.endpoint).fingerprint(self.batch_mode());
        if let (false, Some(mode)) = (self.panel.is_empty(), self.panel_mode()) {
            let judges: Vec<Value> = self
                .panel
                .iter()
                .map(|(name, e)| json!({"name": name, "url": e.display_url(), "model": e.model}))
                .collect();
            let band = match mode {
                PanelMode::Escalate { band } => Some([band.0, band.1]),
                PanelMode::Jury => None,
            };
            f.push((
                "judge_panel".into(),
                json!({"mode": mode.name(), "band": band, "judges": judges}),
            ));
        }
        Ok(f)
    }

    /// The defined judge metrics with their versions (so a report can tell
    /// that a rubric changed between two nights) and the tier chain.
    fn footer(&self) -> Vec<(String, String)> {
        let mut out = Vec::new();
        let defined = self.judge_metrics.record(&self.metrics);
        if !defined.is_empty() {
            out.push((footer::JUDGE_METRICS.into(), json!(defined).to_string()));
        }
        if let Some(tiers) = self.settings.tiers.footer() {
            out.push((footer::TIERS.into(), tiers));
        }
        out
    }

    /// Built per pass ([`JudgePlan::stage`]), not once.
    fn load(&self) -> Result<Option<Box<dyn Stage>>, Error> {
        Ok(None)
    }
}
