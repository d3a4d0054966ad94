//! The fused CPU kernels ([`crate::kernels`]) as Candle operations over a
//! layer's tensors: attention straight off the packed Q/K/V product, bias +
//! GELU in place, and bias + residual + layer norm in place. Shared by every
//! family built on [`super::transformer`]; the gated feed-forward's
//! activation ([`Glu`]) serves the padded families.

use candle_core::{CpuStorage, CustomOp1, DType, InplaceOp1, InplaceOp2, Layout, Shape, Tensor};
use rayon::prelude::*;

use crate::kernels::{
    self, AddNormParams, AttentionShape, Disentangled, DisentangledScratch, GateActivation,
    RelativeBias, ScoreBias,
};

type Result<T> = candle_core::Result<T>;

/// One "add bias and residual, then layer-normalise" step in host memory.
pub(super) struct HostNorm {
    pub bias: Vec<f32>,
    pub gamma: Vec<f32>,
    pub beta: Vec<f32>,
    pub eps: f32,
}

impl HostNorm {
    fn params(&self) -> AddNormParams<'_> {
        AddNormParams {
            bias: &self.bias,
            gamma: &self.gamma,
            beta: &self.beta,
            eps: self.eps,
        }
    }
}

/// A 1-D tensor as host memory.
pub(super) fn host(t: &Tensor) -> Result<Vec<f32>> {
    t.to_dtype(DType::F32)?.to_vec1()
}

/// Rows per parallel task in the row-wise kernels: enough work to amortise
/// the task, small enough to balance across threads.
const ROWS_PER_TASK: usize = 16;

/// Where a CPU tensor's data lies in its storage: f32 and contiguous only.
fn contiguous_f32(storage: &CpuStorage, layout: &Layout, what: &str) -> Result<(usize, usize)> {
    if !matches!(storage, CpuStorage::F32(_)) {
        candle_core::bail!("{what}: f32 only")
    }
    match layout.contiguous_offsets() {
        Some(range) => Ok(range),
        None => candle_core::bail!("{what}: contiguous input only"),
    }
}

/// The contiguous f32 data of a CPU tensor.
fn slice<'a>(storage: &'a CpuStorage, layout: &Layout, what: &str) -> Result<&'a [f32]> {
    let (start, end) = contiguous_f32(storage, layout, what)?;
    storage.as_slice::<f32>().map(|data| &data[start..end])
}

/// Mutable form of [`slice`].
fn slice_mut<'a>(
    storage: &'a mut CpuStorage,
    layout: &Layout,
    what: &str,
) -> Result<&'a mut [f32]> {
    let (start, end) = contiguous_f32(storage, layout, what)?;
    match storage {
        CpuStorage::F32(data) => Ok(&mut data[start..end]),
        _ => unreachable!("checked by contiguous_f32"),
    }
}

/// Self-attention of packed sequences, from the `[n, 3h]` Q/K/V product
/// (biases not yet added) to the `[n, h]` context; one task per sequence.
pub(super) struct Attention<'a> {
    pub shape: AttentionShape<'a>,
    pub lengths: &'a [usize],
    /// The family's relative-position bias, covering the longest sequence.
    pub bias: Option<RelativeBias<'a>>,
    /// DeBERTa's disentangled terms, computed per sequence from its own
    /// queries and keys (with `bias` unset).
    pub pairs: Option<&'a Disentangled>,
}

impl CustomOp1 for Attention<'_> {
    fn name(&self) -> &'static str {
        "refscore-attention"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let qkv = slice(storage, layout, self.name())?;
        let h = self.shape.heads * self.shape.head_dim;
        let n: usize = self.lengths.iter().sum();
        if qkv.len() != n * 3 * h {
            candle_core::bail!(
                "attention: expected {n}×{} values, got {}",
                3 * h,
                qkv.len()
            );
        }
        let mut out = vec![0f32; n * h];
        let mut tasks = Vec::with_capacity(self.lengths.len());
        let (mut q_rest, mut o_rest) = (qkv, out.as_mut_slice());
        for &len in self.lengths {
            let (q, qr) = q_rest.split_at(len * 3 * h);
            let (o, or) = o_rest.split_at_mut(len * h);
            tasks.push((q, o, len));
            (q_rest, o_rest) = (qr, or);
        }
        // Longest first, so a long sequence does not start last.
        tasks.sort_by_key(|t| std::cmp::Reverse(t.2));
        tasks.into_par_iter().for_each_init(
            || {
                (
                    kernels::AttentionScratch::default(),
                    Vec::new(),
                    DisentangledScratch::default(),
                )
            },
            |(scratch, pair_bias, pair_scratch), (q, o, len)| {
                if len == 0 {
                    return;
                }
                let bias = match (&self.bias, self.pairs) {
                    (Some(table), _) => Some(ScoreBias::Relative(table)),
                    (None, Some(pairs)) => {
                        pairs.fill(q, len, pair_bias, pair_scratch);
                        Some(ScoreBias::Pairs {
                            values: pair_bias,
                            len,
                        })
                    }
                    (None, None) => None,
                };
                kernels::attend_sequence(q, len, o, &self.shape, bias.as_ref(), scratch)
            },
        );
        Ok((CpuStorage::F32(out), Shape::from((n, h))))
    }
}

/// `x ← LayerNorm(x + bias + residual)` in place, row by row.
pub(super) struct AddNorm<'a>(pub &'a HostNorm);

impl InplaceOp2 for AddNorm<'_> {
    fn name(&self) -> &'static str {
        "refscore-add-norm"
    }

    fn cpu_fwd(
        &self,
        s1: &mut CpuStorage,
        l1: &Layout,
        s2: &CpuStorage,
        l2: &Layout,
    ) -> Result<()> {
        let x = slice_mut(s1, l1, self.name())?;
        let residual = slice(s2, l2, self.name())?;
        let params = self.0.params();
        let h = params.bias.len();
        if x.len() != residual.len() || x.len() % h != 0 {
            candle_core::bail!("add-norm: shapes do not match");
        }
        x.par_chunks_mut(ROWS_PER_TASK * h)
            .zip(residual.par_chunks(ROWS_PER_TASK * h))
            .for_each(|(x, r)| kernels::add_norm_rows(x, r, &params));
        Ok(())
    }
}

/// `x ← GELU(x + bias)` in place, row by row.
pub(super) struct BiasGelu<'a>(pub &'a [f32]);

impl InplaceOp1 for BiasGelu<'_> {
    fn name(&self) -> &'static str {
        "refscore-bias-gelu"
    }

    fn cpu_fwd(&self, storage: &mut CpuStorage, layout: &Layout) -> Result<()> {
        let x = slice_mut(storage, layout, self.name())?;
        let h = self.0.len();
        if x.len() % h != 0 {
            candle_core::bail!("bias-gelu: shapes do not match");
        }
        x.par_chunks_mut(ROWS_PER_TASK * h)
            .for_each(|x| kernels::bias_gelu_rows(x, self.0));
        Ok(())
    }
}

/// A gated feed-forward's middle: for `x` `[..., 2·inner]`, act(one half) ·
/// the other half, `[..., inner]`, in one pass (see
/// [`kernels::glu_rows`]).
pub(super) struct Glu {
    pub inner: usize,
    pub act: GateActivation,
    /// Whether the activation applies to the first half.
    pub act_first: bool,
}

impl CustomOp1 for Glu {
    fn name(&self) -> &'static str {
        "refscore-glu"
    }

    fn cpu_fwd(&self, storage: &CpuStorage, layout: &Layout) -> Result<(CpuStorage, Shape)> {
        let x = slice(storage, layout, self.name())?;
        let mut dims = layout.shape().dims().to_vec();
        if dims.last() != Some(&(2 * self.inner)) {
            candle_core::bail!("glu: expected a last dimension of {}", 2 * self.inner);
        }
        *dims.last_mut().expect("checked") = self.inner;
        let mut out = vec![0f32; x.len() / 2];
        let (inner, act, act_first) = (self.inner, self.act, self.act_first);
        out.par_chunks_mut(ROWS_PER_TASK * inner)
            .zip(x.par_chunks(ROWS_PER_TASK * 2 * inner))
            .for_each(|(o, x)| kernels::glu_rows(x, o, inner, act, act_first));
        Ok((CpuStorage::F32(out), Shape::from(dims)))
    }
}
