"""The C++ of debug mode (tkpy/runtime/debug.py, tkpy/codegen/debug.py): bounded waits and the record of the one
that timed out. Only debug builds get it, after the prelude and before the kernel (it holds the kernel's own sites
and timeout); a normal build's source does not change.

PTX references: "mbarrier.try_wait" (the `.parity` form and the state-token form, `.acquire` at CTA or cluster
scope), "%globaltimer" (nanoseconds), "membar/fence" (`__threadfence_system`: the record reaches host memory
before the trap), "trap"; printf through vprintf(format, packed arguments) as CUDA's printf ABI has it.
"""
from __future__ import annotations

import struct

from ..debug import NAMED_BARRIERS, Plan

#: the record of timed-out waits, as the host reads it: SLOTS slots of SLOT (tkpy_debug_slot below), at the address
#: the host sets into the module's RECORD_SYMBOL pointer
SLOT = struct.Struct("<6I2iQ")   # valid, site, block x, y, z, warp, index, phase, waited ns
SLOTS = 32
RECORD_SYMBOL = "tkpy_debug_record"

_HELPERS = r"""
namespace tk {
namespace debug {
__device__ __forceinline__ u64 globaltimer() { u64 t; asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); return t; }
// The end of a wait that timed out, on lane 0 of the waiting warp: record it for the host (mapped host memory,
// which stays readable once the trap has broken the context), print one line, stop the kernel.
__device__ __forceinline__ void timed_out(u32 site, int index, int phase, u64 start) {
    const u64 waited = globaltimer() - start;
    const u32 warp = threadIdx.x / 32;
    tkpy_debug_slot* const record = *reinterpret_cast<tkpy_debug_slot* volatile*>(&tkpy_debug_record);
    if (record != nullptr) {
        const u32 slot = atomicAdd(&tkpy_debug_claims, 1u);
        if (slot < record_slots) {
            volatile tkpy_debug_slot* s = record + slot;
            s->site = site; s->block_x = blockIdx.x; s->block_y = blockIdx.y; s->block_z = blockIdx.z;
            s->warp = warp; s->index = index; s->phase = phase; s->waited_ns = waited;
            __threadfence_system();
            s->valid = 1;                  // last: the host reads only complete slots
            __threadfence_system();
            const u32 back = s->valid;     // read back over the bus: the writes have landed before the trap
            asm volatile("" :: "r"(back));
        }
    }
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
}  // namespace debug
}  // namespace tk
"""


def section(plan: Plan, timeout_ns: int, slots: int, print_: bool = True) -> str:
    """The debug C++ of one kernel: the record, its sites' printf formats, its timeout, the helpers."""
    formats = "\n".join(f'    /* site {s.index}: {s.kind} */ "{s.c_format(plan.ir.name)}",' for s in plan.sites)
    count = max(1, len(plan.sites))
    if not plan.sites:
        formats = '    "tkpy debug: no bounded waits\\n",'
    return (
        "// ---- debug mode (TKPY_DEBUG=1 or tk.kernel(debug=True); tkpy/runtime/debug.py): bounded waits ----\n"
        'extern "C" __device__ int vprintf(const char*, const char*);\n'
        "// A timed-out wait, as the host reads it (tkpy/runtime/debug.py SLOT): `valid` written last.\n"
        "struct tkpy_debug_slot { unsigned int valid, site, block_x, block_y, block_z, warp; int index, phase; "
        "unsigned long long waited_ns; };\n"
        "__device__ tkpy_debug_slot* tkpy_debug_record;   // mapped host memory, set by the host when it loads the "
        "module (or null)\n"
        "__device__ unsigned int tkpy_debug_claims;       // slots of the record taken\n"
        f"// The kernel's bounded waits (sites, tkpy/codegen/debug.py): each one's printf format.\n"
        f"__device__ const char* const tkpy_debug_formats[{count}] = {{\n{formats}\n}};\n"
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

