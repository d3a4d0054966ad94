//! Writing the results: one output row per input row, in input order, `id`
//! first, then the metric columns, then `status` and `error`, then any
//! passed-through input columns.
//!
//! A run writes its rows as a sequence of committed part files
//! ([`PartWriter`]), each made durable (fsync, rename, fsync of the folder)
//! before the next begins, so a crash loses at most the part in progress.
//! [`assemble`] then joins the parts into the single result file by copying
//! their encoded column chunks (nothing is decoded or compressed again), under
//! a temporary name that is renamed into place only when complete.

pub mod sink;
mod summary;

use std::fs::File;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::column::writer::ColumnCloseResult;
use parquet::file::metadata::{KeyValue, ParquetMetaDataReader};
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use refscore_core::{Error, RowBatch, ScoreColumns};
use serde::{Deserialize, Serialize};

pub use sink::{DeltaTable, LocalFile, ObjectUpload, RunKey, Settled, Sink, StoredResult};
pub use summary::{
    MetricState, MetricSummary, Summary, SummaryBuilder, SummaryState, MEDIAN_RESOLUTION,
};

use refscore_core::schema::{self, footer::PART as PART_KEY, status};

/// Builds the result schema from the id field, the metric stages' fields
/// and the passed-through input fields. Fails when names collide.
pub fn result_schema(id: Field, metrics: &[Field], keep: &[Field]) -> Result<SchemaRef, Error> {
    let mut fields: Vec<Field> = Vec::with_capacity(metrics.len() + keep.len() + 3);
    fields.push(id);
    fields.extend(metrics.iter().cloned());
    fields.push(Field::new(schema::STATUS, DataType::Utf8, false));
    fields.push(Field::new(schema::ERROR, DataType::Utf8, true));
    let mut seen: Vec<String> = Vec::new();
    for f in &fields {
        if seen.contains(f.name()) {
            return Err(Error::internal(format!(
                "two result columns are named '{}'",
                f.name()
            )));
        }
        seen.push(f.name().clone());
    }
    for k in keep {
        if seen.contains(k.name()) {
            return Err(Error::config(format!(
                "--keep column '{}' has the same name as a result column; rename it in the input or drop it from --keep",
                k.name()
            )));
        }
        seen.push(k.name().clone());
        fields.push(k.clone());
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// The writer settings of every part: zstd, row groups of at most 256k rows.
fn part_properties() -> WriterProperties {
    WriterProperties::builder()
        .set_compression(Compression::ZSTD(
            ZstdLevel::try_new(1).expect("valid level"),
        ))
        .set_max_row_group_row_count(Some(256 * 1024))
        .build()
}

/// Turns one input batch and its score columns into a result record,
/// matching the stages' columns to the schema by name.
pub fn result_record(
    schema: &SchemaRef,
    batch: &RowBatch,
    scores: ScoreColumns,
) -> Result<RecordBatch, Error> {
    let n = batch.len();
    let mut status = Vec::with_capacity(n);
    let mut errors: Vec<Option<String>> = Vec::with_capacity(n);
    for i in 0..n {
        if let Some(why) = batch.unscorable(i) {
            status.push(status::ERROR);
            errors.push(Some(why.to_string()));
        } else if let Some(Some(e)) = scores.row_errors.get(i) {
            status.push(status::PARTIAL);
            errors.push(Some(e.clone()));
        } else {
            status.push(status::OK);
            errors.push(None);
        }
    }
    let metric_fields = schema.fields().len() - 3 - batch.passthrough.len();
    if scores.fields.len() != metric_fields {
        return Err(Error::internal(format!(
            "the stages produced {} metric columns for a schema of {}",
            scores.fields.len(),
            metric_fields
        )));
    }
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(schema.fields().len());
    columns.push(Arc::clone(&batch.id));
    for field in &schema.fields()[1..=metric_fields] {
        let array = scores.column(field.name()).ok_or_else(|| {
            Error::internal(format!(
                "no stage produced the result column '{}'",
                field.name()
            ))
        })?;
        columns.push(Arc::clone(array));
    }
    columns.push(Arc::new(StringArray::from(status)));
    columns.push(Arc::new(StringArray::from(errors)));
    columns.extend(batch.passthrough.iter().cloned());
    RecordBatch::try_new(Arc::clone(schema), columns)
        .map_err(|e| Error::internal(format!("result batch does not fit the schema: {e}")))
}

/// What a committed part holds, stored in its own footer.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct PartInfo {
    /// Ordinal of its first row in the whole input.
    pub first_row: u64,
    /// Rows it holds.
    pub rows: u64,
    /// Rows that failed for a reason worth retrying (judge down).
    pub retryable_rows: u64,
    /// The first such failure, for messages.
    pub retry_reason: Option<String>,
    /// Statistics of its rows.
    pub stats: SummaryState,
}

/// Writes one part of a run's results to a temporary file in the run folder;
/// [`PartWriter::commit`] makes it durable under its final name. Dropping it
/// uncommitted removes the temporary.
pub struct PartWriter {
    dir: PathBuf,
    temp: Option<tempfile::NamedTempFile>,
    writer: Option<ArrowWriter<File>>,
    schema: SchemaRef,
    summary: SummaryBuilder,
    first_row: u64,
    rows: u64,
    retryable_rows: u64,
    retry_reason: Option<String>,
}

impl PartWriter {
    /// Opens a new part starting at input row `first_row` in `dir`.
    pub fn create(
        dir: &Path,
        schema: SchemaRef,
        thresholds: &[(String, f64)],
        first_row: u64,
    ) -> Result<PartWriter, Error> {
        let temp = tempfile::Builder::new()
            .prefix(".part-")
            .suffix(".tmp")
            .tempfile_in(dir)
            .map_err(|e| Error::io(format!("{}: cannot create a part file: {e}", dir.display())))?;
        let file = temp
            .as_file()
            .try_clone()
            .map_err(|e| Error::io(format!("{}: {e}", temp.path().display())))?;
        let writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(part_properties()))
            .map_err(|e| Error::io(format!("{}: {e}", temp.path().display())))?;
        let summary = SummaryBuilder::new(&schema, thresholds);
        Ok(PartWriter {
            dir: dir.to_path_buf(),
            temp: Some(temp),
            writer: Some(writer),
            schema,
            summary,
            first_row,
            rows: 0,
            retryable_rows: 0,
            retry_reason: None,
        })
    }

    /// Rows written so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Writes the results of one input batch.
    pub fn write(&mut self, batch: &RowBatch, scores: ScoreColumns) -> Result<(), Error> {
        if self.retry_reason.is_none() && scores.retryable_rows > 0 {
            self.retry_reason = scores
                .retry_reason
                .clone()
                .or_else(|| scores.row_errors.iter().flatten().next().cloned());
        }
        self.retryable_rows += scores.retryable_rows;
        let record = result_record(&self.schema, batch, scores)?;
        self.summary.observe(&record);
        self.rows += record.num_rows() as u64;
        let temp = self
            .temp
            .as_ref()
            .expect("open")
            .path()
            .display()
            .to_string();
        self.writer
            .as_mut()
            .expect("open")
            .write(&record)
            .map_err(|e| Error::io(format!("{temp}: {e}")))
    }

    /// Closes the part, flushes it to disk and renames it into place as
    /// `part-<first row>.parquet`; returns what it holds.
    pub fn commit(mut self) -> Result<(PathBuf, PartInfo), Error> {
        let info = PartInfo {
            first_row: self.first_row,
            rows: self.rows,
            retryable_rows: self.retryable_rows,
            retry_reason: self.retry_reason.clone(),
            stats: self.summary.state(),
        };
        let mut writer = self.writer.take().expect("open");
        let temp = self.temp.take().expect("open");
        let shown = temp.path().display().to_string();
        let io = |e: &dyn std::fmt::Display| Error::io(format!("{shown}: {e}"));
        writer.append_key_value_metadata(KeyValue::new(
            PART_KEY.to_string(),
            serde_json::to_string(&info).expect("part info serialises"),
        ));
        writer.close().map_err(|e| io(&e))?;
        temp.as_file().sync_all().map_err(|e| io(&e))?;
        let path = self.dir.join(part_name(self.first_row));
        temp.persist(&path).map_err(|e| io(&e.error))?;
        sync_dir(&self.dir)?;
        Ok((path, info))
    }
}

/// File name of the part starting at `first_row`.
pub fn part_name(first_row: u64) -> String {
    format!("part-{first_row:020}.parquet")
}

/// Reads what a committed part holds from its footer.
pub fn read_part(path: &Path) -> Result<PartInfo, Error> {
    let shown = path.display();
    let file = File::open(path).map_err(|e| Error::io(format!("{shown}: {e}")))?;
    let meta = ParquetMetaDataReader::new()
        .parse_and_finish(&file)
        .map_err(|e| Error::bad_input(format!("{shown}: damaged part file: {e}")))?;
    let kv = meta
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == PART_KEY))
        .and_then(|k| k.value.clone())
        .ok_or_else(|| Error::bad_input(format!("{shown}: not a refscore part file")))?;
    serde_json::from_str(&kv).map_err(|e| Error::bad_input(format!("{shown}: {e}")))
}

/// Flushes a folder's entries (a rename inside it) to disk.
pub fn sync_dir(dir: &Path) -> Result<(), Error> {
    File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(|e| Error::io(format!("{}: cannot flush the folder: {e}", dir.display())))
}

/// Joins committed parts, in the order given, into one Parquet file at
/// `target`, with `schema` and the extra footer metadata `extra`. The
/// column chunks are copied as they are. Written to an exclusive temporary
/// file beside the target, flushed, renamed into place, and the folder
/// flushed, so the target is either the old file or the whole new one.
pub fn assemble(
    parts: &[PathBuf],
    schema: &SchemaRef,
    target: &Path,
    extra: Vec<KeyValue>,
) -> Result<(), Error> {
    let shown = target.display().to_string();
    let dir = parent_dir(target);
    let temp = tempfile::Builder::new()
        .prefix(&format!(
            ".{}.",
            target.file_name().unwrap_or_default().to_string_lossy()
        ))
        .suffix(".partial")
        .tempfile_in(&dir)
        .map_err(|e| Error::io(format!("{shown}: cannot create a temporary file: {e}")))?;
    let io = |e: &dyn std::fmt::Display| Error::io(format!("{shown}: {e}"));
    let file = temp.as_file().try_clone().map_err(|e| io(&e))?;
    if parts.is_empty() {
        let props = WriterProperties::builder()
            .set_key_value_metadata(Some(extra))
            .build();
        let writer =
            ArrowWriter::try_new(file, Arc::clone(schema), Some(props)).map_err(|e| io(&e))?;
        writer.close().map_err(|e| io(&e))?;
    } else {
        let first = File::open(&parts[0]).map_err(|e| io(&e))?;
        let first_meta = ParquetMetaDataReader::new()
            .parse_and_finish(&first)
            .map_err(|e| io(&e))?;
        let mut kv: Vec<KeyValue> = first_meta
            .file_metadata()
            .key_value_metadata()
            .map(|kv| kv.iter().filter(|k| k.key != PART_KEY).cloned().collect())
            .unwrap_or_default();
        kv.extend(extra);
        let props = Arc::new(
            WriterProperties::builder()
                .set_key_value_metadata(Some(kv))
                .build(),
        );
        let root = first_meta.file_metadata().schema_descr().root_schema_ptr();
        let mut writer = SerializedFileWriter::new(std::io::BufWriter::new(file), root, props)
            .map_err(|e| io(&e))?;
        for part in parts {
            let input = File::open(part).map_err(|e| io(&e))?;
            let meta = ParquetMetaDataReader::new()
                .parse_and_finish(&input)
                .map_err(|e| Error::bad_input(format!("{}: {e}", part.display())))?;
            if meta.file_metadata().schema_descr().root_schema()
                != first_meta.file_metadata().schema_descr().root_schema()
            {
                return Err(Error::internal(format!(
                    "{}: part has another schema than the first part",
                    part.display()
                )));
            }
            for rg in meta.row_groups() {
                let mut out = writer.next_row_group().map_err(|e| io(&e))?;
                for column in rg.columns() {
                    let close = ColumnCloseResult {
                        bytes_written: column.compressed_size() as u64,
                        rows_written: rg.num_rows() as u64,
                        metadata: column.clone(),
                        bloom_filter: None,
                        column_index: None,
                        offset_index: None,
                    };
                    out.append_column(&input, close).map_err(|e| io(&e))?;
                }
                out.close().map_err(|e| io(&e))?;
            }
        }
        let mut inner = writer.into_inner().map_err(|e| io(&e))?;
        inner.flush().map_err(|e| io(&e))?;
    }
    temp.as_file().sync_all().map_err(|e| io(&e))?;
    temp.persist(target).map_err(|e| io(&e.error))?;
    sync_dir(&dir)
}

/// Where a result file's summary goes: `<output>.summary.json`.
pub fn summary_path(output: &Path) -> PathBuf {
    let mut name = output.as_os_str().to_owned();
    name.push(".summary.json");
    PathBuf::from(name)
}

/// The folder a path is in (`.` for a bare file name).
pub fn parent_dir(path: &Path) -> PathBuf {
    match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// Writes `text` to `path` whole or not at all (see
/// [`refscore_core::files::write_atomically`]).
pub fn write_atomically(path: &Path, text: &str) -> Result<(), Error> {
    refscore_core::files::write_atomically(path, text.as_bytes())
        .map_err(|e| Error::io(format!("{}: {e}", path.display())))
}
