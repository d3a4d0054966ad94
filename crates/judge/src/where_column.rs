//! `--judge-where`: which rows ask for which judge metrics.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use refscore_core::metric::{Metric, MetricRef};
use refscore_core::Error;

use crate::metric::JudgeMetrics;

/// Which judge metrics one row asks for.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Wanted {
    /// Every judge metric of the run.
    Every,
    /// These (none for a null or false value).
    These(Vec<MetricRef>),
}

impl Wanted {
    /// Whether the row asks for `m`.
    pub(crate) fn asks(&self, m: &Metric) -> bool {
        match self {
            Wanted::Every => true,
            Wanted::These(list) => list.iter().any(|x| x.name == m.name),
        }
    }
}

/// Which judge metrics each row of `batch` asks for: all of them without a
/// `--judge-where` column (`where_column`, for messages), else what that
/// column's value says ([`requested_by`]).
pub(crate) fn requested_rows(
    batch: &refscore_core::RowBatch,
    where_column: Option<&str>,
    known: &JudgeMetrics,
) -> Result<Vec<Wanted>, Error> {
    let n = batch.len();
    let Some(col) = &batch.row_filter else {
        return Ok(vec![Wanted::Every; n]);
    };
    let column = where_column.unwrap_or("");
    (0..n)
        .map(|i| {
            requested_by(col, i, known, &|| {
                format!(
                    "{}: column '{column}', row {}",
                    batch.source,
                    batch.first_row_in_source + i as u64
                )
            })
        })
        .collect()
}

/// Reads a `--judge-where` column's value for row `i` into per-metric
/// requests: a boolean (true = every selected judge metric), a string of
/// comma-separated metric names, or a list of names. Unknown names are an
/// error naming the column and row.
pub(crate) fn requested_by(
    column: &ArrayRef,
    i: usize,
    known: &JudgeMetrics,
    describe: &dyn Fn() -> String,
) -> Result<Wanted, Error> {
    if column.is_null(i) {
        return Ok(Wanted::These(Vec::new()));
    }
    let names: Vec<String> = match column.data_type() {
        DataType::Boolean if column.as_boolean().value(i) => return Ok(Wanted::Every),
        DataType::Boolean => return Ok(Wanted::These(Vec::new())),
        DataType::Utf8 => split(column.as_string::<i32>().value(i)),
        DataType::LargeUtf8 => split(column.as_string::<i64>().value(i)),
        DataType::Utf8View => split(column.as_string_view().value(i)),
        DataType::List(_) | DataType::LargeList(_) => {
            let items = match column.data_type() {
                DataType::List(_) => column.as_list::<i32>().value(i),
                _ => column.as_list::<i64>().value(i),
            };
            let items = arrow::compute::cast(&items, &DataType::Utf8)
                .map_err(|e| Error::bad_input(format!("{}: {e}", describe())))?;
            items
                .as_string::<i32>()
                .iter()
                .flatten()
                .map(|s| s.trim().to_string())
                .filter(|s| !s.is_empty())
                .collect()
        }
        other => {
            return Err(Error::bad_input(format!(
                "{}: type {other} is not boolean, string or list of strings",
                describe()
            )))
        }
    };
    let mut out = Vec::new();
    for name in names {
        match known.named(&name) {
            Some(jm) => out.push(std::sync::Arc::clone(jm.metric())),
            None => {
                return Err(Error::bad_input(format!(
                    "{}: unknown judge metric '{name}' (expected {})",
                    describe(),
                    known.names().join(", ")
                )));
            }
        }
    }
    Ok(Wanted::These(out))
}

fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}

/// Validates a whole `--judge-where` column before the first judge call:
/// the first bad value is the same error [`requested_by`] gives for its row,
/// with `describe_row(i)` naming the file, column and row. Checking batch by
/// batch found a bad last row only after every earlier call was paid for.
pub fn check_requests(
    column: &ArrayRef,
    known: &JudgeMetrics,
    describe_row: &dyn Fn(usize) -> String,
) -> Result<(), Error> {
    for i in 0..column.len() {
        requested_by(column, i, known, &|| describe_row(i))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use arrow::array::{BooleanArray, StringArray};

    use super::*;

    #[test]
    fn a_bad_value_in_the_last_row_is_found_up_front() {
        let mut values = vec![Some("meaning_match"); 999];
        values.push(Some("vibes"));
        let column: ArrayRef = Arc::new(StringArray::from(values));
        let known = JudgeMetrics::builtin();
        let err = check_requests(&column, &known, &|i| {
            format!("in.parquet: column 'which', row {i}")
        })
        .unwrap_err();
        assert_eq!(err.class, refscore_core::ErrorClass::BadInput);
        assert!(
            err.message.contains("column 'which', row 999") && err.message.contains("'vibes'"),
            "{}",
            err.message
        );
        let fine: ArrayRef = Arc::new(StringArray::from(vec![
            Some("similarity, meaning_match"),
            None,
            Some(""),
        ]));
        assert!(check_requests(&fine, &known, &|i| format!("row {i}")).is_ok());
        let flags: ArrayRef = Arc::new(BooleanArray::from(vec![true, false]));
        assert!(check_requests(&flags, &known, &|i| format!("row {i}")).is_ok());
        let wrong: ArrayRef = Arc::new(arrow::array::Int32Array::from(vec![1]));
        assert!(check_requests(&wrong, &known, &|i| format!("row {i}")).is_err());
    }
}
