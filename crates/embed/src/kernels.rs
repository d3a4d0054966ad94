//! CPU kernels for the parts of a BERT layer that are not matrix products:
//! attention over one sequence, bias + GELU, and bias + residual + layer
//! norm. Candle runs each of these as several passes over memory (a new
//! tensor per op, scalar SSE2 loops); here each is one pass, written as
//! plain loops that LLVM vectorises, and compiled three times — AVX-512,
//! AVX2+FMA and baseline — with the widest the CPU has picked at run time,
//! so a release build still runs on any x86-64.

/// Defines `pub(crate) fn $name(...)` that runs `$body` compiled for the
/// widest SIMD level the running CPU supports. Helpers called from the body
/// must be `#[inline(always)]` so they are compiled at that level too.
macro_rules! simd_fn {
    ($(#[$meta:meta])* fn $name:ident($($arg:ident : $ty:ty),* $(,)?) $body:block) => {
        $(#[$meta])*
        pub(crate) fn $name($($arg: $ty),*) {
            #[inline(always)]
            fn generic($($arg: $ty),*) $body
            #[cfg(target_arch = "x86_64")]
            {
                #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
                unsafe fn avx512($($arg: $ty),*) { generic($($arg),*) }
                #[target_feature(enable = "avx2,fma")]
                unsafe fn avx2($($arg: $ty),*) { generic($($arg),*) }
                if std::is_x86_feature_detected!("avx512f")
                    && std::is_x86_feature_detected!("avx512vl")
                {
                    // SAFETY: the CPU has the features the function enables.
                    return unsafe { avx512($($arg),*) };
                }
                if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
                    // SAFETY: as above.
                    return unsafe { avx2($($arg),*) };
                }
            }
            generic($($arg),*)
        }
    };
}

/// Lanes in the accumulators of reductions: one AVX-512 register of f32.
const LANES: usize = 16;

/// Σ x, with `LANES` independent partial sums so the loop vectorises.
#[inline(always)]
fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for i in 0..LANES {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Σ (x − m)², vectorised like [`sum`].
#[inline(always)]
fn sum_sq_dev(x: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|v| (v - m) * (v - m)).sum();
    for c in chunks {
        for i in 0..LANES {
            let d = c[i] - m;
            acc[i] += d * d;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// max x (−∞ for an empty slice), vectorised like [`sum`].
#[inline(always)]
fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    for c in chunks {
        for i in 0..LANES {
            acc[i] = acc[i].max(c[i]);
        }
    }
    acc.iter().fold(tail, |a, &v| a.max(v))
}

/// The parameters of one "add bias and residual, then layer-normalise" step.
pub(crate) struct AddNormParams<'a> {
    pub bias: &'a [f32],
    pub gamma: &'a [f32],
    pub beta: &'a [f32],
    pub eps: f32,
}

simd_fn! {
    /// For each row: `x ← LayerNorm(x + bias + residual)`. The mean and
    /// variance are taken in two passes over the row (held in L1), as
    /// accurate as the reference implementations' single-pass forms or more.
    fn add_norm_rows(x: &mut [f32], residual: &[f32], p: &AddNormParams<'_>) {
        let h = p.bias.len();
        for (row, res) in x.chunks_exact_mut(h).zip(residual.chunks_exact(h)) {
            for ((v, &r), &b) in row.iter_mut().zip(res).zip(p.bias) {
                *v += r + b;
            }
            let mean = sum(row) / h as f32;
            let var = sum_sq_dev(row, mean) / h as f32;
            let rstd = 1.0 / (var + p.eps).sqrt();
            for ((v, &g), &b) in row.iter_mut().zip(p.gamma).zip(p.beta) {
                *v = (*v - mean) * rstd * g + b;
            }
        }
    }
}

simd_fn! {
    /// For each row: `x ← GELU(x + bias)`, exact (erf) form.
    fn bias_gelu_rows(x: &mut [f32], bias: &[f32]) {
        for row in x.chunks_exact_mut(bias.len()) {
            for (v, &b) in row.iter_mut().zip(bias) {
                *v = gelu(*v + b);
            }
        }
    }
}

/// The shape of one sequence's attention input: `qkv` rows are
/// `[q | k | v]`, each `heads × head_dim`, biases not yet added; the query
/// part already carries the 1/√d scale (weights and bias).
pub(crate) struct AttentionShape<'a> {
    pub heads: usize,
    pub head_dim: usize,
    pub qkv_bias: &'a [f32],
}

/// Most queries handled together in attention: their score rows and outputs
/// stay in registers while one row of keys or values is loaded.
const QUERY_BLOCK: usize = 8;

/// Working memory of [`attend_sequence`], reused across calls.
#[derive(Default)]
pub(crate) struct AttentionScratch {
    /// Keys of one head, transposed: `head_dim × lp` (lp = len rounded up to
    /// whole lanes; the padding columns stay zero).
    kt: Vec<f32>,
    /// Values of one head: `len × dp` (dp = head_dim rounded up likewise).
    v: Vec<f32>,
    /// One query block: queries with bias (`R × head_dim`), score rows, then
    /// probabilities (`R × lp`), outputs (`R × dp`).
    q: Vec<f32>,
    scores: Vec<f32>,
    out: Vec<f32>,
}

/// `buf` as `n` zeros.
fn zeroed(buf: &mut Vec<f32>, n: usize) -> &mut [f32] {
    buf.clear();
    buf.resize(n, 0.0);
    buf
}

/// Self-attention of one sequence. `qkv`: `len × 3h` rows `[q | k | v]`,
/// each `heads × head_dim`, biases not yet added (the query part already
/// carries the 1/√d scale); `out`: `len × h`. Only real tokens come in, so
/// no mask is needed. On AVX-512 CPUs the two products run as explicit
/// register-tiled kernels (LLVM's auto-vectoriser picks the wrong loop
/// there); elsewhere as portable loops.
pub(crate) fn attend_sequence(
    qkv: &[f32],
    len: usize,
    out: &mut [f32],
    s: &AttentionShape<'_>,
    scratch: &mut AttentionScratch,
) {
    #[cfg(target_arch = "x86_64")]
    if std::is_x86_feature_detected!("avx512f") {
        // SAFETY: the CPU has AVX-512F.
        unsafe { avx512::attend(qkv, len, out, s, scratch) };
        return;
    }
    attend_portable(qkv, len, out, s, scratch);
}

simd_fn! {
    /// [`attend_sequence`] with portable tile loops.
    fn attend_portable(
        qkv: &[f32],
        len: usize,
        out: &mut [f32],
        s: &AttentionShape<'_>,
        scratch: &mut AttentionScratch,
    ) {
        attend_with::<false>(qkv, len, out, s, scratch)
    }
}

/// The body of [`attend_sequence`]; `AVX512` picks the tile kernels.
#[inline(always)]
fn attend_with<const AVX512: bool>(
    qkv: &[f32],
    len: usize,
    out: &mut [f32],
    s: &AttentionShape<'_>,
    scratch: &mut AttentionScratch,
) {
    const R: usize = QUERY_BLOCK;
    let d = s.head_dim;
    let h = s.heads * d;
    let lp = len.div_ceil(LANES) * LANES;
    let dp = d.div_ceil(LANES) * LANES;
    let kt = zeroed(&mut scratch.kt, d * lp);
    let v = zeroed(&mut scratch.v, len * dp);
    let q = zeroed(&mut scratch.q, R * d);
    let scores = zeroed(&mut scratch.scores, R * lp);
    let o = zeroed(&mut scratch.out, R * dp);
    for head in 0..s.heads {
        let (qo, ko, vo) = (head * d, h + head * d, 2 * h + head * d);
        let (qb, kb, vb) = (
            &s.qkv_bias[qo..qo + d],
            &s.qkv_bias[ko..ko + d],
            &s.qkv_bias[vo..vo + d],
        );
        for (j, row) in qkv.chunks_exact(3 * h).take(len).enumerate() {
            for (c, (&x, &b)) in row[ko..ko + d].iter().zip(kb).enumerate() {
                kt[c * lp + j] = x + b;
            }
            add(&mut v[j * dp..j * dp + d], &row[vo..vo + d], vb);
        }
        let keys = Keys { kt, v, len, lp, dp };
        let mut i = 0;
        while i < len {
            let r = match len - i {
                n if n >= 8 => 8,
                n if n >= 4 => 4,
                _ => 1,
            };
            for (k, qr) in q.chunks_exact_mut(d).take(r).enumerate() {
                add(qr, &qkv[(i + k) * 3 * h + qo..][..d], qb);
            }
            let (q, scores, o) = (&q[..r * d], &mut scores[..r * lp], &mut o[..r * dp]);
            match r {
                8 => query_block::<8, AVX512>(&keys, q, scores, o),
                4 => query_block::<4, AVX512>(&keys, q, scores, o),
                _ => query_block::<1, AVX512>(&keys, q, scores, o),
            }
            for k in 0..r {
                out[(i + k) * h + qo..][..d].copy_from_slice(&o[k * dp..k * dp + d]);
            }
            i += r;
        }
    }
}

/// `dst = a + b`, element-wise.
#[inline(always)]
fn add(dst: &mut [f32], a: &[f32], b: &[f32]) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = x + y;
    }
}

/// One head's keys (transposed) and values, ready for query blocks.
#[derive(Clone, Copy)]
struct Keys<'a> {
    kt: &'a [f32],
    v: &'a [f32],
    len: usize,
    lp: usize,
    dp: usize,
}

/// Attention of `R` queries (`q`: `R × head_dim`) against one head's keys:
/// scores into `scores` (`R × lp`), softmax in place, then `o` (`R × dp`)
/// = P·V.
#[inline(always)]
fn query_block<const R: usize, const AVX512: bool>(
    keys: &Keys<'_>,
    q: &[f32],
    scores: &mut [f32],
    o: &mut [f32],
) {
    #[cfg(target_arch = "x86_64")]
    if AVX512 {
        // SAFETY: only instantiated with AVX512 from avx512::attend, which
        // runs only on CPUs with AVX-512F.
        unsafe { avx512::scores::<R>(keys, q, scores) };
    } else {
        portable_scores::<R>(keys, q, scores);
    }
    #[cfg(not(target_arch = "x86_64"))]
    portable_scores::<R>(keys, q, scores);
    let Keys { len, lp, .. } = *keys;
    for row in scores.chunks_exact_mut(lp) {
        let (real, pad) = row.split_at_mut(len);
        let m = max(real);
        for x in real.iter_mut() {
            *x = exp_neg(*x - m);
        }
        let inv = 1.0 / sum(real);
        real.iter_mut().for_each(|x| *x *= inv);
        pad.iter_mut().for_each(|x| *x = 0.0);
    }
    #[cfg(target_arch = "x86_64")]
    if AVX512 {
        // SAFETY: as above.
        unsafe { avx512::weighted_values::<R>(keys, scores, o) };
    } else {
        portable_weighted_values::<R>(keys, scores, o);
    }
    #[cfg(not(target_arch = "x86_64"))]
    portable_weighted_values::<R>(keys, scores, o);
}

/// `scores[r][j] = Σ_c q[r][c] · kt[c][j]`.
#[inline(always)]
fn portable_scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
    let lp = keys.lp;
    let d = q.len() / R;
    for (row, qr) in scores.chunks_exact_mut(lp).zip(q.chunks_exact(d)) {
        row.iter_mut().for_each(|x| *x = 0.0);
        for (kt_row, &qc) in keys.kt.chunks_exact(lp).zip(qr) {
            for (x, &k) in row.iter_mut().zip(kt_row) {
                *x += qc * k;
            }
        }
    }
}

/// `o[r][c] = Σ_j p[r][j] · v[j][c]`.
#[inline(always)]
fn portable_weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
    let Keys { len, lp, dp, .. } = *keys;
    for (row, pr) in o.chunks_exact_mut(dp).zip(p.chunks_exact(lp)) {
        row.iter_mut().for_each(|x| *x = 0.0);
        for (vj, &pj) in keys.v.chunks_exact(dp).zip(&pr[..len]) {
            for (x, &y) in row.iter_mut().zip(vj) {
                *x += pj * y;
            }
        }
    }
}

/// The attention products as AVX-512 register tiles: `R` accumulators of
/// 16 lanes, so each loaded row of keys or values feeds `R` fused
/// multiply-adds; the other operand is broadcast straight from memory.
#[cfg(target_arch = "x86_64")]
mod avx512 {
    use std::arch::x86_64::*;

    use super::{attend_with, AttentionScratch, AttentionShape, Keys, LANES};

    /// [`super::attend_sequence`] compiled for AVX-512.
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    pub(super) unsafe fn attend(
        qkv: &[f32],
        len: usize,
        out: &mut [f32],
        s: &AttentionShape<'_>,
        scratch: &mut AttentionScratch,
    ) {
        attend_with::<true>(qkv, len, out, s, scratch)
    }

    /// `scores[r][j] = Σ_c q[r][c] · kt[c][j]`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
        let lp = keys.lp;
        let d = q.len() / R;
        assert!(keys.kt.len() >= d * lp && scores.len() >= R * lp && lp.is_multiple_of(LANES));
        let (kt, q, out) = (keys.kt.as_ptr(), q.as_ptr(), scores.as_mut_ptr());
        for j0 in (0..lp).step_by(LANES) {
            let mut acc = [_mm512_setzero_ps(); R];
            for c in 0..d {
                // SAFETY: c < d, r < R and j0 + 16 <= lp, asserted above.
                let k = unsafe { _mm512_loadu_ps(kt.add(c * lp + j0)) };
                for (r, a) in acc.iter_mut().enumerate() {
                    let x = _mm512_set1_ps(unsafe { *q.add(r * d + c) });
                    *a = _mm512_fmadd_ps(x, k, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                unsafe { _mm512_storeu_ps(out.add(r * lp + j0), *a) };
            }
        }
    }

    /// `o[r][c] = Σ_j p[r][j] · v[j][c]`.
    #[target_feature(enable = "avx512f")]
    #[inline]
    pub(super) unsafe fn weighted_values<const R: usize>(
        keys: &Keys<'_>,
        p: &[f32],
        o: &mut [f32],
    ) {
        let Keys { len, lp, dp, .. } = *keys;
        assert!(
            keys.v.len() >= len * dp && p.len() >= R * lp && o.len() >= R * dp && dp % LANES == 0
        );
        let (v, p, out) = (keys.v.as_ptr(), p.as_ptr(), o.as_mut_ptr());
        for c0 in (0..dp).step_by(LANES) {
            let mut acc = [_mm512_setzero_ps(); R];
            for j in 0..len {
                // SAFETY: j < len <= lp, r < R and c0 + 16 <= dp, asserted above.
                let x = unsafe { _mm512_loadu_ps(v.add(j * dp + c0)) };
                for (r, a) in acc.iter_mut().enumerate() {
                    let w = _mm512_set1_ps(unsafe { *p.add(r * lp + j) });
                    *a = _mm512_fmadd_ps(w, x, *a);
                }
            }
            for (r, a) in acc.iter().enumerate() {
                unsafe { _mm512_storeu_ps(out.add(r * dp + c0), *a) };
            }
        }
    }
}

/// 0.5·x·erfc(−x/√2), with erfc from the Chebyshev-fitted formula of
/// Numerical Recipes (fractional error < 1.2e-7) and a branch-free exp, so
/// loops over it vectorise.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let u = -x * std::f32::consts::FRAC_1_SQRT_2;
    let z = u.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let poly = -1.265_512_2
        + t * (1.000_023_7
            + t * (0.374_091_96
                + t * (0.096_784_18
                    + t * (-0.186_288_06
                        + t * (0.278_868_07
                            + t * (-1.135_204
                                + t * (1.488_515_9 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
    let ans = t * exp_neg(-z * z + poly);
    let erfc = if u >= 0.0 { ans } else { 2.0 - ans };
    0.5 * x * erfc
}

/// e^x for x ≤ 0 (clamped below at −87), relative error ~2e-7:
/// 2^n · p(r) with n = round(x/ln2), |r| ≤ ln2/2.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.max(-87.0);
    let shifted = x * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    // n as an integer, read from the mantissa bits rather than by a float
    // to int conversion (Rust's saturating `as` does not vectorise).
    let n_int = shifted.to_bits().wrapping_sub(MAGIC.to_bits());
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erf_ref(x: f64) -> f64 {
        // erf by its Taylor series (converges well for |x| < 5 in f64).
        let mut sum: f64 = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs().max(1e-300) && n < 200.0 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    }

    fn gelu_ref(x: f64) -> f64 {
        if x.abs() < 5.0 {
            0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
        } else if x > 0.0 {
            x
        } else {
            0.0
        }
    }

    /// Deterministic pseudo-random values in [-scale, scale].
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    #[test]
    fn gelu_matches_the_exact_function() {
        let xs: Vec<f32> = (-2000..=2000).map(|k| k as f32 * 0.005).collect();
        let mut got = xs.clone();
        bias_gelu_rows(&mut got, &[0.0; 1]);
        let mut worst: f64 = 0.0;
        for (&x, &g) in xs.iter().zip(&got) {
            let exact = gelu_ref(x as f64);
            worst = worst.max((g as f64 - exact).abs() / exact.abs().max(1.0));
            assert_eq!(g, gelu(x), "dispatched and scalar forms agree bit for bit");
        }
        assert!(worst < 3e-6, "worst error {worst}");
    }

    #[test]
    fn exp_is_accurate() {
        for k in 0..=870 {
            let x = -(k as f32) * 0.1;
            let want = (x as f64).exp();
            let got = exp_neg(x) as f64;
            assert!(
                ((got - want) / want).abs() < 1e-6,
                "exp({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn add_norm_matches_a_direct_computation() {
        let h = 40; // not a multiple of the lane count: exercises the tails
        let rows = 3;
        let x0 = values(rows * h, 1, 3.0);
        let res = values(rows * h, 2, 1.0);
        let (bias, gamma, beta) = (values(h, 3, 0.5), values(h, 4, 2.0), values(h, 5, 0.5));
        let mut x = x0.clone();
        let p = AddNormParams {
            bias: &bias,
            gamma: &gamma,
            beta: &beta,
            eps: 1e-12,
        };
        add_norm_rows(&mut x, &res, &p);
        for r in 0..rows {
            let v: Vec<f64> = (0..h)
                .map(|c| (x0[r * h + c] + res[r * h + c] + bias[c]) as f64)
                .collect();
            let mean = v.iter().sum::<f64>() / h as f64;
            let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / h as f64;
            for c in 0..h {
                let want = (v[c] - mean) / (var + 1e-12).sqrt() * gamma[c] as f64 + beta[c] as f64;
                assert!((x[r * h + c] as f64 - want).abs() < 1e-5, "row {r} col {c}");
            }
        }
    }

    #[test]
    fn attention_matches_a_direct_computation() {
        for (heads, d, t, len) in [
            (3, 8, 7, 5),
            (2, 32, 40, 37),
            (1, 16, 17, 17),
            (2, 24, 1, 1),
            (4, 32, 13, 13),
        ] {
            check_attention(heads, d, t, len, false);
            check_attention(heads, d, t, len, true);
        }
    }

    /// `portable`: the portable kernels even where AVX-512 is available.
    fn check_attention(heads: usize, d: usize, t: usize, len: usize, portable: bool) {
        let h = heads * d;
        let qkv = values(t * 3 * h, 7, 1.5);
        let bias = values(3 * h, 8, 0.3);
        let mut out = vec![f32::NAN; len * h];
        let shape = AttentionShape {
            heads,
            head_dim: d,
            qkv_bias: &bias,
        };
        let run = if portable {
            attend_portable
        } else {
            attend_sequence
        };
        run(
            &qkv[..len * 3 * h],
            len,
            &mut out,
            &shape,
            &mut AttentionScratch::default(),
        );
        let at = |i: usize, part: usize, head: usize, c: usize| {
            let k = part * h + head * d + c;
            (qkv[i * 3 * h + k] + bias[k]) as f64
        };
        for head in 0..heads {
            for i in 0..len {
                let scores: Vec<f64> = (0..len)
                    .map(|j| (0..d).map(|c| at(i, 0, head, c) * at(j, 1, head, c)).sum())
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..d {
                    let want: f64 = (0..len).map(|j| e[j] / z * at(j, 2, head, c)).sum();
                    let got = out[i * h + head * d + c] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "head {head} row {i} col {c}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
