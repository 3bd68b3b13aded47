// ---- tkpy prelude: header-free device helpers (NVRTC ships no headers) ----
namespace tk {
typedef unsigned int u32;
typedef unsigned long long u64;
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)   // no math.h under NVRTC
#endif

template <typename A, typename B> struct is_same { static constexpr bool value = false; };
template <typename A> struct is_same<A, A> { static constexpr bool value = true; };
template <typename T> struct identity { typedef T type; };  // blocks template deduction

// 16-bit storage types (no cuda_bf16.h under NVRTC); arithmetic happens in fp32.
struct bf16 { unsigned short x; };
struct fp16 { unsigned short x; };
struct bf16_2 { u32 x; };
struct fp16_2 { u32 x; };

template <typename T> struct packed_of;
template <> struct packed_of<float> { typedef float2 type; };
template <> struct packed_of<bf16> { typedef bf16_2 type; };
template <> struct packed_of<fp16> { typedef fp16_2 type; };

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(bf16 v) { return __uint_as_float(u32(v.x) << 16); }
__device__ __forceinline__ float to_float(fp16 v) {
    float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(v.x)); return f;
}
__device__ __forceinline__ float2 to_float2(float2 v) { return v; }
__device__ __forceinline__ float2 to_float2(bf16_2 v) {
    return make_float2(__uint_as_float(v.x << 16), __uint_as_float(v.x & 0xffff0000u));
}
__device__ __forceinline__ float2 to_float2(fp16_2 v) {
    float lo, hi;
    asm("{.reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h;}" : "=f"(lo), "=f"(hi) : "r"(v.x));
    return make_float2(lo, hi);
}

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ bf16 from_float<bf16>(float v) {
    bf16 r; asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(r.x) : "f"(v)); return r;
}
template <> __device__ __forceinline__ fp16 from_float<fp16>(float v) {
    fp16 r; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(r.x) : "f"(v)); return r;
}
template <typename T2> __device__ __forceinline__ T2 from_float2(float2 v);
template <> __device__ __forceinline__ float2 from_float2<float2>(float2 v) { return v; }
template <> __device__ __forceinline__ bf16_2 from_float2<bf16_2>(float2 v) {
    bf16_2 r; asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r.x) : "f"(v.y), "f"(v.x)); return r;  // hi, lo
}
template <> __device__ __forceinline__ fp16_2 from_float2<fp16_2>(float2 v) {
    fp16_2 r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r.x) : "f"(v.y), "f"(v.x)); return r;
}

__device__ __forceinline__ int lane() { return threadIdx.x & 31; }
__device__ __forceinline__ u32 smem_addr(const void* p) { return u32(__cvta_generic_to_shared(p)); }
__device__ __forceinline__ unsigned char* align_up(unsigned char* p, u64 a) {
    return reinterpret_cast<unsigned char*>((reinterpret_cast<u64>(p) + a - 1) & ~(a - 1));
}

// A runtime value that divides in loops (a dimension, the grid size): made once, it gives n / d from a
// multiply-high, an add and a shift, where the generic int division takes ~20 instructions, three on the
// MUFU's pipe (Granlund-Montgomery: with s = ceil(log2 |d|) and m = ceil(2^(32+s) / |d|) - 2^32,
// |n| / |d| = (umulhi(|n|, m) + |n|) >> s for every |n| <= 2^31). C++'s truncating / and % for any sign.
struct divisor {
    int d; u32 mul; u32 shift;
    __device__ __forceinline__ explicit divisor(int value) : d(value) {
        const u32 a = value < 0 ? 0u - u32(value) : value == 0 ? 1u : u32(value);   // (0: no trap, as n / 0)
        shift = 32 - __clz(a - 1);
        // m = ceil(2^32 (2^s - a) / a), below 2^32 as 2^s - a < a: from the MUFU's reciprocal, corrected twice by
        // the remainder (a 64-bit division calls a ~70-instruction routine, a double one has a slow path: either
        // costs a GEMM of one tile a block 7%, RESULTS.md run 235)
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

// Register-fragment maps of a 16x16 base tile (tkpy/tiles/layouts.py).
struct row_l {};    // mma A / C layout: reg holds (row, col..col+1)
struct col_l {};    // its transpose: mma B layout
struct ortho_l {};  // vector: 2 values per 16, idx = (lane >> 2) + 8 * k
struct align_l {};  // vector: 4 values per 16, idx = 2 * (lane & 3) + 8 * (k >> 1) + (k & 1)
struct naive_l {};  // vector: 1 value per 32, idx = lane + 32 * k
__device__ __forceinline__ int frag_row(int lane, int reg) { return (lane >> 2) + 8 * (reg & 1); }
__device__ __forceinline__ int frag_col(int lane, int reg, int half) { return 2 * (lane & 3) + 8 * (reg >> 1) + half; }

template <typename T, int H, int W, typename L> struct rt {
    typedef T dtype;
    typedef typename packed_of<T>::type T2;
    static constexpr int height = H, width = W;
    T2 data[H][W][4];
};
template <typename T, int N, typename L> struct rv {
    typedef T dtype;
    static constexpr int chunks = N, per_chunk = is_same<L, ortho_l>::value ? 2 : is_same<L, align_l>::value ? 4 : 1;
    static constexpr int chunk_len = is_same<L, naive_l>::value ? 32 : 16;
    T data[N][per_chunk];
};
// (row, col) of element `half` of register `reg` of a lane, inside a base tile.
template <typename L> __device__ __forceinline__ void frag_pos(int lane, int reg, int half, int& r, int& c) {
    if constexpr (is_same<L, row_l>::value) { r = frag_row(lane, reg); c = frag_col(lane, reg, half); }
    else { c = frag_row(lane, reg); r = frag_col(lane, reg, half); }
}

// Global tensor view: up to 4 dims (batch, depth, rows, cols), strides in elements.
template <typename T> struct gl {
    T* ptr;
    int batch, depth, rows, cols;
    long long batch_stride, depth_stride, row_stride;
    __device__ __forceinline__ T* at(int b, int d, int r, int c) const {
        return ptr + b * batch_stride + d * depth_stride + r * row_stride + c;
    }
};

// Shared tile: column panels SWZ bytes wide, 16-byte chunks XOR-swizzled (tkpy/tiles/swizzle.py).
// A subtile (tk::subtile) keeps the address function of the tile it views: panels PR rows tall,
// unswizzled rows PC elements apart.
template <typename T, int R, int C, int SWZ, int PR = R, int PC = C> struct st {
    typedef T dtype;
    static constexpr int rows = R, cols = C, swizzle = SWZ, panel_rows = PR;
    static constexpr int panel_cols = SWZ ? SWZ / int(sizeof(T)) : PC;
    static constexpr int bytes = R * C * int(sizeof(T));
    unsigned char* base;
    __device__ __forceinline__ static u32 offset(int r, int c) {
        const u32 byte = ((c / panel_cols) * PR * panel_cols + r * panel_cols + c % panel_cols) * u32(sizeof(T));
        if constexpr (SWZ == 0) return byte;
        else { constexpr u32 swizzle = SWZ; return byte ^ (((byte % (swizzle * 8)) >> 7) << 4); }
    }
    __device__ __forceinline__ T* ptr(int r, int c) const { return reinterpret_cast<T*>(base + offset(r, c)); }
    __device__ __forceinline__ u32 addr(int r, int c) const { return smem_addr(base) + offset(r, c); }
};
template <typename S, int N> struct st_array {
    unsigned char* base;
    __device__ __forceinline__ S operator[](int i) const { return S{base + i * S::bytes}; }
};

// rt <- gl: each lane reads its fragment; row-layout pairs are one 4/8-byte access.
template <typename TD, int H, int W, typename L, typename TS>
__device__ __forceinline__ void load(rt<TD, H, W, L>& dst, const gl<TS>& src, int b, int d, int r0, int c0) {
    typedef typename rt<TD, H, W, L>::T2 T2;
    typedef typename packed_of<TS>::type S2;
    const int ln = lane();
    const TS* base = src.at(b, d, r0, c0);
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        int r, c;
        frag_pos<L>(ln, k, 0, r, c);
        r += 16 * i; c += 16 * j;
        if constexpr (is_same<L, row_l>::value) {
            const S2 v = *reinterpret_cast<const S2*>(base + r * src.row_stride + c);
            dst.data[i][j][k] = from_float2<T2>(to_float2(v));
        } else {
            const float lo = to_float(base[r * src.row_stride + c]);
            const float hi = to_float(base[(r + 1) * src.row_stride + c]);
            dst.data[i][j][k] = from_float2<T2>(make_float2(lo, hi));
        }
    }
}

// gl <- rt
template <typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store(const gl<TD>& dst, const rt<TS, H, W, L>& src, int b, int d, int r0, int c0) {
    typedef typename packed_of<TD>::type D2;
    const int ln = lane();
    TD* base = dst.at(b, d, r0, c0);
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        int r, c;
        frag_pos<L>(ln, k, 0, r, c);
        r += 16 * i; c += 16 * j;
        const float2 v = to_float2(src.data[i][j][k]);
        if constexpr (is_same<L, row_l>::value) {
            *reinterpret_cast<D2*>(base + r * dst.row_stride + c) = from_float2<D2>(v);
        } else {
            base[r * dst.row_stride + c] = from_float<TD>(v.x);
            base[(r + 1) * dst.row_stride + c] = from_float<TD>(v.y);
        }
    }
}

__device__ __forceinline__ void ldmatrix_x4(u32 addr, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans(u32 addr, u32& a, u32& b, u32& c, u32& d) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(addr));
}
__device__ __forceinline__ void stmatrix_x4(u32 addr, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}
__device__ __forceinline__ void stmatrix_x4_trans(u32 addr, u32 a, u32 b, u32 c, u32 d) {
    asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};"
                 :: "r"(addr), "r"(a), "r"(b), "r"(c), "r"(d) : "memory");
}

// Lane `ln`'s row and column for ldmatrix/stmatrix x4 over a 16x16 base tile: matrix q = ln / 8
// covers register q of the row layout; transposed (col layout) it covers the mirrored quadrant.
template <typename L> __device__ __forceinline__ void ldmatrix_pos(int ln, int& r, int& c) {
    const int q = ln >> 3;
    if constexpr (is_same<L, row_l>::value) { r = (ln & 7) + 8 * (q & 1); c = 8 * (q >> 1); }
    else { r = (ln & 7) + 8 * (q >> 1); c = 8 * (q & 1); }
}

// rt <- st: ldmatrix for 16-bit tiles of the same dtype; otherwise (fp32, conversions) a packed pair per
// register in the row layout, elements in the col layout.
template <typename TD, int H, int W, typename L, typename TS, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void load(rt<TD, H, W, L>& dst, const st<TS, R, C, SWZ, PR, PC>& src) {
    typedef typename rt<TD, H, W, L>::T2 T2;
    const int ln = lane();
    if constexpr (sizeof(TD) == 2 && is_same<TD, TS>::value) {
        int lr, lc;
        ldmatrix_pos<L>(ln, lr, lc);
        #pragma unroll
        for (int i = 0; i < H; i++)
        #pragma unroll
        for (int j = 0; j < W; j++) {
            u32* d = reinterpret_cast<u32*>(&dst.data[i][j][0]);
            if constexpr (is_same<L, row_l>::value) ldmatrix_x4(src.addr(16 * i + lr, 16 * j + lc), d[0], d[1], d[2], d[3]);
            else ldmatrix_x4_trans(src.addr(16 * i + lr, 16 * j + lc), d[0], d[1], d[2], d[3]);
        }
    } else {
        #pragma unroll
        for (int i = 0; i < H; i++)
        #pragma unroll
        for (int j = 0; j < W; j++)
        #pragma unroll
        for (int k = 0; k < 4; k++) {
            int r0, c0, r1, c1;
            frag_pos<L>(ln, k, 0, r0, c0);
            if constexpr (is_same<L, row_l>::value) {   // the pair is adjacent, in one 16-byte chunk
                typedef typename packed_of<TS>::type S2;
                dst.data[i][j][k] = from_float2<T2>(to_float2(*reinterpret_cast<const S2*>(src.ptr(16 * i + r0, 16 * j + c0))));
            } else {
                frag_pos<L>(ln, k, 1, r1, c1);
                const float lo = to_float(*src.ptr(16 * i + r0, 16 * j + c0));
                const float hi = to_float(*src.ptr(16 * i + r1, 16 * j + c1));
                dst.data[i][j][k] = from_float2<T2>(make_float2(lo, hi));
            }
        }
    }
}

__device__ __forceinline__ void sts(u32 addr, float v) {
    asm volatile("st.shared.f32 [%0], %1;" :: "r"(addr), "f"(v) : "memory");
}
__device__ __forceinline__ void sts(u32 addr, float2 v) {
    asm volatile("st.shared.v2.f32 [%0], {%1, %2};" :: "r"(addr), "f"(v.x), "f"(v.y) : "memory");
}

// f(r0, c0, r1, c1, v) for each register pair of a tile: its two values and their tile positions (in the
// row layout the second sits right of the first).
template <typename TS, int H, int W, typename L, typename F>
__device__ __forceinline__ void for_each_pair(const rt<TS, H, W, L>& src, F f) {
    const int ln = lane();
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        int r0, c0, r1, c1;
        frag_pos<L>(ln, k, 0, r0, c0);
        frag_pos<L>(ln, k, 1, r1, c1);
        f(16 * i + r0, 16 * j + c0, 16 * i + r1, 16 * j + c1, to_float2(src.data[i][j][k]));
    }
}

// st <- rt: stmatrix for 16-bit tiles (registers of another type are packed to the tile's first, e.g. an
// fp32 accumulator into a bf16 output tile); fp32 tiles: st.shared of each pair (row layout) or element.
template <typename TD, int R, int C, int SWZ, int PR, int PC, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store(const st<TD, R, C, SWZ, PR, PC>& dst, const rt<TS, H, W, L>& src) {
    const int ln = lane();
    if constexpr (sizeof(TD) == 2) {
        typedef typename packed_of<TD>::type D2;
        int lr, lc;
        ldmatrix_pos<L>(ln, lr, lc);
        #pragma unroll
        for (int i = 0; i < H; i++)
        #pragma unroll
        for (int j = 0; j < W; j++) {
            u32 s[4];
            #pragma unroll
            for (int k = 0; k < 4; k++) {
                if constexpr (is_same<TD, TS>::value) s[k] = src.data[i][j][k].x;
                else s[k] = from_float2<D2>(to_float2(src.data[i][j][k])).x;
            }
            if constexpr (is_same<L, row_l>::value) stmatrix_x4(dst.addr(16 * i + lr, 16 * j + lc), s[0], s[1], s[2], s[3]);
            else stmatrix_x4_trans(dst.addr(16 * i + lr, 16 * j + lc), s[0], s[1], s[2], s[3]);
        }
    } else {
        for_each_pair(src, [&](int r0, int c0, int r1, int c1, float2 v) {
            if constexpr (is_same<L, row_l>::value) {   // the pair is adjacent, in one 16-byte chunk
                sts(dst.addr(r0, c0), v);
            } else {
                sts(dst.addr(r0, c0), v.x);
                sts(dst.addr(r1, c1), v.y);
            }
        });
    }
}

// The 16-byte chunks of an R x C tile of T, dealt round-robin to NT threads: f(row, col) for thread t's.
template <int NT, typename T, int R, int C, typename F>
__device__ __forceinline__ void for_each_chunk(int t, F f) {
    constexpr int per_chunk = 16 / int(sizeof(T)), chunks_per_row = C / per_chunk, chunks = R * chunks_per_row;
    #pragma unroll
    for (int i = 0; i < (chunks + NT - 1) / NT; i++) {   // a compile-time trip count: unrolled, predicated
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

// Elementwise maps, computed in fp32 and rounded to the destination type.
struct op_copy { __device__ __forceinline__ float operator()(float x) const { return x; } };
struct op_neg  { __device__ __forceinline__ float operator()(float x) const { return -x; } };
// exp2: one MUFU.EX2 (ex2.approx.ftz: at most 2 ulp, as exp2f; subnormal inputs and results flush to
// zero), without the range fix-up of the non-ftz ex2.approx that exp2f and __expf compile to (a compare
// and two predicated multiplies or selects per element). exp(x) = exp2(x * log2 e), as __expf computes it.
struct op_exp2 {
    __device__ __forceinline__ float operator()(float x) const {
        float y; asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x)); return y;
    }
};
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
    return make_float2(f(a.x, b.x), f(a.y, b.y));
}

template <typename F, typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void map(rt<TD, H, W, L>& dst, const rt<TS, H, W, L>& src, F f) {
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++)
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(apply(f, to_float2(src.data[i][j][k])));
}
template <typename F, typename TD, typename TA, typename TB, int H, int W, typename L>
__device__ __forceinline__ void map(rt<TD, H, W, L>& dst, const rt<TA, H, W, L>& a, const rt<TB, H, W, L>& b, F f) {
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++)
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(
            apply(f, to_float2(a.data[i][j][k]), to_float2(b.data[i][j][k])));
}
template <typename F, typename TD, typename TA, int H, int W, typename L>
__device__ __forceinline__ void map(rt<TD, H, W, L>& dst, const rt<TA, H, W, L>& a, float b, F f) {
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++)
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(
            apply(f, to_float2(a.data[i][j][k]), make_float2(b, b)));
}
template <typename F, typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void map(rv<TD, N, L>& dst, const rv<TS, N, L>& src, F f) {
    #pragma unroll
    for (int i = 0; i < N; i++)
    #pragma unroll
    for (int k = 0; k < rv<TD, N, L>::per_chunk; k++) dst.data[i][k] = from_float<TD>(f(to_float(src.data[i][k])));
}
template <typename F, typename TD, typename TA, typename TB, int N, typename L>
__device__ __forceinline__ void map(rv<TD, N, L>& dst, const rv<TA, N, L>& a, const rv<TB, N, L>& b, F f) {
    #pragma unroll
    for (int i = 0; i < N; i++)
    #pragma unroll
    for (int k = 0; k < rv<TD, N, L>::per_chunk; k++)
        dst.data[i][k] = from_float<TD>(f(to_float(a.data[i][k]), to_float(b.data[i][k])));
}
template <typename F, typename TD, typename TA, int N, typename L>
__device__ __forceinline__ void map(rv<TD, N, L>& dst, const rv<TA, N, L>& a, float b, F f) {
    #pragma unroll
    for (int i = 0; i < N; i++)
    #pragma unroll
    for (int k = 0; k < rv<TD, N, L>::per_chunk; k++) dst.data[i][k] = from_float<TD>(f(to_float(a.data[i][k]), b));
}

template <typename T, int H, int W, typename L>
__device__ __forceinline__ void fill(rt<T, H, W, L>& dst, float v) {
    const typename rt<T, H, W, L>::T2 p = from_float2<typename rt<T, H, W, L>::T2>(make_float2(v, v));
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) dst.data[i][j][k] = p;
}
template <typename T, int N, typename L>
__device__ __forceinline__ void fill(rv<T, N, L>& dst, float v) {
    #pragma unroll
    for (int i = 0; i < N; i++)
    #pragma unroll
    for (int k = 0; k < rv<T, N, L>::per_chunk; k++) dst.data[i][k] = from_float<T>(v);
}

// exp2 on the FMA pipes (tk.exp2(x, emulated=...), tkpy/tiles/exp2_emulation.py): x clamped to [-127, 128]
// (max.NaN / min.NaN: NaN stays NaN), rounded to j in the low bits of t = x + 1.5 * 2^23 + 127, whose bits
// shifted left by 23 are the float 2^j; 2^(x - j) by a degree-3 polynomial (relative error 1.0e-4).
// 10 FMA-pipe instructions instead of one MUFU.EX2.
__device__ __forceinline__ float exp2_poly(float x) {
    asm("max.NaN.f32 %0, %0, %1;" : "+f"(x) : "f"(-127.0f));
    asm("min.NaN.f32 %0, %0, %1;" : "+f"(x) : "f"(128.0f));
    const float t = x + 12583039.0f;
    const float f = x - (t - 12583039.0f);
    const float p = fmaf(fmaf(fmaf(0.05500858277f, f, 0.24221037328f), f, 0.69328290224f), f, 1.0f);
    return p * __uint_as_float(__float_as_uint(t) << 23);
}
template <int N> __device__ __forceinline__ constexpr bool emulated_element(int e) {
    constexpr int n = N;
    return ((e * n) & 7) + n >= 8;
}
// exp2 of a lane's element e: the polynomial for N of every 8 elements, MUFU.EX2 for the others (e is a
// constant once the map's loops unroll: no branch is left).
template <int N> __device__ __forceinline__ float exp2_emulated(int e, float x) {
    return emulated_element<N>(e) ? exp2_poly(x) : op_exp2{}(x);
}

// Reductions along rows (ROWS=true: one value per row) or columns of a register tile.
// Lanes sharing a row (ortho direction) differ in lane bits 0-1; lanes sharing a column
// of a col-layout tile (align direction) differ in bits 2-4.
template <bool ROWS, typename F, typename TV, int N, typename VL, typename TT, int H, int W, typename L>
__device__ __forceinline__ void reduce(rv<TV, N, VL>& dst, const rt<TT, H, W, L>& src, F f,
                                       const typename identity<rv<TV, N, VL>>::type* accum) {
    constexpr bool ortho = is_same<VL, ortho_l>::value;
    constexpr int outer = ROWS ? H : W, inner = ROWS ? W : H;
    #pragma unroll
    for (int o = 0; o < outer; o++)
    #pragma unroll
    for (int k = 0; k < rv<TV, N, VL>::per_chunk; k++) {
        float v;
        #pragma unroll
        for (int n = 0; n < inner; n++) {
            const int i = ROWS ? o : n, j = ROWS ? n : o;
            float part;
            if constexpr (ortho) {
                const float2 a = to_float2(src.data[i][j][k]), b = to_float2(src.data[i][j][k + 2]);
                part = f(f(a.x, a.y), f(b.x, b.y));
            } else {
                const float2 a = to_float2(src.data[i][j][2 * (k >> 1)]), b = to_float2(src.data[i][j][2 * (k >> 1) + 1]);
                part = (k & 1) ? f(a.y, b.y) : f(a.x, b.x);
            }
            v = n == 0 ? part : f(v, part);
        }
        if constexpr (ortho) {
            v = f(v, __shfl_xor_sync(0xffffffffu, v, 1));
            v = f(v, __shfl_xor_sync(0xffffffffu, v, 2));
        } else {
            v = f(v, __shfl_xor_sync(0xffffffffu, v, 4));
            v = f(v, __shfl_xor_sync(0xffffffffu, v, 8));
            v = f(v, __shfl_xor_sync(0xffffffffu, v, 16));
        }
        if (accum) v = f(v, to_float(accum->data[o][k]));
        dst.data[o][k] = from_float<TV>(v);
    }
}

// The values of a vector broadcast along rows (ROWS=true: one value per row) or columns of a tile that
// meet register k of the tile's base tile (i, j): the vector's chunk is the base tile's row (i) or column
// (j); an ortho vector holds the register's one row (column), an align vector its two columns (rows).
template <bool ROWS, typename TV, int N, typename VL>
__device__ __forceinline__ float2 broadcast_at(const rv<TV, N, VL>& vec, int i, int j, int k) {
    const int o = ROWS ? i : j;
    float2 v;
    if constexpr (is_same<VL, ortho_l>::value) { v.x = v.y = to_float(vec.data[o][k & 1]); }
    else { v.x = to_float(vec.data[o][2 * (k >> 1)]); v.y = to_float(vec.data[o][2 * (k >> 1) + 1]); }
    return v;
}

// True in every lane of the warp when some element of the vector, in any lane, is not exactly 1 (a vote):
// a warp-uniform test for skipping a multiplication by ones (mul_row / mul_col's skip_ones).
template <typename TV, int N, typename VL> __device__ __forceinline__ bool any_not_one(const rv<TV, N, VL>& vec) {
    bool mine = false;
    #pragma unroll
    for (int o = 0; o < N; o++)
    #pragma unroll
    for (int k = 0; k < rv<TV, N, VL>::per_chunk; k++) mine |= to_float(vec.data[o][k]) != 1.0f;
    return __any_sync(0xffffffffu, mine);
}

// Whether some element of this thread's part of the vector exceeds t (NaN exceeds nothing): each lane's own
// predicate, for a vote (named_any).
template <typename TV, int N, typename VL> __device__ __forceinline__ bool any_greater(const rv<TV, N, VL>& vec, float t) {
    bool mine = false;
    #pragma unroll
    for (int o = 0; o < N; o++)
    #pragma unroll
    for (int k = 0; k < rv<TV, N, VL>::per_chunk; k++) mine |= to_float(vec.data[o][k]) > t;
    return mine;
}

// dst = f(src, vec) with vec broadcast along rows (ROWS=true: one value per row) or columns.
template <bool ROWS, typename F, typename TD, typename TS, int H, int W, typename L, typename TV, int N, typename VL>
__device__ __forceinline__ void broadcast(rt<TD, H, W, L>& dst, const rt<TS, H, W, L>& src, const rv<TV, N, VL>& vec, F f) {
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++)
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(
            apply(f, to_float2(src.data[i][j][k]), broadcast_at<ROWS>(vec, i, j, k)));
}

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

// d = op(a) @ op(b) + c over base tiles (M x N of them, K deep). A transposed operand is stored as
// its transpose in the other layout, which holds the very same registers (a col-layout K x M tile
// is a row-layout M x K one), so TA / TB only swap which base tile is read.
template <bool TA, bool TB, typename T, int M, int N, int K, typename A, typename B>
__device__ __forceinline__ void mma(rt<float, M, N, row_l>& d, const A& a, const B& b, const rt<float, M, N, row_l>& c) {
    #pragma unroll
    for (int i = 0; i < M; i++)
    #pragma unroll
    for (int j = 0; j < N; j++) {
        float2 acc[4] = {c.data[i][j][0], c.data[i][j][1], c.data[i][j][2], c.data[i][j][3]};
        #pragma unroll
        for (int k = 0; k < K; k++) {
            const u32* ar = reinterpret_cast<const u32*>(&a.data[TA ? k : i][TA ? i : k][0]);
            const u32* br = reinterpret_cast<const u32*>(&b.data[TB ? j : k][TB ? k : j][0]);
            mma16816<T>(acc[0], acc[1], ar, br[0], br[2], acc[0], acc[1]);  // n 0..7
            mma16816<T>(acc[2], acc[3], ar, br[1], br[3], acc[2], acc[3]);  // n 8..15
        }
        #pragma unroll
        for (int k = 0; k < 4; k++) d.data[i][j][k] = acc[k];
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

// Named ops (tk::exp, tk::add, tk::row_max, tk::sub_row, ...).
template <typename D, typename S> __device__ __forceinline__ void exp(D& d, const S& s) { map(d, s, op_exp{}); }
template <typename D, typename S> __device__ __forceinline__ void exp2(D& d, const S& s) { map(d, s, op_exp2{}); }
template <typename D, typename S> __device__ __forceinline__ void log(D& d, const S& s) { map(d, s, op_log{}); }
template <typename D, typename S> __device__ __forceinline__ void log2(D& d, const S& s) { map(d, s, op_log2{}); }
template <typename D, typename S> __device__ __forceinline__ void abs(D& d, const S& s) { map(d, s, op_abs{}); }
template <typename D, typename S> __device__ __forceinline__ void relu(D& d, const S& s) { map(d, s, op_relu{}); }
template <typename D, typename S> __device__ __forceinline__ void neg(D& d, const S& s) { map(d, s, op_neg{}); }
template <typename D, typename S> __device__ __forceinline__ void copy(D& d, const S& s) { map(d, s, op_copy{}); }
template <typename D, typename A, typename B> __device__ __forceinline__ void add(D& d, const A& a, const B& b) { map(d, a, b, op_add{}); }
template <typename D, typename A, typename B> __device__ __forceinline__ void sub(D& d, const A& a, const B& b) { map(d, a, b, op_sub{}); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mul(D& d, const A& a, const B& b) { map(d, a, b, op_mul{}); }
template <typename D, typename A, typename B> __device__ __forceinline__ void div(D& d, const A& a, const B& b) { map(d, a, b, op_div{}); }
template <typename D, typename A, typename B> __device__ __forceinline__ void max(D& d, const A& a, const B& b) { map(d, a, b, op_max{}); }
template <typename D, typename A, typename B> __device__ __forceinline__ void min(D& d, const A& a, const B& b) { map(d, a, b, op_min{}); }
template <typename V, typename T> __device__ __forceinline__ void row_max(V& d, const T& s) { reduce<true>(d, s, op_max{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void row_max(V& d, const T& s, const V& accum) { reduce<true>(d, s, op_max{}, &accum); }
template <typename V, typename T> __device__ __forceinline__ void row_min(V& d, const T& s) { reduce<true>(d, s, op_min{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void row_min(V& d, const T& s, const V& accum) { reduce<true>(d, s, op_min{}, &accum); }
template <typename V, typename T> __device__ __forceinline__ void row_sum(V& d, const T& s) { reduce<true>(d, s, op_sum{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void row_sum(V& d, const T& s, const V& accum) { reduce<true>(d, s, op_sum{}, &accum); }
template <typename V, typename T> __device__ __forceinline__ void row_prod(V& d, const T& s) { reduce<true>(d, s, op_prod{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void row_prod(V& d, const T& s, const V& accum) { reduce<true>(d, s, op_prod{}, &accum); }
template <typename D, typename S, typename V> __device__ __forceinline__ void add_row(D& d, const S& s, const V& v) { broadcast<true>(d, s, v, op_add{}); }
template <typename D, typename S, typename V> __device__ __forceinline__ void sub_row(D& d, const S& s, const V& v) { broadcast<true>(d, s, v, op_sub{}); }
template <typename D, typename S, typename V> __device__ __forceinline__ void mul_row(D& d, const S& s, const V& v) { broadcast<true>(d, s, v, op_mul{}); }
template <typename D, typename S, typename V> __device__ __forceinline__ void div_row(D& d, const S& s, const V& v) { broadcast<true>(d, s, v, op_div{}); }
template <typename V, typename T> __device__ __forceinline__ void col_max(V& d, const T& s) { reduce<false>(d, s, op_max{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void col_max(V& d, const T& s, const V& accum) { reduce<false>(d, s, op_max{}, &accum); }
template <typename V, typename T> __device__ __forceinline__ void col_min(V& d, const T& s) { reduce<false>(d, s, op_min{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void col_min(V& d, const T& s, const V& accum) { reduce<false>(d, s, op_min{}, &accum); }
template <typename V, typename T> __device__ __forceinline__ void col_sum(V& d, const T& s) { reduce<false>(d, s, op_sum{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void col_sum(V& d, const T& s, const V& accum) { reduce<false>(d, s, op_sum{}, &accum); }
template <typename V, typename T> __device__ __forceinline__ void col_prod(V& d, const T& s) { reduce<false>(d, s, op_prod{}, nullptr); }
template <typename V, typename T> __device__ __forceinline__ void col_prod(V& d, const T& s, const V& accum) { reduce<false>(d, s, op_prod{}, &accum); }
template <typename D, typename S, typename V> __device__ __forceinline__ void add_col(D& d, const S& s, const V& v) { broadcast<false>(d, s, v, op_add{}); }
template <typename D, typename S, typename V> __device__ __forceinline__ void sub_col(D& d, const S& s, const V& v) { broadcast<false>(d, s, v, op_sub{}); }
template <typename D, typename S, typename V> __device__ __forceinline__ void mul_col(D& d, const S& s, const V& v) { broadcast<false>(d, s, v, op_mul{}); }
template <typename D, typename S, typename V> __device__ __forceinline__ void div_col(D& d, const S& s, const V& v) { broadcast<false>(d, s, v, op_div{}); }
}  // namespace tk

namespace tk {
// ---- Layout changes of register tiles ----
template <typename L> struct transpose_of;
template <> struct transpose_of<row_l> { typedef col_l type; };
template <> struct transpose_of<col_l> { typedef row_l type; };

// Transposes the 8x8 block that one register of a base tile spans across the warp: lane (g, t)
// ends up with what lane (2t, g/2) held. 16-bit pairs: movmatrix; fp32 pairs: two shuffles
// (tkpy/tiles/shuffles.py, TRANSPOSE8_*).
__device__ __forceinline__ u32 movmatrix_trans(u32 v) {
    u32 r;
    asm volatile("movmatrix.sync.aligned.m8n8.trans.b16 %0, %1;" : "=r"(r) : "r"(v));
    return r;
}
__device__ __forceinline__ bf16_2 transpose8(bf16_2 v) { return {movmatrix_trans(v.x)}; }
__device__ __forceinline__ fp16_2 transpose8(fp16_2 v) { return {movmatrix_trans(v.x)}; }
__device__ __forceinline__ float2 transpose8(float2 v) {
    const int lane = tk::lane(), odd = (lane >> 2) & 1;
    const float a = __shfl_sync(0xffffffffu, odd ? v.y : v.x, 8 * (lane & 3) + (lane >> 3) + 4 * ((lane >> 2) & 1));
    const float b = __shfl_sync(0xffffffffu, odd ? v.x : v.y, 8 * (lane & 3) + (lane >> 3) + 4 * (1 - ((lane >> 2) & 1)));
    return odd ? make_float2(b, a) : make_float2(a, b);
}

template <typename D2, typename S2> __device__ __forceinline__ D2 convert2(S2 v) {
    if constexpr (is_same<D2, S2>::value) return v;
    else return from_float2<D2>(to_float2(v));
}
// A base tile's registers transposed: each 8x8 block in place, blocks 1 and 2 trading places. The
// dtype changes before the shuffles when that narrows them, after otherwise. d may be s.
template <typename D2, typename S2> __device__ __forceinline__ void transpose_base(D2 (&d)[4], const S2 (&s)[4]) {
    if constexpr (sizeof(D2) <= sizeof(S2)) {
        const D2 s0 = convert2<D2>(s[0]), s1 = convert2<D2>(s[1]), s2 = convert2<D2>(s[2]), s3 = convert2<D2>(s[3]);
        d[0] = transpose8(s0); d[1] = transpose8(s2); d[2] = transpose8(s1); d[3] = transpose8(s3);
    } else {
        const S2 t0 = transpose8(s[0]), t1 = transpose8(s[2]), t2 = transpose8(s[1]), t3 = transpose8(s[3]);
        d[0] = convert2<D2>(t0); d[1] = convert2<D2>(t1); d[2] = convert2<D2>(t2); d[3] = convert2<D2>(t3);
    }
}

// dst = src held in the other layout (and dst's dtype): the same matrix, fragments transposed.
template <typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void swap_layout(rt<TD, H, W, typename transpose_of<L>::type>& dst, const rt<TS, H, W, L>& src) {
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++) transpose_base(dst.data[i][j], src.data[i][j]);
}
// dst = src^T in the same layout; dst may be src (a square tile).
template <typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void transpose(rt<TD, W, H, L>& dst, const rt<TS, H, W, L>& src) {
    const rt<TS, H, W, L> s = src;
    #pragma unroll
    for (int i = 0; i < W; i++)
    #pragma unroll
    for (int j = 0; j < H; j++) transpose_base(dst.data[i][j], s.data[j][i]);
}

// ---- Register vectors: lane indices, layout conversions, memory ----
// Index within its chunk (16 elements; 32 for naive) of lane `lane`'s value k (tkpy/tiles/layouts.py).
template <typename L> __device__ __forceinline__ int vec_idx(int lane, int k) {
    if constexpr (is_same<L, ortho_l>::value) return (lane >> 2) + 8 * k;
    else if constexpr (is_same<L, align_l>::value) return 2 * (lane & 3) + 8 * (k >> 1) + (k & 1);
    else return lane + 32 * k;
}
// Whether lane `lane` is the one copy, among the lanes holding the same values, that stores them.
template <typename L> __device__ __forceinline__ bool vec_owner(int lane) {
    if constexpr (is_same<L, ortho_l>::value) return (lane & 3) == 0;
    else if constexpr (is_same<L, align_l>::value) return (lane >> 2) == 0;
    else return lane < 32;
}

// Layout conversions, one shuffle per destination value (tkpy/tiles/shuffles.py, VECTOR_SHUFFLES).
template <typename LD, typename LS> struct vec_shuffle;
template <> struct vec_shuffle<align_l, ortho_l> {
    static constexpr int span = 1;
    __device__ static constexpr int src_lane(int lane, int c, int k) { return 4 * (2 * (lane & 3) + (k & 1)); }
    __device__ static constexpr int send_base(int c, int k) { return 2 * c + (k >> 1); }
    __device__ static constexpr int send_offset(int lane) { return 0; }
};
template <> struct vec_shuffle<ortho_l, align_l> {
    static constexpr int span = 2;
    __device__ static constexpr int src_lane(int lane, int c, int k) { return 4 * ((lane >> 2) & 1) + (lane >> 3); }
    __device__ static constexpr int send_base(int c, int k) { return 4 * c + 2 * k; }
    __device__ static constexpr int send_offset(int lane) { return (lane >> 2) & 1; }
};
template <> struct vec_shuffle<ortho_l, naive_l> {
    static constexpr int span = 1;
    __device__ static constexpr int src_lane(int lane, int c, int k) { return 16 * (c & 1) + 8 * k + (lane >> 2); }
    __device__ static constexpr int send_base(int c, int k) { return c >> 1; }
    __device__ static constexpr int send_offset(int lane) { return 0; }
};
template <> struct vec_shuffle<align_l, naive_l> {
    static constexpr int span = 1;
    __device__ static constexpr int src_lane(int lane, int c, int k) { return 16 * (c & 1) + 8 * (k >> 1) + 2 * (lane & 3) + (k & 1); }
    __device__ static constexpr int send_base(int c, int k) { return c >> 1; }
    __device__ static constexpr int send_offset(int lane) { return 0; }
};
template <> struct vec_shuffle<naive_l, ortho_l> {
    static constexpr int span = 4;
    __device__ static constexpr int src_lane(int lane, int c, int k) { return 4 * (lane & 7) + (lane >> 3); }
    __device__ static constexpr int send_base(int c, int k) { return 4 * c; }
    __device__ static constexpr int send_offset(int lane) { return lane & 3; }
};
template <> struct vec_shuffle<naive_l, align_l> {
    static constexpr int span = 8;
    __device__ static constexpr int src_lane(int lane, int c, int k) { return (lane & 24) + 4 * (lane & 1) + ((lane >> 1) & 3); }
    __device__ static constexpr int send_base(int c, int k) { return 8 * c; }
    __device__ static constexpr int send_offset(int lane) { return (lane >> 2) & 7; }
};
// dst = src, converting the dtype and, between layouts, moving values across lanes.
template <typename TD, int ND, typename LD, typename TS, int NS, typename LS>
__device__ __forceinline__ void copy(rv<TD, ND, LD>& dst, const rv<TS, NS, LS>& src) {
    if constexpr (is_same<LD, LS>::value) {
        map(dst, src, op_copy{});
    } else {
        typedef vec_shuffle<LD, LS> S;
        constexpr int P = rv<TS, NS, LS>::per_chunk;
        const int ln = lane(), offset = S::send_offset(ln);
        #pragma unroll
        for (int c = 0; c < ND; c++)
        #pragma unroll
        for (int k = 0; k < rv<TD, ND, LD>::per_chunk; k++) {
            float send = 0.0f;
            #pragma unroll
            for (int q = 0; q < S::span; q++) {   // selects, not a register-indexed load
                const int f = S::send_base(c, k) + q;
                if (q == offset) send = to_float(src.data[f / P][f % P]);
            }
            dst.data[c][k] = from_float<TD>(__shfl_sync(0xffffffffu, send, S::src_lane(ln, c, k)));
        }
    }
}

// Shared vector: N contiguous elements.
template <typename T, int N> struct sv {
    typedef T dtype;
    static constexpr int length = N, bytes = N * int(sizeof(T));
    unsigned char* base;
    __device__ __forceinline__ T* ptr(int i) const { return reinterpret_cast<T*>(base) + i; }
};

// rv <- memory at p: each lane reads its own values; with MASKED, indices from n on read as `fill`.
template <bool MASKED, typename TD, int N, typename L, typename TS>
__device__ __forceinline__ void load_vec(rv<TD, N, L>& dst, const TS* p, int n, float fill) {
    const int ln = lane();
    #pragma unroll
    for (int c = 0; c < N; c++)
    #pragma unroll
    for (int k = 0; k < rv<TD, N, L>::per_chunk; k++) {
        const int i = c * rv<TD, N, L>::chunk_len + vec_idx<L>(ln, k);
        dst.data[c][k] = from_float<TD>(!MASKED || i < n ? to_float(p[i]) : fill);
    }
}
// memory at p <- rv: one owner lane per value writes it; with MASKED, indices from n on are skipped.
template <bool MASKED, typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void store_vec(TD* p, const rv<TS, N, L>& src, int n) {
    const int ln = lane();
    if (!vec_owner<L>(ln)) return;
    #pragma unroll
    for (int c = 0; c < N; c++)
    #pragma unroll
    for (int k = 0; k < rv<TS, N, L>::per_chunk; k++) {
        const int i = c * rv<TS, N, L>::chunk_len + vec_idx<L>(ln, k);
        if (!MASKED || i < n) p[i] = from_float<TD>(to_float(src.data[c][k]));
    }
}
// rv <-> gl: the vector lies along row r from column c0; rv <-> sv.
template <typename TD, int N, typename L, typename TS>
__device__ __forceinline__ void load(rv<TD, N, L>& dst, const gl<TS>& src, int b, int d, int r, int c0) {
    load_vec<false>(dst, src.at(b, d, r, c0), 0, 0.0f);
}
template <typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void store(const gl<TD>& dst, const rv<TS, N, L>& src, int b, int d, int r, int c0) {
    store_vec<false>(dst.at(b, d, r, c0), src, 0);
}
template <typename TD, int N, typename L, typename TS, int LEN>
__device__ __forceinline__ void load(rv<TD, N, L>& dst, const sv<TS, LEN>& src) { load_vec<false>(dst, src.ptr(0), 0, 0.0f); }
template <typename TD, int LEN, typename TS, int N, typename L>
__device__ __forceinline__ void store(const sv<TD, LEN>& dst, const rv<TS, N, L>& src) { store_vec<false>(dst.ptr(0), src, 0); }

// sv <- gl and gl <- sv, by NT threads (thread `t` of them), in 16-byte chunks.
template <int NT, typename T, int N>
__device__ __forceinline__ void load(const sv<T, N>& dst, const gl<T>& src, int b, int d, int r, int c0, int t) {
    for_each_chunk<NT, T, 1, N>(t, [&](int, int c) {
        *reinterpret_cast<uint4*>(dst.ptr(c)) = *reinterpret_cast<const uint4*>(src.at(b, d, r, c0 + c));
    });
}
template <int NT, typename T, int N>
__device__ __forceinline__ void store(const gl<T>& dst, const sv<T, N>& src, int b, int d, int r, int c0, int t) {
    for_each_chunk<NT, T, 1, N>(t, [&](int, int c) {
        *reinterpret_cast<uint4*>(dst.at(b, d, r, c0 + c)) = *reinterpret_cast<const uint4*>(src.ptr(c));
    });
}

// ---- Subtiles ----
// Rows [idx * SR, (idx + 1) * SR) of a register tile, in place (ThunderKittens' subtile_inplace).
template <int SR, typename T, int H, int W, typename L>
__device__ __forceinline__ rt<T, SR / 16, W, L>& subtile_inplace(rt<T, H, W, L>& t, int idx) {
    return reinterpret_cast<rt<T, SR / 16, W, L>&>(t.data[idx * (SR / 16)]);
}
// The 16 x SC window at subtile coordinates (r, c): base tiles [c * SC / 16, (c + 1) * SC / 16) of base row
// r, consecutive in the register array.
template <int SR, int SC, typename T, int H, int W, typename L>
__device__ __forceinline__ rt<T, 1, SC / 16, L>& subtile_inplace(rt<T, H, W, L>& t, int r, int c) {
    static_assert(SR == 16, "a register window narrower than its tile is one 16-row band");
    return reinterpret_cast<rt<T, 1, SC / 16, L>&>(t.data[r][c * (SC / 16)]);
}
// The RS x CS window at subtile coordinates (r, c) of a shared tile. It keeps the address function of
// the tile it views (RS is a multiple of 16 and, when swizzled, CS of the panel width, so the base
// moves by whole swizzle atoms and panels and the XOR pattern is unchanged).
template <int RS, int CS, typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ st<T, RS, CS, SWZ, PR, PC> subtile(const st<T, R, C, SWZ, PR, PC>& s, int r, int c) {
    return {s.base + s.offset(r * RS, c * CS)};
}

// ---- Masks: dst = keep(row, col) ? src : val, by each element's position in the tile ----
template <typename F, typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void mask(rt<TD, H, W, L>& dst, const rt<TS, H, W, L>& src, F keep, float val) {
    const int ln = lane();
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        float2 v = to_float2(src.data[i][j][k]);
        int r, c;
        frag_pos<L>(ln, k, 0, r, c);
        if (!keep(16 * i + r, 16 * j + c)) v.x = val;
        frag_pos<L>(ln, k, 1, r, c);
        if (!keep(16 * i + r, 16 * j + c)) v.y = val;
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(v);
    }
}
// ThunderKittens' masks: keep on and below (tril) / above (triu) diagonal `diagonal`, left of column
// `col` (right_fill fills from it on), from `col` on (left_fill), above row `row` (lower_fill), from it on.
template <typename D, typename S> __device__ __forceinline__ void tril(D& d, const S& s, int diagonal, float val) {
    mask(d, s, [=](int r, int c) { return c <= r + diagonal; }, val);
}
// tril_periodic: rows stacking sequences of `period` rows, each masked by its own position (first_row >= 0).
template <typename D, typename S>
__device__ __forceinline__ void tril_periodic(D& d, const S& s, int first_row, int period, int diagonal, float val) {
    mask(d, s, [=](int r, int c) { return c <= (first_row + r) % period + diagonal; }, val);
}
template <typename D, typename S> __device__ __forceinline__ void triu(D& d, const S& s, int diagonal, float val) {
    mask(d, s, [=](int r, int c) { return c >= r + diagonal; }, val);
}
template <typename D, typename S> __device__ __forceinline__ void make_causal(D& d, const S& s, float val) {
    tril(d, s, 0, val);
}
template <typename D, typename S> __device__ __forceinline__ void make_causal_t(D& d, const S& s, float val) {
    triu(d, s, 0, val);
}
template <typename D, typename S> __device__ __forceinline__ void right_fill(D& d, const S& s, int col, float val) {
    mask(d, s, [=](int, int c) { return c < col; }, val);
}
template <typename D, typename S> __device__ __forceinline__ void left_fill(D& d, const S& s, int col, float val) {
    mask(d, s, [=](int, int c) { return c >= col; }, val);
}
template <typename D, typename S> __device__ __forceinline__ void lower_fill(D& d, const S& s, int row, float val) {
    mask(d, s, [=](int r, int) { return r < row; }, val);
}
template <typename D, typename S> __device__ __forceinline__ void upper_fill(D& d, const S& s, int row, float val) {
    mask(d, s, [=](int r, int) { return r >= row; }, val);
}

// ---- Generic maps (tk.map): dst = f(srcs...) elementwise, f a lambda on floats ----
// A vector operand of a tile map, broadcast along rows (per_row: one value per row, as sub_row) or columns.
template <bool ROWS, typename V> struct broadcast_vec { const V& v; };
template <typename V> __device__ __forceinline__ broadcast_vec<true, V> per_row(const V& v) { return {v}; }
template <typename V> __device__ __forceinline__ broadcast_vec<false, V> per_col(const V& v) { return {v}; }
// The pair of values an operand of a tile map gives register k of base tile (i, j).
template <typename T, int H, int W, typename L>
__device__ __forceinline__ float2 map_operand(const rt<T, H, W, L>& t, int i, int j, int k) { return to_float2(t.data[i][j][k]); }
template <bool ROWS, typename V>
__device__ __forceinline__ float2 map_operand(const broadcast_vec<ROWS, V>& b, int i, int j, int k) {
    return broadcast_at<ROWS>(b.v, i, j, k);
}
// Operands: tiles of dst's shape and layout, and per_row / per_col vectors (the tracer checks the shapes).
// map_indexed's function also takes the lane's own number of the element (tkpy/tiles/layouts.py), a
// constant once the loops unroll: per-element choices cost no branch.
template <typename F, typename TD, int H, int W, typename L, typename... S>
__device__ __forceinline__ auto map_indexed(rt<TD, H, W, L>& dst, F f, const S&... src)
    -> decltype((map_operand(src, 0, 0, 0), ..., void())) {
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int reg = 0; reg < 4; reg++) {
        const int width = W;
        const int half = 0;
        const int e = ((i * width + j) * 4 + reg) * 2 + half;
        dst.data[i][j][reg] = from_float2<typename rt<TD, H, W, L>::T2>(
            make_float2(f(e, map_operand(src, i, j, reg).x...), f(e + 1, map_operand(src, i, j, reg).y...)));
    }
}
template <typename F, typename TD, int N, typename L, typename... TS>
__device__ __forceinline__ void map_indexed(rv<TD, N, L>& dst, F f, const rv<TS, N, L>&... src) {
    constexpr int per_chunk = rv<TD, N, L>::per_chunk;
    #pragma unroll
    for (int c = 0; c < N; c++)
    #pragma unroll
    for (int k = 0; k < per_chunk; k++) dst.data[c][k] = from_float<TD>(f(c * per_chunk + k, to_float(src.data[c][k])...));
}
template <typename F> struct ignore_element {
    F f;
    template <typename... X> __device__ __forceinline__ float operator()(int, X... x) const { return f(x...); }
};
template <typename F, typename TD, int H, int W, typename L, typename... S>
__device__ __forceinline__ auto map(rt<TD, H, W, L>& dst, F f, const S&... src)
    -> decltype((map_operand(src, 0, 0, 0), ..., void())) {
    map_indexed(dst, ignore_element<F>{f}, src...);
}
template <typename F, typename TD, int N, typename L, typename... TS>
__device__ __forceinline__ void map(rv<TD, N, L>& dst, F f, const rv<TS, N, L>&... src) {
    map_indexed(dst, ignore_element<F>{f}, src...);
}

// Every row (broadcast_row: one value per row) or column of dst set from a vector.
struct op_second { __device__ __forceinline__ float operator()(float, float b) const { return b; } };
template <typename D, typename V> __device__ __forceinline__ void broadcast_row(D& d, const V& v) {
    broadcast<true>(d, d, v, op_second{});
}
template <typename D, typename V> __device__ __forceinline__ void broadcast_col(D& d, const V& v) {
    broadcast<false>(d, d, v, op_second{});
}

// ---- Bounds-checked copies for tiles at tensor edges ----
// How many of the n elements from (r, c) on lie inside the tensor (none past its last row).
template <typename T> __device__ __forceinline__ int in_bounds(const gl<T>& g, int r, int c, int n) {
    return r < g.rows ? ::max(0, ::min(n, g.cols - c)) : 0;
}

// rt <-> gl where the tile may cross the tensor's last row or column: outside elements load as `fill`
// and are not stored. Tiles wholly inside take the unchecked path (a warp-uniform branch).
template <typename TD, int H, int W, typename L, typename TS>
__device__ __forceinline__ void load_masked(rt<TD, H, W, L>& dst, const gl<TS>& src, int b, int d, int r0, int c0, float fill) {
    if (r0 + 16 * H <= src.rows && c0 + 16 * W <= src.cols) { load(dst, src, b, d, r0, c0); return; }
    const int ln = lane();
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        float v[2];
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            int r, c;
            frag_pos<L>(ln, k, h, r, c);
            r += r0 + 16 * i; c += c0 + 16 * j;
            v[h] = in_bounds(src, r, c, 1) ? to_float(*src.at(b, d, r, c)) : fill;
        }
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(make_float2(v[0], v[1]));
    }
}
template <typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store_masked(const gl<TD>& dst, const rt<TS, H, W, L>& src, int b, int d, int r0, int c0) {
    if (r0 + 16 * H <= dst.rows && c0 + 16 * W <= dst.cols) { store(dst, src, b, d, r0, c0); return; }
    const int ln = lane();
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        const float2 v = to_float2(src.data[i][j][k]);
        #pragma unroll
        for (int h = 0; h < 2; h++) {
            int r, c;
            frag_pos<L>(ln, k, h, r, c);
            r += r0 + 16 * i; c += c0 + 16 * j;
            if (in_bounds(dst, r, c, 1)) *dst.at(b, d, r, c) = from_float<TD>(h ? v.y : v.x);
        }
    }
}

// rv <-> gl along row r from column c0, up to the tensor's last column.
template <typename TD, int N, typename L, typename TS>
__device__ __forceinline__ void load_masked(rv<TD, N, L>& dst, const gl<TS>& src, int b, int d, int r, int c0, float fill) {
    load_vec<true>(dst, src.at(b, d, r, c0), in_bounds(src, r, c0, N * rv<TD, N, L>::chunk_len), fill);
}
template <typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void store_masked(const gl<TD>& dst, const rv<TS, N, L>& src, int b, int d, int r, int c0) {
    store_vec<true>(dst.at(b, d, r, c0), src, in_bounds(dst, r, c0, N * rv<TS, N, L>::chunk_len));
}

// One 16-byte chunk between shared memory and the tensor at (r, c), by elements where it crosses the edge.
template <typename T>
__device__ __forceinline__ void load_chunk_masked(T* s, const gl<T>& g, int b, int d, int r, int c, float fill) {
    constexpr int n = 16 / int(sizeof(T));
    const int valid = in_bounds(g, r, c, n);
    if (valid == n) { *reinterpret_cast<uint4*>(s) = *reinterpret_cast<const uint4*>(g.at(b, d, r, c)); return; }
    #pragma unroll
    for (int e = 0; e < n; e++) s[e] = e < valid ? g.at(b, d, r, c)[e] : from_float<T>(fill);
}
template <typename T>
__device__ __forceinline__ void store_chunk_masked(const gl<T>& g, const T* s, int b, int d, int r, int c) {
    constexpr int n = 16 / int(sizeof(T));
    const int valid = in_bounds(g, r, c, n);
    if (valid == n) { *reinterpret_cast<uint4*>(g.at(b, d, r, c)) = *reinterpret_cast<const uint4*>(s); return; }
    for (int e = 0; e < valid; e++) g.at(b, d, r, c)[e] = s[e];
}
// st <-> gl and sv <-> gl by NT threads, bounds-checked per chunk.
template <int NT, typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void load_masked(const st<T, R, C, SWZ, PR, PC>& dst, const gl<T>& src, int b, int d, int r0, int c0,
                                            float fill, int t) {
    for_each_chunk<NT, T, R, C>(t, [&](int r, int c) { load_chunk_masked(dst.ptr(r, c), src, b, d, r0 + r, c0 + c, fill); });
}
template <int NT, typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void store_masked(const gl<T>& dst, const st<T, R, C, SWZ, PR, PC>& src, int b, int d, int r0, int c0,
                                             int t) {
    for_each_chunk<NT, T, R, C>(t, [&](int r, int c) { store_chunk_masked(dst, src.ptr(r, c), b, d, r0 + r, c0 + c); });
}
template <int NT, typename T, int N>
__device__ __forceinline__ void load_masked(const sv<T, N>& dst, const gl<T>& src, int b, int d, int r, int c0, float fill,
                                            int t) {
    for_each_chunk<NT, T, 1, N>(t, [&](int, int c) { load_chunk_masked(dst.ptr(c), src, b, d, r, c0 + c, fill); });
}
template <int NT, typename T, int N>
__device__ __forceinline__ void store_masked(const gl<T>& dst, const sv<T, N>& src, int b, int d, int r, int c0, int t) {
    for_each_chunk<NT, T, 1, N>(t, [&](int, int c) { store_chunk_masked(dst, src.ptr(c), b, d, r, c0 + c); });
}

// ---- cp.async: st <- gl without passing through registers ----
// One 16-byte chunk of which the first `src_bytes` come from global memory, the rest are zero.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
// Thread t of NT issues its chunks of the tile and commits them as one group (MASKED: zero past the edges).
template <bool MASKED, int NT, typename T, int R, int C, int SWZ, int PR, int PC>
__device__ __forceinline__ void load_async(const st<T, R, C, SWZ, PR, PC>& dst, const gl<T>& src, int b, int d, int r0, int c0,
                                           int t) {
    for_each_chunk<NT, T, R, C>(t, [&](int r, int c) {
        const u32 bytes = MASKED ? in_bounds(src, r0 + r, c0 + c, 16 / int(sizeof(T))) * u32(sizeof(T)) : 16;
        cp_async16(dst.addr(r, c), bytes ? src.at(b, d, r0 + r, c0 + c) : src.ptr, bytes);
    });
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Wait until at most N of this thread's load_async groups are still in flight.
template <int N> __device__ __forceinline__ void load_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}
}  // namespace tk

namespace tk {
// Programmatic dependent launch (PTX griddepcontrol; tkpy/runtime/dependent_launch.py). Launched with the
// driver's programmatic-stream-serialization attribute, a kernel may start before the previous kernel on
// its stream has finished: launch_dependents lets the next kernel's blocks start as this kernel's finish,
// wait_for_previous_kernel blocks until the previous kernel has completed and its memory operations are
// visible. Without the attribute both do nothing.
__device__ __forceinline__ void launch_dependents() { asm volatile("griddepcontrol.launch_dependents;" ::: "memory"); }
__device__ __forceinline__ void wait_for_previous_kernel() { asm volatile("griddepcontrol.wait;" ::: "memory"); }

// The driver's 128-byte tensor map (no cuda.h under NVRTC); passed as a __grid_constant__ parameter.
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

// mbarrier semaphores: 8 bytes of shared memory each.
struct semaphore { u64 state; };
__device__ __forceinline__ void init_semaphore(semaphore* sem, u32 arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(sem)), "r"(arrivals) : "memory");
}
__device__ __forceinline__ void arrive(semaphore* sem, u32 count) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(sem)), "r"(count) : "memory");
}
// One arrival that also announces `bytes` of async-copy transactions still to come.
__device__ __forceinline__ void expect_bytes(semaphore* sem, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 _, [%0], %1;"
                 :: "r"(smem_addr(sem)), "r"(bytes) : "memory");
}
// Block until the phase with parity `phase` of the semaphore has completed.
__device__ __forceinline__ void wait(semaphore* sem, int phase) {
    const u32 bar = smem_addr(sem);
    asm volatile(
        "{\n"
        ".reg .pred done;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 done, [%0], %1;\n"
        "@!done bra WAIT_%=;\n"
        "}\n" :: "r"(bar), "r"(phase) : "memory");
}
// Order this thread's generic-proxy shared-memory writes before later async-proxy (TMA, wgmma) reads.
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }
__device__ __forceinline__ void fence_semaphore_init() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }
// Named barrier `id` (1..15; 0 is __syncthreads) over `threads` threads.
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
// Arrive on named barrier `id` over `threads` threads without waiting for it.
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory");
}
// Named barrier `id` over `threads` threads that also ORs a predicate (bar.red.or): true in every one of them
// when `mine` is true in any.
__device__ __forceinline__ bool named_any(bool mine, int id, int threads) {
    u32 any;
    asm volatile("{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}"
                 : "=r"(any) : "r"((u32)mine), "r"(id), "r"(threads) : "memory");
    return any != 0;
}
// This thread's memory writes ordered before its later ones for the whole GPU (__threadfence).
__device__ __forceinline__ void threadfence() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }
// Atomic add to a global int by lane 0 of the calling warp (acquire-release at GPU scope); every lane gets the
// value before the add.
__device__ __forceinline__ int warp_atomic_add(int* p, int v) {
    int old = 0;
    if (threadIdx.x % 32 == 0)
        asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
    return __shfl_sync(0xffffffffu, old, 0);
}
// Clusters: this block's rank, a cluster-wide barrier, and arrivals on another block's semaphore.
__device__ __forceinline__ int cluster_rank() { u32 r; asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r)); return r; }
__device__ __forceinline__ void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}
__device__ __forceinline__ void arrive_remote(semaphore* sem, int cta, u32 count) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(sem)), "r"(cta));
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0], %1;" :: "r"(remote), "r"(count) : "memory");
}
// The same with a CTA-scope release, as CUTLASS and ThunderKittens hand back consumed stages: the cluster-scope
// release above compiles to a GPU-wide memory barrier (MEMBAR.ALL.GPU) before the arrival.
__device__ __forceinline__ void arrive_remote_cta(semaphore* sem, int cta, u32 count) {
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_addr(sem)), "r"(cta));
    asm volatile("mbarrier.arrive.release.cta.shared::cluster.b64 _, [%0], %1;" :: "r"(remote), "r"(count) : "memory");
}
template <int N> __device__ __forceinline__ void increase_registers() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(N)); }
template <int N> __device__ __forceinline__ void decrease_registers() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(N)); }

// TMA: one cp.async.bulk.tensor per swizzle panel of the shared tile (a box is one panel wide).
// Coordinates are elements, innermost first; the tensor map is 4-d (cols, rows, depth, batch).
namespace tma {
template <typename T, int R, int C, int SWZ>
__device__ __forceinline__ void load_async(const st<T, R, C, SWZ>& dst, const CUtensorMap* map,
                                           int b, int d, int r, int c, semaphore* sem) {
    const u32 bar = smem_addr(sem);
    constexpr int panels = C / st<T, R, C, SWZ>::panel_cols;
    #pragma unroll
    for (int p = 0; p < panels; p++)
        asm volatile(
            "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
            " [%0], [%1, {%2, %3, %4, %5}], [%6];"
            :: "r"(smem_addr(dst.base) + p * R * st<T, R, C, SWZ>::panel_cols * u32(sizeof(T))),
               "l"(map), "r"(c + p * st<T, R, C, SWZ>::panel_cols), "r"(r), "r"(d), "r"(b), "r"(bar)
            : "memory");
}
// The same tile lands at the same shared offset, and completes on the same semaphore, in every
// block of the cluster named in the 16-bit `mask`.
template <typename T, int R, int C, int SWZ>
__device__ __forceinline__ void load_async_multicast(const st<T, R, C, SWZ>& dst, const CUtensorMap* map,
                                                     int b, int d, int r, int c, semaphore* sem, unsigned short mask) {
    const u32 bar = smem_addr(sem);
    constexpr int panels = C / st<T, R, C, SWZ>::panel_cols;
    #pragma unroll
    for (int p = 0; p < panels; p++)
        asm volatile(
            "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
            " [%0], [%1, {%2, %3, %4, %5}], [%6], %7;"
            :: "r"(smem_addr(dst.base) + p * R * st<T, R, C, SWZ>::panel_cols * u32(sizeof(T))),
               "l"(map), "r"(c + p * st<T, R, C, SWZ>::panel_cols), "r"(r), "r"(d), "r"(b), "r"(bar), "h"(mask)
            : "memory");
}
template <bool ADD, typename T, int R, int C, int SWZ>
__device__ __forceinline__ void store_async(const CUtensorMap* map, const st<T, R, C, SWZ>& src,
                                            int b, int d, int r, int c) {
    constexpr int panels = C / st<T, R, C, SWZ>::panel_cols;
    #pragma unroll
    for (int p = 0; p < panels; p++) {
        const u32 s = smem_addr(src.base) + p * R * st<T, R, C, SWZ>::panel_cols * u32(sizeof(T));
        const int cc = c + p * st<T, R, C, SWZ>::panel_cols;
        if constexpr (ADD)
            asm volatile("cp.reduce.async.bulk.tensor.4d.global.shared::cta.add.tile.bulk_group"
                         " [%0, {%2, %3, %4, %5}], [%1];" :: "l"(map), "r"(s), "r"(cc), "r"(r), "r"(d), "r"(b) : "memory");
        else
            asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group"
                         " [%0, {%2, %3, %4, %5}], [%1];" :: "l"(map), "r"(s), "r"(cc), "r"(r), "r"(d), "r"(b) : "memory");
    }
}
template <typename T, int R, int C, int SWZ>
__device__ __forceinline__ void prefetch(const st<T, R, C, SWZ>&, const CUtensorMap* map, int b, int d, int r, int c) {
    constexpr int panels = C / st<T, R, C, SWZ>::panel_cols;
    #pragma unroll
    for (int p = 0; p < panels; p++)
        asm volatile("cp.async.bulk.prefetch.tensor.4d.L2.global.tile [%0, {%1, %2, %3, %4}];"
                     :: "l"(map), "r"(c + p * st<T, R, C, SWZ>::panel_cols), "r"(r), "r"(d), "r"(b) : "memory");
}
// Fetch a tensor map's descriptor into the cache ahead of the first copy that uses it.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<unsigned long long>(map)) : "memory");
}
__device__ __forceinline__ void store_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N committed store groups are still reading their shared-memory source.
template <int N> __device__ __forceinline__ void store_async_read_wait() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}
// Wait until at most N committed store groups are incomplete (their writes visible).
template <int N> __device__ __forceinline__ void store_async_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}
}  // namespace tma

// wgmma shared-memory matrix descriptors (PTX ISA "Matrix Descriptor Format"): start address,
// leading- and stride-dimension byte offsets (all >> 4) and the swizzle mode in bits 62-63.
// A tile is MN-major when its rows run along K (B of mma_AB, A of mma_AtB), K-major otherwise.
__device__ __forceinline__ constexpr u64 desc_encode(u64 x) { return (x & 0x3FFFF) >> 4; }
// Step k16 is the k16-th instruction along K: 16 K rows of an MN-major tile, or 32 bytes of each row of a
// K-major one (16 bf16/fp16 or 32 fp8 elements). tkpy/tiles/wgmma.py models these and the layouts they read.
// The tile's descriptor is built once (the same for every step: the compiler keeps it) and each step adds
// its byte offset >> 4 to the low word: shared addresses stay below 2^18, so the 14-bit start field cannot
// carry into the next one, and a step costs one 32-bit add instead of re-encoding an address. The two words
// are joined by mov.b64: written as 64-bit arithmetic, the compiler proved the add cannot wrap and widened
// it to a 64-bit add with carry, three uniform instructions before every wgmma instead of one.
template <typename S, bool MN_MAJOR>
__device__ __forceinline__ u64 descriptor(const S& s, int k16) {
    constexpr u32 swz = S::swizzle, mode = swz == 128 ? 1 : swz == 64 ? 2 : 3;
    constexpr u32 panel_bytes = u32(S::panel_rows) * swz;   // a window's panels are its root tile's
    constexpr u32 leading = MN_MAJOR ? panel_bytes : 16;   // K-major: unused by swizzled layouts
    constexpr u32 high = u32(desc_encode(8 * swz)) | mode << 30;                      // stride, swizzle mode
    const u32 low = u32(desc_encode(smem_addr(s.base))) | u32(desc_encode(leading)) << 16;   // start, leading
    const u32 offset = MN_MAJOR ? u32(k16) * 16 * swz                                  // 16 more rows of K
                                : (k16 % (swz / 32)) * 32 + (k16 / (swz / 32)) * panel_bytes;  // 32 bytes of K
    u64 desc;
    asm("mov.b64 %0, {%1, %2};" : "=l"(desc) : "r"(low + (offset >> 4)), "r"(high));
    return desc;
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit_group() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory"); }
// Keep the compiler from moving accesses of accumulator registers across a wgmma wait.
template <typename T, int H, int W, typename L> __device__ __forceinline__ void register_fence(rt<T, H, W, L>& t) {
    #pragma unroll
    for (int i = 0; i < H; i++)
    #pragma unroll
    for (int j = 0; j < W; j++)
    #pragma unroll
    for (int k = 0; k < 4; k++) {
        if constexpr (is_same<T, float>::value) asm volatile("" : "+f"(t.data[i][j][k].x), "+f"(t.data[i][j][k].y) :: "memory");
        else asm volatile("" : "+r"(t.data[i][j][k].x) :: "memory");
    }
}
}  // namespace tk

namespace tk {
// wgmma m64nNk16 with fp32 accumulators, as used by this kernel
template <int TRANS_A, int TRANS_B>
__device__ __forceinline__ void wgmma_m64n64k16_ss_bf16(rt<float, 1, 4, row_l>& d, u64 a_desc, u64 b_desc, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, %35, %36;\n}\n"
        : "+f"(d.data[0][0][0].x), "+f"(d.data[0][0][0].y), "+f"(d.data[0][0][1].x), "+f"(d.data[0][0][1].y), "+f"(d.data[0][0][2].x), "+f"(d.data[0][0][2].y), "+f"(d.data[0][0][3].x), "+f"(d.data[0][0][3].y), "+f"(d.data[0][1][0].x), "+f"(d.data[0][1][0].y), "+f"(d.data[0][1][1].x), "+f"(d.data[0][1][1].y), "+f"(d.data[0][1][2].x), "+f"(d.data[0][1][2].y), "+f"(d.data[0][1][3].x), "+f"(d.data[0][1][3].y), "+f"(d.data[0][2][0].x), "+f"(d.data[0][2][0].y), "+f"(d.data[0][2][1].x), "+f"(d.data[0][2][1].y), "+f"(d.data[0][2][2].x), "+f"(d.data[0][2][2].y), "+f"(d.data[0][2][3].x), "+f"(d.data[0][2][3].y), "+f"(d.data[0][3][0].x), "+f"(d.data[0][3][0].y), "+f"(d.data[0][3][1].x), "+f"(d.data[0][3][1].y), "+f"(d.data[0][3][2].x), "+f"(d.data[0][3][2].y), "+f"(d.data[0][3][3].x), "+f"(d.data[0][3][3].y)
        : "l"(a_desc), "l"(b_desc), "r"(scale_d), "n"(TRANS_A), "n"(TRANS_B));
}

namespace warpgroup {
template <int TRANS_A, int TRANS_B, int RA, int CA, int SA, int PRA, int PCA, int RB, int CB, int SB, int PRB, int PCB>
__device__ __forceinline__ void mma(rt<float, 1, 4, row_l>& d, const st<bf16, RA, CA, SA, PRA, PCA>& a,
                                    const st<bf16, RB, CB, SB, PRB, PCB>& b, bool accumulate) {
    constexpr int k16s = (TRANS_A ? RA : CA) / 16;
    wgmma_fence();
    #pragma unroll
    for (int k = 0; k < k16s; k++)
        wgmma_m64n64k16_ss_bf16<TRANS_A, TRANS_B>(d, descriptor<st<bf16, RA, CA, SA, PRA, PCA>, TRANS_A>(a, k),
            descriptor<st<bf16, RB, CB, SB, PRB, PCB>, TRANS_B>(b, k), accumulate || k > 0);
    wgmma_commit_group();
}
}  // namespace warpgroup
namespace warpgroup {
template <typename D, typename A, typename B> __device__ __forceinline__ void mma_AB(D& d, const A& a, const B& b) { mma<0, 1>(d, a, b, true); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mm_AB(D& d, const A& a, const B& b) { mma<0, 1>(d, a, b, false); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mma_ABt(D& d, const A& a, const B& b) { mma<0, 0>(d, a, b, true); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mm_ABt(D& d, const A& a, const B& b) { mma<0, 0>(d, a, b, false); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mma_AtB(D& d, const A& a, const B& b) { mma<1, 1>(d, a, b, true); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mm_AtB(D& d, const A& a, const B& b) { mma<1, 1>(d, a, b, false); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mma_AtBt(D& d, const A& a, const B& b) { mma<1, 0>(d, a, b, true); }
template <typename D, typename A, typename B> __device__ __forceinline__ void mm_AtBt(D& d, const A& a, const B& b) { mma<1, 0>(d, a, b, false); }
}  // namespace warpgroup
}  // namespace tk

// ---- end of prelude ----

// kernel golden_ws, traced from debug_golden_kernels.py:34: 8 warps
extern "C" __global__ void __launch_bounds__(256)
golden_ws(
    tk::bf16* __restrict__ a_ptr,
    tk::bf16* __restrict__ b_ptr,
    float* __restrict__ c_ptr,
    int K,
    const __grid_constant__ tk::CUtensorMap a_tma_64x64_sw128,
    const __grid_constant__ tk::CUtensorMap b_tma_64x64_sw128)
{
    const int warpid = __shfl_sync(0xffffffffu, threadIdx.x / 32, 0);  // warp-uniform
    const int laneid = threadIdx.x % 32;
    extern __shared__ __align__(16) unsigned char tk_dynamic_smem[];
    unsigned char* const smem = tk::align_up(tk_dynamic_smem, 1024);  // swizzled tiles need 1024-byte alignment
    if (threadIdx.x == 0) {  // the tensor maps' descriptors, fetched ahead of their first use
        tk::tma::prefetch_map(&a_tma_64x64_sw128);
        tk::tma::prefetch_map(&b_tma_64x64_sw128);
    }
    tk::launch_dependents();  // the next kernel on the stream may start its blocks as ours finish
    tk::wait_for_previous_kernel();  // global memory only once the previous kernel's writes show
    const tk::gl<tk::bf16> a{a_ptr, 1, 1, 64, K, (long long)64 * K, (long long)64 * K, K};  // gl<bf16, 64, K>
    const tk::gl<tk::bf16> b{b_ptr, 1, 1, K, 64, (long long)K * 64, (long long)K * 64, 64};  // gl<bf16, K, 64>
    const tk::gl<float> c{c_ptr, 1, 1, 64, 64, 4096, 4096, 64};  // gl<f32, 64, 64>
    // debug_golden_kernels.py:36  sa, sb = tk.st(bf16, 64, 64, count=2), tk.st(bf16, 64, 64, count=2)
    const tk::st_array<tk::st<tk::bf16, 64, 64, 128>, 2> sa{smem + 0};
    const tk::st_array<tk::st<tk::bf16, 64, 64, 128>, 2> sb{smem + 16384};
    // debug_golden_kernels.py:37  full, empty = tk.semaphore(2), tk.semaphore(2)
    tk::semaphore* const full = reinterpret_cast<tk::semaphore*>(smem + 32768);
    tk::semaphore* const empty = reinterpret_cast<tk::semaphore*>(smem + 32784);
    // debug_golden_kernels.py:38  acc = tk.rt(f32, 16, 64)
    tk::rt<float, 1, 4, tk::row_l> acc;
    // debug_golden_kernels.py:39  with tk.if_(tk.warp_id() == 0):
    if (warpid == 0) {
        // debug_golden_kernels.py:41  tk.init_semaphore(full[i], 1)
        if (laneid == 0) tk::init_semaphore(&full[0], 1);
        // debug_golden_kernels.py:42  tk.init_semaphore(empty[i], 4)
        if (laneid == 0) tk::init_semaphore(&empty[0], 4);
        // debug_golden_kernels.py:41  tk.init_semaphore(full[i], 1)
        if (laneid == 0) tk::init_semaphore(&full[1], 1);
        // debug_golden_kernels.py:42  tk.init_semaphore(empty[i], 4)
        if (laneid == 0) tk::init_semaphore(&empty[1], 4);
    }
    // debug_golden_kernels.py:43  tk.sync()
    __syncthreads();
    // debug_golden_kernels.py:44  with tk.if_(tk.warp_id() == 4):
    if (warpid == 4) {
        // debug_golden_kernels.py:45  for kk in tk.range(a.cols // 64):
        for (int i0 = 0; i0 < K / 64; i0 += 1) {
            // debug_golden_kernels.py:46  stage = tk.let(kk % 2, "stage")
            const int stage = i0 % 2;
            // debug_golden_kernels.py:47  with tk.if_(kk >= 2):
            if (i0 >= 2) {
                // debug_golden_kernels.py:48  tk.wait(empty[stage], (kk // 2 - 1) % 2)
                tk::wait(&empty[stage], (i0 / 2 - 1) % 2);
            }
            // debug_golden_kernels.py:49  tk.tma.expect(full[stage], sa[stage], sb[stage])
            if (laneid == 0) tk::expect_bytes(&full[stage], 16384);
            // debug_golden_kernels.py:50  tk.tma.load_async(sa[stage], a, (0, kk), full[stage])
            if (laneid == 0) tk::tma::load_async(sa[stage], &a_tma_64x64_sw128, 0, 0, 0, i0 * 64, &full[stage]);
            // debug_golden_kernels.py:51  tk.tma.load_async(sb[stage], b, (kk, 0), full[stage])
            if (laneid == 0) tk::tma::load_async(sb[stage], &b_tma_64x64_sw128, 0, 0, i0 * 64, 0, &full[stage]);
        }
    }
    // debug_golden_kernels.py:52  with tk.if_(tk.warp_id() < 4):
    if (warpid < 4) {
        // debug_golden_kernels.py:53  tk.zero(acc)
        tk::fill(acc, 0.0f);
        // debug_golden_kernels.py:54  for kk in tk.range(a.cols // 64):
        for (int kk = 0; kk < K / 64; kk += 1) {
            // debug_golden_kernels.py:55  stage = tk.let(kk % 2, "stage")
            const int stage_1 = kk % 2;
            // debug_golden_kernels.py:56  tk.wait(full[stage], (kk // 2) % 2)
            tk::wait(&full[stage_1], kk / 2 % 2);
            // debug_golden_kernels.py:57  tk.warpgroup.mma_AB(acc, sa[stage], sb[stage])
            tk::warpgroup::mma_AB(acc, sa[stage_1], sb[stage_1]);
            // debug_golden_kernels.py:58  tk.warpgroup.mma_async_wait()
            tk::wgmma_wait<0>();
            tk::register_fence(acc);
            // debug_golden_kernels.py:59  tk.arrive(empty[stage])
            __syncwarp();
            if (laneid == 0) tk::arrive(&empty[stage_1], 1);
        }
        // debug_golden_kernels.py:60  tk.named_sync(1, 4)
        tk::named_sync(1, 128);
        // debug_golden_kernels.py:61  tk.named_arrive(2, 4)
        tk::named_arrive(2, 128);
        // debug_golden_kernels.py:62  seen = tk.warpgroup.any(tk.warp_id() == 0, 3)
        bool seen = false;
        seen = tk::named_any(warpid == 0, 3, 128);
        // debug_golden_kernels.py:63  with tk.if_(seen):
        if (seen) {
            // debug_golden_kernels.py:64  tk.warpgroup.store(c, acc, (0, 0))
            tk::store(c, acc, 0, 0, warpid % 4 * 16, 0);
        }
    }
}
