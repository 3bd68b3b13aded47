"""8-bit floats on the CPU, as the GPU converts them (cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 and back).

Both formats are built from their bit fields here (no torch): e4m3 ("e4m3fn": bias 7, no
infinities, 0x7F/0xFF NaN, largest finite 448) and e5m2 (bias 15, IEEE-like: 0x7C inf, largest
finite 57344). Encoding rounds to the nearest representable value, ties to the even code, and
saturates: anything beyond the largest finite value (infinities included) becomes it, with its
sign (`.satfinite`). NaN encodes as 0x7F (sign dropped, the canonical NaN). Decoding is exact
(every fp8 value is a float32).
"""
from __future__ import annotations

import functools

import numpy as np

FORMATS = {"fp8e4m3": (4, 3, 7), "fp8e5m2": (5, 2, 15)}   # exponent bits, mantissa bits, bias
NAN_CODE = np.uint8(0x7F)


@functools.cache
def table(name: str) -> np.ndarray:
    """float32 value of each of the 256 codes."""
    e_bits, m_bits, bias = FORMATS[name]
    codes = np.arange(256)
    sign = np.where(codes & 0x80, -1.0, 1.0)
    e = (codes >> m_bits) & ((1 << e_bits) - 1)
    m = codes & ((1 << m_bits) - 1)
    value = np.where(e == 0, m / 2.0 ** m_bits * 2.0 ** (1 - bias), (1 + m / 2.0 ** m_bits) * 2.0 ** (e - bias))
    top = e == (1 << e_bits) - 1
    if name == "fp8e4m3":          # e4m3fn: only S.1111.111 is NaN; the rest of the top binade is finite
        value = np.where(top & (m == 7), np.nan, value)
    else:                          # e5m2: the top binade is inf (m == 0) and NaN
        value = np.where(top, np.where(m == 0, np.inf, np.nan), value)
    return (sign * value).astype(np.float32)


@functools.cache
def _positive(name: str) -> tuple:
    """The non-negative finite values in increasing order and their codes."""
    v = table(name)[:128]
    codes = np.flatnonzero(np.isfinite(v))
    return v[codes].astype(np.float64), codes.astype(np.uint8)


def max_finite(name: str) -> float:
    return float(_positive(name)[0][-1])


def encode(name: str, x) -> np.ndarray:
    """uint8 codes of float32 values `x`: nearest, ties to even, saturating to the largest finite."""
    x = np.asarray(x, np.float32)
    values, codes = _positive(name)
    a = np.minimum(np.abs(x.astype(np.float64)), values[-1])            # satfinite (inf included)
    hi = np.clip(np.searchsorted(values, np.nan_to_num(a), side="left"), 0, len(values) - 1)
    lo = np.maximum(hi - 1, 0)
    d_lo, d_hi = a - values[lo], values[hi] - a
    up = (d_hi < d_lo) | ((d_hi == d_lo) & (codes[hi] % 2 == 0))           # codes ascend with values
    code = np.where(up, codes[hi], codes[lo]).astype(np.uint8)
    code = code | np.where(np.signbit(x), np.uint8(0x80), np.uint8(0))
    return np.where(np.isnan(x), NAN_CODE, code).astype(np.uint8)


def decode(name: str, raw) -> np.ndarray:
    """float32 values of uint8 codes."""
    return table(name)[np.asarray(raw, np.uint8)]
