//! The AVX-512 kernel path: the shared loop bodies compiled for AVX-512, and
//! the attention products as 16-lane register tiles
//! ([`super::tiled_products`]; LLVM's auto-vectoriser picks the wrong loop
//! for them there).

super::kernel_path_module!(["avx512f", "avx512vl", "avx2", "fma"], Tiles);

super::tiled_products!(
    "avx512f",
    16,
    _mm512_setzero_ps,
    _mm512_loadu_ps,
    _mm512_storeu_ps,
    _mm512_set1_ps,
    _mm512_add_ps,
    _mm512_mul_ps
);
