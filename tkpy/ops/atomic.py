"""Atomic read-modify-write of global memory: counters for hand-offs between blocks (e.g. the last of a task's
split-K blocks merging the others' results), histograms."""
from __future__ import annotations

from ..frontend.control import Mutable, var
from ..ir.core import GlobalVar
from ..tiles.dtypes import i32
from ._checks import describe, emit, fail, scalar


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
