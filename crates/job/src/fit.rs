//! Artefacts computed once per job from the whole input before scoring, so
//! every shard and every resumed session uses the same ones.

use std::collections::BinaryHeap;

use refscore_batch::Error;
use refscore_read::Dataset;
use sha2::{Digest, Sha256};

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
    // (hash, row identity hash, text): max-heaps keeping the k smallest.
    let mut refs: BinaryHeap<([u8; 16], [u8; 16], String)> = BinaryHeap::new();
    let mut outs: BinaryHeap<([u8; 16], [u8; 16], String)> = BinaryHeap::new();
    let key = |seed: &str, reference: &str, output: &str| -> [u8; 16] {
        let mut h = Sha256::new();
        h.update(seed.as_bytes());
        h.update((reference.len() as u64).to_le_bytes());
        h.update(reference.as_bytes());
        h.update(output.as_bytes());
        h.finalize()[..16].try_into().expect("16 bytes")
    };
    let keep = |heap: &mut BinaryHeap<([u8; 16], [u8; 16], String)>,
                rank: [u8; 16],
                row: [u8; 16],
                text: &str| {
        if heap.len() < k {
            heap.push((rank, row, text.to_string()));
        } else if heap.peek().is_some_and(|top| rank < top.0) {
            heap.pop();
            heap.push((rank, row, text.to_string()));
        }
    };
    for batch in dataset.batches() {
        let batch = batch?;
        for i in 0..batch.len() {
            if batch.unscorable(i).is_some() {
                continue;
            }
            let reference = batch.reference.get(i).unwrap_or("");
            let output = batch.output.get(i).unwrap_or("");
            let row = key("row", reference, output);
            keep(
                &mut refs,
                key("reference/v1", reference, output),
                row,
                reference,
            );
            keep(&mut outs, key("output/v1", reference, output), row, output);
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
