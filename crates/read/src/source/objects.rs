//! Loose Parquet objects named by a URL: one object, every Parquet object
//! below a prefix, or the objects a glob matches. Objects inside a table's
//! folder are refused: the table sources read those.

use std::path::PathBuf;

use refscore_core::Error;
use refscore_store::{ObjectFile, Store};

use super::{Found, Input, Listing, Origin, Source};

/// Objects in a store: whatever URL no table source claims.
pub(super) struct Objects;

impl Source for Objects {
    fn name(&self) -> &'static str {
        "Parquet objects in a store"
    }

    fn claims(&self, input: &Input) -> Result<bool, Error> {
        Ok(input.store.is_some())
    }

    fn list(&self, input: &Input) -> Result<Listing, Error> {
        let at = input.store.as_ref().expect("claimed: a URL");
        let store = &at.store;
        let shown = input.shown();
        let found =
            |o: ObjectFile| Found::loose(PathBuf::from(store.shown(&o.key)), Origin::Object(o));
        let key_text = at.key.as_ref().to_string();
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
            refuse_table_above(&shown, store, &prefix)?;
            let all = store.list(&prefix)?;
            refuse_table_objects(&shown, store, &all)?;
            all.into_iter()
                .filter(|o| pattern.matches_with(o.key.as_ref(), within))
                .map(found)
                .collect()
        } else if let Some(object) = at.head()? {
            vec![found(object.clone())]
        } else {
            let all = at.listing()?;
            // A folder inside a table is part of the table, as it is locally.
            refuse_table_above(&shown, store, &at.key)?;
            refuse_table_objects(&shown, store, all)?;
            all.iter()
                .filter(|o| is_data_object(&at.key, o))
                .cloned()
                .map(found)
                .collect()
        };
        if files.is_empty() {
            return Err(Error::missing(format!(
                "{shown}: no Parquet objects here (no object with this key, and none ending in \
                 .parquet below it)"
            )));
        }
        Ok(Listing { files, table: None })
    }
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
/// folder (a Delta table's log, an Iceberg table's metadata): that table's
/// files read loose would count deleted and replaced rows.
fn refuse_table_objects(shown: &str, store: &Store, all: &[ObjectFile]) -> Result<(), Error> {
    match super::table_of_listing(all) {
        Some((source, table)) => Err(refusal(shown, store, source, table.into())),
        None => Ok(()),
    }
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
        if let Some(source) = super::table_at(&mut |name| below(name))? {
            return Err(refusal(shown, store, source, folder));
        }
    }
    Ok(())
}

/// The refusal of a table's files, `table` being its folder, read loose.
fn refusal(
    shown: &str,
    store: &Store,
    source: &dyn Source,
    table: object_store::path::Path,
) -> Error {
    let url = store.shown(&table);
    let url = url.trim_end_matches('/');
    source.refuse_loose(shown, &format!("{url}/ "), url)
}
