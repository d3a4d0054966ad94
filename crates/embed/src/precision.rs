//! `--precision`: the number format of the linear maps inside the encoder's
//! layers (Q/K/V, attention output, feed-forward in and out; a family's
//! gated or separate forms of these alike). Everything between the products
//! — attention scores and softmax, activations, norms, rotary positions,
//! pooling, BERTScore matching — stays f32 in every precision, as do the
//! embeddings and DeBERTa's relative-position projections.
//!
//! | precision | weights                        | activations at a product      | accumulation |
//! |-----------|--------------------------------|-------------------------------|--------------|
//! | `fp32`    | f32                            | f32                           | f32          |
//! | `bf16`    | bf16 (round to nearest even)   | rounded to bf16               | f32          |
//! | `int8`    | s8, one scale per output (1)   | u8, one scale + zero per row  | i32, exact   |
//!
//! (1) 64 to 127 levels per output, so that no pair of same-sign weights
//! passes 128 (see [`crate::kernels::int8`]).
//!
//! On a GPU (`--device cuda`) `bf16` and `fp16` mean something wider: the
//! BERT-shaped body (BERT, RoBERTa/XLM-R, MPNet, DistilBERT) runs its layers
//! in that format end to end, as PyTorch's half-precision forward does —
//! tensor-core products, with layer norm and softmax accumulated in f32
//! inside Candle's kernels — and the other families run their linear maps
//! in it (the activations rounded at each product, the output widened back
//! to f32). Embeddings, pooling and BERTScore matching stay f32. `fp16` is
//! a GPU format only; `int8` is a CPU format only.
//!
//! `fp32` is the default and runs exactly the code it ran before the option
//! existed. The kernels of `bf16` and `int8` live in
//! [`crate::kernels::bf16`] and [`crate::kernels::int8`]; this module only
//! holds the choice and a layer's weight in the chosen form.

use candle_core::{DType, Device, Result, Tensor};

use crate::kernels::{bf16, int8};

/// The number format of the encoder's matrix products (see the module docs).
/// Exists so a user can trade a measured, bounded deviation from `fp32` for
/// speed on CPUs with bf16 or int8 dot-product instructions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Precision {
    /// f32 everywhere: the reference numbers.
    #[default]
    Fp32,
    /// bf16 weights and activations at the products, f32 accumulation.
    Bf16,
    /// s8 weights, u8 activations quantised per row at run time, exact
    /// integer accumulation, dequantised to f32.
    Int8,
    /// IEEE half precision on a GPU (see the module docs); refused on the
    /// CPU, which has no fast f16 products.
    Fp16,
}

impl Precision {
    /// Every precision, the reference first.
    pub const ALL: [Precision; 4] = [
        Precision::Fp32,
        Precision::Bf16,
        Precision::Int8,
        Precision::Fp16,
    ];

    /// The name used by `--precision`, the config file, the summary and the
    /// result file's footer.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
            Precision::Fp16 => "fp16",
        }
    }

    /// How run fingerprints and cache keys record the precision: its name,
    /// and for `int8` the form of its weights too, since that changed the
    /// values (levels limited per input pair): an int8 run or cache entry
    /// made with the earlier weights must not be continued or reused.
    pub fn fingerprint_text(self) -> &'static str {
        match self {
            Precision::Int8 => "int8 (weight pairs within 128)",
            other => other.name(),
        }
    }

    /// The number format a layer's tensors take on `device`: f32 on the
    /// CPU (whose reduced precisions live in [`Projection`]), the half
    /// format asked for on an accelerator. `Err` names a precision the
    /// device cannot run.
    pub(crate) fn device_dtype(self, device: &Device) -> Result<DType> {
        match (self, device.is_cpu()) {
            (Precision::Fp16, true) => candle_core::bail!(
                "--precision fp16 runs on a GPU only (--device cuda); on the CPU use bf16 or int8"
            ),
            (Precision::Int8, false) => {
                candle_core::bail!(
                    "--precision int8 runs on the CPU only; on a GPU use bf16 or fp16"
                )
            }
            (_, true) | (Precision::Fp32, false) => Ok(DType::F32),
            (Precision::Bf16, false) => Ok(DType::BF16),
            (Precision::Fp16, false) => Ok(DType::F16),
        }
    }

    /// The precision called `name`, if any.
    pub fn from_name(name: &str) -> Option<Precision> {
        Precision::ALL.into_iter().find(|p| p.name() == name)
    }
}

/// One linear layer's weight (`out × in`), held in the form its precision's
/// product needs. The bias is not here: the fused kernel after each product
/// adds it.
pub(crate) enum Projection {
    Fp32(Tensor),
    Bf16(bf16::Weight),
    Int8(int8::Weight),
}

impl Projection {
    /// `weight` (`out × in`, f32, on the CPU) prepared for `precision`.
    pub(crate) fn new(weight: &Tensor, precision: Precision) -> Result<Projection> {
        Ok(match precision {
            Precision::Fp32 => Projection::Fp32(weight.clone()),
            Precision::Bf16 => Projection::Bf16(bf16::Weight::new(weight)?),
            Precision::Int8 => Projection::Int8(int8::Weight::new(weight)?),
            Precision::Fp16 => {
                Precision::Fp16.device_dtype(weight.device())?;
                candle_core::bail!("--precision fp16: no CPU form of a product")
            }
        })
    }

    /// `x · weightᵀ`: `[n, in]` → `[n, out]`, f32.
    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        match self {
            Projection::Fp32(w) => x.matmul(&w.t()?),
            Projection::Bf16(w) => w.apply(x),
            Projection::Int8(w) => w.apply(x),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The CPU keeps f32 tensors in every precision it runs (its reduced
    /// products live in [`Projection`]) and refuses fp16 by name with the
    /// formats it has; fp16 has no CPU product at all.
    #[test]
    fn the_cpu_runs_f32_tensors_and_refuses_fp16() {
        let cpu = Device::Cpu;
        for p in [Precision::Fp32, Precision::Bf16, Precision::Int8] {
            assert_eq!(p.device_dtype(&cpu).unwrap(), DType::F32, "{p:?}");
        }
        let err = Precision::Fp16.device_dtype(&cpu).unwrap_err().to_string();
        assert!(err.contains("--precision fp16 runs on a GPU only"), "{err}");
        assert!(err.contains("bf16 or int8"), "{err}");
        let w = Tensor::zeros((4, 8), DType::F32, &cpu).unwrap();
        let err = Projection::new(&w, Precision::Fp16)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("runs on a GPU only"), "{err}");
        assert_eq!(Precision::from_name("fp16"), Some(Precision::Fp16));
        assert_eq!(Precision::Fp16.name(), "fp16");
    }
}
