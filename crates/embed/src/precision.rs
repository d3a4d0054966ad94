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
//! | `int8`    | s8, one scale per output       | u8, one scale + zero per row  | i32, exact   |
//!
//! `fp32` is the default and runs exactly the code it ran before the option
//! existed. The kernels of `bf16` and `int8` live in
//! [`crate::kernels::bf16`] and [`crate::kernels::int8`]; this module only
//! holds the choice and a layer's weight in the chosen form.

use candle_core::{Result, Tensor};

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
}

impl Precision {
    /// Every precision, the reference first.
    pub const ALL: [Precision; 3] = [Precision::Fp32, Precision::Bf16, Precision::Int8];

    /// The name used by `--precision`, the config file, the summary and the
    /// result file's footer.
    pub fn name(self) -> &'static str {
        match self {
            Precision::Fp32 => "fp32",
            Precision::Bf16 => "bf16",
            Precision::Int8 => "int8",
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
