"""Prelude sections completing the warp-level vocabulary: layout swaps and transposes, vector layout
conversions, subtiles, shared vectors, masks, generic maps, bounds-checked and asynchronous copies.

The shuffle maps come from tkpy.tiles.shuffles and the fragment maps from tkpy.tiles.layouts, so
the generated code and the CPU tests read one definition.
"""
from __future__ import annotations

from ...tiles import shuffles
from .helpers import helpers
from .warp import _substitute

_LAYOUT = r"""
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
    const int lane = tk::lane(), odd = TRANSPOSE8_ODD;
    const float a = __shfl_sync(0xffffffffu, odd ? v.y : v.x, TRANSPOSE8_LANE_A);
    const float b = __shfl_sync(0xffffffffu, odd ? v.x : v.y, TRANSPOSE8_LANE_B);
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
    _Pragma("unroll") for (int i = 0; i < H; i++)
    _Pragma("unroll") for (int j = 0; j < W; j++) transpose_base(dst.data[i][j], src.data[i][j]);
}

// dst = src^T in the same layout; dst may be src (a square tile).
template <typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void transpose(rt<TD, W, H, L>& dst, const rt<TS, H, W, L>& src) {
    const rt<TS, H, W, L> s = src;
    _Pragma("unroll") for (int i = 0; i < W; i++)
    _Pragma("unroll") for (int j = 0; j < H; j++) transpose_base(dst.data[i][j], s.data[j][i]);
}
"""

_VECTORS = r"""
// ---- Register vectors: lane indices, layout conversions, memory ----

// Index within its chunk (16 elements; 32 for naive, 256 for contig) of lane `lane`'s value k (tkpy/tiles/layouts.py),
// and whether lane `lane` is the one copy, among the lanes holding the same values, that stores them.
template <typename L> __device__ __forceinline__ int vec_idx(int lane, int k);
template <typename L> __device__ __forceinline__ bool vec_owner(int lane);
template <> __device__ __forceinline__ int vec_idx<ortho_l>(int lane, int k) { return ORTHO_INDEX; }
template <> __device__ __forceinline__ bool vec_owner<ortho_l>(int lane) { return VECTOR_OWNER_ORTHO; }
template <> __device__ __forceinline__ int vec_idx<align_l>(int lane, int k) { return ALIGN_INDEX; }
template <> __device__ __forceinline__ bool vec_owner<align_l>(int lane) { return VECTOR_OWNER_ALIGN; }
template <> __device__ __forceinline__ int vec_idx<naive_l>(int lane, int k) { return NAIVE_INDEX; }
template <> __device__ __forceinline__ bool vec_owner<naive_l>(int lane) { return VECTOR_OWNER_NAIVE; }
template <> __device__ __forceinline__ int vec_idx<contig_l>(int lane, int k) { return CONTIG_INDEX; }
template <> __device__ __forceinline__ bool vec_owner<contig_l>(int lane) { return VECTOR_OWNER_CONTIG; }

// Layout conversions, one shuffle per destination value (tkpy/tiles/shuffles.py, VECTOR_SHUFFLES).
template <typename LD, typename LS> struct vec_shuffle;
VECTOR_SHUFFLE_SPECIALIZATIONS
// dst = src, converting the dtype and, between layouts, moving values across lanes.
template <typename TD, int ND, typename LD, typename TS, int NS, typename LS>
__device__ __forceinline__ void copy(rv<TD, ND, LD>& dst, const rv<TS, NS, LS>& src) {
    if constexpr (is_same<LD, LS>::value) {
        unary_map(dst, src, op_copy{});
    } else {
        typedef vec_shuffle<LD, LS> S;
        constexpr int P = rv<TS, NS, LS>::per_chunk;
        const int ln = lane(), offset = S::send_offset(ln);
        _Pragma("unroll") for (int c = 0; c < ND; c++)
        _Pragma("unroll") for (int k = 0; k < rv<TD, ND, LD>::per_chunk; k++) {
            float send = 0.0f;
            _Pragma("unroll") for (int q = 0; q < S::span; q++) {   // selects, not a register-indexed load
                const int f = S::send_base(c, k) + q;
                if (q == offset) send = src.get(f / P, f % P);
            }
            dst.set(c, k, __shfl_sync(0xffffffffu, send, S::src_lane(ln, c, k)));
        }
    }
}

// Shared vector: N contiguous elements.
template <typename T, int N> struct sv {
    static constexpr int bytes = N * int(sizeof(T));
    unsigned char* base;
    __device__ __forceinline__ T* ptr(int i) const { return reinterpret_cast<T*>(base) + i; }
};

// Eight consecutive elements at p (16-byte aligned) as floats, and back: one 16-byte access of 16-bit elements, two
// of fp32 (a contig vector's chunk). SPACE 1: global (loads as C++ reads, the read-only path where it can; stores by
// st.global.v4, which ptxas would split in four); 2: shared (ld/st.shared.v4 at the shared address, not generic).
__device__ __forceinline__ void ld16(u32 (&w)[4], const void* p, int space) {
    if (space == 2) {
        asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3])
                     : "r"(smem_addr(p)));
    } else {
        const uint4 u = *reinterpret_cast<const uint4*>(p);
        w[0] = u.x; w[1] = u.y; w[2] = u.z; w[3] = u.w;
    }
}
__device__ __forceinline__ void st16(void* p, const u32 (&w)[4], int space) {
    if (space == 2) {
        asm volatile("st.shared.v4.b32 [%0], {%1, %2, %3, %4};" :: "r"(smem_addr(p)), "r"(w[0]), "r"(w[1]), "r"(w[2]),
                     "r"(w[3]) : "memory");
    } else {
        asm volatile("st.global.v4.b32 [%0], {%1, %2, %3, %4};" :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3])
                     : "memory");
    }
}
template <typename T> __device__ __forceinline__ void load8(float (&v)[8], const T* p, int space) {
    u32 w[4];
    ld16(w, p, space);
    if constexpr (sizeof(T) == 2) {
        typedef typename packed_of<T>::type T2;
        _Pragma("unroll") for (int q = 0; q < 4; q++) {
            const float2 f = to_float2(T2{w[q]}); v[2 * q] = f.x; v[2 * q + 1] = f.y; }
    } else {
        u32 w2[4];
        ld16(w2, p + 4, space);
        _Pragma("unroll") for (int q = 0; q < 4; q++) {
            v[q] = __uint_as_float(w[q]); v[4 + q] = __uint_as_float(w2[q]); }
    }
}
template <typename T> __device__ __forceinline__ void store8(T* p, const float (&v)[8], int space) {
    u32 w[4];
    if constexpr (sizeof(T) == 2) {
        typedef typename packed_of<T>::type T2;
        _Pragma("unroll") for (int q = 0; q < 4; q++) w[q] = from_float2<T2>(make_float2(v[2 * q], v[2 * q + 1])).x;
        st16(p, w, space);
    } else {
        u32 w2[4];
        _Pragma("unroll") for (int q = 0; q < 4; q++) {
            w[q] = __float_as_uint(v[q]); w2[q] = __float_as_uint(v[4 + q]); }
        st16(p, w, space);
        st16(p + 4, w2, space);
    }
}

// rv <- memory at p: each lane reads its own values; with MASKED, indices from n on read as `fill`.
template <bool MASKED, typename TD, int N, typename L, typename TS>
__device__ __forceinline__ void load_vec(rv<TD, N, L>& dst, const TS* p, int n, float fill, int space = 1) {
    const int ln = lane();
    _Pragma("unroll") for (int c = 0; c < N; c++) {
        _Pragma("unroll") for (int k = 0; k < rv<TD, N, L>::per_chunk; k++) {
            const int i = c * rv<TD, N, L>::chunk_len + vec_idx<L>(ln, k);
            dst.set(c, k, !MASKED || i < n ? to_float(p[i]) : fill);
        }
    }
}
// A contig vector reads its lane's 8 values of a chunk in one 16-byte access (two for fp32), element by element
// only where they cross n.
template <bool MASKED, typename TD, int N, typename TS>
__device__ __forceinline__ void load_vec(rv<TD, N, contig_l>& dst, const TS* p, int n, float fill, int space = 1) {
    const int ln = lane();
    _Pragma("unroll") for (int c = 0; c < N; c++) {
        const int i = c * 256 + 8 * ln;
        if constexpr (rv<TD, N, contig_l>::packed && is_same<TD, TS>::value) {   // the 16 bytes as they are
            if (!MASKED || i + 8 <= n) {
                u32 w[4];
                ld16(w, p + i, space);
                _Pragma("unroll") for (int q = 0; q < 4; q++) dst.data[c][q].x = w[q];
                continue;
            }
        }
        float v[8];
        if (!MASKED || i + 8 <= n) load8(v, p + i, space);
        else {
            _Pragma("unroll") for (int k = 0; k < 8; k++) v[k] = i + k < n ? to_float(p[i + k]) : fill;
        }
        _Pragma("unroll") for (int k = 0; k < 8; k += 2) dst.set_pair(c, k, v[k], v[k + 1]);
    }
}
// memory at p <- rv: one owner lane per value writes it; with MASKED, indices from n on are skipped.
template <bool MASKED, typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void store_vec(TD* p, const rv<TS, N, L>& src, int n, int space = 1) {
    const int ln = lane();
    if (!vec_owner<L>(ln)) return;
    _Pragma("unroll") for (int c = 0; c < N; c++) {
        _Pragma("unroll") for (int k = 0; k < rv<TS, N, L>::per_chunk; k++) {
            const int i = c * rv<TS, N, L>::chunk_len + vec_idx<L>(ln, k);
            if (!MASKED || i < n) p[i] = from_float<TD>(src.get(c, k));
        }
    }
}
// A contig vector writes its lane's 8 values of a chunk in one 16-byte access (two for fp32).
template <bool MASKED, typename TD, typename TS, int N>
__device__ __forceinline__ void store_vec(TD* p, const rv<TS, N, contig_l>& src, int n, int space = 1) {
    const int ln = lane();
    if (!vec_owner<contig_l>(ln)) return;
    _Pragma("unroll") for (int c = 0; c < N; c++) {
        const int i = c * 256 + 8 * ln;
        if constexpr (rv<TS, N, contig_l>::packed && is_same<TD, TS>::value) {   // the 16 bytes as they are
            if (!MASKED || i + 8 <= n) {
                u32 w[4];
                _Pragma("unroll") for (int q = 0; q < 4; q++) w[q] = src.data[c][q].x;
                st16(p + i, w, space);
                continue;
            }
        }
        float v[8];
        _Pragma("unroll") for (int k = 0; k < 8; k++) v[k] = src.get(c, k);
        if (!MASKED || i + 8 <= n) store8(p + i, v, space);
        else {
            _Pragma("unroll") for (int k = 0; k < 8; k++) if (i + k < n) p[i + k] = from_float<TD>(v[k]);
        }
    }
}

// rv <-> gl: the vector lies along row r from column c0.
template <typename TD, int N, typename L, typename TS>
__device__ __forceinline__ void load(rv<TD, N, L>& dst, const gl<TS>& src, int b, int d, int r, int c0) {
    load_vec<false>(dst, src.at(b, d, r, c0), 0, 0.0f); }
template <typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void store(const gl<TD>& dst, const rv<TS, N, L>& src, int b, int d, int r, int c0) {
    store_vec<false>(dst.at(b, d, r, c0), src, 0); }

// rv <-> sv
template <typename TD, int N, typename L, typename TS, int LEN>
__device__ __forceinline__ void load(rv<TD, N, L>& dst, const sv<TS, LEN>& src) { load_vec<false>(dst, src.ptr(0), 0, 0.0f, 2); }
template <typename TD, int LEN, typename TS, int N, typename L>
__device__ __forceinline__ void store(const sv<TD, LEN>& dst, const rv<TS, N, L>& src) { store_vec<false>(dst.ptr(0), src, 0, 2); }
// rv <-> sv lane-private (fp32 contig vectors, tk.load / tk.store private=True): lane l's 8 values of chunk c at
// 16-byte words (2c + h) * 32 + l, h the half, so that a warp's 16-byte accesses fall in distinct banks (the natural
// order, 8 consecutive values a lane, puts lanes l and l + 4 in the same ones). Only the same warp's private loads
// read back what its private stores wrote. A vector's words: at private_base(v) + (2c + h) * 512 (one address, the
// words at immediate offsets).
template <int LEN> __device__ __forceinline__ u32 private_base(const sv<float, LEN>& v) {
    return smem_addr(v.base) + lane() * 16; }
__device__ __forceinline__ void ld_private_word(float (&v)[4], u32 at) {
    asm volatile("ld.shared.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v[0]), "=f"(v[1]), "=f"(v[2]), "=f"(v[3])
                 : "r"(at)); }
__device__ __forceinline__ void st_private_word(u32 at, const float (&v)[4]) {
    asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};" :: "r"(at), "f"(v[0]), "f"(v[1]), "f"(v[2]), "f"(v[3])
                 : "memory"); }
template <int N, int LEN>
__device__ __forceinline__ void load_private(rv<float, N, contig_l>& dst, const sv<float, LEN>& src) {
    const u32 at = private_base(src);
    _Pragma("unroll") for (int c = 0; c < N; c++) _Pragma("unroll") for (int h = 0; h < 2; h++) {
        float v[4];
        ld_private_word(v, at + (2 * c + h) * 512);
        dst.set_pair(c, 4 * h, v[0], v[1]);
        dst.set_pair(c, 4 * h + 2, v[2], v[3]);
    }
}
template <int LEN, int N>
__device__ __forceinline__ void store_private(const sv<float, LEN>& dst, const rv<float, N, contig_l>& src) {
    const u32 at = private_base(dst);
    _Pragma("unroll") for (int c = 0; c < N; c++) _Pragma("unroll") for (int h = 0; h < 2; h++) {
        const float v[4] = {src.get(c, 4 * h), src.get(c, 4 * h + 1), src.get(c, 4 * h + 2), src.get(c, 4 * h + 3)};
        st_private_word(at + (2 * c + h) * 512, v);
    }
}
// tk.map(sums, f, sums, srcs..., private=True): sums = f(sums, srcs...) in place, a 16-byte word at a time (its 4
// values the only ones in registers).
template <int LEN, typename F, int N, typename... S>
__device__ __forceinline__ void map_private(const sv<float, LEN>& acc, F f, const rv<S, N, contig_l>&... srcs) {
    const u32 at = private_base(acc);
    _Pragma("unroll") for (int c = 0; c < N; c++) _Pragma("unroll") for (int h = 0; h < 2; h++) {
        float v[4];
        ld_private_word(v, at + (2 * c + h) * 512);
        _Pragma("unroll") for (int j = 0; j < 4; j++) v[j] = f(v[j], srcs.get(c, 4 * h + j)...);
        st_private_word(at + (2 * c + h) * 512, v);
    }
}

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
"""

_VIEWS = r"""
// ---- Subtiles ----

// Rows [idx * SR, (idx + 1) * SR) of a register tile, in place (ThunderKittens' subtile_inplace).
template <int SR, typename T, int H, int W, typename L>
__device__ __forceinline__ rt<T, SR / 16, W, L>& subtile_inplace(rt<T, H, W, L>& t, int idx) {
    return reinterpret_cast<rt<T, SR / 16, W, L>&>(t.data[idx * (SR / 16)]); }
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
    return {s.base + s.offset(r * RS, c * CS)}; }
// Elements [idx * M, (idx + 1) * M) of a shared vector (ThunderKittens' subvec).
template <int M, typename T, int N>
__device__ __forceinline__ sv<T, M> subvec(const sv<T, N>& v, int idx) {
    return {v.base + idx * sv<T, M>::bytes}; }
"""

_MASKS = r"""
// ---- Masks: dst = keep(row, col) ? src : val, by each element's position in the tile ----

template <typename F, typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void mask(rt<TD, H, W, L>& dst, const rt<TS, H, W, L>& src, F keep, float val) {
    const int ln = lane();
    for_each_reg<H, W>([&](int i, int j, int k) {
        float2 v = to_float2(src.data[i][j][k]);
        int r, c;
        frag_pos<L>(ln, k, 0, r, c);
        if (!keep(16 * i + r, 16 * j + c)) v.x = val;
        frag_pos<L>(ln, k, 1, r, c);
        if (!keep(16 * i + r, 16 * j + c)) v.y = val;
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(v);
    });
}

// A vector as a one-row tile: keep(0, index) for each of its values.
template <typename F, typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void mask(rv<TD, N, L>& dst, const rv<TS, N, L>& src, F keep, float val) {
    const int ln = lane();
    _Pragma("unroll") for (int c = 0; c < N; c++) _Pragma("unroll") for (int k = 0; k < rv<TD, N, L>::per_chunk; k++) {
        const float v = src.get(c, k);
        dst.set(c, k, keep(0, c * rv<TD, N, L>::chunk_len + vec_idx<L>(ln, k)) ? v : val);
    }
}

// ThunderKittens' masks: keep on and below (tril) / above (triu) diagonal `diagonal`, left of column
// `col` (right_fill fills from it on), from `col` on (left_fill), all but column `col` (index_fill), above row
// `row` (lower_fill), from it on.
template <typename D, typename S> __device__ __forceinline__ void tril(D& d, const S& s, int diagonal, float val) {
    mask(d, s, [=](int r, int c) { return c <= r + diagonal; }, val); }

// tril_periodic: rows stacking sequences of `period` rows, each masked by its own position (first_row >= 0).
template <typename D, typename S>
__device__ __forceinline__ void tril_periodic(D& d, const S& s, int first_row, int period, int diagonal, float val) {
    mask(d, s, [=](int r, int c) { return c <= (first_row + r) % period + diagonal; }, val); }

template <typename D, typename S> __device__ __forceinline__ void triu(D& d, const S& s, int diagonal, float val) {
    mask(d, s, [=](int r, int c) { return c >= r + diagonal; }, val); }
template <typename D, typename S> __device__ __forceinline__ void make_causal(D& d, const S& s, float val) {
    tril(d, s, 0, val); }
template <typename D, typename S> __device__ __forceinline__ void make_causal_t(D& d, const S& s, float val) {
    triu(d, s, 0, val); }

template <typename D, typename S> __device__ __forceinline__ void right_fill(D& d, const S& s, int col, float val) {
    mask(d, s, [=](int, int c) { return c < col; }, val); }
template <typename D, typename S> __device__ __forceinline__ void left_fill(D& d, const S& s, int col, float val) {
    mask(d, s, [=](int, int c) { return c >= col; }, val); }
template <typename D, typename S> __device__ __forceinline__ void index_fill(D& d, const S& s, int col, float val) {
    mask(d, s, [=](int, int c) { return c != col; }, val); }
// A vector's index_fill: the lane holding `col` finds its slot (per_chunk compares) and writes that one value down a
// binary tree of branches on the slot, rather than a compare and a select for each of its values.
template <int LO, int HI, typename T, int N, typename L>
__device__ __forceinline__ void set_slot(rv<T, N, L>& v, int slot, float val) {
    constexpr int per_chunk = rv<T, N, L>::per_chunk;
    if constexpr (HI - LO <= 8) {          // (a leaf: compares and selects)
        _Pragma("unroll") for (int i = LO; i < HI; i++) if (slot == i) v.set(i / per_chunk, i % per_chunk, val);
    } else if (slot < (LO + HI) / 2) set_slot<LO, (LO + HI) / 2>(v, slot, val);
    else set_slot<(LO + HI) / 2, HI>(v, slot, val);
}
template <typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void index_fill(rv<TD, N, L>& d, const rv<TS, N, L>& s, int col, float val) {
    constexpr int len = rv<TD, N, L>::chunk_len, per_chunk = rv<TD, N, L>::per_chunk;
    if ((const void*)&d != (const void*)&s) copy(d, s);
    const int chunk = col >= 0 ? col / len : N, at = col - chunk * len, ln = lane();
    int slot = -1;
    _Pragma("unroll") for (int k = 0; k < per_chunk; k++) if (vec_idx<L>(ln, k) == at) slot = chunk * per_chunk + k;
    if (chunk < N && slot >= 0) set_slot<0, N * per_chunk>(d, slot, val);
}
template <typename D, typename S> __device__ __forceinline__ void lower_fill(D& d, const S& s, int row, float val) {
    mask(d, s, [=](int r, int) { return r < row; }, val); }
template <typename D, typename S> __device__ __forceinline__ void upper_fill(D& d, const S& s, int row, float val) {
    mask(d, s, [=](int r, int) { return r >= row; }, val); }
"""

_MAPS = r"""
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
    return broadcast_at<ROWS>(b.v, i, j, k); }
// Operands: tiles of dst's shape and layout, and per_row / per_col vectors (the tracer checks the shapes).
// map_indexed's function also takes the lane's own number of the element (tkpy/tiles/layouts.py), a
// constant once the loops unroll: per-element choices cost no branch.
template <typename F, typename TD, int H, int W, typename L, typename... S>
__device__ __forceinline__ auto map_indexed(rt<TD, H, W, L>& dst, F f, const S&... src)
    -> decltype((map_operand(src, 0, 0, 0), ..., void())) {
    for_each_reg<H, W>([&](int i, int j, int reg) {
        const int width = W;
        const int half = 0;
        const int e = TILE_ELEMENT;
        dst.data[i][j][reg] = from_float2<typename rt<TD, H, W, L>::T2>(
            make_float2(f(e, map_operand(src, i, j, reg).x...), f(e + 1, map_operand(src, i, j, reg).y...)));
    });
}
template <typename F, typename TD, int N, typename L, typename... TS>
__device__ __forceinline__ void map_indexed(rv<TD, N, L>& dst, F f, const rv<TS, N, L>&... src) {
    constexpr int per_chunk = rv<TD, N, L>::per_chunk;
    dst.set_all([&](int c, int k) { return f(VECTOR_ELEMENT, src.get(c, k)...); });
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
    map_indexed(dst, ignore_element<F>{f}, src...); }

// Every row (broadcast_row: one value per row) or column of dst set from a vector.
struct op_second { __device__ __forceinline__ float operator()(float, float b) const { return b; } };
template <typename D, typename V> __device__ __forceinline__ void broadcast_row(D& d, const V& v) {
    broadcast<true>(d, d, v, op_second{}); }
template <typename D, typename V> __device__ __forceinline__ void broadcast_col(D& d, const V& v) {
    broadcast<false>(d, d, v, op_second{}); }
"""

_BOUNDED = r"""
// ---- Bounds-checked copies for tiles at tensor edges ----

// How many of the n elements from (r, c) on lie inside the tensor (none past its last row).
template <typename T> __device__ __forceinline__ int in_bounds(const gl<T>& g, int r, int c, int n) {
    return r < g.rows ? ::max(0, ::min(n, g.cols - c)) : 0; }
// rt <-> gl where the tile may cross the tensor's last row or column: outside elements load as `fill`, are not stored.
template <typename TD, int H, int W, typename L, typename TS>
__device__ __forceinline__ void load_masked(rt<TD, H, W, L>& dst, const gl<TS>& src, int b, int d, int r0, int c0, float fill) {
    if (r0 + 16 * H <= src.rows && c0 + 16 * W <= src.cols) { load(dst, src, b, d, r0, c0); return; }  // warp-uniform
    const int ln = lane();
    for_each_reg<H, W>([&](int i, int j, int k) {
        float v[2];
        _Pragma("unroll") for (int h = 0; h < 2; h++) {
            int r, c; frag_pos<L>(ln, k, h, r, c); r += r0 + 16 * i; c += c0 + 16 * j;
            v[h] = in_bounds(src, r, c, 1) ? to_float(*src.at(b, d, r, c)) : fill;
        }
        dst.data[i][j][k] = from_float2<typename rt<TD, H, W, L>::T2>(make_float2(v[0], v[1]));
    });
}
template <typename TD, typename TS, int H, int W, typename L>
__device__ __forceinline__ void store_masked(const gl<TD>& dst, const rt<TS, H, W, L>& src, int b, int d, int r0, int c0) {
    if (r0 + 16 * H <= dst.rows && c0 + 16 * W <= dst.cols) { store(dst, src, b, d, r0, c0); return; }
    const int ln = lane();
    for_each_reg<H, W>([&](int i, int j, int k) {
        const float2 v = to_float2(src.data[i][j][k]);
        _Pragma("unroll") for (int h = 0; h < 2; h++) {
            int r, c; frag_pos<L>(ln, k, h, r, c); r += r0 + 16 * i; c += c0 + 16 * j;
            if (in_bounds(dst, r, c, 1)) *dst.at(b, d, r, c) = from_float<TD>(h ? v.y : v.x);
        }
    });
}

// rv <-> gl along row r from column c0, up to the tensor's last column.
template <typename TD, int N, typename L, typename TS>
__device__ __forceinline__ void load_masked(rv<TD, N, L>& dst, const gl<TS>& src, int b, int d, int r, int c0, float fill) {
    load_vec<true>(dst, src.at(b, d, r, c0), in_bounds(src, r, c0, N * rv<TD, N, L>::chunk_len), fill); }
template <typename TD, typename TS, int N, typename L>
__device__ __forceinline__ void store_masked(const gl<TD>& dst, const rv<TS, N, L>& src, int b, int d, int r, int c0) {
    store_vec<true>(dst.at(b, d, r, c0), src, in_bounds(dst, r, c0, N * rv<TS, N, L>::chunk_len)); }

// One 16-byte chunk between shared memory and the tensor at (r, c), by elements where it crosses the edge.
template <typename T>
__device__ __forceinline__ void load_chunk_masked(T* s, const gl<T>& g, int b, int d, int r, int c, float fill) {
    constexpr int n = 16 / int(sizeof(T));
    const int valid = in_bounds(g, r, c, n);
    if (valid == n) { *reinterpret_cast<uint4*>(s) = *reinterpret_cast<const uint4*>(g.at(b, d, r, c)); return; }
    _Pragma("unroll") for (int e = 0; e < n; e++) s[e] = e < valid ? g.at(b, d, r, c)[e] : from_float<T>(fill);
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
    for_each_chunk<NT, T, 1, N>(t, [&](int, int c) { store_chunk_masked(dst, src.ptr(c), b, d, r, c0 + c); }); }
"""

_ASYNC = r"""
// ---- cp.async: st <- gl and sv <- gl without passing through registers ----

// One 16-byte chunk of which the first `src_bytes` come from global memory, the rest are zero.
__device__ __forceinline__ void cp_async16(u32 dst, const void* src, u32 src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" :: "r"(dst), "l"(src), "r"(src_bytes) : "memory"); }
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
// A shared vector along row r from column c0, the same way (its chunks in the order sv <- gl copies them).
template <bool MASKED, int NT, typename T, int N>
__device__ __forceinline__ void load_async(const sv<T, N>& dst, const gl<T>& src, int b, int d, int r, int c0, int t) {
    for_each_chunk<NT, T, 1, N>(t, [&](int, int c) {
        const u32 bytes = MASKED ? in_bounds(src, r, c0 + c, 16 / int(sizeof(T))) * u32(sizeof(T)) : 16;
        cp_async16(smem_addr(dst.ptr(c)), bytes ? src.at(b, d, r, c0 + c) : src.ptr, bytes);
    });
    asm volatile("cp.async.commit_group;" ::: "memory");
}
// Wait until at most N of this thread's load_async groups are still in flight.
template <int N> __device__ __forceinline__ void load_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory"); }
"""


def _vector_shuffles() -> str:
    out = []
    for (dst, src), s in shuffles.VECTOR_SHUFFLES.items():
        out.append(
            f"template <> struct vec_shuffle<{dst}_l, {src}_l> {{\n"
            f"    static constexpr int span = {s.span};\n"
            f"    __device__ static constexpr int src_lane(int lane, int c, int k) {{ return {s.src_lane}; }}\n"
            f"    __device__ static constexpr int send_base(int c, int k) {{ return {s.send_base}; }}\n"
            f"    __device__ static constexpr int send_offset(int lane) {{ return {s.send_offset}; }}\n"
            "};")
    return "\n".join(out)


def _paste(text: str) -> str:
    for name in ("TRANSPOSE8_ODD", "TRANSPOSE8_LANE_A", "TRANSPOSE8_LANE_B"):
        text = text.replace(name, getattr(shuffles, name))
    for layout, expr in shuffles.VECTOR_OWNER.items():
        text = text.replace(f"VECTOR_OWNER_{layout.upper()}", expr)
    return _substitute(text.replace("VECTOR_SHUFFLE_SPECIALIZATIONS", _vector_shuffles()))


HELPERS = helpers(_paste(_LAYOUT + _VECTORS + _VIEWS + _MASKS + _MAPS + _BOUNDED + _ASYNC))
