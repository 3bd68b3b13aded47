"""Changing how a register tile is held: swap_layout (same matrix, other layout) and transpose."""
from __future__ import annotations

from ._checks import describe, emit, fail, register_tile


def swap_layout(dst, src):
    """dst = src held in the other layout (row <-> col), converting the dtype if dst's differs.

    A row-layout tile is what mma takes as A (and Bt), a col-layout one what it takes as B (and At):
    16-bit tiles swap with `movmatrix`, fp32 ones with warp shuffles.
    """
    d, s = register_tile(dst, "swap_layout destination"), register_tile(src, "swap_layout source")
    if (d.type.rows, d.type.cols) != (s.type.rows, s.type.cols):
        fail(f"swap_layout: shapes differ: {describe(d)} vs {describe(s)}")
    if d.type.layout == s.type.layout:
        fail(f"swap_layout: {describe(d)} must be in the other layout than {describe(s)}; "
             "use tk.copy to copy within a layout")
    return emit("swap_layout", d, s)


def transpose(dst, src):
    """dst = src^T: a rows x cols tile becomes cols x rows in the same layout (dtype converted).

    dst may be src when the tile is square.
    """
    d, s = register_tile(dst, "transpose destination"), register_tile(src, "transpose source")
    if (d.type.rows, d.type.cols) != (s.type.cols, s.type.rows):
        fail(f"transpose: {describe(d)} must be {s.type.cols}x{s.type.rows}, the transpose of {describe(s)}")
    if d.type.layout != s.type.layout:
        fail(f"transpose: layouts differ: {describe(d)} vs {describe(s)}; transpose keeps the layout "
             "(tk.swap_layout changes it)")
    return emit("transpose", d, s)
