//! Delta Lake tables: the files a version holds, as delta-rs's kernel
//! replays the table's log (commits, checkpoints, removes), with each
//! file's partition values as columns. refscore then reads those files
//! row group by row group like any other (so units, shards and resume work
//! on tables as on files), through the kernel's own read plan: columns by
//! their logical names (column mapping `name` and `id`), a column a file
//! predates as nulls (schema evolution), and without the rows the file's
//! deletion vector removes. Files a later version removed are never read.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, RecordBatch, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef, Schema, SchemaRef};
use delta_kernel::engine::arrow_conversion::TryFromKernel;
use delta_kernel::engine::arrow_utils::{fixup_parquet_read, parquet_read_plan, ReorderIndex};
use delta_kernel::history_manager::{latest_version_as_of, HistoryCommitType};
use delta_kernel::scan::state::{DvInfo, ScanFile};
use delta_kernel::schema::{StructField, StructType};
use delta_kernel::snapshot::Snapshot;
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;
use delta_kernel_default_engine::DefaultEngine;
use object_store::path::Path as StorePath;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::{ArrowReaderMetadata, RowSelection, RowSelector};
use parquet::arrow::ProjectionMask;
use refscore_core::Error;
use url::Url;

use super::{Found, Input, Listing, Origin, Source, SourceOptions, TableVersion};
use refscore_store::{runtime, ObjectFile, Store};

/// Delta Lake tables, local or in a store: a folder holding `_delta_log/`.
pub(super) struct Delta;

impl Source for Delta {
    fn name(&self) -> &'static str {
        "a Delta Lake table (_delta_log/)"
    }

    fn claims(&self, input: &Input) -> Result<bool, Error> {
        match &input.store {
            None => Ok(self.table_in(Path::new(input.spec))),
            Some(at) => at.is_table_of(self),
        }
    }

    fn list(&self, input: &Input) -> Result<Listing, Error> {
        match &input.store {
            None => list_local(input.spec, input.options),
            Some(at) => list_store(input.spec, &at.store, &at.key, input.options),
        }
    }

    fn table_in(&self, dir: &Path) -> bool {
        dir.join("_delta_log").is_dir()
    }

    fn table_of_key<'k>(
        &self,
        key: &'k str,
        _keys: &std::collections::HashSet<&str>,
    ) -> Option<&'k str> {
        if key.starts_with("_delta_log/") {
            return Some("");
        }
        key.find("/_delta_log/").map(|at| &key[..at])
    }

    fn table_at(
        &self,
        page: &mut dyn FnMut(&str) -> Result<Vec<String>, Error>,
    ) -> Result<bool, Error> {
        Ok(!page("_delta_log")?.is_empty())
    }
}

/// How `inspect` and the listing name version `version` of a table.
fn version_read(version: u64) -> Option<TableVersion> {
    Some(TableVersion {
        id: version,
        about: vec![format!("Delta table version: {version}")],
    })
}

/// The active files of the local table at `spec`.
fn list_local(spec: &str, options: &SourceOptions) -> Result<Listing, Error> {
    let dir = std::fs::canonicalize(spec)
        .map_err(|e| Error::io(format!("{spec}: cannot resolve: {e}")))?;
    let url = Url::from_directory_path(&dir)
        .map_err(|_| Error::io(format!("{spec}: not a path a URL can name")))?;
    let store: Arc<dyn ObjectStore> = Arc::new(object_store::local::LocalFileSystem::new());
    let files = active_files(spec, store, &url, options)?;
    let mut out = Vec::with_capacity(files.1.len());
    for file in files.1 {
        let path = file.url.to_file_path().map_err(|_| {
            Error::bad_input(format!(
                "{spec}: the table's log names {}, which is not a local file",
                file.url
            ))
        })?;
        out.push(Found {
            shown: path,
            origin: Origin::Local,
            partition: file.partition,
            table_file: Some(file.read),
        });
    }
    Ok(Listing {
        files: out,
        table: version_read(files.0),
    })
}

/// The active files of the table at `key` in `store`.
fn list_store(
    spec: &str,
    store: &Store,
    key: &StorePath,
    options: &SourceOptions,
) -> Result<Listing, Error> {
    let mut url = store.base.clone();
    url.set_path(&format!("/{key}/"));
    let (version, files) = active_files(spec, Arc::clone(&store.store), &url, options)?;
    let mut out = Vec::with_capacity(files.len());
    for file in files {
        let key = StorePath::from_url_path(file.url.path()).map_err(|e| {
            Error::bad_input(format!(
                "{spec}: the table's log names {}, not a key of this store: {e}",
                super::redact(file.url.as_str())
            ))
        })?;
        // The log gives each file's size, and a table's files never
        // change (the version read is in the fingerprint): no request per
        // file here. A file the store lacks is a 66 when its footer is read.
        let object = ObjectFile {
            store: Arc::clone(&store.store),
            key,
            size: file.size,
            version: None,
            e_tag: None,
            version_id: None,
        };
        out.push(Found {
            shown: PathBuf::from(store.shown(&object.key)),
            origin: Origin::Object(object),
            partition: file.partition,
            table_file: Some(file.read),
        });
    }
    Ok(Listing {
        files: out,
        table: version_read(version),
    })
}

/// One file of a table's version.
struct ActiveFile {
    url: Url,
    size: u64,
    partition: Vec<(FieldRef, ArrayRef)>,
    read: TableFile,
}

/// What the kernel reports for one file, before partition values are typed
/// and its deletion vector is loaded.
struct Listed {
    path: String,
    size: i64,
    dv: DvInfo,
    partition_values: std::collections::HashMap<String, String>,
}

/// A table version's data columns (not its partition columns) as every file
/// of it is read: by their logical names and the table's types, whatever
/// the file stores them as. It exists so that files written before a
/// rename, a new column or a type widening read as the table says.
#[derive(Debug)]
pub(crate) struct TableColumns {
    /// The columns as Arrow fields, logical names, in the table's order.
    pub(crate) arrow: SchemaRef,
    /// The same columns as the kernel names them (the read's target).
    logical: Vec<StructField>,
    /// How each is stored: its physical name and, in column mapping mode
    /// `id`, its Parquet field id (what the kernel matches a file's columns by).
    physical: Vec<StructField>,
}

impl TableColumns {
    /// A table's columns from their logical and stored (physical) forms,
    /// in the table's order; `shown` names the table in messages.
    pub(crate) fn new(
        shown: &str,
        logical: Vec<StructField>,
        physical: Vec<StructField>,
    ) -> Result<TableColumns, Error> {
        let arrow = logical
            .iter()
            .map(|f| {
                Field::try_from_kernel(f)
                    .map(|a| a.with_metadata(std::collections::HashMap::new()))
                    .map_err(|e| Error::bad_input(format!("{shown}: column '{}': {e}", f.name())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok(TableColumns {
            arrow: Arc::new(Schema::new(arrow)),
            logical,
            physical,
        })
    }
}

/// How one file of a table (Delta, Iceberg) is read: it exists to carry
/// what the table's log or metadata says about the file beyond its bytes
/// (its table's columns, the rows deleted since it was written) from
/// listing to reading.
#[derive(Debug, Clone)]
pub(crate) struct TableFile {
    /// The columns of the table's version, shared by all its files.
    pub(crate) columns: Arc<TableColumns>,
    /// Row indexes (within the file, ascending) that its deletion vector
    /// (Iceberg: its position deletes) removes; `None`: it has none.
    pub(crate) deleted: Option<Arc<[u64]>>,
    /// Iceberg equality deletes that apply to the file: when its footer
    /// is read, the rows they match join `deleted`.
    pub(crate) equality: Vec<Arc<super::iceberg::EqualityDeletes>>,
}

impl TableFile {
    /// Rows of `start..start + rows` (a row group's, within the file) that
    /// the deletion vector leaves.
    pub(crate) fn live(&self, start: u64, rows: u64) -> u64 {
        let Some(deleted) = self.deleted.as_deref() else {
            return rows;
        };
        let lo = deleted.partition_point(|&r| r < start);
        let hi = deleted.partition_point(|&r| r < start + rows);
        rows - (hi - lo) as u64
    }

    /// The rows a read of `row_groups` (in read order; `None`: all) takes:
    /// those the deletion vector leaves, and of them those `asked` selects
    /// (it counts the rows left, as `rows` and `row_groups` do).
    pub(crate) fn selection(
        &self,
        meta: &ArrowReaderMetadata,
        row_groups: Option<&[usize]>,
        asked: Option<RowSelection>,
    ) -> Option<RowSelection> {
        let Some(deleted) = self.deleted.as_deref() else {
            return asked;
        };
        let groups = meta.metadata().row_groups();
        let mut starts = Vec::with_capacity(groups.len());
        let mut at = 0u64;
        for g in groups {
            starts.push(at);
            at += g.num_rows().max(0) as u64;
        }
        let all: Vec<usize> = (0..groups.len()).collect();
        let mut selectors = Vec::new();
        for &g in row_groups.unwrap_or(&all) {
            let (start, rows) = (starts[g], groups[g].num_rows().max(0) as u64);
            let end = start + rows;
            let mut at = start;
            let from = deleted.partition_point(|&r| r < start);
            for &r in deleted[from..].iter().take_while(|&&r| r < end) {
                if r > at {
                    selectors.push(RowSelector::select((r - at) as usize));
                }
                selectors.push(RowSelector::skip(1));
                at = r + 1;
            }
            if end > at {
                selectors.push(RowSelector::select((end - at) as usize));
            }
        }
        let kept = RowSelection::from(selectors);
        Some(match asked {
            Some(asked) => kept.and_then(&asked),
            None => kept,
        })
    }

    /// The file's own (top-level) names of the data columns `names`
    /// (logical names): their physical names, and in column mapping mode
    /// `id` also whatever the file calls the column carrying each one's
    /// field id. It exists for what reads the footer by column (the bytes a
    /// batch may hold), where the logical names match nothing once columns
    /// are mapped.
    pub(crate) fn stored_names(&self, meta: &ArrowReaderMetadata, names: &[&str]) -> Vec<String> {
        use delta_kernel::schema::{ColumnMetadataKey, MetadataValue};
        let columns = &self.columns;
        let file_fields = meta
            .metadata()
            .file_metadata()
            .schema_descr()
            .root_schema()
            .get_fields();
        let mut stored = Vec::new();
        for (logical, physical) in columns.logical.iter().zip(&columns.physical) {
            if !names.contains(&logical.name().as_str()) {
                continue;
            }
            stored.push(physical.name().to_string());
            if let Some(MetadataValue::Number(id)) =
                physical.get_config_value(&ColumnMetadataKey::ParquetFieldId)
            {
                stored.extend(
                    file_fields
                        .iter()
                        .filter(|f| {
                            let info = f.get_basic_info();
                            info.has_id() && i64::from(info.id()) == *id
                        })
                        .map(|f| f.name().to_string()),
                );
            }
        }
        stored
    }

    /// What to read of the file for the data columns `names` (logical
    /// names, in that order): the kernel's projection of the file, and its
    /// fix-up of each batch (columns matched by field id or physical name,
    /// one the file lacks as nulls, widened types cast, logical names).
    /// `Err` is the kernel's reason, for a one-line message.
    pub(crate) fn read_plan(
        &self,
        meta: &ArrowReaderMetadata,
        names: &[&str],
    ) -> Result<(ProjectionMask, Option<Fixup>), String> {
        let columns = &self.columns;
        let mut physical = Vec::with_capacity(names.len());
        let mut logical = Vec::with_capacity(names.len());
        for name in names {
            let i = columns
                .logical
                .iter()
                .position(|f| f.name() == name)
                .ok_or_else(|| format!("column '{name}' is not one of the table's"))?;
            physical.push(columns.physical[i].clone());
            logical.push(columns.logical[i].clone());
        }
        if names.is_empty() {
            return Ok((
                ProjectionMask::none(meta.parquet_schema().num_columns()),
                None,
            ));
        }
        let requested = Arc::new(StructType::try_new(physical).map_err(|e| e.to_string())?);
        let (reorder, mask) = parquet_read_plan(&requested, meta).map_err(|e| e.to_string())?;
        let target = Arc::new(StructType::try_new(logical).map_err(|e| e.to_string())?);
        Ok((
            mask.unwrap_or_else(ProjectionMask::all),
            Some(Fixup { reorder, target }),
        ))
    }
}

/// The kernel's fix-up of the batches read from one file: see
/// [`TableFile::read_plan`].
pub(crate) struct Fixup {
    reorder: Vec<ReorderIndex>,
    target: delta_kernel::schema::SchemaRef,
}

impl Fixup {
    /// A batch as read from the file, as the table's columns.
    pub(crate) fn apply(&self, batch: RecordBatch) -> Result<RecordBatch, String> {
        let data = fixup_parquet_read(batch, &self.reorder, None, None, Some(&self.target))
            .map_err(|e| e.to_string())?;
        Ok(data.into())
    }
}

/// The table's version read and its active files, in the log's order.
fn active_files(
    spec: &str,
    store: Arc<dyn ObjectStore>,
    url: &Url,
    options: &SourceOptions,
) -> Result<(u64, Vec<ActiveFile>), Error> {
    let shown = super::redact(spec);
    let fail = |e: delta_kernel::error::KernelError| delta_error(&shown, e);
    let executor = Arc::new(TokioMultiThreadExecutor::new(runtime().handle().clone()));
    let engine = DefaultEngine::builder(store)
        .with_task_executor(executor)
        .build();
    let mut builder = Snapshot::builder_for(url.as_str());
    if let Some(version) = options.table_version {
        builder = builder.at_version(version);
    }
    let snapshot = match (builder.build(&engine), options.table_version) {
        (Ok(snapshot), _) => snapshot,
        (Err(e), Some(asked)) => {
            // Say which versions there are, where the latest can be read.
            let latest = Snapshot::builder_for(url.as_str()).build(&engine);
            return Err(match latest {
                Ok(latest) if latest.version() < asked => Error::usage(format!(
                    "{shown}: --table-version {asked}: the table's latest version is {}",
                    latest.version()
                )),
                _ => fail(e),
            });
        }
        (Err(e), None) => return Err(fail(e)),
    };
    let snapshot = match options.table_timestamp_ms {
        None => snapshot,
        Some(at) => {
            let commit =
                latest_version_as_of(&snapshot, &engine, at, HistoryCommitType::Recreatable)
                    .map_err(|e| {
                        Error::usage(format!(
                            "{shown}: --table-timestamp: no version of the table was current then \
                         ({})",
                            e.to_string().lines().next().unwrap_or("")
                        ))
                    })?;
            Snapshot::builder_for(url.as_str())
                .at_version(commit.version)
                .build(&engine)
                .map_err(fail)?
        }
    };
    let version = snapshot.version();
    let config = snapshot.table_configuration();
    let mode = config.column_mapping_mode();
    let partition_names = config.logical_partition_columns().to_vec();
    let scan = Arc::clone(&snapshot).scan_builder().build().map_err(fail)?;
    let logical = scan.logical_schema();
    let physical = scan.physical_schema();
    let arrow_field = |f: &StructField| {
        Field::try_from_kernel(f)
            .map(|a| a.with_metadata(std::collections::HashMap::<String, String>::new()))
            .map_err(|e| Error::bad_input(format!("{shown}: column '{}': {e}", f.name())))
    };
    let mut partition_fields: Vec<(FieldRef, String)> = Vec::new();
    let (mut data_logical, mut data_physical, mut data_arrow) =
        (Vec::new(), Vec::new(), Vec::new());
    for field in logical.fields() {
        // The log keys partition values, and the files name columns, by
        // physical name (the logical one without column mapping).
        let stored = field.physical_name(mode);
        if partition_names.iter().any(|p| p == field.name()) {
            partition_fields.push((Arc::new(arrow_field(field)?), stored.to_string()));
            continue;
        }
        let stored = physical.field(stored).ok_or_else(|| {
            Error::bad_input(format!(
                "{shown}: the table's column '{}' has no stored form in its schema",
                field.name()
            ))
        })?;
        data_arrow.push(arrow_field(field)?);
        data_logical.push(field.clone());
        data_physical.push(stored.clone());
    }
    let columns = Arc::new(TableColumns {
        arrow: Arc::new(Schema::new(data_arrow)),
        logical: data_logical,
        physical: data_physical,
    });
    let mut listed: Vec<Listed> = Vec::new();
    for metadata in scan.scan_metadata(&engine).map_err(fail)? {
        let metadata = metadata.map_err(fail)?;
        listed = metadata
            .visit_scan_files(listed, |out: &mut Vec<Listed>, file: ScanFile| {
                out.push(Listed {
                    path: file.path,
                    size: file.size,
                    dv: file.dv_info,
                    partition_values: file.partition_values,
                })
            })
            .map_err(fail)?;
    }
    if options.table_commit_only && version > 0 {
        // The files of the version before, which this commit did not add.
        let before = Snapshot::builder_for(url.as_str())
            .at_version(version - 1)
            .build(&engine)
            .map_err(fail)?;
        let scan = before.scan_builder().build().map_err(fail)?;
        let mut earlier: std::collections::HashSet<String> = std::collections::HashSet::new();
        for metadata in scan.scan_metadata(&engine).map_err(fail)? {
            earlier = metadata
                .map_err(fail)?
                .visit_scan_files(
                    earlier,
                    |out: &mut std::collections::HashSet<String>, file: ScanFile| {
                        out.insert(file.path);
                    },
                )
                .map_err(fail)?;
        }
        listed.retain(|file| !earlier.contains(&file.path));
    }
    let table_root = snapshot.table_root();
    let vectors = deletion_vectors(&shown, &engine, table_root, &listed)?;
    let mut out = Vec::with_capacity(listed.len());
    for (file, deleted) in listed.into_iter().zip(vectors) {
        let file_url = url.join(&file.path).map_err(|e| {
            Error::bad_input(format!(
                "{shown}: the log names a file '{}' that is not a path: {e}",
                file.path
            ))
        })?;
        let mut partition = Vec::with_capacity(partition_fields.len());
        for (field, stored) in &partition_fields {
            let text = file.partition_values.get(stored).cloned();
            partition.push((Arc::clone(field), typed(&shown, field, text)?));
        }
        out.push(ActiveFile {
            url: file_url,
            size: file.size.max(0) as u64,
            partition,
            read: TableFile {
                columns: Arc::clone(&columns),
                deleted,
                equality: Vec::new(),
            },
        });
    }
    Ok((version, out))
}

/// The rows each file's deletion vector deletes (ascending; `None`: it
/// has none). The kernel reads a vector inline in the log or from its file
/// beside the table's data; stored vectors are fetched side by side.
fn deletion_vectors(
    shown: &str,
    engine: &DefaultEngine<TokioMultiThreadExecutor>,
    table_root: &Url,
    listed: &[Listed],
) -> Result<Vec<Option<Arc<[u64]>>>, Error> {
    let read = |file: &Listed| -> Result<Option<Arc<[u64]>>, Error> {
        let rows = file.dv.get_row_indexes(engine, table_root).map_err(|e| {
            let line = e.to_string();
            let line = line.lines().next().unwrap_or("");
            Error::bad_input(format!(
                "{shown}: the deletion vector of {} cannot be read: {line}",
                file.path
            ))
        })?;
        Ok(rows.map(|mut rows| {
            rows.sort_unstable();
            Arc::from(rows)
        }))
    };
    super::side_by_side(listed, read).into_iter().collect()
}

/// A partition value as its column's type (the log holds them as text; no
/// value or an empty one is null).
fn typed(shown: &str, field: &Field, text: Option<String>) -> Result<ArrayRef, Error> {
    let text = StringArray::from(vec![text.filter(|t| !t.is_empty())]);
    if field.data_type() == &DataType::Utf8 {
        return Ok(Arc::new(text));
    }
    let value = arrow::compute::cast(&text, field.data_type()).map_err(|e| {
        Error::bad_input(format!("{shown}: partition column '{}': {e}", field.name()))
    })?;
    if value.null_count() > text.null_count() {
        return Err(Error::bad_input(format!(
            "{shown}: partition column '{}': '{}' is not a {}",
            field.name(),
            text.value(0),
            field.data_type()
        )));
    }
    Ok(value)
}

/// A kernel failure, classed: a version that does not exist is a usage
/// error, a table feature the kernel cannot read is a configuration one.
fn delta_error(shown: &str, e: delta_kernel::error::KernelError) -> Error {
    let text = e.to_string();
    let line = text.lines().next().unwrap_or("").to_string();
    match &e {
        delta_kernel::error::KernelError::ObjectStore(inner) => {
            refscore_store::store_error(shown, inner)
        }
        delta_kernel::error::KernelError::Unsupported(_) => Error::config(format!(
            "{shown}: the Delta table uses a feature refscore's Delta reader does not \
             support: {line}"
        )),
        _ if text.contains("version") => Error::usage(format!("{shown}: {line}")),
        _ => Error::bad_input(format!("{shown}: cannot read the Delta table: {line}")),
    }
}
