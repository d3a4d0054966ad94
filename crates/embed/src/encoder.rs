//! Batches through a model family's forward pass (packed, or padded to the
//! batch's longest text), and the tokenizer set up the way
//! sentence-transformers uses it (truncation at max_seq_length, no padding).

use candle_core::{DType, Device, Tensor};
use candle_nn::VarBuilder;
use refscore_core::Error;
use tokenizers::{Tokenizer, TruncationDirection, TruncationParams, TruncationStrategy};

use crate::family::{self, EncoderModel};
use crate::model::ModelFiles;
use crate::precision::Precision;
use crate::readback::{Copying, HostRows, Readback};

fn internal(context: &str) -> impl Fn(candle_core::Error) -> Error + '_ {
    move |e| Error::internal(format!("{context}: {e}"))
}

/// Loads `tokenizer.json` and replaces whatever truncation and padding it
/// bakes in (all-MiniLM-L6-v2's says 128 and fixed padding) with truncation
/// at `max_len` and no padding.
pub(crate) fn load_tokenizer(files: &ModelFiles, max_len: usize) -> Result<Tokenizer, Error> {
    let path = files.dir.join("tokenizer.json");
    let mut tok = Tokenizer::from_file(&path)
        .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
    tok.with_padding(None);
    tok.with_truncation(Some(TruncationParams {
        direction: TruncationDirection::Right,
        max_length: max_len,
        strategy: TruncationStrategy::LongestFirst,
        stride: 0,
    }))
    .map_err(|e| Error::config(format!("{}: {e}", path.display())))?;
    Ok(tok)
}

/// Most texts in one padded forward batch on the CPU (a model the fused
/// kernels do not cover): with texts sorted by length, a small group keeps
/// the lengths in a batch close, so little work goes to padding, while 64 ×
/// tens of tokens still makes matrices large enough for the matrix
/// products. The fused CPU path packs texts without padding and fills
/// `batch_tokens` instead.
const MAX_BATCH_TEXTS: usize = 64;

/// Tokens (padding included) and texts per forward batch on a GPU, at the
/// least: a GPU needs matrices far larger than the CPU's cache-sized
/// batches to be busy, and holds them easily (MiniLM's attention scores for
/// 32,768 tokens of 512-token texts take 800 MB). Chosen, not tuned: on an
/// H200 the GPU ran kernels about half the time at this size
/// (docs/performance.md#gpu).
const GPU_BATCH_TOKENS: usize = 32 * 1024;
const GPU_MAX_BATCH_TEXTS: usize = 512;

/// Tokens a scoring batch hands the encoder at once on the CPU
/// ([`crate::text_model::TextModel::chunk_tokens`]).
const CPU_CHUNK_TOKENS: usize = 64 * 1024;

/// Forward batches' worth of tokens a scoring batch hands a GPU encoder at
/// once. Texts are sorted by length within it, so the more batches it
/// spans, the closer the lengths within each padded batch: at 64 Ki tokens
/// (two GPU batches) the 100k-row nightly set ran 1.66 padded tokens per
/// real one on an H100 (docs/performance.md#gpu). The cost is host memory:
/// the chunk's f32 token states (768 MiB for MiniLM at 32 Ki-token batches).
const GPU_CHUNK_BATCHES: usize = 16;

/// How sequences sorted longest first are cut into forward batches on one
/// encoder: by a token budget, with no padding where the model packs, and
/// by the longest sequence times the count where it pads.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BatchPlan {
    budget: usize,
    max_texts: usize,
    packs: bool,
}

impl BatchPlan {
    /// How many of `lengths` (the sequences left, longest first) go into
    /// the next batch: at least one.
    pub(crate) fn next(&self, lengths: impl Iterator<Item = usize>) -> usize {
        let mut lengths = lengths.map(|l| l.max(1)).peekable();
        let Some(&longest) = lengths.peek() else {
            return 0;
        };
        if self.packs {
            // No padding: fill the token budget, whatever the lengths.
            let mut used = 0;
            lengths
                .take_while(|&l| {
                    used += l;
                    used <= self.budget
                })
                .count()
                .max(1)
        } else {
            (self.budget / longest)
                .clamp(1, self.max_texts)
                .min(lengths.count())
        }
    }
}

/// One batch queued on the encoder's device ([`Encoder::launch`]), not yet
/// read back ([`Encoder::read`]).
pub(crate) struct Launched {
    /// Each sequence's length, in the batch's order.
    lengths: Vec<usize>,
    /// How many taps were asked for.
    taps: usize,
    /// Each tap's packed f32 states on their way to the host; `None` when
    /// every sequence is empty.
    copying: Option<Copying>,
}

/// A batch's token states read back to the host ([`Encoder::read`]): each
/// tap's `[Σ lengths, hidden]` rows, sequence after sequence.
pub(crate) struct HostStates {
    lengths: Vec<usize>,
    /// Where each sequence's first row is.
    starts: Vec<usize>,
    hidden: usize,
    flat: Vec<HostRows>,
}

impl HostStates {
    /// How many sequences the batch held.
    pub(crate) fn len(&self) -> usize {
        self.lengths.len()
    }

    /// How many taps were read.
    pub(crate) fn taps(&self) -> usize {
        self.flat.len()
    }

    /// Sequence `k`'s states at tap `tap` (`len × hidden`, row-major).
    pub(crate) fn get(&self, k: usize, tap: usize) -> &[f32] {
        let h = self.hidden;
        &self.flat[tap][self.starts[k] * h..(self.starts[k] + self.lengths[k]) * h]
    }
}

/// A loaded encoder of any family on one device.
pub(crate) struct Encoder {
    model: Box<dyn EncoderModel>,
    device: Device,
    pub(crate) hidden: usize,
    pad_id: u32,
    readback: Readback,
}

impl Encoder {
    /// Loads the family `files` names from the config.json text they hold
    /// and the safetensors weights (memory-mapped).
    pub(crate) fn load(
        files: &ModelFiles,
        device: &Device,
        precision: Precision,
    ) -> Result<Encoder, Error> {
        let weights = files.dir.join("model.safetensors");
        // SAFETY: the weights file is memory-mapped read-only; refscore never
        // writes it, and a concurrent writer would be a user error.
        let vb = unsafe { VarBuilder::from_mmaped_safetensors(&[&weights], DType::F32, device) }
            .map_err(|e| Error::config(format!("{}: {e}", weights.display())))?;
        let model = family::load(&files.family, &files.config, vb, precision)
            .map_err(|e| Error::config(format!("{}: {}", weights.display(), e.message)))?;
        Ok(Encoder {
            hidden: model.hidden(),
            model,
            readback: Readback::new(device).map_err(internal("the device's copy stream"))?,
            device: device.clone(),
            pad_id: files.pad_token_id,
        })
    }

    /// Whether batches go through without padding (see
    /// [`EncoderModel::packs`]), so
    /// grouping texts of similar length no longer saves work.
    pub(crate) fn packs(&self) -> bool {
        self.model.packs()
    }

    /// The batches of this device: `batch_tokens` per batch (on a GPU at
    /// least [`GPU_BATCH_TOKENS`]), never fewer than one sequence of
    /// `max_len` tokens.
    pub(crate) fn batch_plan(&self, batch_tokens: usize, max_len: usize) -> BatchPlan {
        let (budget, max_texts) = if self.device.is_cpu() {
            (batch_tokens, MAX_BATCH_TEXTS)
        } else {
            (batch_tokens.max(GPU_BATCH_TOKENS), GPU_MAX_BATCH_TEXTS)
        };
        // A model without a length limit (T5's relative positions) plans
        // by the budget alone: a text longer than it goes in a batch alone.
        let floor = if max_len == usize::MAX { 0 } else { max_len };
        BatchPlan {
            budget: budget.max(floor),
            max_texts,
            packs: self.model.packs(),
        }
    }

    /// Most tokens a scoring batch hands this encoder at once (see
    /// [`GPU_CHUNK_BATCHES`]).
    pub(crate) fn chunk_tokens(&self, batch_tokens: usize, max_len: usize) -> usize {
        if self.device.is_cpu() {
            CPU_CHUNK_TOKENS
        } else {
            let plan = self.batch_plan(batch_tokens, max_len);
            (GPU_CHUNK_BATCHES * plan.budget).max(CPU_CHUNK_TOKENS)
        }
    }

    /// Number of layers (the deepest tap).
    pub(crate) fn layers(&self) -> usize {
        self.model.layers()
    }

    /// Queues one batch's forward pass (packed, or padded to its longest
    /// text) over `taps` (ascending layers, 0 = embeddings; `second`: for
    /// pairs of texts, where each sequence's second text starts, see
    /// [`EncoderModel::forward_packed`]) and returns without waiting for it
    /// where the device runs asynchronously (CUDA): the host can prepare
    /// and queue the next batch, or finish the previous one, while the
    /// device computes. [`Encoder::read`] waits for and fetches the states.
    pub(crate) fn launch(
        &self,
        seqs: &[&[u32]],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Launched, Error> {
        let lengths: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        if lengths.iter().all(|&l| l == 0) {
            return Ok(Launched {
                lengths,
                taps: taps.len(),
                copying: None,
            });
        }
        // Widened to f32 on the device: Candle's widening on the host runs
        // on one thread and cost more than the bytes it saves (measured on
        // an H100, docs/performance.md#gpu).
        let states = self.forward_on_device(seqs, second, taps)?;
        let copying = self
            .readback
            .start(states)
            .map_err(internal("queuing encoder output"))?;
        Ok(Launched {
            lengths,
            taps: taps.len(),
            copying: Some(copying),
        })
    }

    /// Waits for a launched batch's states to reach the host. On a GPU
    /// their copy was queued at launch and ran beside the batches launched
    /// after it ([`Readback`]).
    pub(crate) fn read(&self, launched: Launched) -> Result<HostStates, Error> {
        let Launched {
            lengths,
            taps,
            copying,
        } = launched;
        let flat = match copying {
            None => (0..taps).map(|_| HostRows::Owned(Vec::new())).collect(),
            Some(copying) => self
                .readback
                .finish(copying)
                .map_err(internal("reading encoder output"))?,
        };
        let mut starts = Vec::with_capacity(lengths.len());
        let mut start = 0;
        for &len in &lengths {
            starts.push(start);
            start += len;
        }
        Ok(HostStates {
            lengths,
            starts,
            hidden: self.hidden,
            flat,
        })
    }

    /// Runs one batch as [`Encoder::launch`] does, but leaves each tap's
    /// `[Σ lengths, hidden]` f32 states (sequence after sequence, padding
    /// removed) on the device: a caller that reads a few rows of them (a
    /// cross-encoder's head reads one per pair) then copies only those to
    /// the host. `seqs` must not all be empty.
    pub(crate) fn forward_on_device(
        &self,
        seqs: &[&[u32]],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Vec<Tensor>, Error> {
        self.queue(seqs, second, taps)?
            .iter()
            .map(|o| o.to_dtype(DType::F32)?.contiguous())
            .collect::<Result<_, _>>()
            .map_err(internal("reading encoder output"))
    }

    /// The forward pass of one batch, queued: each tap's
    /// `[Σ lengths, hidden]` states in the dtype the body ran in.
    fn queue(
        &self,
        seqs: &[&[u32]],
        second: Option<&[usize]>,
        taps: &[usize],
    ) -> Result<Vec<Tensor>, Error> {
        let b = seqs.len();
        let t = seqs.iter().map(|s| s.len()).max().unwrap_or(0);
        let lengths: Vec<usize> = seqs.iter().map(|s| s.len()).collect();
        if self.model.packs() {
            self.model
                .forward_packed(&seqs.concat(), &lengths, second, taps)
                .map_err(internal("encoder forward"))
        } else {
            let mut ids = vec![self.pad_id; b * t];
            for (k, s) in seqs.iter().enumerate() {
                ids[k * t..k * t + s.len()].copy_from_slice(s);
            }
            let ids = Tensor::from_vec(ids, (b, t), &self.device).map_err(internal("input ids"))?;
            self.model
                .forward_padded(&ids, &lengths, second, taps)
                .map_err(internal("encoder forward"))
        }
    }
}

/// A `--device` value's form: `cpu`, `cuda`, `cuda:N` or `auto`. Whether
/// this build and machine can serve it is [`parse_device`]'s question.
pub fn device_ordinal(spec: &str) -> Result<Option<usize>, String> {
    let bad = || format!("{spec}: expected cpu, cuda, cuda:N or auto");
    match spec {
        "cpu" | "auto" => Ok(None),
        _ => match spec.strip_prefix("cuda") {
            Some("") => Ok(Some(0)),
            Some(rest) => rest
                .strip_prefix(':')
                .and_then(|n| n.parse().ok())
                .map(Some)
                .ok_or_else(bad),
            None => Err(bad()),
        },
    }
}

/// Parses `--device`: `cpu`, `cuda`, `cuda:N` or `auto` (CUDA when compiled
/// in and available, else CPU).
pub fn parse_device(spec: &str) -> Result<Device, Error> {
    // A malformed value is a usage error (64); a well-formed one this build
    // or machine cannot serve is an environment error (78).
    let ordinal = device_ordinal(spec).map_err(|e| Error::usage(format!("--device {e}")))?;
    match (spec, ordinal) {
        ("auto", _) => Ok(if candle_core::utils::cuda_is_available() {
            open_cuda(0, spec).unwrap_or(Device::Cpu)
        } else {
            Device::Cpu
        }),
        (_, None) => Ok(Device::Cpu),
        (_, Some(ordinal)) => {
            if !candle_core::utils::cuda_is_available() {
                return Err(Error::config(format!(
                    "--device {spec}: this build has no CUDA support (rebuild with `--features cuda`) or no GPU is visible"
                )));
            }
            open_cuda(ordinal, spec)
        }
    }
}

/// GPU `ordinal`, set up for a run ([`keep_freed_memory`],
/// [`skip_allocation_events`]); `spec` is the `--device` value its errors
/// name.
fn open_cuda(ordinal: usize, spec: &str) -> Result<Device, Error> {
    let device = Device::new_cuda(ordinal)
        .and_then(|device| keep_freed_memory(&device).map(|()| device))
        .inspect(skip_allocation_events)
        .map_err(|e| Error::config(format!("--device {spec}: {e}")))?;
    Ok(device)
}

/// Stops cudarc from creating two CUDA events with every allocation (and
/// destroying them with every free): with event tracking on, which is its
/// default, each tensor Candle makes costs two `cuEventCreate` and two
/// `cuEventDestroy` calls on the host, a few hundred tensors a forward
/// batch, although the events are only ever used once a context has a
/// second stream. refscore orders its one extra stream itself
/// ([`crate::readback`]).
#[cfg(feature = "cuda")]
fn skip_allocation_events(device: &Device) {
    if let Device::Cuda(cuda) = device {
        // SAFETY: no tensor exists on the device yet, and the only second
        // stream refscore makes (the copy stream of `crate::readback`)
        // orders itself against Candle's with an event of its own.
        unsafe { cuda.disable_event_tracking() };
    }
}

/// Without CUDA compiled in there are no allocation events.
#[cfg(not(feature = "cuda"))]
fn skip_allocation_events(_: &Device) {}

/// Tells the CUDA driver to keep memory freed by the run in its pool rather
/// than hand it back to the system at every synchronisation. Candle
/// allocates each tensor from the device's default pool, whose release
/// threshold is 0: every batch read back (a synchronisation) returned the
/// batch's activations to the system, and the next batch mapped them again.
/// PyTorch keeps freed blocks in its own cache for the same reason.
#[cfg(feature = "cuda")]
fn keep_freed_memory(device: &Device) -> candle_core::Result<()> {
    use candle_core::cuda_backend::cudarc::driver::{result, sys};
    use candle_core::cuda_backend::WrapErr;
    let stream = device.as_cuda_device()?.cuda_stream();
    let context = stream.context();
    if !context.has_async_alloc() {
        // Plain allocations: no pool to configure.
        return Ok(());
    }
    context.bind_to_thread().w()?;
    let mut threshold = u64::MAX;
    // SAFETY: the device is the context's own; the release threshold is a
    // u64 attribute, and `threshold` outlives the call.
    unsafe {
        let pool = result::device::get_default_mem_pool(context.cu_device()).w()?;
        result::mem_pool::set_attribute(
            pool,
            sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD,
            (&mut threshold as *mut u64).cast(),
        )
        .w()?;
    }
    Ok(())
}

/// Without CUDA compiled in there is no device pool.
#[cfg(not(feature = "cuda"))]
fn keep_freed_memory(_: &Device) -> candle_core::Result<()> {
    Ok(())
}
