"""Signals between GPUs (and between blocks): int32 flags in global memory, maybe a peer GPU's (a tk.pgl's gl),
written with release semantics and waited for with acquire loads, both at system scope (PTX `st.release.sys`,
`red.release.sys.add`, `ld.acquire.sys`), as ParallelKittens' and NCCL's kernels hand data between GPUs.

The pattern: a warp writes data (ordinary stores, or TMA stores it then waits for with
`tk.tma.store_async_wait(0)`), then `tk.signal(flags[peer], (i,), epoch)`; the peer's warps
`tk.wait_signal(flags.local, (i,), epoch)` and then read the data (ordinary or TMA loads). Flags only grow: a
signal sets an epoch (or adds to a count) and a wait waits until the flag reaches a value, so nothing has to reset
them between calls (pass the call's epoch as a runtime int).
"""
from __future__ import annotations

from ..ir.core import GlobalVar
from ..tiles.dtypes import i32
from ._checks import describe, emit, fail, scalar
from .scalar_memory import element_coord

OPS = ("set", "add")


def _flag(dst, coord, what: str) -> tuple:
    """The element coordinates of one int32 element of `dst`, right-aligned to (batch, depth, row, col)."""
    if not isinstance(dst, GlobalVar) or dst.type.dtype != i32:
        fail(f"{what}: expected an int32 global tensor (a tk.gl[tk.i32, ...], or a rank's of a tk.pgl of them: "
             f"flags[p]), got {describe(dst)}")
    return element_coord(coord, dst, what)


def signal(dst, coord, value=1, *, op: str = "set"):
    """Set (`op="set"`) or add `value` to (`op="add"`) the int32 element of `dst` at `coord` (element indices), once
    per calling warp, with release semantics at system scope: the warp's earlier writes (after a __syncwarp: all its
    lanes'), to any GPU's memory, are visible to whoever acquires the flag (tk.wait_signal) before they see it. TMA
    stores must have completed first (tk.tma.store_async_wait(0), not read_only; checked at trace time); other warps'
    writes need a barrier with this warp before it signals."""
    if op not in OPS:
        fail(f"signal: op must be one of {OPS}, got {op!r}")
    exprs = _flag(dst, coord, "signal")
    v = scalar(value, "signal's value")
    if v.dtype != i32:
        fail("signal: the value must be an integer")
    return emit("signal", dst, *exprs, v, op=op)


def wait_signal(src, coord, value):
    """Wait until the int32 element of `src` at `coord` is at least `value` (every lane of the calling warp spins on
    acquire loads at system scope), so that what its signaller wrote before signalling is visible to the warp's
    later loads, TMA ones included (a fence.proxy.async follows the wait)."""
    exprs = _flag(src, coord, "wait_signal")
    v = scalar(value, "wait_signal's value")
    if v.dtype != i32:
        fail("wait_signal: the value must be an integer")
    return emit("wait_signal", src, *exprs, v)
