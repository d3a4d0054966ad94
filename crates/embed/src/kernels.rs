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

simd_fn! {
    /// Self-attention of one sequence. `qkv`: `t × 3h` (only the first
    /// `len` rows are real tokens), `out`: `t × h`. Padded query rows get
    /// zeros, and padded keys are never looked at, so no mask is needed and
    /// no work is spent on padding beyond the matrix products around it.
    /// `scratch` is reused between calls.
    fn attend_sequence(
        qkv: &[f32],
        len: usize,
        out: &mut [f32],
        s: &AttentionShape<'_>,
        scratch: &mut Vec<f32>,
    ) {
        let d = s.head_dim;
        let h = s.heads * d;
        let stride = 3 * h;
        out[len * h..].iter_mut().for_each(|v| *v = 0.0);
        // Scratch: K transposed (d × len), V (len × d), one score row, one query.
        scratch.clear();
        scratch.resize(2 * d * len + len + d, 0.0);
        let (kt, rest) = scratch.split_at_mut(d * len);
        let (v, rest) = rest.split_at_mut(len * d);
        let (scores, q) = rest.split_at_mut(len);
        for head in 0..s.heads {
            let (qo, ko, vo) = (head * d, h + head * d, 2 * h + head * d);
            let (qb, kb, vb) = (
                &s.qkv_bias[qo..qo + d],
                &s.qkv_bias[ko..ko + d],
                &s.qkv_bias[vo..vo + d],
            );
            for j in 0..len {
                let row = &qkv[j * stride..];
                for c in 0..d {
                    kt[c * len + j] = row[ko + c] + kb[c];
                }
                for ((dst, &x), &b) in v[j * d..(j + 1) * d].iter_mut().zip(&row[vo..vo + d]).zip(vb) {
                    *dst = x + b;
                }
            }
            for i in 0..len {
                let row = &qkv[i * stride..];
                for ((dst, &x), &b) in q.iter_mut().zip(&row[qo..qo + d]).zip(qb) {
                    *dst = x + b;
                }
                scores.iter_mut().for_each(|x| *x = 0.0);
                for (c, &qc) in q.iter().enumerate() {
                    for (sj, &k) in scores.iter_mut().zip(&kt[c * len..(c + 1) * len]) {
                        *sj += qc * k;
                    }
                }
                let m = max(scores);
                for x in scores.iter_mut() {
                    *x = exp_neg(*x - m);
                }
                let inv = 1.0 / sum(scores);
                let o = &mut out[i * h + qo..i * h + qo + d];
                o.iter_mut().for_each(|x| *x = 0.0);
                for (&p, vj) in scores.iter().zip(v.chunks_exact(d)) {
                    let p = p * inv;
                    for (x, &y) in o.iter_mut().zip(vj) {
                        *x += p * y;
                    }
                }
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
                            + t * (-1.135_203_98
                                + t * (1.488_515_87 + t * (-0.822_152_23 + t * 0.170_872_77))))))));
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
    let n = (x * std::f32::consts::LOG2_E + MAGIC) - MAGIC;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    let p = 1.0
        + r * (1.0
            + r * (0.5
                + r * (0.166_666_67
                    + r * (0.041_666_668 + r * (0.008_333_334 + r * 0.001_388_889)))));
    let scale = f32::from_bits(((n as i32 + 127) as u32) << 23);
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
        let (heads, d, t, len) = (3, 8, 7, 5);
        let h = heads * d;
        let qkv = values(t * 3 * h, 7, 1.5);
        let bias = values(3 * h, 8, 0.3);
        let mut out = vec![f32::NAN; t * h];
        let shape = AttentionShape {
            heads,
            head_dim: d,
            qkv_bias: &bias,
        };
        attend_sequence(&qkv, len, &mut out, &shape, &mut Vec::new());
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
        assert!(
            out[len * h..].iter().all(|&v| v == 0.0),
            "padded rows are zero"
        );
    }
}
