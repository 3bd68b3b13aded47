"""The LCF template's per-task step counts (`iters(g, task)`, 0 included) and task-order hook, run by the
CPU interpreter with fewer persistent blocks than tasks, so the ring of stages wraps across tasks of
different lengths; and the generated C++ compiled by NVRTC. No GPU needed."""
from __future__ import annotations

import functools
import re

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.templates import shared

import gpu_util
from gpu_util import rel_err

rand = functools.partial(gpu_util.rand, device="cpu")
poisoned = functools.partial(gpu_util.poisoned, device="cpu")
BM, BN, BK = 128, 64, 64


def steps_of(row):
    """Task row r multiplies over the first (r % 3) * 64 columns of A only: 0, 1, 2 steps."""
    return row % 3


@functools.cache
def ragged_gemm(stages: int, reverse: bool, lagged: bool = False):
    @tk.lcf(consumer_warpgroups=2, stages=stages, persistent=True,
            name=f"ragged_gemm_{stages}_{int(reverse)}" + ("_lagged" if lagged else ""))
    class Ragged:
        A: tk.gl[bf16, "M", "K"]
        B: tk.gl[bf16, "K", "N"]
        C: tk.gl[f32, "M", "N"]
        inputs = dict(a=shared(bf16, BM // 2, BK, count=2), b=shared(bf16, BK, BN))

        def tasks(self, g):
            return g.C.rows // BM, g.C.cols // BN

        def iters(self, g, task):
            return steps_of(task.row)

        if reverse:
            def order(self, g, index, row_tiles, col_tiles):
                """Last row of tiles first, columns inner."""
                return row_tiles - 1 - index // col_tiles, index % col_tiles

        def load(self, g, task, inp, k, arrived):
            tk.tma.expect(arrived, inp)
            for i in range(2):
                tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
            tk.tma.load_async(inp.b, g.B, (k, task.col), arrived)

        def setup(self, st):
            st.acc = tk.rt(f32, 16, BN)

        def start(self, st, task):
            tk.zero(st.acc)

        if lagged:
            def compute(self, st, inp, k, prev):
                """Step k multiplies step k-1's tiles (still held), the last step its own too."""
                with tk.if_(k > 0):
                    tk.warpgroup.mma_AB(st.acc, prev.a[tk.warpgroup.id()], prev.b)
                with tk.if_(k == st.iters - 1):
                    tk.warpgroup.mma_AB(st.acc, inp.a[tk.warpgroup.id()], inp.b)
        else:
            def compute(self, st, inp, k):
                tk.warpgroup.mma_AB(st.acc, inp.a[tk.warpgroup.id()], inp.b)

        def finish(self, g, st, task):
            tk.warpgroup.store(g.C, st.acc, (st.task.row * 2 + tk.warpgroup.id(), task.col))
    return Ragged


def reference(a, b):
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64)
    for r in range(a.shape[0] // BM):
        n = steps_of(r) * BK
        rows = slice(r * BM, (r + 1) * BM)
        out[rows] = a[rows, :n].double() @ b[:n].double()
    return out


@pytest.mark.parametrize("stages,reverse,blocks,lagged", [(2, False, 2, False), (3, True, 3, False),
                                                         (2, True, 1, False), (2, False, 2, True), (3, True, 1, True)])
def test_per_task_steps_wrap_the_ring_across_tasks(stages, reverse, blocks, lagged):
    """lagged: compute(st, inp, k, prev) uses the previous step's stage, which stays unreleased meanwhile."""
    a, b = rand(5 * BM, 2 * BK, dtype=torch.bfloat16), rand(2 * BK, 3 * BN, dtype=torch.bfloat16)
    c = poisoned(5 * BM, 3 * BN, dtype=torch.float32)
    ragged_gemm(stages, reverse, lagged).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


def test_per_task_steps_source_keeps_a_running_ring_count():
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16), \
        torch.empty(256, 64)
    kernel = ragged_gemm(2, True).kernel
    src = kernel.source(a, b, c)
    rings = re.findall(r"\bint (ring\w*) = 0;", src)
    assert len(rings) == 2                              # the producer's and the consumers'
    for ring in rings:
        assert re.search(rf"{ring} \+= iters\w*;", src) and re.search(rf"const int it\w* = {ring} \+ ", src)
    assert re.search(r"if \(iters\w* > 0\)", src)      # the consumers release a last stage only if there was one
    assert kernel.trace(a, b, c).lower().compile() is not None


def test_grid_is_cached_per_shapes_and_still_checked(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    template = ragged_gemm(2, False)
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16), \
        torch.empty(256, 64)
    assert template.grid(a, b, c) == (2,) and template.grid(a, b, c) == (2,)
    assert template.grid(torch.empty(1024, 128, dtype=torch.bfloat16), b, torch.empty(1024, 64)) == (8,)
    with pytest.raises(tk.ArgumentError, match="no tasks"):
        template.grid(a[:0], b, c[:0])
    with pytest.raises(tk.ArgumentError, match="takes 3 arguments"):
        template.grid(a, b)
