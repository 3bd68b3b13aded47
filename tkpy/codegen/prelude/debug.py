"""The C++ of debug mode (tkpy/runtime/debug.py, tkpy/codegen/debug.py): bounded waits and bounds checks, and the
record of the wait that timed out or the access that failed its check. Only debug builds get it, after the prelude
and before the kernel (it holds the kernel's own sites, checks and timeout); a normal build's source does not
change.

PTX references: "mbarrier.try_wait" (the `.parity` form and the state-token form, `.acquire` at CTA or cluster
scope), "%globaltimer" (nanoseconds), "membar/fence" (`__threadfence_system`: the record reaches host memory
before the trap), "trap"; printf through vprintf(format, packed arguments) as CUDA's printf ABI has it.
"""
from __future__ import annotations

import struct

from ..debug import AXES, NAMED_BARRIERS, Plan

#: the record of timed-out waits and failed bounds checks, as the host reads it: SLOTS slots of SLOT
#: (tkpy_debug_slot below), at the address the host sets into the module's RECORD_SYMBOL pointer
SLOT = struct.Struct("<6I2iQ3q")   # valid, site, block x, y, z, warp, index, phase, waited ns, first, last, limit
WAIT, BOUNDS = 1, 2                # a slot's `valid`: a wait that timed out, a failed bounds check
SLOTS = 32
RECORD_SYMBOL = "tkpy_debug_record"

_HELPERS = r"""
namespace tk {
namespace debug {
__device__ __forceinline__ u64 globaltimer() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
// One slot of the record for the host (mapped host memory, which stays readable once the trap has broken the
// context): `kind` 1 a wait that timed out (site, index, phase, waited), 2 a failed bounds check (check, which in
// `index`, first, last, limit).
__device__ __forceinline__ void record(u32 kind, u32 site, int index, int phase, u64 waited, long long first = 0,
                                       long long last = 0, long long limit = 0) {
    tkpy_debug_slot* const record = *reinterpret_cast<tkpy_debug_slot* volatile*>(&tkpy_debug_record);
    if (record == nullptr) return;
    const u32 slot = atomicAdd(&tkpy_debug_claims, 1u);
    if (slot >= record_slots) return;
    volatile tkpy_debug_slot* s = record + slot;
    s->site = site; s->block_x = blockIdx.x; s->block_y = blockIdx.y; s->block_z = blockIdx.z;
    s->warp = threadIdx.x / 32; s->index = index; s->phase = phase; s->waited_ns = waited;
    s->first = first; s->last = last; s->limit = limit;
    __threadfence_system();
    s->valid = kind;                   // last: the host reads only complete slots
    __threadfence_system();
    const u32 back = s->valid;         // read back over the bus: the writes have landed before the trap
    asm volatile("" :: "r"(back));
}
// The end of a wait that timed out, on lane 0 of the waiting warp: record it, print one line, stop the kernel.
__device__ __forceinline__ void timed_out(u32 site, int index, int phase, u64 start) {
    const u64 waited = globaltimer() - start;
    const u32 warp = threadIdx.x / 32;
    record(1, site, index, phase, waited);
    if constexpr (print) {
        struct { u32 bx, by, bz, warp; int index, phase; u32 ms; } args =   // printf's packed arguments
            {blockIdx.x, blockIdx.y, blockIdx.z, warp, index, phase, u32(waited / 1000000)};
        vprintf(tkpy_debug_formats[site], reinterpret_cast<const char*>(&args));
    }
    __trap();
}
__device__ __forceinline__ bool try_wait_parity(u32 bar, int parity) {
    u32 done;
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}
template <bool CLUSTER> __device__ __forceinline__ bool try_wait_token(u32 bar, u64 token) {
    u32 done;
    if constexpr (CLUSTER)
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.acquire.cluster.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "l"(token) : "memory");
    else
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.acquire.cta.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}"
                     : "=r"(done) : "r"(bar), "l"(token) : "memory");
    return done != 0;
}
// tk.wait, bounded: every lane polls the phase's parity (as tk::wait does); lane 0 also watches the clock.
__device__ __forceinline__ void wait(semaphore* sem, int phase, u32 site, int index) {
    const u32 bar = smem_addr(sem);
    if (try_wait_parity(bar, phase)) return;
    const u64 start = globaltimer();
    while (!try_wait_parity(bar, phase))
        if (threadIdx.x % 32 == 0 && globaltimer() - start > timeout_ns) timed_out(site, index, phase, start);
}
// tk.wait_signal, bounded: every lane polls the flag (as tk::wait_signal does); lane 0 also watches the clock and
// reports the value it last saw and the one it waited for.
__device__ __forceinline__ void wait_signal(const int* p, int v, u32 site) {
    int seen = load_acquire_sys(p);
    if (seen < v) {
        const u64 start = globaltimer();
        while ((seen = load_acquire_sys(p)) < v)
            if (threadIdx.x % 32 == 0 && globaltimer() - start > timeout_ns) timed_out(site, seen, v, start);
    }
    asm volatile("fence.proxy.async.global;" ::: "memory");
}
// A hardware barrier's stand-in: the calling warp arrives on the mbarrier `sem` (lane 0, once the warp's work is
// done) and waits, bounded, for the phase of its own arrival (the state token); then the warp goes on together.
template <bool CLUSTER = false> __device__ __forceinline__ void wait_token(u32 bar, u64 token, u32 site, int index) {
    if (try_wait_token<CLUSTER>(bar, token)) return;
    const u64 start = globaltimer();
    while (!try_wait_token<CLUSTER>(bar, token))
        if (globaltimer() - start > timeout_ns) timed_out(site, index, 0, start);
}
__device__ __forceinline__ void meet(semaphore* sem, u32 site, int index) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) {
        const u32 bar = smem_addr(sem);
        u64 token;
        asm volatile("mbarrier.arrive.release.cta.shared::cta.b64 %0, [%1];" : "=l"(token) : "r"(bar) : "memory");
        wait_token(bar, token, site, index);
    }
    __syncwarp();
}
// A named barrier's arrival without waiting (bar.arrive's stand-in).
__device__ __forceinline__ void named_arrive(semaphore* sem) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) arrive(sem, 1);
}
// bar.red.or, once every one of its warps has met on the barrier's mbarrier (bounded): all of them then reach it.
__device__ __forceinline__ bool named_any(bool mine, semaphore* sem, int id, int threads, u32 site) {
    meet(sem, site, id);
    return tk::named_any(mine, id, threads);
}
// tk.cluster.sync(): two mbarriers a block, used in turn (a warp may start the next sync before another warp's
// arrivals of this one have reached every block); each warp arrives on its own block's and every other block's,
// then waits, bounded, on its own block's.
__device__ __forceinline__ void cluster_sync(semaphore* pair, int& syncs, u32 site) {
    __syncwarp();
    semaphore* const sem = &pair[syncs & 1];
    if (threadIdx.x % 32 == 0) {
        const u32 bar = smem_addr(sem);
        u64 token;
        asm volatile("mbarrier.arrive.release.cluster.shared::cta.b64 %0, [%1];" : "=l"(token) : "r"(bar) : "memory");
        const int me = cluster_rank();
        for (int r = 0; r < cluster_blocks; r++)
            if (r != me) arrive_remote(sem, r, 1);
        wait_token<true>(bar, token, site, syncs);
    }
    __syncwarp();
    syncs++;
}
// An out-of-bounds access (a check of tkpy/codegen/debug.py failed): one lane of each failing warp records it,
// prints one line and stops the kernel; the warp's other failing lanes wait for the trap.
__device__ __forceinline__ void out_of_bounds(u32 check, int which, long long first, long long last, long long limit) {
    const u32 lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    if (lane != u32(__ffs(__activemask()) - 1))
        for (;;) __nanosleep(1000000);
    record(2, check, which, 0, 0, first, last, limit);
    if constexpr (print) {
        struct { u32 bx, by, bz, warp; const char* axis; long long first, last, limit; } args =
            {blockIdx.x, blockIdx.y, blockIdx.z, warp, tkpy_debug_axes[which], first, last, limit};
        vprintf(tkpy_debug_check_formats[check], reinterpret_cast<const char*>(&args));
    }
    __trap();
}
// An index into an array of `limit` (shared tiles, semaphores, windows of a tile).
__device__ __forceinline__ void check_index(long long value, long long limit, u32 check, int which) {
    if (value < 0 || value >= limit) out_of_bounds(check, which, value, value, limit); }
// A rows x cols tile copied at element (b, d, r, c) of g: all of it inside g, or for a masked copy (which skips
// what lies past the last row and column) its first element at non-negative rows and columns.
template <typename T> __device__ __forceinline__ void check_tile(const gl<T>& g, int b, int d, long long r,
                                                                 long long c, int rows, int cols, bool masked,
                                                                 u32 check) {
    check_index(b, g.batch, check, 0);
    check_index(d, g.depth, check, 1);
    if (r < 0 || (!masked && r + rows > g.rows)) out_of_bounds(check, 2, r, r + rows - 1, g.rows);
    if (c < 0 || (!masked && c + cols > g.cols)) out_of_bounds(check, 3, c, c + cols - 1, g.cols);
}
// One element of g (tk.atomic_add).
template <typename T> __device__ __forceinline__ void check_element(const gl<T>& g, int b, int d, int r, int c,
                                                                    u32 check) {
    check_index(b, g.batch, check, 0);
    check_index(d, g.depth, check, 1);
    check_index(r, g.rows, check, 2);
    check_index(c, g.cols, check, 3);
}
}  // namespace debug
}  // namespace tk
"""


def section(plan: Plan, timeout_ns: int, slots: int, print_: bool = True) -> str:
    """The debug C++ of one kernel: the record, its sites' printf formats, its timeout, the helpers."""
    formats = "\n".join(f'    /* site {s.index}: {s.kind} */ "{s.c_format(plan.ir.name)}",' for s in plan.sites)
    count = max(1, len(plan.sites))
    if not plan.sites:
        formats = '    "tkpy debug: no bounded waits\\n",'
    checks = "\n".join(f'    /* check {c.index} */ "{c.c_format(plan.ir.name)}",' for c in plan.checks)
    if not plan.checks:
        checks = '    "tkpy debug: no bounds checks\\n",'
    axes = ", ".join(f'"{a}"' for a in AXES)
    return (
        "// ---- debug mode (TKPY_DEBUG=1 or tk.kernel(debug=True); tkpy/runtime/debug.py): bounded waits ----\n"
        'extern "C" __device__ int vprintf(const char*, const char*);\n'
        "// A timed-out wait (valid 1) or a failed bounds check (valid 2), as the host reads it (tkpy/runtime/debug.py "
        "SLOT): `valid` written last.\n"
        "struct tkpy_debug_slot { unsigned int valid, site, block_x, block_y, block_z, warp; int index, phase; "
        "unsigned long long waited_ns; long long first, last, limit; };\n"
        "__device__ tkpy_debug_slot* tkpy_debug_record;   // mapped host memory, set by the host when it loads the "
        "module (or null)\n"
        "__device__ unsigned int tkpy_debug_claims;       // slots of the record taken\n"
        f"// The kernel's bounded waits (sites, tkpy/codegen/debug.py): each one's printf format.\n"
        f"__device__ const char* const tkpy_debug_formats[{count}] = {{\n{formats}\n}};\n"
        f"// The kernel's bounds checks (tkpy/codegen/debug.py): each one's printf format, and the axes they name.\n"
        f"__device__ const char* const tkpy_debug_check_formats[{max(1, len(plan.checks))}] = {{\n{checks}\n}};\n"
        f"__device__ const char* const tkpy_debug_axes[{len(AXES)}] = {{{axes}}};\n"
        "namespace tk {\nnamespace debug {\n"
        f"constexpr u64 timeout_ns = {timeout_ns}ull;   // TKPY_DEBUG_TIMEOUT_S\n"
        f"constexpr u32 record_slots = {slots};\n"
        f"constexpr int cluster_blocks = {plan.cluster_blocks};\n"
        f"constexpr bool print = {'true' if print_ else 'false'};\n"
        "}  // namespace debug\n}  // namespace tk\n"
        + _HELPERS)


def prologue(plan: Plan) -> list[str]:
    """The kernel's debug set-up: the mbarriers that stand in for its hardware barriers, initialised before any
    warp uses them (then a hardware barrier over the block, or over the cluster, which every thread reaches)."""
    decls, inits = [], []
    if plan.uses_named_mbarriers:
        counts = ", ".join(str(plan.named.get(i, plan.named_default)) for i in range(NAMED_BARRIERS))
        decls.append(f"__shared__ tk::semaphore tkpy_debug_named[{NAMED_BARRIERS}];  // named barriers 0..15 as "
                     f"mbarriers (debug mode: bounded waits)")
        inits.append(f"    constexpr unsigned int named_warps[{NAMED_BARRIERS}] = {{{counts}}};")
        inits.append(f"    for (int i = 0; i < {NAMED_BARRIERS}; i++) tk::init_semaphore(&tkpy_debug_named[i], "
                     f"named_warps[i]);")
    if plan.block_barrier:
        decls.append("__shared__ tk::semaphore tkpy_debug_block;  // tk.sync() as an mbarrier of every warp")
        inits.append(f"    tk::init_semaphore(&tkpy_debug_block, {plan.ir.warps});")
    if plan.warpgroups:
        decls.append(f"__shared__ tk::semaphore tkpy_debug_warpgroups[{plan.warpgroups}];  // each warpgroup meets "
                     f"before each wgmma")
        inits.append(f"    for (int i = 0; i < {plan.warpgroups}; i++) tk::init_semaphore(&tkpy_debug_warpgroups[i], 4);")
    if plan.cluster_barrier:
        decls.append("__shared__ tk::semaphore tkpy_debug_cluster[2];  // tk.cluster.sync(): two mbarriers used in turn")
        decls.append("int tkpy_debug_cluster_syncs = 0;  // this warp's cluster syncs so far")
        inits.append(f"    for (int i = 0; i < 2; i++) tk::init_semaphore(&tkpy_debug_cluster[i], "
                     f"{plan.cluster_blocks * plan.ir.warps});")
    if not inits:
        return []
    if plan.ir.cluster:
        inits.append("    tk::fence_semaphore_init();  // visible to the cluster")
    barrier = ("tk::cluster_sync();  // (hardware: every thread of the cluster is here)" if plan.ir.cluster
               else "__syncthreads();  // (hardware: every thread is here)")
    return decls + ["if (threadIdx.x == 0) {  // debug mode's barriers, before any warp uses them", *inits, "}",
                    barrier]

