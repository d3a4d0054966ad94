//! Metric names, groups and default pass thresholds: what `--metrics`
//! accepts and which stages a run needs.

use refscore_batch::Error;
use refscore_embed::METRICS as EMBEDDING;
use refscore_judge::METRICS as JUDGE;
use refscore_lexical::{Selection, METRICS as LEXICAL};

/// Which metrics a run computes, per stage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MetricPlan {
    /// Lexical metrics.
    pub lexical: Selection,
    /// Embedding metrics, indexed like `refscore_embed::METRICS`.
    pub embedding: [bool; 4],
    /// Judge metrics, indexed like `refscore_judge::METRICS`.
    pub judge: [bool; 3],
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
    ("cosine", 0.7),
    ("bertscore_precision", 0.8),
    ("bertscore_recall", 0.8),
    ("bertscore_f1", 0.8),
    ("meaning_match", 1.0),
    ("similarity", 0.7),
    ("fact_similarity", 0.5),
];

/// Reads one `--threshold METRIC=VALUE` (`score` and `report` take the same
/// flag): a known metric and a finite number.
pub fn parse_threshold(t: &str) -> Result<(String, f64), Error> {
    let (k, v) = t
        .split_once('=')
        .ok_or_else(|| Error::usage(format!("--threshold {t}: expected METRIC=VALUE")))?;
    // A malformed flag value, like a bad number: a usage error (64).
    check_known(k).map_err(|e| Error::usage(format!("--threshold {t}: {}", e.message)))?;
    let v: f64 = v
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite())
        .ok_or_else(|| Error::usage(format!("--threshold {t}: '{v}' is not a finite number")))?;
    Ok((k.to_string(), v))
}

const GROUPS: &[&str] = &["all", "lexical", "embedding", "bertscore", "judge"];

fn all_names() -> Vec<&'static str> {
    LEXICAL
        .iter()
        .chain(EMBEDDING.iter())
        .chain(GROUPS.iter())
        .copied()
        .collect()
}

impl MetricPlan {
    /// True when any embedding metric is selected.
    pub fn wants_embedding(&self) -> bool {
        self.embedding.iter().any(|&b| b)
    }

    /// True when any judge metric is selected.
    pub fn wants_judge(&self) -> bool {
        self.judge.iter().any(|&b| b)
    }
}

/// Fails unless `name` is a metric column name.
pub fn check_known(name: &str) -> Result<(), Error> {
    if LEXICAL.contains(&name) || EMBEDDING.contains(&name) || JUDGE.contains(&name) {
        Ok(())
    } else {
        Err(unknown(name))
    }
}

/// A metric name nothing knows: a malformed flag value (64).
fn unknown(name: &str) -> Error {
    Error::usage(format!(
        "unknown metric '{name}'; known metrics and groups: {}",
        all_names().join(", ")
    ))
}

/// Turns the `--metrics` list (None = default) into a plan; `judge_configured`
/// says whether a judge endpoint is set (the default includes judge metrics
/// only then, and naming one without an endpoint is an error).
pub fn plan(names: Option<&[String]>, judge_configured: bool) -> Result<MetricPlan, Error> {
    let Some(names) = names else {
        return Ok(MetricPlan {
            lexical: Selection::ALL,
            embedding: [true; 4],
            judge: [judge_configured; 3],
            explicit: false,
        });
    };
    let mut judge = [false; 3];
    let mut lexical = Selection::NONE;
    let mut embedding = [false; 4];
    for raw in names {
        let name = raw.trim();
        match name {
            "" => continue,
            "all" => {
                lexical = Selection::ALL;
                embedding = [true; 4];
                judge = [judge_configured; 3];
            }
            "judge" => judge = [true; 3],
            "lexical" => lexical = Selection::ALL,
            "embedding" => embedding = [true; 4],
            "bertscore" => embedding[1..].iter_mut().for_each(|b| *b = true),
            _ => {
                if let Some(k) = LEXICAL.iter().position(|m| *m == name) {
                    lexical.0[k] = true;
                } else if let Some(k) = EMBEDDING.iter().position(|m| *m == name) {
                    embedding[k] = true;
                } else if let Some(k) = JUDGE.iter().position(|m| *m == name) {
                    judge[k] = true;
                } else {
                    return Err(unknown(name));
                }
            }
        }
    }
    if lexical.is_empty() && !embedding.iter().any(|&b| b) && !judge.iter().any(|&b| b) {
        return Err(Error::usage("--metrics selects no metric"));
    }
    if judge.iter().any(|&b| b) && !judge_configured {
        return Err(Error::config(
            "judge metrics need a judge endpoint: pass --judge-url URL (and --judge-model NAME)",
        ));
    }
    Ok(MetricPlan {
        lexical,
        embedding,
        judge,
        explicit: true,
    })
}
