//! Copies a batch's token states from the device to the host.
//!
//! On CUDA the copy is queued on a stream of its own as soon as the batch's
//! kernels are, into page-locked host memory: it starts the moment the
//! kernels finish, runs beside the next batch's kernels, and the host only
//! waits for it when it pools the batch. On Candle's one stream a batch's
//! copy queued behind the kernels of the batch launched after it, so the
//! host waited for both and the GPU sat idle while the copy ran (an H100
//! call of docs/performance.md#gpu: 76% of the forward time spent waiting);
//! and a copy into pageable memory holds the host for its whole length. On
//! the CPU a copy is a plain read.

use std::ops::Deref;

use candle_core::{Device, Tensor};

type Result<T> = candle_core::Result<T>;

/// How states leave one device.
pub(crate) struct Readback {
    #[cfg(feature = "cuda")]
    copier: Option<cuda::Copier>,
}

/// A batch's states on their way to the host ([`Readback::start`]).
pub(crate) struct Copying {
    /// The states on the device: read by [`Readback::finish`] where no copy
    /// was queued, kept alive until the copies end where one was.
    states: Vec<Tensor>,
    #[cfg(feature = "cuda")]
    queued: Option<cuda::Queued>,
}

/// One tap's states on the host, `[Σ lengths, hidden]` row-major.
pub(crate) enum HostRows {
    /// Read into memory of its own.
    Owned(Vec<f32>),
    /// Copied into a page-locked buffer that goes back to the copier's pool
    /// when these rows are dropped.
    #[cfg(feature = "cuda")]
    Pinned(cuda::Lease),
}

impl Deref for HostRows {
    type Target = [f32];

    fn deref(&self) -> &[f32] {
        match self {
            HostRows::Owned(rows) => rows,
            #[cfg(feature = "cuda")]
            HostRows::Pinned(rows) => rows,
        }
    }
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

    /// Starts copying `states` (f32, contiguous, each the last thing queued
    /// for it on the device) to the host; returns without waiting where the
    /// device runs asynchronously.
    pub(crate) fn start(&self, states: Vec<Tensor>) -> Result<Copying> {
        #[cfg(feature = "cuda")]
        if let Some(copier) = &self.copier {
            let queued = copier.queue(&states)?;
            return Ok(Copying {
                states,
                queued: Some(queued),
            });
        }
        Ok(Copying {
            states,
            #[cfg(feature = "cuda")]
            queued: None,
        })
    }

    /// Waits for the copies `copying` started and hands over each tensor's
    /// values, in order.
    pub(crate) fn finish(&self, copying: Copying) -> Result<Vec<HostRows>> {
        #[cfg(feature = "cuda")]
        if let Some(queued) = copying.queued {
            let rows = queued.finish()?;
            // Only now may the states' device memory be freed.
            drop(copying.states);
            return Ok(rows.into_iter().map(HostRows::Pinned).collect());
        }
        copying
            .states
            .iter()
            .map(|s| Ok(HostRows::Owned(s.flatten_all()?.to_vec1()?)))
            .collect()
    }
}

#[cfg(feature = "cuda")]
mod cuda {
    use std::ops::Deref;
    use std::sync::{Arc, Mutex};

    use candle_core::cuda_backend::cudarc::driver::{
        result, CudaContext, CudaEvent, CudaStream, PinnedHostSlice,
    };
    use candle_core::cuda_backend::WrapErr;
    use candle_core::{CudaDevice, Storage, Tensor};

    use super::Result;

    /// Candle's stream (where the kernels run), a second one for copies,
    /// and the page-locked buffers the copies land in.
    pub(crate) struct Copier {
        compute: Arc<CudaStream>,
        copies: Arc<CudaStream>,
        pool: Arc<Pool>,
    }

    /// Page-locked host buffers not in use, kept because locking pages
    /// costs far more than a copy into pages already locked.
    pub(crate) struct Pool {
        context: Arc<CudaContext>,
        free: Mutex<Vec<PinnedHostSlice<f32>>>,
    }

    impl Drop for Pool {
        fn drop(&mut self) {
            // Freeing page-locked memory needs the context on this thread.
            let _ = self.context.bind_to_thread();
            if let Ok(free) = self.free.get_mut() {
                free.clear();
            }
        }
    }

    impl Pool {
        /// A buffer of at least `n` values: the smallest free one that
        /// holds them, or a new one of the next power of two (batches vary
        /// in size; a few sizes cover them all).
        fn take(&self, n: usize) -> Result<PinnedHostSlice<f32>> {
            let mut free = self.free.lock().expect("the pinned pool's lock");
            let best = free
                .iter()
                .enumerate()
                .filter(|(_, b)| b.len() >= n)
                .min_by_key(|(_, b)| b.len())
                .map(|(i, _)| i);
            if let Some(i) = best {
                return Ok(free.swap_remove(i));
            }
            // Smaller buffers would never serve again once batches grew.
            free.retain(|b| b.len() >= n);
            drop(free);
            self.context.bind_to_thread().w()?;
            // SAFETY: every value is written by a copy before it is read
            // (`Lease` exposes only the `n` values the copy wrote). Flags 0:
            // cached memory, which the host reads at full speed (cudarc's
            // default, write-combined, is slow to read).
            unsafe {
                self.context
                    .alloc_pinned_with_flags::<f32>(n.next_power_of_two(), 0)
            }
            .w()
        }

        fn give_back(&self, buffer: PinnedHostSlice<f32>) {
            if let Ok(mut free) = self.free.lock() {
                free.push(buffer);
            }
        }
    }

    /// A page-locked buffer whose first `len` values a finished copy wrote.
    pub(crate) struct Lease {
        buffer: Option<PinnedHostSlice<f32>>,
        ptr: *const f32,
        len: usize,
        pool: Arc<Pool>,
    }

    // SAFETY: the lease owns its buffer alone; the values behind `ptr` are
    // only read, and only after the copy that wrote them has finished.
    unsafe impl Send for Lease {}
    unsafe impl Sync for Lease {}

    impl Deref for Lease {
        type Target = [f32];

        fn deref(&self) -> &[f32] {
            // SAFETY: `ptr` points into `buffer`, which holds at least
            // `len` values, all written by the finished copy.
            unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
        }
    }

    impl Drop for Lease {
        fn drop(&mut self) {
            if let Some(buffer) = self.buffer.take() {
                self.pool.give_back(buffer);
            }
        }
    }

    /// One batch's copies, queued on the copy stream.
    pub(crate) struct Queued {
        /// Marked on the copy stream after the last of them.
        done: CudaEvent,
        /// Each tensor's buffer and how many values its copy writes.
        buffers: Vec<(PinnedHostSlice<f32>, usize)>,
        pool: Arc<Pool>,
    }

    impl Drop for Queued {
        fn drop(&mut self) {
            // A batch dropped unread (an error elsewhere): its buffers may
            // go back to the pool, and its states be freed, only once the
            // copies stop touching them.
            let _ = self.done.synchronize();
            for (buffer, _) in self.buffers.drain(..) {
                self.pool.give_back(buffer);
            }
        }
    }

    impl Queued {
        /// Waits for the copies and leases out their buffers.
        pub(super) fn finish(mut self) -> Result<Vec<Lease>> {
            self.done.synchronize().w()?;
            let buffers = std::mem::take(&mut self.buffers);
            Ok(buffers
                .into_iter()
                .map(|(mut buffer, len)| {
                    let ptr = buffer_ptr(&mut buffer);
                    Lease {
                        buffer: Some(buffer),
                        ptr,
                        len,
                        pool: self.pool.clone(),
                    }
                })
                .collect())
        }
    }

    /// Where a page-locked buffer's values start. cudarc's accessors wait
    /// on the buffer's own event, which nothing records here (event
    /// tracking is off: `Queued::done` orders the copies instead), so they
    /// return at once.
    fn buffer_ptr(buffer: &mut PinnedHostSlice<f32>) -> *mut f32 {
        buffer
            .as_mut_ptr()
            .expect("an unrecorded event is complete")
    }

    impl Copier {
        pub(super) fn new(device: &CudaDevice) -> Result<Copier> {
            let compute = device.cuda_stream();
            // SAFETY: refscore orders the two streams itself: a copy waits
            // for an event marked after its batch's kernels, and the host
            // waits for the copies (`Queued::done`) before the states'
            // memory can be freed (a free is queued on the compute stream
            // only when the tensor is dropped, after that wait). No other
            // code here uses a second stream, so cudarc's per-allocation
            // events (recorded and waited on for every tensor once a
            // context has two streams) would only cost time. A device
            // opened by `parse_device` has them off already; this covers
            // any other.
            unsafe { device.disable_event_tracking() };
            let context = compute.context().clone();
            let copies = context.new_stream().w()?;
            Ok(Copier {
                compute,
                copies,
                pool: Arc::new(Pool {
                    context,
                    free: Mutex::new(Vec::new()),
                }),
            })
        }

        /// Queues the copy of every tensor of `states` into a page-locked
        /// buffer, after the work queued on the compute stream so far.
        pub(super) fn queue(&self, states: &[Tensor]) -> Result<Queued> {
            let ready = self.compute.record_event(None).w()?;
            self.copies.wait(&ready).w()?;
            let mut queued = Queued {
                // Recorded after each copy below; until the first, a wait
                // on it returns at once (nothing is queued yet).
                done: self.copies.context().new_event(None).w()?,
                buffers: Vec::with_capacity(states.len()),
                pool: self.pool.clone(),
            };
            for states in states {
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
                let mut buffer = self.pool.take(n)?;
                let ptr = buffer_ptr(&mut buffer);
                // Pushed before the copy is queued, so that an error below
                // still waits for the copies already queued (`Queued`'s
                // drop) before the buffer is reused.
                queued.buffers.push((buffer, n));
                // SAFETY: the buffer holds at least `n` values and stays
                // out of the pool until `done` has passed.
                let host = unsafe { std::slice::from_raw_parts_mut(ptr, n) };
                let (src, _) = {
                    use candle_core::cuda_backend::cudarc::driver::DevicePtr;
                    view.device_ptr(&self.copies)
                };
                // SAFETY: `src` holds `n` f32 values written by kernels the
                // copy stream waits for (`ready`); the device memory lives
                // until `done` has passed (the caller keeps the tensors).
                unsafe { result::memcpy_dtoh_async(host, src, self.copies.cu_stream()) }.w()?;
                // Marked after each copy, so that `done` always covers every
                // copy queued so far, whatever fails next.
                queued.done.record(&self.copies).w()?;
            }
            Ok(queued)
        }
    }
}
