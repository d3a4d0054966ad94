//! A result appended to a Delta Lake table (`-o TABLE --output-format
//! delta`, a local folder or an object-store URL), written through
//! delta-kernel's transactions.
//!
//! The run writes its local result as any run does (for a local table in
//! `TABLE/_refscore/`, which Delta readers and `VACUUM` leave alone; for a
//! store's table in the output's cache folder), named after the run. When it
//! is finished, its summary goes to `TABLE/_refscore/<run>.summary.json`,
//! then its rows are written as new data files and added to the table in one
//! commit, so a reader sees the night's rows all or none. The commit records
//! a Delta transaction identifier whose application id names the run
//! (`refscore:<run id>[.shard-K-of-N]`): a run is appended at most once,
//! whatever is run again after a crash. The first run creates the table
//! with the result's columns (all nullable); a later run whose result has
//! new columns adds them (nullable) in its commit; a column of another type
//! than the table's is refused before any work.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use arrow::array::{new_null_array, ArrayRef, RecordBatch};
use arrow::datatypes::{Schema, SchemaRef};
use delta_kernel::committer::FileSystemCommitter;
use delta_kernel::engine::arrow_conversion::{TryFromArrow, TryIntoArrow};
use delta_kernel::engine::arrow_data::ArrowEngineData;
use delta_kernel::error::KernelError;
use delta_kernel::schema::{StructField, StructType};
use delta_kernel::snapshot::{Snapshot, SnapshotRef};
use delta_kernel::transaction::create_table::create_table;
use delta_kernel::transaction::{CommitResult, Transaction, UpdateTableOperation};
use delta_kernel_default_engine::executor::tokio::TokioMultiThreadExecutor;
use delta_kernel_default_engine::DefaultEngine;
use object_store::path::Path as StorePath;
use object_store::ObjectStore;
use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
use refscore_core::Error;
use refscore_store::{block_on, redact, runtime, store_error, Store, StoreOptions, Upload};
use url::Url;

use super::{RunKey, Settled, Sink};
use crate::{parent_dir, summary_path};

/// The table's folder refscore keeps its own files in: the runs' summaries,
/// and for a local table the runs' local results and run folders. Delta
/// readers and `VACUUM` skip names that begin with `_`.
pub const META_DIR: &str = "_refscore";

/// Rows per data file added to the table (the result's row groups are at
/// most 256k rows; a file is encoded in memory before it is written).
const ROWS_PER_FILE: usize = 128 * 1024;

/// Commits tried when another writer commits between this run's read of
/// the table and its own commit.
const COMMIT_ATTEMPTS: usize = 5;

type Engine = DefaultEngine<TokioMultiThreadExecutor>;

/// `-o TABLE --output-format delta`: a Delta table the run's rows are
/// appended to.
#[derive(Clone)]
pub struct DeltaTable {
    /// The table's root, with a trailing slash.
    url: Url,
    /// As messages show it (no credentials).
    shown: String,
    /// The store the table is in (the local file system for a folder).
    store: Arc<dyn ObjectStore>,
    /// Where the summaries go: the local folder, or the store's URL prefix.
    summaries: Summaries,
    /// The folder of the runs' local results.
    staging: PathBuf,
    /// The local table's folder.
    local_root: Option<PathBuf>,
}

/// Where a table's run summaries are written.
#[derive(Clone)]
enum Summaries {
    /// `TABLE/_refscore/` of a local table.
    Folder(PathBuf),
    /// `URL/_refscore/` of a table in a store (the URL as given, with its
    /// credentials, and the store options to reach it).
    Store(String, StoreOptions),
}

impl std::fmt::Debug for DeltaTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Not the URL: it may carry credentials.
        f.debug_struct("DeltaTable")
            .field("shown", &self.shown)
            .field("staging", &self.staging)
            .finish_non_exhaustive()
    }
}

impl DeltaTable {
    /// The table in the local folder `path` (created on first use; its
    /// parent folder must exist).
    pub fn local(path: &Path) -> Result<DeltaTable, Error> {
        let shown = path.display().to_string();
        let parent = parent_dir(path);
        if !parent.is_dir() {
            return Err(Error::io(format!(
                "{shown}: output directory {} does not exist",
                parent.display()
            )));
        }
        let parent = std::fs::canonicalize(&parent)
            .map_err(|e| Error::io(format!("{}: cannot resolve: {e}", parent.display())))?;
        let name = path.file_name().ok_or_else(|| {
            Error::usage(format!(
                "{shown}: give the Delta table's folder, e.g. -o results/nightly"
            ))
        })?;
        let root = parent.join(name);
        let url = Url::from_directory_path(&root)
            .map_err(|_| Error::io(format!("{shown}: not a path a URL can name")))?;
        Ok(DeltaTable {
            url,
            shown,
            store: Arc::new(object_store::local::LocalFileSystem::new()),
            summaries: Summaries::Folder(root.join(META_DIR)),
            staging: root.join(META_DIR),
            local_root: Some(root),
        })
    }

    /// The table at the store URL `url` (its folder in a bucket), with the
    /// runs' local results in `staging` (created when missing).
    pub fn remote(url: &str, staging: &Path, options: StoreOptions) -> Result<DeltaTable, Error> {
        let shown = redact(url);
        let (store, key) = Store::open(url, options)?;
        if key.as_ref().is_empty() {
            return Err(Error::usage(format!(
                "{shown}: name the table's folder in the bucket (s3://bucket/results/nightly)"
            )));
        }
        let mut root = store.base.clone();
        root.set_path(&format!("/{key}/"));
        let base = url
            .split(['?', '#'])
            .next()
            .unwrap_or(url)
            .trim_end_matches('/')
            .to_string();
        Ok(DeltaTable {
            url: root,
            shown: shown.trim_end_matches('/').to_string(),
            store: Arc::clone(&store.store),
            summaries: Summaries::Store(base, options),
            staging: staging.to_path_buf(),
            local_root: None,
        })
    }

    /// The table version whose commit appended the run `name` ([`RunKey::name`]:
    /// its run id, with `.shard-K-of-N` for a shard), if the table holds it:
    /// the first version whose log knows the run's transaction identifier,
    /// found by bisection (every later version knows it too).
    pub fn version_of_run(&self, name: &str) -> Result<Option<u64>, Error> {
        let app_id = format!("refscore:{name}");
        let engine = self.engine();
        let Some(latest) = self.snapshot(&engine)? else {
            return Ok(None);
        };
        let knows = |version: u64| -> Result<bool, Error> {
            let snapshot = Snapshot::builder_for(self.url.as_str())
                .at_version(version)
                .build(&engine)
                .map_err(|e| self.kernel(e))?;
            snapshot
                .get_app_id_version(&app_id, &engine)
                .map(|v| v.is_some())
                .map_err(|e| self.kernel(e))
        };
        if !knows(latest.version())? {
            return Ok(None);
        }
        let (mut low, mut high) = (0, latest.version());
        while low < high {
            let mid = low + (high - low) / 2;
            if knows(mid)? {
                high = mid;
            } else {
                low = mid + 1;
            }
        }
        Ok(Some(low))
    }

    /// The Delta transaction's application id that marks `run` as appended.
    pub fn app_id(run: &RunKey) -> String {
        format!("refscore:{}", run.name())
    }

    fn engine(&self) -> Engine {
        let executor = Arc::new(TokioMultiThreadExecutor::new(runtime().handle().clone()));
        DefaultEngine::builder(Arc::clone(&self.store))
            .with_task_executor(executor)
            .build()
    }

    fn kernel(&self, e: KernelError) -> Error {
        let text = e.to_string();
        let line = text.lines().next().unwrap_or("").to_string();
        match &e {
            KernelError::ObjectStore(inner) => store_error(&self.shown, inner),
            KernelError::Unsupported(_) => Error::config(format!(
                "{}: the Delta table uses a feature refscore cannot write: {line}",
                self.shown
            )),
            _ => Error::io(format!("{}: Delta table: {line}", self.shown)),
        }
    }

    /// Whether the table exists: its log holds something.
    fn exists(&self) -> Result<bool, Error> {
        let log = StorePath::from_url_path(format!("{}_delta_log", self.url.path()))
            .map_err(|e| Error::usage(format!("{}: {e}", self.shown)))?;
        self.holds_objects(&log)
    }

    /// Whether anything is stored under `prefix`.
    fn holds_objects(&self, prefix: &StorePath) -> Result<bool, Error> {
        let store = Arc::clone(&self.store);
        let prefix = prefix.clone();
        let first = block_on(async move {
            let mut listing = store.list(Some(&prefix));
            futures::StreamExt::next(&mut listing).await
        });
        match first {
            None => Ok(false),
            Some(Ok(_)) => Ok(true),
            Some(Err(object_store::Error::NotFound { .. })) => Ok(false),
            Some(Err(e)) => Err(store_error(&self.shown, &e)),
        }
    }

    /// The table's latest version, where the table exists.
    fn snapshot(&self, engine: &Engine) -> Result<Option<SnapshotRef>, Error> {
        if !self.exists()? {
            return Ok(None);
        }
        Snapshot::builder_for(self.url.as_str())
            .build(engine)
            .map(Some)
            .map_err(|e| self.kernel(e))
    }

    /// Whether `snapshot` holds the commit of `run`.
    fn holds_run(&self, snapshot: &Snapshot, engine: &Engine, run: &RunKey) -> Result<bool, Error> {
        snapshot
            .get_app_id_version(&Self::app_id(run), engine)
            .map(|v| v.is_some())
            .map_err(|e| self.kernel(e))
    }

    /// The table's columns for a result of `schema`: the same names and
    /// types, every column nullable (a later run may lack one).
    fn columns(&self, schema: &Schema) -> Result<StructType, Error> {
        let kernel = StructType::try_from_arrow(schema).map_err(|e| {
            Error::config(format!(
                "{}: the result has a column a Delta table cannot hold: {}",
                self.shown,
                e.to_string().lines().next().unwrap_or("")
            ))
        })?;
        StructType::try_new(
            kernel
                .fields()
                .map(|f| StructField::nullable(f.name().clone(), f.data_type().clone())),
        )
        .map_err(|e| self.kernel(e))
    }

    /// Refuses result columns whose type differs from the table's column
    /// of that name (Delta names compare without case).
    fn check_against(&self, table: &StructType, wanted: &StructType) -> Result<(), Error> {
        for field in wanted.fields() {
            let name = field.name().to_lowercase();
            let Some(have) = table.fields().find(|t| t.name().to_lowercase() == name) else {
                continue;
            };
            if have.data_type() != field.data_type() {
                return Err(Error::config(format!(
                    "{}: column '{}' is {} in the table and {} in this run's result; refscore \
                     appends to a table, it never rewrites its columns (write to a new table)",
                    self.shown,
                    field.name(),
                    have.data_type(),
                    field.data_type()
                )));
            }
        }
        Ok(())
    }

    /// Where `run`'s summary goes in the table.
    fn summary_name(run: &RunKey) -> String {
        format!("{META_DIR}/{}.summary.json", run.name())
    }

    /// The summary of `run` kept in the table, if there.
    fn stored_summary(&self, run: &RunKey) -> Result<Option<String>, Error> {
        match &self.summaries {
            Summaries::Folder(dir) => {
                let path = dir.join(format!("{}.summary.json", run.name()));
                Ok(std::fs::read_to_string(path).ok())
            }
            Summaries::Store(base, options) => {
                let upload = Upload::to(&format!("{base}/{}", Self::summary_name(run)), *options)?;
                let Some(object) = upload.existing()? else {
                    return Ok(None);
                };
                if object.size == 0 || object.size > (16 << 20) {
                    return Ok(None);
                }
                let bytes = object
                    .ranges(&[0..object.size])
                    .map_err(|e| store_error(upload.shown(), &e))?
                    .remove(0);
                Ok(String::from_utf8(bytes.to_vec()).ok())
            }
        }
    }

    /// Puts the run's local summary into the table's `_refscore/`, whole
    /// or not at all.
    fn put_summary(&self, run: &RunKey) -> Result<(), Error> {
        let local = summary_path(&self.local(run));
        match &self.summaries {
            Summaries::Folder(dir) => {
                let text = std::fs::read_to_string(&local)
                    .map_err(|e| Error::io(format!("{}: cannot read: {e}", local.display())))?;
                crate::write_atomically(&dir.join(format!("{}.summary.json", run.name())), &text)
            }
            Summaries::Store(base, options) => {
                let upload = Upload::to(&format!("{base}/{}", Self::summary_name(run)), *options)?;
                let record = self
                    .staging
                    .join(format!(".{}.summary.multipart-upload", run.name()));
                upload.put_file(&local, &record)
            }
        }
    }

    /// Removes the run's local result and summary once its rows are in the
    /// table (the table holds them now; a rerun finds the commit).
    fn remove_local(&self, run: &RunKey) {
        let local = self.local(run);
        let _ = std::fs::remove_file(summary_path(&local));
        let _ = std::fs::remove_file(&local);
    }

    /// Appends the run's local result to the table in one commit recording
    /// the run; false where the table holds the run already.
    fn append(&self, run: &RunKey) -> Result<bool, Error> {
        let local = self.local(run);
        let shown_local = local.display().to_string();
        let schema = {
            let file = File::open(&local).map_err(|e| Error::io(format!("{shown_local}: {e}")))?;
            ParquetRecordBatchReaderBuilder::try_new(file)
                .map_err(|e| Error::io(format!("{shown_local}: {e}")))?
                .schema()
                .clone()
        };
        let wanted = self.columns(&schema)?;
        let info = format!("refscore/{}", env!("CARGO_PKG_VERSION"));
        let parameters = [
            ("refscore.run_id", Some(run.run_id.clone())),
            ("refscore.fingerprint", Some(run.hash.clone())),
            ("refscore.shard", run.shard.clone()),
        ];
        for _ in 0..COMMIT_ATTEMPTS {
            let engine = self.engine();
            let committer = Box::new(FileSystemCommitter::new());
            let committed = match self.snapshot(&engine)? {
                None => {
                    let txn =
                        create_table(self.url.as_str(), Arc::new(wanted.clone()), &info, true)
                            .with_transaction_id(Self::app_id(run), 1)
                            .with_operation_parameters(parameters.clone())
                            .build(&engine, committer)
                            .map_err(|e| self.kernel(e))?;
                    self.write_and_commit(txn, &engine, &local)?
                }
                Some(snapshot) => {
                    if self.holds_run(&snapshot, &engine, run)? {
                        return Ok(false);
                    }
                    let table = snapshot.schema();
                    self.check_against(&table, &wanted)?;
                    let mut builder = Arc::clone(&snapshot).update_table(
                        UpdateTableOperation::Write,
                        &info,
                        true,
                    );
                    for field in wanted.fields() {
                        let name = field.name().to_lowercase();
                        if !table.fields().any(|t| t.name().to_lowercase() == name) {
                            builder = builder.add_column(field.clone());
                        }
                    }
                    let txn = builder
                        .with_transaction_id(Self::app_id(run), 1)
                        .with_operation_parameters(parameters.clone())
                        .build(&engine, committer)
                        .map_err(|e| self.kernel(e))?;
                    self.write_and_commit(txn, &engine, &local)?
                }
            };
            if committed {
                return Ok(true);
            }
        }
        Err(Error::temporary(format!(
            "{}: other writers committed to the table {COMMIT_ATTEMPTS} times while this run \
             tried to; run the same command again",
            self.shown
        )))
    }

    /// Writes the local result's rows as the transaction's data files and
    /// commits it; false where another commit came first (try again).
    fn write_and_commit<S>(
        &self,
        mut txn: Transaction<S>,
        engine: &Engine,
        local: &Path,
    ) -> Result<bool, Error> {
        let shown_local = local.display().to_string();
        let io = |e: &dyn std::fmt::Display| Error::io(format!("{shown_local}: {e}"));
        let state = txn.write_state().map_err(|e| self.kernel(e))?;
        let context = state
            .write_context_builder()
            .build()
            .map_err(|e| self.kernel(e))?;
        let target: SchemaRef = Arc::new(
            context
                .logical_data_schema()
                .as_ref()
                .try_into_arrow()
                .map_err(|e: arrow::error::ArrowError| {
                    Error::internal(format!("{}: {e}", self.shown))
                })?,
        );
        let file = File::open(local).map_err(|e| io(&e))?;
        let reader = ParquetRecordBatchReaderBuilder::try_new(file)
            .map_err(|e| io(&e))?
            .with_batch_size(ROWS_PER_FILE)
            .build()
            .map_err(|e| io(&e))?;
        for batch in reader {
            let batch = conform(&batch.map_err(|e| io(&e))?, &target).map_err(|e| io(&e))?;
            if batch.num_rows() == 0 {
                continue;
            }
            let data = ArrowEngineData::new(batch);
            let add =
                block_on(engine.write_parquet(&data, &context)).map_err(|e| self.kernel(e))?;
            txn.add_files(add);
        }
        match txn.commit(engine).map_err(|e| self.kernel(e))? {
            CommitResult::Committed(_) => Ok(true),
            CommitResult::Conflicted(_) | CommitResult::Retryable(_) => Ok(false),
        }
    }
}

/// `batch` with the table's columns in the table's order: a column the
/// result lacks (a metric an earlier night had) as nulls, each column cast
/// to the table's type where the two name the same Delta type differently
/// (Delta's `long` for an unsigned id, `string` for a large string).
fn conform(
    batch: &RecordBatch,
    target: &SchemaRef,
) -> Result<RecordBatch, arrow::error::ArrowError> {
    let schema = batch.schema();
    let mut columns: Vec<ArrayRef> = Vec::with_capacity(target.fields().len());
    for field in target.fields() {
        let name = field.name().to_lowercase();
        let found = schema
            .fields()
            .iter()
            .position(|f| f.name().to_lowercase() == name);
        columns.push(match found {
            None => new_null_array(field.data_type(), batch.num_rows()),
            Some(i) if batch.column(i).data_type() == field.data_type() => {
                Arc::clone(batch.column(i))
            }
            // Strict: a value the table's type cannot hold (a u64 id above
            // i64's range: Delta has no unsigned types) fails the commit
            // rather than turning into a null.
            Some(i) => arrow::compute::cast_with_options(
                batch.column(i),
                field.data_type(),
                &arrow::compute::CastOptions {
                    safe: false,
                    ..Default::default()
                },
            )?,
        });
    }
    RecordBatch::try_new(Arc::clone(target), columns)
}

impl Sink for DeltaTable {
    fn shown(&self) -> String {
        self.shown.clone()
    }

    fn local(&self, run: &RunKey) -> PathBuf {
        self.staging.join(format!("{}.parquet", run.name()))
    }

    fn summary_shown(&self, run: &RunKey) -> String {
        format!(
            "{}/{}",
            self.shown.trim_end_matches('/'),
            Self::summary_name(run)
        )
    }

    fn local_names_the_run(&self) -> bool {
        true
    }

    /// A missing folder is a new table; a folder that holds files but no
    /// table is refused, and so is a table refscore cannot write to.
    fn check(&self, _overwrite: bool, _resume: bool) -> Result<(), Error> {
        let exists = self.exists()?;
        if let Some(root) = &self.local_root {
            if root.exists() && !root.is_dir() {
                return Err(Error::config(format!(
                    "{}: is a file; --output-format delta writes a table's folder",
                    self.shown
                )));
            }
            if !exists && root.is_dir() {
                let foreign = std::fs::read_dir(root)
                    .map_err(|e| Error::io(format!("{}: {e}", self.shown)))?
                    .flatten()
                    .any(|e| e.file_name() != META_DIR);
                if foreign {
                    return Err(Error::config(format!(
                        "{}: the folder holds files but no Delta table (no _delta_log); a new \
                         table is made only in a new or empty folder",
                        self.shown
                    )));
                }
            }
        } else if !exists {
            let key = StorePath::from_url_path(self.url.path())
                .map_err(|e| Error::usage(format!("{}: {e}", self.shown)))?;
            let foreign = {
                let store = Arc::clone(&self.store);
                let prefix = key.clone();
                block_on(async move {
                    let mut listing = store.list(Some(&prefix));
                    let mut foreign = false;
                    while let Some(item) = futures::StreamExt::next(&mut listing).await {
                        match item {
                            Ok(o) => {
                                let first =
                                    o.location.prefix_match(&prefix).and_then(|mut p| p.next());
                                if first.is_some_and(|p| p.as_ref() != META_DIR) {
                                    foreign = true;
                                    break;
                                }
                            }
                            Err(e) => return Err(e),
                        }
                    }
                    Ok(foreign)
                })
                .map_err(|e| store_error(&self.shown, &e))?
            };
            if foreign {
                return Err(Error::config(format!(
                    "{}: the prefix holds objects but no Delta table (no _delta_log); a new \
                     table is made only under an empty prefix",
                    self.shown
                )));
            }
        }
        std::fs::create_dir_all(&self.staging).map_err(|e| {
            Error::io(format!(
                "{}: cannot create the folder for the run's local result: {e}",
                self.staging.display()
            ))
        })?;
        if let Summaries::Store(base, options) = &self.summaries {
            Upload::to(&format!("{base}/{META_DIR}/.refscore-probe"), *options)?
                .check_writable()?;
        }
        if exists {
            // A table whose protocol the kernel cannot write is refused now,
            // not after the work: a write transaction is built, never committed.
            let engine = self.engine();
            if let Some(snapshot) = self.snapshot(&engine)? {
                snapshot
                    .update_table(UpdateTableOperation::Write, "refscore", true)
                    .build(&engine, Box::new(FileSystemCommitter::new()))
                    .map_err(|e| self.kernel(e))?;
            }
        }
        Ok(())
    }

    fn check_columns(&self, schema: &SchemaRef) -> Result<(), Error> {
        let wanted = self.columns(schema)?;
        let engine = self.engine();
        if let Some(snapshot) = self.snapshot(&engine)? {
            self.check_against(&snapshot.schema(), &wanted)?;
        }
        Ok(())
    }

    /// The table's log records this run: nothing to do, whatever the flags
    /// (a run is appended at most once); its local result, if a crash left
    /// one, goes.
    fn settled(&self, run: &RunKey, _: bool, _: bool, _: bool) -> Result<Option<Settled>, Error> {
        let engine = self.engine();
        let Some(snapshot) = self.snapshot(&engine)? else {
            return Ok(None);
        };
        if !self.holds_run(&snapshot, &engine, run)? {
            return Ok(None);
        }
        self.remove_local(run);
        Ok(Some(Settled::Already {
            summary: self.stored_summary(run)?.unwrap_or_default(),
            note: format!(
                "{}: the table already holds this run's rows (transaction {}); nothing to do",
                self.shown,
                Self::app_id(run)
            ),
        }))
    }

    /// The summary first, then the commit: once the rows are in the table,
    /// so is their summary (a summary of a commit that never came is
    /// replaced by the run that makes it).
    fn publish(&self, run: &RunKey) -> Result<(), Error> {
        self.put_summary(run)?;
        self.append(run)?;
        self.remove_local(run);
        Ok(())
    }

    fn publish_if_missing(&self, run: &RunKey) -> Result<bool, Error> {
        let engine = self.engine();
        if let Some(snapshot) = self.snapshot(&engine)? {
            if self.holds_run(&snapshot, &engine, run)? {
                self.remove_local(run);
                return Ok(false);
            }
        }
        self.publish(run)?;
        Ok(true)
    }

    fn published_note(&self, run: &RunKey) -> String {
        format!(
            "{}: appended this run's rows, finished earlier in {}",
            self.shown,
            self.local(run).display()
        )
    }
}
