//! One run's result files: which columns are metrics, ids, status, judge
//! accounting and texts, and per-batch extraction of those into plain
//! vectors the aggregation loops read.

use std::hash::{Hash, Hasher};

use arrow::array::{Array, ArrayRef, AsArray, RecordBatch};
use arrow::datatypes::{
    DataType, Field, Float32Type, Int16Type, Int32Type, Int64Type, Int8Type, UInt16Type,
    UInt32Type, UInt64Type, UInt8Type,
};
use refscore_core::metric::{self, Metric};
use refscore_core::schema::{footer, ERROR, ID, JUDGE_USAGE, STATUS};
use refscore_core::{Error, TextColumn};
use refscore_read::{Role, Table, ALIASES};

/// A result written by `refscore score`, opened and checked.
pub(crate) struct Run {
    pub table: Table,
    /// "RESULT" or "BASELINE" and the path, for messages.
    pub shown: String,
    pub metrics: Vec<String>,
    pub id_field: Field,
    pub has_error: bool,
    pub judge_cols: Vec<String>,
    pub source_cols: Vec<String>,
    /// Columns holding the input, reference and output texts (from `--keep`).
    pub text_cols: [Option<String>; 3],
    pub reason_cols: Vec<String>,
    /// The judge metrics the user defined for the run, from its footer: per
    /// name what `score` recorded (version, answer, columns).
    pub defined: serde_json::Map<String, serde_json::Value>,
    /// The pass thresholds the run's summary used (from its footer; none
    /// in files written before refscore recorded them).
    pub thresholds: Vec<(String, f64)>,
}

impl Run {
    pub fn open(spec: &str, source: &refscore_read::SourceOptions) -> Result<Run, Error> {
        let table = Table::open_with(spec, source)?;
        let schema = table.schema();
        let shown = spec.to_string();
        let not_result = |why: &str| {
            Error::bad_input(format!(
                "{shown}: not a refscore result file ({why}); pass the output of `refscore score`"
            ))
        };
        if schema.fields().is_empty() || schema.field(0).name() != ID {
            return Err(not_result("its first column is not 'id'"));
        }
        let status_at = schema
            .index_of(STATUS)
            .map_err(|_| not_result("no 'status' column"))?;
        let mut metrics: Vec<String> = schema.fields()[1..status_at]
            .iter()
            .filter(|f| matches!(f.data_type(), DataType::Float32 | DataType::Boolean))
            .map(|f| f.name().clone())
            .collect();
        // A Delta table of nightly results puts the metrics a later night
        // added after all the earlier columns (a schema only grows at its
        // end): there, built-in metrics after 'status' count too.
        let table_of_nights = source.table_version.is_some()
            || std::path::Path::new(spec).join("_delta_log").is_dir();
        if table_of_nights {
            metrics.extend(
                schema.fields()[status_at + 1..]
                    .iter()
                    .filter(|f| matches!(f.data_type(), DataType::Float32 | DataType::Boolean))
                    .filter(|f| metric::find(f.name()).is_some())
                    .map(|f| f.name().clone()),
            );
        }
        if metrics.is_empty() {
            return Err(not_result("no metric column before 'status'"));
        }
        let has = |n: &str| schema.index_of(n).is_ok();
        let after: Vec<&str> = schema.fields()[status_at + 1..]
            .iter()
            .map(|f| f.name().as_str())
            .filter(|n| *n != ERROR)
            .collect();
        let text_cols = [Role::Input, Role::Reference, Role::Output].map(|role| {
            let names = ALIASES.iter().find(|(r, _)| *r == role).expect("role").1;
            names
                .iter()
                .find(|n| after.contains(n))
                .map(|n| n.to_string())
        });
        let id_field = table.field(ID)?;
        let thresholds = match table.footer_value(footer::THRESHOLDS) {
            Some(text) => refscore_stats::thresholds_from_json(text).map_err(|e| {
                Error::bad_input(format!("{shown}: footer {}: {e}", footer::THRESHOLDS))
            })?,
            None => Vec::new(),
        };
        let defined = match table.footer_value(footer::JUDGE_METRICS) {
            Some(text) => serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(text)
                .map_err(|e| {
                    Error::bad_input(format!("{shown}: footer {}: {e}", footer::JUDGE_METRICS))
                })?,
            None => serde_json::Map::new(),
        };
        let defined_columns = |key: &str| -> Vec<String> {
            defined
                .values()
                .filter_map(|d| d[key].as_str())
                .filter(|n| has(n))
                .map(String::from)
                .collect()
        };
        let mut source_cols = registry_columns(|m| m.source_column.as_deref(), &has);
        source_cols.extend(defined_columns("source_column"));
        let mut reason_cols = registry_columns(|m| m.reason_column.as_deref(), &has);
        reason_cols.extend(defined_columns("reason_column"));
        Ok(Run {
            shown,
            metrics,
            id_field,
            has_error: has(ERROR),
            judge_cols: JUDGE_USAGE
                .iter()
                .filter(|n| has(n))
                .map(|n| n.to_string())
                .collect(),
            source_cols,
            text_cols,
            reason_cols,
            defined,
            thresholds,
            table,
        })
    }
}

/// The columns of one role (judge sources, judge reasons) that the
/// registry's metrics write and the result has, in output order.
fn registry_columns(role: fn(&Metric) -> Option<&str>, has: &dyn Fn(&str) -> bool) -> Vec<String> {
    metric::BUILTIN
        .iter()
        .filter_map(|m| role(m))
        .filter(|n| has(n))
        .map(String::from)
        .collect()
}

/// Which ids can be joined with which: integer ids by value, string ids by
/// text; anything else only with the very same type.
pub(crate) fn id_kind(t: &DataType) -> String {
    match t {
        DataType::Int8
        | DataType::Int16
        | DataType::Int32
        | DataType::Int64
        | DataType::UInt8
        | DataType::UInt16
        | DataType::UInt32
        | DataType::UInt64 => "integer".into(),
        t if refscore_core::is_string_type(t) => "string".into(),
        t => t.to_string(),
    }
}

const NULL_KEY: u128 = u128::MAX - 7;

fn text_key(s: &str) -> u128 {
    // Two independent 64-bit SipHashes: a collision among 10M ids has a
    // probability near 1e-25.
    let mut a = std::collections::hash_map::DefaultHasher::new();
    s.hash(&mut a);
    let mut b = std::collections::hash_map::DefaultHasher::new();
    0x5eed_u32.hash(&mut b);
    s.hash(&mut b);
    ((a.finish() as u128) << 64) | b.finish() as u128
}

/// A join key per row of an id column: integers by value (so Int32 and
/// Int64 ids meet), anything else by a 128-bit hash of its text.
pub(crate) fn id_keys(a: &ArrayRef, out: &mut Vec<u128>) {
    out.clear();
    macro_rules! ints {
        ($t:ty) => {{
            let p = a.as_primitive::<$t>();
            out.extend((0..p.len()).map(|i| {
                if p.is_valid(i) {
                    p.value(i) as i128 as u128
                } else {
                    NULL_KEY
                }
            }))
        }};
    }
    match a.data_type() {
        DataType::Int8 => ints!(Int8Type),
        DataType::Int16 => ints!(Int16Type),
        DataType::Int32 => ints!(Int32Type),
        DataType::Int64 => ints!(Int64Type),
        DataType::UInt8 => ints!(UInt8Type),
        DataType::UInt16 => ints!(UInt16Type),
        DataType::UInt32 => ints!(UInt32Type),
        DataType::UInt64 => ints!(UInt64Type),
        _ => {
            let text = TextColumn::from_array(a).or_else(|| {
                arrow::compute::cast(a, &DataType::Utf8)
                    .ok()
                    .and_then(|c| TextColumn::from_array(&c))
            });
            match text {
                Some(t) => out.extend((0..t.len()).map(|i| t.get(i).map_or(NULL_KEY, text_key))),
                None => out.extend((0..a.len()).map(|_| NULL_KEY)),
            }
        }
    }
}

/// A metric column as f32 per row, NaN for null (scores are never NaN).
pub(crate) fn metric_values(a: &ArrayRef, out: &mut Vec<f32>) {
    out.clear();
    match a.data_type() {
        DataType::Float32 => {
            let p = a.as_primitive::<Float32Type>();
            if p.null_count() == 0 {
                out.extend_from_slice(p.values());
            } else {
                out.extend(p.iter().map(|v| v.unwrap_or(f32::NAN)));
            }
        }
        DataType::Boolean => out.extend(
            a.as_boolean()
                .iter()
                .map(|v| v.map_or(f32::NAN, |b| if b { 1.0 } else { 0.0 })),
        ),
        _ => out.extend((0..a.len()).map(|_| f32::NAN)),
    }
}

/// Sum and non-null count of an unsigned accounting column.
pub(crate) fn sum_u32(a: &ArrayRef) -> (u64, u64) {
    match a.data_type() {
        DataType::UInt32 => {
            let p = a.as_primitive::<UInt32Type>();
            let sum = p.iter().flatten().map(u64::from).sum();
            (sum, (p.len() - p.null_count()) as u64)
        }
        _ => (0, 0),
    }
}

/// Per-row slice numbers of a `--by` column (any type; null is "(null)").
pub(crate) fn slice_ids(
    a: &ArrayRef,
    slicer: &mut crate::agg::Slicer,
    out: &mut Vec<u32>,
) -> Result<(), Error> {
    out.clear();
    let text = match TextColumn::from_array(a) {
        Some(t) => t,
        None => {
            let c = arrow::compute::cast(a, &DataType::Utf8).map_err(|e| {
                Error::bad_input(format!(
                    "--by column of type {} cannot be used as a label: {e}",
                    a.data_type()
                ))
            })?;
            TextColumn::from_array(&c).expect("utf8")
        }
    };
    out.extend((0..text.len()).map(|i| slicer.id(text.get(i))));
    Ok(())
}

/// Index of a column in a batch read with known names.
pub(crate) fn col<'a>(batch: &'a RecordBatch, name: &str) -> &'a ArrayRef {
    batch.column_by_name(name).expect("projected")
}
