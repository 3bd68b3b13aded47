"""Scalar expressions on the CPU, with the C++ semantics the generated code has.

An expression tree is compiled once into nested Python closures over an
environment dict (builtins `block_x`.., `grid_x`.., `warpid`; scalar parameters;
dynamic dims; loop counters), then evaluated per warp: by the interpreter, and by
the IR's own checks (protocol.py evaluates conditions on the warp id).

- `int` is C++ `int`: `/` truncates toward zero and `%` takes the sign of the
  dividend (Python's `//` and `%` floor instead); dividing by zero is an error.
  Overflow (undefined in C++) is not detected: values are exact Python ints.
- `float` is fp32: every f32 node rounds its result to float32; division by zero
  gives inf/nan as IEEE says; `min`/`max` on floats ignore a NaN (fminf/fmaxf).
- The math functions of a float scalar (tk.rsqrt(x), ...) are their fp32 twins (tkpy/tiles/math_approx.py).
- `laneid` differs per lane; the interpreter runs a warp as one unit, so an
  expression that uses it raises LaneDependent (UnsupportedError at the op).
"""
from __future__ import annotations

import math
import operator
from typing import Callable

import numpy as np

from ..tiles import math_approx
from ..tiles.dtypes import f32
from .expr import BOOL, SCALAR_MATH, BinOp, Call, Const, Expr, Sym

Env = dict
Compiled = Callable[[Env], object]


def to_f32(v: float) -> float:
    """A Python float rounded to the nearest float32 (a scalar `float` on the GPU)."""
    return float(np.float32(v))


class ScalarFault(Exception):
    """An expression that cannot be evaluated (division by zero); re-raised with the op's line."""


class LaneDependent(Exception):
    """A per-lane value reached a warp-level evaluation; re-raised as UnsupportedError with the op's line."""


def c_div(a: int, b: int) -> int:
    """C++ integer division: truncates toward zero."""
    if b == 0:
        raise ScalarFault(f"integer division by zero ({a} / 0)")
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def c_mod(a: int, b: int) -> int:
    """C++ integer remainder: has the sign of the dividend, a == (a / b) * b + a % b."""
    if b == 0:
        raise ScalarFault(f"integer remainder by zero ({a} % 0)")
    r = abs(a) % abs(b)
    return r if a >= 0 else -r


def f_div(a: float, b: float) -> float:
    if b == 0:
        return math.nan if a == 0 or a != a else math.copysign(math.inf, a) * math.copysign(1.0, b)
    return a / b


def f_min(a: float, b: float) -> float:
    return a if b != b else b if a != a else min(a, b)


def f_max(a: float, b: float) -> float:
    return a if b != b else b if a != a else max(a, b)


_INT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": c_div, "%": c_mod,
            "min": min, "max": max}
_FLOAT_OPS = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": f_div, "min": f_min, "max": f_max}
_BOOL_OPS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge, "==": operator.eq,
             "!=": operator.ne, "&&": lambda a, b: bool(a) and bool(b), "||": lambda a, b: bool(a) or bool(b)}


def compile_expr(e: Expr) -> Compiled:
    """A function env -> value computing `e` as the generated C++ would."""
    if isinstance(e, Const):
        v = to_f32(e.value) if e.dtype == f32 else e.value
        return lambda env: v
    if isinstance(e, Sym):
        if e.name == "laneid":
            return _lane_dependent
        name = e.name
        return lambda env: env[name]
    if isinstance(e, Call) and e.fn in SCALAR_MATH:
        fn, a = math_approx.SCALAR[e.fn], compile_expr(e.args[0])

        def math(env):
            with np.errstate(all="ignore"):
                return to_f32(fn(np.float32(a(env))))
        return math
    if isinstance(e, (BinOp, Call)):
        args = (e.a, e.b) if isinstance(e, BinOp) else e.args
        fn = _function(e.op if isinstance(e, BinOp) else e.fn, e.dtype, args)
        a, b = (compile_expr(x) for x in args)
        if e.dtype == f32:
            return lambda env: to_f32(fn(a(env), b(env)))
        return lambda env: fn(a(env), b(env))
    raise TypeError(f"not an expression: {e!r}")


def _function(op: str, dtype, args) -> Callable:
    if dtype == BOOL:
        return _BOOL_OPS[op]
    if dtype == f32 or any(a.dtype == f32 for a in args):
        return _FLOAT_OPS[op]
    return _INT_OPS[op]


def _lane_dependent(env):
    raise LaneDependent("the interpreter runs each warp as one unit, so a value that differs per lane "
                        "(tk.lane_id()) cannot be used here")


class ScalarCache:
    """Compiled expressions of one kernel, keyed by node identity (the IR keeps the nodes alive)."""

    def __init__(self):
        self._compiled: dict[int, Compiled] = {}

    def get(self, e: Expr) -> Compiled:
        fn = self._compiled.get(id(e))
        if fn is None:
            fn = self._compiled[id(e)] = compile_expr(e)
        return fn
