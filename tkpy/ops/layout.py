"""Changing how a register tile is held: swap_layout (same matrix, other layout) and transpose; swap_pairs (each
row's elements 2i and 2i + 1 trade places, of a tile or a contig vector)."""
from __future__ import annotations

from ..tiles.types import RV
from ._checks import describe, emit, fail, register_operand, register_tile


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


def swap_pairs(dst, src):
    """dst[..., 2i] = src[..., 2i + 1] and dst[..., 2i + 1] = src[..., 2i]: the neighbours of each even column trade
    places (dtype converted), within each lane's registers: of a row-layout tile (a lane holds columns 2i and 2i + 1
    of a row) or a contig vector (a lane's values k and k + 1); no shuffles. For pairs stored interleaved, (re, im)
    as complex numbers or GPT-J's rotary pairs: `out = x * cos + swap_pairs(x) * sin` with the sign alternating in
    sin rotates each pair (tk.rotate_half(..., interleaved=True) folds the sign in). dst may be src."""
    d, s = register_operand(dst, "swap_pairs destination"), register_operand(src, "swap_pairs source")
    if isinstance(d.type, RV) or isinstance(s.type, RV):
        if not (isinstance(d.type, RV) and isinstance(s.type, RV)) or d.type.length != s.type.length:
            fail(f"swap_pairs: {describe(d)} <- {describe(s)}: both must be vectors of one length, or tiles")
        if d.type.layout != "contig" or s.type.layout != "contig":
            fail(f"swap_pairs: {describe(d)} <- {describe(s)}: vectors must be contig (tk.rv(dtype, n, \"contig\"), "
                 "whose lanes hold consecutive pairs)")
        return emit("swap_pairs", d, s)
    if (d.type.rows, d.type.cols) != (s.type.rows, s.type.cols):
        fail(f"swap_pairs: shapes differ: {describe(d)} vs {describe(s)}")
    if d.type.layout != "row" or s.type.layout != "row":
        fail(f"swap_pairs: {describe(d)} <- {describe(s)}: both must be row-layout tiles (a col-layout tile holds "
             "pairs of rows in a lane, not of columns); tk.swap_layout first")
    return emit("swap_pairs", d, s)
