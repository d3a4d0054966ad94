//! What `--metrics` and `--threshold` accept, read against the metric
//! registry (`refscore_core::metric`), and which stages a run needs.

use refscore_core::metric::{self, Catalog, Group, MetricSet};
use refscore_core::Error;

/// Which metrics a run computes.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricPlan {
    /// The metrics, in output order.
    pub metrics: MetricSet,
    /// True when the user named the metrics (so a metric that cannot run is
    /// an error, not a silent skip).
    pub explicit: bool,
}

/// Pass thresholds used in the summary unless `--threshold` says otherwise:
/// every metric's default, from the run's catalog.
pub fn default_thresholds(catalog: &Catalog) -> Vec<(String, f64)> {
    catalog
        .iter()
        .map(|m| (m.name.to_string(), m.default_threshold))
        .collect()
}

/// Reads one `--threshold METRIC=VALUE` (`score` and `report` take the same
/// flag): a metric `known` accepts and a finite number.
pub fn parse_threshold(
    t: &str,
    known: &dyn Fn(&str) -> Result<(), Error>,
) -> Result<(String, f64), Error> {
    let (k, v) = t
        .split_once('=')
        .ok_or_else(|| Error::usage(format!("--threshold {t}: expected METRIC=VALUE")))?;
    // A malformed flag value, like a bad number: a usage error (64).
    known(k).map_err(|e| Error::usage(format!("--threshold {t}: {}", e.message)))?;
    let v: f64 = v
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| Error::usage(format!("--threshold {t}: '{v}' is not a finite number")))?;
    Ok((k.to_string(), v))
}

/// Whether `report --threshold` takes `name`: any name here; the report
/// checks it against the result's metrics (a defined judge metric is known
/// only there).
pub fn report_metric(_name: &str) -> Result<(), Error> {
    Ok(())
}

/// Every name `--metrics` takes: the metrics', then "all" and the groups'.
fn all_names(catalog: &Catalog) -> Vec<&str> {
    let mut names: Vec<&str> = catalog
        .iter()
        .filter(|m| m.group != Group::Judge)
        .map(|m| m.name.as_str())
        .collect();
    names.push("all");
    names.extend(metric::group_names());
    names
}

impl MetricPlan {
    /// True when any embedding metric is selected.
    pub fn wants_embedding(&self) -> bool {
        self.metrics.has_group(Group::Embedding)
    }

    /// True when any judge metric is selected.
    pub fn wants_judge(&self) -> bool {
        self.metrics.has_group(Group::Judge)
    }

    /// True when any cross-encoder metric is selected.
    pub fn wants_cross(&self) -> bool {
        self.metrics.has_group(Group::Cross)
    }
}

/// Fails unless `name` is a metric of `catalog`.
pub fn check_known(name: &str, catalog: &Catalog) -> Result<(), Error> {
    match catalog.find(name) {
        Some(_) => Ok(()),
        None => Err(unknown(name, catalog)),
    }
}

/// A metric name nothing knows: a malformed flag value (64).
fn unknown(name: &str, catalog: &Catalog) -> Error {
    Error::usage(format!(
        "unknown metric '{name}'; known metrics and groups: {}",
        all_names(catalog).join(", ")
    ))
}

/// Which optional stages a run has what they need for: a judge endpoint, a
/// cross-encoder (and what it can give). Their groups are in the default
/// selection only then, and naming their metrics without it is an error.
#[derive(Debug, Clone, Default)]
pub struct Configured {
    /// `--judge-url` (or a panel) is set, or the fact ratio is wholly local.
    pub judge: bool,
    /// No judge, but `--facts sentences --fact-check nli`: of the judge
    /// metrics only fact_similarity can run.
    pub local_facts_only: bool,
    /// `--cross-model`'s model, as far as the metrics care.
    pub cross: Option<refscore_embed::CrossCapability>,
}

impl Configured {
    fn has(&self, g: Group) -> bool {
        match g {
            Group::Judge => self.judge,
            Group::Cross => self.cross.is_some(),
            Group::Lexical | Group::Embedding => true,
        }
    }

    /// Whether a group word (a group, a family, `all`, the default) keeps
    /// `m`: a cross metric only where the model gives it.
    fn keeps(&self, m: &metric::Metric) -> bool {
        match m.group {
            Group::Cross => self.cross.as_ref().is_none_or(|c| c.gives(&m.name)),
            Group::Judge if self.local_facts_only => m.name == metric::FACT_SIMILARITY.name,
            _ => true,
        }
    }
}

/// The groups a run computes by default: every group whose stage is
/// configured ([`Configured`]).
fn default_groups(configured: &Configured) -> Vec<Group> {
    Group::ALL
        .into_iter()
        .filter(|g| configured.has(*g))
        .collect()
}

/// Turns the `--metrics` list (None = default) into a plan over `catalog`
/// (the built-ins and the defined judge metrics); `configured` says which
/// optional stages the run can have (the default includes their metrics
/// only then, and naming one without its stage is an error).
pub fn plan(
    names: Option<&[String]>,
    configured: &Configured,
    catalog: &Catalog,
) -> Result<MetricPlan, Error> {
    let Some(names) = names else {
        let mut metrics = MetricSet::new();
        for m in catalog.of_groups(&default_groups(configured)).iter() {
            if configured.keeps(m) {
                metrics.insert(m);
            }
        }
        return Ok(MetricPlan {
            metrics,
            explicit: false,
        });
    };
    let mut metrics = MetricSet::new();
    for raw in names {
        let name = raw.trim();
        let chosen = match name {
            "" => continue,
            "all" => catalog
                .of_groups(&default_groups(configured))
                .iter()
                .cloned()
                .collect(),
            _ => catalog.named(name).ok_or_else(|| unknown(name, catalog))?,
        };
        if let Some(m) = catalog.find(name).filter(|m| {
            configured.local_facts_only && m.group == Group::Judge && !configured.keeps(m)
        }) {
            return Err(Error::config(format!(
                "{} needs a judge endpoint: pass --judge-url URL (without one, only fact_similarity runs, with --facts sentences --fact-check nli)",
                m.name
            )));
        }
        let cross = configured.cross.as_ref();
        if let (Some(m), Some(c)) = (catalog.find(name), cross) {
            // A metric named outright that the model cannot give.
            if let Some(why) = c.why_not(&m.name) {
                return Err(Error::config(why.to_string()));
            }
        }
        let kept: Vec<_> = chosen.iter().filter(|m| configured.keeps(m)).collect();
        if kept.is_empty() && !chosen.is_empty() {
            // A group word of cross metrics the model gives none of.
            let why = chosen
                .iter()
                .find_map(|m| cross.and_then(|c| c.why_not(&m.name)))
                .unwrap_or("the cross-encoder gives none of these metrics");
            return Err(Error::config(format!("--metrics {name}: {why}")));
        }
        for m in kept {
            metrics.insert(m);
        }
    }
    if metrics.is_empty() {
        return Err(Error::usage("--metrics selects no metric"));
    }
    if metrics.has_group(Group::Judge) && !configured.judge {
        return Err(Error::config(
            "judge metrics need a judge endpoint: pass --judge-url URL (and --judge-model NAME)",
        ));
    }
    if let Some(m) = metrics
        .iter()
        .find(|m| m.group == Group::Cross)
        .filter(|_| configured.cross.is_none())
    {
        return Err(Error::config(format!(
            "{} needs a cross-encoder: pass --cross-model PATH (a *ForSequenceClassification folder)",
            m.name
        )));
    }
    Ok(MetricPlan {
        metrics,
        explicit: true,
    })
}

#[cfg(test)]
mod tests {
    use refscore_lexical::Selection;

    use super::*;

    /// The stages name their metric columns from the registry: with every
    /// metric chosen, the lexical, embedding and judge stages' fields before
    /// the judge's accounting columns are exactly the registry's columns, in
    /// registry order.
    #[test]
    fn the_stages_write_the_registrys_columns() {
        let all = Catalog::builtin().of_groups(&Group::ALL);
        let mut written: Vec<String> = refscore_lexical::fields(Selection::of(&all))
            .into_iter()
            .chain(refscore_embed::fields(&all))
            .chain(refscore_embed::cross_fields(&all))
            .chain(refscore_judge::JudgeMetrics::builtin().fields(&all))
            .map(|f| f.name().clone())
            .collect();
        let accounting = refscore_core::schema::JUDGE_USAGE.len() + 1;
        written.truncate(written.len() - accounting);
        let registry: Vec<&str> = metric::BUILTIN
            .iter()
            .flat_map(|m| m.output_columns().iter().map(String::as_str))
            .collect();
        assert_eq!(written, registry);
    }

    #[test]
    fn groups_and_families_expand_and_the_judge_needs_an_endpoint() {
        let names = |list: &[&str]| -> Vec<String> { list.iter().map(|s| s.to_string()).collect() };
        let builtin = Catalog::builtin();
        let plan = |names: Option<&[String]>, judge| {
            plan(
                names,
                &Configured {
                    judge,
                    ..Configured::default()
                },
                &builtin,
            )
        };
        let p = plan(Some(&names(&["bertscore", "token_f1"])), false).unwrap();
        let chosen: Vec<&str> = p.metrics.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(
            chosen,
            [
                "token_f1",
                "bertscore_precision",
                "bertscore_recall",
                "bertscore_f1"
            ]
        );
        assert!(p.wants_embedding() && !p.wants_judge());
        let all = plan(Some(&names(&["all"])), false).unwrap();
        assert!(
            !all.wants_judge(),
            "all without an endpoint leaves the judge out"
        );
        let err = plan(Some(&names(&["similarity"])), false).unwrap_err();
        assert_eq!(err.class, refscore_core::ErrorClass::Config);
        let err = plan(Some(&names(&["vibes"])), true).unwrap_err();
        assert_eq!(err.class, refscore_core::ErrorClass::Usage);
        assert!(err.message.contains("bertscore"), "{}", err.message);
        // Cross-encoder metrics: in the default only with a model; named
        // without one, a settings error naming the flag.
        assert!(!all.wants_cross());
        let err = plan(Some(&names(&["nli"])), false).unwrap_err();
        assert_eq!(err.class, refscore_core::ErrorClass::Config);
        assert!(err.message.contains("--cross-model"), "{}", err.message);
        // With a model: the default and the group words take what it gives.
        let folder = |name: &str| {
            let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/models")
                .join(name);
            refscore_embed::CrossFolder::read(&dir).unwrap()
        };
        let with = |name: &str| Configured {
            cross: Some(refscore_embed::CrossCapability::of(&folder(name), None).unwrap()),
            ..Configured::default()
        };
        let chosen = |p: MetricPlan| -> Vec<String> {
            p.metrics
                .iter()
                .filter(|m| m.group == Group::Cross)
                .map(|m| m.name.clone())
                .collect()
        };
        let nli = with("tiny-cross-roberta-nli");
        let all_nli = [
            "nli_precision",
            "nli_recall",
            "nli_equivalence",
            "nli_contradiction",
        ];
        assert_eq!(chosen(super::plan(None, &nli, &builtin).unwrap()), all_nli);
        let cross = names(&["cross"]);
        assert_eq!(
            chosen(super::plan(Some(&cross), &nli, &builtin).unwrap()),
            all_nli
        );
        let two_way = with("tiny-cross-distilbert-2way");
        assert_eq!(
            chosen(super::plan(Some(&names(&["nli"])), &two_way, &builtin).unwrap()),
            ["nli_precision", "nli_recall", "nli_equivalence"]
        );
        let sts = with("tiny-cross-bert");
        assert_eq!(
            chosen(super::plan(Some(&cross), &sts, &builtin).unwrap()),
            ["cross_score"]
        );
        // Named outright, or a group it gives nothing of: refused (78).
        for (words, c) in [
            (&["nli_contradiction"][..], &two_way),
            (&["cross_score"], &nli),
            (&["nli"], &sts),
        ] {
            let err = super::plan(Some(&names(words)), c, &builtin).unwrap_err();
            assert_eq!(err.class, refscore_core::ErrorClass::Config, "{words:?}");
        }
    }
}
