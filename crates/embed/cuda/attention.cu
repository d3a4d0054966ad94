// Attention over sequences packed end to end, for the BERT-shaped body on a
// GPU (crates/embed/src/family/packed_attention.rs): no padding, no mask, no
// [b, heads, t, t] score tensor. One thread per query row keeps its query
// and its output in registers; a block's threads share each chunk of keys
// and values through shared memory, and the softmax runs online, a chunk at
// a time (the chunk's scores, then one rescale of the output). Sums in f32
// whatever the storage type.
#include <cuda_fp16.h>
#include <cuda_bf16.h>
#include <stdint.h>

// Query rows a block serves (one thread each).
#define QUERIES 64
// Keys and values a block holds in shared memory at once.
#define KEYS 32

template <typename T> __device__ __forceinline__ float widen(T v);
template <> __device__ __forceinline__ float widen<float>(float v) { return v; }
template <> __device__ __forceinline__ float widen<__half>(__half v) { return __half2float(v); }
template <> __device__ __forceinline__ float widen<__nv_bfloat16>(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T narrow(float v);
template <> __device__ __forceinline__ float narrow<float>(float v) { return v; }
template <> __device__ __forceinline__ __half narrow<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 narrow<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

// qkv: [tokens, 3 · heads · D], each row the token's queries (already scaled
// by 1/sqrt(D)), keys and values, head after head. starts: [sequences + 1]
// row offsets. bias: where has_bias, [heads, 2 · span − 1] additive terms,
// the term of query i and key j at span − 1 + j − i. out: [tokens, heads · D].
// Grid: (query tiles of the longest sequence, heads, sequences).
template <typename T, int D>
__device__ void attend(const T* __restrict__ qkv, const uint32_t* __restrict__ starts,
                       const float* __restrict__ bias, int has_bias, int span, int heads,
                       T* __restrict__ out) {
    const int seq = blockIdx.z, head = blockIdx.y;
    const uint32_t first = starts[seq];
    const int len = (int)(starts[seq + 1] - first);
    const int tile = blockIdx.x * QUERIES;
    if (tile >= len) return;  // the whole block: no barrier is skipped by part of it
    const int width = heads * D, row = 3 * width;
    const int qi = tile + (int)threadIdx.x;
    const bool active = qi < len;

    float q[D], o[D];
#pragma unroll
    for (int d = 0; d < D; d++) { q[d] = 0.f; o[d] = 0.f; }
    if (active) {
        const T* qp = qkv + (size_t)(first + qi) * row + head * D;
#pragma unroll
        for (int d = 0; d < D; d++) q[d] = widen(qp[d]);
    }
    float m = -INFINITY, l = 0.f;
    const float* b = has_bias ? bias + (size_t)head * (2 * span - 1) + (span - 1) - qi : nullptr;

    __shared__ float ks[KEYS][D];
    __shared__ float vs[KEYS][D];
    // Each thread's scores of the chunk, a column per thread (no bank
    // conflicts), so that the loops over keys need not be unrolled.
    __shared__ float sc[KEYS][QUERIES];
    const int tx = threadIdx.x;
    for (int c0 = 0; c0 < len; c0 += KEYS) {
        const int cn = min(KEYS, len - c0);
        __syncthreads();
        for (int idx = tx; idx < cn * D; idx += QUERIES) {
            const int j = idx / D, d = idx % D;
            const T* kp = qkv + (size_t)(first + c0 + j) * row + width + head * D + d;
            ks[j][d] = widen(kp[0]);
            vs[j][d] = widen(kp[width]);
        }
        __syncthreads();
        if (!active) continue;
        float top = -INFINITY;
        for (int j = 0; j < cn; j++) {
            float acc = 0.f;
#pragma unroll
            for (int d = 0; d < D; d++) acc = fmaf(q[d], ks[j][d], acc);
            if (has_bias) acc += b[c0 + j];
            sc[j][tx] = acc;
            top = fmaxf(top, acc);
        }
        const float next = fmaxf(m, top);
        const float keep = expf(m - next);  // 0 on the first chunk (m = -inf)
        l *= keep;
#pragma unroll
        for (int d = 0; d < D; d++) o[d] *= keep;
        for (int j = 0; j < cn; j++) {
            const float p = expf(sc[j][tx] - next);
            l += p;
#pragma unroll
            for (int d = 0; d < D; d++) o[d] = fmaf(p, vs[j][d], o[d]);
        }
        m = next;
    }
    if (active) {
        T* op = out + (size_t)(first + qi) * width + head * D;
        const float inv = 1.f / l;
#pragma unroll
        for (int d = 0; d < D; d++) op[d] = narrow<T>(o[d] * inv);
    }
}

#define INSTANCE(NAME, T, D)                                                                \
    extern "C" __global__ void __launch_bounds__(QUERIES)                                  \
        NAME(const T* qkv, const uint32_t* starts, const float* bias, int has_bias, int span, \
             int heads, T* out) {                                                           \
        attend<T, D>(qkv, starts, bias, has_bias, span, heads, out);                        \
    }

INSTANCE(packed_attention_f32_d32, float, 32)
INSTANCE(packed_attention_f32_d64, float, 64)
INSTANCE(packed_attention_f16_d32, __half, 32)
INSTANCE(packed_attention_f16_d64, __half, 64)
INSTANCE(packed_attention_bf16_d32, __nv_bfloat16, 32)
INSTANCE(packed_attention_bf16_d64, __nv_bfloat16, 64)
