//! Where an input's bytes come from: local files, objects in a store, or
//! the active files of a Delta table. This is the one seam between finding
//! inputs and reading them: everything above it sees [`InputFile`]s, and a
//! new kind of source is one module here.

mod delta;
mod objects;
mod remote;
mod rows;

use std::path::PathBuf;
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use refscore_core::Error;

pub(crate) use delta::{DeltaFile, Fixup};
pub(crate) use refscore_store::ObjectFile;
pub use refscore_store::{is_url, redact, StoreOptions};
pub(crate) use rows::{open_rows, Failure, ReadPlan, RowReader, Rows};

use crate::{files, InputFile};

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
    /// Only the files `table_version`'s commit added, not the whole
    /// version: the rows one run appended to a table of nightly results
    /// (`report TABLE --night`).
    pub table_commit_only: bool,
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
    /// A Delta file: how the table's columns and its deletion vector read.
    pub(crate) delta: Option<DeltaFile>,
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
        objects::listing(spec, options)?
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
                    delta: None,
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

/// What a file's footer says, local or remote, as [`InputFile`] needs it.
pub(crate) struct Footer {
    pub(crate) meta: parquet::arrow::arrow_reader::ArrowReaderMetadata,
    /// SHA-256 of the footer bytes.
    pub(crate) sha256: String,
    /// Bytes in the file.
    pub(crate) size: u64,
    /// A local file's modification time, an object's version or ETag.
    pub(crate) identity: Option<String>,
}

/// Reads the footer of a found file.
pub(crate) fn open(found: Found) -> Result<InputFile, Error> {
    let footer = match &found.origin {
        Origin::Local => files::read_footer(&found.shown)?,
        Origin::Object(object) => remote::read_footer(object, &found.shown.display().to_string())?,
    };
    let mut file = InputFile {
        path: found.shown,
        rows: 0,
        schema: Arc::clone(footer.meta.schema()),
        row_groups: Vec::new(),
        size: footer.size,
        modified: footer.identity,
        footer_sha256: footer.sha256,
        meta: footer.meta,
        origin: found.origin,
        partition: found.partition,
        delta: found.delta,
    }
    .with_counts()?;
    // A Delta file reads as its table's columns, whatever it stores.
    let own = match &file.delta {
        Some(delta) => Arc::clone(&delta.columns.arrow),
        None => Arc::clone(file.meta.schema()),
    };
    file.schema = file.full_schema(&own);
    Ok(file)
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
