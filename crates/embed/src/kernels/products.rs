//! What the bf16 and int8 product modules share: host copies of weights,
//! gemm's f32 product for their portable paths, and running a product over
//! a tensor's rows.

use candle_core::{Storage, Tensor};

/// A CPU matrix (`out × in`) as host f32 values, for the reduced-precision
/// weights built from it.
pub(super) fn host_matrix(t: &Tensor) -> candle_core::Result<Vec<f32>> {
    t.to_dtype(candle_core::DType::F32)?
        .flatten_all()?
        .to_vec1()
}

/// `dst[r][o] = Σ_{c<k} x[r·x_stride + c] · w[o·w_stride + c]` for `n` rows
/// and `out` outputs (`dst`: `n × out`), with gemm's f32 product, the one
/// Candle's matmul uses: on the pool's threads where `parallel`, else on the
/// calling thread (for products whose callers are already the parallel
/// tasks, one per sequence).
#[allow(clippy::too_many_arguments)]
pub(super) fn x_times_wt(
    x: &[f32],
    x_stride: usize,
    n: usize,
    k: usize,
    w: &[f32],
    w_stride: usize,
    out: usize,
    dst: &mut [f32],
    parallel: bool,
) {
    if n == 0 || out == 0 {
        return;
    }
    assert!(x.len() >= (n - 1) * x_stride + k && w.len() >= (out - 1) * w_stride + k);
    assert!(dst.len() >= n * out);
    let threads = rayon::current_num_threads();
    let parallelism = if parallel && threads > 1 {
        gemm::Parallelism::Rayon(threads)
    } else {
        gemm::Parallelism::None
    };
    // SAFETY: every element read or written lies in the slices (asserted).
    unsafe {
        gemm::gemm(
            n,
            out,
            k,
            dst.as_mut_ptr(),
            1,
            out as isize,
            false,
            x.as_ptr(),
            1,
            x_stride as isize,
            w.as_ptr(),
            w_stride as isize,
            1,
            0.0,
            1.0,
            false,
            false,
            false,
            parallelism,
        )
    }
}

/// Runs `f` on the rows of `x` (`[n, inp]`, f32, CPU) and returns its
/// `n × out` result as a tensor.
pub(super) fn map_rows(
    x: &Tensor,
    inp: usize,
    out: usize,
    f: impl FnOnce(&[f32], usize) -> Vec<f32>,
) -> candle_core::Result<Tensor> {
    let x = x.contiguous()?;
    let (n, k) = x.dims2()?;
    if k != inp {
        candle_core::bail!("product: {k} inputs per row, the weight takes {inp}");
    }
    let y = {
        let (storage, layout) = x.storage_and_layout();
        let Storage::Cpu(cpu) = &*storage else {
            candle_core::bail!("reduced-precision products run on the CPU only")
        };
        let Some((start, end)) = layout.contiguous_offsets() else {
            candle_core::bail!("product: contiguous input only")
        };
        f(&cpu.as_slice::<f32>()?[start..end], n)
    };
    Tensor::from_vec(y, (n, out), x.device())
}
