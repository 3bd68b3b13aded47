"""`tk.warpgroup`: ops done together by the 4 warps of a warpgroup."""
from __future__ import annotations

from ..frontend.control import WARP_ID
from ..ir.expr import Expr
from . import wgmma
from ._checks import emit, fail
from .memory import Scope

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

    def sync(self, barrier_id: int):
        """Barrier among the 4 warps of the calling warpgroup on named barrier `barrier_id` (1..15);
        give each warpgroup its own id (e.g. 1 + warpgroup index when it is a Python int)."""
        if not isinstance(barrier_id, int) or not 1 <= barrier_id <= 15:
            fail(f"warpgroup.sync: barrier id must be an int in 1..15, got {barrier_id!r}")
        return emit("named_sync", barrier_id=barrier_id, threads=32 * WARPS_PER_WARPGROUP)


warpgroup = Warpgroup("warpgroup")
