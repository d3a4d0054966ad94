//! The portable kernel path (baseline instructions: SSE2 on x86-64), with
//! the attention products as plain loops.

use super::{AttentionProducts, Keys};

super::kernel_path_module!([], LoopProducts);

/// The attention products as plain loops, which LLVM vectorises at the
/// baseline level.
pub(super) struct LoopProducts;

impl AttentionProducts for LoopProducts {
    #[inline(always)]
    unsafe fn scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
        let Keys { stride, width, .. } = *keys;
        let d = q.len() / R;
        for (row, qr) in scores.chunks_exact_mut(width).zip(q.chunks_exact(d)) {
            row.iter_mut().for_each(|x| *x = 0.0);
            for (c, &qc) in qr.iter().enumerate() {
                let kt_row = &keys.kt[c * stride..][..width];
                for (x, &k) in row.iter_mut().zip(kt_row) {
                    *x += qc * k;
                }
            }
        }
    }

    #[inline(always)]
    unsafe fn weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
        let Keys { len, width, dp, .. } = *keys;
        for (row, pr) in o.chunks_exact_mut(dp).zip(p.chunks_exact(width)) {
            row.iter_mut().for_each(|x| *x = 0.0);
            for (vj, &pj) in keys.v.chunks_exact(dp).zip(&pr[..len]) {
                for (x, &y) in row.iter_mut().zip(vj) {
                    *x += pj * y;
                }
            }
        }
    }
}
