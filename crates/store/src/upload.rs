//! Putting a finished local file at a key so that no reader ever sees part
//! of it: one PUT for a small file, a multipart upload for a large one,
//! completed only after every part arrived (a killed or failed upload
//! leaves nothing at the key; a failed one is aborted, and a killed one by
//! the next run, from the upload id it recorded).

use std::io::Read;
use std::path::Path;

use futures::stream::{FuturesOrdered, StreamExt};
use object_store::multipart::{MultipartStore, PartId};
use object_store::path::Path as StorePath;
use object_store::{MultipartId, ObjectStoreExt, PutPayload, WriteMultipart};
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

    /// Checks, before any work, that the key can be written: a multipart
    /// upload is started there and aborted at once (S3, GCS: the bucket
    /// must exist and the credentials may write; nothing appears at the
    /// key). Azure starts uploads without a request, so there the
    /// container's existence is checked with a one-page listing. A missing
    /// bucket or refused credentials found only at the upload would come
    /// after all the work and the judge's bill.
    pub fn check_writable(&self) -> Result<(), Error> {
        block_on(async {
            if self.store.scheme == object_store::ObjectStoreScheme::MicrosoftAzure {
                let parent: StorePath = self
                    .key
                    .parts()
                    .take(self.key.parts().count() - 1)
                    .collect();
                let mut listing = self.store.store.list(Some(&parent));
                return match futures::StreamExt::next(&mut listing).await {
                    Some(Err(e)) => Err(store_error(&self.shown, &e)),
                    _ => Ok(()),
                };
            }
            match self.store.store.put_multipart(&self.key).await {
                Ok(mut upload) => {
                    // A failed abort leaves an upload with no parts: no bytes
                    // billed, and the bucket's lifecycle rule ends it.
                    let _ = upload.abort().await;
                    Ok(())
                }
                Err(
                    object_store::Error::NotImplemented { .. }
                    | object_store::Error::NotSupported { .. },
                ) => Ok(()),
                Err(e) => Err(store_error(&self.shown, &e)),
            }
        })
    }

    /// Uploads the file at `local`, replacing what is at the key only once
    /// the whole file has arrived. A multipart upload's id is kept in the
    /// file `record` until the upload is completed or aborted, so a run
    /// killed midway leaves what the next run needs to abort it
    /// ([`Upload::abort_left_over`]): its parts are billed until then.
    pub fn put_file(&self, local: &Path, record: &Path) -> Result<(), Error> {
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
        let Some(parts) = &self.store.multipart else {
            return self.put_parts_unrecorded(file, local);
        };
        block_on(async {
            let id = parts
                .create_multipart(&self.key)
                .await
                .map_err(|e| store_error(&self.shown, &e))?;
            // Best effort: without the record only the bucket's lifecycle
            // rule ends an upload this process cannot finish or abort.
            let _ = std::fs::write(record, format!("{}\n{id}\n", self.key));
            let sent = self.send_parts(parts.as_ref(), &id, &mut file, local).await;
            let done = match sent {
                Ok(list) => parts
                    .complete_multipart(&self.key, &id, list)
                    .await
                    .map(|_| ())
                    .map_err(|e| store_error(&self.shown, &e)),
                Err(e) => Err(e),
            };
            if done.is_err() && parts.abort_multipart(&self.key, &id).await.is_err() {
                return done;
            }
            let _ = std::fs::remove_file(record);
            done
        })
    }

    /// Sends the parts of `file`, [`IN_FLIGHT`] at a time, in order.
    async fn send_parts(
        &self,
        parts: &dyn MultipartStore,
        id: &MultipartId,
        file: &mut std::fs::File,
        local: &Path,
    ) -> Result<Vec<PartId>, Error> {
        let mut pending = FuturesOrdered::new();
        let mut sent = Vec::new();
        let mut index = 0;
        loop {
            let mut buf = vec![0u8; PART];
            let n =
                fill(file, &mut buf).map_err(|e| Error::io(format!("{}: {e}", local.display())))?;
            if n == 0 {
                break;
            }
            buf.truncate(n);
            pending.push_back(parts.put_part(&self.key, id, index, PutPayload::from(buf)));
            index += 1;
            while pending.len() >= IN_FLIGHT {
                let part = pending.next().await.expect("one is pending");
                sent.push(part.map_err(|e| store_error(&self.shown, &e))?);
            }
        }
        while let Some(part) = pending.next().await {
            sent.push(part.map_err(|e| store_error(&self.shown, &e))?);
        }
        Ok(sent)
    }

    /// A multipart upload through the generic client (stores without
    /// multipart calls of their own): aborted on failure, unrecorded.
    fn put_parts_unrecorded(&self, mut file: std::fs::File, local: &Path) -> Result<(), Error> {
        let fail = |e: std::io::Error| Error::io(format!("{}: {e}", local.display()));
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

    /// Aborts the multipart upload that `record` names (a run of this
    /// output killed during its upload left it, its parts billed), and
    /// removes the record once the store has let it go. Best effort: a
    /// store that refuses keeps the record for the next run, and the
    /// bucket's lifecycle rule (docs/usage.md) ends it anyway.
    pub fn abort_left_over(&self, record: &Path) {
        let Ok(text) = std::fs::read_to_string(record) else {
            return;
        };
        let mut lines = text.lines();
        let (Some(key), Some(id), Some(parts)) =
            (lines.next(), lines.next(), &self.store.multipart)
        else {
            let _ = std::fs::remove_file(record);
            return;
        };
        if key != self.key.as_ref() {
            let _ = std::fs::remove_file(record);
            return;
        }
        let id: MultipartId = id.to_string();
        match block_on(parts.abort_multipart(&self.key, &id)) {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {
                let _ = std::fs::remove_file(record);
            }
            Err(_) => {}
        }
    }
}

/// Reads until `buf` is full or the file ends: every part but the last has
/// the same size, as some stores require.
fn fill(file: &mut std::fs::File, buf: &mut [u8]) -> std::io::Result<usize> {
    let mut n = 0;
    while n < buf.len() {
        match file.read(&mut buf[n..]) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(n)
}
