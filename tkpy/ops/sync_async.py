"""Semaphores (mbarriers), proxy fences, named barriers and register reallocation.

Semaphore ops are issued once per calling warp (by its lane 0): a semaphore's
arrival count is the number of warp-level `arrive` / `expect` calls per phase.
"""
from __future__ import annotations

from ..frontend.context import current
from ..ir.core import SharedRef, Var
from ..ir.expr import Expr, as_expr
from ..ir.protocol import MAX_NAMED_BARRIER
from ..tiles.dtypes import i32
from ..tiles.types import Semaphore
from ._checks import describe, emit, fail, scalar


def semaphore(count: int = 1) -> Var:
    """A semaphore in shared memory, or an array of `count` (index as sem[i]). Initialise it with
    tk.init_semaphore before use."""
    if not isinstance(count, int) or count < 1:
        fail(f"semaphore count must be a positive int, got {count!r}")
    return current().declare(Semaphore(), "sem", count)


def semaphore_ref(x, what: str) -> SharedRef:
    if isinstance(x, Var) and isinstance(x.type, Semaphore):
        if x.count != 1:
            fail(f"{what}: `{x.name}` is an array of {x.count} semaphores; index it, e.g. {x.name}[i]")
        return SharedRef(x, None)
    if isinstance(x, SharedRef) and isinstance(x.type, Semaphore):
        return x
    fail(f"{what}: expected a semaphore (tk.semaphore()), got {describe(x)}")


def _int(x, what: str):
    e = scalar(x, what)
    if e.dtype != i32:
        fail(f"{what} must be an integer, got {e.dtype}")
    return e


def init_semaphore(sem, arrivals: int = 1):
    """Set up a semaphore whose phases complete after `arrivals` warp-level arrivals (an `expect`
    counts as one) and all expected bytes. Follow it with tk.sync() before any other warp uses it."""
    if not isinstance(arrivals, int) or arrivals < 1:
        fail(f"init_semaphore: arrivals must be a positive int, got {arrivals!r}")
    return emit("sem_init", semaphore_ref(sem, "init_semaphore"), arrivals=arrivals)


def arrive(sem, count: int = 1):
    """Arrive on a semaphore `count` times (once per calling warp)."""
    if not isinstance(count, int) or count < 1:
        fail(f"arrive: count must be a positive int, got {count!r}")
    return emit("sem_arrive", semaphore_ref(sem, "arrive"), count=count)


def expect_bytes(sem, nbytes):
    """Arrive once and announce `nbytes` of TMA transactions that will complete this phase."""
    return emit("sem_expect", semaphore_ref(sem, "expect_bytes"), _int(nbytes, "expect_bytes"))


def wait(sem, phase):
    """Block the calling warp until the semaphore's phase with this parity (0 or 1) completes."""
    return emit("sem_wait", semaphore_ref(sem, "wait"), _int(phase, "wait phase"))


def threadfence():
    """Order this thread's global (and shared) memory writes before its later ones for the whole GPU
    (fence.acq_rel.gpu, CUDA's __threadfence): before a tk.atomic_add that tells another block the writes are
    done, and after one that learns it, before reading them."""
    return emit("threadfence")


def fence_proxy_async():
    """Make this warp's ordinary shared-memory writes visible to TMA and wgmma (the async proxy)."""
    return emit("fence_proxy_async")


def checked_barrier_id(x, what: str) -> Expr:
    """A named barrier's id: an int in 1..MAX_NAMED_BARRIER (0 is tk.sync()'s), or a runtime int, e.g. one
    barrier per warpgroup as `first + tk.warpgroup.id()` (bar.sync takes it from a register: no branch per
    warpgroup; the interpreter checks its range when it runs)."""
    if isinstance(x, bool) or not isinstance(x, (int, Expr)) or isinstance(x, int) and not 1 <= x <= MAX_NAMED_BARRIER \
            or isinstance(x, Expr) and x.dtype != i32:
        fail(f"{what}: barrier id must be an int in 1..{MAX_NAMED_BARRIER} (0 is tk.sync()) or a runtime int, "
             f"got {x!r}")
    return as_expr(x)


def named_sync(barrier_id: int | Expr, warps: int):
    """Barrier `barrier_id` (see checked_barrier_id) among `warps` warps, e.g. the consumer warpgroups only."""
    bid = checked_barrier_id(barrier_id, "named_sync")
    if not isinstance(warps, int) or not 1 <= warps <= current().warps:
        fail(f"named_sync: warps must be an int in 1..{current().warps}, got {warps!r}")
    return emit("named_sync", bid, threads=32 * warps)


def named_arrive(barrier_id: int | Expr, warps: int):
    """Arrive on barrier `barrier_id` (see checked_barrier_id) among `warps` warps without waiting (bar.arrive): the
    warps that named_sync on it go on once `warps` warps have arrived or synced. A producer/consumer hand-off,
    e.g. two warpgroups taking turns; a warp may arrive at most once per phase of the barrier."""
    bid = checked_barrier_id(barrier_id, "named_arrive")
    if not isinstance(warps, int) or not 1 <= warps <= current().warps:
        fail(f"named_arrive: warps must be an int in 1..{current().warps}, got {warps!r}")
    return emit("named_arrive", bid, threads=32 * warps)


def _registers(n: int, increase: bool):
    if not isinstance(n, int) or not 24 <= n <= 256 or n % 8:
        fail(f"setmaxnreg takes a multiple of 8 in 24..256 registers per thread, got {n!r}")
    return emit("setmaxnreg", registers=n, increase=increase)


def producer_registers(n: int = 40):
    """Release registers in a producer warpgroup (setmaxnreg.dec) so consumers can take them."""
    return _registers(n, False)


def consumer_registers(n: int = 232):
    """Claim registers in a consumer warpgroup (setmaxnreg.inc)."""
    return _registers(n, True)
