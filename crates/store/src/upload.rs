//! Putting a finished local file at a key so that no reader ever sees part
//! of it: one PUT for a small file, a multipart upload for a large one,
//! completed only after every part arrived (a killed or failed upload
//! leaves nothing at the key; a failed one is aborted).

use std::io::Read;
use std::path::Path;

use object_store::path::Path as StorePath;
use object_store::{ObjectStoreExt, PutPayload, WriteMultipart};
use refscore_core::Error;

use crate::{block_on, redact, store_error, ObjectFile, Store, StoreOptions};

/// Files up to this size go up in one PUT; larger ones in parts this size.
const PART: usize = 8 << 20;

/// Parts in flight at once (memory: this many parts).
const IN_FLIGHT: usize = 4;

/// A destination key in a store, for a result or its summary.
#[derive(Debug, Clone)]
pub struct Upload {
    store: Store,
    key: StorePath,
    shown: String,
}

impl Upload {
    /// The destination `url` names (an object's URL, not a prefix).
    pub fn to(url: &str, options: StoreOptions) -> Result<Upload, Error> {
        let shown = redact(url);
        let (store, key) = Store::open(url, options)?;
        if key.as_ref().is_empty() || url.ends_with('/') {
            return Err(Error::usage(format!(
                "{shown}: the output names a folder; give the result object's URL \
                 (.../night.parquet)"
            )));
        }
        Ok(Upload { store, key, shown })
    }

    /// The URL as messages show it (no credentials).
    pub fn shown(&self) -> &str {
        &self.shown
    }

    /// The destination of the same key with `suffix` added (the summary
    /// beside a result: `.summary.json`).
    pub fn with_suffix(&self, suffix: &str) -> Upload {
        let key = StorePath::from(format!("{}{suffix}", self.key));
        Upload {
            shown: self.store.shown(&key),
            store: self.store.clone(),
            key,
        }
    }

    /// What is at the key now, if anything (a HEAD request: refused
    /// credentials and an unreachable store are found before any work).
    pub fn existing(&self) -> Result<Option<ObjectFile>, Error> {
        self.store.head(&self.key)
    }

    /// Uploads the file at `local`, replacing what is at the key only once
    /// the whole file has arrived.
    pub fn put_file(&self, local: &Path) -> Result<(), Error> {
        let fail = |e: std::io::Error| Error::io(format!("{}: {e}", local.display()));
        let mut file = std::fs::File::open(local).map_err(fail)?;
        let size = file.metadata().map_err(fail)?.len();
        if size <= PART as u64 {
            let mut bytes = Vec::with_capacity(size as usize);
            file.read_to_end(&mut bytes).map_err(fail)?;
            return block_on(self.store.store.put(&self.key, PutPayload::from(bytes)))
                .map(|_| ())
                .map_err(|e| store_error(&self.shown, &e));
        }
        block_on(async {
            let upload = self
                .store
                .store
                .put_multipart(&self.key)
                .await
                .map_err(|e| store_error(&self.shown, &e))?;
            let mut writer = WriteMultipart::new_with_chunk_size(upload, PART);
            let mut buf = vec![0u8; PART];
            loop {
                let n = match file.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) => {
                        let _ = writer.abort().await;
                        return Err(fail(e));
                    }
                };
                if let Err(e) = writer.wait_for_capacity(IN_FLIGHT).await {
                    let _ = writer.abort().await;
                    return Err(store_error(&self.shown, &e));
                }
                writer.write(&buf[..n]);
            }
            writer
                .finish()
                .await
                .map(|_| ())
                .map_err(|e| store_error(&self.shown, &e))
        })
    }
}
