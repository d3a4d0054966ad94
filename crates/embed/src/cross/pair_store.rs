//! Pair scores kept on disk between runs (`--embed-cache DIR`), as the
//! embedding cache keeps embeddings: a nightly job whose references and
//! answers repeat from night to night asks the cross-encoder only about the
//! pairs it has not seen. One entry per (direction, first text, second
//! text), in a folder keyed by everything that changes a score: the model's
//! files, truncation length, activation or softmax, precision and the
//! kernels' numerics version. An entry that does not read back whole is
//! missing.

use std::path::Path;

use refscore_core::Error;
use sha2::{Digest, Sha256};

use super::{CrossFolder, CrossOptions};
use crate::store::{hex, Entries, NUMERICS_VERSION};

/// First bytes of every entry; the digit is the format version.
const MAGIC: &[u8; 8] = b"RSPAIR\x00\x01";

/// The persistent scores of one cross-encoder and setting.
pub(crate) struct PairStore {
    entries: Entries,
}

impl PairStore {
    /// Opens (creating it if needed) the part of `root` that belongs to
    /// `folder`'s model as `options` and `softmax` run it.
    pub(crate) fn open(
        root: &Path,
        folder: &CrossFolder,
        options: &CrossOptions,
        softmax: bool,
    ) -> Result<PairStore, Error> {
        let mut h = Sha256::new();
        h.update(folder.files.content_sha256()?.as_bytes());
        h.update(
            format!(
                "cross;max_seq_length={};activation={};softmax={softmax};numerics={NUMERICS_VERSION};precision={}",
                folder.files.max_seq_length,
                folder.activation.name(),
                options.precision.fingerprint_text()
            )
            .as_bytes(),
        );
        if folder.drops_token_types() {
            h.update(b";token_types=false");
        }
        // A span detector's entries are its detections, not a sequence
        // classifier's scores: a key of their own.
        if folder.head == super::CrossHead::Tokens {
            h.update(
                format!(
                    ";head=tokens;detector={};max_length={}",
                    super::spans::DETECTOR,
                    folder.max_length()
                )
                .as_bytes(),
            );
        }
        // A recipe other than the plain pair changes every score; the plain
        // pair names none, so earlier stores are still read.
        if !folder.recipe.is_plain() {
            h.update(format!(";recipe={}", folder.recipe.fingerprint()).as_bytes());
        }
        let key = format!("pairs-{}", &hex(&h.finalize())[..32]);
        Ok(PairStore {
            entries: Entries::open(root, &key, "pair")?,
        })
    }

    /// The stored scores of the pair `key`, if a whole entry is there.
    pub(crate) fn get(&self, key: &str) -> Option<Vec<f32>> {
        decode(&self.entries.read(key)?)
    }

    /// Stores the scores of the pair `key`.
    pub(crate) fn put(&mut self, key: &str, values: &[f32]) {
        self.entries.write(key, &encode(values));
    }
}

fn encode(values: &[f32]) -> Vec<u8> {
    let mut out = Vec::with_capacity(12 + 4 * values.len());
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&(values.len() as u32).to_le_bytes());
    out.extend(values.iter().flat_map(|v| v.to_le_bytes()));
    out
}

fn decode(bytes: &[u8]) -> Option<Vec<f32>> {
    let rest = bytes.strip_prefix(MAGIC)?;
    let n = u32::from_le_bytes(rest.get(..4)?.try_into().ok()?) as usize;
    let values = rest.get(4..)?;
    if values.len() != 4 * n {
        return None;
    }
    Some(
        values
            .chunks_exact(4)
            .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_round_trip_and_damaged_ones_are_missing() {
        let values = [0.25f32, -1.5, 0.125];
        assert_eq!(decode(&encode(&values)).unwrap(), values);
        let mut cut = encode(&values);
        cut.pop();
        assert!(decode(&cut).is_none());
        let mut wrong = encode(&values);
        wrong[0] = b'X';
        assert!(decode(&wrong).is_none());
    }
}
