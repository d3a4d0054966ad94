//! The portable kernel path (baseline instructions: SSE2 on x86-64), and the
//! plain-loop attention products that it and the AVX2 path share.

use super::{AttentionProducts, Keys};

super::kernel_path_module!([], LoopProducts);

/// The attention products as plain loops that LLVM vectorises at whatever
/// level the calling function is compiled for.
pub(super) struct LoopProducts;

impl AttentionProducts for LoopProducts {
    #[inline(always)]
    unsafe fn scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
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

    #[inline(always)]
    unsafe fn weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
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
}
