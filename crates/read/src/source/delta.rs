//! Delta Lake tables: the files a version holds, as delta-rs's kernel
//! replays the table's log (commits, checkpoints, removes), with each
//! file's partition values as columns. refscore then reads those files
//! like any other; files a later version removed are never read.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{Array, ArrayRef, StringArray};
use arrow::datatypes::{DataType, Field, FieldRef};
use delta_kernel::engine::arrow_conversion::TryFromKernel;
use delta_kernel::history_manager::{latest_version_as_of, HistoryCommitType};
use delta_kernel::scan::state::ScanFile;
use delta_kernel::snapshot::Snapshot;
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;
use delta_kernel_default_engine::DefaultEngine;
use object_store::path::Path as StorePath;
use object_store::ObjectStore;
use refscore_core::Error;
use url::Url;

use super::{Found, Listing, Origin, SourceOptions};
use refscore_store::{runtime, ObjectFile, Store};

/// Whether a local spec is a Delta table's folder.
pub(super) fn is_local_table(spec: &str) -> bool {
    Path::new(spec).join("_delta_log").is_dir()
}

/// Whether a store listing of `key/` is a Delta table's (its log sits
/// directly below).
pub(super) fn is_table_listing(key: &StorePath, all: &[ObjectFile]) -> bool {
    all.iter().any(|o| {
        o.key
            .prefix_match(key)
            .and_then(|mut parts| parts.next())
            .is_some_and(|p| p.as_ref() == "_delta_log")
    })
}

/// The active files of the local table at `spec`.
pub(super) fn list_local(spec: &str, options: &SourceOptions) -> Result<Listing, Error> {
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
        });
    }
    Ok(Listing {
        files: out,
        table_version: Some(files.0),
    })
}

/// The active files of the table at `key` in `store`.
pub(super) fn list_store(
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
        });
    }
    Ok(Listing {
        files: out,
        table_version: Some(version),
    })
}

/// One file of a table's version.
struct ActiveFile {
    url: Url,
    size: u64,
    partition: Vec<(FieldRef, ArrayRef)>,
}

/// What the kernel reports for one file, before partition values are typed.
struct Listed {
    path: String,
    size: i64,
    deletion_vector: bool,
    partition_values: std::collections::HashMap<String, String>,
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
    let scan = Arc::clone(&snapshot).scan_builder().build().map_err(fail)?;
    let logical = scan.logical_schema();
    let physical = scan.physical_schema();
    // Columns the files hold under other names (column mapping) would be
    // read wrongly or not at all by name.
    for field in physical.fields() {
        if logical.field(field.name()).is_none() {
            return Err(Error::config(format!(
                "{shown}: the table uses column mapping (delta.columnMapping.mode), which \
                 refscore does not read yet; column '{}' is stored under another name",
                field.name()
            )));
        }
    }
    let partition_fields: Vec<FieldRef> = logical
        .fields()
        .filter(|f| physical.field(f.name()).is_none())
        .map(|f| Field::try_from_kernel(f).map(Arc::new))
        .collect::<Result<_, _>>()
        .map_err(|e| Error::bad_input(format!("{shown}: a partition column's type: {e}")))?;
    let mut listed: Vec<Listed> = Vec::new();
    for metadata in scan.scan_metadata(&engine).map_err(fail)? {
        let metadata = metadata.map_err(fail)?;
        listed = metadata
            .visit_scan_files(listed, |out: &mut Vec<Listed>, file: ScanFile| {
                out.push(Listed {
                    path: file.path,
                    size: file.size,
                    deletion_vector: file.dv_info.has_vector(),
                    partition_values: file.partition_values,
                })
            })
            .map_err(fail)?;
    }
    let mut out = Vec::with_capacity(listed.len());
    for file in listed {
        let file_url = url.join(&file.path).map_err(|e| {
            Error::bad_input(format!(
                "{shown}: the log names a file '{}' that is not a path: {e}",
                file.path
            ))
        })?;
        if file.deletion_vector {
            return Err(Error::config(format!(
                "{shown}: version {version} has deletion vectors (table feature \
                 deletionVectors; {} has one), which refscore does not apply yet; \
                 rewrite the table without them (OPTIMIZE ... or REORG TABLE ... APPLY (PURGE)) \
                 or export the version to Parquet",
                file.path
            )));
        }
        let mut partition = Vec::with_capacity(partition_fields.len());
        for field in &partition_fields {
            let text = file.partition_values.get(field.name()).cloned();
            partition.push((Arc::clone(field), typed(&shown, field, text)?));
        }
        out.push(ActiveFile {
            url: file_url,
            size: file.size.max(0) as u64,
            partition,
        });
    }
    Ok((version, out))
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
