"""Arithmetic that returns new tiles and vectors: `a + b`, `t - v`, `2 * t`, `-t`, `abs(t)`, `t ** 2`, `tk.exp(t)`,
`tk.max(a, b)`, beside the destination-first ops they lower to.

Each result is a temporary declared where the expression is evaluated. A vector operand of a
tile is broadcast by its layout: a vector in the layout of the tile's `col_vec` (one value per
row) applies along rows (`sub_row`), one in its `row_vec` layout along columns (`sub_col`).
Inside a tk.map function the same calls build map expressions instead.
"""
from __future__ import annotations

from ..frontend.context import current
from ..ir.core import BROADCAST_FNS, Var, tile_syntax
from ..tiles.dtypes import f32
from ..tiles.types import RT, RV
from ._checks import compatible, describe, emit, fail, register_operand, scalar
from .maps import MapExpr, lift, map as map_op, power

_DUNDERS = {"add": ("add", False), "radd": ("add", True), "sub": ("sub", False), "rsub": ("sub", True),
            "mul": ("mul", False), "rmul": ("mul", True), "truediv": ("div", False), "rtruediv": ("div", True)}
_COMMUTATIVE = ("add", "mul", "max", "min")


@tile_syntax("operator")
def apply(dunder: str, x: Var, *other):
    """The arithmetic dunders of tile variables (`x + y` is apply('add', x, y))."""
    if dunder in ("neg", "abs"):
        return unary_value(dunder, x)
    if dunder in ("pow", "rpow"):
        (y,) = other
        return power_value(y, x) if dunder == "rpow" else power_value(x, y)
    fn, reflected = _DUNDERS[dunder]
    (y,) = other
    return binary_value(fn, y, x) if reflected else binary_value(fn, x, y)


def unary_value(fn: str, x):
    """fn(x) as a new tile or vector (or a map expression)."""
    if isinstance(x, MapExpr):
        if fn == "copy":
            return x
        return MapExpr(fn, (x,))
    src = register_operand(x, fn)
    out = temporary(src.type)
    emit("unary", out, src, fn=fn)
    return out


def binary_value(fn: str, a, b):
    """fn(a, b) as a new tile or vector (or a map expression); either side may be a scalar."""
    if isinstance(a, MapExpr) or isinstance(b, MapExpr):
        return MapExpr(fn, (lift(a), lift(b)))
    a_reg, b_reg = _is_register(a), _is_register(b)
    if not a_reg and not b_reg:
        fail(f"{fn}: expected a tile or vector operand, got {describe(a)} and {describe(b)}")
    if not a_reg:                               # scalar op x
        if fn in _COMMUTATIVE:
            return binary_value(fn, b, a)
        b = register_operand(b, f"{fn} second operand")
        out = temporary(b.type)
        emit("fill", out, scalar(a, f"{fn} first operand"))
        emit("binary", out, out, b, fn=fn)
        return out
    a = register_operand(a, f"{fn} first operand")
    if not b_reg:                               # x op scalar
        out = temporary(a.type)
        emit("binary", out, a, scalar(b, f"{fn} second operand"), fn=fn)
        return out
    b = register_operand(b, f"{fn} second operand")
    if type(a.type) is type(b.type):            # tile op tile, vector op vector
        compatible(a, b, fn)
        out = temporary(a.type, a.type.dtype if a.type.dtype == b.type.dtype else f32)
        emit("binary", out, a, b, fn=fn)
        return out
    if isinstance(a.type, RV):                  # vector op tile
        if fn in _COMMUTATIVE:
            return binary_value(fn, b, a)
        out = temporary(b.type)
        emit(f"broadcast_{_axis(b, a, fn)}", out, a)
        emit("binary", out, out, b, fn=fn)
        return out
    axis = _axis(a, b, fn)                      # tile op vector
    if fn not in BROADCAST_FNS:
        fail(f"{fn}: a tile and a vector combine with {', '.join(BROADCAST_FNS)} only; "
             f"got {describe(a)} and {describe(b)}")
    out = temporary(a.type)
    emit("broadcast", out, a, b, fn=fn, axis=axis)
    return out


def power_value(base, exponent):
    """base ** exponent as a new tile or vector (tk.pow, `**`): a map of maps.power over the tile operands (the
    other a scalar, or a tile or vector of the first's shape; a vector of a tile broadcast as in tk.map)."""
    if isinstance(base, MapExpr) or isinstance(exponent, MapExpr):
        return power(base, exponent)
    tiles = [register_operand(x, "pow operand") for x in (base, exponent) if _is_register(x)]
    if not tiles:
        fail(f"pow: expected a tile or vector operand, got {describe(base)} and {describe(exponent)}")
    shape = next((t for t in tiles if isinstance(t.type, RT)), tiles[0])
    out = temporary(shape.type, None if len({t.type.dtype for t in tiles}) == 1 else f32)
    if len(tiles) == 2:
        map_op(out, power, *tiles)
    elif _is_register(base):
        map_op(out, lambda x: power(x, exponent), *tiles)
    else:
        map_op(out, lambda y: power(base, y), *tiles)
    return out


def _is_register(x) -> bool:
    return isinstance(x, Var) or hasattr(x, "type")


def _axis(tile, vec, fn: str) -> str:
    """'row' if vec holds one value per row of tile (its col_vec layout), 'col' if one per column."""
    t = tile.type
    for axis, want in (("row", t.col_vec()), ("col", t.row_vec())):
        if (vec.type.layout, vec.type.length) == (want.layout, want.length):
            return axis
    fail(f"{fn}: {describe(vec)} is neither one value per row of {describe(tile)} (rv<{t.rows}, "
         f"{t.col_vec().layout}>, tk.col_vec) nor one per column (rv<{t.cols}, {t.row_vec().layout}>, "
         "tk.row_vec); convert it with tk.copy")


def temporary(type_, dtype=None) -> Var:
    if dtype is not None and dtype != type_.dtype:
        type_ = type_.with_(dtype=dtype) if isinstance(type_, RT) else RV(dtype, type_.length, type_.layout)
    var = current().declare(type_, "t" if isinstance(type_, RT) else "v")
    var.value = True
    return var
