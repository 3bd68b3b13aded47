"""kernels/gemm.py's clusters that share A (matmul_template(cluster=2): two blocks on adjacent tile columns,
each loading one 64-row half of A's K slice and multicasting it to both) on the CPU: the interpreter at small
odd shapes in every tile width, input and output dtype, B layout and epilogue (TMA and register stores)
against float64 torch and bit for bit against the unclustered kernel; persistent blocks running several
pairs of tiles; when matmul clusters by itself (and falls back for an odd number of column tiles); argument
and grid errors; and (NVRTC + nvdisasm, no GPU) that the production-size kernels compile to multicast TMA
loads (UTMALDG.*.MULTICAST) next to HGMMA and TMA stores, without spills and without a GPU-wide memory
barrier per stage release."""
from __future__ import annotations

import re

import pytest
import torch

import tkpy.kernels as tkpy_kernels
import tkpy as tk
from tkpy.kernels import gemm

from gpu_util import rel_err
from test_interpret_gemm import BF16, F32, FP16, TOL, interpret, operands, poisoned, rand, reference  # noqa: F401


def plan_of(a, b, **options):
    """Run matmul and return the plan it made (plan.template: the template it launches)."""
    gemm._CALLS.clear()
    tkpy_kernels.matmul(a, b, **options)
    (plan,) = (call.launch for call in gemm._CALLS.values())
    return plan


CASES = [  # m, n, k, block_n, transposed, dtype, out, bias, activation, scale
    (130, 200, 90, 64, False, BF16, BF16, None, None, None),        # 4 column tiles, a ragged last row and K
    (130, 200, 90, 64, True, BF16, BF16, None, None, None),
    (1, 100, 16, 64, True, FP16, FP16, None, None, None),           # one row of A, two tiles
    (257, 250, 65, 64, False, BF16, F32, F32, "gelu", 0.1),         # fp32 out: two 32-column pieces
    (100, 500, 70, 128, True, FP16, F32, BF16, "silu", None),
    (100, 500, 70, 128, False, BF16, BF16, BF16, "relu", -0.5),
    (257, 300, 130, 256, True, BF16, FP16, None, None, 0.25),       # 2 column tiles, the second ragged
    (70, 450, 96, 64, False, FP16, FP16, F32, "gelu", 0.05),        # 8 tiles, the last 2 columns wide
]


@pytest.mark.parametrize("m,n,k,block_n,transposed,dtype,out,bias,activation,scale", CASES)
def test_clusters_sharing_a(m, n, k, block_n, transposed, dtype, out, bias, activation, scale):
    a, b = operands(m, n, k, dtype, transposed)
    v = None if bias is None else rand(n, dtype=bias)
    options = dict(bias=v, activation=activation, scale=scale, block_n=block_n)
    c = tkpy_kernels.matmul(a, b, out=poisoned(m, n, dtype=out), cluster=2, **options)
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[out]
    alone = tkpy_kernels.matmul(a, b, out=poisoned(m, n, dtype=out), cluster=1, **options)
    assert torch.equal(c, alone)          # the same products in the same order, tile by tile


@pytest.mark.parametrize("epilogue", ["tma", "registers"])
@pytest.mark.parametrize("block_n,blocks", [(64, 4), (128, 2), (256, 2)])
@pytest.mark.parametrize("transposed", [False, True])
def test_persistent_clusters_run_several_pairs(epilogue, block_n, blocks, transposed):
    """1 or 2 clusters for 3 rows of 8, 4 or 2 column tiles: each cluster runs several pairs of tiles, in both
    epilogues (stages released across the cluster while a block's stores are still in flight)."""
    a, b = operands(300, 512, 96, BF16, transposed)
    v, c = rand(512, dtype=F32), poisoned(300, 512, dtype=F32)
    template = gemm.matmul_template(tk.bf16, tk.f32, transposed, tk.f32, True, "gelu", block_n, epilogue=epilogue,
                                    cluster=2)
    template.kernel.interpret[(blocks,)](a, b.T if transposed else b, c, v, 0.2)
    assert rel_err(c, reference(a, b, v, "gelu", 0.2)) < TOL[F32]


def test_split_k_tasks_in_clusters():
    """The template's split-K scheduler over pairs of column tiles (matmul does not combine them itself)."""
    a, b = operands(200, 256, 512, BF16, True)
    c = poisoned(3, 200, 256, dtype=F32)
    template = gemm.matmul_template(tk.bf16, tk.f32, True, None, False, None, 64, split="ordered", cluster=2)
    template.kernel.interpret[(4,)](a, b.T, c, 3)
    assert rel_err(c.sum(0), reference(a, b)) < TOL[F32]


@pytest.mark.parametrize("bn,n,blocks", [(64, 64, 1), (64, 128, 2), (64, 190, 1), (64, 1000, 2), (64, 3000, 1), (64, 4096, 2),
                                         (128, 256, 1), (256, 512, 1)])
def test_the_rule(bn, n, blocks, monkeypatch):
    """With CLUSTER_A_WIDTHS = (64,): 64-wide tiles with an even number of column tiles (off by default)."""
    assert gemm.CLUSTER_A_WIDTHS == ()
    monkeypatch.setattr(gemm, "CLUSTER_A_WIDTHS", (64,))
    assert gemm._cluster(bn, n) == blocks


def test_matmul_clusters_by_itself_where_the_rule_says(monkeypatch):
    monkeypatch.setattr(gemm, "CLUSTER_A_WIDTHS", (64,))
    a, b = operands(130, 200, 90, BF16, False)            # 64-wide tiles (8 of them), 4 columns
    plan = plan_of(a, b)
    assert (plan.template.cluster, plan.template.cluster_along) == (2, "cols")
    a, b = operands(130, 190, 90, BF16, True)             # 3 columns: no cluster
    assert plan_of(a, b).template.cluster == 1
    assert plan_of(*operands(130, 200, 90, BF16, False), cluster=1).template.cluster == 1
    assert plan_of(*operands(130, 200, 90, BF16, False), block_n=128, cluster=2).template.cluster == 2
    assert plan_of(*operands(130, 256, 90, BF16, False), block_n=128).template.cluster == 1    # not in the widths
    assert isinstance(plan_of(*operands(128, 512, 4096, BF16, True), split_k=2), gemm_splitk_plan())


def gemm_splitk_plan():
    from tkpy.kernels import gemm_splitk
    return gemm_splitk.SplitPlan


def test_the_switch_turns_it_off(monkeypatch):
    monkeypatch.setattr(gemm, "CLUSTER_A_WIDTHS", ())
    assert plan_of(*operands(130, 200, 90, BF16, False)).template.cluster == 1
    monkeypatch.setattr(gemm, "CLUSTER_A_WIDTHS", (64, 128))
    assert plan_of(*operands(130, 256, 90, BF16, False), block_n=128).template.cluster == 2


@pytest.mark.parametrize("kwargs,match", [
    (dict(cluster=3), "cluster must be None, 1 or 2"),
    (dict(cluster=2, block_n=64, n=190), r"N = 190 makes 3 tiles of 64 columns, an odd number"),
    (dict(cluster=2, split_k=2), "cluster=2 does not split K"),
])
def test_argument_errors(kwargs, match):
    a, b = operands(32, kwargs.pop("n", 128), 64, BF16, False)
    with pytest.raises(ValueError, match=match):
        tkpy_kernels.matmul(a, b, **kwargs)


def test_template_errors():
    with pytest.raises(ValueError, match=r"cluster must be one of \(1, 2\)"):
        gemm.matmul_template(tk.bf16, tk.bf16, False, None, False, None, 64, cluster=4)
    template = gemm.matmul_template(tk.bf16, tk.bf16, False, None, False, None, 64, cluster=2)
    a, b, c = rand(64, 64, dtype=BF16), rand(64, 190, dtype=BF16), poisoned(64, 190, dtype=BF16)
    with pytest.raises(tk.ArgumentError, match="clusters of 2 blocks take 2 columns of tiles"):
        template(a, b, c)


def _args(dtype, out, transposed, bias=None, scale=False):
    a = torch.empty(4096, 4096, dtype=dtype)
    b = torch.empty(4096, 4096, dtype=dtype)
    return (a, b, torch.empty(4096, 4096, dtype=out)) + (() if bias is None else (torch.empty(4096, dtype=bias),)) \
        + ((1.0,) if scale else ())


@pytest.mark.parametrize("variant", [
    (tk.bf16, tk.bf16, False, None, False, None, 64),
    (tk.bf16, tk.bf16, True, None, False, None, 64),
    (tk.fp16, tk.f32, True, tk.f32, True, "gelu", 64),
    (tk.bf16, tk.bf16, False, tk.bf16, True, "silu", 128),
    (tk.bf16, tk.bf16, True, None, False, None, 256),
], ids=["bf16-nn-64", "bf16-nt-64", "fp16-f32-nt-bias-gelu-64", "bf16-nn-bias-silu-128", "bf16-nt-256"])
def test_clustered_kernels_compile_to_multicast_loads(variant):
    template = gemm.matmul_template(*variant, cluster=2)
    args = _args(variant[0].torch, variant[1].torch, variant[2], variant[3] and variant[3].torch, variant[4])
    resources = template.kernel.resources(*args)
    assert resources.spill_stores == resources.spill_loads == 0 and not resources.warnings
    sass = template.kernel.sass(*args)
    assert re.search(r"UTMALDG\.\dD\.MULTICAST", sass)               # A's half, to both blocks
    assert re.search(r"UTMALDG\.\dD ", sass)                         # B, to this block only
    assert re.search(rf"HGMMA\.64x{variant[6]}x16\.F32", sass) and "UTMASTG" in sass
    assert "SYNCS.ARRIVE.TRANS64.RED" in sass                        # stages released to the peer
    # A GPU-wide memory barrier only at the two cluster barriers (start, exit), none per stage release.
    assert sass.count("MEMBAR.ALL.GPU") == sass.count("UCGABAR_ARV") == 2
