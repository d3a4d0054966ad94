//! Where an input's bytes come from: local files, objects in a store, or
//! the active files of a Delta table. This is the one seam between finding
//! inputs and reading them: everything above it sees [`InputFile`]s, and a
//! new kind of source is one module here.

mod delta;

mod remote;

use std::fs::File;
use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::{ArrayRef, RecordBatch, RecordBatchOptions, UInt32Array};
use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use parquet::arrow::arrow_reader::{
    ArrowReaderBuilder, ParquetRecordBatchReader, ParquetRecordBatchReaderBuilder, RowSelection,
};
use parquet::arrow::ProjectionMask;
use refscore_core::Error;

pub(crate) use refscore_store::ObjectFile;
pub use refscore_store::{is_url, redact, StoreOptions};

use crate::{files, quiet_panic, InputFile};

/// How to reach the sources a spec names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOptions {
    /// Retries of object-store requests.
    pub store: StoreOptions,
    /// The Delta table version to read (`--table-version`); `None`: the
    /// latest. Refused for inputs that are not tables.
    pub table_version: Option<u64>,
    /// Or the version that was current at this time (`--table-timestamp`,
    /// milliseconds since the epoch): the last commit at or before it.
    pub table_timestamp_ms: Option<i64>,
}

/// Where one input file's bytes are read from.
#[derive(Debug, Clone)]
pub(crate) enum Origin {
    /// A file on this machine.
    Local,
    /// An object in a store.
    Object(ObjectFile),
}

/// One input file found, before its footer is read.
pub(crate) struct Found {
    /// The name messages give it: a path, or a URL without credentials.
    pub(crate) shown: PathBuf,
    pub(crate) origin: Origin,
    /// A Delta file's partition values: columns the file does not hold,
    /// one value for all its rows (a 1-row array each).
    pub(crate) partition: Vec<(FieldRef, ArrayRef)>,
}

/// What a spec names: its files, in read order, and the table version read
/// where the spec is a table.
pub(crate) struct Listing {
    pub(crate) files: Vec<Found>,
    pub(crate) table_version: Option<u64>,
}

/// Finds the files `spec` names: a local file, folder or glob; a URL of an
/// object, a prefix or a glob in a store; or a Delta table, local or in a
/// store (a folder holding `_delta_log/`), whose active files are read.
pub(crate) fn list(spec: &str, options: &SourceOptions) -> Result<Listing, Error> {
    let listing = if refscore_store::is_url(spec) {
        object_listing(spec, options)?
    } else if delta::is_local_table(spec) {
        delta::list_local(spec, options)?
    } else {
        Listing {
            files: files::discover(spec)?
                .into_iter()
                .map(|p| Found {
                    shown: p,
                    origin: Origin::Local,
                    partition: Vec::new(),
                })
                .collect(),
            table_version: None,
        }
    };
    if listing.table_version.is_none()
        && (options.table_version.is_some() || options.table_timestamp_ms.is_some())
    {
        return Err(Error::config(format!(
            "{spec}: --table-version and --table-timestamp apply to a Delta table, and this \
             input is not one (no _delta_log/ in it)"
        )));
    }
    Ok(listing)
}

/// The objects a URL names: one object, every Parquet object below a
/// prefix, the objects a glob matches, or a Delta table's active files.
fn object_listing(spec: &str, options: &SourceOptions) -> Result<Listing, Error> {
    let (store, key) = refscore_store::Store::open(spec, options.store)?;
    let shown = redact(spec);
    let found = |o: ObjectFile| Found {
        shown: PathBuf::from(store.shown(&o.key)),
        origin: Origin::Object(o),
        partition: Vec::new(),
    };
    let key_text = key.as_ref().to_string();
    let files: Vec<Found> = if let Some(glob_at) = key_text.find(['*', '?', '[']) {
        let pattern = glob::Pattern::new(&key_text)
            .map_err(|e| Error::usage(format!("{shown}: bad glob pattern: {e}")))?;
        let prefix = key_text[..glob_at]
            .rsplit_once('/')
            .map_or("", |(folder, _)| folder);
        let all = store.list(&prefix.into())?;
        refuse_table_objects(&shown, &all)?;
        all.into_iter()
            .filter(|o| pattern.matches(o.key.as_ref()))
            .map(found)
            .collect()
    } else if let Some(object) = (!key_text.is_empty())
        .then(|| store.head(&key))
        .transpose()?
        .flatten()
    {
        vec![found(object)]
    } else {
        let all = store.list(&key)?;
        if delta::is_table_listing(&key, &all) {
            return delta::list_store(spec, &store, &key, options);
        }
        refuse_table_objects(&shown, &all)?;
        all.into_iter()
            .filter(|o| is_data_object(&key, o))
            .map(found)
            .collect()
    };
    if files.is_empty() {
        return Err(Error::missing(format!(
            "{shown}: no Parquet objects here (no object with this key, and none ending in \
             .parquet below it)"
        )));
    }
    Ok(Listing {
        files,
        table_version: None,
    })
}

/// Whether an object below `prefix` is a data file as a folder listing
/// counts them: `.parquet`/`.parq`, no hidden (`.`/`_`) folder or name.
fn is_data_object(prefix: &object_store::path::Path, o: &ObjectFile) -> bool {
    let below: Vec<_> = o
        .key
        .prefix_match(prefix)
        .map(|p| p.collect())
        .unwrap_or_default();
    let hidden = below.iter().any(|part| {
        let part = part.as_ref();
        part.starts_with('.') || part.starts_with('_')
    });
    let name = o.key.filename().unwrap_or("");
    !hidden && (name.ends_with(".parquet") || name.ends_with(".parq"))
}

/// Refuses a listing that holds a Delta table's log below the spec's own
/// folder: that table's files read loose would count deleted rows.
fn refuse_table_objects(shown: &str, all: &[ObjectFile]) -> Result<(), Error> {
    if let Some(log) = all
        .iter()
        .find(|o| o.key.parts().any(|p| p.as_ref() == "_delta_log"))
    {
        let table = log.key.as_ref().split("/_delta_log").next().unwrap_or("");
        return Err(Error::config(format!(
            "{shown}: holds the Delta Lake table {table}/, whose Parquet files include rows that \
             later versions deleted or replaced; give the table's own URL to read its current \
             version"
        )));
    }
    Ok(())
}

/// Reads the footer of a found file.
pub(crate) fn open(found: Found) -> Result<InputFile, Error> {
    let mut file = match &found.origin {
        Origin::Local => files::read_footer(&found.shown)?,
        Origin::Object(object) => {
            let shown = found.shown.display().to_string();
            let footer = remote::read_footer(object, &shown)?;
            InputFile {
                path: found.shown.clone(),
                rows: 0,
                schema: Arc::clone(footer.meta.schema()),
                row_groups: Vec::new(),
                size: object.size,
                modified: object.version.clone(),
                footer_sha256: footer.sha256,
                meta: footer.meta,
                origin: Origin::Local,
                partition: Vec::new(),
            }
            .with_counts()?
        }
    };
    file.origin = found.origin;
    file.partition = found.partition;
    file.schema = file.full_schema(file.meta.schema());
    Ok(file)
}

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
}

enum Inner {
    Local(ParquetRecordBatchReader),
    Object(remote::ObjectBatches),
}

/// Opens a reader of the columns `names` (projected columns come in the
/// file's order, then partition columns in the order asked) of `rows`.
pub(crate) fn open_rows(
    file: &InputFile,
    names: &[&str],
    rows: Rows,
    batch_size: usize,
) -> Result<RowReader, Error> {
    let shown = file.path.display().to_string();
    let mut roots = Vec::new();
    let mut constants = Vec::new();
    for name in names {
        if let Some((field, value)) = file.partition.iter().find(|(f, _)| f.name() == name) {
            constants.push((Arc::clone(field), Arc::clone(value)));
        } else {
            roots.push(
                file.meta
                    .schema()
                    .index_of(name)
                    .expect("columns are checked when the input is opened"),
            );
        }
    }
    let plan = ReadPlan {
        mask: ProjectionMask::roots(file.meta.parquet_schema(), roots),
        row_groups: rows.row_groups,
        selection: rows.selection,
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
    Ok(RowReader { inner, constants })
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
            Ok(Some(Ok(batch))) => batch,
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

impl InputFile {
    /// The schema the file is read with: its own columns, then its
    /// partition columns.
    pub(crate) fn full_schema(&self, own: &SchemaRef) -> SchemaRef {
        if self.partition.is_empty() {
            return Arc::clone(own);
        }
        let mut fields: Vec<Field> = own.fields().iter().map(|f| f.as_ref().clone()).collect();
        fields.extend(self.partition.iter().map(|(f, _)| f.as_ref().clone()));
        Arc::new(Schema::new_with_metadata(fields, own.metadata().clone()))
    }
}
