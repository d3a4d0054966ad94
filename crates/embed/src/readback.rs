//! Copies a batch's token states from the device to the host. On CUDA the
//! copy runs on a stream of its own: on Candle's one stream a batch's copy
//! queued behind the kernels of the batch launched after it, so the host
//! waited for both and the GPU sat idle while the copy ran (an H100 call of
//! docs/performance.md#gpu: 76% of the forward time spent waiting). On the
//! CPU a copy is a plain read.

use candle_core::{Device, Tensor};

type Result<T> = candle_core::Result<T>;

/// How states leave one device.
pub(crate) struct Readback {
    #[cfg(feature = "cuda")]
    copier: Option<cuda::Copier>,
}

/// The point in the device's queue after which a launched batch's states
/// are complete ([`Readback::mark`]).
pub(crate) struct Ready {
    #[cfg(feature = "cuda")]
    event: Option<candle_core::cuda_backend::cudarc::driver::CudaEvent>,
}

impl Readback {
    /// The readback of `device`: a copy stream on CUDA, nothing elsewhere.
    pub(crate) fn new(device: &Device) -> Result<Readback> {
        #[cfg(feature = "cuda")]
        {
            let copier = match device {
                Device::Cuda(cuda) => Some(cuda::Copier::new(cuda)?),
                _ => None,
            };
            Ok(Readback { copier })
        }
        #[cfg(not(feature = "cuda"))]
        {
            let _ = device;
            Ok(Readback {})
        }
    }

    /// Marks the work queued so far: the states of the batch just launched
    /// are complete once the device gets past this point.
    pub(crate) fn mark(&self) -> Result<Ready> {
        #[cfg(feature = "cuda")]
        {
            let event = match &self.copier {
                Some(copier) => Some(copier.mark()?),
                None => None,
            };
            Ok(Ready { event })
        }
        #[cfg(not(feature = "cuda"))]
        Ok(Ready {})
    }

    /// `states` (f32, contiguous since before `ready`) as a host vector, in
    /// row-major order, once the device
    /// is past `ready`; work queued after `ready` goes on meanwhile.
    pub(crate) fn to_host(&self, ready: &Ready, states: &Tensor) -> Result<Vec<f32>> {
        #[cfg(feature = "cuda")]
        if let (Some(copier), Some(event)) = (&self.copier, &ready.event) {
            return copier.copy(event, states);
        }
        let _ = ready;
        states.flatten_all()?.to_vec1()
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::sync::Arc;

    use candle_core::cuda_backend::cudarc::driver::{CudaEvent, CudaStream};
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaDevice, Storage, Tensor};

    use super::Result;

    /// Candle's stream (where the kernels run) and a second one for copies.
    pub(super) struct Copier {
        compute: Arc<CudaStream>,
        copies: Arc<CudaStream>,
    }

    impl Copier {
        pub(super) fn new(device: &CudaDevice) -> Result<Copier> {
            let compute = device.cuda_stream();
            // SAFETY: refscore orders the two streams itself: a copy waits
            // for the event marked after its batch's kernels, and the host
            // waits for the copy before the states' memory can be freed
            // (a free is queued on the compute stream only when the tensor
            // is dropped, after `copy` returns). No other code here uses a
            // second stream, so cudarc's per-allocation events (created and
            // recorded for every tensor once a context has two streams)
            // would only cost time.
            unsafe { device.disable_event_tracking() };
            let copies = compute.context().new_stream().w()?;
            Ok(Copier { compute, copies })
        }

        pub(super) fn mark(&self) -> Result<CudaEvent> {
            self.compute.record_event(None).w()
        }

        pub(super) fn copy(&self, ready: &CudaEvent, states: &Tensor) -> Result<Vec<f32>> {
            // Made contiguous before `ready` was marked: a copy queued now
            // would come after later batches' kernels.
            if !states.is_contiguous() {
                candle_core::bail!("reading states back: the states are not contiguous")
            }
            let n = states.elem_count();
            let (storage, layout) = states.storage_and_layout();
            let Storage::Cuda(storage) = &*storage else {
                candle_core::bail!("reading states back: the tensor is not on the GPU")
            };
            let slice = storage.as_cuda_slice::<f32>()?;
            let start = layout.start_offset();
            let Some(view) = slice.try_slice(start..start + n) else {
                candle_core::bail!(
                    "reading states back: {n} values from {start} overrun the buffer"
                )
            };
            let mut host = vec![0f32; n];
            self.copies.wait(ready).w()?;
            self.copies.memcpy_dtoh(&view, &mut host).w()?;
            self.copies.synchronize().w()?;
            Ok(host)
        }
    }
}
