//! The int8 matrix products of `--precision int8`.
//!
//! - Weights: s8, one scale per output: `max |w| / L`, with the levels L
//!   (64..=127) chosen per output so that the two weights of every input
//!   pair (2m, 2m + 1) with the same sign add up to at most 128 in
//!   magnitude ([`quantise_weights`]). That keeps `vpmaddubsw`'s i16 pair
//!   sums exact. On all-MiniLM-L6-v2 the median output keeps 101 levels
//!   (a tenth of them 83 or fewer), and 2,000 nightly rows' cosines moved
//!   from fp32 by p99 1.38e-2, against 1.34e-2 with 127 levels everywhere.
//! - Activations: quantised per row at run time to u8 with a scale and a
//!   zero point over the row's range (0 always included, so 0 is exact).
//! - Accumulation: i32, exact. `y = (Σ q_x·q_w − zero·Σ q_w) · scale_x ·
//!   scale_w`, the dequantisation done as each product is written out (the
//!   bias is added by the fused kernel that follows each product).
//!
//! Three paths compute the same integers, so they give the same bits:
//! - AVX-512 VNNI (`vpdpbusd`), when the CPU has it and the AVX-512 kernel
//!   path is in use (groups of 4 bytes);
//! - AVX2 `vpmaddubsw`, then `vpmaddwd` by ones, on every other SIMD kernel
//!   path (the same groups of 4 bytes; exact by the weights' pair limit);
//! - portable: the integer values as f32 through gemm's f32 product, in
//!   chunks of [`CHUNK`] inputs, small enough that every partial sum is an
//!   integer below 2²⁴ and so exact in f32 whatever the order of the adds.

use std::mem::MaybeUninit;

use candle_core::{Result, Tensor};

#[cfg(target_arch = "x86_64")]
use super::dot::Instruction;
use super::dot::{self, Packed, Rows};
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
    /// Packed for a tile loop (`vpdpbusd` or `vpmaddubsw`): groups of 4 s8
    /// values, and the loop to run.
    Tiles { packed: Packed, rows: Rows },
}

/// Which loop computes a product's exact sums, and so how its weights are
/// laid out.
#[derive(Clone, Copy)]
pub(crate) enum Layout {
    /// Values for gemm's f32 product (the portable path).
    Values,
    /// Groups of 4 bytes, for `vpdpbusd` or `vpmaddubsw` tiles (or their
    /// emulations).
    Quads(Rows),
    /// Groups of 4 bytes as [`Layout::Quads`], their number per row padded
    /// to whole AMX tile rows, for `tdpbusd` tiles (the loop from
    /// `amx::tiles`).
    #[cfg(target_arch = "x86_64")]
    Amx(Rows),
}

impl Layout {
    /// The fastest layout this CPU and kernel path run.
    pub(crate) fn here() -> Layout {
        #[cfg(target_arch = "x86_64")]
        {
            if let Some(rows) = super::amx::tiles() {
                return Layout::Amx(rows);
            }
            if Instruction::Vnni.usable() {
                return Layout::Quads(dot::vnni_rows());
            }
            if let Some(rows) = dot::maddubs_rows() {
                return Layout::Quads(rows);
            }
        }
        Layout::Values
    }

    /// The tile loop's name: the summary's `int8_tiles`, and measurements
    /// (`kernels::speed`).
    pub(crate) fn name(self) -> &'static str {
        match self {
            Layout::Values => "gemm on integers",
            #[cfg(target_arch = "x86_64")]
            Layout::Amx(_) => "tdpbusd (AMX)",
            #[cfg(target_arch = "x86_64")]
            Layout::Quads(_) if Instruction::Vnni.usable() => "vpdpbusd",
            Layout::Quads(_) => "vpmaddubsw",
        }
    }
}

/// 1.5·2²³: adding it to a float of magnitude below 2²² leaves no fraction
/// bits, and the integer in the low mantissa bits.
const MAGIC: f32 = 12_582_912.0;

/// Round to nearest, ties to even, for |v| < 2²²: adding and taking away
/// [`MAGIC`] leaves no fraction bits. Plain adds, so loops over it vectorise.
#[inline(always)]
fn round(v: f32) -> f32 {
    (v + MAGIC) - MAGIC
}

/// The scale and zero point of one row of activations, from the row's
/// range with 0 included.
#[inline(always)]
fn row_params(row: &[f32]) -> (f32, i32) {
    let (lo, hi) = row_range(row);
    let scale = if hi > lo { (hi - lo) / 255.0 } else { 1.0 };
    (scale, round(-lo / scale) as i32)
}

/// The smallest and largest value of `row` and 0 (a NaN is skipped). On
/// the AVX-512 path with its own instructions: LLVM compiled the loop of
/// [`row_range_lanes`] there to lane shuffles and masked moves, 8% of an
/// int8 run's samples on AMX (Intel Xeon, lscpu family 6, model 167).
#[inline(always)]
fn row_range(row: &[f32]) -> (f32, f32) {
    #[cfg(target_arch = "x86_64")]
    if super::active() == super::KernelPath::Avx512 {
        // SAFETY: the AVX-512 path is only chosen where the CPU has its
        // features, AVX-512F among them.
        return unsafe { row_range_avx512(row) };
    }
    row_range_lanes(row)
}

/// [`row_range`] with `vminps` and `vmaxps` over 16 lanes: `min(c, lo)` is
/// `c < lo ? c : lo`, the compare-and-select of [`row_range_lanes`], so a
/// NaN is skipped the same way; the lanes are then folded as there.
///
/// # Safety
/// The CPU must have AVX-512F.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
unsafe fn row_range_avx512(row: &[f32]) -> (f32, f32) {
    use std::arch::x86_64::*;
    let (mut lo, mut hi) = (_mm512_setzero_ps(), _mm512_setzero_ps());
    let (whole, tail) = row.as_chunks::<16>();
    for c in whole {
        // SAFETY: 16 readable values.
        let c = unsafe { _mm512_loadu_ps(c.as_ptr()) };
        lo = _mm512_min_ps(c, lo);
        hi = _mm512_max_ps(c, hi);
    }
    let (mut los, mut his) = ([0f32; 16], [0f32; 16]);
    // SAFETY: 16 writable values each.
    unsafe {
        _mm512_storeu_ps(los.as_mut_ptr(), lo);
        _mm512_storeu_ps(his.as_mut_ptr(), hi);
    }
    let lo = tail.iter().chain(&los).fold(0f32, |a, &v| a.min(v));
    let hi = tail.iter().chain(&his).fold(0f32, |a, &v| a.max(v));
    (lo, hi)
}

/// [`row_range`] in 16 lanes of plain Rust, so the loop vectorises (the
/// result is the same in any order).
#[inline(always)]
fn row_range_lanes(row: &[f32]) -> (f32, f32) {
    const L: usize = 16;
    let (mut lo, mut hi) = ([0f32; L], [0f32; L]);
    let chunks = row.chunks_exact(L);
    let tail = chunks.remainder();
    for c in chunks {
        for i in 0..L {
            // Compare and select, not f32::min/max: those were compiled to
            // scalar code with NaN checks. The same values either way (a NaN
            // is skipped by both; the minimum starts at 0 so a signed zero
            // changes neither scale nor zero point).
            lo[i] = if c[i] < lo[i] { c[i] } else { lo[i] };
            hi[i] = if c[i] > hi[i] { c[i] } else { hi[i] };
        }
    }
    let lo = tail.iter().chain(&lo).fold(0f32, |a, &v| a.min(v));
    let hi = tail.iter().chain(&hi).fold(0f32, |a, &v| a.max(v));
    (lo, hi)
}

/// One activation quantised: `round(v / scale) + zero`, clamped to 0..=255,
/// read from the mantissa bits (a float-to-int `as` does not vectorise).
#[inline(always)]
fn byte(v: f32, inv: f32, zero: f32) -> u32 {
    ((round(v * inv) + zero).clamp(0.0, 255.0) + MAGIC).to_bits() & 0xff
}

/// `row` quantised with `(scale, zero)` into `out` (u8 values).
fn quantise_row(row: &[f32], (scale, zero): (f32, i32), out: &mut [u8]) {
    let (inv, zero) = (1.0 / scale, zero as f32);
    for (q, &v) in out.iter_mut().zip(row) {
        *q = byte(v, inv, zero) as u8;
    }
}

/// `row` quantised with `(scale, zero)` as groups of 4 u8 (first value
/// lowest), as `vpdpbusd` and `vpmaddubsw` take them; values past the row
/// are zero.
#[inline(always)]
fn quantise_quads(row: &[f32], (scale, zero): (f32, i32), out: &mut [u32]) {
    let (inv, zero) = (1.0 / scale, zero as f32);
    dot::pack_groups::<4>(row, out, |v| byte(v, inv, zero));
}

/// The most two weights of an input pair with the same sign may add up to
/// in magnitude: with u8 activations (≤ 255) a pair's two products then
/// sum to at most 255 · 128 = 32,640, inside `vpmaddubsw`'s i16 (a pair
/// with opposite signs stays within 255 · 127).
const PAIR_LIMIT: i32 = 128;

/// One output's weights (`row`) quantised into `q`, returning the scale:
/// `max |w| / L` for levels L in 64..=127 found by bisection such that no
/// input pair (2m, 2m + 1) of the same sign exceeds [`PAIR_LIMIT`]
/// (64 levels always qualify: each value is then at most 64). Every path
/// uses these values, so all compute the same integers.
fn quantise_weights(row: &[f32], q: &mut [i8]) -> f32 {
    let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
    if max == 0.0 {
        q.fill(0);
        return 1.0;
    }
    let fill = |levels: i32, q: &mut [i8]| {
        let scale = max / levels as f32;
        // `round` is round_ties_even for these magnitudes, and vectorises
        // (round_ties_even called libm's rintf per value).
        for (q, &v) in q.iter_mut().zip(row) {
            *q = round(v / scale).clamp(-127.0, 127.0) as i8;
        }
        q.chunks_exact(2).all(|p| {
            let (a, b) = (p[0] as i32, p[1] as i32);
            a * b <= 0 || a.abs() + b.abs() <= PAIR_LIMIT
        })
    };
    let (mut fits, mut lo, mut hi) = (64, 65, 127);
    while lo <= hi {
        let mid = (lo + hi) / 2;
        if fill(mid, q) {
            fits = mid;
            lo = mid + 1;
        } else {
            hi = mid - 1;
        }
    }
    let within = fill(fits, q);
    debug_assert!(within);
    max / fits as f32
}

impl Weight {
    /// Quantises `weight` (`out × in`, f32) and lays it out for the path
    /// that runs on this CPU.
    pub(crate) fn new(weight: &Tensor) -> Result<Weight> {
        Ok(Weight::from_host(
            &host_matrix(weight)?,
            weight.dims2()?,
            Layout::here(),
        ))
    }

    /// The weight quantised and laid out as `layout` says.
    pub(super) fn from_host(data: &[f32], (out, inp): (usize, usize), layout: Layout) -> Weight {
        let mut q = vec![0i8; out * inp];
        let mut scales = Vec::with_capacity(out);
        let mut sums = Vec::with_capacity(out);
        for (row, qr) in data.chunks_exact(inp).zip(q.chunks_exact_mut(inp)) {
            scales.push(quantise_weights(row, qr));
            sums.push(qr.iter().map(|&v| v as i32).sum());
        }
        // The weights as groups of 4 bytes (two's complement, first value
        // lowest; zero past the row), `groups` of them per output.
        let quads = |groups: usize| {
            Packed::new(out, groups, |o, g| {
                let byte = |k: usize| if k < inp { q[o * inp + k] as u8 } else { 0 };
                u32::from_le_bytes([
                    byte(4 * g),
                    byte(4 * g + 1),
                    byte(4 * g + 2),
                    byte(4 * g + 3),
                ])
            })
        };
        let form = match layout {
            Layout::Quads(rows) => Form::Tiles {
                packed: quads(inp.div_ceil(4)),
                rows,
            },
            #[cfg(target_arch = "x86_64")]
            Layout::Amx(rows) => Form::Tiles {
                packed: quads(inp.div_ceil(4).next_multiple_of(super::amx::GROUPS)),
                rows,
            },
            Layout::Values => Form::Values(q.iter().map(|&v| v as f32).collect()),
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

    /// `y = (Σ q_x·q_w − zero·Σ q_w) · scale_x · scale_w` for one row of
    /// exact sums `acc`.
    #[inline(always)]
    fn dequantise(&self, (scale, zero): (f32, i32), acc: &[u32], y: &mut [MaybeUninit<f32>]) {
        for (((y, &a), &sum), &ws) in y.iter_mut().zip(acc).zip(&self.sums).zip(&self.scales) {
            y.write((a as i32 - zero * sum) as f32 * (scale * ws));
        }
    }

    /// The product of `n` rows of `x` (`n × in`), `n × out`.
    pub(super) fn product(&self, x: &[f32], n: usize) -> Vec<f32> {
        if n == 0 {
            return Vec::new();
        }
        let (inp, out) = (self.inp, self.out);
        match &self.form {
            Form::Values(w) => {
                let params: Vec<(f32, i32)> = x.chunks_exact(inp).map(row_params).collect();
                let acc = self.portable(x, n, &params, w);
                let mut y: Vec<f32> = Vec::with_capacity(n * out);
                for ((yr, ar), &p) in y.spare_capacity_mut()[..n * out]
                    .chunks_exact_mut(out)
                    .zip(acc.chunks_exact(out))
                    .zip(&params)
                {
                    self.dequantise(p, ar, yr);
                }
                // SAFETY: `n` rows of `out`, each written whole above.
                unsafe { y.set_len(n * out) };
                y
            }
            Form::Tiles { packed, rows } => dot::product(
                x,
                inp,
                out,
                packed,
                *rows,
                &Tiled {
                    weight: self,
                    packed,
                },
            ),
        }
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
            x_times_wt(&xq[k0..], k, n, kc, &w[k0..], k, self.out, &mut part, true);
            for (a, &p) in acc.iter_mut().zip(&part) {
                *a = (*a as i32 + p as i32) as u32;
            }
        }
        acc
    }
}

/// The tiles' conversions: each row quantised to groups of u8 values with
/// its own scale and zero point before, the exact sums dequantised after.
struct Tiled<'a> {
    weight: &'a Weight,
    packed: &'a Packed,
}

impl dot::Conversions for Tiled<'_> {
    type State = Vec<(f32, i32)>;

    #[inline(always)]
    fn prepare(&self, x: &[f32], xq: &mut [u32]) -> Vec<(f32, i32)> {
        // A plain loop: an iterator adapter here was not inlined, and so
        // ran at baseline SIMD.
        let groups = self.packed.groups;
        let mut params = Vec::with_capacity(x.len() / self.weight.inp);
        for (row, q) in x
            .chunks_exact(self.weight.inp)
            .zip(xq.chunks_exact_mut(groups))
        {
            let p = row_params(row);
            quantise_quads(row, p, q);
            params.push(p);
        }
        params
    }

    #[inline(always)]
    fn finish(&self, params: Vec<(f32, i32)>, _: &[f32], raw: &[u32], y: &mut [MaybeUninit<f32>]) {
        let (out, width) = (self.weight.out, self.packed.width());
        for ((yr, rr), &p) in y
            .chunks_exact_mut(out)
            .zip(raw.chunks_exact(width))
            .zip(&params)
        {
            self.weight.dequantise(p, &rr[..out], yr);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn random(n: usize, seed: u64, spread: f32) -> Vec<f32> {
        dot::random(n, seed, 0.3, spread)
    }

    /// The AVX-512 range of a row is the lanes' one, bit for bit, with
    /// NaNs, signed zeros, all-negative and all-positive rows and tails.
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx512_row_range_is_the_lanes_one() {
        if !std::is_x86_feature_detected!("avx512f") {
            eprintln!("no AVX-512F here: the AVX-512 row range is not run");
            return;
        }
        let mut rows: Vec<Vec<f32>> = [1, 15, 16, 17, 48, 385]
            .iter()
            .enumerate()
            .map(|(i, &n)| random(n, 30 + i as u64, 4.0))
            .collect();
        rows.push(vec![-0.0; 20]);
        rows.push((0..33).map(|k| -1.0 - k as f32).collect());
        rows.push((0..33).map(|k| 1.0 + k as f32).collect());
        let mut nan = random(40, 9, 3.0);
        nan[3] = f32::NAN;
        nan[37] = f32::NAN;
        rows.push(nan);
        for row in &rows {
            // SAFETY: the CPU has AVX-512F (checked above).
            let (lo, hi) = unsafe { row_range_avx512(row) };
            let (want_lo, want_hi) = row_range_lanes(row);
            assert_eq!(
                (lo.to_bits(), hi.to_bits()),
                (want_lo.to_bits(), want_hi.to_bits()),
                "row of {}",
                row.len()
            );
        }
    }

    /// The packed layout and tiling (run with the plain-Rust `vpdpbusd`)
    /// give exactly the products of the portable path, on shapes with row,
    /// block and group tails, and the portable integers are the true sums.
    #[test]
    fn packed_tiles_match_the_portable_integers() {
        for &(n, inp, out) in &[
            (9, 37, 40),
            (4, 8, 32),
            (1, 3, 1),
            (13, 600, 70),
            (70, 96, 50),
        ] {
            let w = random(out * inp, 7, 2.0);
            let x = random(n * inp, 11, 5.0);
            let portable = Weight::from_host(&w, (out, inp), Layout::Values);
            let want = portable.product(&x, n);
            let mut layouts = vec![
                (
                    "vpdpbusd emulated",
                    Layout::Quads(dot::rows_plain::<dot::lanes::Vnni>),
                ),
                (
                    "vpmaddubsw emulated",
                    Layout::Quads(dot::rows_plain::<dot::lanes::MaddUbs>),
                ),
            ];
            #[cfg(target_arch = "x86_64")]
            if let Some(rows) = dot::maddubs_rows() {
                layouts.push(("vpmaddubsw", Layout::Quads(rows)));
            }
            #[cfg(target_arch = "x86_64")]
            if let Some(rows) = super::super::amx::tiles() {
                layouts.push(("tdpbusd (AMX)", Layout::Amx(rows)));
            }
            layouts.push((Layout::here().name(), Layout::here()));
            for (name, layout) in layouts {
                let packed = Weight::from_host(&w, (out, inp), layout);
                assert!(
                    packed.product(&x, n) == want,
                    "{name}: n={n} in={inp} out={out}"
                );
            }
            // The groups hold the bytes of the portable quantisation.
            let params: Vec<_> = x.chunks_exact(inp).map(row_params).collect();
            let mut q = vec![0u8; inp];
            let mut g = vec![0u32; inp.div_ceil(4)];
            for r in 0..n {
                quantise_row(&x[r * inp..][..inp], params[r], &mut q);
                quantise_quads(&x[r * inp..][..inp], params[r], &mut g);
                let bytes: Vec<u8> = g.iter().flat_map(|v| v.to_le_bytes()).collect();
                assert_eq!(&bytes[..inp], &q[..], "row {r}");
                assert!(bytes[inp..].iter().all(|&b| b == 0));
            }
            // And the integers are the true sums.
            let Form::Values(values) = &portable.form else {
                unreachable!()
            };
            let sums = portable.portable(&x, n, &params, values);
            for r in 0..n {
                quantise_row(&x[r * inp..][..inp], params[r], &mut q);
                for o in 0..out {
                    let exact: i64 = (0..inp)
                        .map(|k| q[k] as i64 * values[o * inp + k] as i64)
                        .sum();
                    assert_eq!(sums[r * out + o] as i32 as i64, exact);
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
        let y = Weight::from_host(&w, (out, inp), Layout::Values).product(&x, n);
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

    /// The weights never let a same-sign pair pass the limit, keep 127
    /// levels where no pair comes near it, and lose only as many as the
    /// worst pair needs.
    #[test]
    fn weights_keep_every_pair_within_the_limit() {
        let pairs_fit = |q: &[i8]| {
            q.chunks_exact(2).all(|p| {
                let (a, b) = (p[0] as i32, p[1] as i32);
                a * b <= 0 || a.abs() + b.abs() <= PAIR_LIMIT
            })
        };
        let mut levels = Vec::new();
        for seed in 0..40 {
            // Skewed (mostly one sign) and heavy-tailed rows.
            let mut row = dot::random(385, seed, 0.2, 1.0);
            if seed % 2 == 1 {
                row.iter_mut().for_each(|v| *v = *v * *v * *v);
            }
            let mut q = vec![0i8; row.len()];
            let scale = quantise_weights(&row, &mut q);
            assert!(pairs_fit(&q), "seed {seed}");
            let max = row.iter().fold(0f32, |m, v| m.max(v.abs()));
            levels.push((max / scale).round() as i32);
            for (&v, &q) in row.iter().zip(&q) {
                assert!(
                    (v - q as f32 * scale).abs() <= 0.5001 * scale,
                    "seed {seed}"
                );
            }
        }
        assert!(levels.iter().all(|l| (64..=127).contains(l)));
        assert!(
            levels.iter().any(|&l| l < 127),
            "no row needed fewer levels"
        );
        // Signs alternating: no pair can saturate, so all 127 levels, and
        // the values of a plain max/127 quantisation.
        let row: Vec<f32> = (0..64)
            .map(|i| {
                if i % 2 == 0 {
                    1.0 + i as f32
                } else {
                    -0.5 * i as f32
                }
            })
            .collect();
        let mut q = vec![0i8; row.len()];
        let scale = quantise_weights(&row, &mut q);
        assert_eq!(scale, 63.0 / 127.0);
        // One big pair: its two values may add up to 128 at most.
        let mut row = vec![0.01f32; 16];
        row[4] = 1.0;
        row[5] = 0.9;
        let scale = quantise_weights(&row, &mut q[..16]);
        assert!(pairs_fit(&q[..16]));
        assert!(
            q[4] as i32 + q[5] as i32 >= 127,
            "{:?}, scale {scale}",
            &q[..16]
        );
        // An all-zero row.
        assert_eq!(quantise_weights(&[0.0; 6], &mut q[..6]), 1.0);
        assert!(q[..6].iter().all(|&v| v == 0));
    }
}
