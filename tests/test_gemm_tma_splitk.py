"""kernels/gemm.py's TMA epilogue (the LCSF template) and split-K (kernels/gemm_splitk.py) on the CPU: split-K
products at odd shapes in both modes (ordered partials at a depth per split, or TMA fp32 adds into one
workspace) with every kind of epilogue in the reduction, splits forced (more splits than K steps included);
that matmul splits only when asked; and (NVRTC +
nvdisasm) that the production-size kernels compile to HGMMA with TMA stores (UTMASTG, or UTMAREDG for the
adds), stmatrix for 16-bit outputs, and no register spills, in 256-, 128- and 64-wide tiles."""
from __future__ import annotations

import re

import pytest
import torch

import tkpy.kernels as tkpy_kernels
import tkpy as tk
from tkpy.kernels import gemm, gemm_splitk
from tkpy.kernels.gemm_config import MatmulConfig
from tkpy.kernels.gemm_kernel import matmul_template
from tkpy.kernels.gemm_policy import block_n_for
from tkpy.templates import multiprocessors

from gpu_util import rel_err
from test_interpret_gemm import BF16, F32, FP16, TOL, interpret, operands, poisoned, rand, reference  # noqa: F401

@pytest.mark.parametrize("m,n,k,split_k,deterministic,transposed,out,bias,activation,scale,block_n", [
    (100, 300, 700, 3, True, False, BF16, None, None, None, None),
    (130, 260, 900, 4, False, True, F32, F32, "gelu", 0.1, None),
    (1, 48, 520, 2, True, True, FP16, BF16, "silu", None, None),
    (257, 129, 333, 5, True, False, F32, None, "relu", -0.5, None),
    (64, 200, 128, 6, True, True, BF16, F32, None, 0.5, None),          # 2 K steps in 6 splits: 4 write zeros
    (70, 520, 1000, 2, False, False, FP16, None, "gelu", 0.05, None),
    (130, 200, 700, 3, True, True, BF16, BF16, "relu", None, 64),   # 64-wide tiles: two 32-column fp32 pieces
    (100, 300, 520, 4, False, False, F32, None, None, 0.5, 64),
])
def test_split_k_products(m, n, k, split_k, deterministic, transposed, out, bias, activation, scale, block_n):
    dtype = FP16 if out == FP16 else BF16
    a, b = operands(m, n, k, dtype, transposed)
    v = None if bias is None else rand(n, dtype=bias)
    c = tkpy_kernels.matmul(a, b, out=poisoned(m, n, dtype=out), bias=v, activation=activation, scale=scale,
                    split_k=split_k, deterministic=deterministic, block_n=block_n)
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[out]


def plan_of(a, b, **options):
    """Run matmul and return the plan it made (a SplitPlan, or a direct launch whose .template it runs)."""
    gemm._CALLS.clear()
    tkpy_kernels.matmul(a, b, **options)
    (plan,) = (call.launch for call in gemm._CALLS.values())
    return plan


@pytest.mark.parametrize("m,n,k", [(128, 512, 4096), (128, 4096, 8192), (1, 4096, 4096), (130, 200, 90)])
def test_matmul_splits_only_when_asked(m, n, k):
    """Splitting measured slower than not on the H200 (RESULTS.md run 19), so matmul never splits by itself, even
    where the tiles fill few SMs (128 x 512 x 4096: 2 tiles of 128 x 256, 8 of 128 x 64); split_k=1 is the same."""
    a, b = operands(m, n, k, BF16, True)
    for options in ({}, dict(split_k=1)):
        plan = plan_of(a, b, **options)
        assert not isinstance(plan, gemm_splitk.SplitPlan)
        assert plan.template.kernel.name == f"matmul_bf16_bf16_nt_n{block_n_for(m, n, multiprocessors(a))}"


def test_matmul_splits_a_product_with_few_tiles_when_asked():
    """128 x 512 x 4096 with split_k=4: each tile's 64 K steps over 4 tasks, in 256-wide tiles (block_n unset)."""
    a, b = operands(128, 512, 4096, BF16, True)
    v = rand(512, dtype=F32)
    c = tkpy_kernels.matmul(a, b, bias=v, activation="relu", out_dtype=F32, split_k=4)
    assert rel_err(c, reference(a, b, v, "relu")) < TOL[F32]
    plan = plan_of(a, b, bias=v, activation="relu", out_dtype=F32, split_k=4)
    assert isinstance(plan, gemm_splitk.SplitPlan) and plan.splits == 4
    assert plan.template.kernel.name == "matmul_bf16_f32_nt_n256_splitk_ordered"
    assert plan.reduce.name == "splitk_reduce_s4_f32_bias_f32_relu"


def test_split_argument_errors():
    a, b = rand(32, 64, dtype=BF16), rand(64, 16, dtype=BF16)
    with pytest.raises(ValueError, match="split_k must be None or a positive int"):
        tkpy_kernels.matmul(a, b, split_k=0)
    with pytest.raises(ValueError, match="the epilogue comes after the reduction"):
        MatmulConfig(tk.bf16, tk.bf16, split="ordered")


# -- what the production-size kernels compile to (NVRTC and nvdisasm, no GPU) --------------------------------

def _args(dtype, out, transposed, bias=None, scale=False, split=False):
    a = torch.empty(4096, 4096, dtype=dtype)
    b = torch.empty(4096, 4096, dtype=dtype)
    c = torch.empty(4, 4096, 4096) if split else torch.empty(4096, 4096, dtype=out)
    return (a, b, c) + ((4,) if split else ()) + (() if bias is None else (torch.empty(4096, dtype=bias),)) + \
        ((1.0,) if scale else ())


@pytest.mark.parametrize("variant,stores", [
    ((tk.bf16, tk.bf16, False, None, False, None, 256), r"STSM"),
    ((tk.fp16, tk.fp16, True, tk.bf16, True, "silu", 128), r"STSM"),
    ((tk.bf16, tk.f32, True, tk.f32, True, "gelu", 256), r"STS\.64"),
    ((tk.bf16, tk.bf16, False, tk.bf16, True, "gelu", 256), r"STSM"),    # spilled with a whole-tile epilogue
    ((tk.bf16, tk.bf16, False, None, False, None, 64), r"STSM"),          # 64-wide tiles: one piece per tile
    ((tk.bf16, tk.bf16, True, None, False, None, 64), r"STSM"),
    ((tk.fp16, tk.fp16, False, tk.f32, True, "silu", 64), r"STSM"),
    ((tk.bf16, tk.f32, True, tk.bf16, True, "gelu", 64), r"STS\.64"),  # two 32-column pieces
], ids=["bf16-nn-256", "fp16-nt-bias-silu-128", "bf16-f32-nt-bias-gelu-256", "bf16-nn-bias-bf16-gelu-256", "bf16-nn-64",
        "bf16-nt-64", "fp16-nn-bias-silu-64", "bf16-f32-nt-bias-gelu-64"])
def test_the_tma_epilogue_compiles_to_hgmma_stmatrix_and_utmastg(variant, stores):
    template = matmul_template(MatmulConfig(*variant))
    args = _args(variant[0].torch, variant[1].torch, variant[2], variant[3] and variant[3].torch, variant[4])
    resources = template.kernel.resources(*args)
    assert resources.spill_stores == resources.spill_loads == 0 and not resources.warnings
    sass = template.kernel.sass(*args)
    assert re.search(rf"HGMMA\.64x{variant[6]}x16\.F32", sass) and "UTMASTG" in sass and re.search(stores, sass)
    assert not re.search(r"\bST\.E", sass)           # no generic stores: the epilogue goes through shared memory


@pytest.mark.parametrize("split,tma", [("ordered", "UTMASTG"), ("atomic", "UTMAREDG")])
@pytest.mark.parametrize("transposed,bn", [(False, 256), (True, 256), (True, 64)])
def test_split_k_kernels_compile_without_spills(split, tma, transposed, bn):
    template = matmul_template(MatmulConfig(tk.bf16, tk.f32, transposed, None, False, None, bn, split=split))
    args = _args(torch.bfloat16, None, transposed, split=True)
    resources = template.kernel.resources(*args)
    assert resources.spill_stores == resources.spill_loads == 0 and not resources.warnings
    sass = template.kernel.sass(*args)
    assert f"HGMMA.64x{bn}x16.F32" in sass and tma in sass


@pytest.mark.parametrize("splits", [1, 4, 16])
def test_the_reduction_compiles_without_spills(splits):
    kernel = gemm_splitk.reduce_kernel(splits, tk.bf16, tk.f32, True, "gelu")
    args = (torch.empty(splits, 300, 520), torch.empty(300, 520, dtype=torch.bfloat16), torch.empty(520), 1.0)
    resources = kernel.resources(*args)
    assert resources.spill_stores == resources.spill_loads == 0
