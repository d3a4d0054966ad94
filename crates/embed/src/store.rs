//! The persistent embedding cache (`--embed-cache DIR`): embeddings kept on
//! disk between runs, so that texts a nightly job sees again (above all the
//! references) cost nothing the next night.
//!
//! Layout: `DIR/<model key>/<2 hex>/<sha256 of the text>.emb`, one small
//! file per text. The model key hashes everything that changes an
//! embedding — weights, config, tokenizer, truncation length, pooling, and
//! the [`Numerics`] (kernel numerics version and precision) — so a
//! different model, setting or kernel change never reads another's vectors. Files are
//! written to a temporary name and renamed, so a killed run or two runs at
//! once leave only whole entries; an entry that does not read back exactly
//! (wrong magic, sizes or length) is treated as missing. The cache is only
//! an optimisation: a failed write is reported once and the run goes on.

use std::fs;
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use refscore_core::Error;

use crate::precision::Precision;
use sha2::{Digest, Sha256};

use crate::math::Embedded;
use crate::model::ModelFiles;

/// First bytes of every entry; the digit is the format version.
const MAGIC: &[u8; 8] = b"RSEMB\x00\x00\x01";

/// How the numbers of an embedding were computed, beyond the model and its
/// settings; part of the cache key so that vectors from other kernels are
/// never reused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Numerics {
    /// Bumped whenever a change to the kernels (attention, GELU, layer norm,
    /// pooling, normalisation) changes the vectors they produce.
    pub version: u32,
    /// The precision the forward pass runs in (`--precision`).
    pub precision: &'static str,
}

impl Numerics {
    /// The numerics this build produces in `precision`.
    pub(crate) fn of(precision: Precision) -> Numerics {
        Numerics {
            version: NUMERICS_VERSION,
            precision: precision.fingerprint_text(),
        }
    }
}

/// The numerics version of [`Numerics::of`]: bump it in any commit
/// that changes the vectors the kernels compute, so `--embed-cache` entries
/// written before are not reused.
pub(crate) const NUMERICS_VERSION: u32 = 1;

/// A folder of whole entries named by the SHA-256 of their text
/// (`<2 hex>/<hex>.<extension>`): what the embedding cache and the
/// cross-encoder's pair cache (`cross/pair_store.rs`) both keep. Only an
/// optimisation: the first failed write is reported, later ones skipped.
pub(crate) struct Entries {
    dir: PathBuf,
    extension: &'static str,
    write_failed: bool,
}

impl Entries {
    /// `root/<key>`, created if needed.
    pub(crate) fn open(root: &Path, key: &str, extension: &'static str) -> Result<Entries, Error> {
        let dir = root.join(key);
        fs::create_dir_all(&dir).map_err(|e| {
            Error::io(format!(
                "--embed-cache {}: cannot create it: {e}",
                root.display()
            ))
        })?;
        Ok(Entries {
            dir,
            extension,
            write_failed: false,
        })
    }

    /// The folder holding the entries.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, text: &str) -> PathBuf {
        let hex = hex(&Sha256::digest(text.as_bytes()));
        self.dir
            .join(&hex[..2])
            .join(format!("{hex}.{}", self.extension))
    }

    /// The bytes stored for `text`, if any.
    pub(crate) fn read(&self, text: &str) -> Option<Vec<u8>> {
        let mut bytes = Vec::new();
        fs::File::open(self.path(text))
            .and_then(|mut f| f.read_to_end(&mut bytes))
            .ok()?;
        Some(bytes)
    }

    /// Stores `bytes` for `text`. Returns whether they were written; the
    /// first failure is reported on stderr, later ones silently skipped.
    pub(crate) fn write(&mut self, text: &str, bytes: &[u8]) -> bool {
        if self.write_failed {
            return false;
        }
        let path = self.path(text);
        match write_entry(&path, bytes) {
            Ok(()) => true,
            Err(err) => {
                self.write_failed = true;
                eprintln!(
                    "refscore: warning: --embed-cache: cannot write {}: {err}; \
                     going on without storing to it",
                    path.display()
                );
                false
            }
        }
    }
}

/// A persistent embedding cache for one model and setting.
pub(crate) struct EmbeddingStore {
    entries: Entries,
    /// Entries' shape: token vectors' and the sentence vector's widths.
    widths: Widths,
}

impl EmbeddingStore {
    /// Opens (creating it if needed) the part of `root` that belongs to this
    /// model, truncation length, pooling and numerics.
    pub(crate) fn open(
        root: &Path,
        files: &ModelFiles,
        max_len: usize,
        widths: Widths,
        numerics: Numerics,
        variant: &str,
    ) -> Result<EmbeddingStore, Error> {
        let key = model_key(files, max_len, numerics, variant)?;
        Ok(EmbeddingStore {
            entries: Entries::open(root, &key, "emb")?,
            widths,
        })
    }

    /// The folder holding this model's entries.
    pub(crate) fn dir(&self) -> &Path {
        self.entries.dir()
    }

    /// The stored embedding of `text`, if there is a whole one.
    pub(crate) fn get(&self, text: &str) -> Option<Embedded> {
        decode(&self.entries.read(text)?, self.widths)
    }

    /// Stores the embedding of `text`. Returns whether it was written.
    pub(crate) fn put(&mut self, text: &str, e: &Embedded) -> bool {
        self.entries.write(text, &encode(e))
    }
}

/// Hash of the model files, settings and numerics that determine an
/// embedding.
/// `variant`: settings beyond these that change the vectors (BERTScore's
/// layer, a prompt), empty for the defaults, so that entries written
/// before those settings existed are still found.
fn model_key(
    files: &ModelFiles,
    max_len: usize,
    numerics: Numerics,
    variant: &str,
) -> Result<String, Error> {
    let mut h = Sha256::new();
    h.update(files.content_sha256()?.as_bytes());
    let pooling = files.pooling.name();
    let Numerics { version, precision } = numerics;
    h.update(
        format!(
            "max_seq_length={max_len};pooling={pooling};numerics={version};precision={precision}"
        )
        .as_bytes(),
    );
    h.update(variant.as_bytes());
    Ok(hex(&h.finalize())[..32].to_string())
}

/// Lower-case hex of `bytes`.
pub(crate) fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn encode(e: &Embedded) -> Vec<u8> {
    let mut out = Vec::with_capacity(e.bytes() + 16);
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(e.ids.len() as u32).to_le_bytes());
    out.extend_from_slice(&(e.pooled.len() as u32).to_le_bytes());
    out.extend(e.ids.iter().flat_map(|v| v.to_le_bytes()));
    out.extend(e.pooled.iter().flat_map(|v| v.to_le_bytes()));
    out.extend(e.tokens.iter().flat_map(|v| v.to_le_bytes()));
    out
}

/// The widths of a stored embedding's vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Widths {
    /// Each token vector's (the encoder's hidden size).
    pub tokens: usize,
    /// The sentence vector's (the hidden size, or a Dense module's output).
    pub sentence: usize,
}

fn decode(bytes: &[u8], widths: Widths) -> Option<Embedded> {
    let Widths {
        tokens: hidden,
        sentence: width,
    } = widths;
    let rest = bytes.strip_prefix(MAGIC)?;
    let word = |b: &[u8], k: usize| -> Option<u32> {
        Some(u32::from_le_bytes(
            b.get(4 * k..4 * k + 4)?.try_into().ok()?,
        ))
    };
    let n = word(rest, 0)? as usize;
    if word(rest, 1)? as usize != width || rest.len() != 4 * (2 + n + width + n * hidden) {
        return None;
    }
    let words = |from: usize, count: usize| {
        rest[4 * from..4 * (from + count)]
            .chunks_exact(4)
            .map(|c| [c[0], c[1], c[2], c[3]])
    };
    let ids: Vec<u32> = words(2, n).map(u32::from_le_bytes).collect();
    let pooled: Vec<f32> = words(2 + n, width).map(f32::from_le_bytes).collect();
    let tokens: Vec<f32> = words(2 + n + width, n * hidden)
        .map(f32::from_le_bytes)
        .collect();
    Some(Embedded {
        ids,
        pooled,
        tokens,
    })
}

fn write_entry(path: &Path, bytes: &[u8]) -> io::Result<()> {
    fs::create_dir_all(path.parent().expect("entry paths have a parent"))?;
    refscore_core::files::write_cache_entry(path, bytes)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::Pooling;

    fn sample() -> Embedded {
        Embedded {
            ids: vec![101, 7592, 102],
            pooled: vec![0.5, -0.25, 0.125, 1.0],
            tokens: (0..12).map(|k| k as f32 * 0.1 - 0.3).collect(),
        }
    }

    #[test]
    fn entries_round_trip_exactly() {
        let e = sample();
        let back = decode(&encode(&e), square(4)).expect("decodes");
        assert_eq!(back.ids, e.ids);
        assert_eq!(back.pooled, e.pooled);
        assert_eq!(back.tokens, e.tokens);
    }

    /// Token and sentence vectors of one width.
    fn square(width: usize) -> Widths {
        Widths {
            tokens: width,
            sentence: width,
        }
    }

    /// A model folder with the three files the key hashes.
    fn model_folder(dir: &Path) -> ModelFiles {
        for name in ["config.json", "tokenizer.json", "model.safetensors"] {
            fs::write(dir.join(name), name).unwrap();
        }
        ModelFiles {
            dir: dir.to_path_buf(),
            pooling: Pooling::Mean,
            max_seq_length: 256,
            max_positions: 512,
            after_pooling: vec![crate::model::AfterPooling::Normalize],
            include_prompt: true,
            lower_case: false,
            prompts: Default::default(),
            default_prompt: None,
            layers: 6,
            family: "bert".into(),
            config: "{}".into(),
            pad_token_id: 0,
            tokenizer_class: None,
            cls_sep_tokens: None,
            kind: crate::model::ModelKind::Transformer,
        }
    }

    #[test]
    fn entries_of_other_numerics_are_never_reused() {
        let (model, root) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let files = model_folder(model.path());
        let open = |numerics| {
            EmbeddingStore::open(root.path(), &files, 256, square(4), numerics, "").unwrap()
        };
        let mut store = open(Numerics::of(Precision::Fp32));
        assert!(store.put("Paris", &sample()));
        assert!(
            open(Numerics::of(Precision::Fp32)).get("Paris").is_some(),
            "same numerics: a hit"
        );
        let bumped = Numerics {
            version: NUMERICS_VERSION + 1,
            ..Numerics::of(Precision::Fp32)
        };
        assert!(
            open(bumped).get("Paris").is_none(),
            "new numerics version: a miss"
        );
        let bf16 = Numerics::of(Precision::Bf16);
        assert!(open(bf16).get("Paris").is_none(), "other precision: a miss");
        assert_ne!(open(bumped).dir(), store.dir());
    }

    #[test]
    fn damaged_entries_read_as_missing() {
        let bytes = encode(&sample());
        assert!(
            decode(&bytes[..bytes.len() - 1], square(4)).is_none(),
            "truncated"
        );
        assert!(decode(&bytes, square(8)).is_none(), "other hidden size");
        let mut bad = bytes.clone();
        bad[0] = b'X';
        assert!(decode(&bad, square(4)).is_none(), "wrong magic");
        let mut longer = bytes;
        longer.push(0);
        assert!(decode(&longer, square(4)).is_none(), "trailing bytes");
    }
}
