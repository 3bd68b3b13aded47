"""Prelude helpers of the signals between GPUs and blocks (tk.signal, tk.wait_signal; tkpy/ops/signal.py): int32
flags in global memory, a peer GPU's or this one's, released and acquired at system scope.

PTX references: "st.release", "red" (`.release.sys`), "ld.acquire" (`.sys`), the memory consistency model's
release and acquire patterns, "fence.proxy.async" (the async proxy, TMA's, ordered with the generic proxy's
accesses), "nanosleep".
"""
from __future__ import annotations

from .helpers import helpers

_PEER = r"""
// ---- Peers and signals between GPUs and blocks: a pgl's gl picked at run time; int32 flags, release and acquire at
// system scope ----

// The i-th of a pgl's per-rank values (its gls, or their tensor maps of one tile shape), picked at run time.
template <typename T> __device__ __forceinline__ const T& peer(int, const T& last) { return last; }
template <typename T, typename... R> __device__ __forceinline__ const T& peer(int i, const T& first, const R&... rest) {
    return i == 0 ? first : peer(i - 1, rest...); }

// Set or add to a flag (one thread: lane 0) with release semantics at system scope: the thread's earlier writes,
// its completed TMA stores too (the proxy fence), are visible to a thread of any GPU that acquires the value.
__device__ __forceinline__ void signal_set(int* p, int v) {
    asm volatile("fence.proxy.async.global;\nst.release.sys.global.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void signal_add(int* p, int v) {
    asm volatile("fence.proxy.async.global;\nred.release.sys.global.add.s32 [%0], %1;" :: "l"(p), "r"(v) : "memory"); }

// A flag's value, by an acquire load at system scope.
__device__ __forceinline__ int load_acquire_sys(const int* p) {
    int v;
    asm volatile("ld.acquire.sys.global.s32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// Wait until a flag is at least `v` (every calling thread polls, sleeping briefly between polls), then order the
// thread's later TMA loads after the acquire (the proxy fence): they see what the signaller released.
__device__ __forceinline__ void wait_signal(const int* p, int v) {
    while (load_acquire_sys(p) < v) asm volatile("nanosleep.u32 64;");
    asm volatile("fence.proxy.async.global;" ::: "memory");
}
"""

HELPERS = helpers(_PEER)
