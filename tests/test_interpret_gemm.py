"""kernels/gemm.py's matmul on the CPU interpreter (no GPU): every class of combination (bf16/fp16 inputs,
B row-major or transposed, bf16/fp16/fp32 output, bias/scale/activation epilogues, 64-, 128- and
256-wide tiles) at small odd shapes against float64 torch, the host-side padding of operands TMA cannot read in
place, masked stores at the edges, degenerate shapes and argument errors; and (NVRTC + nvdisasm, no GPU)
that the heaviest epilogues compile to HGMMA without register spills."""
from __future__ import annotations

import functools
import re

import pytest
import torch

import tkpy.kernels as tkpy_kernels
import tkpy as tk

import gpu_util
from gpu_util import rel_err
from tkpy.kernels import gemm, gemm_policy
from tkpy.kernels.gemm_config import MatmulConfig
from tkpy.kernels.gemm_kernel import matmul_template
from test_attention_cpu import before_hgmma

rand = functools.partial(gpu_util.rand, device="cpu")
poisoned = functools.partial(gpu_util.poisoned, device="cpu")
BF16, FP16, F32 = torch.bfloat16, torch.float16, torch.float32
TOL = {BF16: 1e-2, FP16: 2e-3, F32: 1e-5}


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def operands(m, n, k, dtype, transposed):
    """a (M, K) and b (K, N), b as the transpose of a row-major (N, K) tensor when `transposed`."""
    a = rand(m, k, dtype=dtype)
    b = rand(n, k, dtype=dtype).T if transposed else rand(k, n, dtype=dtype)
    return a, b


def reference(a, b, bias=None, activation=None, scale=None):
    return gemm._epilogue(a.double() @ b.double(), None if bias is None else bias.double(), activation, scale)


@pytest.mark.parametrize("m,n,k", [(1, 48, 16), (100, 300, 70), (130, 260, 90), (256, 256, 128)])
@pytest.mark.parametrize("transposed", [False, True])
@pytest.mark.parametrize("dtype", [BF16, FP16])
def test_plain_product(m, n, k, transposed, dtype):
    a, b = operands(m, n, k, dtype, transposed)
    c = tkpy_kernels.matmul(a, b, out=poisoned(m, n, dtype=dtype))
    assert rel_err(c, reference(a, b)) < TOL[dtype]


EPILOGUES = [  # out dtype, bias dtype, activation, scale
    (F32, None, None, None), (FP16, None, None, 0.25), (F32, F32, None, None), (BF16, BF16, "relu", None),
    (F32, BF16, "gelu", 0.1), (BF16, FP16, "silu", 0.1), (F32, F32, "silu", None), (FP16, None, "gelu", 0.05),
    (F32, torch.float64, "relu", -0.5)]


@pytest.mark.parametrize("out,bias,activation,scale", EPILOGUES)
@pytest.mark.parametrize("transposed", [False, True])
def test_output_dtypes_and_epilogues(out, bias, activation, scale, transposed):
    """act(scale * a @ b + bias) at an odd shape (tails on every axis, padded operands)."""
    dtype = FP16 if out == FP16 else BF16
    a, b = operands(100, 300, 70, dtype, transposed)
    v = None if bias is None else rand(300, dtype=bias)
    c = tkpy_kernels.matmul(a, b, out=poisoned(100, 300, dtype=out), bias=v, activation=activation, scale=scale)
    assert c.dtype == out
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[out]


@pytest.mark.parametrize("block_n", [64, 128, 256])
@pytest.mark.parametrize("transposed", [False, True])
def test_every_tile_width_with_several_tasks_per_block(block_n, transposed):
    """Two persistent blocks for 6, 12 or 27 tiles: each runs several tasks (the accumulator and the bias
    are reset and reloaded per task)."""
    a, b = operands(300, 520, 96, BF16, transposed)
    v, c = rand(520, dtype=F32), poisoned(300, 520, dtype=F32)
    template = matmul_template(MatmulConfig(tk.bf16, tk.f32, transposed, tk.f32, True, "gelu", block_n))
    template.kernel.interpret[(2,)](a, b.T if transposed else b, c, v, 0.2)
    assert rel_err(c, reference(a, b, v, "gelu", 0.2)) < TOL[F32]


@pytest.mark.parametrize("variant,hgmma", [
    ((tk.bf16, tk.f32, True, tk.f32, True, "gelu"), r"HGMMA\.64x256x16\.F32\.BF16 R\d+, gdesc\[UR\d+\], "),
    ((tk.fp16, tk.f32, False, tk.bf16, True, "silu"), r"HGMMA\.64x256x16\.F32 R\d+, gdesc\[UR\d+\]\.tnspB, ")],
    ids=["bf16-nt-bias-scale-gelu", "fp16-nn-bias-scale-silu"])
def test_the_heaviest_epilogues_compile_to_hgmma_without_spills(variant, hgmma):
    """fp32 output, bias, scale and an activation on 256-wide tiles: the 128 accumulator registers, the
    bias vector and the activation's temporaries fit the consumers' registers (NVRTC and nvdisasm, no GPU).
    B as (N, K) tiles is read K-major as it is; a row-major B through wgmma's transpose bit."""
    template = matmul_template(MatmulConfig(*variant, 256))
    dtype, out, transposed, bias = (x.torch if hasattr(x, "torch") else x for x in variant[:4])
    args = (torch.empty(512, 256, dtype=dtype), torch.empty(*((512, 256) if transposed else (256, 512)), dtype=dtype),
            torch.empty(512, 512, dtype=out), torch.empty(512, dtype=bias), 1.0)
    resources = template.kernel.resources(*args)
    assert resources.spill_stores == resources.spill_loads == 0
    sass = template.kernel.sass(*args)
    assert re.search(hgmma, sass)
    # each K step's descriptors: one 32-bit add to the tile's (no 64-bit add with carry before an HGMMA)
    assert not any("UIADD3.X" in line for line in before_hgmma(sass))


@pytest.mark.parametrize("out,bias,activation,scale", [
    (BF16, None, None, None), (FP16, FP16, "silu", 0.25), (F32, None, None, None), (F32, F32, "gelu", 0.1),
    (BF16, F32, "relu", -0.5)])
@pytest.mark.parametrize("transposed", [False, True])
def test_64_wide_tiles(out, bias, activation, scale, transposed):
    """128 x 64 tiles at an odd shape (a ragged last row and column of tiles, a K tail): one output piece
    per tile in bf16/fp16, two 32-column pieces in fp32, with and without the fused epilogue."""
    dtype = FP16 if out == FP16 else BF16
    m, n, k = 130, 200, 90
    a, b = operands(m, n, k, dtype, transposed)
    v = None if bias is None else rand(n, dtype=bias)
    c = tkpy_kernels.matmul(a, b, out=poisoned(m, n, dtype=out), bias=v, activation=activation, scale=scale, block_n=64)
    assert c.dtype == out
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[out]


@pytest.mark.parametrize("m,n,block_n", [
    (1024, 1024, 64),     # 32 tasks of 256 columns on 132 SMs, 64 of 128, 128 of 64
    (128, 8192, 64),      # the same counts
    (256, 4096, 64),
    (1, 4096, 64),        # 16, 32 or 64 tasks: as many SMs busy as can be
    (4096, 4096, 256),    # 512 tasks: 4 full waves
    (2048, 2048, 256),    # 128 tasks: one wave
    (8192, 8192, 256),
    (128, 28672, 256),    # 112 tasks of 256 columns: 85% busy, as with 128 or 64
    (2048, 8192, 256),
    (384, 4096, 128),     # 48 tasks of 256 (36% busy), 96 of 128 (73%), 192 of 64 (73% over 2 waves)
    (1024, 3072, 256),    # 96 wide tiles in one wave beat 384 of 64 columns in three (measured, run 21)
])
def test_the_tile_width_follows_the_number_of_tasks(m, n, block_n):
    assert gemm_policy.block_n_for(m, n, 132) == block_n      # an H200's SMs


def test_stores_stay_inside_the_output_view():
    """C as a window of a larger buffer: the edge tiles write nothing past its last row or column."""
    a, b = operands(70, 200, 64, BF16, False)
    big = torch.full((100, 264), 7.0, dtype=F32)
    c = tkpy_kernels.matmul(a, b, out=big[10:80, 8:208])
    assert rel_err(c, reference(a, b)) < TOL[F32]
    inside = torch.zeros_like(big, dtype=torch.bool)
    inside[10:80, 8:208] = True
    assert torch.all(big[~inside] == 7.0)


def test_operands_in_other_layouts_are_copied():
    """A transposed a, a b that is neither layout, a misaligned bias and an output whose rows are not
    16-byte aligned (N = 37): padded copies, same result."""
    a = rand(64, 96, dtype=BF16).T                              # (96, 64), strides (1, 96)
    b = rand(64, 80, dtype=BF16)[:, ::2][:, :37]                # (64, 37), column stride 2
    v = rand(38, dtype=F32)[1:]                                 # 4 bytes past an aligned address
    c = tkpy_kernels.matmul(a, b, bias=v)
    assert c.shape == (96, 37) and c.is_contiguous()
    assert rel_err(c, reference(a, b, v)) < TOL[BF16]


def test_vectors_and_a_single_row():
    x, w = rand(1, 70, dtype=BF16), rand(70, 1, dtype=BF16)
    assert rel_err(tkpy_kernels.matmul(x, w), reference(x, w)) < TOL[BF16]
    w = rand(5, 70, dtype=BF16).T                               # (70, 5) as w.T
    assert rel_err(tkpy_kernels.matmul(x, w, out_dtype=F32), reference(x, w)) < TOL[F32]


def test_empty_shapes():
    a, b = rand(0, 32, dtype=BF16), rand(32, 16, dtype=BF16)
    assert tkpy_kernels.matmul(a, b).shape == (0, 16)
    a, b = rand(8, 0, dtype=BF16), rand(0, 16, dtype=BF16)
    v = rand(16, dtype=F32)
    c = tkpy_kernels.matmul(a, b, bias=v, activation="gelu", out_dtype=F32)
    assert torch.allclose(c, torch.nn.functional.gelu(v, approximate="tanh").expand(8, -1))


@pytest.mark.parametrize("kwargs,match", [
    (dict(b=rand(64, 16, dtype=FP16)), "both bf16 or both fp16"),
    (dict(a=rand(32, 64, dtype=F32), b=rand(64, 16, dtype=F32)), "both bf16 or both fp16"),
    (dict(b=rand(48, 16, dtype=BF16)), r"a \(M, K\) @ b \(K, N\)"),
    (dict(activation="tanh"), "activation must be one of"),
    (dict(bias=rand(15, dtype=F32)), r"bias must be a \(16,\) float tensor"),
    (dict(out=torch.empty(32, 16, dtype=BF16), out_dtype=F32), r"out must be a \(32, 16\) torch.float32"),
    (dict(out_dtype=torch.float64), "bf16, fp16 or fp32"),
    (dict(block_n=96), "block_n must be 256, 128 or 64"),
])
def test_argument_errors(kwargs, match):
    args = dict(a=rand(32, 64, dtype=BF16), b=rand(64, 16, dtype=BF16)) | kwargs
    with pytest.raises(ValueError, match=match):
        tkpy_kernels.matmul(args.pop("a"), args.pop("b"), **args)


@pytest.mark.parametrize("options,match", [
    (dict(dtype=tk.f32), "A and B must be bf16 or fp16"), (dict(out=tk.fp8e4m3), "the output must be bf16, fp16"),
    (dict(bias=tk.fp8e5m2), "the bias must be bf16, fp16 or fp32"), (dict(scale="yes"), "scale must be True or False"),
    (dict(b_transposed=None), "b_transposed must be True or False"), (dict(activation="tanh"), "activation must be"),
    (dict(block_n=96), r"block_n must be one of \(256, 128, 64\)"), (dict(split="tree"), "split must be one of"),
    (dict(out=tk.f32, bias=tk.f32, split="atomic"), "the epilogue comes after the reduction"),
])
def test_config_errors(options, match):
    with pytest.raises(ValueError, match=match):
        MatmulConfig(**options)


def test_config_defaults_resolve_and_name_the_kernel():
    """The default stages are resolved at construction (configs of one kernel compare equal); the name spells out
    what is not the default."""
    assert MatmulConfig(stages=4) == MatmulConfig() and MatmulConfig().name == "matmul"
    assert MatmulConfig(block_n=64).stages == 8
    assert MatmulConfig(tk.fp16, tk.f32, True, tk.bf16, True, "silu", 128, stages=3, output_stages=4).name == \
        "matmul_fp16_f32_nt_bias_bf16_scale_silu_n128_3stages_4out"


def test_matmul_takes_no_cluster_argument():
    """Clusters sharing A measured slower than single blocks (RESULTS.md run 27) and left the kernel with their
    `cluster` argument."""
    a, b = rand(32, 64, dtype=BF16), rand(64, 16, dtype=BF16)
    with pytest.raises(TypeError, match="cluster"):
        tkpy_kernels.matmul(a, b, cluster=2)
