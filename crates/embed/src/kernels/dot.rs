//! The register-tiled product loop of the AVX-512 dot-product instructions
//! (`vpdpbusd` for int8, `vdpbf16ps` for bf16), shared by both precisions.
//!
//! Both instructions take, in each of 16 32-bit lanes, a *group* of narrow
//! values (4 u8/s8 or 2 bf16), multiply them pairwise and add the sum into
//! the lane's accumulator. So a weight matrix (`out × in`) is packed as
//! blocks of 16 outputs; within a block, one 64-byte line per input group
//! holds that group for each of the 16 outputs. A row of activations is a
//! run of 32-bit groups, each broadcast to all lanes. A tile of [`TILE`]
//! rows × blocks keeps its accumulators in registers while the
//! inputs stream by.
//!
//! The loop is written once, over [`DotUnit`]: the instruction's semantics.
//! [`lanes`] holds each instruction in plain Rust, lane by lane. The bf16
//! one is also the portable bf16 product: where the CPU lacks `vdpbf16ps`
//! the same loop runs with it (compiled for the kernel path's SIMD level;
//! Rust never fuses a multiply and an add, so every level rounds alike), so
//! every CPU adds the same products in the same order and gets the same
//! bits. A different order (gemm's) differs by f32 rounding, which the next
//! product's rounding to bf16 amplified to 1e-3 in end-to-end cosines.
//! Tests run the real instructions against [`lanes`] where the CPU has them.

use std::mem::MaybeUninit;

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
        self.on_cpu() && super::active() == super::KernelPath::Avx512
    }

    /// Whether the CPU has the instruction (and AVX-512F, which its tiles
    /// need), whatever kernel path is in use.
    pub(crate) fn on_cpu(self) -> bool {
        #[cfg(target_arch = "x86_64")]
        {
            std::is_x86_feature_detected!("avx512f")
                && match self {
                    Instruction::Vnni => std::is_x86_feature_detected!("avx512vnni"),
                    Instruction::Bf16 => std::is_x86_feature_detected!("avx512bf16"),
                }
        }
        #[cfg(not(target_arch = "x86_64"))]
        false
    }
}

/// `row` packed as 32-bit groups of `K` narrow values (`32 / K` bits each,
/// the first value lowest), as the dot-product instructions take them:
/// `value` gives each value's bits; values past the row are zero. The one
/// packing of activations for both precisions.
#[inline(always)]
pub(crate) fn pack_groups<const K: usize>(
    row: &[f32],
    out: &mut [u32],
    value: impl Fn(f32) -> u32,
) {
    let width = 32 / K;
    let group = |values: &[f32]| {
        values
            .iter()
            .enumerate()
            .fold(0u32, |g, (i, &v)| g | value(v) << (width * i))
    };
    let (whole, tail) = row.as_chunks::<K>();
    for (g, c) in out.iter_mut().zip(whole) {
        *g = group(c);
    }
    for (k, g) in out.iter_mut().enumerate().skip(whole.len()) {
        *g = if k == whole.len() { group(tail) } else { 0 };
    }
}

/// A compiled form of [`rows_body`] for one unit: raw accumulator bits of
/// each row × the packed weights.
pub(crate) type Rows = fn(&[u32], &Packed, &mut [u32]);

/// The bf16 product loop this CPU runs: `vdpbf16ps` where
/// [`Instruction::Bf16`] is usable, [`avx2::Bf16`] on the AVX2 path, else
/// [`lanes::Bf16`] compiled for the kernel path in use. All give the same
/// bits.
pub(crate) fn bf16_rows() -> Rows {
    #[cfg(target_arch = "x86_64")]
    {
        if Instruction::Bf16.usable() {
            // SAFETY: `usable` checked AVX-512F and AVX512-BF16.
            return |x, w, o| unsafe { rows_bf16(x, w, o) };
        }
        match super::active() {
            // SAFETY: the active path's features are checked when it is chosen.
            super::KernelPath::Avx512 => |x, w, o| unsafe { rows_bf16_lanes_avx512(x, w, o) },
            super::KernelPath::Avx2 => |x, w, o| unsafe { rows_bf16_avx2(x, w, o) },
            super::KernelPath::Portable => rows_plain::<lanes::Bf16>,
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    rows_plain::<lanes::Bf16>
}

/// The int8 tile loop with `vpdpbusd` (only where [`Instruction::Vnni`] is
/// usable; elsewhere int8 runs gemm on exact integer values).
#[cfg(target_arch = "x86_64")]
pub(crate) fn vnni_rows() -> Rows {
    assert!(Instruction::Vnni.usable(), "vpdpbusd is not usable here");
    // SAFETY: `usable` checked AVX-512F and AVX512-VNNI (asserted).
    |x, w, o| unsafe { rows_vnni(x, w, o) }
}

/// The int8 tile loop with `vpmaddubsw` (AVX2) on groups of 4 bytes, the
/// layout of `vpdpbusd`, where no `vpdpbusd` is usable but a SIMD kernel
/// path is in use: the same exact i32 sums as the VNNI tiles and the
/// portable path, since the weights keep every pair of products inside
/// i16 (see `int8`). `None` on the portable path (which runs gemm on exact
/// integers).
#[cfg(target_arch = "x86_64")]
pub(crate) fn maddubs_rows() -> Option<Rows> {
    match super::active() {
        // SAFETY: both paths' features (AVX2 included) are checked when the
        // path is chosen.
        super::KernelPath::Avx512 | super::KernelPath::Avx2 => {
            Some(|x, w, o| unsafe { rows_maddubs(x, w, o) })
        }
        super::KernelPath::Portable => None,
    }
}

/// Lanes of one accumulator: one AVX-512 register of 32-bit values.
pub(crate) const LANES: usize = 16;

/// The full tile of the real instructions: 8 rows × 3 blocks is 24
/// accumulators, enough independent chains to cover the instructions'
/// latency at two per cycle, and 11 loads (3 weight lines, 8 broadcasts) per
/// 24 products; with the 3 lines that is 27 of the 32 AVX-512 registers.
const TILE: (usize, usize) = (8, 3);

/// The full tile of `vpmaddubsw`: an accumulator of 16 lanes is two AVX2
/// registers, so 4 rows × 1 block is 8 accumulators, with the block's
/// two weight registers, a broadcast, the ones and two products 14 of the
/// 16 (6 rows measured no faster).
const MADDUBS_TILE: (usize, usize) = (4, 1);

/// The full tile of [`avx2::Bf16`]: 4 rows × 1 block is 8 accumulators,
/// with the block's 4 widened weight registers, 2 broadcasts and 2
/// products 16 of the 16.
const BF16_AVX2_TILE: (usize, usize) = (4, 1);

/// The full tile of the plain-Rust units: an accumulator of 16 lanes takes
/// two AVX2 registers (of 16), so a smaller tile avoids spills.
const LANES_TILE: (usize, usize) = (4, 1);

/// Rows per parallel task: each panel of weight lines (one tile's blocks)
/// is read from L2 once per task and reused from L1 by its row tiles. A
/// multiple of every tile's rows (8, 6, 4, and AMX's pairs of 16), so only
/// a product's last task can end in a panel padded with zero rows.
const ROWS_PER_TASK: usize = 96;

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

    /// Where block `block`'s line for input group `group` starts; the
    /// block's lines follow it, one per group.
    pub(super) fn line(&self, block: usize, group: usize) -> *const u32 {
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
/// bits) for the first `rows` of `R` rows and `B` blocks starting at
/// `block`. `panel` holds the `R` rows interleaved (`groups × R`: group
/// `g` of row `r` at `g·R + r`), so one step's broadcasts read one
/// contiguous run and the weights one line per block, both walked by
/// pointer (no bounds check inside the loop).
///
/// # Safety
/// The CPU must have `U`'s features.
#[inline(always)]
unsafe fn tile<U: DotUnit, const R: usize, const B: usize>(
    panel: &[u32],
    rows: usize,
    w: &Packed,
    block: usize,
    out: &mut [u32],
) {
    let groups = w.groups;
    let width = w.width();
    assert!(
        panel.len() >= R * groups
            && rows <= R
            && out.len() >= (rows.max(1) - 1) * width + (block + B) * LANES
            && block + B <= w.blocks
    );
    // SAFETY (whole body): the caller guarantees U's features; the panel
    // holds `groups · R` values and each block `groups` lines (asserted),
    // and the pointers advance `groups` times by one step of each.
    let mut acc = [[unsafe { U::zero() }; B]; R];
    let mut ws = [w.line(block, 0); B];
    for (b, p) in ws.iter_mut().enumerate().skip(1) {
        *p = w.line(block + b, 0);
    }
    for step in panel[..groups * R].chunks_exact(R) {
        let mut lines = [unsafe { U::load(ws[0]) }; B];
        for (line, &p) in lines.iter_mut().zip(&ws).skip(1) {
            *line = unsafe { U::load(p) };
        }
        for (r, row) in acc.iter_mut().enumerate() {
            let xg = step[r];
            for (a, &line) in row.iter_mut().zip(&lines) {
                *a = unsafe { U::dot(*a, xg, line) };
            }
        }
        for p in ws.iter_mut() {
            *p = p.wrapping_add(LANES);
        }
    }
    for (r, row) in acc.iter().enumerate().take(rows) {
        for (b, &a) in row.iter().enumerate() {
            let at = r * width + (block + b) * LANES;
            unsafe { U::store(a, &mut out[at..at + LANES]) };
        }
    }
}

/// Rows `first..first + R` of `x` (each `groups` groups; rows past `n`
/// as zeros) interleaved into `panel` as [`tile`] reads them.
#[inline(always)]
fn interleave<const R: usize>(x: &[u32], groups: usize, first: usize, n: usize, panel: &mut [u32]) {
    for (r, row) in (first..first + R).enumerate() {
        if row < n {
            let src = &x[row * groups..(row + 1) * groups];
            for (g, &v) in src.iter().enumerate() {
                panel[g * R + r] = v;
            }
        } else {
            for g in 0..groups {
                panel[g * R + r] = 0;
            }
        }
    }
}

/// The rows of `x` (each `w.groups` groups) times the packed weights, for
/// `rows` rows: `rows × w.width()` raw accumulator values. The rows are
/// first interleaved into panels of `R` (the last padded with zero rows,
/// whose sums are computed and never written), then panels of `B` blocks
/// outside, row panels inside, so a weight panel stays in L1 while the
/// rows pass; a tail of blocks takes 1-block tiles. Every output is summed
/// over the groups in order whatever the tile, so the shape never changes
/// a bit of the result.
///
/// # Safety
/// The CPU must have `U`'s features.
#[inline(always)]
unsafe fn rows_body<U: DotUnit, const R: usize, const B: usize>(
    x: &[u32],
    w: &Packed,
    out: &mut [u32],
) {
    thread_local! {
        static PANELS: std::cell::Cell<Vec<u32>> = const { std::cell::Cell::new(Vec::new()) };
    }
    let (groups, width) = (w.groups, w.width());
    let rows = out.len() / width;
    let tiles = rows.div_ceil(R);
    // The buffer is taken out of the thread's slot and put back, so the
    // loops below are compiled here, at the caller's target features (a
    // closure passed to `with` was compiled at baseline SIMD).
    let mut panels = PANELS.take();
    panels.resize(tiles * R * groups, 0);
    for (t, panel) in panels.chunks_exact_mut(R * groups).enumerate() {
        interleave::<R>(x, groups, t * R, rows, panel);
    }
    let mut b = 0;
    while b < w.blocks {
        let full_b = w.blocks - b >= B;
        for (t, panel) in panels.chunks_exact(R * groups).enumerate() {
            let n = R.min(rows - t * R);
            let or = &mut out[t * R * width..];
            // SAFETY: the caller guarantees U's features.
            unsafe {
                if full_b {
                    tile::<U, R, B>(panel, n, w, b, or)
                } else {
                    tile::<U, R, 1>(panel, n, w, b, or)
                }
            }
        }
        b += if full_b { B } else { 1 };
    }
    PANELS.set(panels);
}

/// The product of the rows of `x` (`inp` f32 values each) with `w`, `out`
/// f32 values per row, in parallel over tasks of [`ROWS_PER_TASK`] rows.
/// Each task converts its own rows (`prepare`: f32 rows into 32-bit groups,
/// returning what `finish` needs), runs them through the tiles (`rows`) and
/// converts the raw sums into its rows of the result (`finish`: the task's
/// rows of `x`, `width` raw values per row, `out` results per row), in
/// buffers its thread reuses: the conversions run on every thread and touch
/// only cache-sized slices.
pub(crate) fn product<C: Conversions>(
    x: &[f32],
    inp: usize,
    out: usize,
    w: &Packed,
    rows: Rows,
    conversions: &C,
) -> Vec<f32> {
    thread_local! {
        static SCRATCH: std::cell::RefCell<(Vec<u32>, Vec<u32>)> = Default::default();
    }
    let (groups, width) = (w.groups, w.width());
    assert!(inp > 0 && out > 0 && out <= width && x.len().is_multiple_of(inp));
    let n = x.len() / inp;
    // Not zeroed: every task's `finish` writes each value of its rows (a
    // zeroing pass ran on the calling thread alone, 1.7% of an int8 run's
    // samples while the other threads waited).
    let mut y: Vec<f32> = Vec::with_capacity(n * out);
    let path = super::active();
    y.spare_capacity_mut()[..n * out]
        .par_chunks_mut(ROWS_PER_TASK * out)
        .zip(x.par_chunks(ROWS_PER_TASK * inp))
        .for_each(|(yc, xc)| {
            let m = xc.len() / inp;
            SCRATCH.with(|scratch| {
                // No clearing: `prepare` writes every group and the tiles
                // every sum.
                let (xq, raw) = &mut *scratch.borrow_mut();
                xq.resize(m * groups, 0);
                raw.resize(m * width, 0);
                let task = Task {
                    x: xc,
                    xq,
                    raw,
                    y: yc,
                };
                task.run_on(path, w, rows, conversions);
            })
        });
    // SAFETY: the tasks' chunks cover the `n · out` values (one chunk of
    // `y` per chunk of `x`, `n` rows each way), and `Conversions::finish`
    // writes every value of its rows (its contract); a panicking task
    // never reaches this line.
    unsafe { y.set_len(n * out) };
    y
}

/// What one precision does around the tiles, for each task's rows. The
/// implementations mark both methods `#[inline(always)]`, so that they are
/// compiled into [`Task::run_on`]'s per-path copies at that path's SIMD
/// level (a closure was not inlined there and ran at baseline).
pub(crate) trait Conversions: Sync {
    /// What `prepare` hands on to `finish` (e.g. each row's scale).
    type State;
    /// Converts rows of `x` (`inp` each) into groups `xq` for the tiles.
    fn prepare(&self, x: &[f32], xq: &mut [u32]) -> Self::State;
    /// Converts the raw sums (`width` per row) into rows of `y` (`out`
    /// each), writing every value of `y` (it is not zeroed before).
    fn finish(&self, state: Self::State, x: &[f32], raw: &[u32], y: &mut [MaybeUninit<f32>]);
}

/// One task's slices: its rows of `x` and `y`, and its thread's scratch.
struct Task<'a> {
    x: &'a [f32],
    xq: &'a mut [u32],
    raw: &'a mut [u32],
    y: &'a mut [MaybeUninit<f32>],
}

impl Task<'_> {
    /// Runs the task with its conversions compiled for `path`'s SIMD level:
    /// at baseline x86-64, rounding calls libm per value and quantising and
    /// pairing took as long as the VNNI tiles themselves (AMD EPYC Zen 5).
    /// The conversions are exact operations (no sums to reorder, no fused
    /// multiply-adds: Rust never contracts), so every level gives the same
    /// bits.
    fn run_on(
        self,
        path: super::KernelPath,
        w: &Packed,
        rows: Rows,
        conversions: &impl Conversions,
    ) {
        #[cfg(target_arch = "x86_64")]
        match path {
            // SAFETY: the active path's features are checked when it is chosen.
            super::KernelPath::Avx512 => unsafe { self.run_avx512(w, rows, conversions) },
            super::KernelPath::Avx2 => unsafe { self.run_avx2(w, rows, conversions) },
            super::KernelPath::Portable => self.run(w, rows, conversions),
        }
        #[cfg(not(target_arch = "x86_64"))]
        {
            let _ = path;
            self.run(w, rows, conversions)
        }
    }

    #[inline(always)]
    fn run(self, w: &Packed, rows: Rows, conversions: &impl Conversions) {
        let state = conversions.prepare(self.x, self.xq);
        rows(self.xq, w, self.raw);
        conversions.finish(state, self.x, self.raw, self.y);
    }

    /// # Safety
    /// The CPU must have the AVX-512 kernel path's features.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx512f,avx512vl,avx2,fma")]
    unsafe fn run_avx512(self, w: &Packed, rows: Rows, conversions: &impl Conversions) {
        self.run(w, rows, conversions)
    }

    /// # Safety
    /// The CPU must have the AVX2 kernel path's features.
    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma")]
    unsafe fn run_avx2(self, w: &Packed, rows: Rows, conversions: &impl Conversions) {
        self.run(w, rows, conversions)
    }
}

/// A seeded linear congruential sequence of 64-bit states (tests).
#[cfg(test)]
pub(crate) fn states(seed: u64) -> impl Iterator<Item = u64> {
    std::iter::successors(Some(seed), |s| {
        Some(
            s.wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407),
        )
    })
    .skip(1)
}

/// `n` seeded pseudo-random values in `(−centre, 1 − centre) · spread`
/// (tests).
#[cfg(test)]
pub(crate) fn random(n: usize, seed: u64, centre: f32, spread: f32) -> Vec<f32> {
    states(seed)
        .take(n)
        .map(|s| ((s >> 40) as f32 / (1u64 << 24) as f32 - centre) * spread)
        .collect()
}

/// The raw sums of `n` rows of groups `x` times `w` (tests).
#[cfg(test)]
pub(crate) fn raw_product(x: &[u32], n: usize, w: &Packed, rows: Rows) -> Vec<u32> {
    assert_eq!(x.len(), n * w.groups);
    let mut raw = vec![0u32; n * w.width()];
    rows(x, w, &mut raw);
    raw
}

/// [`rows_body`] for a plain-Rust unit of [`lanes`], at baseline SIMD.
pub(crate) fn rows_plain<U: DotUnit>(x: &[u32], w: &Packed, out: &mut [u32]) {
    // SAFETY: the units of `lanes` need no CPU feature.
    unsafe { rows_body::<U, { LANES_TILE.0 }, { LANES_TILE.1 }>(x, w, out) }
}

/// Compiles [`rows_body`] for a unit at its target features.
#[cfg(target_arch = "x86_64")]
macro_rules! rows_for {
    ($name:ident, $unit:ty, $features:literal, $tile:expr) => {
        /// [`rows_body`] for this unit.
        ///
        /// # Safety
        /// The CPU must have the unit's features.
        #[target_feature(enable = $features)]
        pub(crate) unsafe fn $name(x: &[u32], w: &Packed, out: &mut [u32]) {
            // SAFETY: the caller guarantees the features.
            unsafe { rows_body::<$unit, { $tile.0 }, { $tile.1 }>(x, w, out) }
        }
    };
}

#[cfg(target_arch = "x86_64")]
rows_for!(rows_vnni, avx512::Vnni, "avx512f,avx512vnni", TILE);
#[cfg(target_arch = "x86_64")]
rows_for!(rows_bf16, avx512::Bf16, "avx512f,avx512bf16", TILE);
#[cfg(target_arch = "x86_64")]
rows_for!(
    rows_bf16_lanes_avx512,
    lanes::Bf16,
    "avx512f,avx512vl,avx2,fma",
    (4, 2)
);
// The lanes' emulation at AVX2, which the AVX2 path ran before
// `avx2::Bf16`: kept for the speed measurement's side-by-side column.
#[cfg(all(test, target_arch = "x86_64"))]
rows_for!(rows_bf16_lanes_avx2, lanes::Bf16, "avx2,fma", LANES_TILE);
#[cfg(target_arch = "x86_64")]
rows_for!(rows_bf16_avx2, avx2::Bf16, "avx2,fma", BF16_AVX2_TILE);
#[cfg(target_arch = "x86_64")]
rows_for!(rows_maddubs, avx2::MaddUbs, "avx2", MADDUBS_TILE);

/// The AVX2 units of the tiles where AVX-512's dot-product instructions
/// are missing: int8's `vpmaddubsw`, and `vdpbf16ps` in AVX2 instructions.
#[cfg(target_arch = "x86_64")]
pub(crate) mod avx2 {
    use std::arch::x86_64::*;

    use super::{DotUnit, LANES};

    /// `vpmaddubsw`, `vpmaddwd` by ones, then `vpaddd`: in each 32-bit
    /// lane, four u8 activations times four s8 weights, each pair of
    /// products summed to i16 (saturating), the two pairs to i32 and into
    /// the lane's accumulator. `vpdpbusd`'s sums wherever no pair saturates,
    /// which `int8`'s weights guarantee (two weights of a pair with the same
    /// sign add up to at most 128 in magnitude: 255 · 128 = 32,640 ≤
    /// 32,767). Three instructions per 32 multiply-adds where the `vpmaddwd`
    /// unit it replaced took four, on bytes where that read 16-bit values.
    pub(crate) struct MaddUbs;

    impl DotUnit for MaddUbs {
        type Acc = [__m256i; 2];
        type Line = [__m256i; 2];

        #[inline(always)]
        unsafe fn zero() -> Self::Acc {
            [_mm256_setzero_si256(); 2]
        }

        #[inline(always)]
        unsafe fn load(p: *const u32) -> Self::Line {
            // SAFETY: the caller passes 16 readable values.
            unsafe {
                [
                    _mm256_loadu_si256(p.cast()),
                    _mm256_loadu_si256(p.add(8).cast()),
                ]
            }
        }

        #[inline(always)]
        unsafe fn dot(acc: Self::Acc, x: u32, w: Self::Line) -> Self::Acc {
            // Unsigned bytes in the first operand, signed in the second.
            let x = _mm256_set1_epi32(x as i32);
            let ones = _mm256_set1_epi16(1);
            let quad = |w| _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), ones);
            [
                _mm256_add_epi32(acc[0], quad(w[0])),
                _mm256_add_epi32(acc[1], quad(w[1])),
            ]
        }

        #[inline(always)]
        unsafe fn store(acc: Self::Acc, out: &mut [u32]) {
            assert!(out.len() >= LANES);
            // SAFETY: 16 writable values, asserted.
            unsafe {
                _mm256_storeu_si256(out.as_mut_ptr().cast(), acc[0]);
                _mm256_storeu_si256(out.as_mut_ptr().add(8).cast(), acc[1]);
            }
        }
    }

    /// `vdpbf16ps` in AVX2 instructions: each lane's pair of bf16 weights
    /// widened to two f32 registers when its line is loaded (a bf16 is the
    /// high half of an f32), then the odd pair's product added before the
    /// even one's, each product exact in f32 and each add rounding once,
    /// as [`super::lanes::Bf16`] defines it: the same bits for products in
    /// f32's normal range (as for `vdpbf16ps`), in half the instructions.
    pub(crate) struct Bf16;

    impl DotUnit for Bf16 {
        type Acc = [__m256; 2];
        /// Per half of the block: the odd values (high halves), the even
        /// values (low halves shifted up), as f32.
        type Line = [__m256; 4];

        #[inline(always)]
        unsafe fn zero() -> Self::Acc {
            [_mm256_setzero_ps(); 2]
        }

        #[inline(always)]
        unsafe fn load(p: *const u32) -> Self::Line {
            // SAFETY: the caller passes 16 readable values.
            let (lo, hi) = unsafe {
                (
                    _mm256_loadu_si256(p.cast()),
                    _mm256_loadu_si256(p.add(8).cast()),
                )
            };
            let high = _mm256_set1_epi32(0xffff_0000u32 as i32);
            let odd = |v| _mm256_castsi256_ps(_mm256_and_si256(v, high));
            let even = |v| _mm256_castsi256_ps(_mm256_slli_epi32::<16>(v));
            [odd(lo), even(lo), odd(hi), even(hi)]
        }

        #[inline(always)]
        unsafe fn dot(acc: Self::Acc, x: u32, w: Self::Line) -> Self::Acc {
            let odd = _mm256_set1_ps(f32::from_bits(x & 0xffff_0000));
            let even = _mm256_set1_ps(f32::from_bits(x << 16));
            // Fused: a product of two bf16 values is exact in f32, so
            // the FMA rounds the sum once, as the emulation's add does
            // (they differ only where a product falls below f32's normal
            // range, where `vdpbf16ps` itself flushes to zero).
            let step = |a, w_odd, w_even| {
                let a = _mm256_fmadd_ps(odd, w_odd, a);
                _mm256_fmadd_ps(even, w_even, a)
            };
            [step(acc[0], w[0], w[1]), step(acc[1], w[2], w[3])]
        }

        #[inline(always)]
        unsafe fn store(acc: Self::Acc, out: &mut [u32]) {
            assert!(out.len() >= LANES);
            // SAFETY: 16 writable values, asserted.
            unsafe {
                _mm256_storeu_ps(out.as_mut_ptr().cast(), acc[0]);
                _mm256_storeu_ps(out.as_mut_ptr().add(8).cast(), acc[1]);
            }
        }
    }
}

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

/// The instructions in plain Rust, lane by lane: the bf16 one is the
/// portable bf16 product (see the module docs); both are what the tests
/// hold the real instructions to.
pub(crate) mod lanes {
    use super::{DotUnit, LANES};

    /// `vpdpbusd` lane by lane (tests: int8's portable path is gemm on exact
    /// integers, which needs no particular order).
    #[cfg(test)]
    pub(crate) struct Vnni;

    #[cfg(test)]
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

    /// `vpmaddubsw` + `vpmaddwd` by ones + `vpaddd` lane by lane: each
    /// lane's pairs of u8 × s8 products summed and saturated to i16, both
    /// pairs added into its i32 accumulator, wrapping as the instructions
    /// do (tests: the real AVX2 tiles are held to it).
    #[cfg(test)]
    pub(crate) struct MaddUbs;

    #[cfg(test)]
    impl DotUnit for MaddUbs {
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
            let product =
                |w: u32, i: u32| (x >> (8 * i)) as u8 as i32 * (w >> (8 * i)) as u8 as i8 as i32;
            for (a, w) in acc.iter_mut().zip(w) {
                let pair = |i| (product(w, i) + product(w, i + 1)).clamp(-32_768, 32_767);
                *a = a.wrapping_add(pair(0) + pair(2));
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
    /// instruction's definition adds them; each product is exact in f32 and
    /// each add rounds once.
    pub(crate) struct Bf16;

    #[inline(always)]
    fn bf16(bits: u32) -> f32 {
        f32::from_bits((bits & 0xffff) << 16)
    }

    impl DotUnit for Bf16 {
        type Acc = [f32; LANES];
        type Line = [u32; LANES];

        #[inline(always)]
        unsafe fn zero() -> Self::Acc {
            [0.0; LANES]
        }

        #[inline(always)]
        unsafe fn load(p: *const u32) -> Self::Line {
            // SAFETY: the caller passes 16 readable values.
            unsafe { std::ptr::read_unaligned(p.cast()) }
        }

        #[inline(always)]
        unsafe fn dot(mut acc: Self::Acc, x: u32, w: Self::Line) -> Self::Acc {
            for (a, w) in acc.iter_mut().zip(w) {
                *a += bf16(x >> 16) * bf16(w >> 16);
                *a += bf16(x) * bf16(w);
            }
            acc
        }

        #[inline(always)]
        unsafe fn store(acc: Self::Acc, out: &mut [u32]) {
            for (o, a) in out.iter_mut().zip(acc) {
                *o = a.to_bits();
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Seeded random 32-bit groups (any bit pattern).
    fn groups(n: usize, seed: u64) -> Vec<u32> {
        states(seed).take(n).map(|s| (s >> 32) as u32).collect()
    }

    /// `n` rows × `groups` of each unit through the real instruction and
    /// through its emulation, on a shape with row and block tails.
    #[cfg(target_arch = "x86_64")]
    fn real_and_emulated(
        instruction: Instruction,
        x: &[u32],
        n: usize,
        w: &Packed,
    ) -> Option<(Vec<u32>, Vec<u32>)> {
        if !instruction.on_cpu() {
            return None;
        }
        // SAFETY: the CPU has the features (`on_cpu`).
        let real = match instruction {
            Instruction::Vnni => raw_product(x, n, w, |x, w, o| unsafe { rows_vnni(x, w, o) }),
            Instruction::Bf16 => raw_product(x, n, w, |x, w, o| unsafe { rows_bf16(x, w, o) }),
        };
        let emulated = match instruction {
            Instruction::Vnni => raw_product(x, n, w, rows_plain::<lanes::Vnni>),
            Instruction::Bf16 => raw_product(x, n, w, rows_plain::<lanes::Bf16>),
        };
        Some((real, emulated))
    }

    /// The emulations are the instructions: on a CPU that has them, the real
    /// `vpdpbusd` gives the emulation's integers for every byte pattern, and
    /// the real `vdpbf16ps` its f32 bits for finite bf16 inputs. Where the
    /// CPU lacks an instruction this says so on stderr (nothing to compare).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn real_instructions_match_their_emulations() {
        let (n, g, out) = (37, 97, 40);
        let w = Packed::new(out, g, {
            let all = groups(out * g, 3);
            move |o, k| all[o * g + k]
        });
        let x = groups(n * g, 5);
        match real_and_emulated(Instruction::Vnni, &x, n, &w) {
            Some((real, emulated)) => {
                assert!(real == emulated, "vpdpbusd differs from its emulation")
            }
            None => eprintln!("vpdpbusd: not on this CPU, emulation only"),
        }
        if std::is_x86_feature_detected!("avx2") {
            // Any bytes, so saturated pairs included.
            // SAFETY: the CPU has AVX2 (checked).
            let real = raw_product(&x, n, &w, |x, w, o| unsafe { rows_maddubs(x, w, o) });
            let emulated = raw_product(&x, n, &w, rows_plain::<lanes::MaddUbs>);
            assert!(real == emulated, "vpmaddubsw differs from its emulation");
        } else {
            eprintln!("vpmaddubsw: not on this CPU, emulation only");
        }
        // bf16 pairs of moderate, finite values (no NaN/Inf patterns).
        let finite = |v: u32| -> u32 {
            let half = |h: u32| (h & 0x80ff) | 0x3c00 | (h & 0x0300);
            half(v & 0xffff) | half(v >> 16) << 16
        };
        let wb = Packed::new(out, g, {
            let all: Vec<u32> = groups(out * g, 7).into_iter().map(finite).collect();
            move |o, k| all[o * g + k]
        });
        let xb: Vec<u32> = groups(n * g, 9).into_iter().map(finite).collect();
        if std::is_x86_feature_detected!("avx2") && std::is_x86_feature_detected!("fma") {
            // Moderate values, and then a wider range of exponents, short
            // of those whose products leave f32's normal range (there an
            // FMA and a multiply then add round differently, and
            // `vdpbf16ps` flushes to zero).
            let wide = |v: u32| -> u32 {
                let half = |h: u32| (h & 0x807f) | ((0x30 + (h >> 7) % 0x20) << 7);
                half(v & 0xffff) | half(v >> 16) << 16
            };
            let wa = Packed::new(out, g, {
                let all: Vec<u32> = groups(out * g, 11).into_iter().map(wide).collect();
                move |o, k| all[o * g + k]
            });
            let xa: Vec<u32> = groups(n * g, 13).into_iter().map(wide).collect();
            for (x, w) in [(&xb, &wb), (&xa, &wa)] {
                // SAFETY: the CPU has AVX2 (checked).
                let real = raw_product(x, n, w, |x, w, o| unsafe { rows_bf16_avx2(x, w, o) });
                let emulated = raw_product(x, n, w, rows_plain::<lanes::Bf16>);
                assert!(
                    real == emulated,
                    "the AVX2 bf16 unit differs from the lanes' emulation"
                );
            }
        } else {
            eprintln!("bf16 with AVX2 and FMA: not on this CPU, emulation only");
        }
        match real_and_emulated(Instruction::Bf16, &xb, n, &wb) {
            Some((real, emulated)) => {
                let worst = real
                    .iter()
                    .zip(&emulated)
                    .map(|(&a, &b)| (f32::from_bits(a) - f32::from_bits(b)).abs())
                    .fold(0f32, f32::max);
                assert!(
                    real == emulated,
                    "vdpbf16ps differs from its emulation by up to {worst:e}"
                );
            }
            None => eprintln!("vdpbf16ps: not on this CPU, emulation only"),
        }
    }

    /// `vpmaddubsw`'s sums are `vpdpbusd`'s when the two weights of every
    /// pair with the same sign add up to at most 128 in magnitude, for any
    /// activation bytes; with any weights they are not (so the limit
    /// matters).
    #[test]
    fn maddubs_sums_are_vnnis_within_the_pair_limit() {
        let (n, g, out) = (21, 53, 40);
        let x = groups(n * g, 17);
        let any = groups(out * g, 19);
        // Each byte pair brought within the limit by halving both until it
        // fits (or their signs differ).
        let limited: Vec<u32> = any
            .iter()
            .map(|&v| {
                let mut b = v.to_le_bytes().map(|b| b as i8 as i32);
                for p in b.chunks_exact_mut(2) {
                    while p[0] * p[1] > 0 && p[0].abs() + p[1].abs() > 128 {
                        p[0] /= 2;
                        p[1] /= 2;
                    }
                }
                u32::from_le_bytes(b.map(|v| v as i8 as u8))
            })
            .collect();
        let packed = |all: Vec<u32>| Packed::new(out, g, move |o, k| all[o * g + k]);
        let (wl, wa) = (packed(limited), packed(any));
        assert!(
            raw_product(&x, n, &wl, rows_plain::<lanes::MaddUbs>)
                == raw_product(&x, n, &wl, rows_plain::<lanes::Vnni>)
        );
        assert!(
            raw_product(&x, n, &wa, rows_plain::<lanes::MaddUbs>)
                != raw_product(&x, n, &wa, rows_plain::<lanes::Vnni>),
            "no pair saturated: the test's weights are too small"
        );
    }
}
