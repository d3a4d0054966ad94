//! The bf16 matrix products of `--precision bf16`: weights stored in bf16,
//! activations rounded to bf16 (nearest, ties to even) as they enter each
//! product, products accumulated in f32. Subnormal bf16 values are taken as
//! zero, as the `vdpbf16ps` instruction takes them.
//!
//! A product of two bf16 values is exact in f32, so the result differs from
//! the exact sum only by f32 rounding in the adds, and every CPU adds in one
//! order: the tile loop of [`super::dot`], with `vdpbf16ps` where the CPU has
//! AVX512-BF16 and the AVX-512 kernel path is in use, else with the same
//! instruction written lane by lane in plain Rust. So every path gives the
//! same bits (the portable path is slower than gemm would be, but gemm's
//! order would move end-to-end cosines by up to 1e-3 between CPUs).

use std::mem::MaybeUninit;

use candle_core::{Result, Tensor};

use super::dot::{self, Packed};
use super::products::{host_matrix, map_rows};

/// One linear layer's weight for the bf16 products: pairs of bf16, packed
/// for the tile loop.
pub(crate) struct Weight {
    out: usize,
    inp: usize,
    packed: Packed,
    rows: dot::Rows,
}

/// `v` as bf16 bits: nearest, ties to even (the `half` crate's
/// conversion); subnormals become zero. A hand-written integer-only form
/// was tried and measured no faster in the encoder bench (within 3%, AMD
/// EPYC Zen 5, run for real), so the library's stays.
#[inline(always)]
fn bits(v: f32) -> u16 {
    let b = half::bf16::from_f32(v).to_bits();
    if b & 0x7f80 == 0 {
        b & 0x8000
    } else {
        b
    }
}

/// The value of bf16 `bits` (tests).
#[cfg(test)]
fn value(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Pairs of bf16 (`row[2g]` low, `row[2g + 1]` high) over `out.len()`
/// pairs; values past the row are zero.
#[inline(always)]
fn pairs(row: &[f32], out: &mut [u32]) {
    dot::pack_groups::<2>(row, out, |v| bits(v) as u32);
}

impl Weight {
    /// Rounds `weight` (`out × in`, f32) to bf16 and packs it for the loop
    /// that runs on this CPU.
    pub(crate) fn new(weight: &Tensor) -> Result<Weight> {
        Ok(Weight::from_host(
            &host_matrix(weight)?,
            weight.dims2()?,
            dot::bf16_rows(),
        ))
    }

    pub(super) fn from_host(data: &[f32], (out, inp): (usize, usize), rows: dot::Rows) -> Weight {
        let groups = inp.div_ceil(2);
        let paired: Vec<Vec<u32>> = data
            .chunks_exact(inp)
            .map(|row| {
                let mut p = vec![0u32; groups];
                pairs(row, &mut p);
                p
            })
            .collect();
        let packed = Packed::new(out, groups, |o, g| paired[o][g]);
        Weight {
            out,
            inp,
            packed,
            rows,
        }
    }

    /// `x · weightᵀ` for `x`: `[n, in]` f32.
    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        map_rows(x, self.inp, self.out, |x, n| self.product(x, n))
    }

    /// The product of `n` rows of `x` (`n × in`), `n × out`.
    pub(super) fn product(&self, x: &[f32], n: usize) -> Vec<f32> {
        debug_assert_eq!(x.len(), n * self.inp);
        dot::product(x, self.inp, self.out, &self.packed, self.rows, self)
    }
}

/// Activations paired into bf16 bits before the tiles; the sums are f32
/// already.
impl dot::Conversions for Weight {
    type State = ();

    #[inline(always)]
    fn prepare(&self, x: &[f32], xp: &mut [u32]) {
        let groups = self.packed.groups;
        for (row, p) in x.chunks_exact(self.inp).zip(xp.chunks_exact_mut(groups)) {
            pairs(row, p);
        }
    }

    #[inline(always)]
    fn finish(&self, (): (), _: &[f32], raw: &[u32], y: &mut [MaybeUninit<f32>]) {
        let width = self.packed.width();
        for (yr, rr) in y.chunks_exact_mut(self.out).zip(raw.chunks_exact(width)) {
            for (y, &r) in yr.iter_mut().zip(rr) {
                y.write(f32::from_bits(r));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u64, spread: f32) -> Vec<f32> {
        dot::random(n, seed, 0.4, spread)
    }

    #[test]
    fn rounding_is_nearest_even_and_flushes_subnormals() {
        assert_eq!(bits(1.0), 0x3f80);
        // 1 + 2⁻⁸ is halfway between 1 and 1 + 2⁻⁷: ties go to even (1).
        assert_eq!(bits(1.0 + 1.0 / 256.0), 0x3f80);
        // 1 + 3·2⁻⁸ is halfway between 1 + 2⁻⁷ and 1 + 2⁻⁶: to even.
        assert_eq!(bits(1.0 + 3.0 / 256.0), 0x3f82);
        assert_eq!(bits(-2.5), 0xc020);
        assert_eq!(bits(1e-39), 0);
        assert_eq!(bits(-1e-39), 0x8000);
    }

    /// The tile loop (with the plain-Rust `vdpbf16ps`, the portable path)
    /// equals the f64 sum of the rounded values to f32 rounding, on shapes
    /// with row, block and pair tails; the loop this CPU runs gives the same
    /// bits.
    #[test]
    fn products_are_the_rounded_sums_in_one_order() {
        for &(n, inp, out) in &[(9, 37, 40), (4, 8, 32), (1, 3, 1), (13, 385, 70)] {
            let w = random(out * inp, 7, 2.0);
            let x = random(n * inp, 11, 5.0);
            let plain = Weight::from_host(&w, (out, inp), dot::rows_plain::<dot::lanes::Bf16>);
            let here = Weight::from_host(&w, (out, inp), dot::bf16_rows());
            let got = plain.product(&x, n);
            assert!(
                here.product(&x, n) == got,
                "n={n} in={inp} out={out}: paths differ"
            );
            for r in 0..n {
                for o in 0..out {
                    let exact: f64 = (0..inp)
                        .map(|k| {
                            value(bits(x[r * inp + k])) as f64 * value(bits(w[o * inp + k])) as f64
                        })
                        .sum();
                    let scale: f64 = (0..inp)
                        .map(|k| (x[r * inp + k] as f64 * w[o * inp + k] as f64).abs())
                        .sum();
                    let got = got[r * out + o] as f64;
                    assert!(
                        (got - exact).abs() <= 1e-6 * scale,
                        "{r},{o}: {got} vs {exact}"
                    );
                }
            }
        }
    }
}
