"""The LCF template's second ring of "late" input buffers (`late_inputs`, `load_late`, `late_stages`), on the CPU:
a GEMM whose A tiles come through the early ring and whose B tiles come through the late ring, used one step
later as attention uses V: step k copies A_k into registers and multiplies A_{k-1} (registers) by B_{k-1}
(`prev`), the last step also A_k by its own B_k (`inp.late`). Run by the interpreter with fewer persistent blocks
than tasks and per-task step counts (0 included), so both rings wrap across tasks of different lengths; with the
last MMA waited for in compute (stages released right after each step) or left in flight (released a step
later, or waited for by the template when the rings are too short to hold them); in clusters of two blocks
that multicast A; under LCSF; a broken late protocol (a late stage never released, or read before it arrived)
is caught; the parameter and shared-memory errors. No GPU needed."""
from __future__ import annotations

import functools
import importlib
import re
import sys

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.errors import DeadlockError, InterpretError
from tkpy.templates import SplitK, shared

import gpu_util
from gpu_util import rel_err
from test_lcf_template import reference as ragged_reference

lcf_module = importlib.import_module("tkpy.templates.lcf")     # (tkpy.templates.lcf is the decorator)
late_ring = importlib.import_module("tkpy.templates.late_ring")
rand = functools.partial(gpu_util.rand, device="cpu")
poisoned = functools.partial(gpu_util.poisoned, device="cpu")
BM, BN, BK = 128, 64, 64
ROWS, COLS, DEPTH = 6, 2, 4                # tiles of C, and K steps of A's full width


def steps_of(row):
    """Task row r multiplies over the first r % 4 K steps only: 0, 1, 2 or 3 steps."""
    return row % 4


class LateGemm:
    """C = A @ B in 128 x 64 tiles: A's tiles (each consumer warpgroup's 64 rows) in the early ring, B's in the
    late ring, B_k used at step k + 1 (`prev`), and at the last step also at step k (`inp.late`)."""

    A: tk.gl[bf16, "M", "K"]
    B: tk.gl[bf16, "K", "N"]
    C: tk.gl[f32, "M", "N"]
    inputs = dict(a=shared(bf16, BM // 2, BK, count=2))
    late_inputs = dict(b=shared(bf16, BK, BN))
    wait_last = True                       # wait for the last step's MMA in compute

    def tasks(self, g):
        return g.C.rows // BM, g.C.cols // BN

    def iters(self, g, task):
        return steps_of(task.row)

    def load(self, g, task, inp, k, arrived):
        tk.tma.expect(arrived, inp)
        for i in range(2):
            tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, task.k0 + k), arrived)

    def load_late(self, g, task, inp, k, arrived):
        tk.tma.expect(arrived, inp)
        tk.tma.load_async(inp.b, g.B, (task.k0 + k, task.col), arrived)

    def setup(self, st):
        st.acc = tk.rt(f32, 16, BN)
        st.a = tk.rt(bf16, 16, BK)         # this warp's 16 rows of A_k, kept for step k + 1

    def start(self, st, task):
        tk.zero(st.acc)

    def compute(self, st, inp, k, prev):
        with tk.if_(k > 0):
            tk.warpgroup.mma_AB(st.acc, st.a, prev.b)               # A_{k-1} B_{k-1}
            tk.warpgroup.mma_async_wait()                            # st.a is read: free for A_k
        tk.warpgroup.load(st.a, inp.a[tk.warpgroup.id()])
        with tk.if_(k == st.iters - 1):
            tk.warpgroup.mma_AB(st.acc, st.a, inp.late.b)            # the last step's own A_k B_k
            if self.wait_last:
                tk.warpgroup.mma_async_wait()

    def finish(self, g, st, task):
        tk.warpgroup.store(g.C, st.acc, (task.row * 2 + tk.warpgroup.id(), task.col))


@functools.cache
def late_gemm(stages: int, late_stages: int | None, wait_last: bool = True, cluster: int = 1,
              lcsf: bool = False, splits: int | None = None):
    """cluster: blocks on adjacent tile columns (the same rows, so the same step counts) that share A: rank r
    loads A's r-th half and multicasts it to both. lcsf: the result leaves through an output ring. splits:
    split-K, C is then (splits, M, N) with split s's partial at depth s."""
    name = f"late_gemm_{stages}_{late_stages}" + ("" if wait_last else "_in_flight") + \
        (f"_cluster{cluster}" if cluster > 1 else "") + ("_lcsf" if lcsf else "") + \
        (f"_split{splits}" if splits else "")
    attributes = dict(wait_last=wait_last)
    if splits:
        def finish(self, g, st, task):
            tk.warpgroup.store(g.C, st.acc, (task.split, task.row * 2 + tk.warpgroup.id(), task.col))
        attributes.update(finish=finish, __annotations__=dict(C=tk.gl[f32, "S", "M", "N"]))
        return tk.lcf(stages=stages, late_stages=late_stages, scheduler=SplitK(splits), name=name)(
            type("LateGemmSplitK", (LateGemm,), attributes))
    if cluster > 1:
        def load(self, g, task, inp, k, arrived):
            tk.tma.expect(arrived, inp)
            tk.tma.load_async(inp.a[task.rank], g.A, (task.row * 2 + task.rank, k), arrived, multicast=0b11)
        attributes["load"] = load
    if lcsf:
        def finish(self, g, st, task, out):
            tk.warpgroup.store(out.c[tk.warpgroup.id()], st.acc)

        def store(self, g, task, out):
            for i in range(2):
                tk.tma.store_async(g.C, out.c[i], (task.row * 2 + i, task.col))
        attributes.update(outputs=dict(c=shared(f32, BM // 2, BN, count=2)), finish=finish, store=store)
        return tk.lcsf(stages=stages, late_stages=late_stages, output_stages=2, name=name)(
            type("LateGemmLCSF", (LateGemm,), attributes))
    return tk.lcf(stages=stages, late_stages=late_stages, cluster=cluster, cluster_along="cols", name=name)(
        type("LateGemm", (LateGemm,), attributes))


def reference(a, b):
    return ragged_reference(a, b, steps_of)


def operands(cols=COLS):
    a, b = rand(ROWS * BM, DEPTH * BK, dtype=torch.bfloat16), rand(DEPTH * BK, cols * BN, dtype=torch.bfloat16)
    return a, b, poisoned(ROWS * BM, cols * BN, dtype=torch.float32)


@pytest.mark.parametrize("stages,late_stages,wait_last,blocks", [
    (2, 2, True, 2), (1, 2, True, 3), (3, 2, True, 1), (2, 4, True, 5),
    (2, 3, False, 2),          # the last MMA in flight: stages released one step later (2 stages, 3 late ones)
    (2, 2, False, 3),          # ... too few late stages to hold them: the template waits for the MMAs instead
    (1, 3, False, 2)])         # ... or too few early ones
def test_late_inputs_wrap_both_rings_across_tasks(stages, late_stages, wait_last, blocks):
    """12 tasks of 0-3 steps over 1-5 persistent blocks: the rings' running counts agree between producer and
    consumers; tasks of no steps release nothing."""
    a, b, c = operands()
    late_gemm(stages, late_stages, wait_last).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


def test_late_stages_default_to_stages():
    assert late_gemm(3, None).late_stages == 3


@pytest.mark.parametrize("stages,late_stages,blocks", [(2, 2, 2), (1, 3, 4)])
def test_late_inputs_in_clusters(stages, late_stages, blocks):
    """Clusters of two blocks on adjacent tile columns: A multicast through the early ring; every block releases
    its late stages to both."""
    a, b, c = operands(cols=4)
    late_gemm(stages, late_stages, cluster=2).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


@pytest.mark.parametrize("splits,blocks", [(2, 3), (3, 2)])
def test_late_inputs_with_split_k(splits, blocks):
    """Each tile's 0-3 steps shared by `splits` tasks (some take none): the partials add up to the product."""
    a, b, _ = operands()
    c = poisoned(splits, ROWS * BM, COLS * BN, dtype=torch.float32)
    late_gemm(2, 3, splits=splits).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c.sum(0), reference(a, b)) < 1e-2


def test_late_inputs_under_lcsf():
    a, b, c = operands()
    late_gemm(2, 2, lcsf=True).kernel.interpret[(3,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


def test_late_inputs_with_a_finish_block_over_the_first_ring():
    """The finish block shares its storage with the first ring's last stages (16 KB: stage 1 of 2); C in bf16.
    Before refilling the aliased stage the producer waits for every earlier task's finish, in order (tasks of
    few steps: tests/test_lcsf_template.py::test_the_finish_block_with_tasks_of_few_steps)."""
    class FinishBlock(LateGemm):
        C: tk.gl[bf16, "M", "N"]
        finish_block = dict(c=shared(bf16, BM // 2, BN, count=2))

        def iters(self, g):
            return g.A.cols // BK

        def finish(self, g, st, task, fin):
            wg = tk.warpgroup.id()
            tk.warpgroup.store(fin.c[wg], st.acc)
            tk.fence_proxy_async()
            tk.named_sync(1, 8)
            with tk.if_(tk.warp_id() % 4 == 0):
                tk.tma.store_async(g.C, fin.c[wg], (task.row * 2 + wg, task.col))
                tk.tma.store_commit_group()
                tk.tma.store_async_wait(0, read_only=True)
    template = tk.lcf(stages=2, late_stages=2, name="late_gemm_finish_block")(FinishBlock)
    assert template.first_aliased_stage == 1
    a, b, _ = operands()
    c = poisoned(ROWS * BM, COLS * BN, dtype=torch.bfloat16)
    template.kernel.interpret[(3,)](a, b, c)
    assert rel_err(c, a.double() @ b.double()) < 1e-2


def source_of(template, cols=COLS):
    a, b = torch.empty(ROWS * BM, DEPTH * BK, dtype=torch.bfloat16), torch.empty(DEPTH * BK, cols * BN,
                                                                                dtype=torch.bfloat16)
    return template.kernel.source(a, b, torch.empty(ROWS * BM, cols * BN))


def test_source_waits_for_late_stages_where_they_are_read():
    """The consumers wait for a late stage right before the MMA that reads it (in the k > 0 branch for `prev`,
    in the last step's branch for `inp.late`), not at the start of the step; the producer loads step k's late
    inputs after its early ones, each once its own ring's stage is free."""
    src = source_of(late_gemm(2, 3))
    assert "late_arrived" in src and "late_finished" in src
    assert re.search(r"if \(it\w* >= 3\) \{\s*(//.*\s*)?tk::wait\(&late_finished\[late_stage\w*\], 1 - late_phase",
                     src)
    assert re.search(r"tk::wait\(&late_arrived\[late_previous_stage\w*\], late_previous_phase\w*\);\s*(//.*\s*)?"
                     r"tk::warpgroup::mma_AB", src)
    assert re.search(r"tk::wait\(&late_arrived\[late_stage\w*\], late_phase\w*\);\s*(//.*\s*)?"
                     r"tk::warpgroup::mma_AB", src)
    producer = src[src.index("int ring = 0;"):src.index("int ring_1 = 0;")]
    assert producer.index("arrived[stage]") < producer.index("late_arrived[late_stage]")


@pytest.mark.parametrize("stages,late_stages,wait_last,cluster", [(2, 2, True, 1), (2, 3, False, 1), (1, 3, True, 2)])
def test_late_inputs_compile(stages, late_stages, wait_last, cluster):
    """NVRTC compiles the generated C++ to wgmma (HGMMA) without spills, in clusters too."""
    a, b = torch.empty(ROWS * BM, DEPTH * BK, dtype=torch.bfloat16), torch.empty(DEPTH * BK, 4 * BN,
                                                                                dtype=torch.bfloat16)
    kernel = late_gemm(stages, late_stages, wait_last, cluster).kernel
    args = (a, b, torch.empty(ROWS * BM, 4 * BN))
    r = kernel.resources(*args)
    assert r.spill_stores == r.spill_loads == 0
    assert "HGMMA" in kernel.sass(*args)


def test_a_late_stage_never_released_is_a_deadlock(monkeypatch):
    """Without the release of each task's last late stage the producer waits for it forever."""
    original = lcf_module.Pipeline.release_late

    def all_but_the_last(self, position):
        if sys._getframe(1).f_code.co_name != "last":        # the release after the task's steps
            original(self, position)
    monkeypatch.setattr(lcf_module.Pipeline, "release_late", all_but_the_last)
    template = tk.lcf(stages=2, late_stages=2, name="late_gemm_unreleased")(type("Broken", (LateGemm,), {}))
    a, b, c = operands()
    with pytest.raises(DeadlockError, match="late_finished"):
        template.kernel.interpret[(1,)](a, b, c)


def test_a_late_tile_read_before_it_arrived_is_reported(monkeypatch):
    """Without the wait where a late tile is read, the MMA may read B before its TMA load landed."""
    monkeypatch.setattr(late_ring.LateStage, "__getattr__",
                        lambda self, name: late_ring.StageTiles.__getattr__(self, name))
    template = tk.lcf(stages=2, late_stages=2, name="late_gemm_unwaited")(type("Broken", (LateGemm,), {}))
    a, b, c = operands()
    with pytest.raises(InterpretError, match=r"reads shared memory before its TMA load arrived: .* of `b\[\d\]`"):
        template.kernel.interpret[(2,)](a, b, c)


# -- parameters and their errors ---------------------------------------------------------------------------------

def test_rings_that_do_not_fit_say_how_many_stages_of_each_would():
    """32 KB per early stage, 64 KB per late one: 2 + 2 fit in 227 KB; 3 + 3 do not, and the error says how many
    of either would fit with the other's as given."""
    class Wide(LateGemm):
        inputs = dict(a=shared(bf16, 64, 128, count=2))              # 32 KB a stage
        late_inputs = dict(b=shared(bf16, 128, 256))                  # 64 KB a stage
    assert tk.lcf(stages=2, late_stages=2)(Wide).late_stages == 2      # 192 KB
    with pytest.raises(tk.TraceError, match=r"stages=3 x 32 KB of inputs \(a: 2 x 64x128 bf16\) \+ late_stages=3 x "
                                            r"64 KB of late_inputs \(b: 128x256 bf16\) \+ .*; only one stage fits "
                                            r"\(with late_stages=3\), or at most 2 late_stages fit \(with stages=3\)"
                       ) as e:
        tk.lcf(stages=3, late_stages=3)(Wide)
    assert "test_lcf_late_inputs.py" in str(e.value)


@pytest.mark.parametrize("make,options,error,match", [
    (lambda: LateGemm, dict(late_stages=1), ValueError, r"late_stages must be 2..8 \(step k reads the late stages"),
    (lambda: LateGemm, dict(late_stages=9), ValueError, "late_stages must be 2..8"),
    (lambda: type("NoLoad", (LateGemm,), dict(load_late=None)), {}, TypeError, r"write load_late\(g, task, inp, k"),
    (lambda: type("NoPrev", (LateGemm,), dict(compute=lambda self, st, inp, k: None)), {}, TypeError,
     r"write compute\(st, inp, k, prev\)"),
    (lambda: type("Named", (LateGemm,), dict(inputs=dict(late=shared(bf16, 64, 64)))), {}, TypeError,
     "inp.late is the step's late stage"),
    (lambda: type("Clash", (LateGemm,), dict(inputs=dict(b=shared(bf16, 64, 64)))), {}, TypeError,
     "inputs and late_inputs both declare b"),
    (lambda: type("Plain", (LateGemm,), dict(late_inputs={})), {}, TypeError, "has a load_late method but no "
                                                                              "late_inputs"),
    (lambda: type("Plain", (LateGemm,), dict(late_inputs={}, load_late=None)), dict(late_stages=2), ValueError,
     "late_stages is for a class with late_inputs"),
])
def test_late_errors(make, options, error, match):
    with pytest.raises(error, match=match):
        tk.lcf(**(dict(stages=2) | options))(make())
