//! Attention over a batch's sequences packed end to end, on a GPU: one CUDA
//! kernel of ours (`cuda/attention.cu`) in place of padding the projections
//! to `[b, t]`, three transposed copies, the `[b, heads, t, t]` scores, their
//! mask, the softmax and the copy back. Nsight Compute on an H200 put those
//! steps at about half of MiniLM's kernel time in fp16 (docs/performance.md
//! #gpu); the kernel reads the packed `[tokens, 3 · hidden]` projections as
//! they come and writes `[tokens, hidden]`.

use candle_core::{DType, Device, Result, Tensor};

/// Where each of a batch's sequences starts among its packed rows, on the
/// device, as the kernel reads it.
pub(super) struct Packing {
    /// `[sequences + 1]` u32 row offsets (the last is the rows' count).
    starts: Tensor,
    /// The longest sequence: the kernel's grid covers its queries.
    longest: usize,
}

impl Packing {
    /// The packing of sequences of `lengths`, in order.
    pub(super) fn new(lengths: &[usize], device: &Device) -> Result<Packing> {
        let mut starts = Vec::with_capacity(lengths.len() + 1);
        let mut at = 0u32;
        starts.push(at);
        for &len in lengths {
            at += u32::try_from(len).map_err(candle_core::Error::wrap)?;
            starts.push(at);
        }
        Ok(Packing {
            starts: Tensor::from_vec(starts, lengths.len() + 1, device)?,
            longest: lengths.iter().copied().max().unwrap_or(0),
        })
    }
}

/// Whether the kernel serves heads of `head_dim` values stored as `dtype`
/// on `device`: a CUDA GPU, heads of 32 or 64 (MiniLM's, BERT-base's,
/// MPNet's), f32, f16 or bf16. Elsewhere the padded path runs.
pub(super) fn serves(device: &Device, dtype: DType, head_dim: usize) -> bool {
    cfg!(feature = "cuda")
        && device.is_cuda()
        && matches!(head_dim, 32 | 64)
        && matches!(dtype, DType::F32 | DType::F16 | DType::BF16)
}

/// The attention context `[tokens, heads · head_dim]` of `qkv`
/// (`[tokens, 3 · heads · head_dim]`: each token's queries, already scaled
/// by 1/√head_dim, keys and values), every sequence of `packing` attending
/// to itself only. `bias`: additive terms `[heads, 2 · span − 1]` (f32) by
/// key-minus-query distance, the term of distance `d` at `span − 1 + d`.
/// Only where [`serves`] says yes.
pub(super) fn attend(
    qkv: &Tensor,
    packing: &Packing,
    heads: usize,
    head_dim: usize,
    bias: Option<(&Tensor, usize)>,
) -> Result<Tensor> {
    qkv.contiguous()?.apply_op2_no_bwd(
        &packing.starts,
        &Attend {
            heads,
            head_dim,
            longest: packing.longest,
            bias: bias.map(|(t, span)| (t.clone(), span)),
        },
    )
}

/// The kernel's launch as a Candle operation on (qkv, starts).
// Read by the CUDA launch only.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
struct Attend {
    heads: usize,
    head_dim: usize,
    longest: usize,
    bias: Option<(Tensor, usize)>,
}

impl candle_core::CustomOp2 for Attend {
    fn name(&self) -> &'static str {
        "packed-attention"
    }

    fn cpu_fwd(
        &self,
        _: &candle_core::CpuStorage,
        _: &candle_core::Layout,
        _: &candle_core::CpuStorage,
        _: &candle_core::Layout,
    ) -> Result<(candle_core::CpuStorage, candle_core::Shape)> {
        candle_core::bail!(
            "packed attention runs on a GPU only (the CPU has its own fused kernels)"
        )
    }

    #[cfg(feature = "cuda")]
    fn cuda_fwd(
        &self,
        qkv: &candle_core::CudaStorage,
        ql: &candle_core::Layout,
        starts: &candle_core::CudaStorage,
        sl: &candle_core::Layout,
    ) -> Result<(candle_core::CudaStorage, candle_core::Shape)> {
        cuda::launch(self, qkv, ql, starts, sl)
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use candle_core::cuda_backend::cudarc::driver::{
        CudaFunction, CudaSlice, CudaView, DeviceRepr, LaunchConfig, PushKernelArg,
    };
    use candle_core::cuda_backend::{CudaStorageSlice, WrapErr};
    use candle_core::{CudaStorage, Layout, Result, Shape, Storage};

    use super::Attend;

    /// The kernels, compiled by build.rs with nvcc.
    const PTX: &str = include_str!(concat!(env!("OUT_DIR"), "/attention.ptx"));

    /// Query rows per block (`QUERIES` in the kernel).
    const QUERIES: usize = 64;

    pub(super) fn launch(
        op: &Attend,
        qkv: &CudaStorage,
        ql: &Layout,
        starts: &CudaStorage,
        sl: &Layout,
    ) -> Result<(CudaStorage, Shape)> {
        let dev = qkv.device.clone();
        let (tokens, cols) = ql.shape().dims2()?;
        let width = op.heads * op.head_dim;
        if !ql.is_contiguous() || cols != 3 * width || !sl.is_contiguous() {
            candle_core::bail!(
                "packed attention: qkv {:?} for {} heads of {}",
                ql.shape(),
                op.heads,
                op.head_dim
            )
        }
        let sequences = sl.shape().elem_count() - 1;
        let starts = starts.as_cuda_slice::<u32>()?.slice(sl.start_offset()..);
        // The bias, or one unused value in its place (the kernel's flag
        // says which); its storage stays locked until the launch is queued.
        let bias = op
            .bias
            .as_ref()
            .map(|(b, span)| Ok::<_, candle_core::Error>((b.contiguous()?, *span)))
            .transpose()?;
        let guard = bias
            .as_ref()
            .map(|(b, span)| (b.storage_and_layout(), *span));
        let unused;
        let (bias_values, span, has_bias) = match &guard {
            Some(((storage, layout), span)) => {
                let Storage::Cuda(storage) = &**storage else {
                    candle_core::bail!("packed attention: the bias is not on the GPU")
                };
                let values = storage
                    .as_cuda_slice::<f32>()?
                    .slice(layout.start_offset()..);
                (values, *span as i32, 1i32)
            }
            None => {
                unused = dev.alloc_zeros::<f32>(1)?;
                (unused.slice(0..), 1i32, 0i32)
            }
        };
        let cfg = LaunchConfig {
            grid_dim: (
                op.longest.div_ceil(QUERIES).max(1) as u32,
                op.heads as u32,
                sequences as u32,
            ),
            block_dim: (QUERIES as u32, 1, 1),
            shared_mem_bytes: 0,
        };
        let heads = op.heads as i32;
        let run = |name: &str| {
            dev.get_or_load_custom_func(
                &format!("packed_attention_{name}_d{}", op.head_dim),
                "refscore_packed_attention",
                PTX,
            )
            .map(|f| f.into_cuda_function())
        };
        fn go<T: DeviceRepr>(
            func: CudaFunction,
            dev: &candle_core::CudaDevice,
            src: &CudaSlice<T>,
            offset: usize,
            args: (&CudaView<'_, u32>, &CudaView<'_, f32>, i32, i32, i32),
            out_len: usize,
            cfg: LaunchConfig,
        ) -> Result<CudaSlice<T>> {
            let src = src.slice(offset..);
            // SAFETY: the kernel writes every value of every sequence's rows,
            // and the rows are the sequences' (starts end at `tokens`).
            let out = unsafe { dev.alloc::<T>(out_len)? };
            let (starts, bias, has_bias, span, heads) = args;
            let stream = dev.cuda_stream();
            let mut b = stream.launch_builder(&func);
            b.arg(&src);
            b.arg(starts);
            b.arg(bias);
            b.arg(&has_bias);
            b.arg(&span);
            b.arg(&heads);
            b.arg(&out);
            // SAFETY: the arguments match the kernel's parameters in order
            // and type; every pointer covers what the grid reads or writes.
            unsafe { b.launch(cfg) }.w()?;
            Ok(out)
        }
        let args = (&starts, &bias_values, has_bias, span, heads);
        let out_len = tokens * width;
        let offset = ql.start_offset();
        let slice = match &qkv.slice {
            CudaStorageSlice::F32(s) => {
                CudaStorageSlice::F32(go(run("f32")?, &dev, s, offset, args, out_len, cfg)?)
            }
            CudaStorageSlice::F16(s) => {
                CudaStorageSlice::F16(go(run("f16")?, &dev, s, offset, args, out_len, cfg)?)
            }
            CudaStorageSlice::BF16(s) => {
                CudaStorageSlice::BF16(go(run("bf16")?, &dev, s, offset, args, out_len, cfg)?)
            }
            _ => candle_core::bail!("packed attention: f32, f16 or bf16 only"),
        };
        Ok((
            CudaStorage { slice, device: dev },
            Shape::from((tokens, width)),
        ))
    }
}
