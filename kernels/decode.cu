// One decode step of a Qwen2/Qwen3-style decoder on the GPU, read straight from the GGUF
// blocks: Q4_K / Q6_K mat-vec with the dequantisation in registers, RMSNorm, rotary + KV
// append, split-K attention over the KV cache (grouped-query), SiLU gate. Every kernel takes
// raw device pointers and reads the step's token and position from device memory (`params`),
// so that one captured CUDA graph replays every step of a sequence.
//
// Layouts follow the host side (src/llm/cuda_decode.rs): activations f32; the KV cache is the
// model's `(kv_heads, capacity, head_dim)` f32 buffers; rotary on halves (candle's `rope`).

#include <cuda_fp16.h>
#include <stdint.h>

#define WARP 32
// Rows per 128-thread block in the mat-vec kernels: one warp each.
#define MV_ROWS 4

struct StepParams {
    int token;
    int pos;
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float half_at(const uint8_t* p) {
    return __half2float(*reinterpret_cast<const __half*>(p));
}

// ---------------------------------------------------------------------------------------------
// Q4_K: 256 weights in 144 bytes: d (f16), dmin (f16), 12 bytes of packed 6-bit scales and
// mins for 8 sub-blocks of 32, 128 bytes of nibbles. Bytes 32j..32j+31 of the nibbles hold
// weights 64j.. (low nibbles, sub-block 2j) and 64j+32.. (high nibbles, sub-block 2j+1).
// A warp works on four super-blocks at once, eight lanes on each; a lane takes 16 nibble bytes:
// 16 weights of sub-block 2j and the 16 beside them in 2j+1.
// ---------------------------------------------------------------------------------------------

__device__ __forceinline__ void q4k_scale_min(const uint8_t* s, int j, int* sc, int* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = (s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4);
        *m = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// The 32 activations a lane multiplies in one Q4_K super-block, with their two sums (for the
// mins), loaded once and used for every row the warp takes.
struct XQ4 {
    float a[16], b[16];
    float sa, sb;
};

__device__ __forceinline__ void q4k_x(const float* x, int t, XQ4& v) {
    const int j = t >> 1, half = (t & 1) * 16;
    const float* xl = x + 64 * j + half;
    const float* xh = xl + 32;
    v.sa = v.sb = 0.f;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const float4 a = *reinterpret_cast<const float4*>(xl + 4 * w);
        const float4 b = *reinterpret_cast<const float4*>(xh + 4 * w);
        v.a[4 * w] = a.x, v.a[4 * w + 1] = a.y, v.a[4 * w + 2] = a.z, v.a[4 * w + 3] = a.w;
        v.b[4 * w] = b.x, v.b[4 * w + 1] = b.y, v.b[4 * w + 2] = b.z, v.b[4 * w + 3] = b.w;
        v.sa += a.x + a.y + a.z + a.w;
        v.sb += b.x + b.y + b.z + b.w;
    }
}

__device__ __forceinline__ float q4k_dot(const uint8_t* blk, const XQ4& v, int t) {
    const int j = t >> 1, half = (t & 1) * 16;
    const float d = half_at(blk);
    const float dmin = half_at(blk + 2);
    int sc0, m0, sc1, m1;
    q4k_scale_min(blk + 4, 2 * j, &sc0, &m0);
    q4k_scale_min(blk + 4, 2 * j + 1, &sc1, &m1);
    const uint4 packed = *reinterpret_cast<const uint4*>(blk + 16 + 32 * j + half);
    const uint32_t words[4] = {packed.x, packed.y, packed.z, packed.w};
    float lo = 0.f, hi = 0.f;
#pragma unroll
    for (int w = 0; w < 4; w++) {
        const uint32_t q = words[w];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            lo += v.a[4 * w + i] * ((q >> (8 * i)) & 0xF);
            hi += v.b[4 * w + i] * ((q >> (8 * i + 4)) & 0xF);
        }
    }
    return d * (sc0 * lo + sc1 * hi) - dmin * (m0 * v.sa + m1 * v.sb);
}

// ---------------------------------------------------------------------------------------------
// Q6_K: 256 weights in 210 bytes: 128 bytes of low nibbles (ql), 64 bytes of high bit pairs
// (qh), 16 signed 8-bit scales, d (f16). Each half of 128 weights uses ql[64h..], qh[32h..],
// scales[8h..]; its position l (0..31) gives weights l, l+32, l+64, l+96 of the half.
// Eight lanes per super-block, a lane takes 8 positions of one half.
// ---------------------------------------------------------------------------------------------

struct XQ6 {
    float x[4][8];
};

__device__ __forceinline__ void q6k_x(const float* x, int t, XQ6& v) {
    const float* xs = x + 128 * (t >> 2) + (t & 3) * 8;
#pragma unroll
    for (int g = 0; g < 4; g++) {
        const float4 a = *reinterpret_cast<const float4*>(xs + 32 * g);
        const float4 b = *reinterpret_cast<const float4*>(xs + 32 * g + 4);
        v.x[g][0] = a.x, v.x[g][1] = a.y, v.x[g][2] = a.z, v.x[g][3] = a.w;
        v.x[g][4] = b.x, v.x[g][5] = b.y, v.x[g][6] = b.z, v.x[g][7] = b.w;
    }
}

__device__ __forceinline__ float q6k_dot(const uint8_t* blk, const XQ6& v, int t) {
    const int h = t >> 2;
    const int l0 = (t & 3) * 8;
    const uint8_t* ql = blk + 64 * h;
    const uint8_t* qh = blk + 128 + 32 * h;
    const int8_t* sc = reinterpret_cast<const int8_t*>(blk + 192 + 8 * h + (l0 >> 4));
    const float d = half_at(blk + 208);
    float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
#pragma unroll
    for (int i = 0; i < 8; i++) {
        const int l = l0 + i;
        const int a = ql[l], b = ql[l + 32], c = qh[l];
        s0 += v.x[0][i] * (float)(((a & 0xF) | ((c & 3) << 4)) - 32);
        s1 += v.x[1][i] * (float)(((b & 0xF) | (((c >> 2) & 3) << 4)) - 32);
        s2 += v.x[2][i] * (float)(((a >> 4) | (((c >> 4) & 3) << 4)) - 32);
        s3 += v.x[3][i] * (float)(((b >> 4) | (((c >> 6) & 3) << 4)) - 32);
    }
    return d * (sc[0] * s0 + sc[2] * s1 + sc[4] * s2 + sc[6] * s3);
}

// y[r] = (accumulate ? y[r] : 0) + bias[r] + W[r] · x for rows r < n of a (n, k) matrix,
// k a multiple of 256. blockDim = 128: each warp takes R consecutive rows, sharing the
// activations it loads between them (R = 4 for tall matrices: the FFN, the output head).
template <int BYTES, typename X, void (*LOADX)(const float*, int, X&),
          float (*DOT)(const uint8_t*, const X&, int), int R>
__device__ __forceinline__ void matvec(const uint8_t* w, const float* x, const float* bias,
                                       float* y, int n, int k, int accumulate) {
    const int lane = threadIdx.x & 31;
    const int row0 = (blockIdx.x * MV_ROWS + (threadIdx.x >> 5)) * R;
    if (row0 >= n) return;
    const int blocks = k / 256;
    const size_t row_bytes = (size_t)blocks * BYTES;
    const int slot = lane >> 3, t = lane & 7;
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    for (int b = slot; b < blocks; b += 4) {
        X v;
        LOADX(x + 256 * b, t, v);
        const uint8_t* blk = w + (size_t)row0 * row_bytes + (size_t)b * BYTES;
#pragma unroll
        for (int r = 0; r < R; r++)
            if (row0 + r < n) acc[r] += DOT(blk + r * row_bytes, v, t);
    }
#pragma unroll
    for (int r = 0; r < R; r++) {
        const float s = warp_sum(acc[r]);
        if (lane == 0 && row0 + r < n) {
            float out = s;
            if (bias) out += bias[row0 + r];
            if (accumulate) out += y[row0 + r];
            y[row0 + r] = out;
        }
    }
}

extern "C" __global__ void matvec_q4k(const uint8_t* w, const float* x, const float* bias,
                                      float* y, int n, int k, int accumulate) {
    matvec<144, XQ4, q4k_x, q4k_dot, 1>(w, x, bias, y, n, k, accumulate);
}

extern "C" __global__ void matvec_q4k_r4(const uint8_t* w, const float* x, const float* bias,
                                         float* y, int n, int k, int accumulate) {
    matvec<144, XQ4, q4k_x, q4k_dot, 4>(w, x, bias, y, n, k, accumulate);
}

extern "C" __global__ void matvec_q6k(const uint8_t* w, const float* x, const float* bias,
                                      float* y, int n, int k, int accumulate) {
    matvec<210, XQ6, q6k_x, q6k_dot, 1>(w, x, bias, y, n, k, accumulate);
}

extern "C" __global__ void matvec_q6k_r4(const uint8_t* w, const float* x, const float* bias,
                                         float* y, int n, int k, int accumulate) {
    matvec<210, XQ6, q6k_x, q6k_dot, 4>(w, x, bias, y, n, k, accumulate);
}

// The token's row of the embedding table (f16 or f32) into x.
extern "C" __global__ void embed_row(const void* table, int f16, const StepParams* p, float* x,
                                     int hidden) {
    const size_t row = (size_t)p->token * hidden;
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < hidden; i += gridDim.x * blockDim.x)
        x[i] = f16 ? __half2float(reinterpret_cast<const __half*>(table)[row + i])
                   : reinterpret_cast<const float*>(table)[row + i];
}

// y = x / rms(x) * w over rows of `n` (one block per row; rows = gridDim.x), as candle's
// rms_norm: mean of squares in f32, + eps, rsqrt.
extern "C" __global__ void rms_norm(const float* x, const float* w, float* y, int n, float eps) {
    __shared__ float part[32];
    const float* xr = x + (size_t)blockIdx.x * n;
    float* yr = y + (size_t)blockIdx.x * n;
    float s = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) s += xr[i] * xr[i];
    s = warp_sum(s);
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
        v = warp_sum(v);
        if (threadIdx.x == 0) part[0] = v;
    }
    __syncthreads();
    const float scale = rsqrtf(part[0] / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) yr[i] = xr[i] * scale * w[i];
}

// Rotary position embedding (halves) on q (heads) and k (kv_heads) at the step's position,
// then k and v appended to the cache at that position. One block per head of q and k
// (gridDim.x = heads + kv_heads), head_dim / 2 threads. `inv_freq` holds head_dim / 2
// frequencies, computed on the host exactly as the host path's tables.
extern "C" __global__ void rope_append(float* q, float* k, const float* v, float* kcache,
                                       float* vcache, const float* inv_freq, const StepParams* p,
                                       int heads, int kv_heads, int head_dim, int capacity) {
    const int half = head_dim / 2;
    const int i = threadIdx.x;
    if (i >= half) return;
    const int pos = p->pos;
    const float angle = (float)pos * inv_freq[i];
    const float c = cosf(angle), s = sinf(angle);
    const int hh = blockIdx.x;
    float* vec = hh < heads ? q + hh * head_dim : k + (hh - heads) * head_dim;
    const float a = vec[i], b = vec[i + half];
    const float ra = a * c - b * s, rb = b * c + a * s;
    vec[i] = ra;
    vec[i + half] = rb;
    if (hh >= heads) {
        const int kh = hh - heads;
        const size_t at = ((size_t)kh * capacity + pos) * head_dim;
        kcache[at + i] = ra;
        kcache[at + i + half] = rb;
        vcache[at + i] = v[kh * head_dim + i];
        vcache[at + i + half] = v[kh * head_dim + i + half];
    }
}

// Split-K decode attention: block (head, split) covers keys [split * chunk, ...) of the
// pos + 1 valid ones, keeping an online softmax per warp, and writes its (max, sum, weighted
// values) to `part`; `attn_merge` combines the splits. head_dim a multiple of 32, at most 256.
#define ATT_WARPS 4
#define MAX_D 8

extern "C" __global__ void attn_split(const float* q, const float* kcache, const float* vcache,
                                      float* part, const StepParams* p, int heads, int kv_heads,
                                      int head_dim, int capacity, int chunk, float scale) {
    const int head = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    const int kvh = head / (heads / kv_heads);
    const int n = p->pos + 1;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int D = head_dim / 32;
    const int start = split * chunk;
    const int end = min(n, start + chunk);
    float qv[MAX_D], acc[MAX_D];
#pragma unroll
    for (int d = 0; d < MAX_D; d++) {
        qv[d] = d < D ? q[head * head_dim + d * 32 + lane] * scale : 0.f;
        acc[d] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    const float* kbase = kcache + (size_t)kvh * capacity * head_dim;
    const float* vbase = vcache + (size_t)kvh * capacity * head_dim;
    for (int j = start + warp; j < end; j += ATT_WARPS) {
        const float* kr = kbase + (size_t)j * head_dim;
        float s = 0.f;
#pragma unroll
        for (int d = 0; d < MAX_D; d++)
            if (d < D) s += qv[d] * kr[d * 32 + lane];
        s = warp_sum(s);
        const float mn = fmaxf(m, s);
        const float old = __expf(m - mn), e = __expf(s - mn);
        const float* vr = vbase + (size_t)j * head_dim;
#pragma unroll
        for (int d = 0; d < MAX_D; d++)
            if (d < D) acc[d] = acc[d] * old + e * vr[d * 32 + lane];
        l = l * old + e;
        m = mn;
    }
    // Merge the block's warps through shared memory.
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], sacc[ATT_WARPS][256];
    if (lane == 0) {
        sm[warp] = m;
        sl[warp] = l;
    }
#pragma unroll
    for (int d = 0; d < MAX_D; d++)
        if (d < D) sacc[warp][d * 32 + lane] = acc[d];
    __syncthreads();
    float* out = part + ((size_t)head * splits + split) * (head_dim + 2);
    float mx = -INFINITY;
    for (int w = 0; w < ATT_WARPS; w++) mx = fmaxf(mx, sm[w]);
    for (int i = threadIdx.x; i < head_dim; i += blockDim.x) {
        float v = 0.f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sm[w] > -INFINITY) v += sacc[w][i] * __expf(sm[w] - mx);
        out[2 + i] = v;
    }
    if (threadIdx.x == 0) {
        float sum = 0.f;
        for (int w = 0; w < ATT_WARPS; w++)
            if (sm[w] > -INFINITY) sum += sl[w] * __expf(sm[w] - mx);
        out[0] = mx;
        out[1] = sum;
    }
}

// out[head] = Σ_split values · e^(m_split - M) / Σ_split sum · e^(m_split - M). One block per
// head, head_dim threads.
extern "C" __global__ void attn_merge(const float* part, float* out, int head_dim, int splits) {
    const int head = blockIdx.x, i = threadIdx.x;
    if (i >= head_dim) return;
    const float* base = part + (size_t)head * splits * (head_dim + 2);
    float mx = -INFINITY;
    for (int s = 0; s < splits; s++) mx = fmaxf(mx, base[s * (head_dim + 2)]);
    float num = 0.f, den = 0.f;
    for (int s = 0; s < splits; s++) {
        const float* ps = base + s * (head_dim + 2);
        if (ps[0] == -INFINITY) continue;
        const float f = __expf(ps[0] - mx);
        num += ps[2 + i] * f;
        den += ps[1] * f;
    }
    out[head * head_dim + i] = num / den;
}

// h = silu(g) * u.
extern "C" __global__ void silu_mul(const float* g, const float* u, float* h, int n) {
    for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) {
        const float a = g[i];
        h[i] = a / (1.f + __expf(-a)) * u[i];
    }
}

// Per-head RMSNorm of q and k (Qwen3's q_norm / k_norm), in place: one block per head of q
// then k, head_dim threads (a multiple of 32, at most 1024).
extern "C" __global__ void head_norm(float* q, float* k, const float* qw, const float* kw,
                                     int heads, int head_dim, float eps) {
    __shared__ float part[32];
    const int hh = blockIdx.x;
    float* vec = hh < heads ? q + hh * head_dim : k + (hh - heads) * head_dim;
    const float* w = hh < heads ? qw : kw;
    const int i = threadIdx.x;
    const float a = i < head_dim ? vec[i] : 0.f;
    float s = warp_sum(a * a);
    if ((i & 31) == 0) part[i >> 5] = s;
    __syncthreads();
    if (i < 32) {
        float v = i < (blockDim.x >> 5) ? part[i] : 0.f;
        v = warp_sum(v);
        if (i == 0) part[0] = v;
    }
    __syncthreads();
    if (i < head_dim) vec[i] = a * rsqrtf(part[0] / head_dim + eps) * w[i];
}
