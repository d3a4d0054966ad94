//! The metric math on token vectors: pooling, L2 normalisation, cosine and
//! BERTScore's greedy matching (docs/metrics.md#cosine,
//! docs/metrics.md#bertscore).

use crate::model::Pooling;
use crate::sentence_head::SentenceHead;

/// One text after the forward pass: its word-piece ids, its pooled sentence
/// vector (unit length) and its token vectors (each unit length).
#[derive(Debug, Clone)]
pub struct Embedded {
    /// Word-piece ids including [CLS]/[SEP].
    pub ids: Vec<u32>,
    /// The pooled, L2-normalised sentence vector.
    pub pooled: Vec<f32>,
    /// `ids.len() × hidden` token vectors, each L2-normalised.
    pub tokens: Vec<f32>,
}

impl Embedded {
    /// Builds the embedding of one text from its raw token states: the
    /// last layer's `states`, pooled, and `scored`, the states BERTScore
    /// matches when they are others (another layer, or BERTScore's own
    /// encoding of the text, whose ids `ids` then are). `prompt`: where a
    /// prompt lies in `states`; `head`: the modules after the pooling, if
    /// the folder has any.
    pub(crate) fn from_states(
        ids: Vec<u32>,
        states: Vec<f32>,
        scored: Option<Vec<f32>>,
        hidden: usize,
        pooling: Pooling,
        prompt: PromptSpan,
        head: Option<&SentenceHead>,
    ) -> Embedded {
        let len = states.len() / hidden.max(1);
        let mut pooled = vec![0f32; hidden];
        // As sentence-transformers masks them: the first token and the
        // prompt's, when the pooling leaves the prompt out.
        let first = if prompt.pooled {
            0
        } else {
            prompt.tokens.min(len)
        };
        let rows = || states.chunks_exact(hidden).enumerate().skip(first);
        let weighted = |weight: &dyn Fn(usize) -> f64| {
            let mut acc = vec![0f64; hidden];
            let mut total = 0f64;
            for (k, row) in rows() {
                let w = weight(k);
                total += w;
                acc.iter_mut()
                    .zip(row)
                    .for_each(|(a, v)| *a += w * *v as f64);
            }
            acc.into_iter()
                .map(|a| (a / total.max(1e-9)) as f32)
                .collect::<Vec<f32>>()
        };
        match pooling {
            // A text with no token at all (a tokenizer that adds no special
            // tokens, given an empty text) has no direction: the zero
            // vector, whose cosine with anything is 0.
            _ if len == 0 => {}
            Pooling::Cls => pooled.copy_from_slice(&states[..hidden]),
            Pooling::Mean => pooled = weighted(&|_| 1.0),
            Pooling::WeightedMean => pooled = weighted(&|k| (k + 1) as f64),
            Pooling::Max => {
                pooled.fill(f32::NEG_INFINITY);
                for (_, row) in rows() {
                    pooled.iter_mut().zip(row).for_each(|(p, v)| *p = p.max(*v));
                }
            }
            Pooling::LastToken => {
                if len > 0 {
                    pooled.copy_from_slice(&states[(len - 1) * hidden..len * hidden]);
                }
            }
        }
        if let Some(head) = head {
            pooled = head.apply(pooled);
        }
        normalize(&mut pooled);
        let mut tokens = scored.unwrap_or(states);
        for row in tokens.chunks_exact_mut(hidden) {
            normalize(row);
        }
        Embedded {
            ids,
            pooled,
            tokens,
        }
    }

    /// Memory held, for the cache's byte budget.
    pub fn bytes(&self) -> usize {
        4 * (self.ids.len() + self.pooled.len() + self.tokens.len()) + 96
    }
}

/// Where a prompt lies in a text's tokens.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PromptSpan {
    /// sentence-transformers' `prompt_length`: the first token plus the
    /// prompt's own (0 without a prompt).
    pub tokens: usize,
    /// Whether pooling covers them (`include_prompt`).
    pub pooled: bool,
}

/// Scales `v` to unit length, as torch's `F.normalize`.
pub(crate) fn normalize(v: &mut [f32]) {
    let norm = v
        .iter()
        .map(|x| (*x as f64) * (*x as f64))
        .sum::<f64>()
        .sqrt();
    // torch's F.normalize divides by max(norm, 1e-12).
    let scale = (1.0 / norm.max(1e-12)) as f32;
    v.iter_mut().for_each(|x| *x *= scale);
}

/// Dot product, written so the compiler vectorises it.
#[inline]
pub(crate) fn dot(a: &[f32], b: &[f32]) -> f32 {
    let mut acc = [0f32; 16];
    let (ca, cb) = (a.chunks_exact(16), b.chunks_exact(16));
    let (ra, rb) = (ca.remainder(), cb.remainder());
    for (x, y) in ca.zip(cb) {
        for k in 0..16 {
            acc[k] += x[k] * y[k];
        }
    }
    let mut sum: f32 = acc.iter().sum();
    for (x, y) in ra.iter().zip(rb) {
        sum += x * y;
    }
    sum
}

/// `max(0, cos)` of two unit vectors, within docs/metrics.md's range [0, 1]: the
/// f32 dot product of a unit vector with itself can round to 1.0000001, so
/// the upper end is clamped as well as the lower.
pub fn cosine(a: &Embedded, b: &Embedded) -> f32 {
    dot(&a.pooled, &b.pooled).clamp(0.0, 1.0)
}

/// The similarity matrix of BERTScore's greedy matching: `candidate ×
/// referenceᵀ` of two row-major matrices of `width`-wide unit rows,
/// `candidate rows × reference rows`, row-major. gemm's register-tiled
/// kernels (chosen for the CPU at run time) run it several times faster than
/// one dot product per pair once texts have tens of tokens; one thread, as
/// rows are scored in parallel.
fn similarities(candidate: &[f32], reference: &[f32], width: usize) -> Vec<f32> {
    let (m, n) = (candidate.len() / width, reference.len() / width);
    assert!(m * width == candidate.len() && n * width == reference.len());
    let mut out = vec![0f32; m * n];
    if m == 0 || n == 0 {
        return out;
    }
    // SAFETY: `out` holds m × n values at row stride n; `candidate` holds m
    // rows of `width` values, `reference` n rows (read as the width × n
    // matrix referenceᵀ: element (l, j) at j·width + l). All three live
    // through the call.
    unsafe {
        gemm::gemm(
            m,
            n,
            width,
            out.as_mut_ptr(),
            1,
            n as isize,
            false,
            candidate.as_ptr(),
            1,
            width as isize,
            reference.as_ptr(),
            width as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            gemm::Parallelism::None,
        );
    }
    out
}

/// The range of raw BERTScore P, R and F: weighted means of cosine
/// similarities, so [−1, 1] (docs/metrics.md clamps nothing here; rounding in the
/// f32 dot products of unit vectors is what could leave it). Rescaling by a
/// baseline applies to the clamped raw value and may go below 0.
const BERTSCORE_RANGE: (f64, f64) = (-1.0, 1.0);

/// BERTScore precision, recall and F1 of `candidate` (the output's unit
/// token vectors, row-major, `width` wide) against `reference`'s, with
/// per-token weights (0 for [CLS]/[SEP]). A text with no weighted token
/// gives 0 for all three, as does an undefined ratio.
pub fn bertscore(
    candidate: &[f32],
    reference: &[f32],
    width: usize,
    wc: &[f32],
    wr: &[f32],
) -> [f32; 3] {
    if candidate.is_empty() || reference.is_empty() {
        return [0.0; 3];
    }
    let (best_c, best_r) = best_matches(candidate, reference, width);
    bertscore_of_best(&best_c, &best_r, wc, wr)
}

/// Greedy matching: each candidate token's best cosine with a reference
/// token, and each reference token's best with a candidate token (rows of
/// `width` values, row-major).
pub(crate) fn best_matches(
    candidate: &[f32],
    reference: &[f32],
    width: usize,
) -> (Vec<f32>, Vec<f32>) {
    let (lc, lr) = (candidate.len() / width, reference.len() / width);
    let mut best_c = vec![f32::NEG_INFINITY; lc];
    let mut best_r = vec![f32::NEG_INFINITY; lr];
    if lc == 0 || lr == 0 {
        return (best_c, best_r);
    }
    let sims = similarities(candidate, reference, width);
    for (j, row) in sims.chunks_exact(lr).enumerate() {
        for (i, &s) in row.iter().enumerate() {
            if s > best_c[j] {
                best_c[j] = s;
            }
            if s > best_r[i] {
                best_r[i] = s;
            }
        }
    }
    (best_c, best_r)
}

/// BERTScore P, R and F from each token's best match and weight.
pub(crate) fn bertscore_of_best(
    best_c: &[f32],
    best_r: &[f32],
    wc: &[f32],
    wr: &[f32],
) -> [f32; 3] {
    let (lc, lr) = (best_c.len(), best_r.len());
    let (sum_wc, sum_wr) = (
        wc.iter().map(|&w| w as f64).sum::<f64>(),
        wr.iter().map(|&w| w as f64).sum::<f64>(),
    );
    // No token, or no weighted token (bert_score would divide 0 by 0). A
    // text of nothing but bert_score's cls and sep tokens is found by the
    // caller, which knows them ([`crate::tokens::bertscore_specials`]).
    if lc == 0 || lr == 0 || sum_wc <= 0.0 || sum_wr <= 0.0 {
        return [0.0; 3];
    }
    let weighted = |best: &[f32], w: &[f32], total: f64| -> f64 {
        if total <= 0.0 {
            return 0.0;
        }
        best.iter()
            .zip(w)
            .map(|(b, w)| *b as f64 * *w as f64)
            .sum::<f64>()
            / total
    };
    let (lo, hi) = BERTSCORE_RANGE;
    let p = weighted(best_c, wc, sum_wc).clamp(lo, hi);
    let r = weighted(best_r, wr, sum_wr).clamp(lo, hi);
    let f = if p + r == 0.0 {
        0.0
    } else {
        2.0 * p * r / (p + r)
    };
    let f = if f.is_finite() { f.clamp(lo, hi) } else { 0.0 };
    [p as f32, r as f32, f as f32]
}

#[cfg(test)]
mod pooling_tests {
    use super::*;

    /// Three tokens of width 2, unnormalised.
    fn pooled(pooling: Pooling, prompt: PromptSpan) -> Vec<f32> {
        let states = vec![1.0, 0.0, 0.0, 2.0, 3.0, 1.0];
        Embedded::from_states(vec![7, 8, 9], states, None, 2, pooling, prompt, None).pooled
    }

    fn unit(v: [f32; 2]) -> Vec<f32> {
        let n = (v[0] * v[0] + v[1] * v[1]).sqrt();
        vec![v[0] / n, v[1] / n]
    }

    fn near(a: &[f32], b: &[f32]) -> bool {
        a.iter().zip(b).all(|(x, y)| (x - y).abs() < 1e-6)
    }

    #[test]
    fn every_pooling_mode_as_sentence_transformers_computes_it() {
        let none = PromptSpan::default();
        assert!(near(&pooled(Pooling::Mean, none), &unit([4.0 / 3.0, 1.0])));
        assert!(near(&pooled(Pooling::Cls, none), &unit([1.0, 0.0])));
        assert!(near(&pooled(Pooling::Max, none), &unit([3.0, 2.0])));
        assert!(near(&pooled(Pooling::LastToken, none), &unit([3.0, 1.0])));
        // Weights 1, 2, 3 by position.
        let w = [(1.0 + 9.0) / 6.0, (4.0 + 3.0) / 6.0];
        assert!(near(&pooled(Pooling::WeightedMean, none), &unit(w)));
        // include_prompt false: the first token and a one-token prompt are
        // left out of the mean.
        let prompt = PromptSpan {
            tokens: 2,
            pooled: false,
        };
        assert!(near(&pooled(Pooling::Mean, prompt), &unit([3.0, 1.0])));
        let kept = PromptSpan {
            tokens: 2,
            pooled: true,
        };
        assert!(near(&pooled(Pooling::Mean, kept), &unit([4.0 / 3.0, 1.0])));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// BERTScore of two embedded texts, their token rows borrowed.
    fn bs(c: &Embedded, r: &Embedded, wc: &[f32], wr: &[f32], h: usize) -> [f32; 3] {
        bertscore(&c.tokens, &r.tokens, h, wc, wr)
    }

    fn emb(ids: Vec<u32>, states: Vec<f32>, h: usize) -> Embedded {
        Embedded::from_states(
            ids,
            states,
            None,
            h,
            Pooling::Mean,
            PromptSpan::default(),
            None,
        )
    }

    #[test]
    fn identical_texts_score_one() {
        let h = 3;
        let e = emb(
            vec![101, 7, 8, 102],
            vec![1., 0., 0., 0.5, 0.5, 0., 0., 1., 1., 0.2, 0.1, 0.],
            h,
        );
        let w = [0.0, 1.0, 1.0, 0.0];
        let [p, r, f] = bs(&e, &e, &w, &w, h);
        assert!((p - 1.0).abs() < 1e-6 && (r - 1.0).abs() < 1e-6 && (f - 1.0).abs() < 1e-6);
        assert!((cosine(&e, &e) - 1.0).abs() < 1e-6);
    }

    #[test]
    fn greedy_matching_by_hand() {
        let h = 2;
        // candidate tokens: CLS, x=(1,0), SEP ; reference: CLS, y=(0.6,0.8), z=(0,1), SEP
        let c = emb(vec![101, 5, 102], vec![0., 1., 1., 0., 0., 1.], h);
        let r = emb(
            vec![101, 6, 7, 102],
            vec![0., 1., 0.6, 0.8, 0., 1., 0., 1.],
            h,
        );
        let [p, rr, f] = bs(&c, &r, &[0., 1., 0.], &[0., 1., 1., 0.], h);
        // P: x's best match is y (0.6). R: y's best is x (0.6) or CLS/SEP of c (0.8) -> 0.8; z's best is CLS (1).
        assert!((p - 0.6).abs() < 1e-6, "{p}");
        assert!((rr - 0.9).abs() < 1e-6, "{rr}");
        assert!((f - 2.0 * 0.6 * 0.9 / 1.5).abs() < 1e-6);
    }

    /// Deterministic pseudo-random values in [-1, 1].
    fn values(n: usize, seed: u64) -> Vec<f32> {
        let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..n)
            .map(|_| {
                s ^= s << 13;
                s ^= s >> 7;
                s ^= s << 17;
                (s >> 40) as f32 / (1u64 << 23) as f32 - 1.0
            })
            .collect()
    }

    #[test]
    fn identical_texts_never_score_above_one() {
        // Unit vectors of MiniLM's width: a text scored against itself is
        // 1 in exact arithmetic, but the f32 dot products round either way.
        let h = 384;
        let mut above = 0;
        for seed in 0..300u64 {
            let n = 3 + (seed as usize % 5);
            let e = emb((0..n as u32).collect(), values(n * h, seed + 1), h);
            if dot(&e.pooled, &e.pooled) > 1.0 {
                above += 1;
            }
            let w: Vec<f32> = (0..n)
                .map(|k| if k == 0 || k == n - 1 { 0.0 } else { 1.0 })
                .collect();
            let cos = cosine(&e, &e);
            assert!(
                (0.0..=1.0).contains(&cos) && cos > 1.0 - 1e-6,
                "seed {seed}: cosine {cos}"
            );
            for v in bs(&e, &e, &w, &w, h) {
                assert!(v <= 1.0 && v > 1.0 - 1e-6, "seed {seed}: bertscore {v}");
            }
        }
        assert!(
            above > 0,
            "no raw dot product above 1: the test would prove nothing"
        );
    }

    #[test]
    fn opposite_vectors_keep_negative_bertscore_and_zero_cosine() {
        let h = 2;
        let c = emb(vec![101, 5, 102], vec![0., 1., 1., 0., 0., 1.], h);
        let r = emb(vec![101, 6, 102], vec![0., 1., -1., 0., 0., 1.], h);
        let w = [0., 1., 0.];
        let [p, rr, f] = bs(&c, &r, &w, &w, h);
        // The only weighted token of each side best matches the other's
        // [CLS]/[SEP] (similarity 0): nothing clamps these at 0 from below.
        assert_eq!([p, rr, f], [0.0, 0.0, 0.0]);
        let c = emb(vec![101, 5, 102], vec![1., 0., 1., 0., 1., 0.], h);
        let r = emb(vec![101, 6, 102], vec![-1., 0., -1., 0., -1., 0.], h);
        let [p, _, _] = bs(&c, &r, &w, &w, h);
        assert!((p + 1.0).abs() < 1e-6, "raw BERTScore may be negative: {p}");
        assert_eq!(cosine(&c, &r), 0.0, "cosine clamps negatives to 0");
    }

    #[test]
    fn a_text_without_tokens_pools_to_zero_in_every_mode() {
        for pooling in [
            Pooling::Cls,
            Pooling::Mean,
            Pooling::Max,
            Pooling::WeightedMean,
            Pooling::LastToken,
        ] {
            let e = Embedded::from_states(
                Vec::new(),
                Vec::new(),
                None,
                2,
                pooling,
                PromptSpan::default(),
                None,
            );
            assert_eq!(e.pooled, vec![0.0, 0.0], "{pooling:?}");
        }
    }

    #[test]
    fn empty_text_scores_zero() {
        let h = 2;
        let none = emb(Vec::new(), Vec::new(), h);
        let c = emb(vec![101, 5, 102], vec![1., 0., 1., 0., 0., 1.], h);
        assert_eq!(bs(&c, &none, &[0., 1., 0.], &[], h), [0.0; 3]);
        assert_eq!(bs(&none, &c, &[], &[0., 1., 0.], h), [0.0; 3]);
        // Tokens of zero total weight (specials, or idf 0): all three are
        // 0, never NaN.
        let specials = emb(vec![101, 102], vec![1., 0., 0., 1.], h);
        assert_eq!(bs(&c, &specials, &[0., 1., 0.], &[0., 0.], h), [0.0; 3]);
        assert_eq!(bs(&specials, &c, &[0., 0.], &[0., 1., 0.], h), [0.0; 3]);
    }
}
