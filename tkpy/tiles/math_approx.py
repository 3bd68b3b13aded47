"""tkpy's math functions (tk.sqrt, tk.rsqrt, tk.sigmoid, tk.tanh, tk.pow and `**`, tk.log1p, tk.erf), written once:
the prelude's C++ functors (CPP) and their fp32 numpy twins, which the CPU interpreter runs.

Header-free (NVRTC ships no math.h): each function is one or two of PTX's MUFU approximations (sqrt.approx,
rsqrt.approx, rcp.approx, ex2.approx, lg2.approx, tanh.approx) and short polynomials on the FMA pipes. A twin takes
the same steps in fp32, rounding where the GPU rounds (an FMA once, from its exact value) and computing the MUFU
steps exactly, so the interpreter is off the GPU by at most those instructions' own errors. Each function's error
against the exact result, on the GPU and in the interpreter alike (error_bound; tests/test_gpu_math.py checks it on
the GPU and tests/test_math_cpu.py in the interpreter, against torch in float64):

    function    how                                                              error at most
    sqrt(x)     sqrt.approx.f32 (subnormal inputs kept)                          relative 2^-22
    rsqrt(x)    rsqrt.approx.f32                                                 relative 2^-22
    sigmoid(x)  rcp.approx(1 + ex2.approx(-x log2 e))                            relative 2^-21 + |x| 2^-23
    tanh(x)     |x| < 1: x + x^3 S(x^2), S of degree 6;                          3 ulp
                else sign(x) (1 - 2 / (1 + ex2.approx(2 |x| log2 e))) (rcp.approx)
    tanh(x, approx=True)   tanh.approx.f32: one MUFU.TANH                        relative 2^-10.98
    pow(x, y)   ex2.approx(y lg2.approx(x)), 1 where y = 0 or x = 1; x < 0: NaN  relative 2^-22 (1 + |y| (1 + |log2 x|))
    x ** n      n an integer constant: square and multiply (any x; n < 0:       relative (|n| + 3) 2^-24
                rcp.approx of x ** -n, 0 or inf where that is beyond 2^+-126)
    log1p(x)    1 + x = 2^k (1 + f), f in [sqrt(1/2) - 1, sqrt(2) - 1), and what  2 ulp
                rounding 1 + x lost, c: k ln 2 + f + f^2 R(f) + c / (1 + x), R of degree 8 (musl's reduction)
    erf(x)      |x| < 1: x + x P(x^2), P of degree 6;                            2 ulp
                else sign(x) (1 - ex2.approx(Q(min(|x|, 4) - 1))), Q of degree 6 fit to log2 erfc

(ulp: of the exact result in fp32.) MUFU results below 2^-126 flush to zero (.ftz), as tk.exp2's do: sigmoid(x) for
x < -87.3 and pow's tiny results are 0. The polynomials were fit by weighted minimax (Lawson's iteration) in float64
and rounded to fp32; the errors above are theirs in fp32 plus the MUFU instructions' (2^-22 relative for ex2.approx,
1 ulp for rcp.approx), measured in fp32 over each domain by tests/test_math_cpu.py.
"""
from __future__ import annotations

import math

import numpy as np

f32 = np.float32
LOG2E = 1.4426950408889634
LN2_HI = float(f32(math.log(2)))                 # ln 2 split so that k ln 2 is exact to fp32's precision and more
LN2_LO = float(f32(math.log(2) - LN2_HI))
TANH_SPLIT = ERF_SPLIT = 1.0                     # |x| below: the odd polynomial; at or above: the exponential
ERF_CLAMP = 4.0                                  # erf(x) rounds to +-1 in fp32 from |x| = 3.92 on

# Polynomial coefficients, lowest degree first, rounded to fp32.
TANH_SMALL = (-0.33333295583724976, 0.13332344591617584, -0.05387980118393898, 0.021486658602952957,
              -0.007946106605231762, 0.0023013646714389324, -0.0003584520018193871)     # (tanh x / x - 1) / x^2
ERF_SMALL = (0.12837916612625122, -0.3761262595653534, 0.1128358542919159, -0.026853816583752632,
             0.00518833426758647, -0.0008010247256606817, 7.854024443076923e-05)        # erf x / x - 1, in x^2
ERF_LARGE = (-2.668416738510132, -3.8072242736816406, -1.2163625955581665, -0.059872839599847794,
             0.01426954660564661, -0.0026346014346927404, 0.00026772802812047303)      # log2 erfc a, in a - 1
LOG1P = (-0.49999988079071045, 0.33333325386047363, -0.25001585483551025, 0.20001985132694244,
         -0.16609056293964386, 0.14181634783744812, -0.1324298083782196, 0.12905503809452057,
         -0.07623061537742615)                                                          # (log1p f - f) / f^2
SQRT_HALF_BITS = 0x3F3504F3                      # sqrt(1/2) as fp32 bits: log1p's m lies in [sqrt(1/2), sqrt(2))


def _literal(c: float) -> str:
    return f"{c!r}f"


def horner_cpp(coefficients, var: str, name: str, indent: str = "        ") -> str:
    """C++ lines computing the polynomial in `var` (coefficients lowest degree first) into `float name`, a fmaf
    a step (as `horner` computes it)."""
    lines = [f"float {name} = {_literal(coefficients[-1])};"]
    lines += [f"{name} = fmaf({name}, {var}, {_literal(c)});" for c in reversed(coefficients[:-1])]
    return "\n".join(indent + line for line in lines)


def _mufu(name: str, instruction: str) -> str:
    return (f"__device__ __forceinline__ float {name}(float x) {{\n"
            f'    float y; asm("{instruction} %0, %1;" : "=f"(y) : "f"(x)); return y;\n}}')


CPP = f"""
// Math functions (tk.sqrt .. tk.erf, tk.pow, x ** n): MUFU approximations and short polynomials, each step as the
// interpreter's fp32 twin takes it (tkpy/tiles/math_approx.py, which states each one's accuracy).

{_mufu("sqrt_approx", "sqrt.approx.f32")}

{_mufu("rsqrt_approx", "rsqrt.approx.f32")}

{_mufu("rcp_approx", "rcp.approx.ftz.f32")}

{_mufu("lg2_approx", "lg2.approx.f32")}

{_mufu("tanh_approx", "tanh.approx.f32")}

__device__ __forceinline__ float with_sign_of(float v, float s) {{   // copysign: |v| with the sign of s
    return __uint_as_float((__float_as_uint(v) & 0x7fffffffu) | (__float_as_uint(s) & 0x80000000u));
}}

struct op_sqrt  {{ __device__ __forceinline__ float operator()(float x) const {{ return sqrt_approx(x); }} }};

struct op_rsqrt {{ __device__ __forceinline__ float operator()(float x) const {{ return rsqrt_approx(x); }} }};

struct op_tanh_approx {{ __device__ __forceinline__ float operator()(float x) const {{ return tanh_approx(x); }} }};

struct op_sigmoid {{
    __device__ __forceinline__ float operator()(float x) const {{
        return rcp_approx(1.0f + op_exp2{{}}(x * {_literal(-LOG2E)}));   // 1 / (1 + e^-x)
    }}
}};

struct op_tanh {{
    __device__ __forceinline__ float operator()(float x) const {{
        const float a = fabsf(x), t = x * x;
{horner_cpp(TANH_SMALL, "t", "s")}
        const float small = fmaf(x, t * s, x);                      // x + x^3 S(x^2)
        const float e = op_exp2{{}}(a * {_literal(2 * LOG2E)});
        const float large = with_sign_of(fmaf(-2.0f, rcp_approx(1.0f + e), 1.0f), x);
        return a < {_literal(TANH_SPLIT)} ? small : large;   // NaN: large, NaN
    }}
}};

struct op_erf {{
    __device__ __forceinline__ float operator()(float x) const {{
        const float a = fabsf(x), t = x * x, u = fminf(a, {_literal(ERF_CLAMP)}) - 1.0f;
{horner_cpp(ERF_SMALL, "t", "p")}
{horner_cpp(ERF_LARGE, "u", "q")}
        const float small = fmaf(x, p, x);                          // x + x P(x^2)
        const float large = with_sign_of(1.0f - op_exp2{{}}(q), x);   // 1 - erfc(|x|), erfc = 2^Q
        return a >= {_literal(ERF_SPLIT)} ? large : small;  // NaN: small, NaN
    }}
}};

struct op_log1p {{
    __device__ __forceinline__ float operator()(float x) const {{
        const float u = 1.0f + x;
        const unsigned bits = __float_as_uint(u) + (0x3f800000u - {SQRT_HALF_BITS:#x}u);
        const float k = float(int(bits >> 23) - 127);
        const float f = __uint_as_float((bits & 0x007fffffu) + {SQRT_HALF_BITS:#x}u) - 1.0f;  // 1 + x = 2^k (1 + f)
        const float lost = x >= 1.0f ? 1.0f - (u - x) : x - (u - 1.0f);   // what rounding 1 + x lost (exact)
        const float inv = rcp_approx(u), q = lost * inv;
        const float c = fmaf(fmaf(-q, u, lost), inv, q);    // lost / u, refined by a Newton step (as if rounded once)
{horner_cpp(LOG1P, "f", "r")}
        const float y = fmaf(k, {_literal(LN2_HI)}, f + fmaf(f * f, r, fmaf(k, {_literal(LN2_LO)}, c)));
        return u > 0.0f && u < INFINITY ? y : lg2_approx(u) * {_literal(math.log(2))};  // -inf at -1, NaN below
    }}
}};

struct op_pow {{
    __device__ __forceinline__ float operator()(float x, float y) const {{
        return y == 0.0f || x == 1.0f ? 1.0f : op_exp2{{}}(y * lg2_approx(x));
    }}
}};

// x ** N for an integer constant N: square and multiply, defined for every x.
template <int N> __device__ __forceinline__ float powi(float x) {{
    if constexpr (N < 0) {{
        return rcp_approx(powi<-N>(x));
    }} else if constexpr (N == 0) {{
        return 1.0f;
    }} else if constexpr (N == 1) {{
        return x;
    }} else {{
        const float h = powi<N / 2>(x);
        return N % 2 ? h * h * x : h * h;
    }}
}}
"""


# -- the twins: fp32 numpy, step for step as the functors above ---------------------------------------------------
TINY = f32(2.0 ** -126)            # the smallest normal float32


def flush(x: np.ndarray) -> np.ndarray:
    """Subnormal values flushed to (signed) zero, as the .ftz instructions do."""
    return np.where(np.abs(x) < TINY, np.copysign(f32(0), x), x).astype(f32, copy=False)


def exp2_ftz(x: np.ndarray) -> np.ndarray:
    """exp2 as ex2.approx.ftz.f32 (the prelude's op_exp2): subnormal inputs read as zero, results below
    2^-126 are zero."""
    return flush(np.exp2(flush(np.asarray(x, f32))))


def fma(a, b, c) -> np.ndarray:
    """a * b + c rounded once to fp32 (from its float64 value: exact but for double-rounding ties)."""
    return (np.float64(a) * np.float64(b) + np.float64(c)).astype(f32)


def horner(coefficients, v: np.ndarray) -> np.ndarray:
    """The polynomial in v as horner_cpp's fmaf chain computes it."""
    r = np.full_like(v, f32(coefficients[-1]))
    for c in reversed(coefficients[:-1]):
        r = fma(r, v, f32(c))
    return r


def _rcp_ftz(x: np.ndarray) -> np.ndarray:
    return flush((f32(1) / flush(x)).astype(f32))


def sqrt(x):
    return np.sqrt(np.asarray(x, f32))


def rsqrt(x):
    return (1 / np.sqrt(np.asarray(x, np.float64))).astype(f32)


def sigmoid(x):
    x = np.asarray(x, f32)
    return _rcp_ftz((f32(1) + exp2_ftz(x * f32(-LOG2E))).astype(f32))


def tanh_approx(x):
    return np.tanh(np.asarray(x, f32))


def _with_sign_of(v, s):
    return np.copysign(np.abs(v), s).astype(f32)


def tanh(x):
    x = np.asarray(x, f32)
    a, t = np.abs(x), (x * x).astype(f32)
    small = fma(x, (t * horner(TANH_SMALL, t)).astype(f32), x)
    e = exp2_ftz((a * f32(2 * LOG2E)).astype(f32))
    large = _with_sign_of(fma(f32(-2), _rcp_ftz((f32(1) + e).astype(f32)), f32(1)), x)
    return np.where(a < f32(TANH_SPLIT), small, large)


def erf(x):
    x = np.asarray(x, f32)
    a, t = np.abs(x), (x * x).astype(f32)
    u = (np.fmin(a, f32(ERF_CLAMP)) - f32(1)).astype(f32)
    small = fma(x, horner(ERF_SMALL, t), x)
    large = _with_sign_of((f32(1) - exp2_ftz(horner(ERF_LARGE, u))).astype(f32), x)
    return np.where(a >= f32(ERF_SPLIT), large, small)


def log1p(x):
    x = np.asarray(x, f32)
    u = (f32(1) + x).astype(f32)
    bits = u.view(np.uint32) + np.uint32(0x3F800000 - SQRT_HALF_BITS)
    k = ((bits >> np.uint32(23)).astype(np.int64) - 127).astype(f32)
    f = (((bits & np.uint32(0x007FFFFF)) + np.uint32(SQRT_HALF_BITS)).view(f32) - f32(1)).astype(f32)
    lost = np.where(x >= 1, (f32(1) - (u - x).astype(f32)).astype(f32), (x - (u - f32(1)).astype(f32)).astype(f32))
    c = (lost / u).astype(f32)
    y = fma(k, f32(LN2_HI), (f + fma((f * f).astype(f32), horner(LOG1P, f), fma(k, f32(LN2_LO), c))).astype(f32))
    special = (np.log2(u) * f32(math.log(2))).astype(f32)
    return np.where((u > 0) & (u < np.inf), y, special)


def pow(x, y):  # noqa: A001 - tk.pow's twin
    x, y = np.asarray(x, f32), np.asarray(y, f32)
    r = exp2_ftz((y * np.log2(x)).astype(f32))
    return np.where((y == 0) | (x == 1), f32(1), r)


def powi(x, n: int):
    """x ** n by the recursion of the prelude's powi<N> (the same products in the same order)."""
    x = np.asarray(x, f32)
    if n < 0:
        return _rcp_ftz(powi(x, -n))
    if n == 0:
        return np.ones_like(x)
    if n == 1:
        return x
    h = powi(x, n // 2)
    hh = (h * h).astype(f32)
    return (hh * x).astype(f32) if n % 2 else hh


# The accuracy table of the docstring, as data: bounds in ulp of the exact result, relative bounds, and those that
# depend on the arguments (error_bound).
ULP_BOUNDS = {"tanh": 3, "log1p": 2, "erf": 2}
RELATIVE_BOUNDS = {"sqrt": 2.0 ** -22, "rsqrt": 2.0 ** -22, "tanh_approx": 2.0 ** -10.98}


def error_bound(fn: str, exact, x=None, y=None, n=None) -> np.ndarray:
    """The largest |result - exact| the accuracy table allows for `fn` (a key of UNARY, "pow" with exponents `y`,
    or "powi" with the integer `n`) where the exact (float64) results are `exact` and the arguments `x`. Those
    that flush results below 2^-126 to zero may miss by that much more."""
    exact = np.abs(np.asarray(exact, np.float64))
    if fn in ULP_BOUNDS:
        return ULP_BOUNDS[fn] * np.spacing(exact.astype(f32)).astype(np.float64)
    if fn in RELATIVE_BOUNDS:
        return RELATIVE_BOUNDS[fn] * exact
    if fn == "sigmoid":
        relative = 2.0 ** -21 + np.abs(np.asarray(x, np.float64)) * 2.0 ** -23
    elif fn == "pow":
        with np.errstate(divide="ignore", invalid="ignore"):
            log2x = np.abs(np.log2(np.asarray(x, np.float64)))
        relative = 2.0 ** -22 * (1 + np.abs(np.asarray(y, np.float64)) * (1 + log2x))
        relative = np.where(np.isnan(relative), np.inf, relative)       # (NaN x: no claim but the special values')
    elif fn == "powi":
        relative = (abs(n) + 3) * 2.0 ** -24
    else:
        raise KeyError(f"no accuracy stated for {fn!r}")
    with np.errstate(invalid="ignore"):
        return np.where(exact == 0, 0.0, relative * exact) + float(TINY)     # (log2 0 is -inf: 0 stays 0)


UNARY = {"sqrt": sqrt, "rsqrt": rsqrt, "sigmoid": sigmoid, "tanh": tanh, "tanh_approx": tanh_approx,
         "log1p": log1p, "erf": erf}
# The exponentials and logarithms as the prelude's op_exp2 / op_exp / op_log / op_log2 compute them on tiles and on
# runtime scalars (ex2.approx.ftz, exp2 of x log2 e, __logf, __log2f): exact fp32 results a few ulp from those,
# flushed to zero where the GPU flushes.
EXP_LOG = {"exp": lambda x: flush(np.exp(x)), "exp2": exp2_ftz, "log": np.log, "log2": np.log2}
SCALAR = {**UNARY, **EXP_LOG}          # the functions of a runtime float scalar (tkpy/ir/expr.py's SCALAR_MATH)
