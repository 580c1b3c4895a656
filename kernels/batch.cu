// One decode step of several sequences at once on the GPU, each over its own KV cache: the
// new keys and values appended at each sequence's position, then each sequence's queries
// attending to its own keys. The matrices run on all sequences' rows together elsewhere
// (src/llm/qwen.rs); only attention needs to know whose cache is whose.
//
// `table` holds, for one layer, two device addresses per sequence: its key and value buffers,
// `(kv_heads, capacity, head_dim)` f32. `pos[s]` is sequence s's position (its cached keys
// before this step), `cap[s]` its buffers' capacity. q `(heads, n, head_dim)`, k and v
// `(kv_heads, n, head_dim)` after rotary; out `(n, heads, head_dim)`.

#include <stdint.h>

#define WARP 32
#define WARPS 4
#define MAX_D 8  // head_dim / 32, at most 256 dimensions

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Block (sequence, kv head), head_dim threads.
extern "C" __global__ void kv_append_batch(const float* k, const float* v, const uint64_t* table,
                                           const int* pos, const int* cap, int n, int kv_heads,
                                           int head_dim) {
    const int s = blockIdx.x, kh = blockIdx.y, i = threadIdx.x;
    if (i >= head_dim) return;
    float* kc = reinterpret_cast<float*>(table[2 * s]);
    float* vc = reinterpret_cast<float*>(table[2 * s + 1]);
    const size_t at = ((size_t)kh * cap[s] + pos[s]) * head_dim + i;
    const size_t from = ((size_t)kh * n + s) * head_dim + i;
    kc[at] = k[from];
    vc[at] = v[from];
}

// Block (sequence, head), four warps taking every fourth key with an online softmax each,
// merged through shared memory at the end. Keys 0..pos[s] (the new one included).
extern "C" __global__ void attn_batch(const float* q, const uint64_t* table, const int* pos,
                                      const int* cap, float* out, int n, int heads, int kv_heads,
                                      int head_dim, float scale) {
    const int s = blockIdx.x, head = blockIdx.y;
    const int kvh = head / (heads / kv_heads);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D = head_dim / 32;
    const int keys = pos[s] + 1;
    const float* kbase = reinterpret_cast<const float*>(table[2 * s]) + (size_t)kvh * cap[s] * head_dim;
    const float* vbase = reinterpret_cast<const float*>(table[2 * s + 1]) + (size_t)kvh * cap[s] * head_dim;
    const float* qr = q + ((size_t)head * n + s) * head_dim;
    float qv[MAX_D], acc[MAX_D];
#pragma unroll
    for (int d = 0; d < MAX_D; d++) {
        qv[d] = d < D ? qr[d * 32 + lane] * scale : 0.f;
        acc[d] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    for (int j = warp; j < keys; j += WARPS) {
        const float* kr = kbase + (size_t)j * head_dim;
        float sc = 0.f;
#pragma unroll
        for (int d = 0; d < MAX_D; d++)
            if (d < D) sc += qv[d] * kr[d * 32 + lane];
        sc = warp_sum(sc);
        const float mn = fmaxf(m, sc);
        const float old = __expf(m - mn), e = __expf(sc - mn);
        const float* vr = vbase + (size_t)j * head_dim;
#pragma unroll
        for (int d = 0; d < MAX_D; d++)
            if (d < D) acc[d] = acc[d] * old + e * vr[d * 32 + lane];
        l = l * old + e;
        m = mn;
    }
    __shared__ float sm[WARPS], sl[WARPS], sacc[WARPS][MAX_D * 32];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int d = 0; d < MAX_D; d++)
        if (d < D) sacc[warp][d * 32 + lane] = acc[d];
    __syncthreads();
    float mx = -INFINITY;
    for (int w = 0; w < WARPS; w++) mx = fmaxf(mx, sm[w]);
    float den = 0.f;
    for (int w = 0; w < WARPS; w++)
        if (sm[w] > -INFINITY) den += sl[w] * __expf(sm[w] - mx);
    float* o = out + ((size_t)s * heads + head) * head_dim;
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float num = 0.f;
        for (int w = 0; w < WARPS; w++)
            if (sm[w] > -INFINITY) num += sacc[w][i] * __expf(sm[w] - mx);
        o[i] = num / den;
    }
}
