//! `--judge-where`: which rows ask for which judge metrics.

use arrow::array::{Array, ArrayRef, AsArray};
use arrow::datatypes::DataType;
use refscore_batch::Error;

use crate::METRICS;

/// Reads a `--judge-where` column's value for row `i` into per-metric
/// requests: a boolean (true = every selected judge metric), a string of
/// comma-separated metric names, or a list of names. Unknown names are an
/// error naming the column and row.
pub fn requested_by(
    column: &ArrayRef,
    i: usize,
    describe: &dyn Fn() -> String,
) -> Result<[bool; 3], Error> {
    if column.is_null(i) {
        return Ok([false; 3]);
    }
    let names: Vec<String> = match column.data_type() {
        DataType::Boolean => return Ok([column.as_boolean().value(i); 3]),
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
    let mut out = [false; 3];
    for name in names {
        let name = if name == "similarity_score" {
            "similarity".to_string()
        } else {
            name
        };
        match METRICS.iter().position(|m| *m == name) {
            Some(k) => out[k] = true,
            None => {
                return Err(Error::bad_input(format!(
                    "{}: unknown judge metric '{name}' (expected {})",
                    describe(),
                    METRICS.join(", ")
                )))
            }
        }
    }
    Ok(out)
}

fn split(s: &str) -> Vec<String> {
    s.split(',')
        .map(|p| p.trim().to_string())
        .filter(|p| !p.is_empty())
        .collect()
}
