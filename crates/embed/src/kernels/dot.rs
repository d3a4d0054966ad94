//! The register-tiled product loop of the AVX-512 dot-product instructions
//! (`vpdpbusd` for int8, `vdpbf16ps` for bf16), shared by both precisions.
//!
//! Both instructions take, in each of 16 32-bit lanes, a *group* of narrow
//! values (4 u8/s8 or 2 bf16), multiply them pairwise and add the sum into
//! the lane's accumulator. So a weight matrix (`out × in`) is packed as
//! blocks of 16 outputs; within a block, one 64-byte line per input group
//! holds that group for each of the 16 outputs. A row of activations is a
//! run of 32-bit groups, each broadcast to all lanes. A tile of [`ROWS`]
//! rows × [`BLOCKS`] blocks keeps its accumulators in registers while the
//! inputs stream by.
//!
//! The loop is written once, over [`DotUnit`]: the instruction's semantics.
//! Tests run it with a plain-Rust emulation of each instruction, so the
//! packing and tiling are checked on every CPU; the AVX-512 units are that
//! same loop with the real instruction.

use rayon::prelude::*;

/// The dot-product instructions the AVX-512 tiles use.
#[derive(Clone, Copy)]
pub(crate) enum Instruction {
    /// `vpdpbusd` (AVX512-VNNI).
    Vnni,
    /// `vdpbf16ps` (AVX512-BF16).
    Bf16,
}

impl Instruction {
    /// Whether the tiles with this instruction run here: the CPU has it and
    /// the AVX-512 kernel path is in use (`REFSCORE_KERNELS` can turn them
    /// off, so the portable path can be tested on any CPU).
    pub(crate) fn usable(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            super::active() == super::KernelPath::Avx512
                && match self {
                    Instruction::Vnni => std::is_x86_feature_detected!("avx512vnni"),
                    Instruction::Bf16 => std::is_x86_feature_detected!("avx512bf16"),
                }
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }
}

/// Lanes of one accumulator: one AVX-512 register of 32-bit values.
pub(crate) const LANES: usize = 16;

/// Rows in a full tile.
const ROWS: usize = 4;

/// Blocks of 16 outputs in a full tile.
const BLOCKS: usize = 2;

/// Rows per parallel task: enough to amortise the task and reuse each
/// weight line from L1/L2 across tiles.
const ROWS_PER_TASK: usize = 32;

/// A weight matrix packed for a dot-product instruction (see the module
/// docs): `blocks × groups` lines of [`LANES`] 32-bit groups.
pub(crate) struct Packed {
    lines: Vec<u32>,
    /// Input groups per row (`in` rounded up to whole groups).
    pub groups: usize,
    /// Blocks of [`LANES`] outputs (`out` rounded up to whole blocks).
    pub blocks: usize,
}

impl Packed {
    /// Packs `out` rows of `groups` 32-bit groups each (`group(o, g)`);
    /// outputs past `out` are zero.
    pub(crate) fn new(out: usize, groups: usize, group: impl Fn(usize, usize) -> u32) -> Packed {
        let blocks = out.div_ceil(LANES);
        let mut lines = vec![0u32; blocks * groups * LANES];
        for (b, block) in lines.chunks_exact_mut(groups * LANES).enumerate() {
            for (g, line) in block.chunks_exact_mut(LANES).enumerate() {
                for (lane, v) in line.iter_mut().enumerate() {
                    let o = b * LANES + lane;
                    if o < out {
                        *v = group(o, g);
                    }
                }
            }
        }
        Packed {
            lines,
            groups,
            blocks,
        }
    }

    /// Output columns of a product row (`blocks × LANES`).
    pub(crate) fn width(&self) -> usize {
        self.blocks * LANES
    }

    fn line(&self, block: usize, group: usize) -> *const u32 {
        self.lines[(block * self.groups + group) * LANES..].as_ptr()
    }
}

/// One dot-product instruction: `acc[lane] += Σ x.group · w[lane].group`.
pub(crate) trait DotUnit {
    /// An accumulator register.
    type Acc: Copy;
    /// A loaded line of weights.
    type Line: Copy;

    /// # Safety
    /// The CPU must have the unit's features (all unsafe fns of the trait).
    unsafe fn zero() -> Self::Acc;
    /// # Safety
    /// `p` must point to [`LANES`] readable values.
    unsafe fn load(p: *const u32) -> Self::Line;
    /// # Safety
    /// As [`DotUnit::zero`].
    unsafe fn dot(acc: Self::Acc, x: u32, w: Self::Line) -> Self::Acc;
    /// Writes the lanes' raw 32-bit patterns.
    ///
    /// # Safety
    /// As [`DotUnit::zero`].
    unsafe fn store(acc: Self::Acc, out: &mut [u32]);
}

/// `out[r][lane of block b] = Σ_g x[r][g] · w[b][g]` (raw accumulator
/// bits) for `R` rows and `B` blocks starting at `block`.
///
/// # Safety
/// The CPU must have `U`'s features.
#[inline(always)]
unsafe fn tile<U: DotUnit, const R: usize, const B: usize>(
    x: &[u32],
    w: &Packed,
    block: usize,
    out: &mut [u32],
) {
    let groups = w.groups;
    let width = w.width();
    assert!(x.len() >= R * groups && out.len() >= R * width && block + B <= w.blocks);
    // SAFETY (whole body): the caller guarantees U's features; every line
    // read is inside `w.lines` (block + B <= blocks, g < groups).
    let mut acc = [[unsafe { U::zero() }; B]; R];
    for g in 0..groups {
        let mut lines = [unsafe { U::load(w.line(block, g)) }; B];
        for (b, line) in lines.iter_mut().enumerate().skip(1) {
            *line = unsafe { U::load(w.line(block + b, g)) };
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let xg = x[r * groups + g];
            for (a, &line) in row.iter_mut().zip(&lines) {
                *a = unsafe { U::dot(*a, xg, line) };
            }
        }
    }
    for (r, row) in acc.iter().enumerate() {
        for (b, &a) in row.iter().enumerate() {
            let at = r * width + (block + b) * LANES;
            unsafe { U::store(a, &mut out[at..at + LANES]) };
        }
    }
}

/// The rows of `x` (each `w.groups` groups) times the packed weights, for
/// `rows` rows: `rows × w.width()` raw accumulator values.
///
/// # Safety
/// The CPU must have `U`'s features.
#[inline(always)]
unsafe fn rows_body<U: DotUnit>(x: &[u32], w: &Packed, out: &mut [u32]) {
    let (groups, width) = (w.groups, w.width());
    let rows = out.len() / width;
    let mut r = 0;
    while r < rows {
        let n = if rows - r >= ROWS { ROWS } else { 1 };
        let (xr, or) = (&x[r * groups..], &mut out[r * width..]);
        let mut b = 0;
        while b < w.blocks {
            // SAFETY: the caller guarantees U's features.
            unsafe {
                match (n, w.blocks - b >= BLOCKS) {
                    (ROWS, true) => tile::<U, ROWS, BLOCKS>(xr, w, b, or),
                    (ROWS, false) => tile::<U, ROWS, 1>(xr, w, b, or),
                    (_, true) => tile::<U, 1, BLOCKS>(xr, w, b, or),
                    (_, false) => tile::<U, 1, 1>(xr, w, b, or),
                }
            }
            b += if w.blocks - b >= BLOCKS { BLOCKS } else { 1 };
        }
        r += n;
    }
}

/// The product of `n` rows of `x` with `w`, in parallel over row chunks,
/// with `run` (a `rows_body` compiled for the unit's features).
pub(crate) fn product(
    x: &[u32],
    n: usize,
    w: &Packed,
    run: impl Fn(&[u32], &Packed, &mut [u32]) + Sync,
) -> Vec<u32> {
    let width = w.width();
    assert_eq!(
        x.len(),
        n * w.groups,
        "activations do not match the weights"
    );
    let mut out = vec![0u32; n * width];
    out.par_chunks_mut(ROWS_PER_TASK * width)
        .zip(x.par_chunks(ROWS_PER_TASK * w.groups))
        .for_each(|(o, xs)| run(xs, w, o));
    out
}

/// `n` seeded pseudo-random values in `(−centre, 1 − centre) · spread`
/// (tests).
#[cfg(test)]
pub(crate) fn random(n: usize, seed: u64, centre: f32, spread: f32) -> Vec<f32> {
    let mut s = seed;
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32 - centre) * spread
        })
        .collect()
}

/// The plain-Rust form of [`rows_body`] for an emulated unit (tests).
#[cfg(test)]
pub(crate) fn rows_emulated<U: DotUnit>(x: &[u32], w: &Packed, out: &mut [u32]) {
    // SAFETY: emulated units need no CPU feature.
    unsafe { rows_body::<U>(x, w, out) }
}

/// Compiles [`rows_body`] for a unit at its target features.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_for {
    ($name:ident, $unit:ty, $features:literal) => {
        /// [`rows_body`] for this unit.
        ///
        /// # Safety
        /// The CPU must have the unit's features.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(x: &[u32], w: &Packed, out: &mut [u32]) {
            // SAFETY: the caller guarantees the features.
            unsafe { rows_body::<$unit>(x, w, out) }
        }
    };
}

#[cfg(target_arch = "x86_64")]
rows_for!(rows_vnni, avx512::Vnni, "avx512f,avx512vnni");
#[cfg(target_arch = "x86_64")]
rows_for!(rows_bf16, avx512::Bf16, "avx512f,avx512bf16");

/// The real instructions.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx512 {
    use std::arch::x86_64::*;

    use super::{DotUnit, LANES};

    /// `vpdpbusd`: u8 activations × s8 weights, i32 lanes (exact).
    pub(crate) struct Vnni;

    impl DotUnit for Vnni {
        type Acc = __m512i;
        type Line = __m512i;

        #[inline(always)]
        unsafe fn zero() -> __m512i {
            _mm512_setzero_si512()
        }

        #[inline(always)]
        unsafe fn load(p: *const u32) -> __m512i {
            // SAFETY: the caller passes 16 readable values.
            unsafe { _mm512_loadu_si512(p.cast()) }
        }

        #[inline(always)]
        unsafe fn dot(acc: __m512i, x: u32, w: __m512i) -> __m512i {
            // Unsigned bytes in the second operand, signed in the third.
            _mm512_dpbusd_epi32(acc, _mm512_set1_epi32(x as i32), w)
        }

        #[inline(always)]
        unsafe fn store(acc: __m512i, out: &mut [u32]) {
            assert!(out.len() >= LANES);
            // SAFETY: 16 writable values, asserted.
            unsafe { _mm512_storeu_si512(out.as_mut_ptr().cast(), acc) }
        }
    }

    /// `vdpbf16ps`: bf16 pairs, f32 lanes.
    pub(crate) struct Bf16;

    impl DotUnit for Bf16 {
        type Acc = __m512;
        type Line = __m512bh;

        #[inline(always)]
        unsafe fn zero() -> __m512 {
            _mm512_setzero_ps()
        }

        #[inline(always)]
        unsafe fn load(p: *const u32) -> __m512bh {
            // SAFETY: the caller passes 16 readable values; both types are
            // 64 bytes of plain bits.
            unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_loadu_si512(p.cast())) }
        }

        #[inline(always)]
        unsafe fn dot(acc: __m512, x: u32, w: __m512bh) -> __m512 {
            // SAFETY: as `load`.
            let x =
                unsafe { std::mem::transmute::<__m512i, __m512bh>(_mm512_set1_epi32(x as i32)) };
            _mm512_dpbf16_ps(acc, x, w)
        }

        #[inline(always)]
        unsafe fn store(acc: __m512, out: &mut [u32]) {
            assert!(out.len() >= LANES);
            // SAFETY: 16 writable values, asserted.
            unsafe { _mm512_storeu_ps(out.as_mut_ptr().cast(), acc) }
        }
    }
}

/// Plain-Rust emulations of the instructions, for testing the loop.
#[cfg(test)]
pub(crate) mod emulated {
    use super::{DotUnit, LANES};

    /// `vpdpbusd` lane by lane.
    pub(crate) struct Vnni;

    impl DotUnit for Vnni {
        type Acc = [i32; LANES];
        type Line = [u32; LANES];

        unsafe fn zero() -> Self::Acc {
            [0; LANES]
        }

        unsafe fn load(p: *const u32) -> Self::Line {
            // SAFETY: the caller passes 16 readable values.
            unsafe { std::ptr::read_unaligned(p.cast()) }
        }

        unsafe fn dot(mut acc: Self::Acc, x: u32, w: Self::Line) -> Self::Acc {
            for (a, w) in acc.iter_mut().zip(w) {
                let s: i32 = (0..4)
                    .map(|i| (x >> (8 * i)) as u8 as i32 * (w >> (8 * i)) as u8 as i8 as i32)
                    .sum();
                *a = a.wrapping_add(s);
            }
            acc
        }

        unsafe fn store(acc: Self::Acc, out: &mut [u32]) {
            for (o, a) in out.iter_mut().zip(acc) {
                *o = a as u32;
            }
        }
    }

    /// `vdpbf16ps` lane by lane: the odd pair's product first, as the
    /// instruction's definition adds them.
    pub(crate) struct Bf16;

    fn bf16(bits: u32) -> f32 {
        f32::from_bits((bits & 0xffff) << 16)
    }

    impl DotUnit for Bf16 {
        type Acc = [f32; LANES];
        type Line = [u32; LANES];

        unsafe fn zero() -> Self::Acc {
            [0.0; LANES]
        }

        unsafe fn load(p: *const u32) -> Self::Line {
            // SAFETY: the caller passes 16 readable values.
            unsafe { std::ptr::read_unaligned(p.cast()) }
        }

        unsafe fn dot(mut acc: Self::Acc, x: u32, w: Self::Line) -> Self::Acc {
            for (a, w) in acc.iter_mut().zip(w) {
                *a += bf16(x >> 16) * bf16(w >> 16);
                *a += bf16(x) * bf16(w);
            }
            acc
        }

        unsafe fn store(acc: Self::Acc, out: &mut [u32]) {
            for (o, a) in out.iter_mut().zip(acc) {
                *o = a.to_bits();
            }
        }
    }
}
