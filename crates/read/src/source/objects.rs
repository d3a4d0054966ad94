//! Inputs named by a URL: one object, every Parquet object below a prefix,
//! the objects a glob matches, or a Delta table's active files.

use std::path::PathBuf;

use refscore_core::Error;
use refscore_store::{redact, ObjectFile};

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
        let all = store.list(&prefix.into())?;
        refuse_table_objects(&shown, &all)?;
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
