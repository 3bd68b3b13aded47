"""tkpy's math functions without a GPU: the fp32 twins (tkpy/tiles/math_approx.py) within their stated error over
dense sweeps of each domain, every GPU test case of tests/test_gpu_math.py on the CPU interpreter and its kernel
compiled by NVRTC (header-free), and the generated code: the functions inside map lambdas, constant exponents
picked at trace time, the math prelude section only in kernels that use it."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.tiles import math_approx

from test_gpu_math import ALL_CASES

CASES = [pytest.param(builder, params, id=f"{builder.__name__}-{'-'.join(map(str, params))}")
         for builder, param_list in ALL_CASES for params in param_list]


# -- the twins: within the stated error over dense sweeps (what the interpreter computes) ---------------------------
def _sweep(*parts) -> np.ndarray:
    return np.concatenate([np.asarray(p, np.float64) for p in parts]).astype(np.float32)


def _signed_geomspace(low, high, n):
    g = np.geomspace(low, high, n)
    return np.concatenate([g, -g])


SWEEPS = {
    "sqrt": (_sweep(np.geomspace(2.0 ** -149, 3e38, 300_001)), torch.sqrt),
    "rsqrt": (_sweep(np.geomspace(2.0 ** -149, 3e38, 300_001)), torch.rsqrt),
    "sigmoid": (_sweep(np.linspace(-100, 100, 400_001), _signed_geomspace(1e-30, 10, 100_000)), torch.sigmoid),
    "tanh": (_sweep(np.linspace(-12, 12, 1_000_001), _signed_geomspace(1e-38, 12, 200_000)), torch.tanh),
    "tanh_approx": (_sweep(np.linspace(-12, 12, 100_001)), torch.tanh),
    "log1p": (_sweep(np.linspace(-0.9999, 4, 1_000_001), np.geomspace(1e-38, 3e38, 200_000),
                     -np.geomspace(1e-38, 0.99999, 200_000), -1 + np.geomspace(6e-8, 1e-2, 50_000)), torch.log1p),
    "erf": (_sweep(np.linspace(-6, 6, 1_000_001), _signed_geomspace(1e-38, 6, 200_000)), torch.special.erf),
}


@pytest.mark.parametrize("fn", list(SWEEPS))
def test_twin_within_the_stated_error(fn):
    x, reference = SWEEPS[fn]
    with np.errstate(all="ignore"):
        got = math_approx.UNARY[fn](x).astype(np.float64)
    exact = reference(torch.from_numpy(x.astype(np.float64))).numpy()
    finite = np.isfinite(exact)
    error = np.abs(got - exact)[finite]
    bound = math_approx.error_bound(fn, exact, x)[finite]
    worst = np.argmax(np.where(error > bound, error / np.maximum(bound, 1e-300), 0))
    assert (error <= bound).all(), f"{fn}: {error[worst] / bound[worst]:.3g} x the bound at x = {x[finite][worst]!r}"
    assert (np.isnan(got) == np.isnan(exact)).all()


def test_twins_of_the_polynomials_take_well_under_their_bound():
    """The bounds leave room for the GPU's MUFU errors: the fp32 steps alone (MUFU exact) are within about 1 ulp."""
    for fn, ulps in (("tanh", 1.25), ("erf", 1.0), ("log1p", 0.9)):
        x, reference = SWEEPS[fn]
        with np.errstate(all="ignore"):
            got = math_approx.UNARY[fn](x).astype(np.float64)
        exact = reference(torch.from_numpy(x.astype(np.float64))).numpy()
        finite = np.isfinite(exact) & (np.abs(exact) > 2.0 ** -120)
        ulp = np.spacing(np.abs(exact[finite]).astype(np.float32)).astype(np.float64)
        assert (np.abs(got[finite] - exact[finite]) / ulp).max() <= ulps, fn


def test_pow_twin_and_powi():
    rng = np.random.default_rng(5)
    x = np.exp2(rng.uniform(-60, 60, 200_000)).astype(np.float32)
    y = rng.uniform(-2, 2, 200_000).astype(np.float32)
    with np.errstate(all="ignore"):
        got = math_approx.pow(x, y).astype(np.float64)
    exact = np.power(x.astype(np.float64), y.astype(np.float64))
    assert (np.abs(got - exact) <= math_approx.error_bound("pow", exact, x, y)).all()
    s = (rng.uniform(-4, 4, 100_000) * rng.choice([-1, 1], 100_000)).astype(np.float32)
    for n in (-3, -1, 0, 2, 3, 5, 8, 31):
        exact = np.power(s.astype(np.float64), n)
        assert (np.abs(math_approx.powi(s, n) - exact) <= math_approx.error_bound("powi", exact, n=n)).all(), n
    assert (math_approx.powi(s, 2) == s * s).all()      # x ** 2 is x * x


# -- the GPU test cases: their kernels compile (header-free), and they pass on the interpreter ----------------------
@pytest.mark.parametrize("builder,params", CASES)
def test_math_kernel_compiles_header_free(builder, params):
    case = builder(*params, device="cpu")
    res = case.kernel.resources(*case.args)
    assert res.spill_stores == 0 and res.stack_frame == 0, res
    source = case.kernel.source(*case.args)
    assert "#include" not in source
    assert not re.search(r"\b(sqrtf|rsqrtf|tanhf|erff|log1pf|powf|expf|logf|exp2f|log2f)\(", source), \
        "a CUDA math library function (a header's) in the generated source"


@pytest.mark.parametrize("builder,params", CASES)
def test_math_case_on_the_interpreter(builder, params):
    case = builder(*params, device="cpu")
    case.run(case.kernel.interpret)


# -- generated code ----------------------------------------------------------------------------------------------
def _map_body(fn) -> str:
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16], s: float):
        a, b = tk.rt(f32, 16, 16), tk.rt(f32, 16, 16)
        tk.load(a, x, (0, 0))
        tk.load(b, x, (1, 0))
        tk.map(a, lambda u, v: fn(u, v, s), a, b)
        tk.store(x, a, (0, 0))
    src = k.source(torch.empty(32, 16), 1.0)
    return src.split("tk::map(a, ", 1)[1].split(", a, b);", 1)[0]


@pytest.mark.parametrize("fn,cpp", [
    (lambda a, b, s: tk.sqrt(a) * tk.rsqrt(b), "tk::op_sqrt{}(x0) * tk::op_rsqrt{}(x1)"),
    (lambda a, b, s: tk.sigmoid(a) + tk.tanh(b) - tk.tanh(a, approx=True),
     "tk::op_sigmoid{}(x0) + tk::op_tanh{}(x1) - tk::op_tanh_approx{}(x0)"),
    (lambda a, b, s: tk.log1p(a) * tk.erf(b), "tk::op_log1p{}(x0) * tk::op_erf{}(x1)"),
    (lambda a, b, s: tk.pow(a, b) + a ** s, "tk::op_pow{}(x0, x1) + tk::op_pow{}(x0, s)"),
    (lambda a, b, s: a ** 2 + b ** -3 + a ** 0.5 + b ** -0.5,
     "tk::powi<2>(x0) + tk::powi<-3>(x1) + tk::op_sqrt{}(x0) + tk::op_rsqrt{}(x1)"),
    (lambda a, b, s: a ** 2.5 + 2 ** b + 10 ** a + abs(b) ** 1,
     "tk::op_pow{}(x0, 2.5f) + tk::op_exp2{}(x1) + tk::op_exp2{}(x0 * 3.321928094887362f) + tk::op_abs{}(x1)"),
])
def test_math_in_map_lambdas(fn, cpp):
    assert _map_body(fn).endswith(f"{{ return {cpp}; }}")


def _tile_kernel(body):
    """A one-warp kernel that loads a 16 x 16 f32 tile t, runs body(t) and stores the tile it returns, if any."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (0, 0))
        out = body(t)
        if out is not None:
            tk.store(x, out, (0, 0))
    return k


ONE_TILE = (torch.empty(16, 16),)


def test_tile_ops_and_operators():
    def body(t):
        tk.erf(t, t)
        tk.tanh(t, t, approx=True)
        return t ** 3 + abs(t)
    text = _tile_kernel(body).source(*ONE_TILE).split("// ---- end of prelude ----")[1]
    for stmt in (r"tk::erf\(t, t\);", r"tk::tanh_approx\(t, t\);",
                 r"tk::map\(t\d, \[\]\(float x0\) \{ return tk::powi<3>\(x0\); \}, t\);", r"tk::abs\(t\d, t\);"):
        assert re.search(stmt, text), stmt


def test_the_math_prelude_helpers_are_only_in_kernels_that_use_them():
    """Kernels without math functions carry none of their helpers; a kernel using one carries it (and not the
    others: the prelude's helpers are chosen by use, prelude/helpers.py); the whole prelude has them all."""
    def cube(t):
        tk.map(t, lambda v: v ** 3, t)
    kernel = _tile_kernel(lambda t: tk.exp2(t))
    plain, full = kernel.source(*ONE_TILE), kernel.source(*ONE_TILE, prelude="full")
    uses = _tile_kernel(cube).source(*ONE_TILE)
    assert "op_sqrt" not in plain and "powi" not in plain
    assert "struct op_sqrt" in full and "template <int N> __device__ __forceinline__ float powi" in full
    assert "template <int N> __device__ __forceinline__ float powi" in uses and "op_sqrt" not in uses


def test_pow_checks_its_operands():
    with pytest.raises(tk.TraceError, match=r"pow: expected a tile or vector operand"):
        _tile_kernel(lambda t: tk.pow(t, 2.0, 3.0)).trace(*ONE_TILE)
