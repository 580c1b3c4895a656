// Causal grouped-query attention for a prompt chunk on the GPU: `n` queries at positions
// pos..pos+n-1 over the first pos+n keys of the KV cache, in one pass with an online softmax
// (flash-attention style), so no (queries x keys) score matrix and no mask tensor is made.
//
// Layouts (src/llm/cuda_prefill.rs): q `(heads, n, head_dim)` f32 after rotary; the KV cache
// the model's `(kv_heads, capacity, head_dim)` f32 buffers; out `(n, heads, head_dim)` f32,
// which is the `(n, hidden)` row layout the output projection reads. Query head h reads KV
// head h / (heads / kv_heads).
//
// A block takes 32 consecutive queries of one head, four threads a query; a thread holds a
// quarter of the query's dimensions (every fourth float4) and of its output. Keys and values
// come through shared memory 32 rows at a time; the four threads of a query add their partial
// dot products with two shuffles.

#include <stdint.h>

#define QB 32       // queries per block
#define TPQ 4       // threads per query
#define KC 32       // keys per shared-memory chunk
#define THREADS (QB * TPQ)

template <int HD>
__device__ __forceinline__ void attn_prefill(const float* __restrict__ q,
                                             const float* __restrict__ kcache,
                                             const float* __restrict__ vcache,
                                             float* __restrict__ out, int n, int pos, int heads,
                                             int kv_heads, int capacity, float scale) {
    // float4s of a row a thread holds: chunks part, part + 4, part + 8, ...
    constexpr int V4 = HD / 4 / TPQ;
    __shared__ float4 ks[KC][HD / 4];
    __shared__ float4 vs[KC][HD / 4];

    const int head = blockIdx.y;
    const int kvh = head / (heads / kv_heads);
    const int tid = threadIdx.x;
    const int part = tid % TPQ;
    const int qi = blockIdx.x * QB + tid / TPQ;  // query index within the chunk
    const bool active = qi < n;
    const int limit = pos + (active ? qi : 0);  // last key this query sees

    // The query, pre-scaled by 1/sqrt(head_dim) * log2(e): the softmax runs on exp2.
    float4 qr[V4];
    const float s = scale * 1.4426950408889634f;
    const float4* qrow = reinterpret_cast<const float4*>(q + ((size_t)head * n + (active ? qi : 0)) * HD);
#pragma unroll
    for (int c = 0; c < V4; c++) {
        float4 v = qrow[part + c * TPQ];
        qr[c] = make_float4(v.x * s, v.y * s, v.z * s, v.w * s);
    }
    float4 acc[V4];
#pragma unroll
    for (int c = 0; c < V4; c++) acc[c] = make_float4(0.f, 0.f, 0.f, 0.f);
    float m = -INFINITY, l = 0.f;

    const int last_q = min(n, (int)(blockIdx.x + 1) * QB) - 1;
    const int keys = pos + last_q + 1;  // keys any query of this block sees
    const float4* kbase = reinterpret_cast<const float4*>(kcache + (size_t)kvh * capacity * HD);
    const float4* vbase = reinterpret_cast<const float4*>(vcache + (size_t)kvh * capacity * HD);

    for (int k0 = 0; k0 < keys; k0 += KC) {
        const int rows = min(KC, keys - k0);
        __syncthreads();
        for (int i = tid; i < rows * (HD / 4); i += THREADS) {
            const int r = i / (HD / 4), c = i % (HD / 4);
            ks[r][c] = kbase[(size_t)(k0 + r) * (HD / 4) + c];
            vs[r][c] = vbase[(size_t)(k0 + r) * (HD / 4) + c];
        }
        __syncthreads();
        float sc[KC];
        float cmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < KC; j++) {
            float d = 0.f;
            if (j < rows) {
#pragma unroll
                for (int c = 0; c < V4; c++) {
                    const float4 kv = ks[j][part + c * TPQ];
                    d = fmaf(qr[c].x, kv.x, d);
                    d = fmaf(qr[c].y, kv.y, d);
                    d = fmaf(qr[c].z, kv.z, d);
                    d = fmaf(qr[c].w, kv.w, d);
                }
            }
            d += __shfl_xor_sync(0xffffffffu, d, 1);
            d += __shfl_xor_sync(0xffffffffu, d, 2);
            sc[j] = (j < rows && k0 + j <= limit) ? d : -INFINITY;
            cmax = fmaxf(cmax, sc[j]);
        }
        if (cmax == -INFINITY) continue;  // every key of this chunk is after this query
        const float mnew = fmaxf(m, cmax);
        const float f = exp2f(m - mnew);  // 0 when m was -inf
        l *= f;
#pragma unroll
        for (int c = 0; c < V4; c++) {
            acc[c].x *= f;
            acc[c].y *= f;
            acc[c].z *= f;
            acc[c].w *= f;
        }
        m = mnew;
#pragma unroll
        for (int j = 0; j < KC; j++) {
            const float p = exp2f(sc[j] - m);  // 0 for keys masked out
            if (p == 0.f) continue;
            l += p;
#pragma unroll
            for (int c = 0; c < V4; c++) {
                const float4 vv = vs[j][part + c * TPQ];
                acc[c].x = fmaf(p, vv.x, acc[c].x);
                acc[c].y = fmaf(p, vv.y, acc[c].y);
                acc[c].z = fmaf(p, vv.z, acc[c].z);
                acc[c].w = fmaf(p, vv.w, acc[c].w);
            }
        }
    }
    if (!active) return;
    const float inv = 1.f / l;
    float4* orow = reinterpret_cast<float4*>(out + ((size_t)qi * heads + head) * HD);
#pragma unroll
    for (int c = 0; c < V4; c++) {
        orow[part + c * TPQ] =
            make_float4(acc[c].x * inv, acc[c].y * inv, acc[c].z * inv, acc[c].w * inv);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
    attn_prefill_64(const float* q, const float* kcache, const float* vcache, float* out, int n,
                    int pos, int heads, int kv_heads, int capacity, float scale) {
    attn_prefill<64>(q, kcache, vcache, out, n, pos, heads, kv_heads, capacity, scale);
}

extern "C" __global__ void __launch_bounds__(THREADS)
    attn_prefill_128(const float* q, const float* kcache, const float* vcache, float* out, int n,
                     int pos, int heads, int kv_heads, int capacity, float scale) {
    attn_prefill<128>(q, kcache, vcache, out, n, pos, heads, kv_heads, capacity, scale);
}
