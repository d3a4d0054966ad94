//! The AVX-512 kernel path: the shared loop bodies compiled for AVX-512, and
//! the attention products as explicit register tiles (LLVM's
//! auto-vectoriser picks the wrong loop for them there): `R` accumulators
//! of 16 lanes, so each loaded row of keys or values feeds `R` fused
//! multiplies and adds; the other operand is broadcast straight from memory.
//!
//! A multiply and a separate add, not a fused multiply-add: the plain loops of
//! the other paths round the product before adding it (Rust never fuses
//! them), and the tiles add in the same order, so every path gives the same
//! bits. An FMA here differs by ~1e-7, which reduced precisions amplify: a
//! rounding to bf16 or a u8 step that lands the other way at the next product
//! moved end-to-end int8 cosines by 6e-3 (measured on AMD EPYC Zen 5).

use std::arch::x86_64::*;

use super::{AttentionProducts, Keys, LANES};

super::kernel_path_module!(["avx512f", "avx512vl", "avx2", "fma"], Tiles);

/// The register-tiled attention products (AVX-512F).
pub(super) struct Tiles;

impl AttentionProducts for Tiles {
    /// # Safety
    /// The CPU must have AVX-512F.
    #[inline(always)]
    unsafe fn scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe { tile_scores::<R>(keys, q, scores) }
    }

    /// # Safety
    /// The CPU must have AVX-512F.
    #[inline(always)]
    unsafe fn weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
        // SAFETY: the caller guarantees AVX-512F.
        unsafe { tile_weighted_values::<R>(keys, p, o) }
    }
}

/// `scores[r][j] = Σ_c q[r][c] · kt[c][j]`.
///
/// # Safety
/// The CPU must have AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile_scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
    let Keys { stride, width, .. } = *keys;
    let d = q.len() / R;
    assert!(
        d > 0
            && keys.kt.len() >= (d - 1) * stride + width
            && scores.len() >= R * width
            && width.is_multiple_of(LANES)
    );
    let (kt, q, out) = (keys.kt.as_ptr(), q.as_ptr(), scores.as_mut_ptr());
    for j0 in (0..width).step_by(LANES) {
        let mut acc = [_mm512_setzero_ps(); R];
        for c in 0..d {
            // SAFETY: c < d, r < R and j0 + 16 <= width, asserted above.
            let k = unsafe { _mm512_loadu_ps(kt.add(c * stride + j0)) };
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm512_set1_ps(unsafe { *q.add(r * d + c) });
                *a = _mm512_add_ps(*a, _mm512_mul_ps(x, k));
            }
        }
        for (r, a) in acc.iter().enumerate() {
            unsafe { _mm512_storeu_ps(out.add(r * width + j0), *a) };
        }
    }
}

/// `o[r][c] = Σ_j p[r][j] · v[j][c]`.
///
/// # Safety
/// The CPU must have AVX-512F.
#[target_feature(enable = "avx512f")]
#[inline]
unsafe fn tile_weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
    let Keys { len, width, dp, .. } = *keys;
    assert!(
        keys.v.len() >= len * dp && p.len() >= R * width && o.len() >= R * dp && dp % LANES == 0
    );
    let (v, p, out) = (keys.v.as_ptr(), p.as_ptr(), o.as_mut_ptr());
    for c0 in (0..dp).step_by(LANES) {
        let mut acc = [_mm512_setzero_ps(); R];
        for j in 0..len {
            // SAFETY: j < len <= width, r < R and c0 + 16 <= dp, asserted above.
            let x = unsafe { _mm512_loadu_ps(v.add(j * dp + c0)) };
            for (r, a) in acc.iter_mut().enumerate() {
                let w = _mm512_set1_ps(unsafe { *p.add(r * width + j) });
                *a = _mm512_add_ps(*a, _mm512_mul_ps(w, x));
            }
        }
        for (r, a) in acc.iter().enumerate() {
            unsafe { _mm512_storeu_ps(out.add(r * dp + c0), *a) };
        }
    }
}
