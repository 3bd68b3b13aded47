"""Declaring tiles and vectors inside a kernel: tk.rt, tk.rv, tk.st, tk.sv, tk.col_vec, tk.row_vec."""
from __future__ import annotations

from ..frontend.context import current
from ..ir.core import Var
from ..ir.expr import Expr, render
from ..tiles.dtypes import DType
from ..tiles.types import RT, RV, ST, SV
from ._checks import fail, register_tile
from ..errors import TraceError
from ..frontend.context import user_loc


def _make(cls, *args, **kw):
    for a in args:
        if isinstance(a, Expr):
            fail(f"a tile's shape is Python ints, fixed when the kernel is compiled (its registers or shared memory "
                 f"are); `{render(a)}` is a runtime value: size tiles by static dims or tk.constexpr arguments, and "
                 "loop over pieces of a runtime extent with tk.range")
    try:
        return cls(*args, **kw)
    except (TypeError, ValueError) as e:
        raise TraceError(str(e), user_loc()) from None


def _named(var: Var, name: str | None, what: str) -> Var:
    """`var` named `name` in the generated C++ (made unique with the kernel's other names), where no Python
    variable of the kernel's own gives it one (e.g. a tile declared in a helper function)."""
    if name is not None:
        if not (isinstance(name, str) and name.isidentifier()):
            fail(f"{what} needs an identifier for a name, got {name!r}")
        var.name = name
    return var


def rt(dtype: DType, rows: int, cols: int, layout: str = "row", name: str | None = None) -> Var:
    """A register tile: each warp holds its own `rows x cols` tile (multiples of 16). `name`: see _named."""
    return _named(current().declare(_make(RT, dtype, rows, cols, layout), "t"), name, "tk.rt")


def rv(dtype: DType, length: int, layout: str = "ortho", name: str | None = None) -> Var:
    """A register vector of `length` values in the given layout (see tkpy.tiles.layouts). `name`: see _named."""
    return _named(current().declare(_make(RV, dtype, length, layout), "v"), name, "tk.rv")


def st(dtype: DType, rows: int, cols: int, count: int = 1, swizzle: int = -1, name: str | None = None) -> Var:
    """A shared tile (one per block), or an array of `count` of them indexed as s[i].
    The swizzle (0/32/64/128 bytes) is chosen from the row width unless given. `name`: see _named."""
    if not isinstance(count, int) or count < 1:
        fail(f"st count must be a positive int, got {count!r}")
    return _named(current().declare(_make(ST, dtype, rows, cols, swizzle), "s", count), name, "tk.st")


def sv(dtype: DType, length: int, count: int = 1, name: str | None = None) -> Var:
    """A shared vector (one per block), or an array of `count`. `name`: see _named."""
    return _named(current().declare(_make(SV, dtype, length), "sv", count), name, "tk.sv")


def col_vec(tile, dtype: DType | None = None, name: str | None = None) -> Var:
    """A vector with one value per row of `tile` (what row_max produces, what sub_row consumes)."""
    t = register_tile(tile, "col_vec")
    return _named(current().declare(t.type.col_vec(dtype), "v"), name, "tk.col_vec")


def row_vec(tile, dtype: DType | None = None, name: str | None = None) -> Var:
    """A vector with one value per column of `tile` (what col_max produces, what sub_col consumes)."""
    t = register_tile(tile, "row_vec")
    return _named(current().declare(t.type.row_vec(dtype), "v"), name, "tk.row_vec")
