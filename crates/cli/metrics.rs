//! Metric names, groups and default pass thresholds: what `--metrics`
//! accepts and which stages a run needs.

use refscore_batch::Error;
use refscore_lexical::{Selection, METRICS as LEXICAL};

/// Which metrics a run computes, per stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricPlan {
    /// Lexical metrics.
    pub lexical: Selection,
    /// True when the user named the metrics (so a metric that cannot run is
    /// an error, not a silent skip).
    pub explicit: bool,
}

/// Pass thresholds used in the summary unless `--threshold` says otherwise.
pub const DEFAULT_THRESHOLDS: &[(&str, f64)] = &[
    ("exact_match", 1.0),
    ("contains_match", 1.0),
    ("exact_match_norm", 1.0),
    ("contains_match_norm", 1.0),
    ("token_f1", 0.5),
];

const GROUPS: &[&str] = &["all", "lexical"];

fn all_names() -> Vec<&'static str> {
    LEXICAL.iter().copied().chain(GROUPS.iter().copied()).collect()
}

/// Fails unless `name` is a metric column name.
pub fn check_known(name: &str) -> Result<(), Error> {
    if LEXICAL.contains(&name) {
        Ok(())
    } else {
        Err(unknown(name))
    }
}

fn unknown(name: &str) -> Error {
    Error::config(format!("unknown metric '{name}'; known metrics and groups: {}", all_names().join(", ")))
}

/// Turns the `--metrics` list (None = default) into a plan.
pub fn plan(names: Option<&[String]>) -> Result<MetricPlan, Error> {
    let Some(names) = names else {
        return Ok(MetricPlan { lexical: Selection::ALL, explicit: false });
    };
    let mut lexical = Selection::NONE;
    for raw in names {
        let name = raw.trim();
        match name {
            "" => continue,
            "all" => lexical = Selection::ALL,
            "lexical" => lexical = Selection::ALL,
            _ => match LEXICAL.iter().position(|m| *m == name) {
                Some(k) => lexical.0[k] = true,
                None => return Err(unknown(name)),
            },
        }
    }
    if lexical.is_empty() {
        return Err(Error::config("--metrics selects no metric"));
    }
    Ok(MetricPlan { lexical, explicit: true })
}
