//! Iceberg tables: a folder holding `metadata/*.metadata.json` beside its
//! `data/` (or a Hadoop catalog's `metadata/version-hint.text`), or one
//! metadata file named itself. The metadata file (JSON) names the
//! snapshot, its manifests (Avro) the data files it holds and the delete
//! files that apply to each, by the spec's sequence-number rules; refscore
//! then reads those Parquet files row group by row group like any
//! other (so units, shards and resume work on tables as on files), with
//! the rows a position delete names, or an equality delete matches, left
//! out as a Delta file's deletion vector leaves its rows out.

mod delete_index;
mod deletes;
mod manifests;
mod metadata;
mod schema;

use std::collections::{HashMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use object_store::path::Path as StorePath;
use refscore_core::Error;
use refscore_store::{ObjectFile, Store};

use super::{Found, Input, Listing, Origin, Source, TableFile, TableVersion};
pub(crate) use deletes::{apply_equality_deletes, EqualityDeletes};
use manifests::DeleteKind;
use metadata::TableMetadata;

/// Iceberg tables, local or in a store.
pub(super) struct Iceberg;

impl Source for Iceberg {
    fn name(&self) -> &'static str {
        "an Iceberg table (metadata/*.metadata.json)"
    }

    fn claims(&self, input: &Input) -> Result<bool, Error> {
        match &input.store {
            None => {
                let path = Path::new(input.spec);
                Ok(self.table_in(path)
                    || (input.spec.ends_with(".metadata.json") && path.is_file()))
            }
            Some(at) => {
                if at.key.as_ref().ends_with(".metadata.json") && !at.is_glob() {
                    return Ok(at.head()?.is_some());
                }
                at.is_table_of(self)
            }
        }
    }

    fn list(&self, input: &Input) -> Result<Listing, Error> {
        let place = match &input.store {
            None => Place::Local,
            Some(at) => Place::Store(at.store.clone()),
        };
        let metadata = match &input.store {
            None if input.spec.ends_with(".metadata.json") => {
                let path = std::fs::canonicalize(input.spec)
                    .map_err(|e| Error::io(format!("{}: cannot resolve: {e}", input.spec)))?;
                path.display().to_string()
            }
            None => {
                let dir = std::fs::canonicalize(Path::new(input.spec).join("metadata"))
                    .map_err(|e| Error::io(format!("{}: cannot resolve: {e}", input.spec)))?;
                let names = std::fs::read_dir(&dir)
                    .map_err(|e| Error::io(format!("{}: {e}", dir.display())))?
                    .flatten()
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect::<Vec<_>>();
                let hint = std::fs::read_to_string(dir.join("version-hint.text")).ok();
                let name = current_metadata(&input.shown(), &names, hint.as_deref())?;
                dir.join(name).display().to_string()
            }
            Some(at) if at.key.as_ref().ends_with(".metadata.json") => at.store.shown(&at.key),
            Some(at) => {
                let folder = at.key.clone().join("metadata");
                let listing = at.listing()?;
                let prefix = format!("{folder}/");
                let names: Vec<String> = listing
                    .iter()
                    .filter_map(|o| o.key.as_ref().strip_prefix(&prefix))
                    .filter(|rest| !rest.contains('/'))
                    .map(str::to_string)
                    .collect();
                let hint_key = folder.clone().join("version-hint.text");
                let hint = match listing.iter().find(|o| o.key == hint_key) {
                    Some(o) => Some(String::from_utf8_lossy(&at.store.whole(&o.key)?).into_owned()),
                    None => None,
                };
                let name = current_metadata(&input.shown(), &names, hint.as_deref())?;
                at.store.shown(&folder.join(name.as_str()))
            }
        };
        read_table(input, &place, &metadata)
    }

    fn table_in(&self, dir: &Path) -> bool {
        // metadata/*.metadata.json beside the table's data/ (or a Hadoop
        // catalog's version hint), not any folder named metadata.
        let metadata = dir.join("metadata");
        if !dir.join("data").is_dir() && !metadata.join("version-hint.text").is_file() {
            return false;
        }
        std::fs::read_dir(&metadata).is_ok_and(|entries| {
            entries
                .flatten()
                .any(|e| e.file_name().to_string_lossy().ends_with(".metadata.json"))
        })
    }

    fn table_of_key<'k>(&self, key: &'k str, keys: &HashSet<&str>) -> Option<&'k str> {
        let (folder, name) = key.rsplit_once('/')?;
        let table = folder
            .strip_suffix("/metadata")
            .or((folder == "metadata").then_some(""))?;
        if !(name.ends_with(".metadata.json") || name == "version-hint.text") {
            return None;
        }
        let root = if table.is_empty() {
            String::new()
        } else {
            format!("{table}/")
        };
        let hint = format!("{root}metadata/version-hint.text");
        let data = format!("{root}data/");
        (keys.contains(hint.as_str()) || keys.iter().any(|k| k.starts_with(&data))).then_some(table)
    }

    fn table_at(
        &self,
        page: &mut dyn FnMut(&str) -> Result<Vec<String>, Error>,
    ) -> Result<bool, Error> {
        let metadata = page("metadata")?;
        Ok(metadata.iter().any(|k| k.ends_with(".metadata.json"))
            && (metadata.iter().any(|k| k.ends_with("/version-hint.text"))
                || !page("data")?.is_empty()))
    }
}

/// Where a table's files are: this machine, or one store (the one its URL
/// names; a file the metadata names in another is refused).
#[derive(Clone)]
enum Place {
    Local,
    Store(Store),
}

impl Place {
    /// A file the metadata names (a path or a URL), as an input file.
    fn found(&self, shown_table: &str, location: &str, size: u64) -> Result<Found, Error> {
        match self {
            Place::Local => Ok(Found::loose(local_path(location), Origin::Local)),
            Place::Store(store) => {
                let object = ObjectFile {
                    store: Arc::clone(&store.store),
                    key: self.key(shown_table, location)?,
                    size,
                    version: None,
                    e_tag: None,
                    version_id: None,
                };
                Ok(Found::loose(
                    PathBuf::from(store.shown(&object.key)),
                    Origin::Object(object),
                ))
            }
        }
    }

    /// The key in this place's store of a file the metadata names.
    fn key(&self, shown_table: &str, location: &str) -> Result<StorePath, Error> {
        let Place::Store(store) = self else {
            unreachable!("keys are for stores")
        };
        let url = url::Url::parse(location).ok().filter(|url| {
            url.scheme() == store.base.scheme() && url.host_str() == store.base.host_str()
        });
        let Some(url) = url else {
            return Err(Error::config(format!(
                "{shown_table}: the table's metadata names {}, which is not in the table's \
                 store ({}); refscore reads a table's files from its own store only",
                refscore_store::redact(location),
                store.root
            )));
        };
        StorePath::from_url_path(url.path()).map_err(|e| {
            Error::bad_input(format!(
                "{shown_table}: the table's metadata names {}, not a key: {e}",
                refscore_store::redact(location)
            ))
        })
    }

    /// The whole of a small file (a delete file, a version hint).
    fn read(&self, shown_table: &str, location: &str) -> Result<Bytes, Error> {
        match self {
            Place::Local => {
                let path = local_path(location);
                std::fs::read(&path).map(Bytes::from).map_err(|e| {
                    Error::io(format!(
                        "{}: cannot read: {}",
                        path.display(),
                        crate::files::io_reason(&e)
                    ))
                })
            }
            Place::Store(store) => store.whole(&self.key(shown_table, location)?),
        }
    }
}

/// A local path from a location the metadata gives (`file:///…` or a path).
fn local_path(location: &str) -> PathBuf {
    match location.strip_prefix("file://") {
        Some(rest) => PathBuf::from(rest),
        None => PathBuf::from(location.strip_prefix("file:").unwrap_or(location)),
    }
}

/// The version number in a metadata file's name: `00003-<uuid>.metadata.json`
/// (catalogs) or `v3.metadata.json` (Hadoop tables; `v3.gz.metadata.json`).
fn metadata_version(name: &str) -> Option<u64> {
    let stem = name.strip_suffix(".metadata.json")?;
    let stem = stem.strip_suffix(".gz").unwrap_or(stem);
    if let Some(n) = stem.strip_prefix('v') {
        return n.parse().ok();
    }
    stem.split('-').next()?.parse().ok()
}

/// The table's current metadata file among `names` (those in its
/// `metadata/` folder): the one `version-hint.text` names (a version
/// number, or a file name), else the one with the highest version number.
fn current_metadata(shown: &str, names: &[String], hint: Option<&str>) -> Result<String, Error> {
    let metadata: Vec<&String> = names
        .iter()
        .filter(|n| n.ends_with(".metadata.json"))
        .collect();
    if let Some(hint) = hint.map(str::trim).filter(|h| !h.is_empty()) {
        let named = metadata.iter().find(|n| {
            n.as_str() == hint
                || n.strip_suffix(".metadata.json") == Some(hint)
                || hint
                    .parse::<u64>()
                    .is_ok_and(|v| metadata_version(n) == Some(v))
        });
        return named.map(|n| n.to_string()).ok_or_else(|| {
            Error::bad_input(format!(
                "{shown}: metadata/version-hint.text names version '{hint}', and no metadata \
                 file of that version is in metadata/"
            ))
        });
    }
    metadata
        .iter()
        .filter_map(|n| metadata_version(n).map(|v| (v, n)))
        .max()
        .map(|(_, n)| n.to_string())
        .ok_or_else(|| {
            Error::bad_input(format!(
                "{shown}: no metadata file in metadata/ has a version number in its name \
                 (NNNNN-….metadata.json or vN.metadata.json)"
            ))
        })
}

/// Reads the table whose current metadata file is `metadata_at`: picks the
/// snapshot asked for, plans the scan and lists its data files.
fn read_table(input: &Input, place: &Place, metadata_at: &str) -> Result<Listing, Error> {
    let shown = input.shown();
    let options = input.options;
    if options.table_commit_only {
        return Err(Error::config(format!(
            "{shown}: a night of a result table is read from a Delta table only, and this \
             is an Iceberg table"
        )));
    }
    let bytes = place.read(&shown, metadata_at)?;
    let metadata = TableMetadata::read(&shown, &refscore_store::redact(metadata_at), &bytes)?;
    let snapshot = metadata.pick_snapshot(&shown, options)?;
    let schema = metadata.schema_of(&shown, snapshot)?;
    let columns = Arc::new(schema::table_columns(&shown, schema)?);
    let tasks = manifests::plan(&shown, &metadata, snapshot, &|location| {
        place.read(&shown, location)
    })?;
    let mut positions: HashMap<String, HashMap<String, Vec<u64>>> = HashMap::new();
    let mut equalities: HashMap<String, Arc<deletes::EqualityDeletes>> = HashMap::new();
    let mut files = Vec::with_capacity(tasks.len());
    for task in &tasks {
        let mut deleted: Vec<u64> = Vec::new();
        let mut equality = Vec::new();
        for delete in &task.deletes {
            match &delete.kind {
                DeleteKind::Positions => {
                    if !positions.contains_key(&delete.path) {
                        let rows = deletes::position_deletes(&shown, place, &delete.path)?;
                        positions.insert(delete.path.clone(), rows);
                    }
                    if let Some(rows) = positions[&delete.path].get(&task.path) {
                        deleted.extend_from_slice(rows);
                    }
                }
                DeleteKind::Equality(ids) => {
                    if !equalities.contains_key(&delete.path) {
                        let rows = deletes::equality_deletes(
                            &shown,
                            place,
                            &delete.path,
                            ids,
                            schema,
                            &columns,
                        )?;
                        equalities.insert(delete.path.clone(), Arc::new(rows));
                    }
                    equality.push(Arc::clone(&equalities[&delete.path]));
                }
            }
        }
        deleted.sort_unstable();
        deleted.dedup();
        let mut found = place.found(&shown, &task.path, task.size)?;
        found.table_file = Some(TableFile {
            columns: Arc::clone(&columns),
            deleted: (!deleted.is_empty()).then(|| Arc::from(deleted)),
            equality,
        });
        files.push(found);
    }
    let snapshot_id = snapshot.snapshot_id;
    let when = metadata::rfc3339(snapshot.timestamp_ms);
    Ok(Listing {
        files,
        table: Some(TableVersion {
            id: snapshot_id as u64,
            about: vec![
                format!("Iceberg snapshot: {snapshot_id} (committed {when})"),
                format!("Iceberg metadata: {}", refscore_store::redact(metadata_at)),
            ],
        }),
    })
}
