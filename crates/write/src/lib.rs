//! Writing the results (SPEC §5): one output row per input row, in input
//! order, `id` first, then the metric columns, then `status` and `error`,
//! then any passed-through input columns. The file is written under a
//! temporary name beside the target and renamed only when complete, so a
//! crash never leaves a file that looks finished.

mod summary;

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, Schema, SchemaRef};
use parquet::arrow::ArrowWriter;
use parquet::basic::{Compression, ZstdLevel};
use parquet::file::properties::WriterProperties;
use refscore_batch::{Error, RowBatch, ScoreColumns};

pub use summary::{MetricSummary, Summary, SummaryBuilder};

/// The `status` values of a result row.
pub mod status {
    /// Every requested metric was computed.
    pub const OK: &str = "ok";
    /// Some metrics were computed, some failed (`error` says which and why).
    pub const PARTIAL: &str = "partial";
    /// The row could not be scored at all (e.g. null reference).
    pub const ERROR: &str = "error";
}

/// Builds the result schema from the id field, the metric stages' fields
/// and the passed-through input fields. Fails when names collide.
pub fn result_schema(id: Field, metrics: &[Field], keep: &[Field]) -> Result<SchemaRef, Error> {
    let mut fields: Vec<Field> = Vec::with_capacity(metrics.len() + keep.len() + 3);
    fields.push(id);
    fields.extend(metrics.iter().cloned());
    fields.push(Field::new("status", DataType::Utf8, false));
    fields.push(Field::new("error", DataType::Utf8, true));
    let reserved: Vec<String> = fields.iter().map(|f| f.name().clone()).collect();
    for k in keep {
        if reserved.contains(k.name()) {
            return Err(Error::config(format!(
                "--keep column '{}' has the same name as a result column; rename it in the input or drop it from --keep",
                k.name()
            )));
        }
        fields.push(k.clone());
    }
    Ok(Arc::new(Schema::new(fields)))
}

/// Writes result batches to a temporary file and renames it into place on
/// [`ResultWriter::finish`]. Dropping it unfinished removes the temporary.
pub struct ResultWriter {
    target: PathBuf,
    temp: PathBuf,
    writer: Option<ArrowWriter<File>>,
    schema: SchemaRef,
    summary: SummaryBuilder,
}

impl ResultWriter {
    /// Checks the target (its directory exists; it does not exist unless
    /// `overwrite`) and opens the temporary file beside it.
    pub fn create(
        target: &Path,
        overwrite: bool,
        schema: SchemaRef,
        thresholds: &[(String, f64)],
    ) -> Result<ResultWriter, Error> {
        let shown = target.display();
        let dir = match target.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_path_buf(),
            _ => PathBuf::from("."),
        };
        if !dir.is_dir() {
            return Err(Error::io(format!(
                "{shown}: output directory {} does not exist",
                dir.display()
            )));
        }
        if target.is_dir() {
            return Err(Error::config(format!(
                "{shown}: output path is a directory; give a file name"
            )));
        }
        if target.exists() && !overwrite {
            return Err(Error::config(format!(
                "{shown}: output already exists; pass --overwrite to replace it"
            )));
        }
        let name = target
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let temp = dir.join(format!(".{name}.{}.partial", std::process::id()));
        let file = File::create(&temp)
            .map_err(|e| Error::io(format!("{}: cannot create: {e}", temp.display())))?;
        let props = WriterProperties::builder()
            .set_compression(Compression::ZSTD(
                ZstdLevel::try_new(1).expect("valid level"),
            ))
            .set_max_row_group_row_count(Some(256 * 1024))
            .build();
        let writer = ArrowWriter::try_new(file, Arc::clone(&schema), Some(props))
            .map_err(|e| Error::io(format!("{}: {e}", temp.display())))?;
        let summary = SummaryBuilder::new(&schema, thresholds);
        Ok(ResultWriter {
            target: target.to_path_buf(),
            temp,
            writer: Some(writer),
            schema,
            summary,
        })
    }

    /// The schema of the result file.
    pub fn schema(&self) -> &SchemaRef {
        &self.schema
    }

    /// Writes the results of one input batch: its ids, the stages' score
    /// columns (in schema order), statuses, errors and passed-through columns.
    pub fn write(&mut self, batch: &RowBatch, scores: ScoreColumns) -> Result<(), Error> {
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
        let mut columns: Vec<ArrayRef> = Vec::with_capacity(self.schema.fields().len());
        columns.push(Arc::clone(&batch.id));
        columns.extend(scores.arrays);
        columns.push(Arc::new(StringArray::from(status)));
        columns.push(Arc::new(StringArray::from(errors)));
        columns.extend(batch.passthrough.iter().cloned());
        let record = RecordBatch::try_new(Arc::clone(&self.schema), columns).map_err(|e| {
            Error::bad_input(format!(
                "internal: result batch does not fit the schema: {e}"
            ))
        })?;
        self.summary.observe(&record);
        self.writer
            .as_mut()
            .expect("not finished")
            .write(&record)
            .map_err(|e| Error::io(format!("{}: {e}", self.temp.display())))
    }

    /// Flushes, closes and renames the file into place; returns the
    /// statistics of what was written.
    pub fn finish(mut self) -> Result<SummaryBuilder, Error> {
        let writer = self.writer.take().expect("not finished");
        writer
            .close()
            .map_err(|e| Error::io(format!("{}: {e}", self.temp.display())))?;
        std::fs::rename(&self.temp, &self.target).map_err(|e| {
            Error::io(format!(
                "{}: cannot rename into place: {e}",
                self.target.display()
            ))
        })?;
        Ok(std::mem::replace(
            &mut self.summary,
            SummaryBuilder::empty(),
        ))
    }
}

impl Drop for ResultWriter {
    fn drop(&mut self) {
        if self.writer.is_some() {
            self.writer = None;
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Writes `text` to `path` through a temporary file and a rename.
pub fn write_atomically(path: &Path, text: &str) -> Result<(), Error> {
    refscore_batch::files::write_atomically(path, text.as_bytes())
        .map_err(|e| Error::io(format!("{}: {e}", path.display())))
}
