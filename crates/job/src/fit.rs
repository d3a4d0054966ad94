//! Artefacts computed once per job from the whole input before scoring, so
//! every shard and every resumed session uses the same ones.

use std::collections::BinaryHeap;

use refscore_core::{Error, FitInput, RowBatch, TextColumn};
use refscore_read::{Dataset, Role};
use sha2::{Digest, Sha256};

/// A job's input as the stages fit to it ([`refscore_core::Stage::fit`]):
/// the files, read again only for the passes a stage asks for.
pub struct DatasetFit<'a> {
    /// The input as the user named it.
    pub name: &'a str,
    /// The input's files.
    pub dataset: &'a Dataset,
}

impl FitInput for DatasetFit<'_> {
    fn name(&self) -> &str {
        self.name
    }

    fn references(
        &self,
    ) -> Result<Box<dyn Iterator<Item = Result<TextColumn, Error>> + '_>, Error> {
        let column = self.dataset.text_column(Role::Reference)?;
        Ok(Box::new(column.expect("reference column is always mapped")))
    }

    fn mismatched_pairs(&self, k: usize) -> Result<Vec<(String, String)>, Error> {
        mismatched_pairs(self.dataset, k)
    }
}

/// In-memory batches as the stages fit to them (Python's `Scorer`: each
/// call's data is its own input).
pub struct RowsFit<'a> {
    /// The data as messages name it.
    pub name: &'a str,
    /// All of the call's rows.
    pub rows: &'a [RowBatch],
}

impl FitInput for RowsFit<'_> {
    fn name(&self) -> &str {
        self.name
    }

    fn references(
        &self,
    ) -> Result<Box<dyn Iterator<Item = Result<TextColumn, Error>> + '_>, Error> {
        Ok(Box::new(
            self.rows.iter().map(|b| Ok(b.reference().clone())),
        ))
    }

    fn mismatched_pairs(&self, k: usize) -> Result<Vec<(String, String)>, Error> {
        mismatched_pairs_of(self.rows.iter().cloned().map(Ok), k)
    }
}

/// Seeded random pairs of one row's reference with another row's output,
/// for the BERTScore rescaling baseline (`--rescale-baseline auto`).
///
/// Up to `k` references and `k` outputs are drawn without replacement from
/// the scorable rows of the whole input, each row ranked by a keyed hash of
/// its texts (a bottom-k sample, which is a uniform random sample), and the
/// two samples are paired in rank order, skipping any pair that would come
/// from one row. The pairs depend only on the rows' contents, never on their
/// order, so a shuffled input gives the same baseline.
pub fn mismatched_pairs(dataset: &Dataset, k: usize) -> Result<Vec<(String, String)>, Error> {
    mismatched_pairs_of(dataset.batches(), k)
}

/// [`mismatched_pairs`] over any batches of the input (in-memory data).
pub fn mismatched_pairs_of(
    batches: impl IntoIterator<Item = Result<RowBatch, Error>>,
    k: usize,
) -> Result<Vec<(String, String)>, Error> {
    // (rank, row identity, text): max-heaps keeping the k smallest ranks.
    type Sample = BinaryHeap<([u8; 16], [u8; 32], String)>;
    let (mut refs, mut outs): (Sample, Sample) = (BinaryHeap::new(), BinaryHeap::new());
    let keep = |heap: &mut Sample, rank: [u8; 16], row: [u8; 32], text: &str| {
        if heap.len() < k {
            heap.push((rank, row, text.to_string()));
        } else if heap.peek().is_some_and(|top| rank < top.0) {
            heap.pop();
            heap.push((rank, row, text.to_string()));
        }
    };
    for batch in batches {
        let batch = batch?;
        for i in 0..batch.len() {
            if batch.unscorable(i).is_some() {
                continue;
            }
            let reference = batch.reference().get(i).unwrap_or("");
            let output = batch.output().get(i).unwrap_or("");
            // One keyed digest of the row's texts: it identifies the row, its
            // first half ranks the reference and its second half the output
            // (independent halves of a cryptographic hash).
            let mut h = Sha256::new();
            h.update(b"refscore rescale sample v1");
            h.update((reference.len() as u64).to_le_bytes());
            h.update(reference.as_bytes());
            h.update(output.as_bytes());
            let row: [u8; 32] = h.finalize().into();
            let (a, b) = row.split_at(16);
            keep(&mut refs, a.try_into().expect("16 bytes"), row, reference);
            keep(&mut outs, b.try_into().expect("16 bytes"), row, output);
        }
    }
    let refs = refs.into_sorted_vec();
    let mut outs = outs.into_sorted_vec();
    let mut pairs = Vec::with_capacity(refs.len());
    for (_, row, reference) in refs {
        // The first output (in rank order) not from the same row.
        if let Some(j) = outs.iter().position(|(_, r, _)| *r != row) {
            let (_, _, output) = outs.remove(j);
            pairs.push((reference, output));
        }
    }
    Ok(pairs)
}
