"""Divisions in loops by kernel-fixed values as tk::divisor (codegen/divisors.py): which divisions, the C++, NVRTC,
and on the GPU every quotient and remainder against C's truncating division, for divisors and dividends of
every sign and size."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import f32
from gpu_util import on_gpu

ITERS = 64          # dividends per block
SPLIT = 65536       # results go out as (x // SPLIT, x % SPLIT), C's, each exact in fp32


@tk.kernel(warps=1, fast_division=True)
def divisions(y: tk.gl[f32, "R", 80], d: int, base: int, stride: int):
    """Rows 16 (b * ITERS + i) .. +15 of y: the quotient and the remainder of n = base + (b * ITERS + i) * stride
    by d, each as its high and low parts (divisions by a constant, left to the compiler), then i divided by the
    blocks."""
    t = tk.rt(f32, 16, 16)
    per_block = tk.let(y.rows // (16 * ITERS), "per_block")
    for i in tk.range(ITERS):
        row = tk.block_idx.x * ITERS + i
        n = base + row * stride
        for col, x in enumerate((n // d // SPLIT, n // d % SPLIT, n % d // SPLIT, n % d % SPLIT)):
            tk.fill(t, x)
            tk.store(y, t, (row, col))
        tk.fill(t, i // per_block)                           # a top-level constant divides too
        tk.store(y, t, (row, 4))


def c_div(a: int, b: int) -> int:
    q = abs(a) // abs(b)
    return q if (a < 0) == (b < 0) else -q


def expected(blocks: int, d: int, base: int, stride: int) -> torch.Tensor:
    out = []
    for row in range(blocks * ITERS):
        n = base + row * stride
        q, r = c_div(n, d), n - c_div(n, d) * d
        parts = (c_div(q, SPLIT), q - c_div(q, SPLIT) * SPLIT, c_div(r, SPLIT), r - c_div(r, SPLIT) * SPLIT,
                 c_div(row % ITERS, blocks))
        out.append([float(p) for p in parts])
    return torch.tensor(out).repeat_interleave(16, 0).repeat_interleave(16, 1)


def test_divisions_in_loops_by_fixed_values_use_divisors():
    y = torch.empty(16 * ITERS, 80)
    src = divisions.source(y, 7, 0, 1).split("end of prelude")[1]
    assert "const tk::divisor d_divisor(d);" in src
    assert "const tk::divisor per_block_divisor(per_block);" in src
    assert src.index("const int per_block") < src.index("per_block_divisor(per_block)") < src.index("for (")
    assert "/ d_divisor" in src and "% d_divisor" in src and "/ per_block_divisor" in src
    assert "/ 65536" in src and "% 65536" in src                 # constants: the compiler's
    assert "R / 1024;" in src                                       # outside loops: as written
    assert "tk::divisor" not in divisions.ir(y, 7, 0, 1)           # the IR keeps the plain division


def test_a_division_of_fixed_values_is_left_to_the_compiler():
    @tk.kernel(warps=1, fast_division=True)
    def fixed(y: tk.gl[f32, "R", 16], d: int):
        t = tk.rt(f32, 16, 16)
        for i in tk.range(y.rows // 16):
            tk.fill(t, y.rows // d + i)
            tk.store(y, t, (i, 0))
    src = fixed.source(torch.empty(64, 16), 3)
    assert "tk::divisor" not in src.split("end of prelude")[1] and "R / d" in src


def test_fast_division_off_keeps_cpp_division():
    plain = tk.kernel(divisions.fn, warps=1, fast_division=False)
    src = plain.source(torch.empty(16 * ITERS, 80), 7, 0, 1).split("end of prelude")[1]
    assert "tk::divisor" not in src and ") / d / 65536" in src and "i / per_block" in src


def test_divisors_compile_with_nvrtc():
    assert divisions.trace(torch.empty(16 * ITERS, 80), 7, 0, 1).lower().compile() is not None


def test_divisions_interpreted():
    y = torch.full((2 * 16 * ITERS, 80), float("nan"))
    divisions.interpret[(2,)](y, -7, -300, 11)
    assert torch.equal(y, expected(2, -7, -300, 11))


BLOCKS = 64
INT_MIN, INT_MAX = -2 ** 31, 2 ** 31 - 1
ROWS = BLOCKS * ITERS
WIDE = (2 ** 31 - 1) // ROWS                                          # (no int overflow on the way to n)
DIVIDENDS = [(-ROWS // 2, 1), (INT_MIN, 1), (INT_MAX - ROWS + 1, 1), (INT_MIN + 5, WIDE), (3, WIDE)]
CASES = [(d, base, stride) for d in (1, 2, 3, 7, 10, 64, 1000, 65537, 12345679, INT_MAX, -1, -3, -64, INT_MIN)
         for base, stride in DIVIDENDS
         if (d, base) != (-1, INT_MIN)]                                # (INT_MIN / -1 overflows: undefined in C)


@on_gpu
@pytest.mark.parametrize("d,base,stride", CASES)
def test_divisors_on_gpu(d, base, stride):
    y = torch.full((ROWS * 16, 80), float("nan"), device="cuda")
    divisions[(BLOCKS,)](y, d, base, stride)
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), expected(BLOCKS, d, base, stride))
