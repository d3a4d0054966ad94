//! A result whose destination is an object store (`-o s3://.../night.parquet`).
//! The run writes it to a local copy first, as it writes any result (its run
//! folder, and so `--resume`, live beside that copy); [`Sink::publish`]
//! then puts the finished result and its summary at the URL, each whole or
//! not at all, so no reader of the store ever sees a partial result.

use std::path::{Path, PathBuf};

use refscore_core::Error;
use refscore_store::{store_error, ObjectFile, StoreOptions, Upload};

use super::{RunKey, Settled, Sink};
use crate::summary_path;

/// Where a result and its summary go in a store, and the local copy the
/// run writes.
#[derive(Debug, Clone)]
pub struct ObjectUpload {
    result: Upload,
    summary: Upload,
    local: PathBuf,
}

impl ObjectUpload {
    /// The destination `url`, with its local copy in the folder `staging`
    /// (created when missing).
    pub fn new(url: &str, staging: &Path, options: StoreOptions) -> Result<ObjectUpload, Error> {
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
        Ok(ObjectUpload {
            summary: result.with_suffix(".summary.json"),
            result,
            local: staging.join(name),
        })
    }

    /// The local copy the run writes (its run folder lies beside it).
    pub fn local_copy(&self) -> &Path {
        &self.local
    }

    /// Refuses, before any work, a destination that holds an object unless
    /// `--overwrite` or `--resume` says what to do with it; also finds
    /// refused credentials, an unreachable store and a bucket that does
    /// not exist or may not be written then.
    fn check_destination(&self, overwrite: bool, resume: bool) -> Result<(), Error> {
        if self.result.existing()?.is_some() && !overwrite && !resume {
            return Err(Error::config(format!(
                "{}: the output exists; pass --overwrite to replace it, or --resume to \
                 finish the run that wrote it",
                self.result.shown()
            )));
        }
        // A multipart upload of this output killed midway: its parts are
        // billed until it is aborted.
        self.result.abort_left_over(&upload_record(&self.local));
        self.summary
            .abort_left_over(&upload_record(&summary_path(&self.local)));
        self.result.check_writable()
    }

    /// What the store holds at the result's key, if anything: the run hash
    /// its footer records and the run id its summary records, so `--resume`
    /// on a machine that holds nothing of the run can tell this run's
    /// finished result from another run's, which it must not replace.
    pub fn stored(&self) -> Result<Option<StoredResult>, Error> {
        let Some(result) = self.result.existing()? else {
            return Ok(None);
        };
        let hash = footer_value(
            &result,
            self.result.shown(),
            refscore_core::schema::footer::RUN,
        )?;
        let summary = match self.summary.existing()? {
            Some(summary) if summary.size > 0 && summary.size < (16 << 20) => {
                let text = summary
                    .ranges(&[0..summary.size])
                    .map_err(|e| store_error(self.summary.shown(), &e))?
                    .remove(0);
                String::from_utf8(text.to_vec()).ok()
            }
            _ => None,
        };
        Ok(Some(StoredResult { hash, summary }))
    }

    /// Uploads the finished local result, then its summary.
    fn upload(&self) -> Result<(), Error> {
        self.result
            .put_file(&self.local, &upload_record(&self.local))?;
        let summary = summary_path(&self.local);
        self.summary.put_file(&summary, &upload_record(&summary))
    }

    /// Uploads the local result where the store lacks it or holds another
    /// size (a run finished locally whose upload was cut short).
    fn upload_if_missing(&self) -> Result<bool, Error> {
        let local = std::fs::metadata(&self.local)
            .map_err(|e| Error::io(format!("{}: {e}", self.local.display())))?
            .len();
        let there = self.result.existing()?.map(|o| o.size);
        let summary_there = self.summary.existing()?.is_some();
        if there == Some(local) && summary_there {
            return Ok(false);
        }
        self.upload()?;
        Ok(true)
    }
}

impl Sink for ObjectUpload {
    fn shown(&self) -> String {
        self.result.shown().to_string()
    }

    fn local(&self, _run: &RunKey) -> PathBuf {
        self.local.clone()
    }

    fn summary_shown(&self, _run: &RunKey) -> String {
        self.summary.shown().to_string()
    }

    fn check(&self, overwrite: bool, resume: bool) -> Result<(), Error> {
        self.check_destination(overwrite, resume)
    }

    /// `--resume` with nothing of the run on this machine (a fresh
    /// container, another machine): a result in the store is this run's
    /// finished one, or another's that only `--overwrite` may replace.
    fn settled(
        &self,
        run: &RunKey,
        held_here: bool,
        overwrite: bool,
        resume: bool,
    ) -> Result<Option<Settled>, Error> {
        if !resume || overwrite || held_here {
            return Ok(None);
        }
        let Some(stored) = self.stored()? else {
            return Ok(None);
        };
        if stored.is_run(&run.hash, &run.run_id) {
            return Ok(Some(Settled::Already {
                summary: stored.summary.unwrap_or_default(),
                note: format!(
                    "{} is already this run's finished result; nothing to do",
                    self.shown()
                ),
            }));
        }
        Err(Error::config(format!(
            "{}: the output exists and is not this run's finished result, and \
             --resume found nothing of this run to finish in {}; pass --overwrite to \
             replace it",
            self.shown(),
            self.local
                .parent()
                .unwrap_or(self.local.as_path())
                .display()
        )))
    }

    fn publish(&self, _run: &RunKey) -> Result<(), Error> {
        self.upload()
    }

    fn publish_if_missing(&self, _run: &RunKey) -> Result<bool, Error> {
        self.upload_if_missing()
    }
}

/// Where the id of a multipart upload of `local` is kept while it is under
/// way (`.<name>.multipart-upload` beside it), for the next run to abort
/// one that a killed run left.
fn upload_record(local: &Path) -> PathBuf {
    let name = local
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    local.with_file_name(format!(".{name}.multipart-upload"))
}

/// A result object found at the destination (see [`ObjectUpload::stored`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredResult {
    /// The run hash its Parquet footer records, if it is a refscore result.
    pub hash: Option<String>,
    /// Its summary's text, if the summary is there.
    pub summary: Option<String>,
}

impl StoredResult {
    /// Whether it is the finished result of the run with this fingerprint
    /// hash and run id: the result and its summary both say so.
    pub fn is_run(&self, hash: &str, run_id: &str) -> bool {
        let summary_run_id = self
            .summary
            .as_deref()
            .and_then(|t| serde_json::from_str::<serde_json::Value>(t).ok())
            .and_then(|v| v.get("run_id")?.as_str().map(str::to_string));
        self.hash.as_deref() == Some(hash) && summary_run_id.as_deref() == Some(run_id)
    }
}

/// The value of `key` in the footer metadata of the Parquet object
/// `object`, read with two ranged requests; `None` where the object is no
/// Parquet file or lacks the key.
pub(crate) fn footer_value(
    object: &ObjectFile,
    shown: &str,
    key: &str,
) -> Result<Option<String>, Error> {
    let size = object.size;
    if size < 12 {
        return Ok(None);
    }
    let fetch = |range| {
        object
            .ranges(&[range])
            .map(|mut got| got.remove(0))
            .map_err(|e| store_error(shown, &e))
    };
    let tail = fetch(size - 8..size)?;
    if tail.len() != 8 || &tail[4..] != b"PAR1" {
        return Ok(None);
    }
    let len = u64::from(u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")));
    if len + 12 > size {
        return Ok(None);
    }
    let footer = fetch(size - 8 - len..size - 8)?;
    let Ok(meta) = parquet::file::metadata::ParquetMetaDataReader::decode_metadata(&footer) else {
        return Ok(None);
    };
    Ok(meta
        .file_metadata()
        .key_value_metadata()
        .and_then(|kv| kv.iter().find(|k| k.key == key))
        .and_then(|k| k.value.clone()))
}
