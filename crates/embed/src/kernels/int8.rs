//! The int8 matrix products of `--precision int8`.
//!
//! - Weights: s8 in −127..=127, one scale per output (`max |w| / 127`).
//! - Activations: quantised per row at run time to u8 with a scale and a
//!   zero point over the row's range (0 always included, so 0 is exact).
//! - Accumulation: i32, exact. `y = (Σ q_x·q_w − zero·Σ q_w) · scale_x ·
//!   scale_w`, the dequantisation done as each product is written out (the
//!   bias is added by the fused kernel that follows each product).
//!
//! Two paths compute the same integers, so they give the same bits:
//! - AVX-512 VNNI (`vpdpbusd`), when the CPU has it and the AVX-512 kernel
//!   path is in use;
//! - portable: the integer values as f32 through gemm's f32 product, in
//!   chunks of [`CHUNK`] inputs, small enough that every partial sum is an
//!   integer below 2²⁴ and so exact in f32 whatever the order of the adds.

use candle_core::{Result, Tensor};

use super::dot::{self, Instruction, Packed};
use super::products::{host_matrix, map_rows, x_times_wt};

/// Inputs per exact f32 product: 512 · 255 · 127 < 2²⁴.
const CHUNK: usize = 512;

/// One linear layer's weight for the int8 products.
pub(crate) struct Weight {
    out: usize,
    inp: usize,
    /// One scale per output.
    scales: Vec<f32>,
    /// Σ of each output's quantised weights, for the activations' zero point.
    sums: Vec<i32>,
    form: Form,
}

enum Form {
    /// The quantised weights as f32 (`out × in`), for gemm.
    Values(Vec<f32>),
    /// Packed for `vpdpbusd`: groups of 4 s8.
    Vnni(Packed),
}

/// Round to nearest, ties to even, for |v| < 2²²: adding and taking away
/// 1.5·2²³ leaves no fraction bits. Plain adds, so loops over it vectorise.
#[inline(always)]
fn round(v: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0;
    (v + MAGIC) - MAGIC
}

/// The scale and zero point of one row of activations.
fn row_params(row: &[f32]) -> (f32, i32) {
    let (lo, hi) = row
        .iter()
        .fold((0f32, 0f32), |(lo, hi), &v| (lo.min(v), hi.max(v)));
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    (scale, round(-lo / scale) as i32)
}

/// `row` quantised with `(scale, zero)` into `out` (u8 values).
fn quantise_row(row: &[f32], (scale, zero): (f32, i32), out: &mut [u8]) {
    let inv = 1.0 / scale;
    let zero = zero as f32;
    for (q, &v) in out.iter_mut().zip(row) {
        *q = (round(v * inv) + zero).clamp(0.0, 255.0) as u8;
    }
}

impl Weight {
    /// Quantises `weight` (`out × in`, f32) and lays it out for the path
    /// that runs on this CPU.
    pub(crate) fn new(weight: &Tensor) -> Result<Weight> {
        Ok(Weight::from_host(
            &host_matrix(weight)?,
            weight.dims2()?,
            Instruction::Vnni.usable(),
        ))
    }

    fn from_host(data: &[f32], (out, inp): (usize, usize), packed: bool) -> Weight {
        let mut q = vec![0i8; out * inp];
        let mut scales = Vec::with_capacity(out);
        let mut sums = Vec::with_capacity(out);
        for (row, qr) in data.chunks_exact(inp).zip(q.chunks_exact_mut(inp)) {
            let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            let scale = if max > 0.0 { max / 127.0 } else { 1.0 };
            for (q, &v) in qr.iter_mut().zip(row) {
                *q = (v / scale).round_ties_even().clamp(-127.0, 127.0) as i8;
            }
            scales.push(scale);
            sums.push(qr.iter().map(|&v| v as i32).sum());
        }
        let form = if packed {
            Form::Vnni(Packed::new(out, inp.div_ceil(4), |o, g| {
                let at = |i: usize| {
                    let k = 4 * g + i;
                    if k < inp {
                        q[o * inp + k] as u8 as u32
                    } else {
                        0
                    }
                };
                at(0) | at(1) << 8 | at(2) << 16 | at(3) << 24
            }))
        } else {
            Form::Values(q.iter().map(|&v| v as f32).collect())
        };
        Weight {
            out,
            inp,
            scales,
            sums,
            form,
        }
    }

    /// `x · weightᵀ` for `x`: `[n, in]` f32.
    pub(crate) fn apply(&self, x: &Tensor) -> Result<Tensor> {
        map_rows(x, self.inp, self.out, |x, n| self.product(x, n))
    }

    /// The product of `n` rows of `x` (`n × in`), `n × out`.
    fn product(&self, x: &[f32], n: usize) -> Vec<f32> {
        if n == 0 {
            return Vec::new();
        }
        let params: Vec<(f32, i32)> = x.chunks_exact(self.inp).map(row_params).collect();
        let acc = match &self.form {
            Form::Values(w) => self.portable(x, n, &params, w),
            Form::Vnni(w) => self.vnni(x, n, &params, w),
        };
        let mut y = vec![0f32; n * self.out];
        for ((yr, ar), &(scale, zero)) in y
            .chunks_exact_mut(self.out)
            .zip(acc.chunks_exact(self.out))
            .zip(&params)
        {
            for (((y, &a), &sum), &ws) in yr.iter_mut().zip(ar).zip(&self.sums).zip(&self.scales) {
                *y = (a as i32 - zero * sum) as f32 * (scale * ws);
            }
        }
        y
    }

    /// The exact i32 sums through gemm's f32 product, chunk by chunk.
    fn portable(&self, x: &[f32], n: usize, params: &[(f32, i32)], w: &[f32]) -> Vec<u32> {
        let k = self.inp;
        let mut bytes = vec![0u8; k];
        let mut xq = vec![0f32; n * k];
        for ((row, qr), &p) in x.chunks_exact(k).zip(xq.chunks_exact_mut(k)).zip(params) {
            quantise_row(row, p, &mut bytes);
            qr.iter_mut().zip(&bytes).for_each(|(q, &b)| *q = b as f32);
        }
        let mut acc = vec![0u32; n * self.out];
        let mut part = vec![0f32; n * self.out];
        for k0 in (0..k).step_by(CHUNK) {
            let kc = CHUNK.min(k - k0);
            x_times_wt(&xq[k0..], k, n, kc, &w[k0..], k, self.out, &mut part);
            for (a, &p) in acc.iter_mut().zip(&part) {
                *a = (*a as i32 + p as i32) as u32;
            }
        }
        acc
    }

    /// The rows of `x` quantised and packed as `groups` groups of 4 u8 each
    /// (the last group zero-padded), as `vpdpbusd` takes them.
    fn quantised_groups(&self, x: &[f32], params: &[(f32, i32)], groups: usize) -> Vec<u32> {
        let mut xq = vec![0u32; params.len() * groups];
        let mut bytes = vec![0u8; groups * 4];
        for ((row, qr), &p) in x
            .chunks_exact(self.inp)
            .zip(xq.chunks_exact_mut(groups))
            .zip(params)
        {
            quantise_row(row, p, &mut bytes);
            for (q, b) in qr.iter_mut().zip(bytes.chunks_exact(4)) {
                *q = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            }
        }
        xq
    }

    /// The i32 sums with `vpdpbusd` (only built where `Instruction::Vnni.usable()`).
    fn vnni(&self, x: &[f32], n: usize, params: &[(f32, i32)], w: &Packed) -> Vec<u32> {
        let xq = self.quantised_groups(x, params, w.groups);
        let mut acc = dot::product(&xq, n, w, |x, w, o| {
            #[cfg(target_arch = "x86_64")]
            // SAFETY: this form is only built when the CPU has AVX-512F and
            // VNNI (`Instruction::Vnni.usable()`).
            unsafe {
                dot::rows_vnni(x, w, o)
            }
            #[cfg(not(target_arch = "x86_64"))]
            {
                let _ = (x, w, o);
                unreachable!("the VNNI form is only built on x86-64")
            }
        });
        // Keep only the real outputs of each row.
        let width = w.width();
        if width != self.out {
            acc = acc
                .chunks_exact(width)
                .flat_map(|r| &r[..self.out])
                .copied()
                .collect();
        }
        acc
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u64, spread: f32) -> Vec<f32> {
        dot::random(n, seed, 0.3, spread)
    }

    /// The packed layout and tiling (run with an emulated `vpdpbusd`) give
    /// exactly the integers of the portable path, on shapes with row,
    /// block and group tails.
    #[test]
    fn packed_tiles_match_the_portable_integers() {
        for &(n, inp, out) in &[(9, 37, 40), (4, 8, 32), (1, 3, 1), (13, 600, 70)] {
            let w = random(out * inp, 7, 2.0);
            let x = random(n * inp, 11, 5.0);
            let portable = Weight::from_host(&w, (out, inp), false);
            let packed = Weight::from_host(&w, (out, inp), true);
            let params: Vec<_> = x.chunks_exact(inp).map(row_params).collect();
            let Form::Values(values) = &portable.form else {
                unreachable!()
            };
            let want = portable.portable(&x, n, &params, values);
            let Form::Vnni(p) = &packed.form else {
                unreachable!()
            };
            // The same activations as `Weight::vnni`, through the emulation.
            let xq = packed.quantised_groups(&x, &params, p.groups);
            let raw = dot::product(&xq, n, p, dot::rows_emulated::<dot::emulated::Vnni>);
            let got: Vec<u32> = raw
                .chunks_exact(p.width())
                .flat_map(|r| &r[..out])
                .copied()
                .collect();
            assert_eq!(got, want, "n={n} in={inp} out={out}");
            // And the integers are the true sums.
            for r in 0..n {
                for o in 0..out {
                    let mut q = vec![0u8; inp];
                    quantise_row(&x[r * inp..][..inp], params[r], &mut q);
                    let exact: i64 = (0..inp)
                        .map(|k| q[k] as i64 * values[o * inp + k] as i64)
                        .sum();
                    assert_eq!(want[r * out + o] as i32 as i64, exact);
                }
            }
        }
    }

    /// Dequantised products stay close to the f32 product.
    #[test]
    fn product_approximates_f32() {
        let (n, inp, out) = (6, 384, 48);
        let w = random(out * inp, 3, 0.2);
        let x = random(n * inp, 5, 4.0);
        let y = Weight::from_host(&w, (out, inp), false).product(&x, n);
        for r in 0..n {
            for o in 0..out {
                let exact: f32 = (0..inp).map(|k| x[r * inp + k] * w[o * inp + k]).sum();
                let norm: f32 = (0..inp)
                    .map(|k| (x[r * inp + k] * w[o * inp + k]).abs())
                    .sum();
                assert!((y[r * out + o] - exact).abs() <= 0.02 * norm, "{r},{o}");
            }
        }
    }
}
