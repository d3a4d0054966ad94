//! CPU kernels for the parts of a BERT layer that are not matrix products:
//! attention over one sequence, bias + GELU, and bias + residual + layer
//! norm. Candle runs each of these as several passes over memory (a new
//! tensor per op, scalar SSE2 loops); here each is one pass, written as
//! plain loops that LLVM vectorises, and compiled once per *kernel path*:
//!
//! | path       | compiled for                     | attention products      |
//! |------------|----------------------------------|-------------------------|
//! | `avx512`   | AVX-512F, AVX-512VL, AVX2, FMA   | explicit register tiles |
//! | `avx2`     | AVX2, FMA                        | portable loops          |
//! | `portable` | baseline x86-64 (or any target)  | portable loops          |
//!
//! Each path lives in its own module ([`avx512`], [`avx2`], [`portable`]),
//! which names its target features exactly once: the same list compiles its
//! functions and decides whether the running CPU can use it.
//!
//! # Choosing the path
//!
//! By default the widest path the CPU supports is used. [`use_kernels`]
//! forces one by name (`auto`, `avx512`, `avx2` or `portable`), e.g. to test
//! the AVX2 or portable path on an AVX-512 machine; the CLI passes the
//! `REFSCORE_KERNELS` environment variable to it. The path is fixed for the
//! process once chosen or once a kernel ran. A forced path the CPU cannot
//! run, or an unknown name, is an error naming the missing CPU features; it
//! never falls back silently, so a forced test run tests what it says.
//! The variable governs these kernels only: the matrix products are Candle's
//! (gemm), which picks its own SIMD level.

use std::sync::OnceLock;

#[cfg(target_arch = "x86_64")]
mod amx;
#[cfg(target_arch = "x86_64")]
mod avx2;
#[cfg(target_arch = "x86_64")]
mod avx512;
pub(crate) mod bf16;
mod disentangled;
mod dot;
pub(crate) use disentangled::{Disentangled, DisentangledScratch};
pub(crate) mod int8;
mod portable;
mod products;
#[cfg(test)]
mod speed;

/// One compiled form of the fused CPU kernels (see the module docs). Exists
/// so that every form can be chosen, forced and tested by name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KernelPath {
    /// AVX-512 (F and VL) with AVX2 and FMA; register-tiled attention.
    Avx512,
    /// AVX2 and FMA.
    Avx2,
    /// Baseline instructions only; runs on every CPU.
    Portable,
}

impl KernelPath {
    /// Every path, widest first.
    pub const ALL: [KernelPath; 3] = [KernelPath::Avx512, KernelPath::Avx2, KernelPath::Portable];

    /// The name `REFSCORE_KERNELS` uses for this path.
    pub fn name(self) -> &'static str {
        match self {
            KernelPath::Avx512 => "avx512",
            KernelPath::Avx2 => "avx2",
            KernelPath::Portable => "portable",
        }
    }

    /// The path called `name` (as in `REFSCORE_KERNELS`), if any.
    pub fn from_name(name: &str) -> Option<KernelPath> {
        KernelPath::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The CPU features this path is compiled for.
    pub fn features(self) -> &'static [&'static str] {
        match self {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => avx512::FEATURES,
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => avx2::FEATURES,
            #[cfg(not(target_arch = "x86_64"))]
            KernelPath::Avx512 | KernelPath::Avx2 => &[],
            KernelPath::Portable => portable::FEATURES,
        }
    }

    /// The features of [`KernelPath::features`] the running CPU lacks
    /// (all of them off x86-64, where only the portable path exists).
    pub fn missing_features(self) -> Vec<&'static str> {
        match self {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => avx512::missing(),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => avx2::missing(),
            #[cfg(not(target_arch = "x86_64"))]
            KernelPath::Avx512 => vec!["avx512f", "avx512vl", "avx2", "fma"],
            #[cfg(not(target_arch = "x86_64"))]
            KernelPath::Avx2 => vec!["avx2", "fma"],
            KernelPath::Portable => portable::missing(),
        }
    }

    /// Whether the running CPU has every feature this path is compiled for.
    pub fn supported(self) -> bool {
        match self {
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => avx512::supported(),
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => avx2::supported(),
            #[cfg(not(target_arch = "x86_64"))]
            KernelPath::Avx512 | KernelPath::Avx2 => false,
            KernelPath::Portable => portable::supported(),
        }
    }

    /// The widest path the running CPU supports.
    pub fn best() -> KernelPath {
        KernelPath::ALL
            .into_iter()
            .find(|p| p.supported())
            .unwrap_or(KernelPath::Portable)
    }
}

/// The kernel path of this process, fixed on first use.
static SELECTED: OnceLock<KernelPath> = OnceLock::new();

/// The kernel path in use: the one [`use_kernels`] chose, else the widest
/// the CPU supports (fixed from then on).
pub fn kernel_path() -> KernelPath {
    *SELECTED.get_or_init(KernelPath::best)
}

/// Chooses the kernel path by name (`None`, empty or `auto`: the widest the
/// CPU supports), checked against the CPU. The path is chosen once per
/// process: asking for another after that is an error, since kernels may
/// already have run on the first.
pub fn use_kernels(name: Option<&str>) -> Result<KernelPath, String> {
    let path = choose(name)?;
    let chosen = *SELECTED.get_or_init(|| path);
    if chosen != path {
        return Err(format!(
            "this process already runs the {} kernels (the kernel path is chosen once per process)",
            chosen.name()
        ));
    }
    Ok(path)
}

/// The path a name asks for, checked against the CPU.
fn choose(name: Option<&str>) -> Result<KernelPath, String> {
    let name = name.map(str::trim).unwrap_or("");
    if name.is_empty() || name == "auto" {
        return Ok(KernelPath::best());
    }
    let path = KernelPath::from_name(name).ok_or_else(|| {
        "unknown kernel path (expected auto, avx512, avx2 or portable)".to_string()
    })?;
    let missing = path.missing_features();
    if !missing.is_empty() {
        return Err(format!(
            "this CPU cannot run the {name} kernels: it lacks {} (they need {}); use {} or auto",
            missing.join(", "),
            path.features().join(", "),
            KernelPath::best().name()
        ));
    }
    Ok(path)
}

/// The path the dispatching kernels below run.
fn active() -> KernelPath {
    kernel_path()
}

/// Runs `$kernel` from the module of `$path` (checked to be supported: the
/// level functions are `unsafe` because they need their CPU features).
macro_rules! dispatch {
    ($path:expr, $kernel:ident($($arg:expr),* $(,)?)) => {{
        let path: KernelPath = $path;
        assert!(
            path.supported(),
            "the {} kernels need {:?}, which this CPU lacks",
            path.name(),
            path.missing_features()
        );
        match path {
            // SAFETY: the CPU has every feature the module's functions are
            // compiled for (asserted above).
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx512 => unsafe { avx512::$kernel($($arg),*) },
            #[cfg(target_arch = "x86_64")]
            KernelPath::Avx2 => unsafe { avx2::$kernel($($arg),*) },
            // SAFETY: the portable functions need no CPU feature.
            _ => unsafe { portable::$kernel($($arg),*) },
        }
    }};
}

/// Defines, in a path module, the list of target features it is compiled
/// for, its CPU check, and its compiled forms of the kernels (bodies from
/// this module, inlined at the module's SIMD level). `$products`: the
/// attention products it uses.
macro_rules! kernel_path_module {
    ([$($feature:tt),*], $products:ty) => {
        use super::{AddNormParams, AttentionScratch, AttentionShape, ScoreBias};

        /// The CPU features every function of this module is compiled for.
        pub(super) const FEATURES: &[&str] = &[$($feature),*];

        /// Whether the running CPU has all of [`FEATURES`] (cached by std:
        /// cheap enough to check on every call).
        pub(super) fn supported() -> bool {
            true $(&& std::is_x86_feature_detected!($feature))*
        }

        /// The features of [`FEATURES`] the running CPU lacks.
        pub(super) fn missing() -> Vec<&'static str> {
            let checks: &[(bool, &'static str)] =
                &[$((std::is_x86_feature_detected!($feature), $feature)),*];
            checks.iter().filter(|(has, _)| !has).map(|(_, f)| *f).collect()
        }

        /// [`super::add_norm_rows`] at this module's level.
        ///
        /// # Safety
        /// The CPU must have every feature in [`FEATURES`].
        $(#[target_feature(enable = $feature)])*
        pub(super) unsafe fn add_norm_rows(
            x: &mut [f32],
            residual: &[f32],
            p: &AddNormParams<'_>,
        ) {
            super::add_norm_body(x, residual, p)
        }

        /// [`super::bias_gelu_rows`] at this module's level.
        ///
        /// # Safety
        /// As [`add_norm_rows`].
        $(#[target_feature(enable = $feature)])*
        pub(super) unsafe fn bias_gelu_rows(x: &mut [f32], bias: &[f32]) {
            super::bias_gelu_body(x, bias)
        }

        /// [`super::glu_rows`] at this module's level.
        ///
        /// # Safety
        /// As [`add_norm_rows`].
        $(#[target_feature(enable = $feature)])*
        pub(super) unsafe fn glu_rows(
            x: &[f32],
            out: &mut [f32],
            inner: usize,
            act: super::GateActivation,
            act_first: bool,
        ) {
            super::glu_body(x, out, inner, act, act_first)
        }

        /// [`super::attend_sequence`] at this module's level.
        ///
        /// # Safety
        /// As [`add_norm_rows`].
        $(#[target_feature(enable = $feature)])*
        pub(super) unsafe fn attend(
            qkv: &[f32],
            len: usize,
            out: &mut [f32],
            s: &AttentionShape<'_>,
            bias: Option<&ScoreBias<'_>>,
            scratch: &mut AttentionScratch,
        ) {
            // SAFETY: `$products` needs at most this module's features,
            // which the caller guarantees.
            unsafe { super::attend_body::<$products>(qkv, len, out, s, bias, scratch) }
        }
    };
}
use kernel_path_module;

/// Defines, in an x86 path module, the attention products as explicit
/// register tiles over one SIMD register of `$lanes` f32 (`$feature`'s
/// intrinsics named after it): `R` accumulators, so each loaded row of keys
/// or values feeds `R` multiplies and adds while the other operand is
/// broadcast straight from memory. A multiply and a separate add, in the
/// portable loops' order, so every path gives the same bits (Rust never
/// fuses them either; an FMA here differs by ~1e-7, which reduced
/// precisions amplify: a rounding to bf16 or a u8 step that lands the
/// other way at the next product moved end-to-end int8 cosines by 6e-3,
/// measured on AMD EPYC Zen 5).
#[cfg(target_arch = "x86_64")]
macro_rules! tiled_products {
    ($feature:literal, $lanes:expr, $zero:ident, $load:ident, $store:ident, $set1:ident,
     $add:ident, $mul:ident) => {
        use std::arch::x86_64::*;

        use super::{AttentionProducts, Keys};

        /// The register-tiled attention products.
        pub(super) struct Tiles;

        impl AttentionProducts for Tiles {
            /// # Safety
            /// The CPU must have this module's features.
            #[inline(always)]
            unsafe fn scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
                // SAFETY: the caller guarantees the features.
                unsafe { tile_scores::<R>(keys, q, scores) }
            }

            /// # Safety
            /// As [`Tiles::scores`].
            #[inline(always)]
            unsafe fn weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
                // SAFETY: the caller guarantees the features.
                unsafe { tile_weighted_values::<R>(keys, p, o) }
            }
        }

        /// Rows per sub-block and vectors per step: 4 × 2 accumulators, so
        /// each step loads 2 vectors and broadcasts 4 values for 8
        /// multiplies and adds (a 1-vector block of 8 rows loaded 9 for 8,
        /// and its loads, not its arithmetic, bounded it).
        const SUB_ROWS: usize = 4;

        /// `scores[r][j] = Σ_c q[r][c] · kt[c][j]`.
        ///
        /// # Safety
        /// The CPU must have this module's features.
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn tile_scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]) {
            let Keys { stride, width, .. } = *keys;
            let d = q.len() / R;
            assert!(
                d > 0
                    && keys.kt.len() >= (d - 1) * stride + width
                    && scores.len() >= R * width
                    && width.is_multiple_of($lanes)
            );
            let b = Operand {
                values: keys.kt,
                stride,
                len: d,
                width,
            };
            // SAFETY: the sizes asserted above are those `rows_times` needs.
            unsafe { rows_times::<R>(q, d, &b, scores) }
        }

        /// `o[r][c] = Σ_j p[r][j] · v[j][c]`.
        ///
        /// # Safety
        /// The CPU must have this module's features.
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn tile_weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]) {
            let Keys { len, width, dp, .. } = *keys;
            assert!(
                keys.v.len() >= len * dp
                    && p.len() >= R * width
                    && o.len() >= R * dp
                    && dp % $lanes == 0
            );
            let b = Operand {
                values: keys.v,
                stride: dp,
                len,
                width: dp,
            };
            // SAFETY: as above.
            unsafe { rows_times::<R>(p, width, &b, o) }
        }

        /// The right-hand side of [`rows_times`]: `len` rows, `stride`
        /// apart, of which the first `width` columns (whole vectors) are
        /// used.
        struct Operand<'a> {
            values: &'a [f32],
            stride: usize,
            len: usize,
            width: usize,
        }

        /// `out[r][j] = Σ_k a[r][k] · b[k][j]` for `R` rows of `a` (`a_width`
        /// apart; `b.len` values each are used) and `out` (`b.width` apart),
        /// in sub-blocks of [`SUB_ROWS`] rows over two vectors a step, then
        /// one. Each output is the sum over `k` in order, from zero, a
        /// multiply then an add: the portable loops' bits.
        ///
        /// # Safety
        /// The CPU must have this module's features; `a` must hold `R` rows,
        /// `out` `R` rows of `b.width`, `b.values` `b.len` rows; `b.width` a
        /// whole number of vectors.
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn rows_times<const R: usize>(
            a: &[f32],
            a_width: usize,
            b: &Operand<'_>,
            out: &mut [f32],
        ) {
            let mut r0 = 0;
            while r0 < R {
                let (a, out) = (&a[r0 * a_width..], &mut out[r0 * b.width..]);
                // SAFETY: rows r0.. of a and out, within the caller's sizes.
                unsafe {
                    if R - r0 >= SUB_ROWS {
                        sub_block::<SUB_ROWS>(a, a_width, b, out);
                        r0 += SUB_ROWS;
                    } else {
                        sub_block::<1>(a, a_width, b, out);
                        r0 += 1;
                    }
                }
            }
        }

        /// [`rows_times`] for `S` rows.
        ///
        /// # Safety
        /// As [`rows_times`], with `S` rows.
        #[target_feature(enable = $feature)]
        #[inline]
        unsafe fn sub_block<const S: usize>(
            a: &[f32],
            a_width: usize,
            b: &Operand<'_>,
            out: &mut [f32],
        ) {
            let Operand {
                values,
                stride,
                len,
                width,
            } = *b;
            let (bv, a, out) = (values.as_ptr(), a.as_ptr(), out.as_mut_ptr());
            let mut j0 = 0;
            while j0 + 2 * $lanes <= width {
                let mut acc = [[$zero(); 2]; S];
                for k in 0..len {
                    // SAFETY: k < len, r < S and j0 + 2·lanes <= width (the
                    // caller's sizes).
                    let (b0, b1) = unsafe {
                        let at = bv.add(k * stride + j0);
                        ($load(at), $load(at.add($lanes)))
                    };
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let x = $set1(unsafe { *a.add(r * a_width + k) });
                        acc[0] = $add(acc[0], $mul(x, b0));
                        acc[1] = $add(acc[1], $mul(x, b1));
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    unsafe {
                        $store(out.add(r * width + j0), acc[0]);
                        $store(out.add(r * width + j0 + $lanes), acc[1]);
                    }
                }
                j0 += 2 * $lanes;
            }
            if j0 < width {
                let mut acc = [$zero(); S];
                for k in 0..len {
                    // SAFETY: as above, one vector.
                    let b0 = unsafe { $load(bv.add(k * stride + j0)) };
                    for (r, acc) in acc.iter_mut().enumerate() {
                        let x = $set1(unsafe { *a.add(r * a_width + k) });
                        *acc = $add(*acc, $mul(x, b0));
                    }
                }
                for (r, acc) in acc.iter().enumerate() {
                    unsafe { $store(out.add(r * width + j0), *acc) };
                }
            }
        }
    };
}
#[cfg(target_arch = "x86_64")]
use tiled_products;

/// Lanes in the accumulators of reductions: one AVX-512 register of f32.
/// The same on every path, so every path adds in the same order.
const LANES: usize = 16;

/// Σ x, with `LANES` independent partial sums so the loop vectorises.
#[inline(always)]
fn sum(x: &[f32]) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().sum();
    for c in chunks {
        for i in 0..LANES {
            acc[i] += c[i];
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// Σ (x − m)², vectorised like [`sum`].
#[inline(always)]
fn sum_sq_dev(x: &[f32], m: f32) -> f32 {
    let mut acc = [0f32; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail: f32 = chunks.remainder().iter().map(|v| (v - m) * (v - m)).sum();
    for c in chunks {
        for i in 0..LANES {
            let d = c[i] - m;
            acc[i] += d * d;
        }
    }
    acc.iter().sum::<f32>() + tail
}

/// max x (−∞ for an empty slice), vectorised like [`sum`].
#[inline(always)]
fn max(x: &[f32]) -> f32 {
    let mut acc = [f32::NEG_INFINITY; LANES];
    let chunks = x.chunks_exact(LANES);
    let tail = chunks
        .remainder()
        .iter()
        .fold(f32::NEG_INFINITY, |a, &v| a.max(v));
    for c in chunks {
        for i in 0..LANES {
            acc[i] = acc[i].max(c[i]);
        }
    }
    acc.iter().fold(tail, |a, &v| a.max(v))
}

/// The parameters of one "add bias and residual, then layer-normalise" step.
pub(crate) struct AddNormParams<'a> {
    pub bias: &'a [f32],
    pub gamma: &'a [f32],
    pub beta: &'a [f32],
    pub eps: f32,
}

/// For each row: `x ← LayerNorm(x + bias + residual)`, on the active
/// [`KernelPath`]. The mean and variance are taken in two passes over the
/// row (held in L1), as accurate as the reference implementations'
/// single-pass forms or more.
pub(crate) fn add_norm_rows(x: &mut [f32], residual: &[f32], p: &AddNormParams<'_>) {
    add_norm_rows_on(active(), x, residual, p)
}

/// [`add_norm_rows`] on a given path (panics if the CPU cannot run it).
pub(crate) fn add_norm_rows_on(
    path: KernelPath,
    x: &mut [f32],
    residual: &[f32],
    p: &AddNormParams<'_>,
) {
    dispatch!(path, add_norm_rows(x, residual, p))
}

#[inline(always)]
fn add_norm_body(x: &mut [f32], residual: &[f32], p: &AddNormParams<'_>) {
    let h = p.bias.len();
    for (row, res) in x.chunks_exact_mut(h).zip(residual.chunks_exact(h)) {
        for ((v, &r), &b) in row.iter_mut().zip(res).zip(p.bias) {
            *v += r + b;
        }
        let mean = sum(row) / h as f32;
        let var = sum_sq_dev(row, mean) / h as f32;
        let rstd = 1.0 / (var + p.eps).sqrt();
        for ((v, &g), &b) in row.iter_mut().zip(p.gamma).zip(p.beta) {
            *v = (*v - mean) * rstd * g + b;
        }
    }
}

/// For each row: `x ← GELU(x + bias)`, exact (erf) form, on the active
/// [`KernelPath`].
pub(crate) fn bias_gelu_rows(x: &mut [f32], bias: &[f32]) {
    bias_gelu_rows_on(active(), x, bias)
}

/// [`bias_gelu_rows`] on a given path (panics if the CPU cannot run it).
pub(crate) fn bias_gelu_rows_on(path: KernelPath, x: &mut [f32], bias: &[f32]) {
    dispatch!(path, bias_gelu_rows(x, bias))
}

#[inline(always)]
fn bias_gelu_body(x: &mut [f32], bias: &[f32]) {
    for row in x.chunks_exact_mut(bias.len()) {
        for (v, &b) in row.iter_mut().zip(bias) {
            *v = gelu(*v + b);
        }
    }
}

/// The activation of a gated feed-forward (the GLU variants: GeGLU with
/// the exact or the tanh GELU, SwiGLU).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum GateActivation {
    /// GELU, exact (erf) form.
    GeluErf,
    /// GELU, tanh approximation (`gelu_pytorch_tanh`, `gelu_new`).
    GeluTanh,
    /// SiLU (swish).
    Silu,
}

/// For each row of `x` (`2·inner` wide: the half the activation applies
/// to first when `act_first`, else second), `out`'s row (`inner` wide) is
/// act(that half) · the other half, on the active [`KernelPath`]. One pass
/// instead of Candle's two slices, activation and product.
pub(crate) fn glu_rows(
    x: &[f32],
    out: &mut [f32],
    inner: usize,
    act: GateActivation,
    act_first: bool,
) {
    glu_rows_on(active(), x, out, inner, act, act_first)
}

/// [`glu_rows`] on a given path (panics if the CPU cannot run it).
pub(crate) fn glu_rows_on(
    path: KernelPath,
    x: &[f32],
    out: &mut [f32],
    inner: usize,
    act: GateActivation,
    act_first: bool,
) {
    dispatch!(path, glu_rows(x, out, inner, act, act_first))
}

#[inline(always)]
fn glu_body(x: &[f32], out: &mut [f32], inner: usize, act: GateActivation, act_first: bool) {
    // One loop per activation, so each vectorises on its own.
    match act {
        GateActivation::GeluErf => glu_with(x, out, inner, act_first, gelu),
        GateActivation::GeluTanh => glu_with(x, out, inner, act_first, gelu_tanh),
        GateActivation::Silu => glu_with(x, out, inner, act_first, |v| v * sigmoid(v)),
    }
}

#[inline(always)]
fn glu_with(x: &[f32], out: &mut [f32], inner: usize, act_first: bool, f: impl Fn(f32) -> f32) {
    for (row, o) in x.chunks_exact(2 * inner).zip(out.chunks_exact_mut(inner)) {
        let (a, b) = row.split_at(inner);
        let (gate, other) = if act_first { (a, b) } else { (b, a) };
        for ((o, &g), &u) in o.iter_mut().zip(gate).zip(other) {
            *o = f(g) * u;
        }
    }
}

/// 1 / (1 + e^−z), from [`exp_neg`] of −|z| so it never overflows and
/// loops over it vectorise.
#[inline(always)]
fn sigmoid(z: f32) -> f32 {
    let e = exp_neg(-z.abs());
    let s = 1.0 / (1.0 + e);
    if z >= 0.0 {
        s
    } else {
        e * s
    }
}

/// 0.5·x·(1 + tanh(√(2/π)·(x + 0.044715·x³))), the tanh GELU, written as
/// x·sigmoid(2·√(2/π)·(x + 0.044715·x³)) (the same function: 0.5·(1 +
/// tanh y) = sigmoid(2y)), which has no cancellation for negative x.
#[inline(always)]
pub(crate) fn gelu_tanh(x: f32) -> f32 {
    const TWO_SQRT_2_OVER_PI: f32 = 1.595_769;
    x * sigmoid(TWO_SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x))
}

/// The shape of one sequence's attention input: `qkv` rows are
/// `[q | k | v]`, each `heads × head_dim`, biases not yet added; the query
/// part already carries the 1/√d scale (weights and bias).
pub(crate) struct AttentionShape<'a> {
    pub heads: usize,
    pub head_dim: usize,
    pub qkv_bias: &'a [f32],
    /// Keys a query sees on either side (a local layer's window, as
    /// ModernBERT's); `None`: every key. Keys outside it are neither scored
    /// nor weighted: their probability is exactly 0, as under a -inf mask.
    pub reach: Option<usize>,
}

/// Most queries handled together in attention: their score rows and outputs
/// stay in registers while one row of keys or values is loaded.
const QUERY_BLOCK: usize = 8;

/// A score bias that depends only on where the key lies relative to the
/// query (MPNet's relative positions): per head, `2·span − 1` values for
/// the offsets `j − i` from `−(span − 1)` to `span − 1`, so one table
/// serves every sequence of up to `span` tokens, and the bias row of a
/// query is one contiguous slice of it.
pub(crate) struct RelativeBias<'a> {
    /// `heads × (2·span − 1)`, by head, then offset `j − i + span − 1`.
    pub values: &'a [f32],
    /// The longest sequence the table covers.
    pub span: usize,
}

/// A score bias added before the softmax, in one of the forms families
/// have.
pub(crate) enum ScoreBias<'a> {
    /// By the key's offset from the query, shared by every sequence.
    Relative(&'a RelativeBias<'a>),
    /// One value per head, query and key of one sequence of `len` tokens
    /// (`heads × len × len`, by head, then query, then key): DeBERTa's
    /// disentangled terms, which depend on the sequence's own queries and
    /// keys ([`disentangled`]).
    Pairs { values: &'a [f32], len: usize },
}

impl ScoreBias<'_> {
    /// The bias of query `i` against keys `from..from + len` in `head`.
    #[inline(always)]
    fn row(&self, head: usize, i: usize, from: usize, len: usize) -> &[f32] {
        match self {
            ScoreBias::Relative(t) => {
                let width = 2 * t.span - 1;
                &t.values[head * width + t.span - 1 - i + from..][..len]
            }
            ScoreBias::Pairs { values, len: n } => &values[(head * n + i) * n + from..][..len],
        }
    }
}

/// Working memory of [`attend_sequence`], reused across calls.
#[derive(Default)]
pub(crate) struct AttentionScratch {
    /// Every head's keys, transposed: `heads × head_dim × lp` (lp = len
    /// rounded up to whole lanes; the padding columns are zero).
    kt: Vec<f32>,
    /// Every head's values: `heads × len × dp` (dp = head_dim rounded up
    /// likewise; the padding columns are zero).
    v: Vec<f32>,
    /// Every head's queries with their bias: `heads × len × head_dim`.
    q: Vec<f32>,
    /// One query block's score rows, then probabilities (`R × lp`), and
    /// outputs (`R × dp`).
    scores: Vec<f32>,
    out: Vec<f32>,
}

/// `buf` as `n` zeros.
fn zeroed(buf: &mut Vec<f32>, n: usize) -> &mut [f32] {
    buf.clear();
    buf.resize(n, 0.0);
    buf
}

/// Self-attention of one sequence, on the active [`KernelPath`]. `qkv`:
/// `len × 3h` rows `[q | k | v]`, each `heads × head_dim`, biases not yet
/// added (the query part already carries the 1/√d scale); `out`: `len × h`.
/// Only real tokens come in, so no mask is needed. `bias`, where a family
/// has one (MPNet's relative positions, DeBERTa's disentangled terms), is
/// added to the scores before the softmax.
pub(crate) fn attend_sequence(
    qkv: &[f32],
    len: usize,
    out: &mut [f32],
    s: &AttentionShape<'_>,
    bias: Option<&ScoreBias<'_>>,
    scratch: &mut AttentionScratch,
) {
    attend_sequence_on(active(), qkv, len, out, s, bias, scratch)
}

/// [`attend_sequence`] on a given path (panics if the CPU cannot run it).
pub(crate) fn attend_sequence_on(
    path: KernelPath,
    qkv: &[f32],
    len: usize,
    out: &mut [f32],
    s: &AttentionShape<'_>,
    bias: Option<&ScoreBias<'_>>,
    scratch: &mut AttentionScratch,
) {
    match bias {
        Some(ScoreBias::Relative(b)) => assert!(
            len <= b.span && b.values.len() == s.heads * (2 * b.span - 1),
            "attention bias: heads × (2·span − 1) values, span ≥ len"
        ),
        Some(ScoreBias::Pairs { values, len: n }) => assert!(
            *n == len && values.len() == s.heads * len * len,
            "attention bias: heads × len × len values"
        ),
        None => {}
    }
    dispatch!(path, attend(qkv, len, out, s, bias, scratch))
}

/// The two products of attention, as one kernel path computes them.
trait AttentionProducts {
    /// `scores[r][j] = Σ_c q[r][c] · kt[c][j]` for `R` queries.
    ///
    /// # Safety
    /// The CPU must have the implementing path's features.
    unsafe fn scores<const R: usize>(keys: &Keys<'_>, q: &[f32], scores: &mut [f32]);

    /// `o[r][c] = Σ_j p[r][j] · v[j][c]` for `R` probability rows.
    ///
    /// # Safety
    /// As [`AttentionProducts::scores`].
    unsafe fn weighted_values<const R: usize>(keys: &Keys<'_>, p: &[f32], o: &mut [f32]);
}

/// The body of [`attend_sequence`], with the products of `P`.
///
/// # Safety
/// The CPU must have the features `P` needs.
#[inline(always)]
unsafe fn attend_body<P: AttentionProducts>(
    qkv: &[f32],
    len: usize,
    out: &mut [f32],
    s: &AttentionShape<'_>,
    bias: Option<&ScoreBias<'_>>,
    scratch: &mut AttentionScratch,
) {
    const R: usize = QUERY_BLOCK;
    let d = s.head_dim;
    let h = s.heads * d;
    let lp = len.div_ceil(LANES) * LANES;
    let dp = d.div_ceil(LANES) * LANES;
    let (kt, v, q) = (&mut scratch.kt, &mut scratch.v, &mut scratch.q);
    kt.resize(s.heads * d * lp, 0.0);
    v.resize(s.heads * len * dp, 0.0);
    q.resize(s.heads * len * d, 0.0);
    // One pass over the sequence's rows lays out every head (a pass per
    // head re-read the rows from L2 for each head): biases added, keys
    // transposed; then only the padding columns are zeroed.
    for (j, row) in qkv.chunks_exact(3 * h).take(len).enumerate() {
        for head in 0..s.heads {
            let (qo, ko, vo) = (head * d, h + head * d, 2 * h + head * d);
            add(
                &mut q[(head * len + j) * d..][..d],
                &row[qo..qo + d],
                &s.qkv_bias[qo..qo + d],
            );
            let keys = &mut kt[head * d * lp..][..d * lp];
            for (c, (&x, &b)) in row[ko..ko + d]
                .iter()
                .zip(&s.qkv_bias[ko..ko + d])
                .enumerate()
            {
                keys[c * lp + j] = x + b;
            }
            add(
                &mut v[(head * len + j) * dp..][..d],
                &row[vo..vo + d],
                &s.qkv_bias[vo..vo + d],
            );
        }
    }
    for line in kt.chunks_exact_mut(lp) {
        line[len..].fill(0.0);
    }
    for line in v.chunks_exact_mut(dp) {
        line[d..].fill(0.0);
    }
    let scores = zeroed(&mut scratch.scores, R * lp);
    let o = zeroed(&mut scratch.out, R * dp);
    for head in 0..s.heads {
        let qo = head * d;
        let (kt, v, q) = (
            &kt[head * d * lp..][..d * lp],
            &v[head * len * dp..][..len * dp],
            &q[head * len * d..][..len * d],
        );
        let mut i = 0;
        while i < len {
            let r = match len - i {
                n if n >= 8 => 8,
                n if n >= 4 => 4,
                _ => 1,
            };
            // The keys queries i..i + r see: all, or those of their
            // windows, from a whole lane on (so the block stays inside
            // the lp columns).
            let (from, to) = match s.reach {
                Some(reach) => (
                    i.saturating_sub(reach) / LANES * LANES,
                    (i + r + reach).min(len),
                ),
                None => (0, len),
            };
            let width = (to - from).div_ceil(LANES) * LANES;
            let keys = Keys {
                kt: &kt[from..],
                v: &v[from * dp..],
                len: to - from,
                stride: lp,
                width,
                dp,
            };
            let (q, scores, o) = (
                &q[i * d..(i + r) * d],
                &mut scores[..r * width],
                &mut o[..r * dp],
            );
            let block = Block {
                head,
                first: i,
                from,
                reach: s.reach,
            };
            // SAFETY: the caller guarantees the features `P` needs.
            unsafe {
                match r {
                    8 => query_block::<8, P>(&keys, q, block, bias, scores, o),
                    4 => query_block::<4, P>(&keys, q, block, bias, scores, o),
                    _ => query_block::<1, P>(&keys, q, block, bias, scores, o),
                }
            }
            for k in 0..r {
                out[(i + k) * h + qo..][..d].copy_from_slice(&o[k * dp..k * dp + d]);
            }
            i += r;
        }
    }
}

/// `dst = a + b`, element-wise.
#[inline(always)]
fn add(dst: &mut [f32], a: &[f32], b: &[f32]) {
    for ((d, &x), &y) in dst.iter_mut().zip(a).zip(b) {
        *d = x + y;
    }
}

/// `dst += b`, element-wise.
#[inline(always)]
fn add_in_place(dst: &mut [f32], b: &[f32]) {
    for (d, &y) in dst.iter_mut().zip(b) {
        *d += y;
    }
}

/// The keys a query block sees, of one head: transposed keys and values
/// from the first key of the block's range on.
#[derive(Clone, Copy)]
struct Keys<'a> {
    /// `head_dim` rows `stride` apart; the block's keys are columns
    /// `0..len` of each. Columns `len..width` (zeros, or keys past the
    /// block's range) are scored with them but never weighted.
    kt: &'a [f32],
    /// `len` rows of `dp`.
    v: &'a [f32],
    len: usize,
    stride: usize,
    /// Columns scored, `len` rounded up to whole lanes: the score rows'
    /// width.
    width: usize,
    dp: usize,
}

/// Where a query block sits: its head, its first query, the first key of
/// its range, and the window its queries see.
#[derive(Clone, Copy)]
struct Block {
    head: usize,
    first: usize,
    from: usize,
    reach: Option<usize>,
}

/// Attention of `R` queries (`q`: `R × head_dim`) against the keys of
/// their block: scores into `scores` (`R × width`), plus the score bias
/// where given, softmax in place over the keys each query sees (0 for the
/// rest), then `o` (`R × dp`) = P·V.
///
/// # Safety
/// The CPU must have the features `P` needs.
#[inline(always)]
unsafe fn query_block<const R: usize, P: AttentionProducts>(
    keys: &Keys<'_>,
    q: &[f32],
    block: Block,
    bias: Option<&ScoreBias<'_>>,
    scores: &mut [f32],
    o: &mut [f32],
) {
    // SAFETY: the caller guarantees the features `P` needs.
    unsafe { P::scores::<R>(keys, q, scores) };
    let Keys { len, width, .. } = *keys;
    let Block {
        head,
        first,
        from,
        reach,
    } = block;
    if let Some(table) = bias {
        for (k, row) in scores.chunks_exact_mut(width).enumerate() {
            add_in_place(&mut row[..len], table.row(head, first + k, from, len));
        }
    }
    for (k, row) in scores.chunks_exact_mut(width).enumerate() {
        // The keys query first + k sees, as columns of the block.
        let (lo, hi) = match reach {
            Some(reach) => (
                (first + k).saturating_sub(reach).max(from) - from,
                (first + k + reach + 1).min(from + len) - from,
            ),
            None => (0, len),
        };
        let (before, rest) = row.split_at_mut(lo);
        let (seen, after) = rest.split_at_mut(hi - lo);
        let m = max(seen);
        for x in seen.iter_mut() {
            *x = exp_neg(*x - m);
        }
        let inv = 1.0 / sum(seen);
        seen.iter_mut().for_each(|x| *x *= inv);
        before.iter_mut().for_each(|x| *x = 0.0);
        after.iter_mut().for_each(|x| *x = 0.0);
    }
    // SAFETY: as above.
    unsafe { P::weighted_values::<R>(keys, scores, o) };
}

/// 0.5·x·erfc(−x/√2), with erfc from the Chebyshev-fitted formula of
/// Numerical Recipes (fractional error < 1.2e-7) and a branch-free exp, so
/// loops over it vectorise. Both polynomials are evaluated in Estrin's
/// scheme (powers of t, then pairs), not Horner's: the same worst error
/// against f64 (1.1e-7 over −6..6), at half the chain of dependent
/// operations, which was what bounded the vectorised loop.
#[inline(always)]
pub(crate) fn gelu(x: f32) -> f32 {
    let u = -x * std::f32::consts::FRAC_1_SQRT_2;
    let z = u.abs();
    let t = 1.0 / (1.0 + 0.5 * z);
    let t2 = t * t;
    let t4 = t2 * t2;
    let t8 = t4 * t4;
    let poly = ((-1.265_512_2 + t * 1.000_023_7) + t2 * (0.374_091_96 + t * 0.096_784_18))
        + t4 * ((-0.186_288_06 + t * 0.278_868_07) + t2 * (-1.135_204 + t * 1.488_515_9))
        + t8 * (-0.822_152_23 + t * 0.170_872_77);
    let ans = t * exp_neg(-z * z + poly);
    let erfc = if u >= 0.0 { ans } else { 2.0 - ans };
    0.5 * x * erfc
}

/// e^x for x ≤ 0 (clamped below at −87), relative error ~2e-7:
/// 2^n · p(r) with n = round(x/ln2), |r| ≤ ln2/2.
#[inline(always)]
pub(crate) fn exp_neg(x: f32) -> f32 {
    const MAGIC: f32 = 12_582_912.0; // 1.5 · 2^23: adding it rounds to an integer
    let x = x.max(-87.0);
    let shifted = x * std::f32::consts::LOG2_E + MAGIC;
    let n = shifted - MAGIC;
    let r = x - n * 0.693_145_75 - n * 1.428_606_8e-6;
    // Estrin's scheme, as in [`gelu`].
    let r2 = r * r;
    let r4 = r2 * r2;
    let p = (1.0 + r)
        + r2 * (0.5 + r * 0.166_666_67)
        + r4 * ((0.041_666_668 + r * 0.008_333_334) + r2 * 0.001_388_889);
    // n as an integer, read from the mantissa bits rather than by a float
    // to int conversion (Rust's saturating `as` does not vectorise).
    let n_int = shifted.to_bits().wrapping_sub(MAGIC.to_bits());
    let scale = f32::from_bits(n_int.wrapping_add(127) << 23);
    p * scale
}

#[cfg(test)]
mod tests {
    use super::*;

    fn erf_ref(x: f64) -> f64 {
        // erf by its Taylor series (converges well for |x| < 5 in f64).
        let mut sum: f64 = 0.0;
        let mut term = x;
        let mut n = 0.0;
        while term.abs() > 1e-17 * sum.abs().max(1e-300) && n < 200.0 {
            sum += term / (2.0 * n + 1.0);
            n += 1.0;
            term *= -x * x / n;
        }
        2.0 / std::f64::consts::PI.sqrt() * sum
    }

    fn gelu_ref(x: f64) -> f64 {
        if x.abs() < 5.0 {
            0.5 * x * (1.0 + erf_ref(x / std::f64::consts::SQRT_2))
        } else if x > 0.0 {
            x
        } else {
            0.0
        }
    }

    /// The kernel paths this CPU can run, each f64-reference test runs on
    /// all of them; the others are skipped with a message, so an AVX-512
    /// machine tests all three and an AVX2 one the two it has.
    fn runnable_paths() -> Vec<KernelPath> {
        KernelPath::ALL
            .into_iter()
            .filter(|p| {
                let missing = p.missing_features();
                if !missing.is_empty() {
                    eprintln!(
                        "skipping the {} kernels: this CPU lacks {}",
                        p.name(),
                        missing.join(", ")
                    );
                }
                missing.is_empty()
            })
            .collect()
    }

    #[test]
    #[cfg(target_arch = "x86_64")]
    fn every_path_checks_every_feature_it_is_compiled_for() {
        assert_eq!(
            KernelPath::Avx512.features(),
            ["avx512f", "avx512vl", "avx2", "fma"]
        );
        assert_eq!(KernelPath::Avx2.features(), ["avx2", "fma"]);
        assert!(KernelPath::Portable.features().is_empty());
        assert!(KernelPath::Portable.supported());
        for path in KernelPath::ALL {
            assert_eq!(
                path.supported(),
                path.missing_features().is_empty(),
                "{path:?}"
            );
            assert_eq!(KernelPath::from_name(path.name()), Some(path));
        }
        assert!(KernelPath::best().supported());
    }

    #[test]
    fn forcing_a_path_is_checked_against_the_cpu() {
        assert_eq!(choose(None), Ok(KernelPath::best()));
        assert_eq!(choose(Some(" auto ")), Ok(KernelPath::best()));
        assert_eq!(choose(Some("portable")), Ok(KernelPath::Portable));
        let err = choose(Some("sse9")).unwrap_err();
        assert!(err.starts_with("unknown kernel path"), "{err}");
        for path in KernelPath::ALL {
            match choose(Some(path.name())) {
                Ok(p) => assert!(p == path && path.supported()),
                Err(e) => {
                    assert!(!path.supported());
                    let lacks = path.missing_features().join(", ");
                    assert!(e.contains(&format!("lacks {lacks}")), "{e}");
                }
            }
        }
    }

    /// Deterministic pseudo-random values in [-scale, scale].
    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let mut s = seed
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (0..n)
            .map(|_| {
                s = s
                    .wrapping_mul(6364136223846793005)
                    .wrapping_add(1442695040888963407);
                ((s >> 40) as f32 / (1u64 << 24) as f32 * 2.0 - 1.0) * scale
            })
            .collect()
    }

    #[test]
    fn gelu_matches_the_exact_function() {
        let xs: Vec<f32> = (-2000..=2000).map(|k| k as f32 * 0.005).collect();
        for path in runnable_paths() {
            let mut got = xs.clone();
            bias_gelu_rows_on(path, &mut got, &[0.0; 1]);
            let mut worst: f64 = 0.0;
            for (&x, &g) in xs.iter().zip(&got) {
                let exact = gelu_ref(x as f64);
                worst = worst.max((g as f64 - exact).abs() / exact.abs().max(1.0));
                assert_eq!(
                    g,
                    gelu(x),
                    "{path:?}: compiled and scalar forms agree bit for bit"
                );
            }
            assert!(worst < 3e-6, "{path:?}: worst error {worst}");
        }
    }

    /// Each gated activation against its f64 definition, the gate taken
    /// from the half `act_first` names, and the same bits on every path.
    #[test]
    fn glu_rows_match_their_definitions_on_every_path() {
        let inner = 37; // not a multiple of the lane count
        let rows = 5;
        let x: Vec<f32> = (0..rows * 2 * inner)
            .map(|k| ((k * 7919) % 2001) as f32 * 0.01 - 10.0)
            .collect();
        let tanh_gelu = |v: f64| {
            0.5 * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh())
        };
        let cases: [(GateActivation, &dyn Fn(f64) -> f64); 3] = [
            (GateActivation::GeluErf, &gelu_ref),
            (GateActivation::GeluTanh, &tanh_gelu),
            (GateActivation::Silu, &|v: f64| v / (1.0 + (-v).exp())),
        ];
        for (act, reference) in cases {
            for act_first in [true, false] {
                let mut first: Option<Vec<f32>> = None;
                for path in runnable_paths() {
                    let mut out = vec![0f32; rows * inner];
                    glu_rows_on(path, &x, &mut out, inner, act, act_first);
                    let mut worst: f64 = 0.0;
                    for (r, o) in out.chunks_exact(inner).enumerate() {
                        let row = &x[r * 2 * inner..][..2 * inner];
                        let (a, b) = row.split_at(inner);
                        let (g, u) = if act_first { (a, b) } else { (b, a) };
                        for i in 0..inner {
                            // Relative to the activation's size (at least 1),
                            // as gelu_matches_the_exact_function measures.
                            let act = reference(g[i] as f64);
                            let want = act * u[i] as f64;
                            let scale = act.abs().max(1.0) * (u[i] as f64).abs().max(1e-3);
                            let err = (o[i] as f64 - want).abs() / scale;
                            worst = worst.max(err);
                        }
                    }
                    assert!(worst < 3e-6, "{act:?} {path:?}: worst error {worst}");
                    match &first {
                        None => first = Some(out),
                        Some(f) => assert_eq!(f, &out, "{act:?}: {path:?} differs"),
                    }
                }
            }
        }
    }

    #[test]
    fn exp_is_accurate() {
        for k in 0..=870 {
            let x = -(k as f32) * 0.1;
            let want = (x as f64).exp();
            let got = exp_neg(x) as f64;
            assert!(
                ((got - want) / want).abs() < 1e-6,
                "exp({x}) = {got}, want {want}"
            );
        }
    }

    #[test]
    fn add_norm_matches_a_direct_computation() {
        let h = 40; // not a multiple of the lane count: exercises the tails
        let rows = 3;
        let x0 = values(rows * h, 1, 3.0);
        let res = values(rows * h, 2, 1.0);
        let (bias, gamma, beta) = (values(h, 3, 0.5), values(h, 4, 2.0), values(h, 5, 0.5));
        let p = AddNormParams {
            bias: &bias,
            gamma: &gamma,
            beta: &beta,
            eps: 1e-12,
        };
        for path in runnable_paths() {
            check_add_norm(path, &x0, &res, &p, rows);
        }
    }

    fn check_add_norm(
        path: KernelPath,
        x0: &[f32],
        res: &[f32],
        p: &AddNormParams<'_>,
        rows: usize,
    ) {
        let (h, bias, gamma, beta) = (p.bias.len(), p.bias, p.gamma, p.beta);
        let mut x = x0.to_vec();
        add_norm_rows_on(path, &mut x, res, p);
        for r in 0..rows {
            let v: Vec<f64> = (0..h)
                .map(|c| (x0[r * h + c] + res[r * h + c] + bias[c]) as f64)
                .collect();
            let mean = v.iter().sum::<f64>() / h as f64;
            let var = v.iter().map(|a| (a - mean).powi(2)).sum::<f64>() / h as f64;
            for c in 0..h {
                let want = (v[c] - mean) / (var + 1e-12).sqrt() * gamma[c] as f64 + beta[c] as f64;
                assert!(
                    (x[r * h + c] as f64 - want).abs() < 1e-5,
                    "{path:?}: row {r} col {c}"
                );
            }
        }
    }

    #[test]
    fn attention_matches_a_direct_computation() {
        for (heads, d, t, len) in [
            (3, 8, 7, 5),
            (2, 32, 40, 37),
            (1, 16, 17, 17),
            (2, 24, 1, 1),
            (4, 32, 13, 13),
        ] {
            for path in runnable_paths() {
                // Windows narrower than a lane and than a query block, and
                // one wider than the text.
                for reach in [None, Some(0), Some(3), Some(20), Some(64)] {
                    for bias in [TestBias::None, TestBias::Relative, TestBias::Pairs] {
                        check_attention(path, heads, d, t, len, bias, reach);
                    }
                }
            }
        }
    }

    /// A window's attention: every path gives the same bits, and a window
    /// wider than the text gives those of none.
    #[test]
    fn windowed_attention_is_the_same_on_every_path() {
        let (heads, d, len) = (2, 32, 70);
        let h = heads * d;
        let qkv = values(len * 3 * h, 11, 1.5);
        let bias = values(3 * h, 12, 0.3);
        let run = |path, reach| attended(path, &qkv, len, heads, d, &bias, reach, None);
        for reach in [Some(5), Some(17)] {
            let first = run(KernelPath::Portable, reach);
            for path in runnable_paths() {
                assert!(run(path, reach) == first, "{path:?}, reach {reach:?}");
            }
        }
        for path in runnable_paths() {
            assert!(run(path, Some(len)) == run(path, None), "{path:?}");
        }
    }

    /// A per-pair bias (DeBERTa's form): every path gives the same bits.
    #[test]
    fn pair_biased_attention_is_the_same_on_every_path() {
        let (heads, d, len) = (3, 64, 45);
        let h = heads * d;
        let qkv = values(len * 3 * h, 13, 1.5);
        let bias = values(3 * h, 14, 0.3);
        let pairs = values(heads * len * len, 15, 2.0);
        let score_bias = ScoreBias::Pairs {
            values: &pairs,
            len,
        };
        let run = |path| attended(path, &qkv, len, heads, d, &bias, None, Some(&score_bias));
        let first = run(KernelPath::Portable);
        for path in runnable_paths() {
            assert!(run(path) == first, "{path:?}");
        }
    }

    /// [`attend_sequence_on`]'s output for `len` rows of `qkv`.
    #[allow(clippy::too_many_arguments)]
    fn attended(
        path: KernelPath,
        qkv: &[f32],
        len: usize,
        heads: usize,
        head_dim: usize,
        qkv_bias: &[f32],
        reach: Option<usize>,
        table: Option<&ScoreBias<'_>>,
    ) -> Vec<f32> {
        let mut out = vec![f32::NAN; len * heads * head_dim];
        let shape = AttentionShape {
            heads,
            head_dim,
            qkv_bias,
            reach,
        };
        let mut scratch = AttentionScratch::default();
        attend_sequence_on(path, qkv, len, &mut out, &shape, table, &mut scratch);
        out
    }

    /// Which score bias [`check_attention`] adds.
    #[derive(Clone, Copy, PartialEq)]
    enum TestBias {
        None,
        /// A relative table longer than the sequence.
        Relative,
        /// A value per head, query and key.
        Pairs,
    }

    /// The fused attention against f64 arithmetic, with no score bias, a
    /// relative one or one per pair, every key or a window of `reach` on
    /// either side.
    fn check_attention(
        path: KernelPath,
        heads: usize,
        d: usize,
        t: usize,
        len: usize,
        with: TestBias,
        reach: Option<usize>,
    ) {
        let h = heads * d;
        let qkv = values(t * 3 * h, 7, 1.5);
        let bias = values(3 * h, 8, 0.3);
        let span = t + 3;
        let relative = values(heads * (2 * span - 1), 9, 2.0);
        let pairs = values(heads * len * len, 10, 2.0);
        let table = RelativeBias {
            values: &relative,
            span,
        };
        let score_bias = match with {
            TestBias::None => None,
            TestBias::Relative => Some(ScoreBias::Relative(&table)),
            TestBias::Pairs => Some(ScoreBias::Pairs {
                values: &pairs,
                len,
            }),
        };
        let out = attended(
            path,
            &qkv[..len * 3 * h],
            len,
            heads,
            d,
            &bias,
            reach,
            score_bias.as_ref(),
        );
        let at = |i: usize, part: usize, head: usize, c: usize| {
            let k = part * h + head * d + c;
            (qkv[i * 3 * h + k] + bias[k]) as f64
        };
        for head in 0..heads {
            for i in 0..len {
                let added = |j: usize| match with {
                    TestBias::None => 0.0,
                    TestBias::Relative => relative[head * (2 * span - 1) + span - 1 + j - i] as f64,
                    TestBias::Pairs => pairs[(head * len + i) * len + j] as f64,
                };
                let seen = |j: usize| reach.is_none_or(|r| i.abs_diff(j) <= r);
                let scores: Vec<f64> = (0..len)
                    .map(|j| {
                        if !seen(j) {
                            return f64::NEG_INFINITY;
                        }
                        (0..d)
                            .map(|c| at(i, 0, head, c) * at(j, 1, head, c))
                            .sum::<f64>()
                            + added(j)
                    })
                    .collect();
                let m = scores.iter().cloned().fold(f64::MIN, f64::max);
                let e: Vec<f64> = scores.iter().map(|s| (s - m).exp()).collect();
                let z: f64 = e.iter().sum();
                for c in 0..d {
                    let want: f64 = (0..len).map(|j| e[j] / z * at(j, 2, head, c)).sum();
                    let got = out[i * h + head * d + c] as f64;
                    assert!(
                        (got - want).abs() < 1e-5,
                        "{path:?}: head {head} row {i} col {c}: {got} vs {want}"
                    );
                }
            }
        }
    }
}
