"""The consumer warpgroups' own protocols: a barrier of a warpgroup alone, and turns at the tensor cores.

Named barriers of an LCF kernel: 0 is the block's (tk.sync), 15 the consumers' before a finish block; a warpgroup's
own barrier is OWN[w] and the barrier on which warpgroup w waits for its turn TURN[w].

Turns (ping-pong, as FlashAttention-3): the consumer warpgroups go round a ring, each issuing its tensor-core work
only on its turn, so that one warpgroup's softmax (or other non-MMA work) runs while another's MMAs do. A
warpgroup takes its turn (waits on TURN[w]) before it issues, and hands it to the next, w + 1 mod groups (arrives on
TURN[w + 1]), once it has issued; every barrier is met by 8 warps, the 4 that wait and the 4 of the warpgroup that
hands over. The template (`@tk.lcf(turns=True)`) hands warpgroup 0 the first turn after setup, takes the last hand-off
back after a consumer's last task, and passes the turn on for the steps a warpgroup skips (`warpgroup_steps`); the
author's compute brackets what it issues with `with st.turn():` (or st.turns.take() / st.turns.hand_on()).
"""
from __future__ import annotations

import contextlib

from .. import ops as tk
from ..frontend.control import if_, warp_id

TURN = (2, 3, 7)          # warpgroup 0 / 1 / 2 waits for its turn on this named barrier
OWN = (4, 5, 6)           # the named barrier of warpgroup 0 / 1 / 2 alone (consecutive: own_barrier computes it)


def own_barrier():
    """The calling consumer warpgroup's own named barrier, as a run-time value (OWN[0] + its index): for ops that
    take a barrier id, e.g. tk.warpgroup.any_greater's vote."""
    return OWN[0] + tk.warpgroup.id()


def own_sync(groups: int) -> None:
    """A barrier among the calling consumer warpgroup's 4 warps (of `groups` consumer warpgroups). A branch per
    warpgroup with its barrier id an immediate: an id computed at run time (own_barrier) holds a register through
    the task loop, which kernels at the edge of the register file pay for in spills."""
    for wg in range(groups):
        with if_(tk.warpgroup.id() == wg):
            tk.warpgroup.sync(OWN[wg])


def first_warp(body) -> None:
    """body(wg) on the first warp of each consumer warpgroup, wg = tk.warpgroup.id()."""
    with if_(warp_id() % 4 == 0):
        body(tk.warpgroup.id())


def store_through(dst, src, tile, coord, groups: int, when=None) -> None:
    """A consumer warpgroup's register tile `src` (64 rows, 16 a warp) to global `dst` at tile coordinates `coord`
    through its shared tile `tile`: each warp writes its rows, the warpgroup syncs (of `groups` consumer warpgroups),
    and its first warp TMA-stores the tile (where `when`, a run-time condition, holds; rows past `dst`'s clipped) and
    waits until the store has read it, so the tile may be written again once the warpgroup next syncs."""
    tk.warpgroup.store(tile, src)
    tk.fence_proxy_async()                   # the warps' writes before the async proxy reads them
    own_sync(groups)
    first = warp_id() % 4 == 0
    with if_(first if when is None else first & when):
        tk.tma.store_async(dst, tile, coord)
        tk.tma.store_commit_group()
        tk.tma.store_async_wait(read_only=True)


class Turns:
    """The turns of `groups` consumer warpgroups at the tensor cores (see the module docstring). A branch per
    warpgroup with its barrier id an immediate (as own_sync's)."""

    def __init__(self, groups: int):
        if not 2 <= groups <= len(TURN):
            raise ValueError(f"turns go round 2 or 3 consumer warpgroups, got {groups}")
        self.groups = groups

    def take(self) -> None:
        """Wait for this warpgroup's turn."""
        for wg in range(self.groups):
            with if_(tk.warpgroup.id() == wg):
                tk.named_sync(TURN[wg], 8)

    def hand_on(self) -> None:
        """Hand the turn to the next warpgroup of the ring."""
        for wg in range(self.groups):
            with if_(tk.warpgroup.id() == wg):
                tk.named_arrive(TURN[(wg + 1) % self.groups], 8)

    @contextlib.contextmanager
    def turn(self):
        """`with turns.turn(): ...`: what the block issues, on this warpgroup's turn."""
        self.take()
        yield
        self.hand_on()

    def skip(self) -> None:
        """A turn with nothing issued (a step this warpgroup skips): the ring goes on."""
        self.take()
        self.hand_on()

    def begin(self) -> None:
        """Warpgroup 0 takes the first turn: the last hands it over, as after a turn of its own."""
        with if_(tk.warpgroup.id() == self.groups - 1):
            tk.named_arrive(TURN[0], 8)

    def end(self) -> None:
        """After a consumer's last task: warpgroup 0 takes back the last warpgroup's final hand-off."""
        with if_(tk.warpgroup.id() == 0):
            tk.named_sync(TURN[0], 8)
