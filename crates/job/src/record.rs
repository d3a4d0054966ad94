//! The run record's format, and earlier formats read into today's so that
//! a run interrupted before an upgrade still resumes when its settings are
//! equal.
//!
//! Format 1 (no `format` key) flagged each built-in metric of a group by
//! its position in that version's registry (`lexical`, `embedding` and
//! `judge` settings), listed every built-in prompt template's version by
//! position (`judge_templates`) and kept every built-in's pass threshold:
//! adding any built-in metric changed the record of every run. Format 2
//! names the chosen metrics (`metrics`), keeps their thresholds alone and
//! keys the prompt versions by metric name.

use serde_json::{json, Map, Value};

/// The run record format this version writes.
pub(crate) const FORMAT: u64 = 2;

/// Format 1's built-in metrics of each group, in the order its flags list
/// them. Frozen: the registry of the versions that wrote format 1, whatever
/// the registry holds today.
const LEXICAL: [&str; 5] = [
    "exact_match",
    "contains_match",
    "exact_match_norm",
    "contains_match_norm",
    "token_f1",
];
const EMBEDDING: [&str; 4] = [
    "cosine",
    "bertscore_precision",
    "bertscore_recall",
    "bertscore_f1",
];
const JUDGE: [&str; 3] = ["meaning_match", "similarity", "fact_similarity"];

/// Why a record cannot be compared with today's: it names no format this
/// version knows how to read.
#[derive(Debug, PartialEq)]
pub(crate) enum Unreadable {
    /// Written by an earlier refscore in a form this one cannot map.
    Older,
    /// Written by a later refscore (its format number).
    Newer(u64),
}

/// `record` in today's format: as it is when it is today's, mapped when it
/// is format 1 and every part of it can be mapped.
pub(crate) fn upgrade(record: &Value) -> Result<Value, Unreadable> {
    match record.get("format").map(Value::as_u64) {
        Some(Some(FORMAT)) => Ok(record.clone()),
        Some(Some(n)) if n > FORMAT => Err(Unreadable::Newer(n)),
        Some(_) => Err(Unreadable::Older),
        None => from_format_1(record).ok_or(Unreadable::Older),
    }
}

/// A format 1 record as format 2 holds the same run; `None` where a part
/// does not have the shape format 1's last versions wrote (an earlier
/// registry, damage).
fn from_format_1(record: &Value) -> Option<Value> {
    let mut settings = record.get("settings")?.as_object()?.clone();
    let mut metrics: Vec<String> = Vec::new();
    let lexical = settings.remove("lexical")?;
    let lexical = lexical
        .as_str()?
        .strip_prefix("Selection([")?
        .strip_suffix("])")?;
    let flags: Vec<Value> = lexical
        .split(", ")
        .map(|f| f.parse::<bool>().ok().map(Value::Bool))
        .collect::<Option<_>>()?;
    metrics.extend(chosen(&LEXICAL, &flags)?);
    if let Some(flags) = settings.remove("embedding") {
        metrics.extend(chosen(&EMBEDDING, flags.as_array()?)?);
    }
    if let Some(cross) = settings.get("cross") {
        for name in cross.get("metrics")?.as_array()? {
            metrics.push(name.as_str()?.to_string());
        }
    }
    let judge = match settings.remove("judge") {
        Some(flags) => chosen(&JUDGE, flags.as_array()?)?,
        None => Vec::new(),
    };
    if let Some(versions) = settings.remove("judge_templates") {
        settings.insert("judge_templates".into(), templates(&versions, &judge)?);
    }
    metrics.extend(judge);
    // Defined judge metrics by name, after the built-ins: their output order.
    if let Some(defined) = settings.get("judge_metrics") {
        metrics.extend(defined.as_object()?.keys().cloned());
    }
    let thresholds: Vec<Value> = record
        .get("thresholds")?
        .as_array()?
        .iter()
        .filter(|t| {
            t[0].as_str()
                .is_some_and(|n| metrics.iter().any(|m| m == n))
        })
        .cloned()
        .collect();
    let mut out = Map::new();
    out.insert("format".into(), json!(FORMAT));
    out.insert("inputs".into(), record.get("inputs")?.clone());
    out.insert("shard".into(), record.get("shard")?.clone());
    out.insert("metrics".into(), json!(metrics));
    out.insert("thresholds".into(), json!(thresholds));
    out.insert("settings".into(), Value::Object(settings));
    if let Some(version) = record.get("table_version") {
        out.insert("table_version".into(), version.clone());
    }
    Some(Value::Object(out))
}

/// The names `flags` marks, by position in `names`; `None` unless there is
/// one boolean flag per name.
fn chosen(names: &[&str], flags: &[Value]) -> Option<Vec<String>> {
    if flags.len() != names.len() {
        return None;
    }
    let mut out = Vec::new();
    for (name, flag) in names.iter().zip(flags) {
        if flag.as_bool()? {
            out.push(name.to_string());
        }
    }
    Some(out)
}

/// Format 1's prompt versions (Meaning Match's, the similarity rubric's,
/// the fact ratio's extraction and check) as format 2 keeps them: by the
/// name of each chosen built-in judge metric.
fn templates(versions: &Value, judge: &[String]) -> Option<Value> {
    let v: Vec<&str> = versions
        .as_array()?
        .iter()
        .map(Value::as_str)
        .collect::<Option<_>>()?;
    let [meaning_match, similarity, extract, check] = v[..] else {
        return None;
    };
    let mut out = Map::new();
    for name in judge {
        let version = match name.as_str() {
            "meaning_match" => meaning_match.to_string(),
            "similarity" => similarity.to_string(),
            _ => format!("{extract},{check}"),
        };
        out.insert(name.clone(), json!(version));
    }
    Some(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A format 1 record as its last versions wrote it for a run of every
    /// stage: two lexical metrics, two embedding ones, a cross metric, two
    /// built-in judge metrics and a defined one (`tone`).
    fn format_1() -> Value {
        // By name, as the CLI kept them.
        let mut thresholds: Vec<(String, f64)> = (refscore_core::metric::BUILTIN.iter())
            .map(|m| (m.name.clone(), m.default_threshold))
            .chain([("tone".to_string(), 0.6)])
            .collect();
        thresholds.sort_by(|a, b| a.0.cmp(&b.0));
        json!({
            "inputs": [{"path": "in.parquet", "size": 10, "modified": "1", "footer_sha256": "f"}],
            "shard": "1/2",
            "thresholds": thresholds,
            "settings": {
                "batch_size": 64,
                "lexical": "Selection([true, false, false, false, true])",
                "embedding": [true, false, false, true],
                "model_files": "m",
                "cross": {"model_sha256": "c", "metrics": ["nli_equivalence"]},
                "judge": [true, false, true],
                "judge_templates": ["mm", "sim", "extract", "check"],
                "judge_metrics": {"tone": {"version": "t"}},
            },
            "table_version": 3,
        })
    }

    #[test]
    fn a_format_1_record_names_the_metrics_its_flags_chose() {
        let now = upgrade(&format_1()).unwrap();
        assert_eq!(now["format"], json!(FORMAT));
        assert_eq!(
            now["metrics"],
            json!([
                "exact_match",
                "token_f1",
                "cosine",
                "bertscore_f1",
                "nli_equivalence",
                "meaning_match",
                "fact_similarity",
                "tone"
            ])
        );
        // Only the chosen metrics' thresholds, in the order they were kept.
        let kept: Vec<&str> = (now["thresholds"].as_array().unwrap().iter())
            .map(|t| t[0].as_str().unwrap())
            .collect();
        assert_eq!(
            kept,
            [
                "bertscore_f1",
                "cosine",
                "exact_match",
                "fact_similarity",
                "meaning_match",
                "nli_equivalence",
                "token_f1",
                "tone"
            ]
        );
        let settings = now["settings"].as_object().unwrap();
        for flags in ["lexical", "embedding", "judge"] {
            assert!(!settings.contains_key(flags), "{flags} flags are kept");
        }
        assert_eq!(
            settings["judge_templates"],
            json!({"meaning_match": "mm", "fact_similarity": "extract,check"})
        );
        for same in ["batch_size", "model_files", "cross", "judge_metrics"] {
            assert_eq!(settings[same], format_1()["settings"][same], "{same}");
        }
        for same in ["inputs", "shard", "table_version"] {
            assert_eq!(now[same], format_1()[same], "{same}");
        }
        // Today's format is read as it is.
        assert_eq!(upgrade(&now).unwrap(), now);
    }

    #[test]
    fn a_record_of_another_registry_or_a_later_format_is_unreadable() {
        let mut r = format_1();
        r["settings"]["lexical"] = json!("Selection([true, false, false, false, true, false])");
        assert_eq!(upgrade(&r), Err(Unreadable::Older));
        let mut r = format_1();
        r["settings"]["judge_templates"] = json!(["mm", "sim", "extract"]);
        assert_eq!(upgrade(&r), Err(Unreadable::Older));
        let mut r = format_1();
        r["settings"]["embedding"] = json!([true, false]);
        assert_eq!(upgrade(&r), Err(Unreadable::Older));
        let mut r = format_1();
        r["settings"].as_object_mut().unwrap().remove("lexical");
        assert_eq!(upgrade(&r), Err(Unreadable::Older));
        assert_eq!(
            upgrade(&json!({"format": FORMAT + 1})),
            Err(Unreadable::Newer(FORMAT + 1))
        );
        assert_eq!(upgrade(&json!({"format": "2"})), Err(Unreadable::Older));
    }
}
