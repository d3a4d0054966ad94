//! A result whose destination is a local file (`-o night.parquet`): the
//! file the run assembles is the result, so there is nothing to publish;
//! the job's checks of the output path (`refscore-job`) are its checks.

use std::path::{Path, PathBuf};

use refscore_core::Error;

use super::{RunKey, Settled, Sink};
use crate::summary_path;

/// `-o FILE`: the local result file itself.
#[derive(Debug, Clone)]
pub struct LocalFile {
    path: PathBuf,
}

impl LocalFile {
    /// The result file at `path`.
    pub fn new(path: &Path) -> LocalFile {
        LocalFile {
            path: path.to_path_buf(),
        }
    }
}

impl Sink for LocalFile {
    fn shown(&self) -> String {
        self.path.display().to_string()
    }

    fn local(&self, _run: &RunKey) -> PathBuf {
        self.path.clone()
    }

    fn summary_shown(&self, _run: &RunKey) -> String {
        summary_path(&self.path).display().to_string()
    }

    fn check(&self, _overwrite: bool, _resume: bool) -> Result<(), Error> {
        Ok(())
    }

    fn settled(&self, _: &RunKey, _: bool, _: bool, _: bool) -> Result<Option<Settled>, Error> {
        Ok(None)
    }

    fn publish(&self, _run: &RunKey) -> Result<(), Error> {
        Ok(())
    }

    fn publish_if_missing(&self, _run: &RunKey) -> Result<bool, Error> {
        Ok(false)
    }
}
