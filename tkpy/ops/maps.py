"""Generic elementwise maps (`tk.map`) and filling a tile from a vector (`broadcast_row/col`)."""
from __future__ import annotations

import math

from ..errors import TraceError
from ..ir.core import SharedRef, Var
from ..ir.expr import Const, Sym, Traced, as_expr, render
from ..tiles.dtypes import f32
from ..tiles.types import RT, RV, SV
from ._checks import compatible, describe, emit, fail, operand, register_operand, register_tile, register_vector
from .reduce import vector_for

PYTHON_INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/"}
_PRECEDENCE = {"add": 1, "sub": 1, "mul": 2, "div": 2, "neg": 3}


class MapExpr(Traced):
    """An elementwise function of a map's operands, recorded by calling the lambda given to `tk.map`
    on placeholders. Nodes: `arg` (operand i), `scalar` (a Python number or runtime scalar), and the
    elementwise functions (`fn` as in the unary / binary ops): add, sub, mul, div and neg built with
    + - * / and unary minus; exp, exp2, log, log2, abs, relu, neg, max, min with tk.exp(...) etc.; the math
    functions sqrt, rsqrt, sigmoid, tanh, tanh_approx, log1p, erf (tk.sqrt(...) etc.), pow (tk.pow, `**`) and
    powi (`x ** n` for an integer constant n, its `param`); exp2_emulated (tk.exp2(x, emulated=...)), whose
    `param` is how many elements of 8 take the software exp2 and which depends on the element's number
    (`uses_element`). Python's math, numpy and torch functions refuse it (Traced)."""

    __slots__ = ("fn", "args", "param")

    def __init__(self, fn: str, args: tuple, param: int | None = None):
        self.fn, self.args, self.param = fn, args, param

    def _binary(fn: str, reflected: bool = False):  # noqa: N805 - builds the dunders below
        def op(self, other):
            a, b = (lift(other), self) if reflected else (self, lift(other))
            return MapExpr(fn, (a, b))
        return op

    __add__, __radd__ = _binary("add"), _binary("add", True)
    __sub__, __rsub__ = _binary("sub"), _binary("sub", True)
    __mul__, __rmul__ = _binary("mul"), _binary("mul", True)
    __truediv__, __rtruediv__ = _binary("div"), _binary("div", True)
    del _binary

    def __neg__(self):
        return MapExpr("neg", (self,))

    def __abs__(self):
        return MapExpr("abs", (self,))

    def __pow__(self, exponent):
        return power(self, exponent)

    def __rpow__(self, base):
        return power(base, self)

    __bool__ = Traced._bool
    __lt__ = __le__ = __gt__ = __ge__ = Traced._compare

    def precedence(self, infix) -> int:
        """Binding strength when rendered: infix operators, unary minus, or a leaf / call (4)."""
        return _PRECEDENCE[self.fn] if self.fn in infix or self.fn == "neg" else 4

    def render(self, arg, scalar, call, infix) -> str:
        """Text of the expression: `arg(i)`, `scalar(expr)` and `call(fn, texts)` render leaves and calls;
        the functions in `infix` (fn -> symbol) and negation are operators, parenthesised so that the
        text evaluates in the order it was built (fp addition does not reassociate)."""
        if self.fn == "arg":
            return arg(self.args[0])
        if self.fn == "scalar":
            e = self.args[0]
            text = scalar(e)
            return text if isinstance(e, Sym) or (isinstance(e, Const) and e.value >= 0) else f"({text})"
        texts = [a.render(arg, scalar, call, infix) for a in self.args]
        p = self.precedence(infix)
        if p == 4:
            return call(self.fn, texts + ([] if self.param is None else [str(self.param)]))
        last = len(texts) - 1
        texts = [f"({t})" if a.precedence(infix) < p or (i == last and a.precedence(infix) == p) else t
                 for i, (a, t) in enumerate(zip(self.args, texts))]
        return f"-{texts[0]}" if self.fn == "neg" else f"{texts[0]} {infix[self.fn]} {texts[1]}"

    def uses_element(self) -> bool:
        """Whether the value depends on which element of a lane it is computed for (exp2_emulated)."""
        return self.fn == "exp2_emulated" or any(isinstance(a, MapExpr) and a.uses_element() for a in self.args)

    def functions(self) -> set:
        """The elementwise functions the expression computes (its nodes' fn, but for arguments and scalars)."""
        if self.fn in ("arg", "scalar"):
            return set()
        return {self.fn}.union(*(a.functions() for a in self.args))

    def scalars(self) -> list:
        """The runtime scalar leaves (what the generated lambda captures)."""
        if self.fn == "scalar":
            return [] if isinstance(self.args[0], Const) else [self.args[0]]
        if self.fn == "arg":
            return []
        return [s for a in self.args for s in a.scalars()]

    def __str__(self) -> str:
        return self.render(lambda i: f"x{i}", render, lambda fn, texts: f"{fn}({', '.join(texts)})", PYTHON_INFIX)

    __repr__ = __str__


def lift(x) -> MapExpr:
    """A map-expression operand: a MapExpr, or a scalar constant / runtime scalar."""
    if isinstance(x, MapExpr):
        return x
    if isinstance(x, Var) or hasattr(x, "type"):
        fail(f"inside a tk.map function only its arguments and scalars can be used, not {describe(x)}; "
             "pass the tile as another operand of tk.map")
    try:
        return MapExpr("scalar", (as_expr(x),))
    except TraceError:
        fail(f"inside a tk.map function, expected a number or runtime scalar, got {describe(x)}")


def power(base, exponent) -> MapExpr:
    """base ** exponent as a map expression (tk.pow, `**`), one of them a map expression. A constant exponent
    picks the function at trace time: an integer n is powi (square and multiply: x ** 2 is x * x, defined for
    every x), 0.5 sqrt and -0.5 rsqrt; another constant, a tile or a runtime scalar is pow (exp2(y * log2 x), NaN
    for x < 0: torch agrees but for integer y). A constant base b > 0 is exp2(y * log2 b) (2 ** y: exp2)."""
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool) and math.isfinite(exponent):
        x = lift(base)
        if exponent == int(exponent) and abs(exponent) < 2 ** 31:
            n = int(exponent)
            return x if n == 1 else MapExpr("powi", (x,), n)
        if exponent in (0.5, -0.5):
            return MapExpr("sqrt" if exponent > 0 else "rsqrt", (x,))
    if isinstance(base, (int, float)) and not isinstance(base, bool) and 0 < base < math.inf:
        y = lift(exponent)
        return MapExpr("exp2", (y if base == 2 else y * math.log2(base),))
    return MapExpr("pow", (lift(base), lift(exponent)))


def map(dst, fn, *srcs, private: bool = False):  # noqa: A001 - tk.map, as ThunderKittens' map
    """dst = fn(*srcs) elementwise, fn a Python function of the operands' elements (traced once on
    placeholders: + - * / ** abs(), tk.exp/exp2/log/log2/abs/relu/neg/max/min, the math functions
    tk.sqrt/rsqrt/sigmoid/tanh/pow/log1p/erf and scalars), computed in fp32.

        tk.map(p, lambda s, m: tk.exp2(s * scale - m), s, row_shift)

    The sources are tiles (or vectors) of dst's shape and layout; dtypes may differ. A source of a
    tile map may also be a vector, broadcast as sub_row / sub_col do: one of type tk.col_vec(dst) (one
    value per row, applied along each row: `row_shift` above) or tk.row_vec(dst) (one per column).
    The vector layouts tell the two apart, also for square tiles. On the GPU the function is one
    inlined lambda, so `s * scale - m` compiles to a single FFMA.

    `private=True`: dst an fp32 shared vector holding what tk.store(dst, v, private=True) wrote, updated in place
    (the first source is dst itself; the others fp32-convertible contig vectors of its length):

        tk.map(sums, lambda a, g, x: a + g * x, sums, g, xhat, private=True)

    four values at a time, read and written back in the lanes' own order, so that no register holds the whole
    vector (a warp's accumulator in shared memory)."""
    if private:
        return _map_private(dst, fn, srcs)
    d = register_operand(dst, "map destination")
    if not srcs:
        fail("map: give at least one source tile or vector after the function")
    sources = [register_operand(s, f"map source {i}") for i, s in enumerate(srcs)]
    for i, s in enumerate(sources):
        if isinstance(d.type, RT) and isinstance(s.type, RV):
            broadcast_operand(d, s, f"map source {i}")
        else:
            compatible(d, s, "map")
    if not callable(fn):
        fail(f"map: the second argument is the function to apply, got {describe(fn)}")
    body = lift(fn(*(MapExpr("arg", (i,)) for i in range(len(sources)))))
    return emit("map", d, *sources, fn=body)


def _map_private(dst, fn, srcs) -> None:
    """tk.map(sums, fn, sums, *vectors, private=True) (see map)."""
    d = operand(dst, "map destination")
    if not (isinstance(d.type, SV) and d.type.dtype == f32):
        fail(f"map(private=True) updates an fp32 shared vector in place, got {describe(d)}")
    first = operand(srcs[0], "map source 0") if srcs else None
    if not (isinstance(first, SharedRef) and isinstance(d, SharedRef) and first.var is d.var
            and str(first.index) == str(d.index)) and first is not d:
        fail("map(private=True): the first source is the destination itself (sums = fn(sums, ...)), got "
             f"{describe(first) if first is not None else 'no sources'}")
    vectors = [register_operand(s, f"map source {i + 1}") for i, s in enumerate(srcs[1:])]
    for i, v in enumerate(vectors):
        if not isinstance(v.type, RV) or v.type.layout != "contig" or v.type.length != d.type.length:
            fail(f"map(private=True) source {i + 1}: expected a contig vector of {d.type.length} values, got "
                 f"{describe(v)}")
    if not callable(fn):
        fail(f"map: the second argument is the function to apply, got {describe(fn)}")
    body = lift(fn(*(MapExpr("arg", (i,)) for i in range(len(srcs)))))
    if body.uses_element():
        fail("map(private=True) takes no function of the element's number (tk.exp2(x, emulated=...))")
    return emit("map_private", d, *vectors, fn=body)


def broadcast_operand(tile, vec, what: str) -> str:
    """The axis ('row' / 'col') along which vector `vec`, an operand of a map onto `tile`, is broadcast."""
    t = tile.type
    axis = t.broadcast_axis(vec.type)
    if axis is None:
        fail(f"{what}: {describe(vec)} is neither one value per row of {describe(tile)} (expected "
             f"rv<{t.rows}, {t.col_vec().layout}>: tk.col_vec) nor one per column (expected rv<{t.cols}, "
             f"{t.row_vec().layout}>: tk.row_vec); convert it with tk.copy")
    return axis


def _broadcast_vector(axis: str):
    def op(dst, vec):
        d = register_tile(dst, f"broadcast_{axis} destination")
        v = register_vector(vec, f"broadcast_{axis} vector")
        vector_for(d, v, axis, f"broadcast_{axis}")
        return emit(f"broadcast_{axis}", d, v)
    op.__name__ = f"broadcast_{axis}"
    op.__doc__ = (f"Set every {'row' if axis == 'row' else 'column'} of dst from a vector: dst[r][c] = "
                  f"vec[{'r' if axis == 'row' else 'c'}] (vec holds one value per {axis} of dst).")
    return op


broadcast_row, broadcast_col = _broadcast_vector("row"), _broadcast_vector("col")
