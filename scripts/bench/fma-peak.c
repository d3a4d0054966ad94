// The fp32 ceiling of this CPU: GFLOP/s of fused multiply-adds with no memory
// traffic (12 independent chains in registers, so latency never stalls them),
// on 1 thread and on N. No fp32 matrix product, ours, gemm's or torch's, can
// beat it; scripts/bench/peak.sh builds and runs it (docs/performance.md uses
// it to tell how far an engine's fp32 speed can still move). Beside it, the
// ceiling of the AVX2 int8 tiles' step, `vpmaddwd` then `vpaddd` (G ops/s,
// two per multiply-add, as the int8 products are counted).
#include <immintrin.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CHAINS 12
static long iters = 200000000;

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

__attribute__((target("avx2,fma"))) static void *run256(void *out) {
    __m256 a[CHAINS], x = _mm256_set1_ps(1.0000001f), y = _mm256_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++) a[c] = _mm256_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        for (int c = 0; c < CHAINS; c++) a[c] = _mm256_fmadd_ps(a[c], x, y);
    float s = 0;
    for (int c = 0; c < CHAINS; c++) s += a[c][0];
    *(float *)out = s;
    return NULL;
}

__attribute__((target("avx512f"))) static void *run512(void *out) {
    __m512 a[CHAINS], x = _mm512_set1_ps(1.0000001f), y = _mm512_set1_ps(0.9999999f);
    for (int c = 0; c < CHAINS; c++) a[c] = _mm512_set1_ps((float)c);
    for (long i = 0; i < iters; i++)
        for (int c = 0; c < CHAINS; c++) a[c] = _mm512_fmadd_ps(a[c], x, y);
    float s = 0;
    for (int c = 0; c < CHAINS; c++) s += a[c][0];
    *(float *)out = s;
    return NULL;
}

// The AVX2 int8 step: 12 independent accumulators, each taking one
// `vpmaddwd` product through a scratch register and one `vpaddd` per
// iteration. Written in assembly: in C the compiler spilled the 12 chains'
// products to the stack.
__attribute__((target("avx2"))) static void *run_maddwd(void *out) {
#define STEP(k) "vpmaddwd %%ymm15, %%ymm14, %%ymm12\n\tvpaddd %%ymm12, %%ymm" #k ", %%ymm" #k "\n\t"
    for (long i = 0; i < iters; i++)
        __asm__ volatile(STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8)
                             STEP(9) STEP(10) STEP(11)
                         :
                         :
                         : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8",
                           "xmm9", "xmm10", "xmm11", "xmm12");
#undef STEP
    *(float *)out = 0;
    return NULL;
}

static void measure(const char *name, void *(*f)(void *), int lanes, int threads) {
    pthread_t t[64];
    float out[64];
    double start = now();
    for (int i = 0; i < threads; i++) pthread_create(&t[i], NULL, f, &out[i]);
    for (int i = 0; i < threads; i++) pthread_join(t[i], NULL);
    double s = now() - start;
    double flops = 2.0 * lanes * CHAINS * (double)iters * threads;
    printf("%s,%d,%.1f,%.3f\n", name, threads, flops / s / 1e9, s);
}

int main(int argc, char **argv) {
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    if (argc > 2) iters = atol(argv[2]);
    printf("instructions,threads,gflops,seconds\n");
    __builtin_cpu_init();
    if (__builtin_cpu_supports("fma")) {
        measure("fma256", run256, 8, 1);
        measure("fma256", run256, 8, threads);
    }
    if (__builtin_cpu_supports("avx2")) {
        // 16 multiply-adds per instruction pair: 2 ops each, as for fp32.
        measure("vpmaddwd256", run_maddwd, 16, 1);
        measure("vpmaddwd256", run_maddwd, 16, threads);
    }
    if (__builtin_cpu_supports("avx512f")) {
        measure("fma512", run512, 16, 1);
        measure("fma512", run512, 16, threads);
    }
    return 0;
}
