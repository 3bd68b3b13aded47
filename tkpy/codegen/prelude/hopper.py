"""Prelude helpers for Hopper's asynchronous machinery: mbarrier semaphores, TMA, wgmma, setmaxnreg.

PTX references: "Parallel Synchronization and Communication Instructions: mbarrier",
"cp.async.bulk.tensor", "Asynchronous Warpgroup Level Matrix Multiply-Accumulate
Instructions" (wgmma and its shared-memory matrix descriptor) and "setmaxnreg".
"""
from __future__ import annotations

from .helpers import Helper, helpers

_SYNC = r"""
// ---- Hopper: mbarrier semaphores, fences, named barriers, clusters, setmaxnreg ----

// The driver's 128-byte tensor map (no cuda.h under NVRTC); passed as a __grid_constant__ parameter.
struct alignas(64) CUtensorMap { unsigned long long opaque[16]; };

// mbarrier semaphores: 8 bytes of shared memory each.
struct semaphore { u64 state; };
__device__ __forceinline__ void init_semaphore(semaphore* sem, u32 arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_addr(sem)), "r"(arrivals) : "memory"); }
__device__ __forceinline__ void arrive(semaphore* sem, u32 count) {
    asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 _, [%0], %1;" :: "r"(smem_addr(sem)), "r"(count) : "memory"); }
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
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory"); }
// Arrive on named barrier `id` over `threads` threads without waiting for it.
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;" :: "r"(id), "r"(threads) : "memory"); }
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
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory"); }
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
"""

_REDUCE = r"""
// ---- Hopper: reductions into global memory from registers (red.global.add; its .v2 / .v4 of f32 from sm_90) ----

// Adds of fp32 values into global memory that return nothing, each element's atomic (a vector's not as a whole);
// subnormal inputs and results flush to zero. A pair: two adjacent elements, 8-byte aligned.
__device__ __forceinline__ void red_add(float* p, float v) {
    asm volatile("red.global.add.f32 [%0], %1;" :: "l"(p), "f"(v) : "memory"); }
__device__ __forceinline__ void red_add(float* p, float2 v) {
    asm volatile("red.global.add.v2.f32 [%0], {%1, %2};" :: "l"(p), "f"(v.x), "f"(v.y) : "memory"); }
// A register's pair at (r, c): adjacent in a row in the row layout (one v2), in a column in the col layout (two);
// no lane holds four adjacent elements of a tile (a .v4 would take shuffles).
__device__ __forceinline__ void red_pair(row_l, float* base, long long stride, int r, int c, float2 v) {
    red_add(base + r * stride + c, v); }
__device__ __forceinline__ void red_pair(col_l, float* base, long long stride, int r, int c, float2 v) {
    red_add(base + r * stride + c, v.x); red_add(base + (r + 1) * stride + c, v.y); }
// gl += rt (fp32), from the registers (tk.store_add); the masked form adds the elements inside the tensor only.
template <int H, int W, typename L>
__device__ __forceinline__ void store_add(const gl<float>& dst, const rt<float, H, W, L>& src, int b, int d, int r0, int c0) {
    const int ln = lane(); float* base = dst.at(b, d, r0, c0);
    for_each_reg<H, W>([&](int i, int j, int k) {
        int r, c; frag_pos<L>(ln, k, 0, r, c);
        red_pair(L{}, base, dst.row_stride, r + 16 * i, c + 16 * j, src.data[i][j][k]);
    });
}
template <int H, int W, typename L>
__device__ __forceinline__ void store_add_masked(const gl<float>& dst, const rt<float, H, W, L>& src, int b, int d, int r0, int c0) {
    if (r0 + 16 * H <= dst.rows && c0 + 16 * W <= dst.cols) { store_add(dst, src, b, d, r0, c0); return; }  // warp-uniform
    const int ln = lane();
    for_each_reg<H, W>([&](int i, int j, int k) {
        const float2 v = src.data[i][j][k];
        _Pragma("unroll") for (int h = 0; h < 2; h++) {
            int r, c; frag_pos<L>(ln, k, h, r, c); r += r0 + 16 * i; c += c0 + 16 * j;
            if (in_bounds(dst, r, c, 1)) red_add(dst.at(b, d, r, c), h ? v.y : v.x);
        }
    });
}
"""

def _tma_copies(rank: int) -> str:
    """tma::load_async / load_async_multicast / store_async / prefetch on a `rank`-d tensor map (4, or 5 for
    a 5-d gl, whose outer coordinate `o` comes first). One cp.async.bulk.tensor per swizzle panel."""
    outer = rank == 5
    params = ("int o, " if outer else "") + "int b, int d, int r, int c"
    coords = '"r"(r), "r"(d), "r"(b)' + (', "r"(o)' if outer else "")
    def slots(first):  # the `rank` coordinate operands, as %first .. %(first + rank - 1)
        return ", ".join(f"%{i}" for i in range(first, first + rank))
    panel = "st<T, R, C, SWZ>::panel_cols"
    dst = f'"r"(smem_addr(dst.base) + p * R * {panel} * u32(sizeof(T)))'
    load = (
        f"template <typename T, int R, int C, int SWZ>\n"
        f"__device__ __forceinline__ void load_async(const st<T, R, C, SWZ>& dst, const CUtensorMap* map,\n"
        f"                                           {params}, semaphore* sem) {{\n"
        f"    const u32 bar = smem_addr(sem);\n"
        f"    constexpr int panels = C / {panel};\n"
        f"    _Pragma(\"unroll\") for (int p = 0; p < panels; p++)\n"
        f"        asm volatile(\n"
        f'            "cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"\n'
        f'            " [%0], [%1, {{{slots(2)}}}], [%{rank + 2}];"\n'
        f"            :: {dst},\n"
        f'               "l"(map), "r"(c + p * {panel}), {coords}, "r"(bar)\n'
        f'            : "memory");\n}}\n')
    multicast = (
        "// The same tile lands at the same shared offset, and completes on the same semaphore, in every\n"
        "// block of the cluster named in the 16-bit `mask`.\n"
        f"template <typename T, int R, int C, int SWZ>\n"
        f"__device__ __forceinline__ void load_async_multicast(const st<T, R, C, SWZ>& dst, const CUtensorMap* map,\n"
        f"                                                     {params}, semaphore* sem, unsigned short mask) {{\n"
        f"    const u32 bar = smem_addr(sem);\n"
        f"    constexpr int panels = C / {panel};\n"
        f"    _Pragma(\"unroll\") for (int p = 0; p < panels; p++)\n"
        f"        asm volatile(\n"
        f'            "cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"\n'
        f'            " [%0], [%1, {{{slots(2)}}}], [%{rank + 2}], %{rank + 3};"\n'
        f"            :: {dst},\n"
        f'               "l"(map), "r"(c + p * {panel}), {coords}, "r"(bar), "h"(mask)\n'
        f'            : "memory");\n}}\n')
    vector = (
        "// A shared vector: a box of one row (the map's box is (N, 1, ...)).\n"
        f"template <typename T, int N>\n"
        f"__device__ __forceinline__ void load_async(const sv<T, N>& dst, const CUtensorMap* map,\n"
        f"                                           {params}, semaphore* sem) {{\n"
        f"    asm volatile(\n"
        f'        "cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"\n'
        f'        " [%0], [%1, {{{slots(2)}}}], [%{rank + 2}];"\n'
        f'        :: "r"(smem_addr(dst.base)), "l"(map), "r"(c), {coords}, "r"(smem_addr(sem))\n'
        f'        : "memory");\n}}\n'
        f"template <typename T, int N>\n"
        f"__device__ __forceinline__ void load_async_multicast(const sv<T, N>& dst, const CUtensorMap* map,\n"
        f"                                                     {params}, semaphore* sem, unsigned short mask) {{\n"
        f"    asm volatile(\n"
        f'        "cp.async.bulk.tensor.{rank}d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"\n'
        f'        " [%0], [%1, {{{slots(2)}}}], [%{rank + 2}], %{rank + 3};"\n'
        f'        :: "r"(smem_addr(dst.base)), "l"(map), "r"(c), {coords}, "r"(smem_addr(sem)), "h"(mask)\n'
        f'        : "memory");\n}}\n')
    store = (
        f"template <bool ADD, typename T, int R, int C, int SWZ>\n"
        f"__device__ __forceinline__ void store_async(const CUtensorMap* map, const st<T, R, C, SWZ>& src,\n"
        f"                                            {params}) {{\n"
        f"    constexpr int panels = C / {panel};\n"
        f"    _Pragma(\"unroll\") for (int p = 0; p < panels; p++) {{\n"
        f"        const u32 s = smem_addr(src.base) + p * R * {panel} * u32(sizeof(T));\n"
        f"        const int cc = c + p * {panel};\n"
        f"        if constexpr (ADD)\n"
        f'            asm volatile("cp.reduce.async.bulk.tensor.{rank}d.global.shared::cta.add.tile.bulk_group"\n'
        f'                         " [%0, {{{slots(2)}}}], [%1];" :: "l"(map), "r"(s), "r"(cc), {coords} : "memory");\n'
        f"        else\n"
        f'            asm volatile("cp.async.bulk.tensor.{rank}d.global.shared::cta.tile.bulk_group"\n'
        f'                         " [%0, {{{slots(2)}}}], [%1];" :: "l"(map), "r"(s), "r"(cc), {coords} : "memory");\n'
        f"    }}\n}}\n")
    prefetch = (
        f"template <typename T, int R, int C, int SWZ>\n"
        f"__device__ __forceinline__ void prefetch(const st<T, R, C, SWZ>&, const CUtensorMap* map, {params}) {{\n"
        f"    constexpr int panels = C / {panel};\n"
        f"    _Pragma(\"unroll\") for (int p = 0; p < panels; p++)\n"
        f'        asm volatile("cp.async.bulk.prefetch.tensor.{rank}d.L2.global.tile [%0, {{{slots(1)}}}];"\n'
        f'                     :: "l"(map), "r"(c + p * {panel}), {coords} : "memory");\n}}\n')
    return "\n".join([load, multicast, vector, store, prefetch])


_TMA = (
    "// TMA: one cp.async.bulk.tensor per swizzle panel of the shared tile (a box is one panel wide).\n"
    "// Coordinates are elements, innermost first; the tensor map is 4-d (cols, rows, depth, batch).\n\n"
    + _tma_copies(4) + r"""
// Fetch a tensor map's descriptor into the cache ahead of the first copy that uses it.
__device__ __forceinline__ void prefetch_map(const CUtensorMap* map) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(reinterpret_cast<unsigned long long>(map)) : "memory"); }

__device__ __forceinline__ void store_commit_group() { asm volatile("cp.async.bulk.commit_group;" ::: "memory"); }
// Wait until at most N committed store groups are still reading their shared-memory source.
template <int N> __device__ __forceinline__ void store_async_read_wait() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory"); }
// Wait until at most N committed store groups are incomplete (their writes visible).
template <int N> __device__ __forceinline__ void store_async_wait() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory"); }
""")

_WGMMA = r"""
// ---- wgmma ----

// wgmma shared-memory matrix descriptors (PTX ISA "Matrix Descriptor Format"): start address, leading- and
// stride-dimension byte offsets (all >> 4), swizzle mode in bits 62-63. A tile is MN-major when its rows run along
// K (B of mma_AB, A of mma_AtB), K-major otherwise.
__device__ __forceinline__ constexpr u64 desc_encode(u64 x) { return (x & 0x3FFFF) >> 4; }
// Step k16 of K: 16 K rows of an MN-major tile, or 32 bytes of each row of a K-major one (tkpy/tiles/wgmma.py).
// Each step adds its byte offset >> 4 to the low word of the tile's descriptor, built once: shared addresses stay
// below 2^18, so the 14-bit start field cannot carry, and a step is one 32-bit add. The words are joined by mov.b64:
// as 64-bit arithmetic the add became a 64-bit add with carry, three uniform instructions a wgmma instead of one.
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
    for_each_reg<H, W>([&](int i, int j, int k) {
        if constexpr (is_same<T, float>::value) asm volatile("" : "+f"(t.data[i][j][k].x), "+f"(t.data[i][j][k].y) :: "memory");
        else asm volatile("" : "+r"(t.data[i][j][k].x) :: "memory");
    });
}
"""


WGMMA_PTX = {"bf16": "bf16", "fp16": "f16", "fp8e4m3": "e4m3", "fp8e5m2": "e5m2"}


def wgmma_types(dtype: str) -> tuple[str, str]:
    """The element types (A, B) of a wgmma variant's `dtype`: one name for both ("bf16", "fp8e4m3"), or
    "<a>_<b>" for an fp8 product of two kinds ("fp8e4m3_fp8e5m2")."""
    a, _, b = dtype.partition("_")
    return a, b or a


def wgmma_k(dtype: str) -> int:
    """K of one instruction: 32 bytes of each K-major row, so 16 for 16-bit types and 32 for fp8."""
    return 32 if wgmma_types(dtype)[0].startswith("fp8") else 16


def wgmma_name(n: int, dtype: str, a_in_registers: bool) -> str:
    return f"wgmma_m64n{n}k{wgmma_k(dtype)}_{'rs' if a_in_registers else 'ss'}_{dtype}"


def wgmma_instruction(n: int, dtype: str, a_in_registers: bool) -> str:
    """C++ for one m64nNk16 (bf16/fp16) or m64nNk32 (fp8) wgmma with fp32 accumulators `d` (a warp's
    16 x N tile, row layout).

    The accumulator layout of wgmma per warp equals tkpy's row layout of a 16 x N fp32 tile, so
    d.data[0][j][0..3] are wgmma registers d[8j .. 8j+7] in order. fp8 variants take no transpose
    operands (PTX transposes only .f16/.bf16: both operands are K-major).
    """
    a_type, b_type = wgmma_types(dtype)
    fp8 = a_type.startswith("fp8")
    k = wgmma_k(dtype)
    regs = n // 2
    outs = ", ".join(f"%{i}" for i in range(regs))
    out_cons = ", ".join(f'"+f"(d.data[0][{i // 8}][{(i % 8) // 2}].{"xy"[i % 2]})' for i in range(regs))
    if a_in_registers:
        a_ops = f"{{%{regs}, %{regs + 1}, %{regs + 2}, %{regs + 3}}}"
        a_cons = '"r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), '
        b_op, scale, nxt = f"%{regs + 4}", f"%{regs + 5}", regs + 6
        tail = "p, 1, 1;" if fp8 else f"p, 1, 1, %{nxt};"
        params = "const u32* a, u64 b_desc, int scale_d"
        trans_args = "" if fp8 else ', "n"(TRANS_B)'
        tmpl = "" if fp8 else "template <int TRANS_B>"
    else:
        a_ops = f"%{regs}"
        a_cons = '"l"(a_desc), '
        b_op, scale, nxt = f"%{regs + 1}", f"%{regs + 2}", regs + 3
        tail = "p, 1, 1;" if fp8 else f"p, 1, 1, %{nxt}, %{nxt + 1};"
        params = "u64 a_desc, u64 b_desc, int scale_d"
        trans_args = "" if fp8 else ', "n"(TRANS_A), "n"(TRANS_B)'
        tmpl = "" if fp8 else "template <int TRANS_A, int TRANS_B>"
    return (
        f"{tmpl + chr(10) if tmpl else ''}__device__ __forceinline__ void {wgmma_name(n, dtype, a_in_registers)}(rt<float, 1, {n // 16}, row_l>& d, "
        f"{params}) {{\n"
        f"    asm volatile(\n"
        f'        "{{\\n.reg .pred p;\\nsetp.ne.b32 p, {scale}, 0;\\n"\n'
        f'        "wgmma.mma_async.sync.aligned.m64n{n}k{k}.f32.{WGMMA_PTX[a_type]}.{WGMMA_PTX[b_type]} "\n'
        f'        "{{{outs}}}, {a_ops}, {b_op}, {tail}\\n}}\\n"\n'
        f"        : {out_cons}\n"
        f'        : {a_cons}"l"(b_desc), "r"(scale_d){trans_args});\n'
        f"}}\n")


def warpgroup_mma(n: int, dtype: str, a_in_registers: bool) -> str:
    """tk::warpgroup::mma<TRANS_A, TRANS_B>(d, a, b, accumulate): fence, one wgmma per 32 bytes of K
    (16 bf16/fp16 or 32 fp8 elements), commit."""
    name = wgmma_name(n, dtype, a_in_registers)
    a_type, b_type = wgmma_types(dtype)
    k = wgmma_k(dtype)
    d = f"rt<float, 1, {n // 16}, row_l>& d"
    if a_in_registers and k == 32:   # fp8: the A fragments are gathered from tkpy's layout first (prelude/fp8.py)
        return (
            f"template <int TRANS_A, int TRANS_B, int K, int RB, int CB, int SB, int PRB, int PCB>\n"
            f"__device__ __forceinline__ void mma({d}, const rt<{a_type}, 1, K, row_l>& a,\n"
            f"                                    const st<{b_type}, RB, CB, SB, PRB, PCB>& b, bool accumulate) {{\n"
            f'    static_assert(TRANS_B == 0 && K % 2 == 0, "fp8 wgmma reads B K-major (mma_ABt), K in steps of 32");\n'
            f"    u32 frag[K / 2][4];\n"
            f"    _Pragma(\"unroll\") for (int k = 0; k < K / 2; k++) wgmma_fp8_a_fragment(a, k, frag[k]);\n"
            f"    wgmma_fence();\n"
            f"    _Pragma(\"unroll\") for (int k = 0; k < K / 2; k++)\n"
            f"        {name}(d, frag[k], descriptor<st<{b_type}, RB, CB, SB, PRB, PCB>, false>(b, k), accumulate || k > 0);\n"
            f"    wgmma_commit_group();\n}}\n")
    if a_in_registers:
        return (
            f"template <int TRANS_A, int TRANS_B, int K, int RB, int CB, int SB, int PRB, int PCB>\n"
            f"__device__ __forceinline__ void mma({d}, const rt<{a_type}, 1, K, row_l>& a,\n"
            f"                                    const st<{b_type}, RB, CB, SB, PRB, PCB>& b, bool accumulate) {{\n"
            f"    wgmma_fence();\n"
            f"    _Pragma(\"unroll\") for (int k = 0; k < K; k++)\n"
            f"        {name}<TRANS_B>(d, reinterpret_cast<const u32*>(&a.data[0][k][0]),\n"
            f"            descriptor<st<{b_type}, RB, CB, SB, PRB, PCB>, TRANS_B>(b, k), accumulate || k > 0);\n"
            f"    wgmma_commit_group();\n}}\n")
    if k == 32:   # fp8: K-major operands only, no transpose operands in the instruction
        return (
            f"template <int TRANS_A, int TRANS_B, int RA, int CA, int SA, int PRA, int PCA, int RB, int CB, int SB, int PRB, int PCB>\n"
            f"__device__ __forceinline__ void mma({d}, const st<{a_type}, RA, CA, SA, PRA, PCA>& a,\n"
            f"                                    const st<{b_type}, RB, CB, SB, PRB, PCB>& b, bool accumulate) {{\n"
            f'    static_assert(TRANS_A == 0 && TRANS_B == 0, "fp8 wgmma reads both operands K-major (mma_ABt)");\n'
            f"    wgmma_fence();\n"
            f"    _Pragma(\"unroll\") for (int k = 0; k < CA / 32; k++)\n"
            f"        {name}(d, descriptor<st<{a_type}, RA, CA, SA, PRA, PCA>, false>(a, k),\n"
            f"            descriptor<st<{b_type}, RB, CB, SB, PRB, PCB>, false>(b, k), accumulate || k > 0);\n"
            f"    wgmma_commit_group();\n}}\n")
    return (
        f"template <int TRANS_A, int TRANS_B, int RA, int CA, int SA, int PRA, int PCA, int RB, int CB, int SB, int PRB, int PCB>\n"
        f"__device__ __forceinline__ void mma({d}, const st<{a_type}, RA, CA, SA, PRA, PCA>& a,\n"
        f"                                    const st<{b_type}, RB, CB, SB, PRB, PCB>& b, bool accumulate) {{\n"
        f"    constexpr int k16s = (TRANS_A ? RA : CA) / 16;\n"
        f"    wgmma_fence();\n"
        f"    _Pragma(\"unroll\") for (int k = 0; k < k16s; k++)\n"
        f"        {name}<TRANS_A, TRANS_B>(d, descriptor<st<{a_type}, RA, CA, SA, PRA, PCA>, TRANS_A>(a, k),\n"
        f"            descriptor<st<{b_type}, RB, CB, SB, PRB, PCB>, TRANS_B>(b, k), accumulate || k > 0);\n"
        f"    wgmma_commit_group();\n}}\n")


# ThunderKittens' names; TRANS_* = 1 means that operand is stored MN-major (K along its rows).
_NAMED_MMA = helpers("\n".join(
    f"template <typename D, typename A, typename B> __device__ __forceinline__ void {name}(D& d, const A& a, const B& b) "
    f"{{ mma<{ta}, {tb}>(d, a, b, {acc}); }}\n"
    for name, ta, tb, acc in (("mma_AB", 0, 1, "true"), ("mm_AB", 0, 1, "false"), ("mma_ABt", 0, 0, "true"),
                              ("mm_ABt", 0, 0, "false"), ("mma_AtB", 1, 1, "true"), ("mm_AtB", 1, 1, "false"),
                              ("mma_AtBt", 1, 0, "true"), ("mm_AtBt", 1, 0, "false"))), "tk::warpgroup")


def wgmma_helpers(variants) -> list[Helper]:
    """The wgmma wrappers of a kernel's variants, generated per (n, dtype, a_in_registers) in `variants` (dtype as
    `wgmma_types` reads it), and ThunderKittens' names over them."""
    if not variants:
        return []
    out = helpers("// wgmma m64nNk16 with fp32 accumulators, as used by this kernel")
    for n, dt, rs in sorted(variants):
        out += helpers(wgmma_instruction(n, dt, rs)) + helpers(warpgroup_mma(n, dt, rs), "tk::warpgroup")
    return out + _NAMED_MMA


HELPERS = helpers(_SYNC) + helpers(_REDUCE) + helpers(_TMA, "tk::tma") + helpers(_WGMMA)
# 5-d TMA (a gl of 5 dims): overloads of the tma:: copies taking the outer coordinate first, on a 5-d tensor map
# (cols, rows, depth, batch, outer). Only kernels that use one get them.
TMA5_HELPERS = helpers(_tma_copies(5), "tk::tma")
