//! Object stores: `s3://`, `gs://`, `az://`/`abfss://` and `https://` URLs,
//! reached through the Arrow project's `object_store`, for inputs
//! (`refscore-read`) and results (`refscore-write`) alike.
//!
//! Credentials and endpoints come from the environment as each cloud's own
//! tools read them (`AWS_*`, `GOOGLE_*`, `AZURE_*`); they are never shown:
//! every message names the URL as [`redact`] writes it.

use std::ops::Range;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use object_store::multipart::MultipartStore;
use object_store::path::Path as StorePath;
use object_store::{GetOptions, ObjectStore, ObjectStoreExt, ObjectStoreScheme, RetryConfig};
use refscore_core::Error;
use url::Url;

/// How hard to try a store that fails: each request is retried with
/// exponential backoff, up to `retries` times or three minutes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreOptions {
    /// Retries of one failed request (0: none).
    pub retries: usize,
}

impl Default for StoreOptions {
    fn default() -> Self {
        StoreOptions { retries: 10 }
    }
}

/// The runtime object stores and the Delta engine run on. refscore's own
/// reading stays synchronous and waits on it, from any thread.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("refscore-store")
            .enable_all()
            .build()
            .expect("the object-store runtime starts")
    })
}

/// Whether `spec` is a URL refscore reads through an object store, rather
/// than a local path (a `file://` URL is a local path).
pub fn is_url(spec: &str) -> bool {
    match spec.split_once("://") {
        Some((scheme, _)) => {
            !scheme.is_empty()
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
                && !scheme.eq_ignore_ascii_case("file")
        }
        None => false,
    }
}

/// `url` as messages show it: no password, no query (an Azure SAS token or a
/// presigned signature lives there), so a secret never reaches a log.
pub fn redact(url: &str) -> String {
    if !is_url(url) {
        return url.to_string();
    }
    let Ok(mut parsed) = Url::parse(url) else {
        // Not parseable: keep the scheme and whatever follows the last '@'.
        return match url.split_once("://") {
            Some((scheme, rest)) => {
                let rest = rest.rsplit_once('@').map_or(rest, |(_, r)| r);
                let rest = rest.split_once('?').map_or(rest, |(r, _)| r);
                format!("{scheme}://{rest}")
            }
            None => url.to_string(),
        };
    };
    if parsed.password().is_some() {
        let _ = parsed.set_password(Some("REDACTED"));
    }
    if parsed.query().is_some() {
        parsed.set_query(Some("REDACTED"));
    }
    parsed.to_string()
}

mod upload;

pub use object_store::path::Path as Key;
pub use upload::Upload;

/// One object store and the key prefix a URL names in it.
#[derive(Clone)]
pub struct Store {
    /// The client, configured from the environment.
    pub store: Arc<dyn ObjectStore>,
    /// The same client's multipart calls, where the store has them: an
    /// upload whose id is known can be aborted by a later run.
    pub multipart: Option<Arc<dyn MultipartStore>>,
    /// `scheme://bucket` (credentials removed), to name objects in messages.
    pub root: String,
    /// The URL's own root, credentials and all, for the Delta engine.
    pub base: Url,
    /// Which kind of store: what a write check can ask of it differs.
    pub scheme: ObjectStoreScheme,
}

/// One object to read: its store, key and what identifies its content.
#[derive(Debug, Clone)]
pub struct ObjectFile {
    /// The client of the object's store.
    pub store: Arc<dyn ObjectStore>,
    /// The object's key in it.
    pub key: StorePath,
    /// Bytes, from the listing or a HEAD request.
    pub size: u64,
    /// The store's ETag or version id: a changed object gets a new one.
    pub version: Option<String>,
    /// The ETag the listing or HEAD gave: every read sends it as
    /// `If-Match`, so an object replaced during the run fails the read
    /// instead of mixing two versions' bytes.
    pub e_tag: Option<String>,
    /// The version id a versioned bucket gave: reads ask for that version
    /// where the store gave no ETag.
    pub version_id: Option<String>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The root only: the base URL may carry credentials.
        f.debug_struct("Store")
            .field("root", &self.root)
            .field("scheme", &self.scheme)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// The client for `url`'s bucket or host, with credentials and endpoint
    /// from the environment.
    pub fn open(url: &str, options: StoreOptions) -> Result<(Store, StorePath), Error> {
        let shown = redact(url);
        let parsed =
            Url::parse(url).map_err(|e| Error::usage(format!("{shown}: not a valid URL: {e}")))?;
        let (scheme, key) = ObjectStoreScheme::parse(&parsed).map_err(|_| {
            Error::usage(format!(
                "{shown}: refscore reads s3://, gs://, az://, abfss:// and https:// URLs, \
                 or local paths"
            ))
        })?;
        let retry = RetryConfig {
            max_retries: options.retries,
            retry_timeout: Duration::from_secs(180),
            ..RetryConfig::default()
        };
        type Clients = (Arc<dyn ObjectStore>, Option<Arc<dyn MultipartStore>>);
        fn both<T: ObjectStore + MultipartStore>(store: T) -> Clients {
            let store = Arc::new(store);
            (Arc::clone(&store) as _, Some(store as _))
        }
        let built: Result<Clients, object_store::Error> = match scheme {
            ObjectStoreScheme::AmazonS3 => {
                let mut builder = object_store::aws::AmazonS3Builder::from_env()
                    .with_url(url)
                    .with_retry(retry);
                // An endpoint the user gave as http:// (MinIO, Ceph, a
                // local emulator) is meant: allow it without a second flag.
                let endpoint = std::env::var("AWS_ENDPOINT_URL")
                    .or_else(|_| std::env::var("AWS_ENDPOINT"))
                    .unwrap_or_default();
                if endpoint.starts_with("http://") {
                    builder = builder.with_allow_http(true);
                }
                builder.build().map(both)
            }
            ObjectStoreScheme::GoogleCloudStorage => {
                object_store::gcp::GoogleCloudStorageBuilder::from_env()
                    .with_url(url)
                    .with_retry(retry)
                    .build()
                    .map(both)
            }
            ObjectStoreScheme::MicrosoftAzure => {
                let mut builder = object_store::azure::MicrosoftAzureBuilder::from_env()
                    .with_url(url)
                    .with_retry(retry);
                if std::env::var("AZURE_STORAGE_USE_EMULATOR").is_ok_and(|v| v == "true") {
                    builder = builder.with_allow_http(true);
                }
                builder.build().map(both)
            }
            ObjectStoreScheme::Http => {
                // The client sends neither a URL's user:password nor its
                // query: say so, not "check AWS_*" after a 403.
                if !parsed.username().is_empty()
                    || parsed.password().is_some()
                    || parsed.query().is_some()
                {
                    return Err(Error::denied(format!(
                        "{shown}: refscore does not send access carried in an http(s) URL \
                         (user:password@ or a signed query string); it reads http(s) URLs \
                         open to anyone, and private objects through their store's own URL \
                         (s3://, gs://, az://) with credentials in the environment"
                    )));
                }
                let mut root = parsed.clone();
                root.set_path("");
                root.set_query(None);
                object_store::http::HttpBuilder::new()
                    .with_url(root.as_str())
                    .with_retry(retry)
                    .with_client_options(
                        object_store::ClientOptions::new()
                            .with_allow_http(parsed.scheme() == "http"),
                    )
                    .build()
                    .map(|s| (Arc::new(s) as _, None))
            }
            _ => {
                return Err(Error::usage(format!(
                    "{shown}: refscore reads s3://, gs://, az://, abfss:// and https:// URLs, \
                     or local paths"
                )))
            }
        };
        let (store, multipart) = built.map_err(|e| {
            Error::config(format!(
                "{shown}: cannot set up the object store: {}",
                one_reason(&e)
            ))
        })?;
        let mut base = parsed.clone();
        base.set_path("");
        base.set_query(None);
        let root = redact(base.as_str()).trim_end_matches('/').to_string();
        Ok((
            Store {
                store,
                multipart,
                root,
                base,
                scheme,
            },
            key,
        ))
    }

    /// The URL of `key` as messages show it.
    pub fn shown(&self, key: &StorePath) -> String {
        format!("{}/{}", self.root, key)
    }

    /// The object at `key`, or `None` where there is none.
    pub fn head(&self, key: &StorePath) -> Result<Option<ObjectFile>, Error> {
        match block_on(self.store.head(key)) {
            Ok(meta) => Ok(Some(self.object(meta))),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(store_error(&self.shown(key), &e)),
        }
    }

    /// Every object below `prefix` (a folder: `prefix/...`), in key order.
    pub fn list(&self, prefix: &StorePath) -> Result<Vec<ObjectFile>, Error> {
        let prefix = (!prefix.as_ref().is_empty()).then_some(prefix);
        let listed: Vec<object_store::ObjectMeta> = block_on(self.store.list(prefix).try_collect())
            .map_err(|e| {
                let at = prefix.map(|p| self.shown(p)).unwrap_or(self.root.clone());
                store_error(&at, &e)
            })?;
        let mut out: Vec<ObjectFile> = listed.into_iter().map(|m| self.object(m)).collect();
        out.sort_by(|a, b| a.key.as_ref().cmp(b.key.as_ref()));
        Ok(out)
    }

    /// The objects below `prefix` as far as the store's first page of a
    /// listing goes (about 1,000): enough to tell whether a folder exists
    /// (a table's `_delta_log/`) without listing a large one whole.
    pub fn first_page(&self, prefix: &StorePath) -> Result<Vec<ObjectFile>, Error> {
        let mut listing = self.store.list(Some(prefix));
        let mut out = Vec::new();
        block_on(async {
            while let Some(meta) = futures::StreamExt::next(&mut listing).await {
                out.push(self.object(meta?));
                if out.len() >= 1000 {
                    break;
                }
            }
            Ok::<_, object_store::Error>(())
        })
        .map_err(|e| store_error(&self.shown(prefix), &e))?;
        Ok(out)
    }

    /// The whole of a small object (a table's metadata file, a manifest, a
    /// delete file) in one request; data files are read by ranges
    /// ([`ObjectFile::ranges`]).
    pub fn whole(&self, key: &StorePath) -> Result<Bytes, Error> {
        block_on(async { self.store.get(key).await?.bytes().await })
            .map_err(|e| store_error(&self.shown(key), &e))
    }

    fn object(&self, meta: object_store::ObjectMeta) -> ObjectFile {
        ObjectFile {
            store: Arc::clone(&self.store),
            key: meta.location,
            size: meta.size,
            version: meta.version.clone().or(meta.e_tag.clone()),
            e_tag: meta.e_tag,
            version_id: meta.version,
        }
    }
}

impl ObjectFile {
    /// The bytes of each range, fetched together (nearby ranges merged, the
    /// requests run side by side), all of the version first seen: pinned by
    /// its ETag (`If-Match`: a replaced object fails with
    /// [`object_store::Error::Precondition`], which [`store_error`] words),
    /// else by its version id.
    pub fn ranges(&self, ranges: &[Range<u64>]) -> Result<Vec<Bytes>, object_store::Error> {
        if self.e_tag.is_none() && self.version_id.is_none() {
            return block_on(self.store.get_ranges(&self.key, ranges));
        }
        let fetch = |range: Range<u64>| async move {
            // The ETag where there is one: asking for a version id needs
            // a permission (s3:GetObjectVersion) plain reads do not.
            let options = match &self.e_tag {
                Some(tag) => GetOptions::new().with_if_match(Some(tag.clone())),
                None => GetOptions::new().with_version(self.version_id.clone()),
            };
            self.store
                .get_opts(&self.key, options.with_range(Some(range)))
                .await?
                .bytes()
                .await
        };
        block_on(object_store::coalesce_ranges(
            ranges,
            fetch,
            object_store::OBJECT_STORE_COALESCE_DEFAULT,
        ))
    }
}

/// Runs `future` to completion on the store runtime.
pub fn block_on<F: std::future::Future>(future: F) -> F::Output {
    runtime().block_on(future)
}

/// An object-store failure as refscore's classes: 66 for a missing object
/// or bucket, 77 for refused credentials, 69 for a store that could not be
/// reached after the retries, 74 for anything else.
pub fn store_error(shown: &str, e: &object_store::Error) -> Error {
    let why = one_reason(e);
    match e {
        object_store::Error::Precondition { .. } => Error::io(format!(
            "{shown}: the object was replaced while this run read it (its ETag changed); \
             run again to read the new version whole"
        )),
        _ if matches!(e, object_store::Error::NotFound { .. })
            || why.contains("404 Not Found")
            || why.contains("NoSuchBucket") =>
        {
            Error::missing(format!("{shown}: no such object or bucket ({why})"))
        }
        _ if matches!(
            e,
            object_store::Error::PermissionDenied { .. }
                | object_store::Error::Unauthenticated { .. }
        ) || why.contains("403 Forbidden")
            || why.contains("401 Unauthorized") =>
        {
            Error::denied(format!(
                "{shown}: the store refused the credentials ({why}); check AWS_*/GOOGLE_*/AZURE_* \
             in the environment"
            ))
        }
        _ if unreachable(e) => Error::unavailable(format!("{shown}: {why}")),
        _ => Error::io(format!("{shown}: {why}")),
    }
}

/// Whether the failure is the store being out of reach (connection refused
/// or reset, a timeout, a 5xx after the retries), not an answer about the
/// object.
fn unreachable(e: &object_store::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = source {
        let text = s.to_string().to_ascii_lowercase();
        if text.contains("error sending request")
            || text.contains("connect")
            || text.contains("timed out")
            || text.contains("after ") && text.contains("retries")
            || text.contains("server error")
        {
            return true;
        }
        source = s.source();
    }
    false
}

/// The innermost useful reason of an object-store error, on one line,
/// credentials removed from any URL in it.
fn one_reason(e: &dyn std::error::Error) -> String {
    let mut parts = vec![e.to_string()];
    let mut source = e.source();
    while let Some(s) = source {
        let text = s.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = s.source();
    }
    let mut joined = parts.join(": ");
    // An S3-style XML error body: its code and message, not the document.
    if let Some(at) = joined.find("<?xml").or_else(|| joined.find("<Error>")) {
        let tag = |name: &str| {
            let open = format!("<{name}>");
            let start = joined.find(&open)? + open.len();
            let end = joined[start..].find('<')? + start;
            Some(joined[start..end].to_string())
        };
        let said = match (tag("Code"), tag("Message")) {
            (Some(code), Some(message)) => format!("{code}: {message}"),
            (Some(code), None) => code,
            _ => String::new(),
        };
        joined = format!("{}{said}", &joined[..at]);
    }
    // Any URL the client wrote into its message loses its query.
    joined
        .split_whitespace()
        .map(|w| if is_url(w) { redact(w) } else { w.to_string() })
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_are_told_from_paths() {
        assert!(is_url("s3://bucket/night/"));
        assert!(is_url("abfss://c@acct.dfs.core.windows.net/x"));
        assert!(!is_url("night/part-0.parquet"));
        assert!(!is_url("file:///tmp/x.parquet"));
        assert!(!is_url("/data/a://b"));
    }

    #[test]
    fn secrets_never_show() {
        assert_eq!(
            redact("https://user:hunter2@host/x.parquet?sig=abc"),
            "https://user:REDACTED@host/x.parquet?REDACTED"
        );
        assert_eq!(redact("s3://bucket/key.parquet"), "s3://bucket/key.parquet");
        assert!(!redact("s3://AKIA:secret@bucket/k").contains("secret"));
    }
}
