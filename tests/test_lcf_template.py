"""The LCF template's per-task step counts (`iters(g, task)`, 0 included) and task-order hook, run by the
CPU interpreter with fewer persistent blocks than tasks, so the ring of stages wraps across tasks of
different lengths, also in clusters of two or four blocks on adjacent tile columns (cluster_along="cols") that
share A by multicast; the cluster options' errors; and the generated C++ compiled by NVRTC (SASS: the
multicast loads, peers told without a GPU-wide memory barrier). No GPU needed."""
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
def ragged_gemm(stages: int, reverse: bool, lagged: bool = False, cluster: int = 1):
    """cluster: blocks on adjacent tile columns (the same rows, so the same step counts) that share A: rank r
    loads A's r-th half and multicasts it to all of them (in clusters of 4, ranks 2 and 3 load only their B)."""
    @tk.lcf(consumer_warpgroups=2, stages=stages, persistent=True, cluster=cluster, cluster_along="cols",
            name=f"ragged_gemm_{stages}_{int(reverse)}" + ("_lagged" if lagged else "") + f"_cluster{cluster}")
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
            if cluster == 2:
                tk.tma.load_async(inp.a[task.rank], g.A, (task.row * 2 + task.rank, k), arrived, multicast=0b11)
            elif cluster == 4:
                with tk.if_(task.rank < 2):
                    tk.tma.load_async(inp.a[task.rank], g.A, (task.row * 2 + task.rank, k), arrived, multicast=0b1111)
            else:
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


def reference(a, b, steps=steps_of):
    """A @ B in float64 where the BM rows of task row r sum over only the first steps(r) K steps of BK."""
    out = torch.zeros(a.shape[0], b.shape[1], dtype=torch.float64, device=a.device)
    for r in range(a.shape[0] // BM):
        n = steps(r) * BK
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


@pytest.mark.parametrize("stages,reverse,blocks,lagged", [(2, False, 2, False), (3, True, 4, False),
                                                         (2, False, 4, True), (4, True, 2, False)])
def test_clusters_on_adjacent_columns_share_a(stages, reverse, blocks, lagged):
    """Clusters of two blocks on tile columns 2j and 2j + 1 of a row, fewer persistent blocks than the 10 pairs
    of tiles: each block loads one half of A for both, and releases every stage to both."""
    a, b = rand(5 * BM, 2 * BK, dtype=torch.bfloat16), rand(2 * BK, 4 * BN, dtype=torch.bfloat16)
    c = poisoned(5 * BM, 4 * BN, dtype=torch.float32)
    template = ragged_gemm(stages, reverse, lagged, cluster=2)
    template.kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


@pytest.mark.parametrize("stages,reverse,blocks", [(2, False, 4), (3, True, 8)])
def test_clusters_of_four_on_adjacent_columns_share_a(stages, reverse, blocks):
    """Clusters of four blocks on tile columns 4j to 4j + 3 of a row (5 rows of 8 columns: several bands of four a
    cluster): ranks 0 and 1 load a half of A each for all four, every stage is released to all four."""
    a, b = rand(5 * BM, 2 * BK, dtype=torch.bfloat16), rand(2 * BK, 8 * BN, dtype=torch.bfloat16)
    c = poisoned(5 * BM, 8 * BN, dtype=torch.float32)
    ragged_gemm(stages, reverse, cluster=4).kernel.interpret[(blocks,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


def with_constants(constants, order, fast_division: bool = True):
    """ragged_gemm(2, False)'s class with a constants(g) method and an order that uses them."""
    base = type(ragged_gemm(2, False).user)
    body = dict(base.__dict__, constants=lambda self, g: constants(g), order=order)
    return tk.lcf(stages=2, fast_division=fast_division)(type("Constants", (base,), body))


def test_constants_are_made_once_at_the_top():
    """constants(g)'s values are named constants of the kernel, `g.<name>`, before the roles split; an order that
    divides by one (columns inner, in rows of `tile_cols`) gets its divisor with fast_division, and runs as the
    default order's reverse in the interpreter."""
    template = with_constants(lambda g: dict(tile_cols=g.C.cols // BN),
                              lambda self, g, index, rows, cols: (rows - 1 - index // g.tile_cols, index % g.tile_cols))
    a, b = rand(5 * BM, 2 * BK, dtype=torch.bfloat16), rand(2 * BK, 3 * BN, dtype=torch.bfloat16)
    c = poisoned(5 * BM, 3 * BN, dtype=torch.float32)
    src = template.kernel.source(a, b, c)
    assert "const int tile_cols = N / 64;" in src and "const tk::divisor tile_cols_divisor(tile_cols);" in src
    assert src.index("const int tile_cols") < src.index("if (warpid / 4 == 2)")
    assert "/ tile_cols_divisor" in src and "% tile_cols_divisor" in src
    template.kernel.interpret[(2,)](a, b, c)
    assert rel_err(c, reference(a, b)) < 1e-2


def test_a_constant_may_not_shadow_a_parameter():
    template = with_constants(lambda g: dict(A=1), lambda self, g, index, rows, cols: (index // cols, index % cols))
    a, c = torch.empty(BM, BK, dtype=torch.bfloat16), torch.empty(BM, BN)
    with pytest.raises(TypeError, match="constants\\(g\\): `A` is already a parameter of the kernel"):
        template.kernel.source(a, torch.empty(BK, BN, dtype=torch.bfloat16), c)


def test_rebinding_a_var_on_st_is_an_error_at_that_line():
    """`st.n = 0` on a tk.var attribute would only rebind the Python name: a TraceError at the user's line says to
    write tk.assign(st.n, 0)."""
    base = type(ragged_gemm(2, False).user)

    def setup(self, st):
        base.setup(self, st)
        st.n = tk.var(0, "n")

    def start(self, st, task):
        base.start(self, st, task)
        st.n = 0                                        # the mistake

    kernel = tk.lcf(stages=2)(type("Rebinding", (base,), dict(base.__dict__, setup=setup, start=start))).kernel
    a, b, c = torch.empty(BM, BK, dtype=torch.bfloat16), torch.empty(BK, BN, dtype=torch.bfloat16), torch.empty(BM, BN)
    with pytest.raises(tk.TraceError, match=r"st.n is a tk.var: .*tk.assign\(st.n, \.\.\.\)") as e:
        kernel.ir(a, b, c)
    assert e.value.loc.file.endswith("test_lcf_template.py")


def test_column_clusters_source_and_sass():
    """The tile column is 2 x the pair's column + the rank, rotated by the block's task count (per-task step counts:
    the blocks take the cluster's columns in turns); the peers are told with a CTA-scope release (no
    MEMBAR.ALL.GPU before each remote arrival: only the two cluster barriers have one)."""
    a, b, c = torch.empty(512, 128, dtype=torch.bfloat16), torch.empty(128, 256, dtype=torch.bfloat16), \
        torch.empty(512, 256)
    kernel = ragged_gemm(2, False, cluster=2).kernel
    src = kernel.source(a, b, c)
    assert re.search(r"task_col\w* = .*\* 2 \+ \(cluster_rank \+ \(i0 - block_x / 2\) / \(grid_x / 2\)\) % 2;", src)
    assert "tk::arrive_remote_cta(" in src and "tk::arrive_remote(" not in src
    sass = kernel.sass(a, b, c)
    assert re.search(r"UTMALDG\.\dD\.MULTICAST", sass) and "SYNCS.ARRIVE.TRANS64.RED" in sass
    assert sass.count("MEMBAR.ALL.GPU") == sass.count("UCGABAR_ARV") == 2


def test_cluster_errors(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    with pytest.raises(ValueError, match="cluster_along must be one of"):
        tk.lcf(cluster=2, cluster_along="diagonal")(type(ragged_gemm(2, False).user))
    template = ragged_gemm(2, False, cluster=2)
    a, b = torch.empty(256, 128, dtype=torch.bfloat16), torch.empty(128, 3 * BN, dtype=torch.bfloat16)
    with pytest.raises(tk.ArgumentError, match="clusters of 2 blocks take 2 columns of tiles at a time; these "
                                               "shapes have 3 columns of tiles"):
        template.grid(a, b, torch.empty(256, 3 * BN))
    assert template.grid(torch.empty(5 * BM, 128, dtype=torch.bfloat16), torch.empty(128, 4 * BN, dtype=torch.bfloat16),
                         torch.empty(5 * BM, 4 * BN)) == (20,)        # 20 tasks, 20 blocks: 10 clusters
    big = (torch.empty(32 * BM, 128, dtype=torch.bfloat16), torch.empty(128, 8 * BN, dtype=torch.bfloat16),
           torch.empty(32 * BM, 8 * BN))
    assert template.grid(*big) == (132,)                            # 256 tasks: a block per SM, 66 clusters
    monkeypatch.setattr(template, "clusters_at_once", lambda tensors: 61)
    template._grids.clear()
    assert template.grid(*big) == (122,)                            # no more clusters than run at once
    with pytest.raises(NotImplementedError, match="per-task step counts .* with split-K in clusters"):
        tk.lcf(cluster=2, scheduler=tk.templates.SplitK(2))(type(ragged_gemm(2, False).user))
    with pytest.raises(tk.TraceError, match="cluster.arrive: scope must be one of"):
        @tk.kernel(warps=1, cluster=2)
        def bad(x: tk.gl[f32, 16, 16]):
            sem = tk.semaphore()
            tk.init_semaphore(sem, 1)
            tk.cluster.arrive(sem, 0, scope="gpu")
        bad.source(torch.empty(16, 16))


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
