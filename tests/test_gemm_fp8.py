"""kernels/gemm_fp8.py without a GPU: the fp8 GEMM on the CPU interpreter against float64, its argument checks,
and its SASS (QGMMA, no spills). GPU tests: test_gpu_gemm_fp8.py."""
import re

import pytest
import torch

import tkpy.kernels as tkpy_kernels
import tkpy as tk
from tkpy.kernels import gemm_fp8
from tkpy.kernels.gemm_config import FP8, MatmulFP8Config
from tkpy.kernels.gemm_kernel import fp8_matmul_template

E4, E5 = torch.float8_e4m3fn, torch.float8_e5m2


def operands(m, n, k, ka=E4, kb=E4, per_column=False, device="cpu", seed=0):
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(m, k, generator=g) * 3).to(ka).to(device)
    w = (torch.randn(n, k, generator=g) * 3).to(kb).to(device)
    scale_a = torch.tensor([0.75], device=device)
    scale_b = (torch.rand(n, generator=g) + 0.5 if per_column else torch.tensor([0.125])).to(device)
    return a, w.T, scale_a, scale_b


def check(c, a, b, scale_a, scale_b):
    """Every element within bf16 rounding of the float64 product plus the fp32 (tensor-core) accumulation error."""
    ref = gemm_fp8.reference(a, b, scale_a, scale_b, torch.float64)
    scales = gemm_fp8.column_scales(scale_a, scale_b, b.shape[1]).double()
    bound = ref.abs() * 2.0 ** -8 + (a.double().abs() @ b.double().abs()) * scales * 2.0 ** -10 + 1e-6
    assert not torch.isnan(c).any()
    assert ((c.double() - ref).abs() <= bound).all()


@pytest.mark.parametrize("m,n,k,ka,kb,per_column,bn", [
    (130, 272, 80, E4, E5, True, 128),      # tails on every axis (K: a partial 128-wide slice)
    (300, 512, 384, E5, E5, False, 256),    # several tasks per block, three K steps
    (64, 48, 32, E4, E4, False, None),
    (256, 256, 256, E5, E4, True, 256)])
def test_interpreted(monkeypatch, m, n, k, ka, kb, per_column, bn):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    a, b, sa, sb = operands(m, n, k, ka, kb, per_column)
    c = torch.full((m, n), float("nan"), dtype=torch.bfloat16)
    assert tkpy_kernels.matmul_fp8(a, b, sa, sb, out=c, block_n=bn) is c
    check(c, a, b, sa, sb)


@pytest.mark.parametrize("kwargs,match", [
    (dict(a=torch.zeros(16, 32, dtype=torch.bfloat16)), "expects fp8 operands"),
    (dict(b=torch.zeros(32, 16, dtype=E4)), r"strides \(1, 32\)"),
    (dict(b=torch.zeros(16, 24, dtype=E4).T, a=torch.zeros(16, 24, dtype=E4)), "multiples of 16"),
    (dict(scale_a=torch.ones(2)), "scale_a must hold one value"),
    (dict(scale_b=torch.ones(3)), "scale_b must hold one value or one per column"),
    (dict(out_dtype=torch.float64), "out_dtype must be"),
    (dict(block_n=64), "block_n must be 256 or 128")])
def test_argument_errors(kwargs, match):
    args = dict(a=torch.zeros(16, 32, dtype=E4), b=torch.zeros(16, 32, dtype=E4).T, scale_a=torch.ones(1),
                scale_b=torch.ones(1)) | kwargs
    with pytest.raises(ValueError, match=match):
        tkpy_kernels.matmul_fp8(args.pop("a"), args.pop("b"), args.pop("scale_a"), args.pop("scale_b"), **args)


@pytest.mark.parametrize("options,match", [
    (dict(a_dtype=tk.bf16), "a_dtype must be fp8e4m3 or fp8e5m2"), (dict(out=tk.fp8e4m3), "the output must be"),
    (dict(block_n=64), r"block_n must be one of \(256, 128\)")])
def test_config_errors(options, match):
    with pytest.raises(ValueError, match=match):
        MatmulFP8Config(**options)
    assert MatmulFP8Config(tk.fp8e5m2, block_n=128).name == "matmul_fp8_e5m2_e4m3_bf16_n128"
    assert MatmulFP8Config(stages=3).name == "matmul_fp8_e4m3_e4m3_bf16_n256_3stages"


@pytest.mark.parametrize("ka,kb,bn", [(E4, E4, 256), (E4, E5, 128), (E5, E5, 256)])
def test_compiles_to_qgmma_without_spills(ka, kb, bn):
    t = fp8_matmul_template(MatmulFP8Config(FP8[ka], FP8[kb], tk.bf16, bn))
    args = (torch.empty(512, 256, dtype=ka), torch.empty(512, 256, dtype=kb), torch.empty(512, 512, dtype=torch.bfloat16),
            torch.empty(512))
    res = t.kernel.resources(*args)
    assert res.spill_stores == res.spill_loads == 0 and not res.warnings
    names = {"float8_e4m3fn": "E4M3", "float8_e5m2": "E5M2"}
    kinds = f"{names[str(ka).split('.')[1]]}.{names[str(kb).split('.')[1]]}"
    assert re.search(rf"QGMMA\.64x{bn}x32\.F32\.{kinds} R\d+, gdesc\[UR\d+\], ", t.kernel.sass(*args))
