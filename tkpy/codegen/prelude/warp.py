"""Prelude sections for warp-level tiles: storage types, conversions, rt/rv/st/gl, memory and maps (reductions,
broadcasts, mma.sync and the named ops: prelude/warp_ops.py). Fragment maps and the swizzle are pasted in from
tkpy.tiles so that the generated code and the interpreter share one definition."""
from __future__ import annotations

from ...tiles import exp2_emulation, layouts, swizzle
from .helpers import helpers

_BASICS = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)   // no math.h under NVRTC
#endif

template <typename A, typename B> struct is_same { static constexpr bool value = false; };
template <typename A> struct is_same<A, A> { static constexpr bool value = true; };

template <typename T> struct packed_of;  // what a tile of T holds: pairs; element types convert to fp32 for arithmetic
template <> struct packed_of<float> { typedef float2 type; };
__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float2 to_float2(float2 v) { return v; }
template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <typename T2> __device__ __forceinline__ T2 from_float2(float2 v);
template <> __device__ __forceinline__ float2 from_float2<float2>(float2 v) { return v; }

struct bf16 { unsigned short x; }; struct bf16_2 { u32 x; };  // storage types (no cuda_bf16.h under NVRTC)
template <> struct packed_of<bf16> { typedef bf16_2 type; };
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(u32(v.x) << 16); }
__device__ __forceinline__ float2 to_float2(bf16_2 v) {
    return make_float2(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u)); }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) {
    bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(v)); return r; }
template <> __device__ __forceinline__ bf16_2 from_float2<bf16_2>(float2 v) {  // (hi, lo)
    bf16_2 r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r.x) : "f"(v.y), "f"(v.x)); return r; }

struct fp16 { unsigned short x; }; struct fp16_2 { u32 x; };
template <> struct packed_of<fp16> { typedef fp16_2 type; };
__device__ __forceinline__ float to_float(fp16 v) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f; }
__device__ __forceinline__ float2 to_float2(fp16_2 v) {
    float lo, hi;
    asm("{.reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}" : "=f"(lo), "=f"(hi) : "r"(v.x));
    return make_float2(lo, hi);
}
template <> __device__ __forceinline__ fp16 from_float<fp16>(float v) {
    fp16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(v)); return r; }
template <> __device__ __forceinline__ fp16_2 from_float2<fp16_2>(float2 v) {
    fp16_2 r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r.x) : "f"(v.y), "f"(v.x)); return r; }

__device__ __forceinline__ int lane() { return threadIdx.x & 31; }
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

__device__ __forceinline__ u32 smem_addr(const void* p) { return u32(__cvta_generic_to_shared(p)); }

__device__ __forceinline__ unsigned char* align_up(unsigned char* p, u64 a) {
    return reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(p) + a - 1) & ~(a - 1)); }

// A runtime value that divides in loops (a dimension, the grid size): n / d by a multiply-high, an add and a shift,
// not int division's ~20 instructions (Granlund-Montgomery: s = ceil(log2 |d|), m = ceil(2^(32+s) / |d|) - 2^32,
// |n| / |d| = (umulhi(|n|, m) + |n|) >> s for |n| <= 2^31). C++'s truncating / and % for any sign.
struct divisor {
    int d; u32 mul; u32 shift;
    __device__ __forceinline__ explicit divisor(int value) : d(value) {
        const u32 a = value < 0 ? 0u - u32(value) : value == 0 ? 1u : u32(value);   // (0: no trap, as n / 0)
        shift = 32 - __clz(a - 1);
        // m = ceil(2^32 (2^s - a) / a) < 2^32 from the MUFU's reciprocal, corrected twice by the remainder (a 64-bit
        // or double division costs a one-tile-a-block GEMM 7%, RESULTS.md run 235)
        float inv;
        asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(inv) : "f"(float(a)));
        const u64 n = u64((1ull << shift) - a) << 32;
        u64 q = u64(float(n) * inv);                                          // within ~2^10 of n / a
        q += (long long)(float((long long)(n - q * a)) * inv);                // within 1
        long long rem = (long long)(n - q * a);
        if (rem < 0) { q -= 1; rem += a; } else if (rem >= (long long)a) { q += 1; rem -= a; }
        mul = u32(q + (rem != 0));
    }
    __device__ __forceinline__ int quotient(int n) const {
        const u32 a = n < 0 ? 0u - u32(n) : u32(n);
        const u32 q = (__umulhi(a, mul) + a) >> shift;
        return int((n ^ d) < 0 ? 0u - q : q);
    }
};
__device__ __forceinline__ int operator/(int n, const divisor& v) { return v.quotient(n); }
__device__ __forceinline__ int operator%(int n, const divisor& v) { return int(u32(n) - u32(v.quotient(n)) * u32(v.d)); }
"""

_FRAGMENTS = r"""
struct row_l {};    // register-fragment layouts (tkpy/tiles/layouts.py): mma A / C, reg holds (row, col..col+1)
struct col_l {};    // its transpose: mma B layout
struct ortho_l {};  // vector: 2 values per 16, idx = ORTHO_INDEX
struct align_l {};  // vector: 4 values per 16, idx = ALIGN_INDEX
struct naive_l {};  // vector: 1 value per 32, idx = NAIVE_INDEX
struct contig_l {}; // vector: 8 consecutive values per 256, idx = CONTIG_INDEX (16-byte copies)
template <typename L> struct vec_shape;  // chunk length, values a lane holds a chunk, the lane bits they differ in
VECTOR_SHAPES
template <typename L> __device__ __forceinline__ void frag_pos(int lane, int reg, int half, int& r, int& c);
__device__ __forceinline__ int frag_row(int lane, int reg) { return ROW_LAYOUT_ROW; }
__device__ __forceinline__ int frag_col(int lane, int reg, int half) { return ROW_LAYOUT_COL; }
template <> __device__ __forceinline__ void frag_pos<row_l>(int lane, int reg, int half, int& r, int& c) {
    r = frag_row(lane, reg); c = frag_col(lane, reg, half); }
template <> __device__ __forceinline__ void frag_pos<col_l>(int lane, int reg, int half, int& r, int& c) {
    c = frag_row(lane, reg); r = frag_col(lane, reg, half); }

template <typename T, int H, int W, typename L> struct rt { typedef typename packed_of<T>::type T2; T2 data[H][W][4]; };
template <int H, int W, typename F> __device__ __forceinline__ void for_each_reg(F f) {
    _Pragma("unroll") for (int i = 0; i < H; i++) _Pragma("unroll") for (int j = 0; j < W; j++)
    _Pragma("unroll") for (int k = 0; k < 4; k++) f(i, j, k); }
// A register vector: value k of chunk c as a float; 16-bit values packed in pairs where a lane holds an even number.
template <typename T, bool PACKED> struct vec_word { typedef T type; };
template <typename T> struct vec_word<T, true> { typedef typename packed_of<T>::type type; };
template <typename T, int N, typename L> struct rv {
    static constexpr int per_chunk = vec_shape<L>::per_chunk, chunk_len = vec_shape<L>::chunk_len;
    static constexpr bool packed = sizeof(T) == 2 && per_chunk % 2 == 0;
    typedef typename vec_word<T, packed>::type word; word data[N][packed ? per_chunk / 2 : per_chunk];
    __device__ __forceinline__ float get(int c, int k) const {
        if constexpr (packed) { const float2 f = to_float2(data[c][k >> 1]); return (k & 1) ? f.y : f.x; }
        else return to_float(data[c][k]); }
    __device__ __forceinline__ void set(int c, int k, float v) {
        if constexpr (packed) {   // half a word: the other half kept
            const u32 h = from_float<T>(v).x; u32& w = data[c][k >> 1].x;
            w = (k & 1) ? (w & 0xffffu) | (h << 16) : (w & 0xffff0000u) | h;
        } else data[c][k] = from_float<T>(v);
    }
    // Values k and k + 1 of chunk c (k even): a packed pair rounded at once (one conversion, no merging of halves).
    __device__ __forceinline__ void set_pair(int c, int k, float a, float b) {
        if constexpr (packed) data[c][k >> 1] = from_float2<word>(make_float2(a, b));
        else { set(c, k, a); set(c, k + 1, b); }
    }
    // Every value k of chunk c = f(c, k), in pairs where a chunk holds an even number of them.
    template <typename F> __device__ __forceinline__ void set_all(F f) {
        constexpr int step = per_chunk % 2 == 0 ? 2 : 1;
        _Pragma("unroll") for (int c = 0; c < N; c++) _Pragma("unroll") for (int k = 0; k < per_chunk; k += step) {
            if constexpr (step == 2) set_pair(c, k, f(c, k), f(c, k + 1));
            else set(c, k, f(c, k));
        }
    }
};
"""

_MEMORY = r"""
template <typename T> struct gl {
    T* ptr; int batch, depth, rows, cols; long long batch_stride, depth_stride, row_stride;
    __device__ __forceinline__ T* at(int b, int d, int r, int c) const {
        return ptr + b * batch_stride + d * depth_stride + r * row_stride + c; }
};

// Shared tile: column panels SWZ bytes wide, 16-byte chunks XOR-swizzled (tkpy/tiles/swizzle.py); a subtile keeps
// the address function of the tile it views (panels PR rows tall, unswizzled rows PC elements apart).
template <typename T, int R, int C, int SWZ, int PR = R, int PC = C> struct st {
    static constexpr int swizzle = SWZ, panel_rows = PR;
    static constexpr int panel_cols = SWZ ? SWZ / int(sizeof(T)) : PC;
    static constexpr int bytes = R * C * int(sizeof(T));
    unsigned char* base;
    __device__ __forceinline__ static u32 offset(int r, int c) {
        const u32 byte = ((c / panel_cols) * PR * panel_cols + r * panel_cols + c % panel_cols) * u32(sizeof(T));
        if constexpr (SWZ == 0) return byte;
        else { constexpr u32 swizzle = SWZ; return SWIZZLE_EXPR; }
    }
    __device__ __forceinline__ T* ptr(int r, int c) const { return reinterpret_cast<T*>(base + offset(r, c)); }
    __device__ __forceinline__ u32 addr(int r, int c) const { return smem_addr(base) + offset(r, c); }
};
template <typename S, int N> struct st_array {
    unsigned char* base;
    __device__ __forceinline__ S operator[](int i) const { return S{base + i * S::bytes}; }
};

// rt <- gl and gl <- rt, a register's pair at (r, c) at a time: adjacent in the row layout (one 4/8-byte access).
template <typename T> __device__ __forceinline__ float2 load_pair(row_l, const T* base, long long stride, int r, int c) {
    return to_float2(*reinterpret_cast<const typename packed_of<T>::type*>(base + r * stride + c)); }
template <typename T> __device__ __forceinline__ float2 load_pair(col_l, const T* base, long long stride, int r, int c) {
    return make_float2(to_float(base[r * stride + c]), to_float(base[(r + 1) * stride + c])); }
template <typename T> __device__ __forceinline__ void store_pair(row_l, T* base, long long stride, int r, int c, float2 v) {
    typedef typename packed_of<T>::type T2; *reinterpret_cast<T2*>(base + r * stride + c) = from_float2<T2>(v); }
template <typename T> __device__ __forceinline__ void store_pair(col_l, T* base, long long stride, int r, int c, float2 v) {
    base[r * stride + c] = from_float<T>(v.x); base[(r + 1) * stride + c] = from_float<T>(v.y); }
template <typename TD, int H, int W, typename L, typename TS>
__device__ __forceinline__ void load(rt<TD, H, W, L>& dst, const gl<TS>& src, int b, int d, int r0, int c0) {
    const int ln = lane(); const TS* base = src.at(b, d, r0, c0);
    for_each_reg<H, W>([&](int i, int j, int k) {
        int r, c; frag_pos<L>(ln, k, 0, r, c);
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(
            load_pair(L{}, base, src.row_stride, r + 16 * i, c + 16 * j));
    });
}
template <typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store(const gl<TD>& dst, const rt<TS, H, W, L>& src, int b, int d, int r0, int c0) {
    const int ln = lane(); TD* base = dst.at(b, d, r0, c0);
    for_each_reg<H, W>([&](int i, int j, int k) {
        int r, c; frag_pos<L>(ln, k, 0, r, c);
        store_pair(L{}, base, dst.row_stride, r + 16 * i, c + 16 * j, to_float2(src.data[i][j][k]));
    });
}

// ldmatrix / stmatrix x4 over a 16x16 base tile of 16-bit values (transposed for the col layout), and lane ln's row
// and column in it: matrix q = ln / 8 is register q of the row layout, the mirrored quadrant of the col layout.
template <typename L> __device__ __forceinline__ void ldmatrix(u32 addr, u32& a, u32& b, u32& c, u32& d);
template <typename L> __device__ __forceinline__ void stmatrix(u32 addr, u32 a, u32 b, u32 c, u32 d);
template <typename L> __device__ __forceinline__ void ldmatrix_pos(int ln, int& r, int& c);
template <> __device__ __forceinline__ void ldmatrix<row_l>(u32 addr, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
template <> __device__ __forceinline__ void stmatrix<row_l>(u32 addr, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
template <> __device__ __forceinline__ void ldmatrix_pos<row_l>(int ln, int& r, int& c) {
    r = (ln & 7) + 8 * ((ln >> 3) & 1); c = 8 * (ln >> 4); }
template <> __device__ __forceinline__ void ldmatrix<col_l>(u32 addr, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
template <> __device__ __forceinline__ void stmatrix<col_l>(u32 addr, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
template <> __device__ __forceinline__ void ldmatrix_pos<col_l>(int ln, int& r, int& c) {
    r = (ln & 7) + 8 * (ln >> 4); c = 8 * ((ln >> 3) & 1); }

// A register's pair of values at p0 (the first) and p1 in shared memory as floats: adjacent in the row layout, in
// one 16-byte chunk; to shared addresses a0 and a1 (st.shared, one v2 where adjacent).
template <typename T> __device__ __forceinline__ float2 load_pair(row_l, const T* p0, const T*) {
    return to_float2(*reinterpret_cast<const typename packed_of<T>::type*>(p0)); }
template <typename T> __device__ __forceinline__ float2 load_pair(col_l, const T* p0, const T* p1) {
    return make_float2(to_float(*p0), to_float(*p1)); }
__device__ __forceinline__ void sts(u32 addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;" :: "r"(addr), "f"(v) : "memory"); }
__device__ __forceinline__ void sts(u32 addr, float2 v) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(v.x), "f"(v.y) : "memory"); }
__device__ __forceinline__ void sts_pair(row_l, u32 a0, u32, float2 v) { sts(a0, v); }
__device__ __forceinline__ void sts_pair(col_l, u32 a0, u32 a1, float2 v) { sts(a0, v.x); sts(a1, v.y); }

// rt <- st: ldmatrix for 16-bit tiles of the same dtype; otherwise (fp32, conversions) a pair per register.
template <typename TD, int H, int W, typename L, typename TS, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void load(rt<TD, H, W, L>& dst, const st<TS, R, C, SWZ, PR, PC>& src) {
    typedef typename rt<TD, H, W, L>::T2 T2;
    const int ln = lane();
    if constexpr (sizeof(TD) == 2 && is_same<TD, TS>::value) {
        int lr, lc;
        ldmatrix_pos<L>(ln, lr, lc);
        _Pragma("unroll") for (int i = 0; i < H; i++) _Pragma("unroll") for (int j = 0; j < W; j++) {
            u32* d = reinterpret_cast<u32*>(&dst.data[i][j][0]);
            ldmatrix<L>(src.addr(16 * i + lr, 16 * j + lc), d[0], d[1], d[2], d[3]);
        }
    } else {
        for_each_reg<H, W>([&](int i, int j, int k) {
            int r0, c0, r1, c1;
            frag_pos<L>(ln, k, 0, r0, c0);
            frag_pos<L>(ln, k, 1, r1, c1);
            dst.data[i][j][k] = from_float2<T2>(load_pair(L{}, src.ptr(16 * i + r0, 16 * j + c0),
                                                          src.ptr(16 * i + r1, 16 * j + c1)));
        });
    }
}

// f(r0, c0, r1, c1, v) for each register pair of a tile: its two values and their tile positions (in the
// row layout the second sits right of the first).
template <typename TS, int H, int W, typename L, typename F>
__device__ __forceinline__ void for_each_pair(const rt<TS, H, W, L>& src, F f) {
    const int ln = lane();
    for_each_reg<H, W>([&](int i, int j, int k) {
        int r0, c0, r1, c1;
        frag_pos<L>(ln, k, 0, r0, c0);
        frag_pos<L>(ln, k, 1, r1, c1);
        f(16 * i + r0, 16 * j + c0, 16 * i + r1, 16 * j + c1, to_float2(src.data[i][j][k]));
    });
}

// st <- rt: stmatrix for 16-bit tiles (registers of another type are packed to the tile's first, e.g. an
// fp32 accumulator into a bf16 output tile); fp32 tiles: st.shared of each pair.
template <typename TD, int R, int C, int SWZ, int PR, int PC, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store(const st<TD, R, C, SWZ, PR, PC>& dst, const rt<TS, H, W, L>& src) {
    const int ln = lane();
    if constexpr (sizeof(TD) == 2) {
        typedef typename packed_of<TD>::type D2;
        int lr, lc;
        ldmatrix_pos<L>(ln, lr, lc);
        _Pragma("unroll") for (int i = 0; i < H; i++) _Pragma("unroll") for (int j = 0; j < W; j++) {
            u32 s[4];
            _Pragma("unroll") for (int k = 0; k < 4; k++) {
                if constexpr (is_same<TD, TS>::value) s[k] = src.data[i][j][k].x;
                else s[k] = from_float2<D2>(to_float2(src.data[i][j][k])).x;
            }
            stmatrix<L>(dst.addr(16 * i + lr, 16 * j + lc), s[0], s[1], s[2], s[3]);
        }
    } else {
        for_each_pair(src, [&](int r0, int c0, int r1, int c1, float2 v) {
            sts_pair(L{}, dst.addr(r0, c0), dst.addr(r1, c1), v);
        });
    }
}

// The 16-byte chunks of an R x C tile of T, dealt round-robin to NT threads: f(row, col) for thread t's.
template <int NT, typename T, int R, int C, typename F>
__device__ __forceinline__ void for_each_chunk(int t, F f) {
    constexpr int per_chunk = 16 / int(sizeof(T)), chunks_per_row = C / per_chunk, chunks = R * chunks_per_row;
    _Pragma("unroll") for (int i = 0; i < (chunks + NT - 1) / NT; i++) {  // a compile-time count: unrolled, predicated
        const int idx = i * NT + t;
        if (chunks % NT == 0 || idx < chunks) f(idx / chunks_per_row, (idx % chunks_per_row) * per_chunk);
    }
}

// st <- gl and gl <- st, by NT threads (thread `t` of them), in 16-byte chunks.
template <int NT, typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void load(const st<T, R, C, SWZ, PR, PC>& dst, const gl<T>& src, int b, int d, int r0, int c0, int t) {
    for_each_chunk<NT, T, R, C>(t, [&](int r, int c) {
        *reinterpret_cast<uint4*>(dst.ptr(r, c)) = *reinterpret_cast<const uint4*>(src.at(b, d, r0 + r, c0 + c));
    });
}
template <int NT, typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void store(const gl<T>& dst, const st<T, R, C, SWZ, PR, PC>& src, int b, int d, int r0, int c0, int t) {
    for_each_chunk<NT, T, R, C>(t, [&](int r, int c) {
        *reinterpret_cast<uint4*>(dst.at(b, d, r0 + r, c0 + c)) = *reinterpret_cast<const uint4*>(src.ptr(r, c));
    });
}
"""

_MAPS = r"""
// Elementwise maps, computed in fp32 and rounded to the destination type.

struct op_copy { __device__ __forceinline__ float operator()(float x) const { return x; } };

struct op_neg  { __device__ __forceinline__ float operator()(float x) const { return -x; } };

// exp2: one MUFU.EX2 (2 ulp, subnormals flush to zero) without exp2f's range fix-up; exp(x) = exp2(x log2 e): __expf.
struct op_exp2 { __device__ __forceinline__ float operator()(float x) const {
    float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y; } };

struct op_exp  { __device__ __forceinline__ float operator()(float x) const { return op_exp2{}(x * 1.4426950408889634f); } };

struct op_log  { __device__ __forceinline__ float operator()(float x) const { return __logf(x); } };

struct op_log2 { __device__ __forceinline__ float operator()(float x) const { return __log2f(x); } };

struct op_abs  { __device__ __forceinline__ float operator()(float x) const { return fabsf(x); } };

struct op_relu { __device__ __forceinline__ float operator()(float x) const { return fmaxf(x, 0.0f); } };

struct op_add  { __device__ __forceinline__ float operator()(float a, float b) const { return a + b; } };

struct op_sub  { __device__ __forceinline__ float operator()(float a, float b) const { return a - b; } };

struct op_mul  { __device__ __forceinline__ float operator()(float a, float b) const { return a * b; } };

struct op_div  { __device__ __forceinline__ float operator()(float a, float b) const { return __fdividef(a, b); } };

struct op_max  { __device__ __forceinline__ float operator()(float a, float b) const { return fmaxf(a, b); } };

struct op_min  { __device__ __forceinline__ float operator()(float a, float b) const { return fminf(a, b); } };

struct op_sum  : op_add {};

struct op_prod : op_mul {};

template <typename F> __device__ __forceinline__ float2 apply(F f, float2 a) { return make_float2(f(a.x), f(a.y)); }
template <typename F> __device__ __forceinline__ float2 apply(F f, float2 a, float2 b) {
    return make_float2(f(a.x, b.x), f(a.y, b.y)); }

template <typename F, typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void unary_map(rt<TD, H, W, L>& dst, const rt<TS, H, W, L>& src, F f) {
    for_each_reg<H, W>([&](int i, int j, int k) {
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(apply(f, to_float2(src.data[i][j][k])));
    });
}
template <typename F, typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void unary_map(rv<TD, N, L>& dst, const rv<TS, N, L>& src, F f) {
    dst.set_all([&](int c, int k) { return f(src.get(c, k)); }); }

template <typename F, typename TD, typename TA, typename TB, int H, int W, typename L>
__device__ __forceinline__ void bin_map(rt<TD, H, W, L>& dst, const rt<TA, H, W, L>& a, const rt<TB, H, W, L>& b, F f) {
    for_each_reg<H, W>([&](int i, int j, int k) {
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(
            apply(f, to_float2(a.data[i][j][k]), to_float2(b.data[i][j][k])));
    });
}
template <typename F, typename TD, typename TA, int H, int W, typename L>
__device__ __forceinline__ void bin_map(rt<TD, H, W, L>& dst, const rt<TA, H, W, L>& a, float b, F f) {
    for_each_reg<H, W>([&](int i, int j, int k) {
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(
            apply(f, to_float2(a.data[i][j][k]), make_float2(b, b)));
    });
}
template <typename F, typename TD, typename TA, typename TB, int N, typename L>
__device__ __forceinline__ void bin_map(rv<TD, N, L>& dst, const rv<TA, N, L>& a, const rv<TB, N, L>& b, F f) {
    dst.set_all([&](int c, int k) { return f(a.get(c, k), b.get(c, k)); }); }
template <typename F, typename TD, typename TA, int N, typename L>
__device__ __forceinline__ void bin_map(rv<TD, N, L>& dst, const rv<TA, N, L>& a, float b, F f) {
    dst.set_all([&](int c, int k) { return f(a.get(c, k), b); }); }

template <typename T, int H, int W, typename L>
__device__ __forceinline__ void fill(rt<T, H, W, L>& dst, float v) {
    const typename rt<T, H, W, L>::T2 p = from_float2<typename rt<T, H, W, L>::T2>(make_float2(v, v));
    for_each_reg<H, W>([&](int i, int j, int k) { dst.data[i][j][k] = p; });
}

template <typename T, int N, typename L>
__device__ __forceinline__ void fill(rv<T, N, L>& dst, float v) { dst.set_all([=](int, int) { return v; }); }
"""

def _vector_shapes() -> str:
    return "\n".join(f"template <> struct vec_shape<{name}_l> {{ static constexpr int chunk_len = {chunk}, "
                     f"per_chunk = {per}, lane_bits = {bits}; }};"
                     for name, (chunk, per, bits, _) in layouts.VECTOR_LAYOUTS.items())


def _substitute(text: str) -> str:
    text = text.replace("VECTOR_SHAPES", _vector_shapes())
    for name in ("ROW_LAYOUT_ROW", "ROW_LAYOUT_COL", "ORTHO_INDEX", "ALIGN_INDEX", "NAIVE_INDEX", "CONTIG_INDEX",
                 "TILE_ELEMENT", "VECTOR_ELEMENT"):
        text = text.replace(name, getattr(layouts, name))
    return text.replace("SWIZZLE_EXPR", swizzle.SWIZZLE_EXPR)


HELPERS = helpers("".join([_BASICS, _substitute(_FRAGMENTS), _substitute(_MEMORY), _MAPS, exp2_emulation.CPP]))
