"""Prelude helpers for runtime scalars that live in registers and memory: a whole vector reduced to one value
(tk.sum, tk.amax, tk.amin), one element between a scalar and a global tensor or a shared vector (tk.load /
tk.store of a tk.var), a shared vector's element in another block of the cluster (tk.cluster.store), and the
combination of a group's partial results that tk.block.sum and tk.cluster.sum read back (tkpy/ops/vector_reduce.py).
"""
from __future__ import annotations

from .helpers import helpers

_SCALARS = r"""
// ---- Runtime scalars: vector reductions, single elements, a group's partial results ----

// f over every element of a vector, the same in every lane: each lane combines its own values (a chain per value
// position across the chunks, then a tree of those), then the lanes holding different values (xor shuffles across
// the layout's lane bits: commutative steps, so every lane ends with the same bits).
template <typename F, typename T, int N, typename L>
__device__ __forceinline__ float vec_reduce(const rv<T, N, L>& v, F f) {
    constexpr int P = rv<T, N, L>::per_chunk;
    float acc[P];
    _Pragma("unroll") for (int k = 0; k < P; k++) {
        acc[k] = v.get(0, k);
        _Pragma("unroll") for (int c = 1; c < N; c++) acc[k] = f(acc[k], v.get(c, k));
    }
    _Pragma("unroll") for (int step = 1; step < P; step *= 2)
    _Pragma("unroll") for (int k = 0; k + step < P; k += 2 * step) acc[k] = f(acc[k], acc[k + step]);
    float r = acc[0];
    _Pragma("unroll") for (int m = 1; m < 32; m <<= 1)
        if (vec_shape<L>::lane_bits & m) r = f(r, __shfl_xor_sync(0xffffffffu, r, m));
    return r;
}

// f over each segment of S consecutive elements of a contig vector, into each of its elements (narrow rows packed
// several to a vector, tk.segment_sum): a lane's 8 values of a chunk lie in one segment (S >= 8), a tree of them,
// then xor shuffles across the segment's S / 8 lanes.
template <int S, typename F, typename TD, typename TS, int N>
__device__ __forceinline__ void segment_reduce(rv<TD, N, contig_l>& dst, const rv<TS, N, contig_l>& src, F f) {
    _Pragma("unroll") for (int c = 0; c < N; c++) {
        float acc[8];
        _Pragma("unroll") for (int k = 0; k < 8; k++) acc[k] = src.get(c, k);
        _Pragma("unroll") for (int step = 1; step < 8; step *= 2)
        _Pragma("unroll") for (int k = 0; k + step < 8; k += 2 * step) acc[k] = f(acc[k], acc[k + step]);
        float r = acc[0];
        _Pragma("unroll") for (int m = 1; m < S / 8; m <<= 1) r = f(r, __shfl_xor_sync(0xffffffffu, r, m));
        _Pragma("unroll") for (int k = 0; k < 8; k += 2) dst.set_pair(c, k, r, r);
    }
}

template <typename V> __device__ __forceinline__ float vec_sum(const V& v) { return vec_reduce(v, op_sum{}); }
template <typename V> __device__ __forceinline__ float vec_max(const V& v) { return vec_reduce(v, op_max{}); }
template <typename V> __device__ __forceinline__ float vec_min(const V& v) { return vec_reduce(v, op_min{}); }

// One element: read by every lane, written by lane 0 (MASKED: outside the tensor's rows and columns a load
// gives `fill` and a store writes nothing).
template <typename T> __device__ __forceinline__ float load_scalar(const gl<T>& g, int b, int d, int r, int c) {
    return to_float(*g.at(b, d, r, c)); }

template <typename T>
__device__ __forceinline__ float load_scalar_masked(const gl<T>& g, int b, int d, int r, int c, float fill) {
    return in_bounds(g, r, c, 1) ? to_float(*g.at(b, d, r, c)) : fill; }

// An element of an int32 or int64 tensor as an int (an int64 one saturated to int's range: a value past it stays out
// of any index's bounds).
__device__ __forceinline__ int saturate_int(int v) { return v; }
__device__ __forceinline__ int saturate_int(long long v) {
    return int(v < -2147483647LL - 1 ? -2147483647LL - 1 : v > 2147483647LL ? 2147483647LL : v); }

template <typename T> __device__ __forceinline__ int load_scalar_int(const gl<T>& g, int b, int d, int r, int c) {
    return saturate_int(*g.at(b, d, r, c)); }

template <typename T>
__device__ __forceinline__ int load_scalar_int_masked(const gl<T>& g, int b, int d, int r, int c, int fill) {
    return in_bounds(g, r, c, 1) ? saturate_int(*g.at(b, d, r, c)) : fill; }

template <typename T> __device__ __forceinline__ void store_scalar_int(const gl<T>& g, int b, int d, int r, int c, int v) {
    if (lane() == 0) *g.at(b, d, r, c) = T(v); }

template <typename T>
__device__ __forceinline__ void store_scalar_int_masked(const gl<T>& g, int b, int d, int r, int c, int v) {
    if (lane() == 0 && in_bounds(g, r, c, 1)) *g.at(b, d, r, c) = T(v); }

template <typename T> __device__ __forceinline__ void store_scalar(const gl<T>& g, int b, int d, int r, int c, float v) {
    if (lane() == 0) *g.at(b, d, r, c) = from_float<T>(v); }

template <typename T>
__device__ __forceinline__ void store_scalar_masked(const gl<T>& g, int b, int d, int r, int c, float v) {
    if (lane() == 0 && in_bounds(g, r, c, 1)) *g.at(b, d, r, c) = from_float<T>(v); }

// ... of a shared vector.
template <int N> __device__ __forceinline__ float load_scalar(const sv<float, N>& s, int i) {
    float v; asm volatile("ld.shared.f32 %0, [%1];" : "=f"(v) : "r"(smem_addr(s.ptr(i))) : "memory"); return v; }
template <typename T, int N> __device__ __forceinline__ float load_scalar(const sv<T, N>& s, int i) {
    unsigned short h; asm volatile("ld.shared.b16 %0, [%1];" : "=h"(h) : "r"(smem_addr(s.ptr(i))) : "memory");
    return to_float(T{h});
}

template <int N> __device__ __forceinline__ void store_scalar(const sv<float, N>& s, int i, float v) {
    if (lane() == 0) asm volatile("st.shared.f32 [%0], %1;" :: "r"(smem_addr(s.ptr(i))), "f"(v) : "memory"); }
template <typename T, int N> __device__ __forceinline__ void store_scalar(const sv<T, N>& s, int i, float v) {
    if (lane() == 0) asm volatile("st.shared.b16 [%0], %1;" :: "r"(smem_addr(s.ptr(i))), "h"(from_float<T>(v).x) : "memory"); }

// An fp32 element of shared vector s in the block of cluster rank `rank` (distributed shared memory): by lane 0,
// or (every rank) lane r into block r's.
__device__ __forceinline__ void store_cluster(const float* local, int rank, float v) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
    asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(remote), "f"(v) : "memory");
}

// The same asynchronously (st.async): its 4 bytes complete on semaphore `sem` of the target block.
__device__ __forceinline__ void store_cluster_async(const float* local, int rank, float v, semaphore* sem) {
    u32 remote, remote_sem;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(local)), "r"(rank));
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_sem) : "r"(smem_addr(sem)), "r"(rank));
    asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.f32 [%0], %1, [%2];"
                 :: "r"(remote), "f"(v), "r"(remote_sem) : "memory");
}

template <int N> __device__ __forceinline__ void store_scalar_remote(const sv<float, N>& s, int i, float v, int rank) {
    if (lane() == 0) store_cluster(s.ptr(i), rank, v); }

template <int RANKS, int N> __device__ __forceinline__ void store_scalar_every_rank(const sv<float, N>& s, int i, float v) {
    if (lane() < RANKS) store_cluster(s.ptr(i), lane(), v); }

template <int N>
__device__ __forceinline__ void store_scalar_remote_async(const sv<float, N>& s, int i, float v, int rank, semaphore* sem) {
    if (lane() == 0) store_cluster_async(s.ptr(i), rank, v, sem); }

template <int RANKS, int N>
__device__ __forceinline__ void store_scalar_every_rank_async(const sv<float, N>& s, int i, float v, semaphore* sem) {
    if (lane() < RANKS) store_cluster_async(s.ptr(i), lane(), v, sem); }

// Where lane l's q-th of COUNT partial results lies (result j at first + (j / GROUP) * RANK_STRIDE + (j % GROUP) *
// STRIDE) and whether there is one (`real`): a power of two of them, result l % COUNT; otherwise q * 32 + l, none past
// COUNT. partial_span: the lanes a butterfly then combines (those COUNT, or the warp). The merges below read them so.
template <int COUNT, int GROUP, int STRIDE, int RANK_STRIDE>
__device__ __forceinline__ int partial_slot(int first, int q, bool& real) {
    constexpr bool pow2 = COUNT <= 32 && (COUNT & (COUNT - 1)) == 0;
    const int ln = lane(), j = pow2 ? (ln & (COUNT - 1)) : q * 32 + ln;
    real = pow2 || j < COUNT;
    return first + (j / GROUP) * RANK_STRIDE + (j % GROUP) * STRIDE;
}
template <int COUNT> __device__ __forceinline__ constexpr int partial_span() {
    return COUNT <= 32 && (COUNT & (COUNT - 1)) == 0 ? COUNT : 32; }

// f over COUNT partial results in shared memory, the same bits in every lane and every warp that reads them:
// result j lies at first + (j / GROUP) * RANK_STRIDE + (j % GROUP) * STRIDE (GROUP warps' slots STRIDE apart, a
// block's RANK_STRIDE apart). Lane l takes result l (a power of two of them: l % COUNT, and a butterfly over
// those lanes; otherwise `identity` past COUNT and a butterfly over the warp; more than 32: several a lane).
template <typename F, int COUNT, int GROUP, int STRIDE, int RANK_STRIDE, int N>
__device__ __forceinline__ float reduce_slots(const sv<float, N>& s, int first, F f, float identity) {
    float v = identity;
    _Pragma("unroll") for (int q = 0; q < (COUNT + 31) / 32; q++) {
        bool real;
        const int at = partial_slot<COUNT, GROUP, STRIDE, RANK_STRIDE>(first, q, real);
        if (real) v = f(v, load_scalar(s, at));
    }
    _Pragma("unroll") for (int m = 1; m < partial_span<COUNT>(); m <<= 1) v = f(v, __shfl_xor_sync(0xffffffffu, v, m));
    return v;
}

// The softmax statistics of COUNT partial results merged (tk.block.merge_softmax): partial j is a pair, the max m_j
// of a piece of a row at the slot reduce_slots reads and the sum s_j of exp(x - m_j) over it at the next one.
// top = max_j m_j (a butterfly), then total = sum_j s_j exp(m_j - top) (each lane's term, then a butterfly): the
// same bits in every lane and warp. A term whose max is top's is s_j itself (also where both are -inf).
template <int COUNT, int GROUP, int STRIDE, int RANK_STRIDE, int N>
__device__ __forceinline__ void merge_softmax_slots(const sv<float, N>& s, int first, float& top, float& total) {
    constexpr int Q = (COUNT + 31) / 32, SPAN = partial_span<COUNT>();
    float m[Q], t[Q];
    top = -INFINITY;
    _Pragma("unroll") for (int q = 0; q < Q; q++) {
        bool real;
        const int at = partial_slot<COUNT, GROUP, STRIDE, RANK_STRIDE>(first, q, real);
        m[q] = real ? load_scalar(s, at) : -INFINITY;
        t[q] = real ? load_scalar(s, at + 1) : 0.0f;
        top = fmaxf(top, m[q]);
    }
    _Pragma("unroll") for (int b = 1; b < SPAN; b <<= 1) top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, b));
    total = 0.0f;
    _Pragma("unroll") for (int q = 0; q < Q; q++)
        total += m[q] == top ? t[q] : t[q] * op_exp2{}((m[q] - top) * 1.4426950408889634f);
    _Pragma("unroll") for (int b = 1; b < SPAN; b <<= 1) total += __shfl_xor_sync(0xffffffffu, total, b);
}

// The mean and M2 (sum of squared deviations) of COUNT partial results merged (tk.block.merge_variance, Chan's):
// partial j is a triple at the slot reduce_slots reads, the sum t_j of a piece of a row, the sum q_j of its squared
// deviations from its own mean and its count n_j. mean = sum t_j / sum n_j (butterflies), then M2 = sum_j q_j +
// d_j^2 / n_j, d_j = t_j - n_j mean (0 where n_j is 0), a butterfly: the same bits in every lane and warp. The
// divisions are __fdividef's (2 ulp; IEEE division's subroutine cost the layer norm a quarter more instructions).
template <int COUNT, int GROUP, int STRIDE, int RANK_STRIDE, int N>
__device__ __forceinline__ void merge_variance_slots(const sv<float, N>& s, int first, float& mean, float& m2) {
    constexpr int Q = (COUNT + 31) / 32, SPAN = partial_span<COUNT>();
    float t[Q], q[Q], n[Q], sum_t = 0.0f, sum_n = 0.0f;
    _Pragma("unroll") for (int k = 0; k < Q; k++) {
        bool real;
        const int at = partial_slot<COUNT, GROUP, STRIDE, RANK_STRIDE>(first, k, real);
        t[k] = real ? load_scalar(s, at) : 0.0f;
        q[k] = real ? load_scalar(s, at + 1) : 0.0f;
        n[k] = real ? load_scalar(s, at + 2) : 0.0f;
        sum_t += t[k];
        sum_n += n[k];
    }
    _Pragma("unroll") for (int b = 1; b < SPAN; b <<= 1) {
        sum_t += __shfl_xor_sync(0xffffffffu, sum_t, b);
        sum_n += __shfl_xor_sync(0xffffffffu, sum_n, b);
    }
    mean = __fdividef(sum_t, sum_n);
    m2 = 0.0f;
    _Pragma("unroll") for (int k = 0; k < Q; k++) {
        const float d = t[k] - n[k] * mean;
        m2 += n[k] > 0.0f ? q[k] + __fdividef(d * d, n[k]) : 0.0f;
    }
    _Pragma("unroll") for (int b = 1; b < SPAN; b <<= 1) m2 += __shfl_xor_sync(0xffffffffu, m2, b);
}
"""

HELPERS = helpers(_SCALARS)
