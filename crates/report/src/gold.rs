//! Human labels beside a run's metrics (`--gold METRIC=COLUMN`): which
//! columns a label is compared with, what a valid label is, and one pass
//! over a result file gathering every labelled metric's
//! [`GoldState`]. `score` calls it on the result it just wrote, `report` on
//! the result it reads, so the summary and the page cannot disagree.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::{DataType, Float32Type, Float64Type, Schema};
use refscore_core::metric::{Direction, Group, Kind, BUILTIN};
use refscore_core::Error;
use refscore_read::Table;
use refscore_stats::gold::{Calibration, GoldState, LabelKind, TierGuarantee};

/// The result footer key recording a run's `--gold` mapping, so that
/// `report` finds the labels without being told again.
pub const FOOTER: &str = "refscore.gold";

/// The result footer key recording `score --gold-confidence`, where it is
/// not the default (0.9), so that `report` bounds TPR and TNR as the
/// summary did.
pub const CONFIDENCE_FOOTER: &str = "refscore.gold_confidence";

/// The guarantees of a run's tiers, from a list of tiers as the result's
/// footer (`refscore.tiers`) and the summary's `judge.tiers` give them: each
/// entry's `source` and `guarantee`, with its score's direction from the
/// registry. Entries without a guarantee promise nothing and are left out.
pub fn guarantees_of(tiers: &serde_json::Value) -> Vec<TierGuarantee> {
    tiers
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|t| {
            let source = t["source"].as_str()?.to_string();
            let guarantee = serde_json::from_value(t.get("guarantee")?.clone()).ok()?;
            let score = refscore_core::schema::source::tier_score(&source)?;
            Some(TierGuarantee {
                lower_is_better: Direction::of(score).lower_is_better(),
                source,
                guarantee,
            })
        })
        .collect()
}

/// What a result's footer says the labelled figures are measured against:
/// its tiers' guarantees, and the confidence of the TPR and TNR bounds.
fn footer_settings(table: &Table) -> Result<(Vec<TierGuarantee>, f64), Error> {
    let spec = table.spec();
    let guarantees = match table.footer_value(refscore_core::schema::footer::TIERS) {
        Some(text) => {
            let v: serde_json::Value = serde_json::from_str(text).map_err(|e| {
                Error::bad_input(format!(
                    "{spec}: footer {}: {e}",
                    refscore_core::schema::footer::TIERS
                ))
            })?;
            guarantees_of(&v)
        }
        None => Vec::new(),
    };
    let confidence = match table.footer_value(CONFIDENCE_FOOTER) {
        Some(text) => text
            .parse::<f64>()
            .ok()
            .filter(|c| *c > 0.0 && *c < 1.0)
            .ok_or_else(|| {
                Error::bad_input(format!(
                    "{spec}: footer {CONFIDENCE_FOOTER}: '{text}' is not a probability"
                ))
            })?,
        None => refscore_stats::agreement::RATE_CONFIDENCE,
    };
    Ok((guarantees, confidence))
}

/// One labelled metric and the result columns its figures read.
#[derive(Debug, Clone, PartialEq)]
pub struct GoldColumn {
    /// The metric.
    pub metric: String,
    /// The column holding its labels.
    pub column: String,
    /// How value and label are compared.
    pub kind: LabelKind,
    /// The judge's P(true) column, for a verdict that has one.
    pub p_column: Option<String>,
    /// The `<metric>_source` column, for a judge metric.
    pub source_column: Option<String>,
    /// The embedding and lexical scores of the run, recorded beside each
    /// labelled verdict.
    pub stand_ins: Vec<String>,
}

/// Parses `METRIC=COLUMN`.
pub fn parse_mapping(text: &str) -> Result<(String, String), Error> {
    match text.split_once('=') {
        Some((m, c)) if !m.trim().is_empty() && !c.trim().is_empty() => {
            Ok((m.trim().to_string(), c.trim().to_string()))
        }
        _ => Err(Error::usage(format!(
            "--gold {text}: expected METRIC=COLUMN (e.g. meaning_match=human_label)"
        ))),
    }
}

/// The mapping as the footer stores it: a JSON object, metric → column.
pub fn mapping_to_json(mapping: &[(String, String)]) -> String {
    let map: serde_json::Map<String, serde_json::Value> = mapping
        .iter()
        .map(|(m, c)| (m.clone(), serde_json::Value::String(c.clone())))
        .collect();
    serde_json::Value::Object(map).to_string()
}

/// Reads what [`mapping_to_json`] wrote.
pub fn mapping_from_json(text: &str) -> Result<Vec<(String, String)>, Error> {
    let bad = || {
        Error::bad_input(format!(
            "result footer '{FOOTER}' is not a JSON object of strings: {text}"
        ))
    };
    let value: serde_json::Value = serde_json::from_str(text).map_err(|_| bad())?;
    let map = value.as_object().ok_or_else(bad)?;
    map.iter()
        .map(|(m, c)| Ok((m.clone(), c.as_str().ok_or_else(bad)?.to_string())))
        .collect()
}

/// The labelled metrics of a result with this `schema`, each judge of a
/// panel (`<metric>__<judge>` columns) beside its metric. A metric the
/// result lacks, or a label column of a type that cannot hold the metric's
/// labels, is an error naming both (`shown` names the file).
pub fn resolve(
    schema: &Schema,
    mapping: &[(String, String)],
    shown: &str,
) -> Result<Vec<GoldColumn>, Error> {
    let has = |name: &str| schema.field_with_name(name).is_ok();
    let stand_ins: Vec<String> = BUILTIN
        .iter()
        .filter(|m| m.group != Group::Judge && m.kind == Kind::Score && has(&m.name))
        .map(|m| m.name.clone())
        .collect();
    let mut out = Vec::new();
    for (k, (metric, column)) in mapping.iter().enumerate() {
        if mapping[..k].iter().any(|(m, _)| m == metric) {
            return Err(Error::usage(format!(
                "--gold names metric '{metric}' twice"
            )));
        }
        let value = schema.field_with_name(metric).map_err(|_| {
            Error::config(format!(
                "{shown}: --gold {metric}={column}: the run has no metric '{metric}'"
            ))
        })?;
        let label = schema.field_with_name(column).map_err(|_| {
            Error::bad_input(format!(
                "{shown}: --gold {metric}={column}: column '{column}' not found"
            ))
        })?;
        let source = format!("{metric}_source");
        let source_column = has(&source).then_some(source);
        let kind = if value.data_type() == &DataType::Boolean {
            LabelKind::Verdict
        } else if source_column.is_some() {
            LabelKind::Score
        } else {
            LabelKind::StandIn
        };
        check_label_type(label.data_type(), kind).map_err(|want| {
            Error::bad_input(format!(
                "{shown}: --gold {metric}={column}: column '{column}' has type {}, but {metric}'s labels must be {want}",
                label.data_type()
            ))
        })?;
        let p = format!("{metric}_p");
        let stand_ins = if kind == LabelKind::Verdict {
            stand_ins.clone()
        } else {
            Vec::new()
        };
        out.push(GoldColumn {
            metric: metric.clone(),
            column: column.clone(),
            kind,
            p_column: (kind == LabelKind::Verdict && has(&p)).then_some(p),
            source_column,
            stand_ins: stand_ins.clone(),
        });
        // A panel's judges, each against the same labels: their columns
        // `<metric>__<judge>` (and `<metric>__<judge>_p`), over the rows each
        // answered.
        if kind != LabelKind::StandIn {
            let prefix = format!("{metric}__");
            for f in schema.fields() {
                let name = f.name();
                if !name.starts_with(&prefix) || name.ends_with("_p") {
                    continue;
                }
                let p = format!("{name}_p");
                out.push(GoldColumn {
                    metric: name.clone(),
                    column: column.clone(),
                    kind,
                    p_column: (kind == LabelKind::Verdict && has(&p)).then_some(p),
                    source_column: None,
                    stand_ins: stand_ins.clone(),
                });
            }
        }
    }
    Ok(out)
}

/// Ok, or what a label of `kind` must be.
fn check_label_type(data_type: &DataType, kind: LabelKind) -> Result<(), &'static str> {
    match kind {
        LabelKind::Verdict | LabelKind::StandIn if data_type == &DataType::Boolean => Ok(()),
        LabelKind::Verdict | LabelKind::StandIn => Err("boolean (true = the answer is right)"),
        LabelKind::Score if data_type.is_numeric() => Ok(()),
        LabelKind::Score => Err("numbers on the metric's 0-1 scale"),
    }
}

/// Label `i` of a label column: `Ok(None)` where there is none, an error
/// saying what is wrong with a label off the metric's scale.
pub fn label(array: &ArrayRef, i: usize, kind: LabelKind) -> Result<Option<f64>, String> {
    if array.is_null(i) {
        return Ok(None);
    }
    if kind != LabelKind::Score {
        return Ok(Some(if array.as_boolean().value(i) {
            1.0
        } else {
            0.0
        }));
    }
    let v = number(array, i).ok_or_else(|| format!("type {} cannot be read", array.data_type()))?;
    if !(0.0..=1.0).contains(&v) {
        return Err(format!("label {v} is off the metric's 0-1 scale"));
    }
    Ok(Some(v))
}

/// A numeric array's value `i` as f64.
fn number(array: &ArrayRef, i: usize) -> Option<f64> {
    let cast = arrow::compute::cast(&array.slice(i, 1), &DataType::Float64).ok()?;
    let v = cast.as_primitive::<Float64Type>();
    (!v.is_null(0)).then(|| v.value(0))
}

/// A metric value column's value `i` (a verdict as 0 or 1).
fn value(array: &ArrayRef, i: usize) -> Option<f64> {
    if array.is_null(i) {
        return None;
    }
    match array.data_type() {
        DataType::Boolean => Some(if array.as_boolean().value(i) {
            1.0
        } else {
            0.0
        }),
        DataType::Float32 => Some(array.as_primitive::<Float32Type>().value(i) as f64),
        _ => number(array, i),
    }
}

/// One pass over `table` gathering every labelled metric's state. A label
/// off the scale is an error naming the column and row (exit 65). A part
/// of a run (a shard) may hold no labels: the whole input is checked for
/// that before scoring ([`figures`] checks a result it is given).
pub fn gather(table: &Table, columns: &[GoldColumn]) -> Result<Vec<GoldState>, Error> {
    Ok(gather_with_disagreements(table, columns, 0)?.0)
}

/// Labelled rows where a metric and its label disagree: a verdict against
/// its label, a score [`SCORE_DISAGREES`] or more from it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Disagreeing {
    /// Row ordinal in the result.
    pub row: u64,
    /// The label.
    pub gold: f64,
    /// The metric's value.
    pub value: f64,
    /// The judge's P(true), where it has one.
    pub p: Option<f64>,
}

/// How far a score must lie from its label to be listed as disagreeing.
pub const SCORE_DISAGREES: f64 = 0.3;

/// [`gather`], also listing the first `limit` disagreeing rows per metric.
pub fn gather_with_disagreements(
    table: &Table,
    columns: &[GoldColumn],
    limit: usize,
) -> Result<(Vec<GoldState>, Vec<Vec<Disagreeing>>), Error> {
    let mut names: Vec<String> = Vec::new();
    let at = |name: &str, names: &mut Vec<String>| match names.iter().position(|n| n == name) {
        Some(k) => k,
        None => {
            names.push(name.to_string());
            names.len() - 1
        }
    };
    struct Cols {
        label: usize,
        value: usize,
        p: Option<usize>,
        source: Option<usize>,
        stand_ins: Vec<usize>,
    }
    let cols: Vec<Cols> = columns
        .iter()
        .map(|g| Cols {
            label: at(&g.column, &mut names),
            value: at(&g.metric, &mut names),
            p: g.p_column.as_deref().map(|p| at(p, &mut names)),
            source: g.source_column.as_deref().map(|s| at(s, &mut names)),
            stand_ins: g.stand_ins.iter().map(|s| at(s, &mut names)).collect(),
        })
        .collect();
    let (guarantees, rates_confidence) = footer_settings(table)?;
    let mut states: Vec<GoldState> = columns
        .iter()
        .map(|g| {
            let mut state = GoldState::new(&g.metric, &g.column, g.kind, g.stand_ins.clone());
            // The tiers decide the metric's own values (not a panel
            // judge's): its guaranteed sides are checked there.
            if g.kind == LabelKind::Verdict && g.source_column.is_some() {
                state.guarantees = guarantees.clone();
            }
            state.rates_confidence = rates_confidence;
            state
        })
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let mut disagreeing: Vec<Vec<Disagreeing>> = vec![Vec::new(); columns.len()];
    let mut first_row = 0u64;
    for batch in table.batches(&refs, 64 * 1024)? {
        let batch = batch?;
        for (((g, c), state), listed) in columns
            .iter()
            .zip(&cols)
            .zip(&mut states)
            .zip(&mut disagreeing)
        {
            let labels = batch.column(c.label);
            let values = batch.column(c.value);
            for i in 0..batch.num_rows() {
                let gold = label(labels, i, g.kind).map_err(|why| {
                    Error::bad_input(format!(
                        "{}: column '{}', row {}: {why}",
                        table.spec(),
                        g.column,
                        first_row + i as u64
                    ))
                })?;
                let v = value(values, i);
                if let (Some(gold), Some(v), true) = (gold, v, listed.len() < limit) {
                    let differs = match g.kind {
                        LabelKind::Verdict => (gold >= 0.5) != (v >= 0.5),
                        LabelKind::Score => (gold - v).abs() >= SCORE_DISAGREES,
                        LabelKind::StandIn => false,
                    };
                    if differs {
                        listed.push(Disagreeing {
                            row: first_row + i as u64,
                            gold,
                            value: v,
                            p: c.p.and_then(|k| value(batch.column(k), i)),
                        });
                    }
                }
                state.add(gold, v, || {
                    let p = c.p.and_then(|k| value(batch.column(k), i));
                    let stand_ins = c
                        .stand_ins
                        .iter()
                        .map(|&k| value(batch.column(k), i))
                        .collect();
                    let source = c.source.and_then(|k| {
                        let s = batch.column(k);
                        (!s.is_null(i)).then(|| string_at(s, i)).flatten()
                    });
                    let tier = source
                        .filter(|s| refscore_core::schema::source::is_tier(s))
                        .map(String::from);
                    let by_rule = source == Some(refscore_core::schema::source::RULE);
                    (p, stand_ins, tier, by_rule)
                });
            }
        }
        first_row += batch.num_rows() as u64;
    }
    states.iter_mut().for_each(GoldState::sort);
    Ok((states, disagreeing))
}

/// The figures of every labelled metric of the result in `table`, with up
/// to `limit` disagreeing rows each: labelled by `mapping`, else by the
/// mapping its footer records, else none. A label column with no labels at
/// all is an error naming it (exit 78).
pub fn figures(
    table: &Table,
    mapping: &[(String, String)],
    limit: usize,
) -> Result<Vec<(Calibration, Vec<Disagreeing>)>, Error> {
    let spec = table.spec();
    let recorded;
    let mapping = match (mapping.is_empty(), table.footer_value(FOOTER)) {
        (false, _) => mapping,
        (true, Some(text)) => {
            recorded = mapping_from_json(text)?;
            &recorded
        }
        (true, None) => return Ok(Vec::new()),
    };
    let columns = resolve(&table.schema(), mapping, spec)?;
    let (states, disagreeing) = gather_with_disagreements(table, &columns, limit)?;
    for (g, state) in columns.iter().zip(&states) {
        if state.rows.is_empty() && state.labels_without_value == 0 {
            return Err(Error::config(format!(
                "{spec}: --gold {}={}: column '{}' holds no labels (every value is null)",
                g.metric, g.column, g.column
            )));
        }
    }
    Ok(states.iter().map(calibration).zip(disagreeing).collect())
}

/// A state's figures, each stand-in read in its direction (the metric
/// registry's): what `score`'s summary and `report` both show.
pub fn calibration(state: &GoldState) -> Calibration {
    state.calibration_with(|name| Direction::of(name).lower_is_better())
}

/// A string column's value `i`, whatever its string encoding.
pub(crate) fn string_at(array: &ArrayRef, i: usize) -> Option<&str> {
    match array.data_type() {
        DataType::Utf8 => Some(array.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => Some(array.as_string::<i64>().value(i)),
        DataType::Utf8View => Some(array.as_string_view().value(i)),
        _ => None,
    }
}
