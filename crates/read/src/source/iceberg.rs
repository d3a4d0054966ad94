//! Iceberg tables: a folder holding `metadata/*.metadata.json` beside its
//! `data/` (or a Hadoop catalog's `metadata/version-hint.text`). Not read
//! yet: such a folder, and the files inside it, are refused.

use std::path::Path;

use refscore_core::Error;

use super::{Input, Listing, Source};

/// Iceberg tables, local or in a store.
pub(super) struct Iceberg;

impl Source for Iceberg {
    fn name(&self) -> &'static str {
        "an Iceberg table (metadata/*.metadata.json)"
    }

    fn claims(&self, _input: &Input) -> Result<bool, Error> {
        // Not read yet: the loose sources refuse its folder by its marks.
        Ok(false)
    }

    fn list(&self, input: &Input) -> Result<Listing, Error> {
        Err(self.refuse_loose(&input.shown(), "", input.spec))
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

    fn table_of_key<'k>(
        &self,
        key: &'k str,
        keys: &std::collections::HashSet<&str>,
    ) -> Option<&'k str> {
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

    fn refuse_loose(&self, shown: &str, which: &str, _table: &str) -> Error {
        Error::config(format!(
            "{shown}: {which}is {}, whose Parquet files include rows that later snapshots \
             deleted or replaced; refscore does not read Iceberg tables yet and never \
             reads a table's files as loose Parquet: export the table's current snapshot \
             to Parquet (e.g. DuckDB: COPY (SELECT * FROM iceberg_scan('TABLE')) TO \
             'night.parquet') and score that",
            self.name()
        ))
    }
}
