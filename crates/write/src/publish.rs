//! A result whose destination is an object store (`-o s3://.../night.parquet`).
//! The run writes it to a local copy first, as it writes any result (its run
//! folder, and so `--resume`, live beside that copy); [`Publish::publish`]
//! then puts the finished result and its summary at the URL, each whole or
//! not at all, so no reader of the store ever sees a partial result.

use std::path::{Path, PathBuf};

use refscore_core::Error;
use refscore_store::{StoreOptions, Upload};

use crate::summary_path;

/// Where a result and its summary go in a store, and the local copy the
/// run writes.
#[derive(Debug, Clone)]
pub struct Publish {
    result: Upload,
    summary: Upload,
    local: PathBuf,
}

impl Publish {
    /// The destination `url`, with its local copy in the folder `staging`
    /// (created when missing).
    pub fn new(url: &str, staging: &Path, options: StoreOptions) -> Result<Publish, Error> {
        let result = Upload::to(url, options)?;
        let name = url
            .split(['?', '#'])
            .next()
            .and_then(|u| u.rsplit('/').next())
            .filter(|n| !n.is_empty())
            .unwrap_or("result.parquet");
        std::fs::create_dir_all(staging).map_err(|e| {
            Error::io(format!(
                "{}: cannot create the local folder for {}'s run: {e}",
                staging.display(),
                result.shown()
            ))
        })?;
        Ok(Publish {
            summary: result.with_suffix(".summary.json"),
            result,
            local: staging.join(name),
        })
    }

    /// The local copy the run writes (its run folder lies beside it).
    pub fn local(&self) -> &Path {
        &self.local
    }

    /// The URL as messages show it.
    pub fn shown(&self) -> &str {
        self.result.shown()
    }

    /// The summary's URL as messages show it.
    pub fn summary_shown(&self) -> &str {
        self.summary.shown()
    }

    /// Refuses, before any work, a destination that holds an object unless
    /// `--overwrite` or `--resume` says what to do with it; also finds
    /// refused credentials and an unreachable store then.
    pub fn check(&self, overwrite: bool, resume: bool) -> Result<(), Error> {
        if self.result.existing()?.is_some() && !overwrite && !resume {
            return Err(Error::config(format!(
                "{}: the output exists; pass --overwrite to replace it, or --resume to \
                 finish the run that wrote it",
                self.shown()
            )));
        }
        Ok(())
    }

    /// Uploads the finished local result, then its summary.
    pub fn publish(&self) -> Result<(), Error> {
        self.result.put_file(&self.local)?;
        self.summary.put_file(&summary_path(&self.local))
    }

    /// Uploads the local result where the store lacks it or holds another
    /// size (a run finished locally whose upload was cut short).
    pub fn publish_if_missing(&self) -> Result<bool, Error> {
        let local = std::fs::metadata(&self.local)
            .map_err(|e| Error::io(format!("{}: {e}", self.local.display())))?
            .len();
        let there = self.result.existing()?.map(|o| o.size);
        let summary_there = self.summary.existing()?.is_some();
        if there == Some(local) && summary_there {
            return Ok(false);
        }
        self.publish()?;
        Ok(true)
    }
}
