"""The LCSF template (tkpy/templates/lcsf.py) and the parameters both templates share, on the CPU: GEMM-like
kernels whose results leave through rings of 1 to 3 output stages in 1 to 4 pieces, stored by the storer
warp with TMA, run by the interpreter with fewer persistent blocks than tasks (so output stages are reused
across tasks while the next task's loads run); per-task step counts (0 included), producers of 2 to 4
warps (without a register split below 4), split-K (schedule.SplitK) writing partial sums at a depth per
split, one input stage, clusters of two column-adjacent blocks sharing A by multicast; LCF's finish block over the last input stages; the generated C++ compiled by NVRTC;
and the errors of bad parameters. The same kernels run on the GPU in tests/test_gpu_gemm.py."""
from __future__ import annotations

import functools
import re

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.templates import SplitK, shared

from gpu_util import rel_err
from test_lcf_template import BK, BM, BN, poisoned, rand, steps_of
from test_lcf_template import reference as ragged_reference


class GemmSteps:
    """The main loop both test GEMMs share: 128 x 64 tiles of C, 64-wide K steps (from task.k0 on)."""

    A: tk.gl[bf16, "M", "K"]
    B: tk.gl[bf16, "K", "N"]
    inputs = dict(a=shared(bf16, BM // 2, BK, count=2), b=shared(bf16, BK, BN))

    def tasks(self, g):
        return g.C.rows // BM, g.C.cols // BN

    def iters(self, g):
        return g.A.cols // BK

    def load(self, g, task, inp, k, arrived):
        tk.tma.expect(arrived, inp)
        for i in range(2):
            tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, task.k0 + k), arrived)
        tk.tma.load_async(inp.b, g.B, (task.k0 + k, task.col), arrived)

    def setup(self, st):
        st.acc = tk.rt(f32, 16, BN)

    def start(self, st, task):
        tk.zero(st.acc)

    def compute(self, st, inp, k):
        tk.warpgroup.mma_AB(st.acc, inp.a[tk.warpgroup.id()], inp.b)


@functools.cache
def piece_gemm(stages: int = 2, output_stages: int = 2, pieces: int = 2, producer_warps: int = 4,
               ragged: bool = False, splits: int | None = None, cluster: int = 1):
    """C (fp32) = A @ B in 128 x 64 tiles; the result leaves in `pieces` column pieces. ragged: task row r
    takes steps_of(r) steps. splits: split-K, C is then (splits, M, N) with split s's partial at depth s.
    cluster=2: blocks on adjacent tile columns (the same rows, so the same step counts) that share A: rank r
    loads A's r-th half and multicasts it to both."""
    name = f"piece_gemm_{stages}_{output_stages}_{pieces}_{producer_warps}" + ("_ragged" if ragged else "") + \
        (f"_split{splits}" if splits else "") + (f"_cluster{cluster}" if cluster > 1 else "")
    cols = BN // pieces
    clustering = dict(cluster=cluster, cluster_along="cols") if cluster > 1 else {}

    @tk.lcsf(consumer_warpgroups=2, stages=stages, output_stages=output_stages, producer_warps=producer_warps,
             scheduler=SplitK(splits) if splits else None, name=name, **clustering)
    class PieceGemm(GemmSteps):
        C: tk.gl[f32, "S", "M", "N"] if splits else tk.gl[f32, "M", "N"]
        outputs = dict(c=shared(f32, BM // 2, cols, count=2))
        output_pieces = pieces

        if ragged:
            def iters(self, g, task):
                return steps_of(task.row)

        if cluster > 1:
            def load(self, g, task, inp, k, arrived):
                tk.tma.expect(arrived, inp)                  # the whole stage, the peer's half of A included
                tk.tma.load_async(inp.a[task.rank], g.A, (task.row * 2 + task.rank, task.k0 + k), arrived,
                                  multicast=0b11)
                tk.tma.load_async(inp.b, g.B, (task.k0 + k, task.col), arrived)

        def finish(self, g, st, task, out, piece):
            tk.warpgroup.store(out.c[tk.warpgroup.id()], st.acc[:, piece * cols:(piece + 1) * cols])

        def store(self, g, task, out, piece):
            for i in range(2):
                coord = (task.row * 2 + i, task.col * pieces + piece)
                tk.tma.store_async(g.C, out.c[i], (task.split,) + coord if splits else coord)
    return PieceGemm


def reference(a, b, ragged=False):
    return ragged_reference(a, b) if ragged else a.double() @ b.double()


@pytest.mark.parametrize("stages,output_stages,pieces,producer_warps,ragged,blocks", [
    (2, 2, 2, 4, False, 2), (3, 1, 2, 4, False, 3), (2, 3, 4, 2, False, 2), (1, 2, 1, 3, False, 2),
    (2, 2, 2, 4, True, 2), (3, 1, 4, 2, True, 1)])
def test_outputs_leave_through_the_ring(stages, output_stages, pieces, producer_warps, ragged, blocks):
    """5 x 3 tiles on 1-3 persistent blocks: several tasks per block, so output stages are reused across
    tasks while the storer may still be storing the last one."""
    a, b = rand(5 * BM, 2 * BK, dtype=torch.bfloat16), rand(2 * BK, 3 * BN, dtype=torch.bfloat16)
    c = poisoned(5 * BM, 3 * BN, dtype=torch.float32)
    piece_gemm(stages, output_stages, pieces, producer_warps, ragged).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b, ragged)) < 1e-2


@pytest.mark.parametrize("stages,output_stages,pieces,blocks", [(2, 2, 2, 2), (3, 1, 4, 2), (2, 2, 1, 4)])
def test_outputs_leave_through_the_ring_in_clusters(stages, output_stages, pieces, blocks):
    """Clusters of two blocks on adjacent tile columns sharing A (multicast): 5 x 4 tiles on 1 or 2 clusters, so
    each cluster runs several pairs of tiles and its stages are released across the cluster while a block's
    output pieces are still being stored."""
    a, b = rand(5 * BM, 3 * BK, dtype=torch.bfloat16), rand(3 * BK, 4 * BN, dtype=torch.bfloat16)
    c = poisoned(5 * BM, 4 * BN, dtype=torch.float32)
    piece_gemm(stages, output_stages, pieces, cluster=2).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


@pytest.mark.parametrize("splits,k_steps,blocks", [(2, 5, 3), (3, 4, 2), (4, 2, 5)])
def test_split_k_tasks_write_partials_per_split(splits, k_steps, blocks):
    """Each tile's K steps are shared by `splits` tasks (2 steps in 4 splits: some take none and write
    zeros); their partial sums add up to the product."""
    a, b = rand(2 * BM, k_steps * BK, dtype=torch.bfloat16), rand(k_steps * BK, 2 * BN, dtype=torch.bfloat16)
    c = poisoned(splits, 2 * BM, 2 * BN, dtype=torch.float32)
    piece_gemm(2, 2, 2, 4, splits=splits).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c.sum(0), reference(a, b)) < 1e-2
    for s in range(splits):                                  # split s took steps [s K / S, (s + 1) K / S)
        lo, hi = s * k_steps // splits * BK, (s + 1) * k_steps // splits * BK
        assert rel_err(c[s], a[:, lo:hi].double() @ b[lo:hi].double()) < 1e-2 if hi > lo else \
            torch.all(c[s] == 0)


def test_the_grid_counts_split_tasks(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    template = piece_gemm(2, 2, 2, 4, splits=3)
    a, b = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 128, dtype=torch.bfloat16)
    assert template.grid(a, b, torch.empty(3, 256, 128)) == (12,)           # 2 x 2 tiles x 3 splits


def test_source_has_the_storer_and_the_output_ring():
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16), \
        torch.empty(256, 64)
    kernel = piece_gemm(2, 2, 2, 4).kernel
    src = kernel.source(a, b, c)
    assert "if (warpid == 9) {" in src                                   # the storer: producer warp 1
    assert re.search(r"tk::wait\(&out_ready\[out_stage\w*\], out_phase\w*\);", src)
    assert re.search(r"tk::wait\(&out_free\[out_stage\w*\], 1 - out_phase\w*\);", src)
    assert "tk::fence_proxy_async();" in src and "tk::tma::store_async_read_wait<1>();" in src
    assert src.count("tk::tma::store_async_wait<0>();") == 1             # before the storer leaves
    resources = kernel.resources(a, b, c)
    assert resources.spill_stores == resources.spill_loads == 0
    assert "UTMASTG" in kernel.sass(a, b, c)


def test_a_producer_of_fewer_than_four_warps_has_no_register_split():
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16), \
        torch.empty(256, 64)
    kernel = piece_gemm(1, 2, 1, 3).kernel
    assert kernel.warps == 11
    src = kernel.source(a, b, c)
    assert "registers<" not in src and "__launch_bounds__(352)" in src
    assert kernel.trace(a, b, c).lower().compile() is not None


# -- parameters and their errors ----------------------------------------------------------------------------

def _class(with_outputs=True, pieces=1, finish_piece=False, with_store=True):
    class K:
        A: tk.gl[bf16, "M", "K"]
        C: tk.gl[f32, "M", "N"]
        inputs = dict(a=shared(bf16, 64, 128, count=2), b=shared(bf16, 64, 256))
        if with_outputs:
            outputs = dict(c=shared(f32, 64, 64, count=2))
        output_pieces = pieces

        def tasks(self, g):
            return 1, 1

        def iters(self, g):
            return 1

        def load(self, g, task, inp, k, sem):
            pass

        def setup(self, st):
            pass

        def compute(self, st, inp, k):
            pass

        if finish_piece:
            def finish(self, g, st, task, out, piece):
                pass
        else:
            def finish(self, g, st, task, out):
                pass
        if with_store:
            def store(self, g, task, out):
                pass
    return K


def test_stages_that_do_not_fit_say_how_many_would():
    """64 KB per input stage, 32 KB per output stage: 3 + 1 fit in 227 KB, 4 do not."""
    assert tk.lcsf(stages=3, output_stages=1)(_class()).stages == 3
    with pytest.raises(tk.TraceError, match=r"stages=4 x 64 KB of inputs \(a: 2 x 64x128 bf16, b: 64x256 bf16\) "
                                            r"\+ output_stages=1 x 32 KB of outputs .* at most 3 stages fit") as e:
        tk.lcsf(stages=4, output_stages=1)(_class())
    assert "test_lcsf_template.py" in str(e.value)             # the decorator's line
    with pytest.raises(tk.TraceError, match="at most 2 stages fit"):
        tk.lcsf(stages=3, output_stages=3)(_class())


@pytest.mark.parametrize("options,match", [
    (dict(producer_warps=1), "producer_warps must be 2..4 for an LCSF"),
    (dict(producer_warps=5), "producer_warps must be 2..4"),
    (dict(output_stages=0), "output_stages must be 1..8"),
    (dict(stages=9), "stages must be 1..8"),
    (dict(producer_warps=2, consumer_registers=232), "needs a whole producer warpgroup"),
    (dict(consumer_registers=244), "multiple of 8 from 24 to 256"),
    (dict(producer_registers=64, consumer_registers=240), "need 69632 registers"),
    (dict(scheduler="splitk"), "scheduler must be"),
])
def test_parameter_errors(options, match):
    with pytest.raises((ValueError, TypeError), match=match):
        tk.lcsf(**(dict(stages=2, output_stages=1) | options))(_class())


@pytest.mark.parametrize("kwargs,match", [
    (dict(with_outputs=False), "declares its output buffers"),
    (dict(with_store=False), "needs a `store` method"),
    (dict(pieces=2), "write finish\\(g, st, task, out, piece\\)"),
])
def test_class_errors(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        tk.lcsf(stages=2, output_stages=1)(_class(**kwargs))


def test_register_split_defaults_and_overrides():
    lcsf = tk.lcsf(stages=2, output_stages=1)
    assert lcsf(_class()).registers == (40, 232)
    assert tk.lcsf(stages=2, output_stages=1, producer_registers=24, consumer_registers=240)(_class()).registers \
        == (24, 240)
    assert tk.lcsf(stages=2, output_stages=1, consumer_warpgroups=3)(_class()).registers == (40, 152)
    assert tk.lcsf(stages=2, output_stages=1, producer_warps=2)(_class()).registers == (None, None)
    # one consumer warpgroup: 256 threads launch with 256 registers each, more than setmaxnreg.inc could give it
    assert tk.lcsf(stages=2, output_stages=1, consumer_warpgroups=1)(_class()).registers == (None, None)


def test_two_blocks_an_sm_share_registers_and_shared_memory():
    """blocks_per_sm=2: the register split of half the file, __launch_bounds__(threads, 2), and the stage check
    against half an SM's shared memory (less the block's reserved KB)."""
    from tkpy.templates.common import register_split
    assert register_split(1, 4, None, None, blocks_per_sm=2) == (40, 216)
    with pytest.raises(ValueError, match="each of 2 blocks an SM has 32768"):
        register_split(1, 4, 40, 240, blocks_per_sm=2)
    class K(_class(with_outputs=False, with_store=False)):
        def finish(self, g, st, task):
            pass
    template = tk.lcf(stages=1, consumer_warpgroups=1, blocks_per_sm=2, name="lcf_two_an_sm")(K)   # 64 KB a stage
    assert template.registers == (40, 216) and template.kernel.blocks_per_sm == 2
    with pytest.raises(tk.TraceError, match="over the 113 KB a block can have with 2 blocks an SM; only one stage"):
        tk.lcf(stages=2, consumer_warpgroups=1, blocks_per_sm=2)(K)
    with pytest.raises(ValueError, match="blocks_per_sm must be 1 or 2"):
        tk.lcf(stages=1, blocks_per_sm=2, cluster=2)(K)


def test_lcf_takes_the_same_parameters():
    """LCF's one input stage: each step's MMAs finish before the stage is released (it is refilled next)."""
    class K(_class(with_outputs=False, with_store=False)):
        def finish(self, g, st, task):
            pass
    template = tk.lcf(stages=1, producer_warps=1, name="lcf_one_stage")(K)
    assert template.kernel.warps == 9 and template.registers == (None, None)
    with pytest.raises(tk.TraceError, match="at most 3 stages fit"):
        tk.lcf(stages=4)(type("Wide", (K,), dict(inputs=dict(a=shared(bf16, 128, 128, count=2)))))


# -- LCF's finish block, over the last input stages ------------------------------------------------------------

@functools.cache
def finish_block_gemm(stages: int, ragged: bool = False):
    """C (bf16) = A @ B in 128 x 64 tiles, each consumer warpgroup's 64 x 64 result staged in an aliased finish
    block and TMA-stored from there by its first warp. ragged: task row r takes steps_of(r) steps (0-2)."""
    @tk.lcf(consumer_warpgroups=2, stages=stages, name=f"finish_block_gemm_{stages}" + ("_ragged" if ragged else ""))
    class FinishBlockGemm(GemmSteps):
        C: tk.gl[bf16, "M", "N"]
        finish_block = dict(c=shared(bf16, BM // 2, BN, count=2))
        if ragged:
            def iters(self, g, task):
                return task.row % 3

        def finish(self, g, st, task, fin):
            wg = tk.warpgroup.id()
            tk.warpgroup.store(fin.c[wg], st.acc)
            tk.fence_proxy_async()
            tk.named_sync(1, 8)                                  # both warpgroups' tiles are written
            with tk.if_(tk.warp_id() % 4 == 0):
                tk.tma.store_async(g.C, fin.c[wg], (task.row * 2 + wg, task.col))
                tk.tma.store_commit_group()
                tk.tma.store_async_wait(0, read_only=True)       # read before the stages are refilled
    return FinishBlockGemm


@pytest.mark.parametrize("stages,blocks", [(2, 2), (3, 3), (4, 1)])
def test_the_finish_block_shares_the_last_stages(stages, blocks):
    a, b = rand(5 * BM, 3 * BK, dtype=torch.bfloat16), rand(3 * BK, 3 * BN, dtype=torch.bfloat16)
    c = poisoned(5 * BM, 3 * BN, dtype=torch.bfloat16)
    finish_block_gemm(stages).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


@pytest.mark.parametrize("stages,blocks", [(3, 1), (3, 2), (2, 1), (4, 2)])
def test_the_finish_block_with_tasks_of_few_steps(stages, blocks):
    """Tasks of 0, 1 or 2 steps, fewer than the stages: the producer runs several tasks ahead, so it waits for
    every earlier task's finish in order before it refills a stage the finish block overlaps (waiting by
    parity only for the latest could pass a finish two phases back)."""
    a, b = rand(6 * BM, 3 * BK, dtype=torch.bfloat16), rand(3 * BK, 2 * BN, dtype=torch.bfloat16)
    c = poisoned(6 * BM, 2 * BN, dtype=torch.bfloat16)
    finish_block_gemm(stages, ragged=True).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b, ragged=True)) < 1e-2


def test_the_finish_block_holds_back_only_the_stages_it_overlaps():
    """3 stages of 24 KB (a: 16 KB per stage, then b: 8 KB per stage): the 16 KB block takes the last 16 KB,
    b's stages 1 and 2, so those wait for the finish; stage 0 loads meanwhile."""
    template = finish_block_gemm(3)
    assert template.first_aliased_stage == 1 and template.finish_offsets == {"c": 72 * 1024 - 16 * 1024}
    a, b, c = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 64, dtype=torch.bfloat16), \
        torch.empty(256, 64, dtype=torch.bfloat16)
    src = template.kernel.source(a, b, c)
    # before refilling stage 1 or 2, every earlier task's finish, in order (the wait loop), then none again
    assert re.search(r"if \(stage >= 1\) \{\s*(//.*\s*)?#pragma unroll 1\s*for \(int (\w+) = finishes_waited; \2 < \(i0 - block_x\) / grid_x; "
                     r"\2 \+= 1\) \{\s*(//.*\s*)?tk::wait\(finish_done, \2 % 2\);\s*\}\s*(//.*\s*)?"
                     r"finishes_waited = \(i0 - block_x\) / grid_x;", src)
    assert "tk::named_sync(15, 256);" in src or "bar.sync 15" in src or re.search(r"named_sync\w*\(15", src)
    resources = template.kernel.resources(a, b, c)
    assert resources.spill_stores == resources.spill_loads == 0


def test_finish_block_errors():
    class K(_class(with_outputs=False, with_store=False)):
        finish_block = dict(c=shared(f32, 64, 256, count=4))

        def finish(self, g, st, task):
            pass
    with pytest.raises(TypeError, match=r"write finish\(g, st, task, fin\)"):
        tk.lcf(stages=2)(K)

    class Big(K):
        def finish(self, g, st, task, fin):
            pass
    with pytest.raises(tk.TraceError, match="finish block .* is larger than the"):
        tk.lcf(stages=1)(Big)
    with pytest.raises(TypeError, match="a finish block is for LCF"):
        tk.lcsf(stages=2, output_stages=1)(type("L", (_class(),), dict(finish_block=K.finish_block)))
