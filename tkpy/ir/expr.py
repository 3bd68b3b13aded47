"""Scalar expressions: indices, loop counters, scalar parameters.

Scalars are immutable expression trees. Arithmetic on them at trace time builds
a tree (folding constants); the IR printer and the C++ generator both render a
tree with `render`, so an index reads the same in both.
"""
from __future__ import annotations

import math
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Callable, Union

from ..errors import TraceError
from ..tiles.dtypes import DType, f32, i32

BOOL = DType("bool", 8, "bool", "bool", "bool", is_float=False)

_NEGATED = {"<": ">=", "<=": ">", ">": "<=", ">=": "<", "==": "!=", "!=": "=="}
_PRECEDENCE = {"||": 1, "&&": 2, "==": 3, "!=": 3, "<": 4, "<=": 4, ">": 4, ">=": 4,
               "+": 5, "-": 5, "*": 6, "/": 6, "%": 6}
PRODUCT_PRECEDENCE = _PRECEDENCE["*"] + 1     # a factor of a product rendered at this is parenthesized if it must be
UNARY_PRECEDENCE = max(_PRECEDENCE.values()) + 1  # ... and an operand of a cast or other unary operator
_FOLD = {"+": lambda a, b: a + b, "-": lambda a, b: a - b, "*": lambda a, b: a * b,
         "/": lambda a, b: a // b if isinstance(a, int) and isinstance(b, int) else a / b,
         "%": lambda a, b: a % b, "<": lambda a, b: a < b, "<=": lambda a, b: a <= b,
         ">": lambda a, b: a > b, ">=": lambda a, b: a >= b, "==": lambda a, b: a == b,
         "!=": lambda a, b: a != b, "&&": lambda a, b: a and b, "||": lambda a, b: a or b,
         "min": min, "max": max}


# What Python syntax on a traced value records or answers while a kernel is traced: on a tile variable `a + b`,
# `-t` ("operator": fn(dunder, tile, *other)), `t[16:32, :]` ("slice": fn(tile, index)) and `t.subtile(...)`
# ("subtile": fn(tile, rows, cols, coord)); on any traced value (Traced below) what Python's own functions ask of
# it ("foreign": fn(hook, value, args, kwargs)). The IR only holds the values; the op layer above it (tkpy.ops:
# operators.py, views.py, foreign.py) defines what the syntax means and installs it here with `tile_syntax`, so
# that the IR imports nothing from it.
TILE_SYNTAX: dict[str, Callable] = {}


def tile_syntax(name: str):
    """Decorator: install `fn` as what the syntax `name` ('operator', 'slice', 'subtile', 'subvec' or 'foreign')
    does."""
    def install(fn):
        TILE_SYNTAX[name] = fn
        return fn
    return install


def syntax(name: str) -> Callable:
    fn = TILE_SYNTAX.get(name)
    if fn is None:
        raise TraceError(f"tile {name} syntax records tkpy ops; import tkpy (tkpy.ops defines it)")
    return fn


class Traced:
    """What a traced value (a runtime scalar, a tile or vector, a global tensor, a map expression) answers when
    Python's own functions ask it for a number or an array: math.sqrt(x), float(x), int(x), range(x), round(x),
    numpy's functions (np.exp(x)) and torch's (torch.sigmoid(x)). It has none while the kernel is traced, so the
    op layer's "foreign" syntax refuses, naming the user's line and the tk function to use (tkpy/ops/foreign.py);
    numpy scalars' arithmetic (np.float32(2) * x) is the same Python operator's."""

    __slots__ = ()

    def _hook(name: str):  # noqa: N805 - builds the hooks below
        def hook(self, *args, **kwargs):
            return syntax("foreign")(name, self, args, kwargs)
        hook.__name__ = name
        return hook

    __float__, __int__, __complex__ = _hook("__float__"), _hook("__int__"), _hook("__complex__")
    __index__, __round__, __trunc__ = _hook("__index__"), _hook("__round__"), _hook("__trunc__")
    __floor__, __ceil__ = _hook("__floor__"), _hook("__ceil__")
    __array__, __array_ufunc__ = _hook("__array__"), _hook("__array_ufunc__")
    __array_function__ = _hook("__array_function__")
    __matmul__ = __rmatmul__ = _hook("__matmul__")
    __setitem__ = _hook("__setitem__")
    _bool = _hook("__bool__")               # for the classes that have no truth value (scalars, map expressions)
    _compare = _hook("comparison")          # for those that have no comparisons (tiles, map expressions)
    _attribute = _hook("attribute")         # (a missing attribute: the name; tiles' __getattr__)
    del _hook

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return syntax("foreign")("__torch_function__", None, (func, *args), kwargs or {})


class Expr(Traced):
    """Base of scalar expression nodes. Python operators build new nodes."""

    dtype: DType
    __hash__ = object.__hash__

    def __add__(self, o): return binary("+", self, o)
    def __radd__(self, o): return binary("+", o, self)
    def __sub__(self, o): return binary("-", self, o)
    def __rsub__(self, o): return binary("-", o, self)
    def __mul__(self, o): return binary("*", self, o)
    def __rmul__(self, o): return binary("*", o, self)
    def __floordiv__(self, o): return binary("/", self, o, integer=True)
    def __rfloordiv__(self, o): return binary("/", o, self, integer=True)
    def __truediv__(self, o): return binary("/", self, o, real=True)
    def __rtruediv__(self, o): return binary("/", o, self, real=True)
    def __mod__(self, o): return binary("%", self, o, integer=True)
    def __rmod__(self, o): return binary("%", o, self, integer=True)
    def __lt__(self, o): return binary("<", self, o)
    def __le__(self, o): return binary("<=", self, o)
    def __gt__(self, o): return binary(">", self, o)
    def __ge__(self, o): return binary(">=", self, o)
    def __eq__(self, o): return binary("==", self, o)  # type: ignore[override]
    def __ne__(self, o): return binary("!=", self, o)  # type: ignore[override]
    def __and__(self, o): return binary("&&", self, o)
    def __rand__(self, o): return binary("&&", o, self)
    def __or__(self, o): return binary("||", self, o)
    def __ror__(self, o): return binary("||", o, self)
    def __neg__(self): return binary("-", Const(0, self.dtype), self)

    def __invert__(self):
        """Logical not of a condition (`~cond`, as for torch's boolean masks): an integer comparison flipped
        (a >= b for a < b), otherwise `cond == false` (a float comparison is not flipped: NaN)."""
        if self.dtype != BOOL:
            raise TraceError(f"~ is the logical not of a condition; got a {self.dtype} value")
        if isinstance(self, BinOp) and self.op in _NEGATED and self.a.dtype == i32 and self.b.dtype == i32:
            return BinOp(_NEGATED[self.op], self.a, self.b, BOOL)
        return BinOp("==", self, Const(False, BOOL), BOOL)

    __bool__ = Traced._bool

    def __iter__(self):
        raise TraceError("a runtime scalar is not iterable")


@dataclass(eq=False, frozen=True)
class Const(Expr):
    value: Union[int, float, bool]
    dtype: DType


@dataclass(eq=False, frozen=True)
class Sym(Expr):
    """A named runtime scalar: a builtin (blockIdx.x, warpid), a parameter or a loop counter."""

    name: str
    dtype: DType


@dataclass(eq=False, frozen=True)
class BinOp(Expr):
    op: str
    a: Expr
    b: Expr
    dtype: DType


@dataclass(eq=False, frozen=True)
class Call(Expr):
    fn: str
    args: tuple
    dtype: DType


def as_expr(x) -> Expr:
    if isinstance(x, Expr):
        return x
    if isinstance(x, bool):
        return Const(x, BOOL)
    if isinstance(x, int):
        return Const(x, i32)
    if isinstance(x, float):
        return Const(x, f32)
    raise TraceError(f"expected a scalar (int, float or runtime scalar), got {type(x).__name__}")


def binary(op: str, a, b, *, integer: bool = False, real: bool = False) -> Expr:
    if not all(isinstance(x, (Expr, int, float)) for x in (a, b)):
        return NotImplemented  # e.g. scalar * tile: the tile's reflected operator builds the result
    a, b = as_expr(a), as_expr(b)
    if op in ("&&", "||"):
        dtype = BOOL
    elif op in ("<", "<=", ">", ">=", "==", "!="):
        dtype = BOOL
    else:
        dtype = f32 if (a.dtype == f32 or b.dtype == f32 or real) else i32
    if integer and dtype != i32:
        raise TraceError(f"`{'//' if op == '/' else op}` needs integer operands; got {a.dtype} and {b.dtype}")
    if isinstance(a, Const) and isinstance(b, Const):
        value = _FOLD[op](a.value, b.value)
        return Const(float(value) if dtype == f32 else value, dtype)
    folded = _identity_fold(op, a, b)
    return folded if folded is not None else BinOp(op, a, b, dtype)


def _identity_fold(op, a, b):
    if op == "+" and _is(b, 0): return a
    if op == "+" and _is(a, 0): return b
    if op == "-" and _is(b, 0): return a
    if op == "*" and (_is(b, 1)): return a
    if op == "*" and (_is(a, 1)): return b
    if op == "*" and (_is(a, 0) or _is(b, 0)) and a.dtype == i32 and b.dtype == i32: return Const(0, i32)
    if op == "/" and _is(b, 1): return a
    return None


def _is(e: Expr, v) -> bool:
    return isinstance(e, Const) and e.value == v


def call(fn: str, *args) -> Expr:
    """`tk.call("min", a, b)`, `tk.call("max", a, b)`: that C++ function of runtime scalars (of Python numbers: folded
    to a constant at trace time)."""
    args = tuple(as_expr(a) for a in args)
    dtype = f32 if any(a.dtype == f32 for a in args) else i32
    if all(isinstance(a, Const) for a in args):
        return Const(_FOLD[fn](*(a.value for a in args)), dtype)
    return Call(fn, args, dtype)


# The math functions a runtime float scalar takes (tk.rsqrt(var + eps), tk.log(s)): the same computation as on
# tiles (the prelude's tk::op_<fn> functors; their fp32 twins in the interpreter: tkpy/tiles/math_approx.SCALAR).
SCALAR_MATH = ("exp", "exp2", "log", "log2", "sqrt", "rsqrt", "sigmoid", "tanh", "tanh_approx", "log1p", "erf")


def math_call(fn: str, x) -> Expr:
    """fn(x) of a runtime scalar (made a float), a node of the expression tree; of a Python number, the constant
    the math function's fp32 twin computes."""
    if fn not in SCALAR_MATH:
        raise TraceError(f"{fn} of a runtime scalar is not supported (the math functions {', '.join(SCALAR_MATH)} are)")
    e = as_expr(x)
    if isinstance(e, Const):
        import numpy as np

        from ..tiles import math_approx
        with np.errstate(all="ignore"):
            return Const(float(math_approx.SCALAR[fn](np.float32(e.value))), f32)
    return Call(fn, (e,), f32)


def nodes(e: Expr):
    """Every node of an expression tree, `e` first."""
    yield e
    if isinstance(e, BinOp):
        yield from nodes(e.a)
        yield from nodes(e.b)
    elif isinstance(e, Call):
        for a in e.args:
            yield from nodes(a)


def cdiv(a, b):
    """a / b rounded up, for b > 0: `tk.cdiv(n, 64)` tiles of 64 cover n. Of Python ints an int; of a runtime scalar
    the scalar `(a + b - 1) / b`. tkpy's one ceiling division (its own shared-memory and tensor-map arithmetic, the
    kernels' grids and tile counts)."""
    return (a + b - 1) // b


# The C++ generator's divisions by a hoisted divisor (codegen/divisors.py): id of the `/` or `%` node -> the name
# of its `tk::divisor`, rendered in place of the divisor's expression. Empty (the IR printer's text) otherwise.
DIVISOR_NAMES: ContextVar[dict] = ContextVar("DIVISOR_NAMES", default={})


def render(e: Expr, parent_precedence: int = 0) -> str:
    """C-like text of an expression (valid C++, also used by the IR printer)."""
    if isinstance(e, Const):
        if e.dtype == BOOL:
            return "true" if e.value else "false"
        if e.dtype == f32:
            v = float(e.value)
            if math.isinf(v):
                return "INFINITY" if v > 0 else "-INFINITY"
            if math.isnan(v):
                return "__int_as_float(0x7fc00000)"             # (a quiet NaN; NVRTC has no NAN macro)
            return f"{v!r}f" if ("e" in repr(v) or "." in repr(v)) else f"{v!r}.0f"
        return str(int(e.value))
    if isinstance(e, Sym):
        return e.name
    if isinstance(e, Call):
        if e.fn in SCALAR_MATH:
            return f"tk::op_{e.fn}{{}}({render(e.args[0])})"
        fn = {"min": "min", "max": "max"}[e.fn] if e.dtype == i32 else {"min": "fminf", "max": "fmaxf"}[e.fn]
        return f"{fn}({', '.join(render(a) for a in e.args)})"
    if isinstance(e, BinOp):
        p = _PRECEDENCE[e.op]
        text = f"{render(e.a, p)} {e.op} {DIVISOR_NAMES.get().get(id(e)) or render(e.b, p + 1)}"
        return f"({text})" if p < parent_precedence else text
    raise TypeError(f"not an expression: {e!r}")


def free_symbols(e: Expr) -> set:
    if isinstance(e, Sym):
        return {e}
    if isinstance(e, BinOp):
        return free_symbols(e.a) | free_symbols(e.b)
    if isinstance(e, Call):
        return set().union(*(free_symbols(a) for a in e.args))
    return set()
