"""tkpy's math functions against torch in float64 on the GPU: tk.sqrt, tk.rsqrt, tk.sigmoid, tk.tanh (and
approx=True), tk.log1p, tk.erf, tk.pow and `**`, in tk.map functions, as destination-first tile ops and as values of
tiles and vectors, on fresh random inputs across each one's domain, within the error tkpy/tiles/math_approx.py
states (error_bound); infinities and NaN where torch has them.

Each test builds a `Case` (kernel, grid, arguments and a check) for any device, as tests/test_gpu_ops_extra.py
does: the GPU tests run it here; tests/test_math_cpu.py compiles every case's kernel with NVRTC and runs the cases on
the CPU interpreter, whose fp32 twins must meet the same bounds.
"""
from __future__ import annotations

import functools
import math

import numpy as np
import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.tiles.math_approx import error_bound

from gpu_util import poisoned, rand, requires_gpu
from test_gpu_ops_extra import Case

pytestmark = requires_gpu
VECTOR_LAYOUT = {"row": "ortho", "col": "align"}      # the col_vec layout of a tile in this layout


def log_uniform(*shape, low: float, high: float, signed: bool = False, device="cuda") -> torch.Tensor:
    """2^U(low, high) in fp32, with random signs if `signed`: every binade of the range equally often."""
    x = torch.exp2(rand(*shape, dtype=torch.float64, low=low, high=high, device=device))
    if signed:
        x = x * (torch.randint(0, 2, shape, device=device) * 2 - 1)
    return x.float()


def mixture(*parts) -> torch.Tensor:
    """The parts' elements, shuffled together (each part a 1-d tensor)."""
    x = torch.cat(parts)
    return x[torch.randperm(x.numel(), device=x.device)]


# Each function: how the kernel computes it (a value of a tile, vector or map element; the destination-first op),
# its domain (n fresh fp32 inputs) and its special values (input, result).
FUNCTIONS = {
    "sqrt": (tk.sqrt, tk.sqrt, lambda n, d: log_uniform(n, low=-149, high=127, device=d), torch.sqrt,
             [(0.0, 0.0), (math.inf, math.inf), (-1.0, math.nan), (math.nan, math.nan)]),
    "rsqrt": (tk.rsqrt, tk.rsqrt, lambda n, d: log_uniform(n, low=-149, high=127, device=d), torch.rsqrt,
              [(0.0, math.inf), (math.inf, 0.0), (-1.0, math.nan), (math.nan, math.nan)]),
    "sigmoid": (tk.sigmoid, tk.sigmoid,
                lambda n, d: mixture(rand(n // 2, dtype=torch.float32, low=-100, high=100, device=d),
                                     log_uniform(n - n // 2, low=-30, high=3, signed=True, device=d)),
                torch.sigmoid, [(math.inf, 1.0), (-math.inf, 0.0), (math.nan, math.nan), (-200.0, 0.0)]),
    "tanh": (tk.tanh, tk.tanh, lambda n, d: log_uniform(n, low=-40, high=4, signed=True, device=d), torch.tanh,
             [(math.inf, 1.0), (-math.inf, -1.0), (0.0, 0.0), (math.nan, math.nan)]),
    "tanh_approx": (lambda x: tk.tanh(x, approx=True), lambda d, s: tk.tanh(d, s, approx=True),
                    lambda n, d: log_uniform(n, low=-40, high=4, signed=True, device=d), torch.tanh,
                    [(math.inf, 1.0), (-math.inf, -1.0), (0.0, 0.0), (math.nan, math.nan)]),
    "log1p": (tk.log1p, tk.log1p,
              lambda n, d: mixture(log_uniform(n // 4, low=-40, high=-1, signed=True, device=d),
                                   -1 + log_uniform(n // 4, low=-24, high=-1, device=d),
                                   rand(n // 4, dtype=torch.float32, low=-0.5, high=2, device=d),
                                   log_uniform(n - 3 * (n // 4), low=-1, high=127, device=d)),
              torch.log1p, [(-1.0, -math.inf), (-2.0, math.nan), (math.inf, math.inf), (math.nan, math.nan)]),
    "erf": (tk.erf, tk.erf,
            lambda n, d: mixture(log_uniform(n // 2, low=-40, high=2.5, signed=True, device=d),
                                 rand(n - n // 2, dtype=torch.float32, low=-4.5, high=4.5, device=d)),
            torch.special.erf, [(math.inf, 1.0), (-math.inf, -1.0), (0.0, 0.0), (math.nan, math.nan)]),
}


def check_within(got: torch.Tensor, exact: torch.Tensor, bound: torch.Tensor, what: str, inputs=()) -> None:
    """got (fp32) is NaN exactly where the exact float64 result is, equal to it where it is infinite in fp32, and
    within `bound` of it elsewhere; the message names the worst element and its inputs."""
    got, exact = got.double().cpu(), exact.double().cpu()
    rounded = exact.float().double()
    assert torch.equal(got.isnan(), exact.isnan()), f"{what}: NaN where torch has none, or none where it has"
    inf = rounded.isinf()
    assert torch.equal(got[inf], rounded[inf]), f"{what}: wrong infinities"
    finite = ~exact.isnan() & ~inf
    bound = torch.as_tensor(bound, dtype=torch.float64).cpu()[finite]
    assert not bound.isnan().any(), f"{what}: the error bound is NaN somewhere (a test bug)"
    error = (got - exact).abs()[finite]
    if (error > bound).any():
        over = torch.where(error > bound, error / bound.clamp_min(1e-300), 0.0)
        i = over.argmax()
        at = ", ".join(f"{x.double().cpu()[finite][i].item()!r}" for x in inputs)
        raise AssertionError(f"{what}: {over.max().item():.3g} times the stated error at ({at}): got "
                             f"{got[finite][i].item()!r}, exact {exact[finite][i].item()!r}")


# -- the unary functions: in a map, as a tile op, as a value of a tile and of a vector -------------------------------
@functools.cache
def unary_kernel(fn: str, layout: str):
    value, op = FUNCTIONS[fn][:2]

    @tk.kernel(warps=2, name=f"math_{fn}_{layout}")
    def k(x: tk.gl[f32, "R", 64], y: tk.gl[f32, 3, "R", 64], v: tk.gl[f32, "V", 16], vy: tk.gl[f32, "V", 16]):
        t, u = tk.rt(f32, 16, 64, layout), tk.rt(f32, 16, 64, layout)
        tile = tk.block_idx.x * 2 + tk.warp_id()
        tk.load(t, x, (tile, 0))
        tk.map(u, lambda a: value(a), t)              # an expression of a map function
        tk.store(y, u, (0, tile, 0))
        op(u, t)                                      # the destination-first tile op
        tk.store(y, u, (1, tile, 0))
        tk.store(y, value(t), (2, tile, 0))           # a new tile
        vec = tk.rv(f32, 16, VECTOR_LAYOUT[layout])
        tk.load(vec, v, (tile, 0))
        tk.store(vy, value(vec), (tile, 0))           # a new vector
    return k


UNARY_PARAMS = [(fn, layout) for fn in FUNCTIONS for layout in ("row", "col")]


def unary_case(fn: str, layout: str, device="cuda") -> Case:
    *_, domain, reference, specials = FUNCTIONS[fn]
    x = domain(64 * 64, device).view(64, 64)
    x[0, :len(specials)] = torch.tensor([s for s, _ in specials], device=device)
    v = domain(4 * 16, device).view(4, 16)
    y = poisoned(3, 64, 64, dtype=torch.float32, device=device)
    vy = poisoned(4, 16, dtype=torch.float32, device=device)

    def check():
        for got, inp, what in ((y[0], x, "in tk.map"), (vy, v, "of a vector")):
            exact = reference(inp.double())
            bound = error_bound(fn, exact.cpu().numpy(), inp.double().cpu().numpy())
            check_within(got, exact, torch.from_numpy(bound), f"tk.{fn} {what}", (inp,))
        assert torch.equal(y[1].nan_to_num(7.0), y[0].nan_to_num(7.0)), f"tk.{fn}(dst, src) differs from the map's"
        assert torch.equal(y[2].nan_to_num(7.0), y[0].nan_to_num(7.0)), f"tk.{fn}(tile) differs from the map's"
        for (_, want), got in zip(specials, y[0, 0, :len(specials)].tolist()):
            assert got == want or (math.isnan(want) and math.isnan(got)), f"tk.{fn}: special values {y[0, 0, :4]}"
    return Case(unary_kernel(fn, layout), (2,), (x, y, v, vy), check)


@pytest.mark.parametrize("fn,layout", UNARY_PARAMS)
def test_math_function(fn, layout):
    unary_case(fn, layout).run()


# -- tk.pow with a tile exponent: in a map, as a tile op, as `**` of tiles ---------------------------------------------
@functools.cache
def pow_kernel(layout: str):
    @tk.kernel(warps=2, name=f"math_pow_{layout}")
    def k(x: tk.gl[f32, "R", 64], e: tk.gl[f32, "R", 64], y: tk.gl[f32, 3, "R", 64]):
        t, p, u = tk.rt(f32, 32, 64, layout), tk.rt(f32, 32, 64, layout), tk.rt(f32, 32, 64, layout)
        tile = tk.block_idx.x * 2 + tk.warp_id()
        tk.load(t, x, (tile, 0))
        tk.load(p, e, (tile, 0))
        tk.map(u, lambda a, b: tk.pow(a, b), t, p)
        tk.store(y, u, (0, tile, 0))
        tk.pow(u, t, p)
        tk.store(y, u, (1, tile, 0))
        tk.store(y, t ** p, (2, tile, 0))
    return k


POW_SPECIALS = [((0.0, 2.0), 0.0), ((0.0, -1.0), math.inf), ((-2.0, 0.5), math.nan), ((5.0, 0.0), 1.0),
                ((1.0, math.inf), 1.0), ((math.nan, 0.0), 1.0), ((math.inf, -2.0), 0.0)]   # (x, y), x ** y


def pow_case(layout: str, device="cuda") -> Case:
    x = log_uniform(128, 64, low=-12, high=12, device=device)
    e = rand(128, 64, dtype=torch.float32, low=-6, high=6, device=device)
    for i, ((a, b), _) in enumerate(POW_SPECIALS):
        x[0, i], e[0, i] = a, b
    y = poisoned(3, 128, 64, dtype=torch.float32, device=device)

    def check():
        exact = torch.pow(x.double(), e.double())
        exact[0, :len(POW_SPECIALS)] = torch.tensor([want for _, want in POW_SPECIALS], dtype=torch.float64)
        bound = error_bound("pow", exact.cpu().numpy(), x.double().cpu().numpy(), e.double().cpu().numpy())
        check_within(y[0], exact, torch.from_numpy(bound), "tk.pow(x, y)", (x, e))
        for (_, want), got in zip(POW_SPECIALS, y[0, 0, :len(POW_SPECIALS)].tolist()):
            assert got == want or (math.isnan(want) and math.isnan(got)), f"tk.pow: special values {y[0, 0, :7]}"
        for i in (1, 2):
            assert torch.equal(y[i].nan_to_num(7.0), y[0].nan_to_num(7.0)), f"pow form {i} differs from the map's"
    return Case(pow_kernel(layout), (2,), (x, e, y), check)


@pytest.mark.parametrize("layout", ["row", "col"])
def test_pow(layout):
    pow_case(layout).run()


# -- constant exponents and bases: integers square and multiply (negative x too), +-0.5 are sqrt / rsqrt ------------
EXPONENTS = (2, 3, -1, -2, 7, 0, 0.5, -0.5, 1.5, -2.25)
BASES = (2, 10.0)


@functools.cache
def power_constants_kernel(layout: str):
    @tk.kernel(warps=2, name=f"math_power_constants_{layout}")
    def k(x: tk.gl[f32, "R", 64], z: tk.gl[f32, "R", 64], y: tk.gl[f32, len(EXPONENTS) + len(BASES), "R", 64]):
        t, u = tk.rt(f32, 16, 64, layout), tk.rt(f32, 16, 64, layout)
        tile = tk.block_idx.x * 2 + tk.warp_id()
        tk.load(t, x, (tile, 0))
        for i, c in enumerate(EXPONENTS):            # a Python loop: unrolled at trace time
            if i % 2:
                tk.store(y, t ** c, (i, tile, 0))
            else:
                tk.map(u, lambda a: a ** c, t)
                tk.store(y, u, (i, tile, 0))
        tk.load(t, z, (tile, 0))
        for j, b in enumerate(BASES):
            tk.map(u, lambda a: b ** a, t)
            tk.store(y, u, (len(EXPONENTS) + j, tile, 0))
    return k


def power_constants_case(layout: str, device="cuda") -> Case:
    x = log_uniform(64, 64, low=-5, high=5, signed=True, device=device)
    z = rand(64, 64, dtype=torch.float32, low=-20, high=20, device=device)
    y = poisoned(len(EXPONENTS) + len(BASES), 64, 64, dtype=torch.float32, device=device)

    def check():
        xs = x.double().cpu().numpy()
        for i, c in enumerate(EXPONENTS):
            exact = torch.pow(x.double(), c)
            if c == int(c):
                bound = error_bound("powi", exact.cpu().numpy(), n=int(c))
            else:
                name = {0.5: "sqrt", -0.5: "rsqrt"}.get(c, "pow")
                bound = error_bound(name, exact.cpu().numpy(), xs, np.full_like(xs, c))
            check_within(y[i], exact, torch.from_numpy(bound), f"x ** {c}", (x,))
        for j, b in enumerate(BASES):
            exact = torch.pow(b, z.double())
            bound = error_bound("pow", exact.cpu().numpy(), np.full_like(xs, b), z.double().cpu().numpy())
            check_within(y[len(EXPONENTS) + j], exact, torch.from_numpy(bound), f"{b} ** x", (z,))
    return Case(power_constants_kernel(layout), (2,), (x, z, y), check)


@pytest.mark.parametrize("layout", ["row", "col"])
def test_power_of_constants(layout):
    power_constants_case(layout).run()


# -- the activations a newcomer writes with them, on bf16 tiles (against torch.nn.functional) -----------------------
ACTIVATIONS = {
    "silu": (lambda a: a * tk.sigmoid(a), torch.nn.functional.silu),
    "gelu": (lambda a: 0.5 * a * (1 + tk.erf(a * 0.7071067811865476)), torch.nn.functional.gelu),
    "gelu_tanh": (lambda a: 0.5 * a * (1 + tk.tanh(0.7978845608028654 * (a + 0.044715 * a ** 3))),
                  lambda x: torch.nn.functional.gelu(x, approximate="tanh")),
    "softplus": (lambda a: tk.log1p(tk.exp(a)), torch.nn.functional.softplus),
    "rms": (lambda a: a * tk.rsqrt(a * a + 1e-6), lambda x: x * torch.rsqrt(x * x + 1e-6)),
}


@functools.cache
def activations_kernel():
    @tk.kernel(warps=2, name="math_activations")
    def k(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, len(ACTIVATIONS), "R", 64]):
        t, u = tk.rt(bf16, 32, 64), tk.rt(bf16, 32, 64)
        tile = tk.block_idx.x * 2 + tk.warp_id()
        tk.load(t, x, (tile, 0))
        for i, (fn, _) in enumerate(ACTIVATIONS.values()):
            tk.map(u, fn, t)
            tk.store(y, u, (i, tile, 0))
    return k


def activations_case(device="cuda") -> Case:
    """bf16 results: within bf16's rounding (2^-8 relative) of torch's in float64, and 1e-6 for fp32 rounding
    where the formulas cancel (gelu's 1 + erf(x) for x << 0)."""
    x = rand(128, 64, dtype=torch.bfloat16, low=-8, high=8, device=device)
    y = poisoned(len(ACTIVATIONS), 128, 64, dtype=torch.bfloat16, device=device)

    def check():
        for i, (name, (_, reference)) in enumerate(ACTIVATIONS.items()):
            exact = reference(x.double())
            check_within(y[i], exact, 2 ** -8 * exact.abs() + 1e-6, name, (x,))
    return Case(activations_kernel(), (2,), (x, y), check)


def test_activations():
    activations_case().run()


# Every case above, for tests/test_math_cpu.py: (builder, parameter lists).
ALL_CASES = [(unary_case, UNARY_PARAMS), (pow_case, [("row",), ("col",)]),
             (power_constants_case, [("row",), ("col",)]), (activations_case, [()])]
