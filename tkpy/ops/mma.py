"""Warp-level tensor-core matrix multiply (mma.sync.m16n8k16), ThunderKittens' mma_AB family.

mma.sync takes A as row-major fragments (the row layout of an M x K tile) and B as column-major
ones (the col layout of a K x N tile). A col-layout K x M tile holds exactly the registers of
the row-layout M x K tile it is the transpose of (tkpy/tiles/layouts.py: the col layout is the
transpose of the row layout), so a transposed operand is passed as-is in the other layout:

    mma_AB   d = a @ b       a: M x K row   b: K x N col
    mma_ABt  d = a @ b^T     a: M x K row   b: N x K row
    mma_AtB  d = a^T @ b     a: K x M col   b: K x N col
    mma_AtBt d = a^T @ b^T   a: K x M col   b: N x K row

c and d are M x N fp32 row-layout tiles; a and b are bf16 or fp16 (the same); d may be c.
"""
from __future__ import annotations

from ..tiles.dtypes import FP8_DTYPES, MMA_INPUT_DTYPES, f32
from ._checks import describe, emit, fail, register_tile


def _mma(name: str, trans_a: bool, trans_b: bool):
    a_layout, b_layout = ("col" if trans_a else "row"), ("row" if trans_b else "col")
    a_shape, b_shape = ("K x M" if trans_a else "M x K"), ("N x K" if trans_b else "K x N")

    def op(d, a, b, c):
        d, a, b, c = (register_tile(x, f"{name} {n}") for x, n in ((d, "d"), (a, "a"), (b, "b"), (c, "c")))
        at, bt, ct, dt = a.type, b.type, c.type, d.type
        if at.dtype in FP8_DTYPES or bt.dtype in FP8_DTYPES:
            fail(f"{name}: warp mma.sync (m16n8k16) takes bf16/fp16, not fp8; got {describe(a)}, {describe(b)}; "
                 "fp8 products run on tk.warpgroup.mma_ABt (wgmma) from shared tiles, or convert the tiles "
                 "with tk.copy")
        if at.dtype not in MMA_INPUT_DTYPES or bt.dtype != at.dtype:
            fail(f"{name}: a and b must both be bf16 or both fp16; got {describe(a)}, {describe(b)}")
        if dt.dtype != f32 or ct.dtype != f32:
            fail(f"{name}: c and d accumulate in f32; got {describe(c)}, {describe(d)}")
        for x, want, shape, what in ((a, a_layout, a_shape, "a"), (b, b_layout, b_shape, "b")):
            if x.type.layout != want:
                fail(f"{name}: {what} must be in {want} layout ({shape}; declare it with tk.rt(..., layout='{want}') "
                     f"or convert it with tk.swap_layout); got {describe(x)}")
        if dt.layout != "row" or ct.layout != "row":
            fail(f"{name}: c and d must be in row layout; got {describe(c)}, {describe(d)}")
        m, k = (at.cols, at.rows) if trans_a else (at.rows, at.cols)
        kb, n = (bt.cols, bt.rows) if trans_b else (bt.rows, bt.cols)
        if k != kb:
            fail(f"{name}: inner dimensions differ: a is {at.rows}x{at.cols} ({a_shape}), "
                 f"b is {bt.rows}x{bt.cols} ({b_shape})")
        if (dt.rows, dt.cols) != (m, n) or (ct.rows, ct.cols) != (m, n):
            fail(f"{name}: d and c must be {m}x{n} (a {at.rows}x{at.cols} as {a_shape}, b {bt.rows}x{bt.cols} "
                 f"as {b_shape}); got {describe(d)}, {describe(c)}")
        return emit("mma", d, a, b, c, trans_a=trans_a, trans_b=trans_b)
    op.__name__ = name
    op.__doc__ = (f"d = {'a^T' if trans_a else 'a'} @ {'b^T' if trans_b else 'b'} + c with a {a_shape} in "
                  f"{a_layout} layout and b {b_shape} in {b_layout} layout (see the module docstring).")
    return op


mma_AB = _mma("mma_AB", False, False)
mma_ABt = _mma("mma_ABt", False, True)
mma_AtB = _mma("mma_AtB", True, False)
mma_AtBt = _mma("mma_AtBt", True, True)
