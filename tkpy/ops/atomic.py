"""Atomic read-modify-write of global memory: counters for hand-offs between blocks (e.g. the last of a task's
split-K blocks merging the others' results), histograms; and that hand-off itself, tk.last_block:

    with tk.if_(tk.warp_id() == 0):
        tk.store(parts, part, (tk.block_idx.x,))         # each block's part
    with tk.last_block(ticket):                          # warp 0 of the block that finishes last
        for b in tk.range(tk.grid_dim.x):                # sees every block's part
            ...
(tests/test_atomic.py's block_totals; kernels/row_split.py's block_partial and sum_partials add the parts in one
order, cross-entropy's loss).
"""
from __future__ import annotations

from contextlib import contextmanager

from ..frontend.control import WARP_ID, Mutable, assign, grid_dim, if_, var
from ..ir.core import GlobalVar
from ..tiles.dtypes import f32, i32
from ._checks import describe, emit, fail, scalar
from .declare import sv
from .scalar_memory import load_scalar, store_scalar
from .sync import sync
from .sync_async import threadfence


def atomic_add(dst, coord, value=1, name: str = "old") -> Mutable:
    """Add `value` (an int) to the element of the int32 global tensor `dst` at `coord` (element indices,
    right-aligned to (batch, depth, row, col) as a tile copy's), once per calling warp, and return the value the
    element held before the add, the same in every lane of the warp. The add is atomic, with acquire-release
    semantics at GPU scope (atom.acq_rel.gpu), so that a block's writes made visible by tk.threadfence() before
    it are seen by a block that reads them after its own atomic_add on the same element. `name`: the result's
    name in the generated C++."""
    if not isinstance(dst, GlobalVar):
        fail(f"atomic_add: expected an int32 global tensor (tk.gl[i32, ...]), got {describe(dst)}")
    if dst.type.dtype != i32:
        fail(f"atomic_add adds to int32 global tensors, got {describe(dst)}")
    if dst.type.rank == 5:
        fail(f"atomic_add takes global tensors of up to 4 dims, got {describe(dst)}")
    coord = coord if isinstance(coord, (tuple, list)) else (coord,)
    if not 1 <= len(coord) <= 4:
        fail(f"atomic_add: coordinates take 1 to 4 entries (batch, depth, row, col), got {len(coord)}")
    exprs = [scalar(c, "atomic_add's coordinate") for c in coord]
    value = scalar(value, "atomic_add's value")
    if any(e.dtype != i32 for e in (*exprs, value)):
        fail("atomic_add: the coordinates and the value must be integers")
    exprs = [scalar(0, "atomic_add's coordinate")] * (4 - len(exprs)) + exprs
    result = var(0, name)
    emit("atomic_add", result, dst, *exprs, value)
    return result


@contextmanager
def last_block(ticket, coord=0, *, arrivals=None, whole_block: bool = False):
    """`with tk.last_block(ticket):` the body runs once a launch, in warp 0 of the block that finishes last, and
    sees what every block wrote before it got here: the "last block" hand-off (a split-K merge, a sum of the
    blocks' partial results written in a fixed order, so the same bits every run, where float atomics would not
    be). Every warp of every block must reach it: a block barrier (tk.sync()) first, then warp 0 fences the block's
    writes (tk.threadfence) and counts the block in on the int32 element `ticket[coord]` (tk.atomic_add); the warp
    that counts the grid's last block fences again, runs the body, and sets the ticket back to 0.

    `arrivals` (an int, or a runtime int scalar): how many blocks count in on this ticket, the grid's by default;
    fewer for a ticket of a group of blocks (a tree of hand-offs: the last block of each group merges the group's
    results, and counts in on a ticket of the merged ones). Every block that counts in on the element must be among
    them. `whole_block=True`: the body runs in every warp of the last block, for work spread over its warps (a
    merge of wide rows): warp 0 tells the others through shared memory, one more block barrier; each warp fences
    before the body, which may hold block barriers (every warp of the block runs it). (The norms' weight and bias
    gradients summed by such a tree in their backward's last blocks measured slower than a column-sum launch after
    it from 4096 columns on the H200, and left: RESULTS.md run 284.)

    The ticket must be 0 when the launch starts: zeroed by a kernel before it on the stream (`tk.store(ticket, 0,
    (0,))`), or left at 0 by the launch before that used it. Two launches that may run at once (on two streams)
    need tickets of their own."""
    if not isinstance(ticket, GlobalVar) or ticket.type.dtype != i32:
        fail(f"last_block: the ticket is an int32 global tensor (tk.gl[i32, ...]), got {describe(ticket)}")
    if arrivals is None:
        count = grid_dim.x * grid_dim.y * grid_dim.z
    else:
        count = scalar(arrivals, "last_block's arrivals")
        if count.dtype != i32:
            fail(f"last_block: arrivals is a number of blocks, an int, got {count.dtype}")
    sync()
    if whole_block:
        last, said = var(0.0, "last"), sv(f32, 16)
    with if_(WARP_ID == 0):
        threadfence()                                   # this block's writes before its count
        arrived = atomic_add(ticket, coord, 1, "arrived")
        with if_(arrived == count - 1):
            if not whole_block:
                threadfence()                           # every other block's writes before the body's reads
                yield
            store_scalar(ticket, 0, coord)
            if whole_block:
                assign(last, 1.0)
        if whole_block:
            store_scalar(said, last, 0)
    if whole_block:
        sync()
        load_scalar(last, said, 0)
        with if_(last != 0.0):
            threadfence()                               # (each warp: every other block's writes before its reads)
            yield
