//! The AVX2 + FMA kernel path: the shared loop bodies compiled with 256-bit
//! vectors and fused multiply-adds available.

use super::portable::LoopProducts;

super::kernel_path_module!(["avx2", "fma"], LoopProducts);
