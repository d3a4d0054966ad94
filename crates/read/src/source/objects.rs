//! Inputs named by a URL: one object, every Parquet object below a prefix,
//! the objects a glob matches, or a Delta table's active files.

use std::path::PathBuf;

use refscore_core::Error;
use refscore_store::{redact, ObjectFile, Store};

use super::{delta, Found, Listing, Origin, SourceOptions};

/// The objects a URL names: one object, every Parquet object below a
/// prefix, the objects a glob matches, or a Delta table's active files.
pub(super) fn listing(spec: &str, options: &SourceOptions) -> Result<Listing, Error> {
    let (store, key) = refscore_store::Store::open(spec, options.store)?;
    let shown = redact(spec);
    let found = |o: ObjectFile| Found {
        shown: PathBuf::from(store.shown(&o.key)),
        origin: Origin::Object(o),
        partition: Vec::new(),
        delta: None,
    };
    let key_text = key.as_ref().to_string();
    let files: Vec<Found> = if let Some(glob_at) = key_text.find(['*', '?', '[']) {
        let pattern = glob::Pattern::new(&key_text)
            .map_err(|e| Error::usage(format!("{shown}: bad glob pattern: {e}")))?;
        // As a local glob: `*` stays within one folder.
        let within = glob::MatchOptions {
            require_literal_separator: true,
            ..glob::MatchOptions::new()
        };
        let prefix = key_text[..glob_at]
            .rsplit_once('/')
            .map_or("", |(folder, _)| folder);
        let prefix: object_store::path::Path = prefix.into();
        refuse_table_above(&shown, &store, &prefix)?;
        let all = store.list(&prefix)?;
        refuse_table_objects(&shown, &store, &all)?;
        all.into_iter()
            .filter(|o| pattern.matches_with(o.key.as_ref(), within))
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
        // A folder inside a table is part of the table, as it is locally.
        refuse_table_above(&shown, &store, &key)?;
        if delta::is_table_listing(&key, &all) {
            return delta::list_store(spec, &store, &key, options);
        }
        refuse_table_objects(&shown, &store, &all)?;
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

/// Refuses a listing that holds a table's files below the spec's own
/// folder: a Delta table's log, or an Iceberg table's metadata. That
/// table's files read loose would count deleted and replaced rows.
fn refuse_table_objects(shown: &str, store: &Store, all: &[ObjectFile]) -> Result<(), Error> {
    if let Some(log) = all
        .iter()
        .find(|o| o.key.parts().any(|p| p.as_ref() == "_delta_log"))
    {
        let table = log.key.as_ref().split("/_delta_log").next().unwrap_or("");
        return Err(delta_refusal(shown, &store.shown(&table.into())));
    }
    let keys: std::collections::HashSet<&str> = all.iter().map(|o| o.key.as_ref()).collect();
    for o in all {
        let Some(table) = iceberg_table_of(o.key.as_ref()) else {
            continue;
        };
        let data = format!("{table}/data/");
        let hint = format!("{table}/metadata/version-hint.text");
        if keys.contains(hint.as_str()) || keys.iter().any(|k| k.starts_with(&data)) {
            return Err(iceberg_refusal(shown, &store.shown(&table.into())));
        }
    }
    Ok(())
}

/// The table folder of an Iceberg metadata file's key
/// (`TABLE/metadata/*.metadata.json`).
fn iceberg_table_of(key: &str) -> Option<&str> {
    let (folder, name) = key.rsplit_once('/')?;
    let table = folder
        .strip_suffix("/metadata")
        .or((folder == "metadata").then_some(""))?;
    (name.ends_with(".metadata.json") || name == "version-hint.text").then_some(table)
}

/// Refuses a folder inside a table (a Delta partition folder, an Iceberg
/// table's `data/`): each folder above `key` is asked, with one listing of
/// its `_delta_log/` and one of its `metadata/` (one page each), whether it
/// is a table's. The same rule as for local folders.
fn refuse_table_above(
    shown: &str,
    store: &Store,
    key: &object_store::path::Path,
) -> Result<(), Error> {
    let parts: Vec<_> = key.parts().collect();
    for n in (0..parts.len()).rev() {
        let folder: object_store::path::Path = parts[..n].iter().cloned().collect();
        let below = |name: &str| -> Result<Vec<String>, Error> {
            let prefix = folder.clone().join(name);
            match store.first_page(&prefix) {
                Ok(page) => Ok(page
                    .into_iter()
                    .map(|o| o.key.as_ref().to_string())
                    .collect()),
                // Credentials that may list only the input's own prefix
                // cannot look above it: that is no table found, not a
                // refusal of an input they may read.
                Err(e) if matches!(e.class, refscore_core::ErrorClass::Denied) => Ok(Vec::new()),
                Err(e) => Err(e),
            }
        };
        if !below("_delta_log")?.is_empty() {
            return Err(delta_refusal(shown, &store.shown(&folder)));
        }
        let metadata = below("metadata")?;
        let iceberg = metadata.iter().any(|k| k.ends_with(".metadata.json"))
            && (metadata.iter().any(|k| k.ends_with("/version-hint.text"))
                || !below("data")?.is_empty());
        if iceberg {
            return Err(iceberg_refusal(shown, &store.shown(&folder)));
        }
    }
    Ok(())
}

/// The refusal of a Delta table's files read loose.
fn delta_refusal(shown: &str, table: &str) -> Error {
    let table = table.trim_end_matches('/');
    Error::config(format!(
        "{shown}: {table}/ is a Delta Lake table, whose Parquet files include rows that \
         later versions deleted or replaced, so its files are never read loose; give the \
         table's own URL ({table}) to read its current version"
    ))
}

/// The refusal of an Iceberg table's files read loose.
fn iceberg_refusal(shown: &str, table: &str) -> Error {
    let table = table.trim_end_matches('/');
    Error::config(format!(
        "{shown}: {table}/ is an Iceberg table (metadata/*.metadata.json), whose Parquet \
         files include rows that later snapshots deleted or replaced; refscore does not read \
         Iceberg tables yet and never reads a table's files as loose Parquet: export the \
         table's current snapshot to Parquet (e.g. DuckDB: COPY (SELECT * FROM \
         iceberg_scan('TABLE')) TO 'night.parquet') and score that"
    ))
}
