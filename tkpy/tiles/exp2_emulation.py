"""The software exp2 behind `tk.exp2(x, emulated=...)`, written once for the prelude and the interpreter.

The MUFU unit computes 16 exp2 results per SM and clock on Hopper, the FMA pipes 128 FMAs: a softmax
whose exponentials stall on the MUFU (attention at head dim 64 needs as many exponentials per clock as
the tensor cores leave room for) can move some of them to the FMA pipes. The recipe: clamp x to
[-127, 128] (NaN stays NaN); round it to an integer j in the low mantissa bits of t = x + 1.5 * 2^23 + 127,
whose bits shifted left by 23 are then exactly the float 2^j (0 for j = -127, inf for j = 128);
approximate 2^f, f = x - j in [-0.5, 0.5], by a degree-3 polynomial (relative error 1.0e-4, below
bf16's rounding); multiply. On sm_90: 2 FMNMX, 3 FADD, 3 FFMA, a shift and an FMUL per result
(benchmarks/bench_exp2.py measures the mixes). Like MUFU.EX2 with .ftz: exp2 of an integer is exact,
exp2(-inf) = 0, x below -126.5 gives 0, x >= 127.5 gives inf, NaN gives NaN.

Which of a lane's elements take the polynomial: n of every 8 of the lane's own numbering of its elements
(tkpy/tiles/layouts.py TILE_ELEMENT / VECTOR_ELEMENT), spread evenly (EMULATED_ELEMENT).
"""
from __future__ import annotations

import numpy as np

from .math_approx import fma

ROUNDER = 12583039.0                 # 1.5 * 2^23 + 127: x + ROUNDER holds round(x) + 127 in its low mantissa bits
LOW, HIGH = -127.0, 128.0            # j + 127 in [0, 255]: a biased exponent (0: the float 0, 255: inf)
# 2^f ~ 1 + f * (C1 + f * (C2 + f * C3)) on [-0.5, 0.5] (minimax in relative error, constant term 1 so
# that exp2 of an integer is exact, as MUFU's)
C1, C2, C3 = 0.69328290224, 0.24221037328, 0.05500858277
MAX_RELATIVE_ERROR = 1.1e-4          # of the polynomial, measured over [-0.5, 0.5] in fp32

# Whether element e of a lane (its own numbering) is one of the n in 8 computed by the polynomial:
# evenly spread (n = 2: elements 3 and 7 of every 8). C++ and Python read it alike.
EMULATED_ELEMENT = "((e * n) & 7) + n >= 8"

CPP = f"""
// exp2 on the FMA pipes (tk.exp2(x, emulated=...), tkpy/tiles/exp2_emulation.py): x clamped to [-127, 128]
// (max.NaN / min.NaN: NaN stays NaN), rounded to j in the low bits of t = x + 1.5 * 2^23 + 127, whose bits
// shifted left by 23 are the float 2^j; 2^(x - j) by a degree-3 polynomial (relative error 1.0e-4).
// 10 FMA-pipe instructions instead of one MUFU.EX2.
__device__ __forceinline__ float exp2_poly(float x) {{
    asm("max.NaN.f32 %0, %0, %1;" : "+f"(x) : "f"({LOW:.1f}f));
    asm("min.NaN.f32 %0, %0, %1;" : "+f"(x) : "f"({HIGH:.1f}f));
    const float t = x + {ROUNDER}f;
    const float f = x - (t - {ROUNDER}f);
    const float p = fmaf(fmaf(fmaf({C3}f, f, {C2}f), f, {C1}f), f, 1.0f);
    return p * __uint_as_float(__float_as_uint(t) << 23);
}}
template <int N> __device__ __forceinline__ constexpr bool emulated_element(int e) {{
    constexpr int n = N;
    return {EMULATED_ELEMENT};
}}
// exp2 of a lane's element e: the polynomial for N of every 8 elements, MUFU.EX2 for the others (e is a
// constant once the map's loops unroll: no branch is left).
template <int N> __device__ __forceinline__ float exp2_emulated(int e, float x) {{
    return emulated_element<N>(e) ? exp2_poly(x) : op_exp2{{}}(x);
}}
"""


def exp2_poly(x: np.ndarray) -> np.ndarray:
    """The recipe in fp32 numpy, step for step as the prelude's exp2_poly (each FMA rounded once from its
    exact float64 value: the same result but for double-rounding ties)."""
    f32 = np.float32
    x = np.minimum(np.maximum(np.asarray(x, f32), f32(LOW)), f32(HIGH))   # NaN stays NaN, as max.NaN / min.NaN
    t = (x + f32(ROUNDER)).astype(f32)
    f = (x - (t - f32(ROUNDER))).astype(f32)

    p = fma(fma(fma(f32(C3), f, f32(C2)), f, f32(C1)), f, f32(1.0))
    scale = (t.view(np.uint32) << np.uint32(23)).astype(np.uint32).view(f32)
    return (p * scale).astype(f32)


def emulated_mask(element: np.ndarray, n: int) -> np.ndarray:
    """Which elements (lane-own numbers) take the polynomial when n of 8 do."""
    return eval(EMULATED_ELEMENT, {"__builtins__": {}}, {"e": element, "n": n})  # a trusted constant
