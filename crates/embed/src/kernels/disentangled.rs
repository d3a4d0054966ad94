//! DeBERTa's disentangled attention terms as a score bias per pair, for
//! the fused attention kernel ([`super::ScoreBias::Pairs`]): for query `i`
//! and key `j` of one sequence, content-to-position (the query against the
//! table row of their offset) plus position-to-content (the key against the
//! same row of the other table), as transformers adds them before adding
//! both to the scores. Each sequence reads only the table rows its own
//! offsets reach, so no padded batch, `[b, heads, t, 2·span]` product or
//! gather is built.

use super::products::x_times_wt;

/// One layer's relative tables in host memory, and the table row of every
/// offset: what [`Disentangled::fill`] needs besides a sequence's queries
/// and keys.
pub(crate) struct Disentangled {
    pub heads: usize,
    pub head_dim: usize,
    /// Rows of each table per head (2·span).
    pub rows: usize,
    /// Content-to-position: the relative table through the position-key
    /// projection, `heads × rows × head_dim`; `None` where the layer has no
    /// c2p term.
    pub pos_key: Option<Vec<f32>>,
    /// Position-to-content: through the position-query projection, scaled
    /// as the queries are; `None` where the layer has no p2c term.
    pub pos_query: Option<Vec<f32>>,
    /// The table row of the offset `i − j`, at `i − j + max − 1`, for
    /// offsets from `−(max − 1)` to `max − 1` (log buckets and clamping
    /// already applied).
    pub row_of_offset: Vec<u32>,
    /// The longest sequence the offsets cover.
    pub max: usize,
}

/// Working memory of [`Disentangled::fill`], reused across sequences.
#[derive(Default)]
pub(crate) struct DisentangledScratch {
    c2p: Vec<f32>,
    p2c: Vec<f32>,
}

impl Disentangled {
    /// `out` ← the bias of every head, query and key of one sequence of
    /// `len` tokens (`heads × len × len`), from its `qkv` rows (`len × 3h`,
    /// `[q | k | v]`, biases added, queries scaled).
    pub(crate) fn fill(
        &self,
        qkv: &[f32],
        len: usize,
        out: &mut Vec<f32>,
        scratch: &mut DisentangledScratch,
    ) {
        let (heads, d) = (self.heads, self.head_dim);
        let h = heads * d;
        assert!(
            (1..=self.max).contains(&len) && qkv.len() >= len * 3 * h,
            "disentangled bias: {len} tokens (at most {}), {} values",
            self.max,
            qkv.len()
        );
        let offsets = &self.row_of_offset[self.max - len..self.max + len - 1];
        let lo = *offsets.iter().min().expect("len ≥ 1") as usize;
        let width = *offsets.iter().max().expect("len ≥ 1") as usize - lo + 1;
        // The column of the product that query i and key j read.
        let column = |i: usize, j: usize| offsets[i + len - 1 - j] as usize - lo;
        out.clear();
        out.resize(heads * len * len, 0.0);
        for head in 0..heads {
            // c2p[i][m] = q_i · pos_key[lo + m]; p2c[j][m] = k_j · pos_query[lo + m].
            let term = |t: Option<&[f32]>, part: usize, dst: &mut Vec<f32>| {
                t.is_some_and(|t| {
                    dst.resize(len * width, 0.0);
                    let x = &qkv[part * h + head * d..];
                    x_times_wt(x, 3 * h, len, d, t, d, width, dst, false);
                    true
                })
            };
            let has_c2p = term(self.rows_from(&self.pos_key, head, lo), 0, &mut scratch.c2p);
            let has_p2c = term(
                self.rows_from(&self.pos_query, head, lo),
                1,
                &mut scratch.p2c,
            );
            let c2p = has_c2p.then_some(&scratch.c2p[..]);
            let p2c = has_p2c.then_some(&scratch.p2c[..]);
            for (i, row) in out[head * len * len..][..len * len]
                .chunks_exact_mut(len)
                .enumerate()
            {
                match (c2p, p2c) {
                    (Some(c), Some(p)) => {
                        for (j, o) in row.iter_mut().enumerate() {
                            let m = column(i, j);
                            *o = c[i * width + m] + p[j * width + m];
                        }
                    }
                    (Some(c), None) => {
                        for (j, o) in row.iter_mut().enumerate() {
                            *o = c[i * width + column(i, j)];
                        }
                    }
                    (None, Some(p)) => {
                        for (j, o) in row.iter_mut().enumerate() {
                            *o = p[j * width + column(i, j)];
                        }
                    }
                    (None, None) => {}
                }
            }
        }
    }

    /// Head `head`'s part of `table`, from row `lo` on.
    fn rows_from<'t>(
        &self,
        table: &'t Option<Vec<f32>>,
        head: usize,
        lo: usize,
    ) -> Option<&'t [f32]> {
        table
            .as_deref()
            .map(|t| &t[(head * self.rows + lo) * self.head_dim..])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The bias against f64 sums straight from its definition, with both
    /// terms, one of them, and offsets whose rows are clamped and shared
    /// (a table narrower than the sequence).
    #[test]
    fn the_bias_is_both_terms_at_each_offsets_row() {
        let (heads, d, max) = (2, 8, 12);
        let h = heads * d;
        let span = 4usize;
        let rows = 2 * span;
        let value = |k: usize, scale: f32| ((k * 37 % 101) as f32 / 101.0 - 0.5) * scale;
        let pos_key: Vec<f32> = (0..heads * rows * d).map(|k| value(k, 1.0)).collect();
        let pos_query: Vec<f32> = (0..heads * rows * d).map(|k| value(k + 7, 0.5)).collect();
        let row_of_offset: Vec<u32> = (0..2 * max - 1)
            .map(|k| (k as i64 - (max as i64 - 1) + span as i64).clamp(0, rows as i64 - 1) as u32)
            .collect();
        for (c2p, p2c) in [(true, true), (true, false), (false, true)] {
            let bias = Disentangled {
                heads,
                head_dim: d,
                rows,
                pos_key: c2p.then(|| pos_key.clone()),
                pos_query: p2c.then(|| pos_query.clone()),
                row_of_offset: row_of_offset.clone(),
                max,
            };
            for len in [1, 3, 7, 12] {
                let qkv: Vec<f32> = (0..len * 3 * h).map(|k| value(k + 3, 2.0)).collect();
                let (mut out, mut scratch) = (Vec::new(), DisentangledScratch::default());
                bias.fill(&qkv, len, &mut out, &mut scratch);
                for head in 0..heads {
                    for i in 0..len {
                        for j in 0..len {
                            let r = row_of_offset[i + max - 1 - j] as usize;
                            let dot = |x: usize, t: &[f32]| -> f64 {
                                (0..d)
                                    .map(|c| {
                                        qkv[x + head * d + c] as f64
                                            * t[(head * rows + r) * d + c] as f64
                                    })
                                    .sum()
                            };
                            let mut want = 0.0;
                            if c2p {
                                want += dot(i * 3 * h, &pos_key);
                            }
                            if p2c {
                                want += dot(j * 3 * h + h, &pos_query);
                            }
                            let got = out[(head * len + i) * len + j] as f64;
                            assert!(
                                (got - want).abs() < 1e-5,
                                "c2p {c2p} p2c {p2c} len {len} head {head} ({i}, {j}): {got} vs {want}"
                            );
                        }
                    }
                }
            }
        }
    }
}
