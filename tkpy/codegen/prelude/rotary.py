"""Prelude section of the rotary embedding's ops: swap_pairs (tkpy/ops/layout.py), rotate_half of contig vectors (lane
shuffles) and of row-layout tiles (a permutation of each lane's registers), and the tables' rows spread over heads
(tkpy/ops/rotary.py)."""
from __future__ import annotations

from .helpers import helpers

_ROTARY = r"""
// ---- Interleaved pairs (tk.swap_pairs, tkpy/ops/layout.py) and rotary embeddings (tkpy/ops/rotary.py: heads of D
// elements, the first R rotating in pairs) ----

// Elements 2i and 2i + 1 trade places (GPT-J's interleaved pairs): in a row-layout tile's rows (one register pair of
// a lane), in a contig vector (a lane's values k and k + 1): no shuffles; dst may be src.
__device__ __forceinline__ float2 swap2(float2 v) { return make_float2(v.y, v.x); }

__device__ __forceinline__ bf16_2 swap2(bf16_2 v) { return {(v.x >> 16) | (v.x << 16)}; }

__device__ __forceinline__ fp16_2 swap2(fp16_2 v) { return {(v.x >> 16) | (v.x << 16)}; }

template <typename TD, typename TS, int H, int W>
__device__ __forceinline__ void swap_pairs(rt<TD, H, W, row_l>& dst, const rt<TS, H, W, row_l>& src) {
    for_each_reg<H, W>([&](int i, int j, int k) {
        dst.data[i][j][k] = swap2(convert2<typename rt<TD, H, W, row_l>::T2>(src.data[i][j][k]));
    });
}
template <typename TD, typename TS, int N>
__device__ __forceinline__ void swap_pairs(rv<TD, N, contig_l>& dst, const rv<TS, N, contig_l>& src) {
    rv<TS, N, contig_l> s = src;
    _Pragma("unroll") for (int c = 0; c < N; c++) _Pragma("unroll") for (int q = 0; q < 8; q += 2) {
        if constexpr (rv<TS, N, contig_l>::packed) s.data[c][q >> 1] = swap2(s.data[c][q >> 1]);
        else { const float v = s.data[c][q]; s.data[c][q] = s.data[c][q + 1]; s.data[c][q + 1] = v; }
    }
    if constexpr (is_same<TD, TS>::value) dst = s;
    else unary_map(dst, s, op_copy{});
}

// One word of a register vector or tile (an fp32 value, a packed 16-bit pair): from lane `from`, negated, zero.
__device__ __forceinline__ float shfl_word(float v, int from) { return __shfl_sync(0xffffffffu, v, from); }
__device__ __forceinline__ bf16_2 shfl_word(bf16_2 v, int from) { return {__shfl_sync(0xffffffffu, v.x, from)}; }
__device__ __forceinline__ fp16_2 shfl_word(fp16_2 v, int from) { return {__shfl_sync(0xffffffffu, v.x, from)}; }
__device__ __forceinline__ float neg_word(float v) { return -v; }
__device__ __forceinline__ float2 neg_word(float2 v) { return make_float2(-v.x, -v.y); }
__device__ __forceinline__ bf16_2 neg_word(bf16_2 v) { return {v.x ^ 0x80008000u}; }
__device__ __forceinline__ fp16_2 neg_word(fp16_2 v) { return {v.x ^ 0x80008000u}; }
template <typename W> __device__ __forceinline__ W zero_word();
template <> __device__ __forceinline__ float zero_word<float>() { return 0.0f; }
template <> __device__ __forceinline__ float2 zero_word<float2>() { return make_float2(0.0f, 0.0f); }
template <> __device__ __forceinline__ bf16_2 zero_word<bf16_2>() { return {0u}; }
template <> __device__ __forceinline__ fp16_2 zero_word<fp16_2>() { return {0u}; }

// A pair (x, y) -> (-y, x): GPT-J's rotate_every_two of one packed pair.
__device__ __forceinline__ float2 rotate_pair(float2 v) { return make_float2(-v.y, v.x); }
__device__ __forceinline__ bf16_2 rotate_pair(bf16_2 v) { return {swap2(v).x ^ 0x8000u}; }
__device__ __forceinline__ fp16_2 rotate_pair(fp16_2 v) { return {swap2(v).x ^ 0x8000u}; }

// dst = rotate_half(src) in each head of D elements of a contig vector from its first (a head the end cuts short: its
// missing elements 0): Hugging Face's cat(-x[R/2:R], x[:R/2]), or (INTERLEAVED) GPT-J's rotate_every_two, (x[2i],
// x[2i+1]) -> (-x[2i+1], x[2i]); 0 past R. A lane's 8 values lie in one head, on one side of R/2 and of R; their
// partners R/2 elements on, in lane +- R/16: one shuffle a word when heads do not cross chunks (D divides 256), else
// one of each neighbouring chunk too and a select. INTERLEAVED pairs are a lane's own. dtype converted; dst may be src.
template <int R, int D, bool INTERLEAVED, typename TD, typename TS, int N>
__device__ __forceinline__ void rotate_half(rv<TD, N, contig_l>& dst, const rv<TS, N, contig_l>& src) {
    typedef rv<TS, N, contig_l> S;
    constexpr int WORDS = S::packed ? 4 : 8;
    const S s = src;
    S out;
    const int ln = lane();
    _Pragma("unroll") for (int c = 0; c < N; c++) {
        const int j = (c * 256 + 8 * ln) % D;          // the head column of the lane's first value
        const bool low = j < R / 2, rotated = j < R;
        const int from = low ? ln + R / 16 : ln - R / 16;
        _Pragma("unroll") for (int q = 0; q < WORDS; q++) {
            if constexpr (INTERLEAVED) {
                if constexpr (S::packed) out.data[c][q] = rotate_pair(s.data[c][q]);
                else out.data[c][q] = q & 1 ? s.data[c][q ^ 1] : -s.data[c][q ^ 1];
            } else {
                auto w = shfl_word(s.data[c][q], from & 31);
                if constexpr (256 % D != 0) {           // the partner in the next chunk, or the previous one
                    const int next = c + 1 < N ? c + 1 : c, before = c > 0 ? c - 1 : c;  // (clamped: none)
                    if (next != c) { const auto n = shfl_word(s.data[next][q], from & 31); if (from >= 32) w = n; }
                    else if (from >= 32) w = zero_word<typename S::word>();   // (past the end of a head cut short)
                    if (before != c) { const auto b = shfl_word(s.data[before][q], from & 31); if (from < 0) w = b; }
                }
                out.data[c][q] = low ? neg_word(w) : w;
            }
            if (!rotated) out.data[c][q] = zero_word<typename S::word>();
        }
    }
    if constexpr (is_same<TD, TS>::value) dst = out;
    else unary_map(dst, out, op_copy{});
}

// The same of a row-layout tile, along each row of W * 16 columns: the partner of a lane's 8-column block
// is its own block R/16 on (a register of the same lane), the interleaved pairs its packed pairs.
template <int R, int D, bool INTERLEAVED, typename TD, typename TS, int H, int W>
__device__ __forceinline__ void rotate_half(rt<TD, H, W, row_l>& dst, const rt<TS, H, W, row_l>& src) {
    typedef typename rt<TS, H, W, row_l>::T2 S2;
    const rt<TS, H, W, row_l> s = src;
    rt<TS, H, W, row_l> out;
    for_each_reg<H, W>([&](int i, int j, int k) {
        const int block = 2 * j + (k >> 1), col = (8 * block) % D;   // the lane's 8-column block, its head column
        if (col >= R) { out.data[i][j][k] = zero_word<S2>(); return; }
        if constexpr (INTERLEAVED) { out.data[i][j][k] = rotate_pair(s.data[i][j][k]); return; }
        const bool low = col < R / 2;
        const int from = low ? block + R / 16 : block - R / 16;
        if (from >= 2 * W) { out.data[i][j][k] = zero_word<S2>(); return; }   // (past the end of a head cut short)
        const S2 w = s.data[i][from >> 1][(k & 1) | ((from & 1) << 1)];
        out.data[i][j][k] = low ? neg_word(w) : w;
    });
    if constexpr (is_same<TD, TS>::value) dst = out;
    else unary_map(dst, out, op_copy{});
}

// Four consecutive elements at p as floats: one 8-byte load of 16-bit elements, one 16-byte load of fp32.
template <typename T> __device__ __forceinline__ void load4(float (&v)[4], const T* p) {
    if constexpr (sizeof(T) == 2) {
        typedef typename packed_of<T>::type T2;
        const uint2 u = *reinterpret_cast<const uint2*>(p);
        const float2 a = to_float2(T2{u.x}), b = to_float2(T2{u.y});
        v[0] = a.x; v[1] = a.y; v[2] = b.x; v[3] = b.y;
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        v[0] = __uint_as_float(u.x); v[1] = __uint_as_float(u.y);
        v[2] = __uint_as_float(u.z); v[3] = __uint_as_float(u.w);
    }
}
// dst = the R/2 angles at p (a table row of cos or sin) spread over each head of D elements of a contig vector
// from its first: head column j takes angle j % (R/2) (INTERLEAVED: j / 2) for j < R, `fill` past R. A lane's 8
// values are 8 consecutive angles (16-byte loads) or 4, each twice; chunks repeat every D / gcd(D, 256), loaded once.
template <int R, int D, bool INTERLEAVED, typename TD, int N, typename TS>
__device__ __forceinline__ void load_rotary_table(rv<TD, N, contig_l>& dst, const TS* p, float fill) {
    constexpr int PERIOD = D / ((D & -D) < 256 ? (D & -D) : 256);   // D / gcd(D, 256) chunks
    constexpr int WORDS = rv<TD, N, contig_l>::packed ? 4 : 8;
    const int ln = lane();
    _Pragma("unroll") for (int c = 0; c < N; c++) {
        if (c >= PERIOD) {
            _Pragma("unroll") for (int q = 0; q < WORDS; q++) dst.data[c][q] = dst.data[c % PERIOD][q];
            continue;
        }
        const int j = (c * 256 + 8 * ln) % D;
        float v[8];
        if (j >= R) {
            _Pragma("unroll") for (int k = 0; k < 8; k++) v[k] = fill;
        } else if constexpr (INTERLEAVED) {
            float a[4];
            load4(a, p + j / 2);
            _Pragma("unroll") for (int k = 0; k < 8; k++) v[k] = a[k >> 1];
        } else {
            load8(v, p + j % (R / 2), 1);
        }
        _Pragma("unroll") for (int k = 0; k < 8; k += 2) dst.set_pair(c, k, v[k], v[k + 1]);
    }
}
"""

HELPERS = helpers(_ROTARY)
