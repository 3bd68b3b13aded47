"""The LCF template's parts for attention-like kernels, on the CPU: per-task inputs (`task_inputs`, `load_task`,
every `task_loads` mode), a warpgroup's own step count (`warpgroup_steps`, the others' steps skipped), and the
consumer warpgroups' turns at the tensor cores (`turns=True`, `st.turn()`), separately and together.

The kernel: each task is (64 x consumer warpgroups) rows of C by 64 columns; each consumer warpgroup's 64 rows of A
are its task input, and the steps' inputs are B's 64 x 64 tiles down a column: C's rows of warpgroup w are
A_w @ (B_0 + ... + B_{s-1}) over its s steps (all of them, or w + 1 with warpgroup_steps). The interpreter runs it
with fewer persistent blocks than tasks, so task inputs loaded ahead or preloaded wrap across tasks."""
from __future__ import annotations

import contextlib
import functools

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.templates import shared

import gpu_util
from gpu_util import rel_err

rand = functools.partial(gpu_util.rand, device="cpu")
poisoned = functools.partial(gpu_util.poisoned, device="cpu")
ROWS, COLS, STEPS = 3, 2, 3            # tasks' rows and columns of tiles; steps per task
TILE = 64


def parts_kernel(groups: int, task_loads: str, turns: bool, skips: bool):
    class PerTask:
        A: tk.gl[bf16, "M", TILE]
        B: tk.gl[bf16, "K", "N"]
        C: tk.gl[f32, "M", "N"]
        inputs = dict(b=shared(bf16, TILE, TILE))
        task_inputs = dict(a=shared(bf16, TILE, TILE))

        def tasks(self, g):
            return g.C.rows // (TILE * groups), g.C.cols // TILE

        def iters(self, g):
            return g.B.rows // TILE

        def load(self, g, task, inp, k, arrived):
            tk.tma.expect(arrived, inp)
            tk.tma.load_async(inp.b, g.B, (k, task.col), arrived)

        def load_task(self, g, task, inp, arrived):
            tk.tma.expect(arrived, inp)
            tk.tma.load_async(inp.a, g.A, (task.row * groups + tk.warpgroup.id(), 0), arrived)

        def setup(self, st):
            st.acc = tk.rt(f32, 16, TILE)
            if task_loads == "preload":
                st.a = tk.rt(bf16, 16, TILE)

        def start(self, st, task):
            tk.zero(st.acc)

        def compute(self, st, inp, k):
            if task_loads == "ahead_from_step":
                with tk.if_(k == 0):
                    st.load_next_task_inputs()
            a = st.a if task_loads == "preload" else st.task_inputs.a
            with st.turn() if turns else contextlib.nullcontext():
                tk.warpgroup.mma_AB(st.acc, a, inp.b)
            tk.warpgroup.mma_async_wait()

        def finish(self, g, st, task):
            tk.warpgroup.store(g.C, st.acc, (task.row * groups + tk.warpgroup.id(), task.col))

    if task_loads == "preload":
        def take_task_inputs(self, st, inp):
            tk.load(st.a, inp.a.subtile(16, TILE, (tk.warp_id() % 4, 0)))
        PerTask.take_task_inputs = take_task_inputs
    if skips:
        def warpgroup_steps(self, st):
            return tk.warpgroup.id() + 1
        PerTask.warpgroup_steps = warpgroup_steps
    name = f"parts_{groups}_{task_loads}" + ("_turns" if turns else "") + ("_skips" if skips else "")
    return tk.lcf(consumer_warpgroups=groups, stages=2, turns=turns, task_loads=task_loads, name=name)(PerTask)


def reference(a, b, groups: int, skips: bool):
    c = torch.empty(a.shape[0], b.shape[1], dtype=torch.float64)
    tiles = b.double().reshape(STEPS, TILE, b.shape[1])
    for row in range(0, a.shape[0], TILE):
        steps = (row // TILE) % groups + 1 if skips else STEPS
        c[row:row + TILE] = a[row:row + TILE].double() @ tiles[:steps].sum(0)
    return c


def run(groups, task_loads, turns, skips, blocks=2):
    a = rand(ROWS * groups * TILE, TILE, dtype=torch.bfloat16)
    b = rand(STEPS * TILE, COLS * TILE, dtype=torch.bfloat16)
    c = poisoned(ROWS * groups * TILE, COLS * TILE, dtype=torch.float32)
    parts_kernel(groups, task_loads, turns, skips).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b, groups, skips)) < 1e-2


@pytest.mark.parametrize("task_loads", tk.templates.TASK_LOADS)
def test_task_inputs_load_once_per_task_in_every_mode(task_loads):
    """6 tasks over 2 persistent blocks: each task's A rows, loaded at its start, ahead (at the start or from the
    first step) or preloaded into registers."""
    run(2, task_loads, turns=False, skips=False)


@pytest.mark.parametrize("groups", [2, 3])
def test_turns_go_round_the_consumer_warpgroups(groups):
    run(groups, "start", turns=True, skips=False)


@pytest.mark.parametrize("groups,turns", [(2, False), (3, True), (2, True)])
def test_warpgroups_skip_their_steps_past_warpgroup_steps(groups, turns):
    """Warpgroup w computes its first w + 1 steps; the others' stages are released, their turns passed on."""
    run(groups, "preload", turns=turns, skips=True, blocks=3)


def test_turns_source_takes_and_hands_on_the_turn():
    a, b = torch.zeros(2 * TILE, TILE, dtype=torch.bfloat16), torch.zeros(STEPS * TILE, TILE, dtype=torch.bfloat16)
    src = parts_kernel(2, "start", turns=True, skips=False).kernel.source(a, b, torch.zeros(2 * TILE, TILE))
    for barrier in (2, 3):           # warpgroup 0 waits on 2 and 1 on 3; each hands on to the other's
        assert src.count(f"named_sync({barrier}, 256)") == 1 + (barrier == 2)    # (+ the final take-back)
        assert src.count(f"named_arrive({barrier}, 256)") == 1 + (barrier == 2)  # (+ the first hand-out)


def plain(**attributes):
    base = dict(__annotations__=dict(A=tk.gl[bf16, "M", TILE]), inputs=dict(b=shared(bf16, TILE, TILE)),
                tasks=lambda self, g: (1, 1), iters=lambda self, g: 1, load=lambda self, g, task, inp, k, arrived: None,
                setup=lambda self, st: None, compute=lambda self, st, inp, k: None,
                finish=lambda self, g, st, task: None)
    return type("Plain", (), {**base, **attributes})


@pytest.mark.parametrize("options,attributes,error,match", [
    (dict(consumer_warpgroups=1, turns=True), {}, ValueError, "turns go round 2 or 3"),
    (dict(task_loads="ahead"), {}, ValueError, "is for a class with task_inputs"),
    (dict(task_loads="later"), {}, ValueError, "task_loads must be one of"),
    (dict(), dict(task_inputs=dict(a=shared(bf16, TILE, TILE))), TypeError, "write load_task"),
    (dict(task_loads="preload"), dict(task_inputs=dict(a=shared(bf16, TILE, TILE)),
                                      load_task=lambda self, g, task, inp, arrived: None),
     TypeError, "take_task_inputs"),
    (dict(), dict(task_inputs=dict(a=shared(bf16, TILE, TILE)), load_task=lambda self, g, task, inp, arrived: None,
                  take_task_inputs=lambda self, st, inp: None), TypeError, "take_task_inputs"),
])
def test_parts_errors(options, attributes, error, match):
    with pytest.raises(error, match=match):
        tk.lcf(**options)(plain(**attributes))
