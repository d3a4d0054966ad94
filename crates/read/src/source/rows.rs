//! Reading some columns and rows of one input file, local or remote, with
//! a Delta file's partition columns added where asked.

use std::fs::File;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::datatypes::{FieldRef, Schema};
use parquet::arrow::arrow_reader::{
    ArrowReaderBuilder, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::arrow::ProjectionMask;
use refscore_core::Error;

use super::{remote, Fixup, Origin};
use crate::{files, quiet_panic, InputFile};

/// What a read takes from a file: which columns (by root index) and which
/// rows, in batches of how many.
pub(crate) struct ReadPlan {
    pub(crate) mask: ProjectionMask,
    pub(crate) row_groups: Option<Vec<usize>>,
    pub(crate) selection: Option<RowSelection>,
    pub(crate) batch_size: usize,
}

impl ReadPlan {
    /// The plan set on a Parquet reader builder, local or push-fed.
    pub(crate) fn apply<T>(self, builder: ArrowReaderBuilder<T>) -> ArrowReaderBuilder<T> {
        let mut builder = builder
            .with_projection(self.mask)
            .with_batch_size(self.batch_size);
        if let Some(groups) = self.row_groups {
            builder = builder.with_row_groups(groups);
        }
        if let Some(selection) = self.selection {
            builder = builder.with_row_selection(selection);
        }
        builder
    }
}

/// Why a batch could not be had.
pub(crate) enum Failure {
    /// The store failed, after its retries: the error keeps its class.
    Store(Error),
    /// The bytes do not decode (the decoder's message).
    Decode(String),
}

/// Which rows of a file a read takes.
#[derive(Default)]
pub(crate) struct Rows {
    /// Only these row groups (`None`: all).
    pub(crate) row_groups: Option<Vec<usize>>,
    /// Only these rows of them.
    pub(crate) selection: Option<RowSelection>,
}

/// Record batches of some columns of one input file, local or remote, with
/// a Delta file's partition columns added where asked.
pub(crate) struct RowReader {
    inner: Inner,
    constants: Vec<(FieldRef, ArrayRef)>,
    /// A Delta file's batches become its table's columns.
    fixup: Option<Fixup>,
}

enum Inner {
    Local(ParquetRecordBatchReader),
    Object(remote::ObjectBatches),
}

/// Opens a reader of the columns `names` (projected columns come in the
/// file's order, a Delta file's in the order asked, then partition columns
/// in the order asked) of `rows`. A Delta file's `rows` count the rows its
/// deletion vector leaves, and those are all that is read.
pub(crate) fn open_rows(
    file: &InputFile,
    names: &[&str],
    rows: Rows,
    batch_size: usize,
) -> Result<RowReader, Error> {
    let shown = file.path.display().to_string();
    let mut roots = Vec::new();
    let mut data = Vec::new();
    let mut constants = Vec::new();
    for name in names {
        if let Some((field, value)) = file.partition.iter().find(|(f, _)| f.name() == name) {
            constants.push((Arc::clone(field), Arc::clone(value)));
        } else if file.table_file.is_some() {
            data.push(*name);
        } else {
            roots.push(
                file.meta
                    .schema()
                    .index_of(name)
                    .expect("columns are checked when the input is opened"),
            );
        }
    }
    let (mask, fixup, selection) = match &file.table_file {
        None => (
            ProjectionMask::roots(file.meta.parquet_schema(), roots),
            None,
            rows.selection,
        ),
        Some(table) => {
            let (mask, fixup) = table
                .read_plan(&file.meta, &data)
                .map_err(|e| Error::bad_input(format!("{shown}: {e}")))?;
            let selection = table.selection(&file.meta, rows.row_groups.as_deref(), rows.selection);
            (mask, fixup, selection)
        }
    };
    let plan = ReadPlan {
        mask,
        row_groups: rows.row_groups,
        selection,
        batch_size,
    };
    let inner = match &file.origin {
        Origin::Local => {
            let handle = File::open(&file.path).map_err(|e| {
                Error::io(format!("{shown}: cannot open: {}", files::io_reason(&e)))
            })?;
            let builder =
                ParquetRecordBatchReaderBuilder::new_with_metadata(handle, file.meta.clone());
            Inner::Local(
                plan.apply(builder)
                    .build()
                    .map_err(|e| Error::bad_input(format!("{shown}: {e}")))?,
            )
        }
        Origin::Object(object) => Inner::Object(remote::ObjectBatches::new(
            object, &shown, &file.meta, plan,
        )?),
    };
    Ok(RowReader {
        inner,
        constants,
        fixup,
    })
}

impl RowReader {
    /// The next batch. The decoder's panics on malformed data are caught
    /// and become a [`Failure::Decode`].
    pub(crate) fn next_batch(&mut self) -> Option<Result<RecordBatch, Failure>> {
        let next = quiet_panic::catch(|| match &mut self.inner {
            Inner::Local(reader) => reader
                .next()
                .map(|r| r.map_err(|e| Failure::Decode(e.to_string()))),
            Inner::Object(reader) => reader.next_batch(),
        });
        let batch = match next {
            Ok(Some(Ok(batch))) => match &self.fixup {
                None => batch,
                Some(fixup) => match fixup.apply(batch) {
                    Ok(batch) => batch,
                    Err(e) => return Some(Err(Failure::Decode(e))),
                },
            },
            Ok(other) => return other,
            Err(panic) => {
                return Some(Err(Failure::Decode(format!(
                    "the decoder failed ({panic})"
                ))))
            }
        };
        if self.constants.is_empty() {
            return Some(Ok(batch));
        }
        Some(Ok(self.with_constants(batch)))
    }

    fn with_constants(&self, batch: RecordBatch) -> RecordBatch {
        let rows = batch.num_rows();
        let repeat = UInt32Array::from(vec![0u32; rows]);
        let mut fields: Vec<FieldRef> = batch.schema().fields().iter().cloned().collect();
        let mut columns: Vec<ArrayRef> = batch.columns().to_vec();
        for (field, value) in &self.constants {
            fields.push(Arc::clone(field));
            columns.push(
                arrow::compute::take(value, &repeat, None).expect("index 0 of a 1-row array"),
            );
        }
        RecordBatch::try_new_with_options(
            Arc::new(Schema::new(fields)),
            columns,
            &RecordBatchOptions::new().with_row_count(Some(rows)),
        )
        .expect("columns of the batch's length")
    }
}
