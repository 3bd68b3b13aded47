"""kernels/gemm.py's TMA epilogue (the LCSF template) and split-K (kernels/gemm_splitk.py) on the CPU: split-K
products at odd shapes in both modes (ordered partials at a depth per split, or TMA fp32 adds into one
workspace) with every kind of epilogue in the reduction, splits chosen automatically or forced (more splits
than K steps included); the register-store epilogue kept for comparison; when matmul splits; and (NVRTC +
nvdisasm) that the production-size kernels compile to HGMMA with TMA stores (UTMASTG, or UTMAREDG for the
adds), stmatrix for 16-bit outputs, and no register spills, in 256-, 128- and 64-wide tiles."""
from __future__ import annotations

import re

import pytest
import torch

import tkpy.kernels as tkpy_kernels
import tkpy as tk
from tkpy.kernels import gemm, gemm_splitk

from gpu_util import rel_err
from test_interpret_gemm import BF16, F32, FP16, TOL, interpret, operands, poisoned, rand, reference  # noqa: F401

H200 = 132


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


MODEL_GAIN = 0.85   # the model's own threshold, used where a test is about the model rather than the default


def test_matmul_does_not_split_by_itself_until_calibrated():
    """Splitting measured slower than not on the H200 (run 19), so the default never splits."""
    for m, n, k in ((128, 512, 4096), (128, 8192, 8192), (1, 4096, 4096)):
        assert gemm_splitk.plan(m, n, k, H200, gemm._block_n(m, n, torch.empty(0)))[1] == 1


def test_matmul_splits_a_product_with_few_tiles_when_asked():
    """128 x 512 x 4096 on an H200's 132 SMs: 2 tiles of 128 x 256, so each tile's 64 K steps are split."""
    assert gemm_splitk.plan(128, 512, 4096, H200, gemm._block_n(128, 512, torch.empty(0)), gain=MODEL_GAIN)[1] > 1
    a, b = operands(128, 512, 4096, BF16, True)
    v = rand(512, dtype=F32)
    c = tkpy_kernels.matmul(a, b, bias=v, activation="relu", out_dtype=F32, split_k=4)
    assert rel_err(c, reference(a, b, v, "relu")) < TOL[F32]
    assert any(isinstance(c.launch, gemm_splitk.SplitPlan) for c in gemm._CALLS.values())


@pytest.mark.parametrize("m,n,k,splits", [
    (128, 8192, 8192, False),     # 32 tiles of 128 x 256 for 132 SMs, but 128 of 128 x 64 fill them
    (128, 4096, 8192, True),      # 16 tiles of 128 x 256, 64 of 128 x 64: half the SMs idle at best
    (1, 4096, 4096, True),        # a matrix-vector product: 16 tiles
    (1024, 1024, 1024, False),    # 64 tiles of 16 steps: the second kernel costs more than it saves
    (4096, 4096, 4096, False), (2048, 2048, 2048, False), (128, 28672, 8192, False), (8, 28672, 1024, False),
    (128, 8192, 128, False),      # 2 K steps: nothing to split
])
def test_when_the_model_splits(m, n, k, splits):
    bn, s = gemm_splitk.plan(m, n, k, H200, gemm._block_n(m, n, torch.empty(0)), gain=MODEL_GAIN)
    assert (s > 1) == splits
    if splits:
        tasks = -(-m // gemm.BM) * -(-n // bn) * s
        assert 0.9 * H200 <= tasks <= H200 and -(-k // gemm.BK) // s >= gemm_splitk.MIN_STEPS
    for bn in gemm.WIDTHS:
        assert gemm_splitk.plan(m, n, k, H200, bn, block_n_forced=True)[0] == bn


@pytest.mark.parametrize("block_n", [64, 128, 256])
def test_the_register_store_epilogue_is_kept(block_n):
    a, b = operands(300, 520, 96, BF16, True)
    v, c = rand(520, dtype=F32), poisoned(300, 520, dtype=BF16)
    template = gemm.matmul_template(tk.bf16, tk.bf16, True, tk.f32, True, "gelu", block_n, epilogue="registers")
    template.kernel.interpret[(2,)](a, b.T, c, v, 0.2)
    assert rel_err(c, reference(a, b, v, "gelu", 0.2)) < TOL[BF16]


def test_split_argument_errors():
    a, b = rand(32, 64, dtype=BF16), rand(64, 16, dtype=BF16)
    with pytest.raises(ValueError, match="split_k must be None or a positive int"):
        tkpy_kernels.matmul(a, b, split_k=0)
    with pytest.raises(ValueError, match="cluster=2 does not split K"):
        tkpy_kernels.matmul(a, b, cluster=2, split_k=2)
    with pytest.raises(ValueError, match="the epilogue comes after the reduction"):
        gemm.matmul_template(tk.bf16, tk.bf16, split="ordered")


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
    template = gemm.matmul_template(*variant)
    args = _args(variant[0].torch, variant[1].torch, variant[2], variant[3] and variant[3].torch, variant[4])
    resources = template.kernel.resources(*args)
    assert resources.spill_stores == resources.spill_loads == 0 and not resources.warnings
    sass = template.kernel.sass(*args)
    assert re.search(rf"HGMMA\.64x{variant[6]}x16\.F32", sass) and "UTMASTG" in sass and re.search(stores, sass)
    assert not re.search(r"\bST\.E", sass)           # no generic stores: the epilogue goes through shared memory


@pytest.mark.parametrize("split,tma", [("ordered", "UTMASTG"), ("atomic", "UTMAREDG")])
@pytest.mark.parametrize("transposed,bn", [(False, 256), (True, 256), (True, 64)])
def test_split_k_kernels_compile_without_spills(split, tma, transposed, bn):
    template = gemm.matmul_template(tk.bf16, tk.f32, transposed, None, False, None, bn, split=split)
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
