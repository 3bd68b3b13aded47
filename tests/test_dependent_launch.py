"""Programmatic dependent launch (tkpy/runtime/dependent_launch.py): the generated code signals and waits
right after its set-up, the launch asks for it, and TKPY_DEPENDENT_LAUNCH=0 turns both off. On the GPU,
chains of kernels that each read what the previous one wrote, on a stream and in a CUDA graph, come out
exact."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import f32

from gpu_util import on_gpu

ROWS = 64 * 132                 # a tile of 16 rows per warp, 4 warps a block: 132 blocks


def add_one(**options):
    """A fresh kernel (traced anew, so that it reads TKPY_DEPENDENT_LAUNCH): y = x + 1, tile by tile."""
    @tk.kernel(warps=4, name="add_one", **options)
    def k(x: tk.gl[f32, "R", 64], y: tk.gl[f32, "R", 64]):
        t = tk.rt(f32, 16, 64)
        tile = tk.block_idx.x * 4 + tk.warp_id()
        tk.load(t, x, (tile, 0))
        tk.add(t, t, 1.0)
        tk.store(y, t, (tile, 0))
    return k


def cpu_pair():
    return torch.zeros(ROWS, 64), torch.zeros(ROWS, 64)


def test_the_code_signals_and_waits_before_touching_global_memory():
    source = add_one().source(*cpu_pair())
    body = source[source.index('extern "C" __global__'):]
    signal, wait = body.index("tk::launch_dependents();"), body.index("tk::wait_for_previous_kernel();")
    first_access = min(body.index(text) for text in ("tk::load(", "tk::store("))
    assert signal < wait < first_access
    assert "griddepcontrol.launch_dependents;" in source and "griddepcontrol.wait;" in source


def test_the_environment_turns_it_off(monkeypatch):
    monkeypatch.setenv("TKPY_DEPENDENT_LAUNCH", "0")
    kernel = add_one()
    assert "tk::wait_for_previous_kernel();" not in kernel.source(*cpu_pair())
    assert kernel.trace(*cpu_pair()).ir.dependent_launch is False


def test_a_kernel_can_turn_it_off_for_itself():
    kernel = add_one(dependent_launch=False)
    assert "tk::wait_for_previous_kernel();" not in kernel.source(*cpu_pair())
    assert kernel.trace(*cpu_pair()).ir.dependent_launch is False
    assert kernel.variant(warps=4).options["dependent_launch"] is False
    assert add_one().trace(*cpu_pair()).ir.dependent_launch is True
    with pytest.raises(ValueError, match="dependent_launch must be True or False"):
        add_one(dependent_launch=0)


def test_cross_entropys_prologue_runs_without_it():
    """Between two forwards with it, the prologue with it cost the mean's forward 20 us a call (RESULTS.md runs
    282-283)."""
    from tkpy.kernels import cross_entropy_kernel as body
    from tkpy.kernels.cross_entropy_policy import prologue_config
    assert body.prologue_kernel(prologue_config("mean", None)).options["dependent_launch"] is False


@on_gpu
@pytest.mark.parametrize("graph", [False, True])
@pytest.mark.parametrize("enabled", ["1", "0"])
def test_chains_of_dependent_kernels_are_exact(monkeypatch, graph, enabled):
    """100 launches back to back, each reading the buffer the previous one wrote (a ping-pong of two):
    a kernel that touched memory before the previous one's writes showed would read a stale value."""
    monkeypatch.setenv("TKPY_DEPENDENT_LAUNCH", enabled)
    kernel = add_one()
    a = torch.randint(-1000, 1000, (ROWS, 64), device="cuda").float()      # integers: every sum is exact
    b = torch.full_like(a, float("nan"))
    start = a.clone()

    def chain():
        for _ in range(50):
            kernel[(ROWS // 64,)](a, b)
            kernel[(ROWS // 64,)](b, a)
    chain()                                     # compiles, and a first run on the stream
    torch.cuda.synchronize()
    if graph:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            chain()
        g.replay()
        g.replay()
        expected = start + 300
    else:
        chain()
        expected = start + 200
    torch.cuda.synchronize()
    assert torch.equal(a, expected)
    assert torch.equal(b, expected - 1)
