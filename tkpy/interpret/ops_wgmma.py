"""CPU semantics of warpgroup MMA (the wgmma family of `tk.warpgroup` and `mma_async_wait`).

wgmma is a warpgroup collective (`.sync.aligned`): the 4 warps of a warpgroup issue the same ops, on
the same tiles, in the same order, and an op runs for all four once the last of them has issued it.
It then reads its shared operands (through the async proxy) and writes each warp's 16 rows of the
64 x N fp32 result: warp w holds rows 16 * (w % 4) on. Until a `mma_async_wait` of a warp retires
the op, that warp's accumulator is off limits and a register A operand read-only (Warp.async_regs),
and the shared operands may not be overwritten (SharedMemory.hold). A wait blocks until the ops it
retires have run, so a warpgroup whose warps do not all issue an op deadlocks there, as on the GPU.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import InterpretError
from .memory import whole
from .numerics import decode
from .registry import semantics
from .sync import Wait


class _Collective:
    """One wgmma of one warpgroup: its shared operands (as the first issuing warp named them), the warps
    that have issued it so far, and whether it has run."""

    def __init__(self, op, group: int, tiles: tuple):
        self.op, self.group, self.tiles = op, group, tiles
        self.warps: list = []
        self.done = False

    def __str__(self) -> str:
        return f"the warpgroup MMA at {self.op.loc.short} (warpgroup {self.group})"


class _Warpgroup:
    """A warpgroup's wgmma state: per warp (by index % 4) how many ops it has issued and which it has not
    retired; the ops not every warp has issued yet, by their position in that sequence."""

    def __init__(self):
        self.issued = [0] * 4
        self.unretired: list = [[] for _ in range(4)]
        self.open: dict = {}


@dataclass(frozen=True, eq=False)
class _InFlight:
    """A register tile an MMA `owner` in flight writes (no access) or reads (no writes): Warp.async_regs."""

    why: str
    blocks_reads: bool
    owner: _Collective


def _root(var):
    while var.view is not None:
        var = var.view.base
    return var


def _shared_operands(warp, op) -> tuple:
    """The shared tiles of A (None from registers) and B, as this warp names them."""
    _, a, b = op.args
    return (None if op.attrs["a_regs"] else warp.shared_tile(a)), warp.shared_tile(b)


@semantics("wgmma", attrs=("trans_a", "trans_b", "accumulate", "n", "dtype", "a_regs", "b_dtype"))
def wgmma(warp, op):
    """Issue the op for this warp; the last warp of the warpgroup to issue it runs it."""
    state = warp.block.sync_object(("wgmma", warp.index // 4), _Warpgroup)
    lane = warp.index % 4
    position = state.issued[lane]
    state.issued[lane] += 1
    tiles = _shared_operands(warp, op)
    mma = state.open.get(position)
    if mma is None:
        mma = state.open[position] = _Collective(op, warp.index // 4, tiles)
    if mma.op is not op or tiles != mma.tiles:
        def which(o, ts):
            return f"the one at {o.loc.short} on {' and '.join(t.name for t in ts if t)}"
        raise InterpretError(f"the warps of warpgroup {mma.group} disagree on their warpgroup MMA number {position}: "
                             f"warp {mma.warps[0].index} issued {which(mma.op, mma.tiles)}, warp {warp.index} "
                             f"{which(op, tiles)}; all four must issue the same ops on the same tiles in the same "
                             "order", op.loc)
    d, a, _ = op.args
    wait = "call tk.warpgroup.mma_async_wait() first"
    warp.async_regs[_root(d)] = _InFlight(f"{mma} may still be writing it: {wait}", True, mma)
    if op.attrs["a_regs"]:
        warp.async_regs[_root(a)] = _InFlight(f"{mma} may still be reading it: {wait}", False, mma)
    mma.warps.append(warp)
    state.unretired[lane].append(mma)
    if len(mma.warps) == 4:
        del state.open[position]
        _run(mma)


def _run(mma: _Collective) -> None:
    """d (+)= A @ B for the whole warpgroup: fp32 products and sums of the exact bf16/fp16/fp8 inputs (each
    operand decoded from its own tile's dtype, so an e4m3 x e5m2 product needs nothing more)."""
    op = mma.op
    d, a, _ = op.args
    warps = sorted(mma.warps, key=lambda w: w.index)
    shared = warps[0].block.shared
    tile_a, tile_b = mma.tiles

    def operand(tile):
        raw = shared.read(tile, whole(tile), f"warpgroup MMA into `{d.name}`", op.loc, async_proxy=True)
        shared.hold(tile, whole(tile), mma)
        return decode(tile.type.dtype, raw)

    if tile_a is None:
        a_full = np.concatenate([w.read(a) for w in warps])
    else:
        a_full = operand(tile_a).T if op.attrs["trans_a"] else operand(tile_a)
    b_full = operand(tile_b)
    product = np.matmul(a_full, b_full if op.attrs["trans_b"] else b_full.T)
    acc = _root(d)
    for w in warps:
        rows = product[16 * (w.index % 4):16 * (w.index % 4) + 16]
        guard = w.async_regs.pop(acc)                  # the op itself may write the accumulator
        w.write(d, (rows + w.read(d)) if op.attrs["accumulate"] else rows)
        w.async_regs[acc] = guard
    mma.done = True


class _Retire(Wait):
    """wgmma.wait_group N: ready once all but the newest N of the warp's ops have run; then retires them."""

    def __init__(self, warp, pending: int):
        self.warp, self.pending = warp, pending
        self.unretired = warp.block.sync_object(("wgmma", warp.index // 4), _Warpgroup).unretired[warp.index % 4]

    def _due(self) -> list:
        return self.unretired[:max(0, len(self.unretired) - self.pending)]

    def ready(self) -> bool:
        due = self._due()
        if not all(mma.done for mma in due):
            return False
        del self.unretired[:len(due)]
        regs = self.warp.async_regs
        for mma in due:
            self.warp.block.shared.release(mma)
            for var in [v for v, guard in regs.items() if guard.owner is mma]:
                del regs[var]
        return True

    def describe(self) -> str:
        mma = next(m for m in self._due() if not m.done)
        issued = {w.index for w in mma.warps}
        missing = [w for w in range(4 * mma.group, 4 * mma.group + 4) if w not in issued]
        return (f"{mma}: every warp of the warpgroup must issue it, but warps "
                f"{', '.join(map(str, missing))} have not")


@semantics("wgmma_wait", attrs=("pending",))
def wgmma_wait(warp, op):
    return _Retire(warp, op.attrs["pending"])
