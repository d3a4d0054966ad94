//! The int8 tile loop on Intel AMX (`tdpbusd`): the same exact i32 sums as
//! the VNNI tiles, 16 × 16 outputs over 64 input bytes per instruction.
//!
//! - `tdpbusd` multiplies u8 activations by s8 weights and adds the i32
//!   products in i32, with no intermediate narrowing, as `vpdpbusd` does:
//!   every path gives the same integers, and so the same bits.
//! - The weights' layout is the VNNI one ([`Packed`]: per block of 16
//!   outputs, one 64-byte line of 4-byte groups per input group), which is
//!   exactly a `tdpbusd` B tile: 16 consecutive lines of a block. The
//!   activations' rows of groups are A tiles (16 rows × 16 groups).
//! - Input groups are padded to whole tiles ([`GROUPS`], zeros past the
//!   row, which add nothing), so the loop never needs a narrower tile.
//! - Four accumulator tiles (2 row tiles × 2 blocks) take the other four
//!   for their operands: 4 loads per 4 products of 16 × 16 × 64.
//! - Linux hands AMX's tile data to a process only on request
//!   (`arch_prctl(ARCH_REQ_XCOMP_PERM)`): [`usable`] asks once and says no
//!   if the kernel refuses.
//!
//! Written with `asm!`: Rust's AMX intrinsics and its `amx-*` feature
//! detection are not stable; the instructions are read from CPUID directly.

use std::arch::asm;
use std::sync::OnceLock;

use super::dot::{Packed, LANES};

/// Input groups (4 bytes each) in one tile row of 64 bytes: weights and
/// activations are padded to a multiple of this.
pub(crate) const GROUPS: usize = 16;

/// Rows of an A or C tile.
const TILE_ROWS: usize = 16;

/// Rows computed together: two A tiles.
const PAIR_ROWS: usize = 2 * TILE_ROWS;

/// Bytes of a tile row.
const ROW_BYTES: usize = 64;

/// The tile configuration `ldtilecfg` reads (palette 1): every one of the
/// eight tiles 16 rows of 64 bytes.
#[repr(C, align(64))]
struct Config {
    palette: u8,
    start_row: u8,
    reserved: [u8; 14],
    colsb: [u16; 16],
    rows: [u8; 16],
}

const CONFIG: Config = {
    let mut colsb = [0u16; 16];
    let mut rows = [0u8; 16];
    let mut t = 0;
    while t < 8 {
        colsb[t] = ROW_BYTES as u16;
        rows[t] = TILE_ROWS as u8;
        t += 1;
    }
    Config {
        palette: 1,
        start_row: 0,
        reserved: [0; 14],
        colsb,
        rows,
    }
};

/// Whether the int8 tiles run on AMX here: the CPU has AMX-TILE and
/// AMX-INT8, the system enables their state, Linux granted this process
/// the tile data, and the AVX-512 kernel path is in use (`REFSCORE_KERNELS`
/// can turn AMX off with the rest of that path).
pub(crate) fn usable() -> bool {
    static GRANTED: OnceLock<bool> = OnceLock::new();
    super::active() == super::KernelPath::Avx512 && *GRANTED.get_or_init(|| on_cpu() && request())
}

/// The AMX tile loop, where [`usable`] says it runs (its weights need
/// input groups padded to a multiple of [`GROUPS`]).
pub(crate) fn tiles() -> Option<super::dot::Rows> {
    // SAFETY: `usable` checked the CPU, the system and the permission.
    usable().then_some(|x, w, o| unsafe { rows(x, w, o) })
}

/// Whether CPUID reports AMX-TILE and AMX-INT8, and XCR0 has the tile
/// configuration and data states enabled.
pub(crate) fn on_cpu() -> bool {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // Leaf 7 is read only when the highest leaf reaches it.
    let max = __cpuid(0).eax;
    let osxsave = __cpuid(1).ecx & (1 << 27) != 0;
    let edx = if max >= 7 { __cpuid_count(7, 0).edx } else { 0 };
    let amx = edx & (1 << 24) != 0 && edx & (1 << 25) != 0;
    if max < 7 || !osxsave || !amx {
        return false;
    }
    // SAFETY: OSXSAVE is set, so `xgetbv` with ECX = 0 is allowed.
    let xcr0 = unsafe { xgetbv0() };
    xcr0 & (0b11 << 17) == 0b11 << 17
}

/// XCR0, the states the operating system saves.
///
/// # Safety
/// The CPU must report OSXSAVE.
unsafe fn xgetbv0() -> u64 {
    let (lo, hi): (u32, u32);
    // SAFETY: the caller checked OSXSAVE.
    unsafe {
        asm!("xgetbv", in("ecx") 0u32, out("eax") lo, out("edx") hi, options(nomem, nostack))
    };
    u64::from(hi) << 32 | u64::from(lo)
}

/// Asks Linux for the tile data state (`ARCH_REQ_XCOMP_PERM`,
/// `XFEATURE_XTILEDATA`): without it the first tile instruction faults.
fn request() -> bool {
    #[cfg(target_os = "linux")]
    {
        const ARCH_REQ_XCOMP_PERM: libc::c_long = 0x1023;
        const XFEATURE_XTILEDATA: libc::c_long = 18;
        // SAFETY: arch_prctl with these arguments only changes the
        // process's permitted extended states.
        unsafe {
            libc::syscall(
                libc::SYS_arch_prctl,
                ARCH_REQ_XCOMP_PERM,
                XFEATURE_XTILEDATA,
            ) == 0
        }
    }
    #[cfg(not(target_os = "linux"))]
    false
}

/// The rows of `x` (each `w.groups` groups, a multiple of [`GROUPS`]) times
/// the packed weights: `rows × w.width()` raw sums, as [`super::dot::Rows`]
/// computes them.
///
/// # Safety
/// [`usable`] must have said yes (on this process).
unsafe fn rows(x: &[u32], w: &Packed, out: &mut [u32]) {
    thread_local! {
        static TAIL: std::cell::Cell<(Vec<u32>, Vec<u32>)> = Default::default();
    }
    let (groups, width) = (w.groups, w.width());
    assert!(groups.is_multiple_of(GROUPS) && groups > 0);
    let rows = out.len() / width;
    assert!(x.len() >= rows * groups && out.len() == rows * width);
    // SAFETY (whole body): the caller checked AMX; every tile load reads 16
    // rows of 64 bytes at the strides given, inside `x` (whole row pairs),
    // the tail buffer (zero-padded to a pair) or the packed weights (a
    // block holds `groups` lines of 64 bytes), and every store writes 16
    // rows of 64 bytes inside `out` or the tail's.
    unsafe {
        asm!("ldtilecfg [{}]", in(reg) &CONFIG, options(nostack, readonly));
        let whole = rows / PAIR_ROWS * PAIR_ROWS;
        for r in (0..whole).step_by(PAIR_ROWS) {
            pair(
                x[r * groups..].as_ptr(),
                groups,
                w,
                out[r * width..].as_mut_ptr(),
                width,
            );
        }
        if whole < rows {
            // The last rows, copied into a pair of tiles padded with zero rows
            // (whose sums are computed and dropped).
            let (mut xs, mut os) = TAIL.take();
            let n = rows - whole;
            xs.clear();
            xs.extend_from_slice(&x[whole * groups..rows * groups]);
            xs.resize(PAIR_ROWS * groups, 0);
            os.resize(PAIR_ROWS * width, 0);
            pair(xs.as_ptr(), groups, w, os.as_mut_ptr(), width);
            out[whole * width..].copy_from_slice(&os[..n * width]);
            TAIL.set((xs, os));
        }
        asm!("tilerelease", options(nostack, nomem));
    }
}

/// 32 rows of groups from `x` (row stride `groups`) times every block of
/// `w`, into 32 rows of `out` (row stride `width`): blocks two at a time,
/// the last alone when their number is odd.
///
/// # Safety
/// As [`rows`], with the tile configuration loaded.
#[inline(always)]
unsafe fn pair(x: *const u32, groups: usize, w: &Packed, out: *mut u32, width: usize) {
    let x_stride = groups * 4;
    let out_stride = width * 4;
    let a0 = x;
    // SAFETY: 32 rows of `groups` each are readable from `x`.
    let a1 = unsafe { x.add(TILE_ROWS * groups) };
    let steps = groups / GROUPS;
    let mut b = 0;
    while b < w.blocks {
        let two = b + 1 < w.blocks;
        let w0 = w.line(b, 0).cast::<u8>();
        let w1 = if two {
            w.line(b + 1, 0).cast::<u8>()
        } else {
            w0
        };
        // SAFETY: see `rows`; the pointers advance by one tile of K per step.
        unsafe {
            asm!(
                "tilezero tmm0",
                "tilezero tmm1",
                "tilezero tmm2",
                "tilezero tmm3",
                options(nostack, nomem)
            );
            for s in 0..steps {
                let xa0 = a0.cast::<u8>().add(s * ROW_BYTES);
                let xa1 = a1.cast::<u8>().add(s * ROW_BYTES);
                let wb0 = w0.add(s * GROUPS * ROW_BYTES);
                let wb1 = w1.add(s * GROUPS * ROW_BYTES);
                asm!(
                    "tileloadd tmm4, [{a0} + {xs}*1]",
                    "tileloadd tmm5, [{a1} + {xs}*1]",
                    "tileloadd tmm6, [{w0} + {ws}*1]",
                    "tileloadd tmm7, [{w1} + {ws}*1]",
                    "tdpbusd tmm0, tmm4, tmm6",
                    "tdpbusd tmm1, tmm4, tmm7",
                    "tdpbusd tmm2, tmm5, tmm6",
                    "tdpbusd tmm3, tmm5, tmm7",
                    a0 = in(reg) xa0,
                    a1 = in(reg) xa1,
                    w0 = in(reg) wb0,
                    w1 = in(reg) wb1,
                    xs = in(reg) x_stride,
                    ws = in(reg) ROW_BYTES,
                    options(nostack, readonly)
                );
            }
            let c0 = out.add(b * LANES).cast::<u8>();
            let c2 = out.add(TILE_ROWS * width + b * LANES).cast::<u8>();
            asm!(
                "tilestored [{c0} + {os}*1], tmm0",
                "tilestored [{c2} + {os}*1], tmm2",
                c0 = in(reg) c0,
                c2 = in(reg) c2,
                os = in(reg) out_stride,
                options(nostack)
            );
            if two {
                asm!(
                    "tilestored [{c1} + {os}*1], tmm1",
                    "tilestored [{c3} + {os}*1], tmm3",
                    c1 = in(reg) c0.add(LANES * 4),
                    c3 = in(reg) c2.add(LANES * 4),
                    os = in(reg) out_stride,
                    options(nostack)
                );
            }
        }
        b += if two { 2 } else { 1 };
    }
}
