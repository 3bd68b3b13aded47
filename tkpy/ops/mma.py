"""Warp-level tensor-core matrix multiply (mma.sync.m16n8k16), ThunderKittens' mma_AB family."""
from __future__ import annotations

from ..tiles.dtypes import MMA_INPUT_DTYPES, f32
from ._checks import describe, emit, fail, register_tile


def mma_AB(d, a, b, c):
    """d = a @ b + c with a (M x K, row layout), b (K x N, col layout), c and d (M x N, fp32, row layout).

    a and b are bf16 or fp16 (the same); accumulation is in fp32. d may be c.
    """
    d, a, b, c = (register_tile(x, f"mma_AB {n}") for x, n in ((d, "d"), (a, "a"), (b, "b"), (c, "c")))
    at, bt, ct, dt = a.type, b.type, c.type, d.type
    if at.dtype not in MMA_INPUT_DTYPES or bt.dtype != at.dtype:
        fail(f"mma_AB: a and b must both be bf16 or both fp16; got {describe(a)}, {describe(b)}")
    if dt.dtype != f32 or ct.dtype != f32:
        fail(f"mma_AB: c and d accumulate in f32; got {describe(c)}, {describe(d)}")
    if at.layout != "row":
        fail(f"mma_AB: a must be in row layout; got {describe(a)}")
    if bt.layout != "col":
        fail(f"mma_AB: b must be in col layout (load it with tk.rt(..., layout='col')); got {describe(b)}")
    if dt.layout != "row" or ct.layout != "row":
        fail(f"mma_AB: c and d must be in row layout; got {describe(c)}, {describe(d)}")
    if at.cols != bt.rows:
        fail(f"mma_AB: inner dimensions differ: a is {at.rows}x{at.cols}, b is {bt.rows}x{bt.cols}")
    if (dt.rows, dt.cols) != (at.rows, bt.cols) or (ct.rows, ct.cols) != (dt.rows, dt.cols):
        fail(f"mma_AB: d and c must be {at.rows}x{bt.cols} (a {at.rows}x{at.cols} @ b {bt.rows}x{bt.cols}); "
             f"got {describe(d)}, {describe(c)}")
    return emit("mma", d, a, b, c, trans_a=False, trans_b=False)
