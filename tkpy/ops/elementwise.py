"""Fills, conversions and elementwise maps over register tiles and vectors."""
from __future__ import annotations

import math

from ..ir.core import Var
from ..tiles.types import RT, RV
from ._checks import describe, emit, fail, operand, same_layout, same_shape, scalar

UNARY_FNS = ("exp", "exp2", "log", "log2", "abs", "relu", "neg", "copy")
BINARY_FNS = ("add", "sub", "mul", "div", "max", "min")


def _register(x, what: str) -> Var:
    x = operand(x, what)
    if not isinstance(x.type, (RT, RV)):
        fail(f"{what}: expected a register tile or vector, got {describe(x)}")
    return x


def _compatible(dst, src, what: str) -> None:
    same_shape(dst, src, what)
    same_layout(dst, src, what)


def fill(dst, value):
    """Set every element of `dst` to a scalar."""
    dst = _register(dst, "fill")
    return emit("fill", dst, scalar(value, "fill value"))


def zero(dst):
    return fill(dst, 0.0)


def one(dst):
    return fill(dst, 1.0)


def neg_infty(dst):
    return fill(dst, -math.inf)


def pos_infty(dst):
    return fill(dst, math.inf)


def copy(dst, src):
    """dst = src, converting the dtype (rounding to nearest even)."""
    dst, src = _register(dst, "copy destination"), _register(src, "copy source")
    _compatible(dst, src, "copy")
    return emit("unary", dst, src, fn="copy")


def _unary(fn: str):
    def op(dst, src):
        d, s = _register(dst, f"{fn} destination"), _register(src, f"{fn} source")
        _compatible(d, s, fn)
        return emit("unary", d, s, fn=fn)
    op.__name__ = fn
    op.__doc__ = f"dst = {fn}(src), elementwise (computed in fp32)."
    return op


def _binary(fn: str):
    def op(dst, a, b):
        d, a_ = _register(dst, f"{fn} destination"), _register(a, f"{fn} first operand")
        _compatible(d, a_, fn)
        if isinstance(b, (Var,)) or hasattr(b, "type"):
            b_ = _register(b, f"{fn} second operand")
            _compatible(d, b_, fn)
        else:
            b_ = scalar(b, f"{fn} second operand")
        return emit("binary", d, a_, b_, fn=fn)
    op.__name__ = fn
    op.__doc__ = f"dst = {fn}(a, b), elementwise; b is a tile/vector like a, or a scalar (computed in fp32)."
    return op


exp, exp2, log, log2, abs, relu, neg = (_unary(f) for f in ("exp", "exp2", "log", "log2", "abs", "relu", "neg"))
add, sub, mul, div, max, min = (_binary(f) for f in BINARY_FNS)
