"""Warpgroup tensor-core MMA (wgmma): `tk.warpgroup.mma_AB(d, a, b)` and its family.

A warpgroup (4 consecutive warps, the first a multiple of 4) computes a 64 x N
product; each warp holds its 16 x N slice of the fp32 accumulator `d` in row
layout. `a` is a 64 x K shared tile (K x 64 for the At forms) or the warp's own
16 x K register tile; `b` is a shared tile, K x N (N x K for the Bt forms).
The ops are asynchronous: read `d` only after `tk.warpgroup.mma_async_wait()`.

fp8 (e4m3, e5m2, or one of each): in the ABt form only (A 64 x K in shared memory or each warp's
16 x K register tile, B N x K: PTX's wgmma transposes only 16-bit types, so fp8 operands must be
K-major), K a multiple of 32 (m64nNk32 instructions), products and sums in fp32.
"""
from __future__ import annotations

from ..frontend.context import current
from ..ir.core import SharedRef
from ..tiles.dtypes import FP8_DTYPES, MMA_INPUT_DTYPES, f32
from ..tiles.types import RT, ST
from ._checks import describe, emit, fail, operand, storage

WGMMA_M = 64


def _mma(d, a, b, *, trans_a: bool, trans_b: bool, accumulate: bool, name: str):
    d = operand(d, f"{name} d")
    a = operand(a, f"{name} a")
    b = operand(b, f"{name} b")
    dt, at, bt = d.type, a.type, b.type
    if not (isinstance(dt, RT) and dt.dtype == f32 and dt.layout == "row" and dt.rows == WGMMA_M // 4):
        fail(f"{name}: d must be each warp's 16 x N fp32 row-layout slice of the 64 x N result; got {describe(d)}")
    n = dt.cols
    if not isinstance(b, SharedRef) or not isinstance(bt, ST):
        fail(f"{name}: b must be a shared tile; got {describe(b)}")
    if isinstance(at, RT):
        if trans_a:
            fail(f"{name}: a transposed A must come from shared memory; got the register tile {describe(a)}")
        if at.layout != "row" or at.rows != WGMMA_M // 4:
            fail(f"{name}: a register A is each warp's 16 x K row-layout slice; got {describe(a)}")
        k = at.cols
    elif isinstance(a, SharedRef) and isinstance(at, ST):
        m, k = (at.cols, at.rows) if trans_a else (at.rows, at.cols)
        if m != WGMMA_M:
            fail(f"{name}: a shared A is {'K x 64' if trans_a else '64 x K'} for a warpgroup; got {describe(a)}")
    else:
        fail(f"{name}: a must be a shared tile or a register tile; got {describe(a)}")
    fp8 = at.dtype in FP8_DTYPES
    if fp8 and bt.dtype in FP8_DTYPES:
        _check_fp8(name, a, b, trans_a, trans_b, k)
    elif at.dtype not in MMA_INPUT_DTYPES or bt.dtype != at.dtype:
        fail(f"{name}: a and b must both be bf16, both fp16, or both fp8 (e4m3/e5m2); got {describe(a)}, {describe(b)}")
    bk, bn = (bt.rows, bt.cols) if trans_b else (bt.cols, bt.rows)
    if (bk, bn) != (k, n):
        want = f"{k} x {n}" if trans_b else f"{n} x {k}"
        fail(f"{name}: b must be {want} for a {'16' if isinstance(at, RT) else '64'} x {k} A and a 64 x {n} "
             f"result; got {describe(b)}")
    if not 16 <= n <= 256:
        fail(f"{name}: wgmma takes N from 16 to 256; got {n}")
    for x in (a, b):
        if isinstance(x.type, ST) and x.type.swizzle == 0:
            fail(f"{name}: wgmma reads swizzled shared tiles; {describe(x)} is unswizzled")
    mixed = {"b_dtype": bt.dtype.name} if bt.dtype != at.dtype else {}
    op = emit("wgmma", d, a, b, trans_a=trans_a, trans_b=trans_b, accumulate=accumulate,
              n=n, dtype=at.dtype.name, a_regs=isinstance(at, RT), **mixed)
    ctx = current()
    ctx.pending_wgmma[d] = op.loc
    register_a = storage(a) if isinstance(at, RT) else None
    if register_a is not None:
        ctx.pending_wgmma_reads[register_a] = op.loc
    ctx.wgmma_groups.append((d, op.loc, register_a))
    return op


def _check_fp8(name: str, a, b, trans_a: bool, trans_b: bool, k: int) -> None:
    """fp8 operands: K-major (the ABt form), K a multiple of 32."""
    if trans_a or trans_b:
        fail(f"{name}: fp8 wgmma needs K-major operands (PTX's wgmma transposes only bf16/fp16), so only "
             f"mma_ABt / mm_ABt take fp8: A as a 64 x K tile and B as an N x K tile (store B^T); "
             f"got {describe(a)}, {describe(b)}")
    if k % 32:
        fail(f"{name}: fp8 wgmma takes K in steps of 32 (m64nNk32); got K = {k} from {describe(a)}")


def _make(name: str, trans_a: bool, trans_b: bool, accumulate: bool):
    def op(d, a, b):
        return _mma(d, a, b, trans_a=trans_a, trans_b=trans_b, accumulate=accumulate, name=name)
    op.__name__ = name
    shapes = f"a {'K x 64' if trans_a else '64 x K (or 16 x K registers)'}, b {'N x K' if not trans_b else 'K x N'}"
    op.__doc__ = (f"d {'+' if accumulate else ''}= {'a^T' if trans_a else 'a'} @ {'b' if trans_b else 'b^T'} "
                  f"with {shapes}; asynchronous, wait with mma_async_wait().")
    return op


mma_AB = _make("mma_AB", False, True, True)
mm_AB = _make("mm_AB", False, True, False)
mma_ABt = _make("mma_ABt", False, False, True)
mm_ABt = _make("mm_ABt", False, False, False)
mma_AtB = _make("mma_AtB", True, True, True)
mm_AtB = _make("mm_AtB", True, True, False)
mma_AtBt = _make("mma_AtBt", True, False, True)
mm_AtBt = _make("mm_AtBt", True, False, False)


def mma_async_wait(pending: int = 0):
    """Wait until at most `pending` committed warpgroup MMAs are in flight (each MMA op is one group; they
    complete in order): the results of all but the newest `pending` may be read."""
    if not isinstance(pending, int) or not 0 <= pending <= 7:
        fail(f"mma_async_wait: pending must be an int in 0..7, got {pending!r}")
    ctx = current()
    # Each wgmma op is one commit group and groups retire in order: all but the newest `pending` are done.
    remaining = ctx.wgmma_groups[len(ctx.wgmma_groups) - pending:] if pending else []
    retired = tuple(a for a in ctx.pending_wgmma if all(a is not d for d, _, _ in remaining))
    ctx.wgmma_groups[:] = remaining
    ctx.pending_wgmma.clear()
    ctx.pending_wgmma_reads.clear()
    for d, loc, register_a in remaining:
        ctx.pending_wgmma[d] = loc
        if register_a is not None:
            ctx.pending_wgmma_reads[register_a] = loc
    return emit("wgmma_wait", *retired, pending=pending)   # the accumulators it makes readable
