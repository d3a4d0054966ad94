//! T5's relative-position buckets, which MPNet took over: the offset
//! between key and query falls into one of `buckets` buckets (half for each
//! direction; exact below a quarter of them, logarithmic up to
//! `max_distance` tokens, the last bucket beyond), and each bucket has a
//! learned value per head, added to the attention scores of every layer.

use super::transformer::PositionBias;

/// The bucket of a key `offset` tokens after the query (negative: before),
/// in both directions, as transformers' `_relative_position_bucket` (T5)
/// and `relative_position_bucket` (MPNet) compute it: the logarithm in f32,
/// its divisor in f64 then rounded to f32, as torch divides an f32 tensor
/// by a Python float, so that the logarithmic boundaries fall on the same
/// offsets.
pub(super) fn bucket(offset: i64, buckets: usize, max_distance: usize) -> usize {
    let half = (buckets / 2) as i64;
    let side = if offset > 0 { half } else { 0 };
    let n = offset.abs();
    let exact = half / 2;
    if n < exact {
        return (side + n) as usize;
    }
    let scale = ((max_distance as f64) / (exact as f64)).ln() as f32;
    let log = ((n as f32) / (exact as f32)).ln() / scale * ((half - exact) as f32);
    (side + (exact + log as i64).min(half - 1)) as usize
}

/// A table of learned bucket values and how offsets map to buckets: the
/// score bias of MPNet and of T5's encoder.
pub(super) struct RelativePositions {
    /// `buckets × heads`, as stored (`relative_attention_bias.weight`).
    pub values: Vec<f32>,
    pub buckets: usize,
    pub heads: usize,
    pub max_distance: usize,
}

impl RelativePositions {
    /// Checks the bucket count (at least 4: two per direction, one of them
    /// exact) and the table's size.
    pub(super) fn new(
        values: Vec<f32>,
        buckets: usize,
        heads: usize,
        max_distance: usize,
    ) -> Result<RelativePositions, String> {
        if buckets < 4 {
            return Err(format!(
                "config.json: relative_attention_num_buckets {buckets} is below 4"
            ));
        }
        if values.len() != buckets * heads {
            return Err(format!(
                "relative_attention_bias: {} values, expected {buckets} buckets × {heads} heads",
                values.len()
            ));
        }
        Ok(RelativePositions {
            values,
            buckets,
            heads,
            max_distance,
        })
    }

    /// The value of `offset` (key − query) in `head`.
    pub(super) fn value(&self, offset: i64, head: usize) -> f32 {
        self.values[bucket(offset, self.buckets, self.max_distance) * self.heads + head]
    }
}

impl PositionBias for RelativePositions {
    fn table(&self, span: usize) -> Vec<f32> {
        let width = 2 * span - 1;
        let mut out = vec![0f32; self.heads * width];
        for k in 0..width {
            let offset = k as i64 - (span as i64 - 1);
            let b = bucket(offset, self.buckets, self.max_distance);
            let row = &self.values[b * self.heads..][..self.heads];
            for (head, &v) in row.iter().enumerate() {
                out[head * width + k] = v;
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs of equal buckets over offsets `from..=to`, walking upward:
    /// (first offset, bucket).
    fn runs(from: i64, to: i64, buckets: usize, max_distance: usize) -> Vec<(i64, usize)> {
        let mut runs: Vec<(i64, usize)> = Vec::new();
        for o in from..=to {
            let b = bucket(o, buckets, max_distance);
            if runs.last().is_none_or(|r| r.1 != b) {
                runs.push((o, b));
            }
        }
        runs
    }

    /// The buckets of offsets −200..=200 for 32 buckets up to 128 tokens
    /// (MPNet's and t5-base's settings), as the reference
    /// (transformers' `MPNetEncoder.relative_position_bucket` and
    /// `T5Attention._relative_position_bucket`, torch 2.15 on CPU) gives
    /// them.
    #[test]
    fn buckets_match_the_reference() {
        let want: Vec<(i64, usize)> = vec![
            (-200, 15),
            (-90, 14),
            (-63, 13),
            (-45, 12),
            (-31, 11),
            (-22, 10),
            (-15, 9),
            (-11, 8),
            (-7, 7),
            (-6, 6),
            (-5, 5),
            (-4, 4),
            (-3, 3),
            (-2, 2),
            (-1, 1),
            (0, 0),
            (1, 17),
            (2, 18),
            (3, 19),
            (4, 20),
            (5, 21),
            (6, 22),
            (7, 23),
            (8, 24),
            (12, 25),
            (16, 26),
            (23, 27),
            (32, 28),
            (46, 29),
            (64, 30),
            (91, 31),
        ];
        assert_eq!(runs(-200, 200, 32, 128), want);
    }

    /// 8 buckets up to 20 tokens (tiny-t5-relu's settings), from
    /// transformers' `T5Attention._relative_position_bucket` (torch 2.15).
    #[test]
    fn small_bucket_counts_match_the_reference() {
        let want: Vec<(i64, usize)> =
            vec![(-30, 3), (-6, 2), (-1, 1), (0, 0), (1, 5), (2, 6), (7, 7)];
        assert_eq!(runs(-30, 30, 8, 20), want);
    }
}
