"""`tk.warpgroup`: ops done together by the 4 warps of a warpgroup."""
from __future__ import annotations

from ..frontend.control import WARP_ID, Mutable, var
from ..ir.expr import Expr
from . import wgmma
from ._checks import emit, register_vector, scalar
from .memory import Scope
from .sync_async import checked_barrier_id

WARPS_PER_WARPGROUP = 4


def warpgroup_id() -> Expr:
    """Index of the calling warp's warpgroup in its block."""
    return WARP_ID // WARPS_PER_WARPGROUP


class Warpgroup(Scope):
    """Cooperative loads/stores (register tiles: each warp takes its 16-row quarter of a 64-row tile),
    the wgmma family, and warpgroup barriers."""

    mma_AB, mm_AB = staticmethod(wgmma.mma_AB), staticmethod(wgmma.mm_AB)
    mma_ABt, mm_ABt = staticmethod(wgmma.mma_ABt), staticmethod(wgmma.mm_ABt)
    mma_AtB, mm_AtB = staticmethod(wgmma.mma_AtB), staticmethod(wgmma.mm_AtB)
    mma_AtBt, mm_AtBt = staticmethod(wgmma.mma_AtBt), staticmethod(wgmma.mm_AtBt)
    mma_async_wait = staticmethod(wgmma.mma_async_wait)

    def id(self) -> Expr:
        return warpgroup_id()

    def sync(self, barrier_id: int | Expr):
        """Barrier among the 4 warps of the calling warpgroup on named barrier `barrier_id` (an int in 1..15, or a
        runtime int); give each warpgroup its own, e.g. `first + tk.warpgroup.id()`."""
        return emit("named_sync", checked_barrier_id(barrier_id, "warpgroup.sync"), threads=32 * WARPS_PER_WARPGROUP)

    def any(self, condition, barrier_id: int | Expr, name: str = "any") -> Mutable:
        """True in every thread of the calling warpgroup when the scalar `condition` holds in any of its 4 warps
        (e.g. a flag one warp computed): a warpgroup-uniform condition for `tk.if_`. A barrier on named barrier
        `barrier_id` (as warpgroup.sync's) that ORs a predicate (bar.red.or), which the warpgroup's 4 warps meet.
        `name`: the flag's name in the generated C++."""
        condition = scalar(condition, "warpgroup.any's condition")
        bid = checked_barrier_id(barrier_id, "warpgroup.any")
        result = var(False, name)
        emit("warpgroup_any", result, condition, bid, threads=32 * WARPS_PER_WARPGROUP)
        return result

    def any_greater(self, vec, threshold, barrier_id: int | Expr, name: str = "any_greater") -> Mutable:
        """True in every thread of the calling warpgroup when some element of the register vector `vec`, in
        any of its 4 warps, exceeds `threshold`: a warpgroup-uniform condition for `tk.if_`, e.g. around a
        branch that issues a wgmma (which all 4 warps must issue together). A barrier that also ORs a
        predicate (bar.red.or) on named barrier `barrier_id` (as warpgroup.sync's), which the warpgroup's 4 warps
        meet; NaN exceeds nothing. `name`: the flag's name in the generated C++ (where no Python variable of
        the kernel's own gives it one)."""
        vec = register_vector(vec, "warpgroup.any_greater")
        threshold = scalar(threshold, "warpgroup.any_greater's threshold")
        bid = checked_barrier_id(barrier_id, "warpgroup.any_greater")
        result = var(False, name)
        emit("warpgroup_any_greater", result, vec, threshold, bid, threads=32 * WARPS_PER_WARPGROUP)
        return result


warpgroup = Warpgroup("warpgroup")
