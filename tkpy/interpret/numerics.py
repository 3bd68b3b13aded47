"""Element types on the CPU: rounding to bf16/fp16 as the GPU does, raw storage bits, fp32 math.

The interpreter keeps every tile's values in float32 numpy arrays that hold
exactly what the tile's dtype can represent: each write rounds (round to
nearest even, as `cvt.rn` does). Memory (global tensors, shared bytes) holds
raw bits; `encode`/`decode` move between the two. Arithmetic happens in fp32,
like the prelude's maps (`to_float`, op, `from_float`).
"""
from __future__ import annotations

import numpy as np

from ..ir.evaluate import to_f32  # noqa: F401 - the interpreter's modules round scalars to f32 with it too
from ..tiles import math_approx
from ..tiles.dtypes import FP8_DTYPES, DType, bf16, f32, fp16
from . import fp8

RAW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}   # storage word of an element of this many bytes
BF16_NAN = np.uint16(0x7FFF)          # what cvt.rn.bf16.f32 makes of any NaN


def encode(dtype: DType, x: np.ndarray) -> np.ndarray:
    """Raw bits of float32 values `x` rounded to `dtype` (round to nearest even)."""
    x = np.asarray(x, np.float32)
    if dtype == f32:
        return x.view(np.uint32)
    if dtype == fp16:
        with np.errstate(over="ignore"):              # overflow to inf, as cvt.rn.f16.f32 does
            return x.astype(np.float16).view(np.uint16)   # numpy rounds to nearest even
    if dtype == bf16:
        u = x.view(np.uint32)
        bits = ((u + np.uint32(0x7FFF) + ((u >> 16) & np.uint32(1))) >> 16).astype(np.uint16)
        return np.where(np.isnan(x), BF16_NAN, bits)
    if dtype in FP8_DTYPES:                           # nearest even, saturating (cvt.rn.satfinite)
        return fp8.encode(dtype.name, x)
    raise TypeError(f"the interpreter has no storage for {dtype}")


def decode(dtype: DType, raw: np.ndarray) -> np.ndarray:
    """float32 values of raw `dtype` bits."""
    if dtype == f32:
        return raw.view(np.float32)
    if dtype == fp16:
        return raw.view(np.float16).astype(np.float32)
    if dtype == bf16:
        return (raw.astype(np.uint32) << 16).view(np.float32)
    if dtype in FP8_DTYPES:
        return fp8.decode(dtype.name, raw)
    raise TypeError(f"the interpreter has no storage for {dtype}")


def wrap_int32(x: int) -> int:
    """x as the GPU's 32-bit int arithmetic leaves it (two's complement, wrapping)."""
    return (int(x) + 2**31) % 2**32 - 2**31


def round_to(dtype: DType, x) -> np.ndarray:
    """float32 values of `x` rounded to `dtype` (what a register of that dtype can hold)."""
    x = np.asarray(x, np.float32)
    return x if dtype == f32 else decode(dtype, encode(dtype, x))


# fp32 elementwise functions, as the prelude's op_* functors compute them. fmaxf/fminf ignore a NaN
# operand (np.fmax/np.fmin), unlike np.maximum. exp2 and exp (exp2 of x * log2 e) are ex2.approx.ftz on
# the GPU and __fdividef, __logf and __log2f approximations: the exact fp32 results here differ from them
# by a few ulp, but flush to zero where the GPU does. The math functions (tk.sqrt .. tk.erf, tk.pow and
# x ** n: powi, whose exponent is the map expression's param) are their fp32 twins (tkpy/tiles/math_approx.py).
UNARY = {
    "copy": lambda x: x, "neg": np.negative, **math_approx.BASIC, "abs": np.abs,
    "relu": lambda x: np.fmax(x, np.float32(0)), **math_approx.UNARY,
    "powi": math_approx.powi,
}
BINARY = {"add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.divide,
          "max": np.fmax, "min": np.fmin, "pow": math_approx.pow}
REDUCE = {"sum": np.add, "prod": np.multiply, "max": np.fmax, "min": np.fmin}
