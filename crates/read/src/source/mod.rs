//! Where an input's rows come from. Each kind of input is one [`Source`]
//! in [`SOURCES`]: loose Parquet files on this machine or in an object
//! store, and tables (Delta Lake, Iceberg) read at a version. This is the
//! one seam between finding inputs and reading them: everything above it
//! sees [`InputFile`]s, cut into units by their footers, so units, shards
//! and resume work the same whatever the source. A new kind of source is
//! one module here and its line in [`SOURCES`].

mod delta;
mod iceberg;
mod local;
mod objects;
mod remote;
mod rows;

use std::cell::OnceCell;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::ArrayRef;
use arrow::datatypes::{Field, FieldRef, Schema, SchemaRef};
use object_store::path::Path as StorePath;
use refscore_core::Error;

pub(crate) use delta::{Fixup, TableColumns, TableFile};
pub(crate) use refscore_store::ObjectFile;
use refscore_store::Store;
pub use refscore_store::{is_url, redact, StoreOptions};
pub(crate) use rows::{open_rows, Failure, ReadPlan, RowReader, Rows};

use crate::{files, InputFile};

/// Every kind of input, in the order each is asked whether it reads a
/// spec: tables before the loose files that would otherwise take their
/// folders, and local files last (they take whatever is left).
static SOURCES: &[&dyn Source] = &[
    &delta::Delta,
    &iceberg::Iceberg,
    &objects::Objects,
    &local::LocalFiles,
];

/// One kind of input: what it claims, which files (and so row groups: the
/// units of work, shards and resume points, cut from the footers) it
/// lists, what identifies what it read, and what it refuses inside it.
pub(crate) trait Source: Sync {
    /// What it reads, as messages name it ("a Delta Lake table (_delta_log/)").
    fn name(&self) -> &'static str;

    /// Whether it reads what `input` names. Asked in [`SOURCES`]' order;
    /// the first to claim an input lists it.
    fn claims(&self, input: &Input) -> Result<bool, Error>;

    /// The files `input` names, in read order, with the table version read
    /// where it is a table (with the files' sizes and footers, what a
    /// resumed run checks it is reading the same rows by).
    fn list(&self, input: &Input) -> Result<Listing, Error>;

    /// A table format: whether the local folder `dir` holds one of its
    /// tables. No source reads the files inside such a folder loose: later
    /// versions remove and rewrite files without deleting them, so reading
    /// every file counts deleted and replaced rows too.
    fn table_in(&self, _dir: &Path) -> bool {
        false
    }

    /// A table format: the table folder (a key prefix, `""` at the root)
    /// that the object `key` of a store listing marks, if any; `keys`: the
    /// whole listing.
    fn table_of_key<'k>(
        &self,
        _key: &'k str,
        _keys: &std::collections::HashSet<&str>,
    ) -> Option<&'k str> {
        None
    }

    /// A table format: whether a store folder holds one of its tables,
    /// asked through `page(name)`, the first page of a listing of the
    /// folder's `name/` (one request each).
    fn table_at(
        &self,
        _page: &mut dyn FnMut(&str) -> Result<Vec<String>, Error>,
    ) -> Result<bool, Error> {
        Ok(false)
    }

    /// The refusal of `shown` (a spec) that names files inside one of its
    /// tables, `table` (its folder or URL), to be read loose; `which`: the
    /// table's folder and a space, where the spec is not the table itself.
    fn refuse_loose(&self, shown: &str, which: &str, table: &str) -> Error {
        Error::config(format!(
            "{shown}: {which}is {}, whose Parquet files include rows that later \
             versions deleted or replaced, so its files are never read loose: give the \
             table itself ({table}) to read its current version",
            self.name()
        ))
    }
}

/// What a spec names, as the sources look at it: a local path, or a key in
/// a store with what the store says about it, asked once and shared.
pub(crate) struct Input<'a> {
    pub(crate) spec: &'a str,
    pub(crate) options: &'a SourceOptions,
    /// A URL's store and key; `None`: a local path, folder or glob.
    pub(crate) store: Option<StoreInput>,
}

/// A URL's store and key, with the object at the key and the listing below
/// it fetched when a source first asks (each once).
pub(crate) struct StoreInput {
    pub(crate) store: Store,
    pub(crate) key: StorePath,
    head: OnceCell<Option<ObjectFile>>,
    listing: OnceCell<Vec<ObjectFile>>,
}

impl<'a> Input<'a> {
    fn new(spec: &'a str, options: &'a SourceOptions) -> Result<Input<'a>, Error> {
        let store = if refscore_store::is_url(spec) {
            let (store, key) = Store::open(spec, options.store)?;
            Some(StoreInput {
                store,
                key,
                head: OnceCell::new(),
                listing: OnceCell::new(),
            })
        } else {
            None
        };
        Ok(Input {
            spec,
            options,
            store,
        })
    }

    /// The spec as messages show it (a URL without credentials).
    pub(crate) fn shown(&self) -> String {
        redact(self.spec)
    }
}

impl StoreInput {
    /// Whether the key is a glob pattern (`*`, `?`, `[`).
    pub(crate) fn is_glob(&self) -> bool {
        self.key.as_ref().contains(['*', '?', '['])
    }

    /// The object at the key, if there is one (no request for the root).
    pub(crate) fn head(&self) -> Result<Option<&ObjectFile>, Error> {
        if self.head.get().is_none() {
            let key = &self.key;
            let found = match key.as_ref().is_empty() {
                true => None,
                false => self.store.head(key)?,
            };
            let _ = self.head.set(found);
        }
        Ok(self.head.get().expect("set").as_ref())
    }

    /// Every object below the key, in key order.
    pub(crate) fn listing(&self) -> Result<&[ObjectFile], Error> {
        if self.listing.get().is_none() {
            let _ = self.listing.set(self.store.list(&self.key)?);
        }
        Ok(self.listing.get().expect("set"))
    }

    /// Whether the key is a folder holding one of `source`'s tables, by
    /// the listing below it.
    pub(crate) fn is_table_of(&self, source: &dyn Source) -> Result<bool, Error> {
        if self.is_glob() || self.head()?.is_some() {
            return Ok(false);
        }
        let listing = self.listing()?;
        let keys: std::collections::HashSet<&str> =
            listing.iter().map(|o| o.key.as_ref()).collect();
        let own = self.key.as_ref();
        Ok(listing
            .iter()
            .any(|o| source.table_of_key(o.key.as_ref(), &keys) == Some(own)))
    }
}

/// The table source whose table the local folder `dir` holds, if any.
pub(crate) fn table_in(dir: &Path) -> Option<&'static dyn Source> {
    SOURCES.iter().copied().find(|s| s.table_in(dir))
}

/// The table source whose table a store listing below a folder holds,
/// with that table's folder key, if any.
pub(crate) fn table_of_listing<'k>(
    all: &'k [ObjectFile],
) -> Option<(&'static dyn Source, &'k str)> {
    let keys: std::collections::HashSet<&str> = all.iter().map(|o| o.key.as_ref()).collect();
    SOURCES.iter().copied().find_map(|source| {
        all.iter()
            .find_map(|o| source.table_of_key(o.key.as_ref(), &keys))
            .map(|table| (source, table))
    })
}

/// The table source whose table the store folder behind `page` holds.
pub(crate) fn table_at(
    page: &mut dyn FnMut(&str) -> Result<Vec<String>, Error>,
) -> Result<Option<&'static dyn Source>, Error> {
    for source in SOURCES.iter().copied() {
        if source.table_at(page)? {
            return Ok(Some(source));
        }
    }
    Ok(None)
}

/// How to reach the sources a spec names.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SourceOptions {
    /// Retries of object-store requests.
    pub store: StoreOptions,
    /// The table version to read (`--table-version`): a Delta table's
    /// version, an Iceberg table's snapshot id; `None`: the latest. Refused
    /// for inputs that are not tables.
    pub table_version: Option<u64>,
    /// Or the version that was current at this time (`--table-timestamp`,
    /// milliseconds since the epoch): the last commit (snapshot) at or
    /// before it.
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
    /// A table's file (Delta, Iceberg): how the table's columns read from
    /// it, and which of its rows later versions deleted.
    pub(crate) table_file: Option<TableFile>,
}

impl Found {
    /// A loose Parquet file (no table around it).
    pub(crate) fn loose(shown: PathBuf, origin: Origin) -> Found {
        Found {
            shown,
            origin,
            partition: Vec::new(),
            table_file: None,
        }
    }
}

/// The version of a table read: what identifies it (a resumed run reads
/// the same version or refuses) and how `inspect` shows it.
#[derive(Debug, Clone)]
pub struct TableVersion {
    /// The version's number (recorded in the run's fingerprint and summary
    /// as `table_version`).
    pub id: u64,
    /// Lines `inspect` prints about it ("Delta table version: 3").
    pub about: Vec<String>,
}

/// What a spec names: its files, in read order, and the table version read
/// where the spec is a table.
pub(crate) struct Listing {
    pub(crate) files: Vec<Found>,
    pub(crate) table: Option<TableVersion>,
}

/// `read` of each item, in order, up to 16 at a time on threads of their
/// own: a table's small files (Delta's stored deletion vectors, Iceberg's
/// manifests) are one request each on an object store, and a table has
/// one per data file or commit, so one after another their latencies add.
pub(crate) fn side_by_side<T: Sync, R: Send>(items: &[T], read: impl Fn(&T) -> R + Sync) -> Vec<R> {
    /// Requests in flight at once.
    const AT_ONCE: usize = 16;
    let per_thread = items.len().div_ceil(AT_ONCE).max(1);
    let read = &read;
    std::thread::scope(|scope| {
        let parts: Vec<_> = items
            .chunks(per_thread)
            .map(|part| scope.spawn(move || part.iter().map(read).collect::<Vec<_>>()))
            .collect();
        parts
            .into_iter()
            .flat_map(|part| part.join().expect("a read side by side panicked"))
            .collect()
    })
}

/// Finds the files `spec` names, through the first source in [`SOURCES`]
/// that claims it.
pub(crate) fn list(spec: &str, options: &SourceOptions) -> Result<Listing, Error> {
    let input = Input::new(spec, options)?;
    let mut chosen = None;
    for source in SOURCES.iter().copied() {
        if source.claims(&input)? {
            chosen = Some(source);
            break;
        }
    }
    let listing = chosen
        .expect("local files claim whatever no other source does")
        .list(&input)?;
    if listing.table.is_none()
        && (options.table_version.is_some() || options.table_timestamp_ms.is_some())
    {
        return Err(Error::config(format!(
            "{spec}: --table-version and --table-timestamp apply to a Delta or Iceberg table, \
             and this input is not one (no _delta_log/ or metadata/*.metadata.json in it)"
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
        table_file: found.table_file,
    }
    .with_counts()?;
    // An Iceberg file's equality deletes become positions, as its
    // position deletes are: its rows, units and resume points then count
    // the rows left, as the footer and the deletes say.
    if file
        .table_file
        .as_ref()
        .is_some_and(|t| !t.equality.is_empty())
    {
        file = iceberg::apply_equality_deletes(file)?;
    }
    // A table's file reads as its table's columns, whatever it stores.
    let own = match &file.table_file {
        Some(table) => Arc::clone(&table.columns.arrow),
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
