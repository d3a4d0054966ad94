//! Loose Parquet files on this machine: a file, a folder (every `*.parquet`
//! below it) or a glob. Files inside a table's folder are refused: the
//! table sources read those (`files::discover` asks them).

use std::path::PathBuf;

use refscore_core::Error;

use super::{Found, Input, Listing, Origin, Source};
use crate::files;

/// Local files: whatever no other source claims.
pub(super) struct LocalFiles;

impl Source for LocalFiles {
    fn name(&self) -> &'static str {
        "local Parquet files"
    }

    fn claims(&self, input: &Input) -> Result<bool, Error> {
        Ok(input.store.is_none())
    }

    fn list(&self, input: &Input) -> Result<Listing, Error> {
        let files = files::discover(input.spec)?
            .into_iter()
            .map(|p: PathBuf| Found::loose(p, Origin::Local))
            .collect();
        Ok(Listing { files, table: None })
    }
}
