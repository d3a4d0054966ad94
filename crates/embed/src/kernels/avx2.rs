//! The AVX2 + FMA kernel path: the shared loop bodies compiled with 256-bit
//! vectors and fused multiply-adds available, and the attention products as
//! 8-lane register tiles ([`super::tiled_products`]), where the plain loops
//! (which LLVM vectorises over one query row at a time) load and store their
//! score row for every multiply and add.

super::kernel_path_module!(["avx2", "fma"], Tiles);

super::tiled_products!(
    "avx2",
    8,
    _mm256_setzero_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_set1_ps,
    _mm256_add_ps,
    _mm256_mul_ps
);
