"""Prelude helpers for 8-bit floats (e4m3, e5m2): storage types and conversions, in the kernels that use them.

Register tiles of fp8 hold packed pairs (`fp8e4m3_2`, 16 bits) in the fragment layout of 16-bit
tiles, so the generic register templates (loads, stores, maps, reductions) work through
`to_float2` / `from_float2`: fp8 -> f32 is cvt.rn.f16x2.{e4m3x2,e5m2x2} (exact) and an fp16 -> f32
widening; f32 -> fp8 is cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 (nearest even, saturating to the
largest finite value). Stores into fp8 shared tiles write each pair (row layout) or byte (col
layout) with ordinary stores, since stmatrix moves 16-bit elements. PTX ISA: "cvt" (sm_89+).
"""
from __future__ import annotations

from .helpers import helpers

FP8_PTX = {"fp8e4m3": "e4m3", "fp8e5m2": "e5m2"}


def _conversions(t: str, ptx: str) -> str:
    return f"""
struct {t} {{ unsigned char x; }};
struct {t}_2 {{ unsigned short x; }};
template <> struct packed_of<{t}> {{ typedef {t}_2 type; }};
__device__ __forceinline__ float2 to_float2({t}_2 v) {{
    float lo, hi;
    asm("{{.reg .b32 h2; .reg .f16 l, h;\\n"
        "cvt.rn.f16x2.{ptx}x2 h2, %2;\\n"
        "mov.b32 {{l, h}}, h2;\\n"
        "cvt.f32.f16 %0, l;\\n"
        "cvt.f32.f16 %1, h;}}" : "=f"(lo), "=f"(hi) : "h"(v.x));
    return make_float2(lo, hi);
}}
__device__ __forceinline__ float to_float({t} v) {{ return to_float2({t}_2{{v.x}}).x; }}
template <> __device__ __forceinline__ {t}_2 from_float2<{t}_2>(float2 v) {{
    {t}_2 r; asm("cvt.rn.satfinite.{ptx}x2.f32 %0, %1, %2;" : "=h"(r.x) : "f"(v.y), "f"(v.x)); return r;  // hi, lo
}}
template <> __device__ __forceinline__ {t} from_float<{t}>(float v) {{
    return {t}{{(unsigned char)(from_float2<{t}_2>(make_float2(v, 0.0f)).x & 0xff)}};
}}
// st <- rt into an fp8 shared tile (more specialized than the generic store, which uses stmatrix or fp32 stores).
template <int R, int C, int SWZ, int PR, int PC, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store(const st<{t}, R, C, SWZ, PR, PC>& dst, const rt<TS, H, W, L>& src) {{
    store_fp8(dst, src);
}}
"""


_STORE = r"""
// The wgmma A fragment (m64nNk32, 8-bit types) of K slab `s` (32 columns) of a warp's 16 x K fp8 row-layout
// tile. In each 8-row x 16-byte block a lane holds the 4 bytes at row g = lane / 4, bytes 4t..4t+3 (t = lane % 4):
// r[0] / r[1] rows g / g+8 of cols 0-15 of the slab, r[2] / r[3] of cols 16-31 (PTX ISA, wgmma register
// fragments). tkpy's fragment (that of 16-bit tiles, with fp8 pairs) has the pairs at cols 2t and 2t+8,
// so each lane gathers its two pairs from lanes 2t and 2t+1 (mod 4) of its row group: 8 shuffles per slab.
template <typename T, int K>
__device__ __forceinline__ void wgmma_fp8_a_fragment(const rt<T, 1, K, row_l>& a, int s, u32 (&r)[4]) {
    const int ln = lane(), t = ln & 3, group = ln & ~3;
    const int src0 = group | ((2 * t) & 3), src1 = group | ((2 * t + 1) & 3);
    const int half = (t >> 1) * 16;   // lanes t < 2 take the sources' cols 2t' (reg 0/1), t >= 2 their 2t'+8 (reg 2/3)
    _Pragma("unroll") for (int h = 0; h < 2; h++) _Pragma("unroll") for (int q = 0; q < 2; q++) {
        const u32 w = u32(a.data[0][2 * s + h][q].x) | (u32(a.data[0][2 * s + h][q + 2].x) << 16);
        const u32 lo = (__shfl_sync(0xffffffffu, w, src0) >> half) & 0xffffu;
        const u32 hi = (__shfl_sync(0xffffffffu, w, src1) >> half) & 0xffffu;
        r[2 * h + q] = lo | (hi << 16);
    }
}

// A register's pair of values to (r0, c0) and (r1, c1) of a shared tile: adjacent in the row layout, in one 16-byte
// chunk.
template <typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void store_pair(row_l, const st<T, R, C, SWZ, PR, PC>& dst, int r0, int c0, int, int, float2 v) {
    typedef typename packed_of<T>::type T2;
    *reinterpret_cast<T2*>(dst.ptr(r0, c0)) = from_float2<T2>(v);
}
template <typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void store_pair(col_l, const st<T, R, C, SWZ, PR, PC>& dst, int r0, int c0, int r1, int c1,
                                           float2 v) {
    *dst.ptr(r0, c0) = from_float<T>(v.x);
    *dst.ptr(r1, c1) = from_float<T>(v.y);
}

template <typename TD, int R, int C, int SWZ, int PR, int PC, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store_fp8(const st<TD, R, C, SWZ, PR, PC>& dst, const rt<TS, H, W, L>& src) {
    for_each_pair(src, [&](int r0, int c0, int r1, int c1, float2 v) { store_pair(L{}, dst, r0, c0, r1, c1, v); }); }
"""

HELPERS = helpers("// ---- 8-bit floats (tkpy/codegen/prelude/fp8.py) ----\n" + _STORE
                  + "".join(_conversions(t, ptx) for t, ptx in FP8_PTX.items()))
