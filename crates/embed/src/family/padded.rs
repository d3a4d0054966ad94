//! What the families that run as plain Candle operations on padded batches
//! share (DeBERTa, GTE/NomicBERT, Qwen3): the argument checks, loading a
//! linear map or a layer norm, rotary tables, the padding mask, and the
//! fp32-only guard.

use candle_core::{Device, Tensor};
use candle_nn::{Linear, VarBuilder};

use crate::precision::Precision;

type Result<T> = candle_core::Result<T>;

/// Refuses a batch longer than the model's positions, or taps out of
/// order or past the last layer.
pub(super) fn check(t: usize, max_tokens: usize, taps: &[usize], layers: usize) -> Result<()> {
    if t > max_tokens {
        candle_core::bail!(
            "a sequence of {t} tokens is longer than the model's {max_tokens} positions"
        );
    }
    if taps.windows(2).any(|w| w[0] >= w[1]) || taps.last() > Some(&layers) {
        candle_core::bail!("layers {taps:?}: expected ascending, at most {layers}");
    }
    Ok(())
}

/// `Err` naming the family unless `precision` is fp32: these families
/// have no reduced-precision path.
pub(super) fn fp32_only(precision: Precision, family: &str) -> std::result::Result<(), String> {
    if precision == Precision::Fp32 {
        Ok(())
    } else {
        Err(format!(
            "--precision {}: the {family} family runs in fp32 only",
            precision.name()
        ))
    }
}

/// A linear map `inp → out`, with its bias when `bias`.
pub(super) fn linear(vb: VarBuilder, inp: usize, out: usize, bias: bool) -> Result<Linear> {
    let b = if bias {
        Some(vb.get(out, "bias")?)
    } else {
        None
    };
    Ok(Linear::new(vb.get((out, inp), "weight")?, b))
}

/// A layer norm over the last dimension.
pub(super) struct LayerNorm {
    weight: Tensor,
    bias: Tensor,
    eps: f32,
}

impl LayerNorm {
    pub(super) fn load(vb: VarBuilder, size: usize, eps: f64) -> Result<LayerNorm> {
        Ok(LayerNorm {
            weight: vb.get(size, "weight")?,
            bias: vb.get(size, "bias")?,
            eps: eps as f32,
        })
    }

    pub(super) fn forward(&self, x: &Tensor) -> Result<Tensor> {
        candle_nn::ops::layer_norm(&x.contiguous()?, &self.weight, &self.bias, self.eps)
    }
}

/// The additive key mask of a padded batch, `[b, 1, 1, t]`: 0 for a
/// text's tokens, `f32::MIN` past its end.
pub(super) fn key_mask(lengths: &[usize], t: usize, device: &Device) -> Result<Tensor> {
    let mask: Vec<f32> = lengths
        .iter()
        .flat_map(|&l| (0..t).map(move |k| if k < l { 0.0 } else { f32::MIN }))
        .collect();
    Tensor::from_vec(mask, (lengths.len(), 1, 1, t), device)
}

/// Rotary positions' frequencies (half rotation, transformers' default
/// rope), computed in f32 as torch does.
pub(super) struct Rope {
    inv_freq: Vec<f32>,
}

impl Rope {
    /// For heads of width `dim` and base `theta`.
    pub(super) fn new(theta: f64, dim: usize) -> Rope {
        let theta = theta as f32;
        Rope {
            inv_freq: (0..dim / 2)
                .map(|i| 1.0 / theta.powf((2 * i) as f32 / dim as f32))
                .collect(),
        }
    }

    /// cos and sin of positions `0..t`, `[t, dim/2]` each, for Candle's
    /// `rope`.
    pub(super) fn tables(&self, t: usize, device: &Device) -> Result<(Tensor, Tensor)> {
        let half = self.inv_freq.len();
        let angles: Vec<f32> = (0..t)
            .flat_map(|p| self.inv_freq.iter().map(move |f| p as f32 * f))
            .collect();
        let cos = angles.iter().map(|a| a.cos()).collect();
        let sin = angles.iter().map(|a| a.sin()).collect();
        Ok((
            Tensor::from_vec(cos, (t, half), device)?,
            Tensor::from_vec(sin, (t, half), device)?,
        ))
    }
}
