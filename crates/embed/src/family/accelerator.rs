//! What the padded path does differently on an accelerator (CUDA), where
//! Candle's broadcast additions are the slow step: Nsight Compute on an
//! H200 (docs/performance.md#gpu) put a bias or mask added across a batch
//! at three to four times the time per element of a same-shape addition,
//! and those additions together at 44% of MiniLM's kernel time, more than
//! its matrix products.
//! On the CPU nothing here changes a number: both forms are the plain ones.

use candle_core::{Module, Tensor};
use candle_nn::Linear;

type Result<T> = candle_core::Result<T>;

/// Columns appended to an input whose bias rides in the product: a column
/// of ones, then zeros so that each row stays 16-byte aligned for cuBLAS.
const FOLD_COLUMNS: usize = 4;

/// A linear map `x·Wᵀ + b`. On an accelerator the bias is folded into the
/// product (`[x, 1, 0, 0, 0]·[W, b, 0, 0, 0]ᵀ`): one matrix product and a
/// cheap copy of `x` instead of a product and a broadcast addition over the
/// whole output. The sums' order differs from `x·Wᵀ` then `+ b` by rounding
/// only (checked against the CPU by `scripts/bench/gpu.sh`).
pub(super) struct Affine {
    linear: Linear,
    /// `[out, in + FOLD_COLUMNS]`: the weight, the bias, zeros; on an
    /// accelerator and with a bias only.
    folded: Option<Tensor>,
}

impl Affine {
    /// `linear` as the device it lives on runs it best.
    pub(super) fn new(linear: Linear) -> Result<Affine> {
        let fold = !linear.weight().device().is_cpu();
        Affine::with_fold(linear, fold)
    }

    /// `linear`, its bias folded into the product when `fold`.
    fn with_fold(linear: Linear, fold: bool) -> Result<Affine> {
        let folded = match linear.bias() {
            Some(bias) if fold => {
                let weight = linear.weight();
                let (out, _) = weight.dims2()?;
                let zeros =
                    Tensor::zeros((out, FOLD_COLUMNS - 1), weight.dtype(), weight.device())?;
                Some(Tensor::cat(&[weight, &bias.reshape((out, 1))?, &zeros], 1)?)
            }
            _ => None,
        };
        Ok(Affine { linear, folded })
    }

    /// The map as loaded (its weight and bias), for the paths that prepare
    /// their own forms of it.
    pub(super) fn linear(&self) -> &Linear {
        &self.linear
    }
}

impl Module for Affine {
    /// `x · weightᵀ + bias` over the last dimension of `x`.
    fn forward(&self, x: &Tensor) -> Result<Tensor> {
        let Some(folded) = &self.folded else {
            return self.linear.forward(x);
        };
        let mut dims = x.dims().to_vec();
        let inp = dims.pop().unwrap_or(1);
        let rows = dims.iter().product::<usize>();
        let ones = Tensor::ones((rows, 1), x.dtype(), x.device())?;
        let zeros = Tensor::zeros((rows, FOLD_COLUMNS - 1), x.dtype(), x.device())?;
        let y = Tensor::cat(&[&x.reshape((rows, inp))?, &ones, &zeros], 1)?.matmul(&folded.t()?)?;
        dims.push(y.dim(1)?);
        y.reshape(dims)
    }
}

/// An additive attention mask that broadcasts to `[b, heads, t, t]`, made
/// that shape in memory on an accelerator (once a batch, so that each
/// layer's addition is a plain one); unchanged on the CPU.
pub(super) fn spread_mask(mask: Tensor, b: usize, heads: usize, t: usize) -> Result<Tensor> {
    if mask.device().is_cpu() {
        return Ok(mask);
    }
    spread(&mask, b, heads, t)
}

fn spread(mask: &Tensor, b: usize, heads: usize, t: usize) -> Result<Tensor> {
    mask.broadcast_as((b, heads, t, t))?.contiguous()
}

#[cfg(test)]
mod tests {
    use super::*;
    use candle_core::{Device, D};

    fn seeded(shape: &[usize], seed: u64) -> Tensor {
        let n: usize = shape.iter().product();
        // A small linear congruential sequence: values in [-1, 1), no crate needed.
        let mut state = seed;
        let values: Vec<f32> = (0..n)
            .map(|_| {
                state = state
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((state >> 40) as f32 / (1u64 << 23) as f32) - 1.0
            })
            .collect();
        Tensor::from_vec(values, shape, &Device::Cpu).unwrap()
    }

    /// The folded product is the plain one up to rounding, for inputs of
    /// any rank, so the accelerator's form computes the same map.
    #[test]
    fn folded_bias_gives_the_plain_map() {
        let linear = Linear::new(seeded(&[5, 7], 1), Some(seeded(&[5], 2)));
        let folded = Affine::with_fold(linear.clone(), true).unwrap();
        assert!(folded.folded.is_some());
        for x in [seeded(&[3, 7], 3), seeded(&[2, 4, 7], 4)] {
            let want = linear.forward(&x).unwrap();
            let got = folded.forward(&x).unwrap();
            assert_eq!(got.dims(), want.dims());
            let diff = (got - want).unwrap().abs().unwrap().flatten_all().unwrap();
            let worst = diff.max(D::Minus1).unwrap().to_scalar::<f32>().unwrap();
            assert!(worst < 1e-5, "folded and plain differ by {worst}");
        }
        // Without a bias there is nothing to fold.
        let plain = Affine::with_fold(Linear::new(seeded(&[5, 7], 1), None), true).unwrap();
        assert!(plain.folded.is_none());
    }

    /// A spread mask adds as the broadcast one does.
    #[test]
    fn spread_mask_adds_as_the_broadcast_one() {
        let mask = seeded(&[2, 1, 1, 3], 5);
        let scores = seeded(&[2, 4, 3, 3], 6);
        let spread = spread(&mask, 2, 4, 3).unwrap();
        assert!(spread.is_contiguous());
        let want = scores.broadcast_add(&mask).unwrap().flatten_all().unwrap();
        let got = (scores + spread).unwrap().flatten_all().unwrap();
        assert_eq!(
            got.to_vec1::<f32>().unwrap(),
            want.to_vec1::<f32>().unwrap()
        );
    }
}
