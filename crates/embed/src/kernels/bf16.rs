//! The bf16 matrix products of `--precision bf16`: weights stored in bf16,
//! activations rounded to bf16 (nearest, ties to even) as they enter each
//! product, products accumulated in f32. Subnormal bf16 values are taken as
//! zero, as the `vdpbf16ps` instruction takes them.
//!
//! A product of two bf16 values is exact in f32, so the result differs from
//! the exact sum only by f32 rounding in the adds. Two paths:
//! - AVX-512 BF16 (`vdpbf16ps`), when the CPU has it and the AVX-512 kernel
//!   path is in use;
//! - portable: the rounded values as f32 through gemm's f32 product.
//!
//! They add in different orders, so they agree to f32 rounding (~1e-7
//! relative), not bit for bit.

use candle_core::{Result, Tensor};

use super::dot::{self, Instruction, Packed};
use super::products::{host_matrix, map_rows, x_times_wt};

/// One linear layer's weight for the bf16 products.
pub(crate) struct Weight {
    out: usize,
    inp: usize,
    form: Form,
}

enum Form {
    /// The bf16 weights as f32 (`out × in`), for gemm.
    Values(Vec<f32>),
    /// Packed for `vdpbf16ps`: pairs of bf16.
    Pairs(Packed),
}

/// `v` as bf16 bits: nearest, ties to even; subnormals become zero.
#[inline(always)]
fn bits(v: f32) -> u16 {
    let b = half::bf16::from_f32(v).to_bits();
    if b & 0x7f80 == 0 {
        b & 0x8000
    } else {
        b
    }
}

/// The value of bf16 `bits`.
#[inline(always)]
fn value(bits: u16) -> f32 {
    f32::from_bits((bits as u32) << 16)
}

/// Pairs of bf16 (`row[2g]` low, `row[2g + 1]` high) over `groups` pairs;
/// a missing last value is zero.
fn pairs(row: &[f32], out: &mut [u32]) {
    for (g, p) in out.iter_mut().enumerate() {
        let at = |k: usize| row.get(k).map_or(0, |&v| bits(v) as u32);
        *p = at(2 * g) | at(2 * g + 1) << 16;
    }
}

impl Weight {
    /// Rounds `weight` (`out × in`, f32) to bf16 and lays it out for the
    /// path that runs on this CPU.
    pub(crate) fn new(weight: &Tensor) -> Result<Weight> {
        Ok(Weight::from_host(
            &host_matrix(weight)?,
            weight.dims2()?,
            Instruction::Bf16.usable(),
        ))
    }

    fn from_host(data: &[f32], (out, inp): (usize, usize), packed: bool) -> Weight {
        let form = if packed {
            let groups = inp.div_ceil(2);
            let rows: Vec<Vec<u32>> = data
                .chunks_exact(inp)
                .map(|row| {
                    let mut p = vec![0u32; groups];
                    pairs(row, &mut p);
                    p
                })
                .collect();
            Form::Pairs(Packed::new(out, groups, |o, g| rows[o][g]))
        } else {
            Form::Values(data.iter().map(|&v| value(bits(v))).collect())
        };
        Weight { out, inp, form }
    }

    /// `x · weightᵀ` for `x`: `[n, in]` f32.
    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        map_rows(x, self.inp, self.out, |x, n| self.product(x, n))
    }

    /// The `n` rows of `x` as `groups` bf16 pairs each, as `vdpbf16ps`
    /// takes them.
    fn paired_rows(&self, x: &[f32], n: usize, groups: usize) -> Vec<u32> {
        let mut xp = vec![0u32; n * groups];
        for (row, p) in x.chunks_exact(self.inp).zip(xp.chunks_exact_mut(groups)) {
            pairs(row, p);
        }
        xp
    }

    /// The product of `n` rows of `x` (`n × in`), `n × out`.
    fn product(&self, x: &[f32], n: usize) -> Vec<f32> {
        let mut y = vec![0f32; n * self.out];
        match &self.form {
            Form::Values(w) => {
                let xr: Vec<f32> = x.iter().map(|&v| value(bits(v))).collect();
                x_times_wt(&xr, self.inp, n, self.inp, w, self.inp, self.out, &mut y);
            }
            Form::Pairs(w) => {
                let xp = self.paired_rows(x, n, w.groups);
                let raw = dot::product(&xp, n, w, |x, w, o| {
                    #[cfg(target_arch = "x86_64")]
                    // SAFETY: this form is only built when the CPU has
                    // AVX-512F and BF16 (`Instruction::Bf16.usable()`).
                    unsafe {
                        dot::rows_bf16(x, w, o)
                    }
                    #[cfg(not(target_arch = "x86_64"))]
                    {
                        let _ = (x, w, o);
                        unreachable!("the BF16 form is only built on x86-64")
                    }
                });
                for (yr, rr) in y
                    .chunks_exact_mut(self.out)
                    .zip(raw.chunks_exact(w.width()))
                {
                    for (y, &r) in yr.iter_mut().zip(rr) {
                        *y = f32::from_bits(r);
                    }
                }
            }
        }
        y
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

    /// The packed layout and tiling (run with an emulated `vdpbf16ps`)
    /// agree with the portable path to f32 rounding, on shapes with row,
    /// block and pair tails; both equal the f64 sum of the rounded values.
    #[test]
    fn packed_tiles_match_the_portable_product() {
        for &(n, inp, out) in &[(9, 37, 40), (4, 8, 32), (1, 3, 1), (13, 385, 70)] {
            let w = random(out * inp, 7, 2.0);
            let x = random(n * inp, 11, 5.0);
            let portable = Weight::from_host(&w, (out, inp), false).product(&x, n);
            let packed = Weight::from_host(&w, (out, inp), true);
            let Form::Pairs(p) = &packed.form else {
                unreachable!()
            };
            let xp = packed.paired_rows(&x, n, p.groups);
            let raw = dot::product(&xp, n, p, dot::rows_emulated::<dot::emulated::Bf16>);
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
                    let got = f32::from_bits(raw[r * p.width() + o]) as f64;
                    let port = portable[r * out + o] as f64;
                    assert!(
                        (got - exact).abs() <= 1e-6 * scale,
                        "packed {r},{o}: {got} vs {exact}"
                    );
                    assert!(
                        (port - exact).abs() <= 1e-6 * scale,
                        "portable {r},{o}: {port} vs {exact}"
                    );
                }
            }
        }
    }
}
