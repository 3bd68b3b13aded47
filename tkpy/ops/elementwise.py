"""Fills, conversions and elementwise maps over register tiles and vectors."""
from __future__ import annotations

import math

from ..ir.core import BINARY_FNS, Var
from ..ir.expr import SCALAR_MATH, Expr, math_call
from ..tiles.types import RT
from ._checks import compatible, describe, emit, fail, register_operand, same_shape, scalar
from .maps import MapExpr, map as map_op, power
from .operators import binary_value, power_value, temporary, unary_value


def fill(dst, value):
    """Set every element of `dst` to a scalar."""
    dst = register_operand(dst, "fill")
    return emit("fill", dst, scalar(value, "fill value"))


def zero(dst):
    return fill(dst, 0.0)


def one(dst):
    return fill(dst, 1.0)


def neg_infty(dst):
    return fill(dst, -math.inf)


def pos_infty(dst):
    return fill(dst, math.inf)


def copy(dst, src=None):
    """dst = src, converting the dtype (rounding to nearest even) and the layout: a tile in the other
    layout is tk.swap_layout, a vector in another layout moves its values across lanes.
    `tk.copy(src)` returns a new copy."""
    if src is None:
        return unary_value("copy", dst)
    dst, src = register_operand(dst, "copy destination"), register_operand(src, "copy source")
    same_shape(dst, src, "copy")
    if type(dst.type) is not type(src.type):
        fail(f"copy: {describe(dst)} and {describe(src)} are not both tiles or both vectors")
    if isinstance(dst.type, RT) and dst.type.layout != src.type.layout:
        return emit("swap_layout", dst, src)
    if dst.type.layout != src.type.layout and "contig" in (dst.type.layout, src.type.layout):
        fail(f"copy: {describe(dst)} <- {describe(src)}: a contig vector converts to no other layout (its values are "
             "whole 16-byte runs of memory); load it from memory in the layout wanted")
    return emit("unary", dst, src, fn="copy")


def _unary(fn: str):
    def op(dst, src=None):
        if src is None and fn in SCALAR_MATH and _is_scalar(dst):
            return math_call(fn, dst)     # tk.rsqrt(var + eps) of a runtime scalar: a scalar expression
        if src is None:
            return unary_value(fn, dst)
        d, s = register_operand(dst, f"{fn} destination"), register_operand(src, f"{fn} source")
        compatible(d, s, fn)
        return emit("unary", d, s, fn=fn)
    op.__name__ = fn
    op.__doc__ = (f"dst = {fn}(src), elementwise (computed in fp32). `tk.{fn}(x)` returns a new tile or vector "
                  "(inside a tk.map function: an expression).")
    return op


def _binary(fn: str):
    def op(dst, a, b=None):
        if b is None:
            return binary_value(fn, dst, a)
        d, a_ = register_operand(dst, f"{fn} destination"), register_operand(a, f"{fn} first operand")
        compatible(d, a_, fn)
        if isinstance(b, (Var,)) or hasattr(b, "type"):
            b_ = register_operand(b, f"{fn} second operand")
            compatible(d, b_, fn)
        else:
            b_ = scalar(b, f"{fn} second operand")
        return emit("binary", d, a_, b_, fn=fn)
    op.__name__ = fn
    op.__doc__ = (f"dst = {fn}(a, b), elementwise; b is a tile/vector like a, or a scalar (computed in fp32). "
                  f"`tk.{fn}(a, b)` returns a new tile or vector, broadcasting a vector b along rows or "
                  "columns by its layout (inside a tk.map function: an expression).")
    return op


exp, _exp2, log, log2, abs, relu, neg = (_unary(f) for f in ("exp", "exp2", "log", "log2", "abs", "relu", "neg"))


def exp2(dst, src=None, *, emulated=0):
    """dst = exp2(src), elementwise (computed in fp32). `tk.exp2(x)` returns a new tile or vector (inside a
    tk.map function: an expression).

    On the GPU one MUFU.EX2 per element (PTX ex2.approx.ftz.f32): at most 2 ulp from the exact result, as
    exp2f, but subnormal inputs read as zero and results below 2^-126 flush to zero (exp2(-inf) = 0, exp2(x)
    for x < -126 is 0); the CPU interpreter flushes likewise.

    emulated: the share of the elements (a multiple of 1/8) computed instead by a software exp2 on the FMA
    pipes (tkpy/tiles/exp2_emulation.py: a degree-3 polynomial, relative error 1.0e-4, ten FMA-pipe
    instructions). The MUFU unit gives 16 results per SM and clock; with 2/8 to 3/8 of them emulated an SM
    computes 1.3-1.4x as many exponentials (benchmarks/bench_exp2.py), for a softmax whose exponentials
    wait on the MUFU. Which elements: n of every 8 of each lane's own numbering, spread evenly; the
    interpreter computes the same elements the same way."""
    n = _eighths(emulated)
    if n == 0:
        return _exp2(dst, src)
    if src is None:
        if isinstance(dst, MapExpr):
            return MapExpr("exp2_emulated", (dst,), n)
        out = temporary(register_operand(dst, "exp2 source").type)
        map_op(out, lambda x: exp2(x, emulated=emulated), dst)
        return out
    return map_op(dst, lambda x: exp2(x, emulated=emulated), src)


def _is_scalar(x) -> bool:
    return isinstance(x, Expr) or (isinstance(x, (int, float)) and not isinstance(x, bool))


def _eighths(share) -> int:
    """How many elements of 8 a share in [0, 1] given in eighths (0, 1/8, 0.25, ..., 1) names."""
    if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 <= share <= 1 or (share * 8) % 1:
        fail(f"exp2: emulated is the share of elements computed by the software exp2, a multiple of 1/8 in "
             f"[0, 1] (0, 0.125, 0.25, ..., 1); got {share!r}")
    return int(share * 8)


exp.__doc__ += ("\n\nComputed as exp2(x * log2(e)) with the fast exp2 (see tk.exp2), as __expf: a few ulp for "
                "moderate x, the error growing with |x|; results below 2^-126 flush to zero.")
add, sub, mul, div, max, min = (_binary(f) for f in BINARY_FNS)

# The math functions: how each computes and its error, GPU and interpreter alike (tkpy/tiles/math_approx.py has
# the code of both and the table; tests/test_gpu_math.py and tests/test_math_cpu.py check them against torch).
sqrt, rsqrt, sigmoid, log1p, erf, _tanh, _tanh_approx = (
    _unary(f) for f in ("sqrt", "rsqrt", "sigmoid", "log1p", "erf", "tanh", "tanh_approx"))
sqrt.__doc__ += ("\n\nsqrt.approx.f32 (one MUFU op; subnormal inputs kept): relative error at most 2^-22. "
                 "sqrt(x) is NaN for x < 0. `x ** 0.5` is this function.")
rsqrt.__doc__ += ("\n\n1 / sqrt(x) by rsqrt.approx.f32 (one MUFU op): relative error at most 2^-22; rsqrt(0) = inf, "
                  "NaN for x < 0. `x ** -0.5` is this function.")
sigmoid.__doc__ += ("\n\n1 / (1 + exp(-x)) by ex2.approx and rcp.approx (two MUFU ops): relative error at most "
                    "2^-21 + |x| 2^-23 (1.7e-6 at |x| = 10; the |x| term is -x log2 e rounded to fp32); sigmoid(x) "
                    "flushes to 0 for x < -87.3 (results below 2^-126), sigmoid(inf) = 1, sigmoid(-inf) = 0.")
log1p.__doc__ += ("\n\nlog(1 + x), accurate for small x as well: 1 + x = 2^k (1 + f) with f in [sqrt(1/2) - 1, "
                  "sqrt(2) - 1), what rounding 1 + x lost carried along, and a degree-8 polynomial in f (musl's "
                  "reduction; about 30 instructions, one of them MUFU.RCP): at most 2 ulp from the exact result. "
                  "log1p(-1) = -inf, NaN for x < -1.")
erf.__doc__ += ("\n\nThe error function: for |x| < 1 the odd polynomial x + x P(x^2) (P of degree 6), else "
                "sign(x) (1 - 2^Q(|x| - 1)) (Q of degree 6, fit to log2 erfc; one MUFU op; |x| >= 4 gives +-1): at "
                "most 2 ulp from the exact result.")


def tanh(dst, src=None, *, approx=False):
    """dst = tanh(src), elementwise (computed in fp32). `tk.tanh(x)` returns a new tile or vector (inside a
    tk.map function: an expression).

    For |x| < 1 the odd polynomial x + x^3 S(x^2) (S of degree 6), else sign(x) (1 - 2 / (1 + e^(2|x|))) by
    ex2.approx and rcp.approx: at most 3 ulp from the exact result, tanh(+-inf) = +-1.

    approx=True: one tanh.approx.f32 (MUFU.TANH) instead, of relative error at most 2^-10.98 (5e-4): below a bf16
    result's rounding (up to 2^-8), about an fp16 one's (2^-11), and the fewest instructions where the MUFU is not
    the bottleneck already (e.g. a logit soft cap, cap * tanh(s / cap))."""
    if not isinstance(approx, bool):
        fail(f"tanh: approx is True or False, got {approx!r}")
    return (_tanh_approx if approx else _tanh)(dst, src)


def pow(dst, a, b=None):  # noqa: A001 - tk.pow, as torch.pow
    """dst = a ** b elementwise (computed in fp32); a and b tiles or vectors of dst's shape (a vector may be
    broadcast as in tk.map) or scalars. `tk.pow(a, b)` returns a new tile or vector (inside a tk.map function:
    an expression), as `a ** b` does.

    A constant exponent picks the function at trace time: an integer n squares and multiplies (x ** 2 is x * x;
    any x, relative error at most (|n| + 3) 2^-24; a negative n takes rcp.approx of x ** -n, so x ** -n beyond
    2^126 gives 0 and below 2^-126 inf), 0.5 is tk.sqrt and -0.5 tk.rsqrt. Any other exponent is
    exp2(b * log2(a)) by lg2.approx and ex2.approx (two MUFU ops): relative error at most
    2^-22 (1 + |b| (1 + |log2 a|)); a ** 0 = 1 and 1 ** b = 1; a < 0 gives NaN (torch: a real result for an
    integer b), a = 0 gives 0 (b > 0) or inf (b < 0), results below 2^-126 flush to zero. A constant base c > 0
    is exp2(b * log2(c)) (2 ** b is tk.exp2(b))."""
    if b is None:
        return power_value(dst, a)
    if isinstance(a, MapExpr) or isinstance(b, MapExpr):
        fail("pow: inside a tk.map function use the value form, tk.pow(a, b) or a ** b")
    srcs = [x for x in (a, b) if isinstance(x, Var) or hasattr(x, "type")]
    if not srcs:
        fail(f"pow: expected a tile or vector operand, got {describe(a)} and {describe(b)}")
    if len(srcs) == 2:
        return map_op(dst, power, a, b)
    if srcs[0] is a:
        return map_op(dst, lambda x: power(x, b), a)
    return map_op(dst, lambda y: power(a, y), b)
