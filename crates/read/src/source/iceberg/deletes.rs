//! Iceberg delete files: position deletes (rows by data file and
//! position) and equality deletes (rows whose values of some columns equal
//! a deleted row's), both turned into the positions a data file's read
//! leaves out, as a Delta file's deletion vector is.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use arrow::array::{Array, AsArray, RecordBatch};
use arrow::record_batch::RecordBatchReader;
use arrow::row::{RowConverter, SortField};
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use refscore_core::Error;

use super::metadata::Schema;
use super::Place;
use crate::source::{TableColumns, TableFile};
use crate::InputFile;

/// A delete file's batches, read whole (delete files are small).
fn read_delete_file(
    shown: &str,
    place: &Place,
    location: &str,
) -> Result<(arrow::datatypes::SchemaRef, Vec<RecordBatch>), Error> {
    let bytes = place.read(shown, location)?;
    let bad = |e: &dyn std::fmt::Display| {
        Error::bad_input(format!(
            "{shown}: delete file {}: {e}",
            refscore_store::redact(location)
        ))
    };
    let reader = ParquetRecordBatchReaderBuilder::try_new(bytes)
        .map_err(|e| bad(&e))?
        .build()
        .map_err(|e| bad(&e))?;
    let schema = reader.schema();
    let batches = reader.collect::<Result<Vec<_>, _>>().map_err(|e| bad(&e))?;
    Ok((schema, batches))
}

/// A position delete file: the rows it deletes, by data file, ascending.
pub(super) fn position_deletes(
    shown: &str,
    place: &Place,
    location: &str,
) -> Result<HashMap<String, Vec<u64>>, Error> {
    let (schema, batches) = read_delete_file(shown, place, location)?;
    let missing = |name: &str| {
        Error::bad_input(format!(
            "{shown}: position delete file {} has no '{name}' column",
            refscore_store::redact(location)
        ))
    };
    let path_at = schema
        .index_of("file_path")
        .map_err(|_| missing("file_path"))?;
    let pos_at = schema.index_of("pos").map_err(|_| missing("pos"))?;
    let mut out: HashMap<String, Vec<u64>> = HashMap::new();
    for batch in &batches {
        let paths = arrow::compute::cast(batch.column(path_at), &arrow::datatypes::DataType::Utf8)
            .map_err(|e| Error::bad_input(format!("{shown}: {location}: file_path: {e}")))?;
        let paths = paths.as_string::<i32>();
        let pos = arrow::compute::cast(batch.column(pos_at), &arrow::datatypes::DataType::Int64)
            .map_err(|e| Error::bad_input(format!("{shown}: {location}: pos: {e}")))?;
        let pos = pos.as_primitive::<arrow::datatypes::Int64Type>();
        for i in 0..batch.num_rows() {
            if paths.is_null(i) || pos.is_null(i) {
                continue;
            }
            out.entry(paths.value(i).to_string())
                .or_default()
                .push(pos.value(i).max(0) as u64);
        }
    }
    Ok(out)
}

/// The rows of one equality delete file: a data file's row whose values
/// of `columns` equal one of them (null equal to null) is deleted.
pub(crate) struct EqualityDeletes {
    /// The table's columns compared (their names in the snapshot).
    pub(crate) columns: Vec<String>,
    converter: RowConverter,
    keys: HashSet<Box<[u8]>>,
}

impl std::fmt::Debug for EqualityDeletes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EqualityDeletes")
            .field("columns", &self.columns)
            .field("rows", &self.keys.len())
            .finish()
    }
}

impl EqualityDeletes {
    /// Whether each row of `batch` (its columns: [`Self::columns`], in
    /// order, of the table's types) is deleted.
    pub(crate) fn matches(&self, batch: &RecordBatch) -> Result<Vec<bool>, String> {
        let rows = self
            .converter
            .convert_columns(batch.columns())
            .map_err(|e| e.to_string())?;
        Ok(rows
            .iter()
            .map(|r| self.keys.contains(r.as_ref()))
            .collect())
    }
}

/// An equality delete file, its columns (by field id) as the table's.
pub(super) fn equality_deletes(
    shown: &str,
    place: &Place,
    location: &str,
    ids: &[i32],
    schema: &Schema,
    columns: &TableColumns,
) -> Result<EqualityDeletes, Error> {
    let shown_file = refscore_store::redact(location);
    let mut names = Vec::new();
    for id in ids {
        let top = schema.fields.iter().find(|f| f.id == *id);
        let Some(field) = top else {
            return Err(Error::config(format!(
                "{shown}: equality delete file {shown_file} compares field id {id}, which is \
                 not a top-level column of the snapshot's schema; refscore's Iceberg reader \
                 reads equality deletes on top-level columns only"
            )));
        };
        names.push(field.name.clone());
    }
    if names.is_empty() {
        return Err(Error::bad_input(format!(
            "{shown}: equality delete file {shown_file} names no equality columns"
        )));
    }
    let (file_schema, batches) = read_delete_file(shown, place, location)?;
    let mut sort_fields = Vec::new();
    let mut positions = Vec::new();
    for (id, name) in ids.iter().zip(&names) {
        let target = columns
            .arrow
            .field_with_name(name)
            .expect("the snapshot's own column");
        sort_fields.push(SortField::new(target.data_type().clone()));
        let by_id = file_schema.fields().iter().position(|f| {
            f.metadata()
                .get("PARQUET:field_id")
                .and_then(|v| v.parse::<i32>().ok())
                == Some(*id)
        });
        let at = by_id
            .or_else(|| file_schema.index_of(name).ok())
            .ok_or_else(|| {
                Error::bad_input(format!(
                "{shown}: equality delete file {shown_file} lacks column '{name}' (field id {id})"
            ))
            })?;
        positions.push((at, target.data_type().clone()));
    }
    let converter = RowConverter::new(sort_fields)
        .map_err(|e| Error::config(format!("{shown}: equality deletes on {names:?}: {e}")))?;
    let mut keys = HashSet::new();
    for batch in &batches {
        let arrays = positions
            .iter()
            .map(|(at, t)| arrow::compute::cast(batch.column(*at), t))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| Error::bad_input(format!("{shown}: {shown_file}: {e}")))?;
        let rows = converter
            .convert_columns(&arrays)
            .map_err(|e| Error::bad_input(format!("{shown}: {shown_file}: {e}")))?;
        keys.extend(rows.iter().map(|r| Box::<[u8]>::from(r.as_ref())));
    }
    Ok(EqualityDeletes {
        columns: names,
        converter,
        keys,
    })
}

/// `file` without the rows its equality deletes match: they join its
/// position deletes (read once, when its footer is, so every run, shard
/// and resumed session counts the same rows).
pub(crate) fn apply_equality_deletes(mut file: InputFile) -> Result<InputFile, Error> {
    let table = file.table_file.clone().expect("a table's file");
    // The file's own rows, none deleted: positions count from its start.
    let mut whole = file.clone();
    whole.table_file = Some(TableFile {
        deleted: None,
        equality: Vec::new(),
        ..table.clone()
    });
    let whole = whole.with_counts()?;
    let shown = file.path.display().to_string();
    let mut deleted: Vec<u64> = table.deleted.as_deref().unwrap_or(&[]).to_vec();
    for equality in &table.equality {
        let names: Vec<&str> = equality.columns.iter().map(String::as_str).collect();
        let mut reader =
            crate::source::open_rows(&whole, &names, crate::source::Rows::default(), 64 * 1024)?;
        let mut at = 0u64;
        while let Some(batch) = reader.next_batch() {
            let batch = batch.map_err(|f| match f {
                crate::source::Failure::Store(e) => e,
                crate::source::Failure::Decode(e) => Error::bad_input(format!("{shown}: {e}")),
            })?;
            let hits = equality
                .matches(&batch)
                .map_err(|e| Error::bad_input(format!("{shown}: equality deletes: {e}")))?;
            deleted.extend(
                hits.iter()
                    .enumerate()
                    .filter(|(_, hit)| **hit)
                    .map(|(i, _)| at + i as u64),
            );
            at += batch.num_rows() as u64;
        }
    }
    deleted.sort_unstable();
    deleted.dedup();
    file.table_file = Some(TableFile {
        deleted: (!deleted.is_empty()).then(|| Arc::from(deleted)),
        equality: Vec::new(),
        ..table
    });
    file.with_counts()
}
