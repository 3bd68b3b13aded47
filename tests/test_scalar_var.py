"""Mutable runtime scalars (`tk.var`, `x += n`, `tk.assign`): IR text, C++, NVRTC, interpreter, errors. No GPU."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import f32


@tk.kernel(warps=1)
def running_sums(y: tk.gl[f32, "R", 16], n: int):
    """Row tile i of y holds (sum of the even j < i * n) and then i's own count of steps, through two tk.vars;
    the inner loop's bound reads a var, so it changes per outer iteration."""
    t = tk.rt(f32, 16, 16)
    total = tk.var(0, "total")
    steps = tk.var(0, "steps")
    for i in tk.range(y.rows // 16):
        tk.assign(steps, 0)
        for j in tk.range(total, total + i * n):    # stop re-read per iteration, as in C++
            with tk.if_(j % 2 == 0):
                total += 1
            steps += 1
        tk.fill(t, total * 1000 + steps)
        tk.store(y, t, (i, 0))


def expected(rows: int, n: int) -> torch.Tensor:
    out, total = [], 0
    for i in range(rows // 16):
        steps, j = 0, total
        while j < total + i * n:
            if j % 2 == 0:
                total += 1
            steps += 1
            j += 1
        out.append(total * 1000 + steps)
    return torch.tensor(out, dtype=torch.float32).repeat_interleave(16)[:, None].expand(rows, 16)


def test_var_source_and_ir():
    y = torch.empty(64, 16)
    src = running_sums.source(y, 3)
    assert "int total = 0;" in src and "const int total" not in src
    assert "total += 1;" in src and "steps += 1;" in src and "steps = 0;" in src
    ir = running_sums.ir(y, 3)
    assert "var total = 0" in ir and "total += 1" in ir


def test_var_compiles_with_nvrtc():
    assert running_sums.trace(torch.empty(64, 16), 3).lower().compile() is not None


@pytest.mark.parametrize("rows,n", [(64, 3), (128, 1), (16, 5)])
def test_var_interpreted_as_cpp_runs_it(rows, n):
    y = torch.full((rows, 16), float("nan"))
    running_sums.interpret[(1,)](y, n)
    assert torch.equal(y, expected(rows, n))


def test_assign_needs_a_var():
    @tk.kernel(warps=1)
    def bad(y: tk.gl[f32, "R", 16]):
        x = tk.let(y.rows, "x")
        tk.assign(x, 1)
    with pytest.raises(tk.TraceError, match="needs a mutable scalar made by tk.var"):
        bad.source(torch.empty(16, 16))


def test_var_dtype_is_kept():
    @tk.kernel(warps=1)
    def bad(y: tk.gl[f32, "R", 16], s: float):
        x = tk.var(0, "x")
        tk.assign(x, s)
    with pytest.raises(tk.TraceError, match="`x` is a i32 variable; the new value is a f32"):
        bad.source(torch.empty(16, 16), 1.0)


def test_var_is_scoped_to_its_block():
    @tk.kernel(warps=1)
    def bad(y: tk.gl[f32, "R", 16]):
        holder = []
        for i in tk.range(2):
            holder.append(tk.var(i, "x"))
        holder[0] += 1
    with pytest.raises(tk.TraceError, match="outside the block its tk.var was declared in"):
        bad.source(torch.empty(16, 16))


def test_logical_not_of_a_condition():
    """`~cond`: an integer comparison flips (readable C++, exact); a float one or a compound condition becomes
    `== false` (!(a < b) is not a >= b for NaN); a non-condition is an error. The interpreter agrees."""
    from tkpy.ir.expr import Sym, render
    from tkpy.tiles.dtypes import i32
    a, b, x = Sym("a", i32), Sym("b", i32), Sym("x", f32)
    assert render(~(a < b)) == "a >= b" and render(~(a != b)) == "a == b"
    assert render(~(x < 1.0)) == "x < 1.0f == false"
    assert render(~((a < b) & (b < 3))) == "(a < b && b < 3) == false"
    with pytest.raises(tk.TraceError, match="~ is the logical not of a condition"):
        ~(a + b)

    @tk.kernel(warps=1)
    def flags(y: tk.gl[f32, 16, 16], n: int):
        t = tk.rt(f32, 16, 16)
        tk.fill(t, 0.0)
        with tk.if_(~(n < 3)):
            tk.fill(t, 1.0)
        tk.store(y, t, (0, 0))
    for n, value in ((2, 0.0), (3, 1.0)):
        y = torch.full((16, 16), -1.0)
        flags.interpret[(1,)](y, n)
        assert torch.equal(y, torch.full((16, 16), value))
