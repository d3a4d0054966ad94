//! The AVX2 + FMA kernel path: the shared loop bodies compiled with 256-bit
//! vectors and fused multiply-adds available, and the attention products as
//! explicit register tiles: `R` accumulators of 8 lanes, so each loaded row
//! of keys or values feeds `R` multiplies and adds, where the plain loops
//! (which LLVM vectorises over one query row at a time) load and store
//! their score row for every multiply and add.
//!
//! A multiply and a separate add, in the plain loops' order, for the same
//! bits on every path (see the AVX-512 path's notes).

use std::arch::x86_64::*;

use super::{AttentionProducts, Keys};

super::kernel_path_module!(["avx2", "fma"], Tiles);

/// Lanes of one AVX2 register of f32.
const WIDE: usize = 8;

/// The register-tiled attention products (AVX2).
pub(super) struct Tiles;

impl AttentionProducts for Tiles {
    /// # Safety
    /// The CPU must have AVX2.
    #[inline(always)]
    unsafe fn scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2.
        unsafe { tile_scores::<R>(keys, q, scores) }
    }

    /// # Safety
    /// The CPU must have AVX2.
    #[inline(always)]
    unsafe fn weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
        // SAFETY: the caller guarantees AVX2.
        unsafe { tile_weighted_values::<R>(keys, p, o) }
    }
}

/// `scores[r][j] = Σ_c q[r][c] · kt[c][j]`.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile_scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
    let Keys { stride, width, .. } = *keys;
    let d = q.len() / R;
    assert!(
        d > 0
            && keys.kt.len() >= (d - 1) * stride + width
            && scores.len() >= R * width
            && width.is_multiple_of(WIDE)
    );
    let (kt, q, out) = (keys.kt.as_ptr(), q.as_ptr(), scores.as_mut_ptr());
    for j0 in (0..width).step_by(WIDE) {
        let mut acc = [_mm256_setzero_ps(); R];
        for c in 0..d {
            // SAFETY: c < d, r < R and j0 + 8 <= width, asserted above.
            let k = unsafe { _mm256_loadu_ps(kt.add(c * stride + j0)) };
            for (r, a) in acc.iter_mut().enumerate() {
                let x = _mm256_set1_ps(unsafe { *q.add(r * d + c) });
                *a = _mm256_add_ps(*a, _mm256_mul_ps(x, k));
            }
        }
        for (r, a) in acc.iter().enumerate() {
            unsafe { _mm256_storeu_ps(out.add(r * width + j0), *a) };
        }
    }
}

/// `o[r][c] = Σ_j p[r][j] · v[j][c]`.
///
/// # Safety
/// The CPU must have AVX2.
#[target_feature(enable = "avx2")]
#[inline]
unsafe fn tile_weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
    let Keys { len, width, dp, .. } = *keys;
    assert!(
        keys.v.len() >= len * dp && p.len() >= R * width && o.len() >= R * dp && dp % WIDE == 0
    );
    let (v, p, out) = (keys.v.as_ptr(), p.as_ptr(), o.as_mut_ptr());
    for c0 in (0..dp).step_by(WIDE) {
        let mut acc = [_mm256_setzero_ps(); R];
        for j in 0..len {
            // SAFETY: j < len <= width, r < R and c0 + 8 <= dp, asserted above.
            let x = unsafe { _mm256_loadu_ps(v.add(j * dp + c0)) };
            for (r, a) in acc.iter_mut().enumerate() {
                let w = _mm256_set1_ps(unsafe { *p.add(r * width + j) });
                *a = _mm256_add_ps(*a, _mm256_mul_ps(w, x));
            }
        }
        for (r, a) in acc.iter().enumerate() {
            unsafe { _mm256_storeu_ps(out.add(r * dp + c0), *a) };
        }
    }
}
