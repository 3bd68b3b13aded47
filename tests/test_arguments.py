"""Bad launch arguments get an ArgumentError naming the argument before any work: grids that are not ints, scalars
out of their 32-bit range (on the interpreter's path and on the launchers' shared checks)."""
from __future__ import annotations

import math

import pytest
import torch

import tkpy as tk
from gpu_util import on_gpu
from tkpy import f32


def make_scaled():
    """A fresh kernel (no launch path made yet): y = x * s, with an int parameter n."""
    @tk.kernel(warps=1)
    def scaled(x: tk.gl[f32, 16, 16], y: tk.gl[f32, 16, 16], n: int, s: float):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (0, 0))
        tk.mul(t, t, s)
        tk.store(y, t, (0, 0))
    return scaled


scaled = make_scaled()


X, Y = torch.randn(16, 16), torch.empty(16, 16)


@pytest.mark.parametrize("grid", [1.5, (2, 0.5), "a", ("1",), (1, 2, 3, 4), 0])
def test_grids_that_are_not_positive_ints_are_refused(grid):
    with pytest.raises(tk.ArgumentError, match="grid"):
        scaled.interpret[grid](X, Y, 1, 0.5)


@pytest.mark.parametrize("n,s,match", [(2**31, 0.5, "`n` = 2147483648 does not fit a 32-bit int"),
                                       (1, 1e40, "`s` = 1e\\+40 does not fit a 32-bit float"),
                                       (1, -10**400, "`s` = -1000.* does not fit a 32-bit float"),
                                       (1, "2", "`s` must be a float"), (True, 0.5, "`n` must be an int")])
def test_scalars_out_of_range_name_the_argument(n, s, match):
    with pytest.raises(tk.ArgumentError, match=match):
        scaled.interpret[(1,)](X, Y, n, s)


@pytest.mark.parametrize("s", [math.inf, -math.inf, 3.4e38])
def test_infinities_and_the_largest_floats_pass(s):
    scaled.interpret[(1,)](X, Y, 1, s)
    assert torch.equal(Y, (X * s).float())


@on_gpu
@pytest.mark.parametrize("native", ["1", "0"])
def test_the_launchers_refuse_what_the_checks_refuse(monkeypatch, native):
    """On the GPU, after a launch that made the fast path: the native and the Python launcher hand a scalar that does
    not fit back to the checks (an ArgumentError, not OverflowError or a silently infinite float)."""
    monkeypatch.setenv("TKPY_NATIVE_LAUNCH", native)
    scaled_here = make_scaled()
    x, y = X.cuda(), Y.cuda()
    scaled_here[(1,)](x, y, 1, 0.5)
    assert torch.equal(y, x * 0.5)
    with pytest.raises(tk.ArgumentError, match="does not fit a 32-bit float"):
        scaled_here[(1,)](x, y, 1, 1e40)
    with pytest.raises(tk.ArgumentError, match="grid"):
        scaled_here[1.5](x, y, 1, 0.5)


def test_check_raises_what_a_launch_would_without_tracing():
    """Kernel.check binds the arguments as a launch (and a GPU's occupancy query) does: a stand-in of the wrong
    shape fails there, naming the argument, before any trace or compile."""
    scaled.check(X, Y, 1, 0.5)
    with pytest.raises(tk.ArgumentError, match="`y` has 1 dims \\(4,\\), the kernel declares gl<f32, 16, 16>"):
        scaled.check(X, torch.empty(4), 1, 0.5)
