"""Masks by element position, as ThunderKittens names them: dst = src where kept, `val` elsewhere.

Positions are the tile's own (row, col); offsets such as a query block's distance from a key
block go into `diagonal` / `row` / `col`, which may be runtime values:

    make_causal(dst, src, val)      keep col <= row            make_causal_t   keep col >= row
    tril(dst, src, diagonal, val)   keep col <= row + diagonal triu            keep col >= row + diagonal
    tril_periodic(dst, src, first_row, period, diagonal, val)
                                    keep col <= (first_row + row) % period + diagonal
    right_fill(dst, src, col, val)  fill columns >= col        left_fill       fill columns < col
    index_fill(dst, src, col, val)  fill column col only
                                    (the three also of register vectors, by index)
    lower_fill(dst, src, row, val)  fill rows >= row           upper_fill      fill rows < row

and attention's masks of a tile of scores: mask_scores(scores, first_key, keys, first_row=None), -inf for the keys
past the last and (causal) past each row's diagonal, each applied only where the tile crosses it.
"""
from __future__ import annotations

import math

from ..frontend.control import if_
from ..tiles.dtypes import f32
from ..tiles.types import RV
from ._checks import describe, emit, fail, register_tile, register_vector, scalar


VECTOR_MASKS = ("right_fill", "left_fill", "index_fill")   # (by index: a vector is one row)


def _operands(dst, src, what: str):
    if what in VECTOR_MASKS and isinstance(getattr(src, "type", None), RV):
        d, s = register_vector(dst, f"{what} destination"), register_vector(src, f"{what} source")
    else:
        d, s = register_tile(dst, f"{what} destination"), register_tile(src, f"{what} source")
    if (d.type.rows, d.type.cols, d.type.layout) != (s.type.rows, s.type.cols, s.type.layout):
        fail(f"{what}: {describe(d)} and {describe(s)} differ in shape or layout")
    return d, s


def _mask(kind: str, dst, src, val, **indices):
    """The mask op `kind` with its integer operands `indices` (by name, in order) and fill value `val`."""
    d, s = _operands(dst, src, kind)
    extra = []
    for name, x in indices.items():
        e = scalar(x, f"{kind} {name}")
        if e.dtype == f32:
            fail(f"{kind}: {name} must be an integer, got a float")
        extra.append(e)
    return emit("mask", d, s, *extra, scalar(val, f"{kind} value"), kind=kind)


def make_causal(dst, src, val=0.0):
    """dst = src on and below the diagonal (col <= row), `val` above it."""
    return _mask("make_causal", dst, src, val)


def make_causal_t(dst, src, val=0.0):
    """dst = src on and above the diagonal (col >= row), `val` below it."""
    return _mask("make_causal_t", dst, src, val)


def tril(dst, src, diagonal=0, val=0.0):
    """dst = src where col <= row + diagonal, `val` elsewhere."""
    return _mask("tril", dst, src, val, diagonal=diagonal)


def tril_periodic(dst, src, first_row, period, diagonal=0, val=0.0):
    """dst = src where col <= (first_row + row) % period + diagonal, `val` elsewhere: tril for rows that stack
    several sequences of `period` rows each (a tile's row `row` is row first_row + row of the stack), each masked by
    its own position, as attention's query heads packed into one sequence. first_row >= 0 and period >= 1."""
    return _mask("tril_periodic", dst, src, val, first_row=first_row, period=period, diagonal=diagonal)


def triu(dst, src, diagonal=0, val=0.0):
    """dst = src where col >= row + diagonal, `val` elsewhere."""
    return _mask("triu", dst, src, val, diagonal=diagonal)


def right_fill(dst, src, col, val=0.0):
    """dst = src left of column `col`, `val` from it on. Also of register vectors: the values at indices below
    `col` kept, the others `val` (e.g. a row's elements past its end in the last vector of it)."""
    return _mask("right_fill", dst, src, val, col=col)


def left_fill(dst, src, col, val=0.0):
    """dst = src from column `col` on, `val` left of it. Also of register vectors, by index."""
    return _mask("left_fill", dst, src, val, col=col)


def index_fill(dst, src, col, val=0.0):
    """dst = src but for column `col`, which is `val` (nothing where `col` is outside the tile). Also of register
    vectors: the value at index `col` replaced, e.g. a row's target class in a cross-entropy's gradient, whose
    piece of the row this vector may or may not hold (an index past it changes nothing)."""
    return _mask("index_fill", dst, src, val, col=col)


def lower_fill(dst, src, row, val=0.0):
    """dst = src above row `row`, `val` from it on."""
    return _mask("lower_fill", dst, src, val, row=row)


def upper_fill(dst, src, row, val=0.0):
    """dst = src from row `row` on, `val` above it."""
    return _mask("upper_fill", dst, src, val, row=row)


def mask_scores(scores, first_key, keys, first_row=None) -> None:
    """Attention's masks, in place, on a register tile of scores whose row r is query first_row + r and column c key
    first_key + c: -inf for keys at or past `keys` (the sequence's length), and with `first_row` (causal, top-left:
    query i sees keys j <= i) for keys past each row's diagonal. Each is a run-time branch taken only where the tile
    crosses the last key or a diagonal, so most tiles pay a comparison."""
    width = register_tile(scores, "mask_scores").type.cols
    if first_row is not None:
        diagonal = first_row - first_key
        with if_(diagonal < width - 1):
            tril(scores, scores, diagonal, -math.inf)
    with if_(first_key + width > keys):
        right_fill(scores, scores, keys - first_key, -math.inf)
