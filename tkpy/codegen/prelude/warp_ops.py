"""Prelude helpers completing the warp-level tiles' arithmetic: reductions along a tile's rows or columns into
vectors and broadcasts of vectors back, the warp's tensor-core MMA (mma.sync), and ThunderKittens-style names over
the generic map / reduce / broadcast templates (tk::exp, tk::add, tk::row_max, tk::sub_row, ...)."""
from __future__ import annotations

from ...ir.core import BINARY_FNS, BROADCAST_FNS, REDUCE_FNS, UNARY_FNS
from .helpers import helpers

_REDUCE = r"""
// A tile's rows (ROWS) or columns reduced into a vector: value k's part of each base tile, then the lanes' combined.
template <typename T2, typename F> __device__ __forceinline__ float reduce_part(ortho_l, const T2 (&regs)[4], int k, F f) {
    const float2 a = to_float2(regs[k]), b = to_float2(regs[k + 2]); return f(f(a.x, a.y), f(b.x, b.y)); }
template <typename F> __device__ __forceinline__ float reduce_lanes(ortho_l, float v, F f) {   // lane bits 0-1: a row
    v = f(v, __shfl_xor_sync(0xffffffffu, v, 1)); return f(v, __shfl_xor_sync(0xffffffffu, v, 2)); }
template <typename T2, typename F> __device__ __forceinline__ float reduce_part(align_l, const T2 (&regs)[4], int k, F f) {
    const float2 a = to_float2(regs[2 * (k >> 1)]), b = to_float2(regs[2 * (k >> 1) + 1]);
    return (k & 1) ? f(a.y, b.y) : f(a.x, b.x); }
template <typename F> __device__ __forceinline__ float reduce_lanes(align_l, float v, F f) {   // bits 2-4: a column
    v = f(v, __shfl_xor_sync(0xffffffffu, v, 4));
    v = f(v, __shfl_xor_sync(0xffffffffu, v, 8));
    return f(v, __shfl_xor_sync(0xffffffffu, v, 16)); }
template <bool ROWS, typename F, typename TV, int N, typename VL, typename TT, int H, int W, typename L>
__device__ __forceinline__ void reduce(rv<TV, N, VL>& dst, const rt<TT, H, W, L>& src, F f,
                                       const rv<TV, N, VL>* accum = nullptr) {
    constexpr int outer = ROWS ? H : W, inner = ROWS ? W : H;
    _Pragma("unroll") for (int o = 0; o < outer; o++)
    _Pragma("unroll") for (int k = 0; k < rv<TV, N, VL>::per_chunk; k++) {
        float v = reduce_part(VL{}, src.data[ROWS ? o : 0][ROWS ? 0 : o], k, f);
        _Pragma("unroll") for (int n = 1; n < inner; n++)
            v = f(v, reduce_part(VL{}, src.data[ROWS ? o : n][ROWS ? n : o], k, f));
        v = reduce_lanes(VL{}, v, f);
        if (accum) v = f(v, accum->get(o, k));
        dst.set(o, k, v);
    }
}

// dst = f(src, vec), vec broadcast along rows (ROWS) or columns; broadcast_at: its values meeting register k.
template <bool ROWS, typename TV, int N>
__device__ __forceinline__ float2 broadcast_at(const rv<TV, N, ortho_l>& vec, int i, int j, int k) {
    const float v = vec.get(ROWS ? i : j, k & 1); return make_float2(v, v); }
template <bool ROWS, typename TV, int N>
__device__ __forceinline__ float2 broadcast_at(const rv<TV, N, align_l>& vec, int i, int j, int k) {
    const int o = ROWS ? i : j; return make_float2(vec.get(o, 2 * (k >> 1)), vec.get(o, 2 * (k >> 1) + 1)); }

template <bool ROWS, typename F, typename TD, typename TS, int H, int W, typename L, typename TV, int N, typename VL>
__device__ __forceinline__ void broadcast(rt<TD, H, W, L>& dst, const rt<TS, H, W, L>& src, const rv<TV, N, VL>& vec, F f) {
    for_each_reg<H, W>([&](int i, int j, int k) {
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(
            apply(f, to_float2(src.data[i][j][k]), broadcast_at<ROWS>(vec, i, j, k)));
    });
}

// True in every lane of the warp when some element of the vector, in any lane, is not exactly 1 (a vote):
// a warp-uniform test for skipping a multiplication by ones (mul_row / mul_col's skip_ones).
template <typename TV, int N, typename VL> __device__ __forceinline__ bool any_not_one(const rv<TV, N, VL>& vec) {
    bool mine = false;
    _Pragma("unroll") for (int o = 0; o < N; o++)
    _Pragma("unroll") for (int k = 0; k < rv<TV, N, VL>::per_chunk; k++) mine |= vec.get(o, k) != 1.0f;
    return __any_sync(0xffffffffu, mine);
}

// Whether some element of this thread's part of the vector exceeds t (NaN exceeds nothing): each lane's own
// predicate, for a vote (named_any).
template <typename TV, int N, typename VL> __device__ __forceinline__ bool any_greater(const rv<TV, N, VL>& vec, float t) {
    bool mine = false;
    _Pragma("unroll") for (int o = 0; o < N; o++)
    _Pragma("unroll") for (int k = 0; k < rv<TV, N, VL>::per_chunk; k++) mine |= vec.get(o, k) > t;
    return mine;
}
"""

_MMA = r"""
// Warp tensor-core MMA, mma.sync.m16n8k16 with fp32 accumulate. d/c regs: (row g, cols 2t..) then (row g+8).
template <typename T> struct mma_kind;
template <> struct mma_kind<bf16> { static constexpr bool is_bf16 = true; };
template <> struct mma_kind<fp16> { static constexpr bool is_bf16 = false; };

template <typename T>
__device__ __forceinline__ void mma16816(float2& d0, float2& d1, const u32* a, u32 b0, u32 b1, float2 c0, float2 c1) {
    if constexpr (mma_kind<T>::is_bf16) {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                     : "=f"(d0.x), "=f"(d0.y), "=f"(d1.x), "=f"(d1.y)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                       "f"(c0.x), "f"(c0.y), "f"(c1.x), "f"(c1.y));
    } else {
        asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                     "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%10, %11, %12, %13};"
                     : "=f"(d0.x), "=f"(d0.y), "=f"(d1.x), "=f"(d1.y)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1),
                       "f"(c0.x), "f"(c0.y), "f"(c1.x), "f"(c1.y));
    }
}

// d = op(a) @ op(b) + c over base tiles (M x N of them, K deep). A transposed operand is held in the other layout,
// the same registers (a col-layout K x M tile is a row-layout M x K one): TA / TB only swap the base tile read.
template <bool TA, bool TB, typename T, int M, int N, int K, typename A, typename B>
__device__ __forceinline__ void mma(rt<float, M, N, row_l>& d, const A& a, const B& b, const rt<float, M, N, row_l>& c) {
    _Pragma("unroll") for (int i = 0; i < M; i++) _Pragma("unroll") for (int j = 0; j < N; j++) {
        float2 acc[4] = {c.data[i][j][0], c.data[i][j][1], c.data[i][j][2], c.data[i][j][3]};
        _Pragma("unroll") for (int k = 0; k < K; k++) {
            const u32* ar = reinterpret_cast<const u32*>(&a.data[TA ? k : i][TA ? i : k][0]);
            const u32* br = reinterpret_cast<const u32*>(&b.data[TB ? j : k][TB ? k : j][0]);
            mma16816<T>(acc[0], acc[1], ar, br[0], br[2], acc[0], acc[1]);  // n 0..7
            mma16816<T>(acc[2], acc[3], ar, br[1], br[3], acc[2], acc[3]);  // n 8..15
        }
        _Pragma("unroll") for (int k = 0; k < 4; k++) d.data[i][j][k] = acc[k];
    }
}
// ThunderKittens' four: a is M x K row layout (At: K x M col layout); b is K x N col layout (Bt: N x K row).
template <typename T, int M, int N, int K>
__device__ __forceinline__ void mma_AB(rt<float, M, N, row_l>& d, const rt<T, M, K, row_l>& a,
                                       const rt<T, K, N, col_l>& b, const rt<float, M, N, row_l>& c) {
    mma<false, false, T, M, N, K>(d, a, b, c);
}
template <typename T, int M, int N, int K>
__device__ __forceinline__ void mma_ABt(rt<float, M, N, row_l>& d, const rt<T, M, K, row_l>& a,
                                        const rt<T, N, K, row_l>& b, const rt<float, M, N, row_l>& c) {
    mma<false, true, T, M, N, K>(d, a, b, c);
}
template <typename T, int M, int N, int K>
__device__ __forceinline__ void mma_AtB(rt<float, M, N, row_l>& d, const rt<T, K, M, col_l>& a,
                                        const rt<T, K, N, col_l>& b, const rt<float, M, N, row_l>& c) {
    mma<true, false, T, M, N, K>(d, a, b, c);
}
template <typename T, int M, int N, int K>
__device__ __forceinline__ void mma_AtBt(rt<float, M, N, row_l>& d, const rt<T, K, M, col_l>& a,
                                         const rt<T, N, K, row_l>& b, const rt<float, M, N, row_l>& c) {
    mma<true, true, T, M, N, K>(d, a, b, c);
}
"""


def named_unary(fn: str) -> str:
    """tk::fn(dst, src): the map of op_fn."""
    return (f"template <typename D, typename S> __device__ __forceinline__ void {fn}(D& d, const S& s) "
            f"{{ unary_map(d, s, op_{fn}{{}}); }}")


def _named_ops() -> str:
    """ThunderKittens-style names over the generic map/reduce/broadcast templates."""
    out = ["// Named ops (tk::exp, tk::add, tk::row_max, tk::sub_row, ...)."]
    out += [named_unary(fn) for fn in UNARY_FNS]
    for fn in BINARY_FNS:
        out.append(f"template <typename D, typename A, typename B> __device__ __forceinline__ void "
                   f"{fn}(D& d, const A& a, const B& b) {{ bin_map(d, a, b, op_{fn}{{}}); }}")
    for axis, rows in (("row", "true"), ("col", "false")):
        for fn in REDUCE_FNS:
            out.append(f"template <typename V, typename T> __device__ __forceinline__ void {axis}_{fn}(V& d, const T& s) "
                       f"{{ reduce<{rows}>(d, s, op_{fn}{{}}); }}")
            out.append(f"template <typename V, typename T> __device__ __forceinline__ void "
                       f"{axis}_{fn}(V& d, const T& s, const V& accum) {{ reduce<{rows}>(d, s, op_{fn}{{}}, &accum); }}")
        for fn in BROADCAST_FNS:
            out.append(f"template <typename D, typename S, typename V> __device__ __forceinline__ void "
                       f"{fn}_{axis}(D& d, const S& s, const V& v) {{ broadcast<{rows}>(d, s, v, op_{fn}{{}}); }}")
    return "\n\n".join(out) + "\n"   # one helper each


HELPERS = helpers("".join([_REDUCE, _MMA, "\n", _named_ops()]))
