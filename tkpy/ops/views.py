"""Subtiles: windows of register and shared tiles that ops read and write in place.

`t.subtile(rows, cols, (r, c))` (or `tk.subtile(t, ...)`) is the rows x cols window at
coordinates (r, c), in units of the window, as ThunderKittens' `subtile_inplace` and
`st::subtile`; slicing (`t[16:32]`, `s[0:32, 64:128]`) names the same windows in elements.

- Register tiles: whole rows, or any columns of a 16-row window (either way a contiguous run of
  base tiles, so the window aliases their registers: e.g. a piece of a wgmma accumulator), at a
  trace-time coordinate.
- Shared tiles: any window whose rows are a multiple of 16 and, for a swizzled tile, whose
  columns are a multiple of the swizzle panel; the coordinate may be a runtime value. Such a
  window starts on a whole swizzle atom and panel, so it keeps the viewed tile's address function.
- Shared vectors: `v.subvec(length, i)` (or `tk.subvec`, `v[64:128]`), the `length` elements at index `i` in
  units of the window (a multiple of 16 elements, as an sv's length; `i` may be a runtime value), as
  ThunderKittens' `subvec`: e.g. a band of a step's per-row statistics loaded by one TMA copy.
"""
from __future__ import annotations

from ..frontend.context import current, user_loc
from ..ir.core import Decl, SharedRef, Var, View, tile_syntax
from ..ir.expr import Const
from ..tiles.types import RT, ST, SV
from ._checks import describe, fail, operand, scalar


@tile_syntax("subtile")
def subtile(tile, rows: int, cols: int, coord=(0, 0)) -> Var:
    """The rows x cols window at `coord` (units of the window) of a register or shared tile."""
    base = operand(tile, "subtile")
    t = base.type
    if not isinstance(t, (RT, ST)):
        fail(f"subtile: expected a register or shared tile, got {describe(base)}")
    if not (isinstance(coord, (tuple, list)) and len(coord) == 2):
        fail(f"subtile: the coordinate is (row, col) in units of the subtile, got {coord!r}")
    r, c = (scalar(x, "subtile coordinate") for x in coord)
    for n, full, what in ((rows, t.rows, "rows"), (cols, t.cols, "cols")):
        if not isinstance(n, int) or n <= 0 or n % 16 or n > full:
            fail(f"subtile: {what} must be a positive multiple of 16 up to the tile's {full}, got {n!r}")
    for x, n, full, what in ((r, rows, t.rows, "row"), (c, cols, t.cols, "col")):
        if isinstance(x, Const) and not 0 <= x.value * n <= full - n:
            fail(f"subtile: {what} coordinate {x.value} puts the {rows}x{cols} window outside {describe(base)}")
    if isinstance(t, RT):
        view_type = _register_view(t, rows, cols, r, c)
    else:
        view_type = _shared_view(t, rows, cols)
    return _declare(view_type, base, r, c)


@tile_syntax("subvec")
def subvec(vector, length: int, index=0) -> Var:
    """The `length` elements at `index` (in units of the window: elements index * length on) of a shared vector."""
    base = operand(vector, "subvec")
    t = base.type
    if not isinstance(t, SV):
        fail(f"subvec: expected a shared vector, got {describe(base)} (tiles take subtile)")
    if not isinstance(length, int) or isinstance(length, bool) or length <= 0 or length % 16 or length > t.length:
        fail(f"subvec: length must be a positive multiple of 16 up to the vector's {t.length}, got {length!r}")
    i = scalar(index, "subvec index")
    if isinstance(i, Const) and not 0 <= i.value * length <= t.length - length:
        fail(f"subvec: index {i.value} puts the {length}-element window outside {describe(base)}")
    return _declare(SV(t.dtype, length), base, scalar(0, "subvec row"), i)


@tile_syntax("slice")
def slice_tile(tile, index) -> Var:
    """`t[r0:r1]` or `t[r0:r1, c0:c1]` (static, in elements): the subtile that range covers; `v[i0:i1]` of a shared
    vector its subvec."""
    base = operand(tile, "subtile")
    t = base.type
    if isinstance(t, SV) and isinstance(index, slice):
        return subvec(base, *_window(index, t.length, "subvec: the", ""))
    index = index if isinstance(index, tuple) else (index,)
    if len(index) > 2 or not all(isinstance(s, slice) for s in index):
        fail(f"{describe(tile)} is indexed by one or two slices of static ints, a subtile (t[16:32], t[0:16, 32:64]); "
             f"got [{', '.join(map(str, index))}]: a tile's elements are not addressable one by one (tk.map computes "
             "each, tk.fill sets them all, the masks tk.tril / tk.right_fill / ... those past a boundary)")
    index = index + (slice(None),) * (2 - len(index))
    (rows, r), (cols, c) = (_window(s, full, f"subtile: the {what}", " (a subtile coordinate)")
                            for s, full, what in zip(index, (t.rows, t.cols), ("rows", "cols")))
    return subtile(base, rows, cols, (r, c))


def _window(s: slice, full: int, what: str, why: str) -> tuple:
    """(length, index in units of the length) of the static slice `s` of `full` elements."""
    start, stop, step = s.indices(full)
    n = stop - start
    if step != 1 or n <= 0 or start % n:
        fail(f"{what} slice {start}:{stop} must be a step-1 range starting at a multiple of its length{why}")
    return n, start // n


def _register_view(t: RT, rows: int, cols: int, r, c) -> RT:
    if cols != t.cols and rows != 16:
        fail(f"subtile: a register subtile takes whole rows ({t.cols} columns here, as ThunderKittens' "
             f"subtile_inplace), or columns of one 16-row band, so that it aliases a contiguous run of the "
             f"tile's registers; got {rows}x{cols}")
    if not (isinstance(r, Const) and isinstance(c, Const)):
        fail("subtile: a register subtile's coordinate must be known at trace time (registers cannot be indexed "
             "at run time); use a Python int")
    return t.with_(rows=rows, cols=cols)


def _shared_view(t: ST, rows: int, cols: int) -> ST:
    if t.swizzle and cols % t.panel_cols:
        fail(f"subtile: a window of a {t.swizzle}-byte swizzled tile must span whole swizzle panels "
             f"({t.panel_cols} columns of {t.dtype}) to keep its address function; got {cols} columns")
    return ST(t.dtype, rows, cols, t.swizzle)


def _declare(view_type, base, r, c) -> Var:
    root = base.var if isinstance(base, SharedRef) and base.index is None else base
    loc = user_loc()
    ctx = current()
    var = Var(ctx.fresh_name("sub"), view_type, loc, view=View(root, r, c))
    ctx.emit(Decl(var, loc))
    return var
