"""The LCF template's step outputs (tkpy/templates/step_outputs.py), on the CPU: a kernel whose every step's product
A_k B_k (a tile per task and step, no accumulation) leaves through the step-output ring to the storer warp, run by the
interpreter on fewer persistent blocks than tasks (stages reused across tasks and steps while the storer still
stores), with 1-3 stages, every warpgroup or the first alone writing, per-task step counts (0 included); the C++
compiled by NVRTC; the declarations' errors. Attention's backward uses it for dQ (tests/test_attention_bwd.py)."""
from __future__ import annotations

import functools

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32  # noqa: F401 (bf16: GemmSteps' annotations, evaluated here)
from tkpy.templates import shared

import gpu_util
from gpu_util import rel_err
from test_lcf_template import BK, BM, BN, poisoned, rand, steps_of
from test_lcsf_template import GemmSteps


@functools.cache
def step_products(stages: int, writers: int, ragged: bool):
    """P[k, rows of task row r, cols of task col c] = A[r rows, k-th BK] @ B[k-th BK, c cols], stored a step at a
    time by the storer; with one writer the first warpgroup computes and writes both halves of the rows."""

    @tk.lcf(consumer_warpgroups=2, stages=2, step_output_stages=stages, step_output_writers=writers,
            name=f"step_products_{stages}_{writers}" + ("_ragged" if ragged else ""))
    class StepProducts(GemmSteps):
        P: tk.gl[f32, "S", "M", "N"]
        step_outputs = dict(p=shared(f32, BM // 2, BN, count=2))

        def tasks(self, g):
            return g.P.rows // BM, g.P.cols // BN

        if ragged:
            def iters(self, g, task):
                return steps_of(task.row)

        def setup(self, st):
            st.acc = tk.rt(f32, 16, BN)

        def compute(self, st, inp, k):
            if writers == 2:
                tk.warpgroup.mm_AB(st.acc, inp.a[tk.warpgroup.id()], inp.b)
                tk.warpgroup.mma_async_wait()
                with st.step_output() as out:
                    tk.warpgroup.store(out.p[tk.warpgroup.id()], st.acc)
                return
            with tk.if_(tk.warpgroup.id() == 0):
                with st.step_output() as out:
                    for half in range(2):
                        tk.warpgroup.mm_AB(st.acc, inp.a[half], inp.b)
                        tk.warpgroup.mma_async_wait()
                        tk.warpgroup.store(out.p[half], st.acc)

        def store_step(self, g, task, out, k):
            for half in range(2):
                tk.tma.store_async(g.P, out.p[half], (k, task.row * 2 + half, task.col))

        def finish(self, g, st, task):
            pass

    return StepProducts


def reference(a, b, ragged, steps):
    out = torch.full((steps, a.shape[0], b.shape[1]), float("nan"), dtype=torch.float64)
    for r in range(a.shape[0] // BM):
        for k in range(steps_of(r) if ragged else steps):
            rows, depth = slice(r * BM, (r + 1) * BM), slice(k * BK, (k + 1) * BK)
            out[k, rows] = a[rows, depth].double() @ b[depth].double()
    return out


@pytest.mark.parametrize("stages,writers,ragged,blocks", [(2, 2, False, 2), (1, 2, False, 3), (3, 1, False, 2),
                                                          (2, 2, True, 2), (1, 1, True, 1)])
def test_each_steps_outputs_leave_through_the_storer(stages, writers, ragged, blocks):
    """5 x 2 tiles of 2 steps on 1-3 persistent blocks; the ragged tasks take 0, 1 or 2 steps (the poison stays
    where a task has no step k)."""
    a, b = rand(5 * BM, 2 * BK, dtype=torch.bfloat16), rand(2 * BK, 2 * BN, dtype=torch.bfloat16)
    p = poisoned(2, 5 * BM, 2 * BN, dtype=torch.float32)
    step_products(stages, writers, ragged).kernel.interpret[(blocks,)](a, b, p)
    want = reference(a, b, ragged, 2)
    written = ~torch.isnan(want)
    assert torch.isnan(p[~written]).all(), "a step a task does not have was written"
    assert rel_err(p[written], want[written]) < 1e-2


@gpu_util.on_gpu
@pytest.mark.parametrize("stages,writers,ragged", [(2, 2, False), (1, 1, True), (3, 2, True)])
def test_gpu_each_steps_outputs_leave_through_the_storer(stages, writers, ragged):
    """The same on the GPU: 40 x 4 tiles of 3 steps on the persistent grid (several tasks a block)."""
    a = gpu_util.rand(40 * BM, 3 * BK, dtype=torch.bfloat16, device="cuda")
    b = gpu_util.rand(3 * BK, 4 * BN, dtype=torch.bfloat16, device="cuda")
    p = gpu_util.poisoned(3, 40 * BM, 4 * BN, dtype=torch.float32, device="cuda")
    step_products(stages, writers, ragged)(a, b, p)
    want = reference(a.cpu(), b.cpu(), ragged, 3)
    written = ~torch.isnan(want)
    assert torch.isnan(p.cpu()[~written]).all() and rel_err(p.cpu()[written], want[written]) < 1e-2


def test_the_kernel_compiles():
    a, b = torch.empty(2 * BM, 2 * BK, dtype=torch.bfloat16), torch.empty(2 * BK, 2 * BN, dtype=torch.bfloat16)
    p = torch.empty(2, 2 * BM, 2 * BN)
    r = step_products(2, 2, True).kernel.resources(a, b, p)
    assert r.found and r.spill_stores == r.spill_loads == 0, r.summary()


def _declare(options: dict, **members):
    """An LCF class of GemmSteps' loop with a P output and `members`, decorated with `options`."""
    body = {"__annotations__": {"P": tk.gl[f32, "S", "M", "N"]}, "finish": lambda self, g, st, task: None,
            "tasks": lambda self, g: (g.P.rows // BM, g.P.cols // BN), **members}
    return tk.lcf(**options)(type("Declared", (GemmSteps,), body))


def test_bad_declarations_say_why():
    outputs = dict(step_outputs=dict(p=shared(f32, BM // 2, BN)))
    store = dict(store_step=lambda self, g, task, out, k: None)
    with pytest.raises(TypeError, match="write store_step"):
        _declare({}, **outputs)
    with pytest.raises(TypeError, match="warpgroup_steps method skips some"):
        _declare({}, **outputs, **store, warpgroup_steps=lambda self, st: 1)
    with pytest.raises(ValueError, match="step_output_stages must be 1..4"):
        _declare(dict(step_output_stages=5), **outputs, **store)
    with pytest.raises(ValueError, match="step_output_writers must be 1..2"):
        _declare(dict(step_output_writers=3), **outputs, **store)
    with pytest.raises(ValueError, match="2\\+ producer_warps"):
        _declare(dict(producer_warps=1), **outputs, **store)
    with pytest.raises(ValueError, match="for a class with step_outputs"):
        _declare(dict(step_output_stages=3))
