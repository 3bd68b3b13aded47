"""kernels/gemm.py's matmul on the GPU against float64 torch: many shapes (tile multiples, odd sizes, M = 1,
K = 16, 1000x3000x700), both B layouts, bf16/fp16 inputs, bf16/fp16/fp32 outputs, fused epilogues, every
tile width (256, 128, 64), split-K; outputs poisoned with NaN, and a window of a larger buffer to check that edge
tiles write nothing outside it (skipped without a GPU)."""
import pytest
import torch

from gpu_util import poisoned, rand, rel_err, requires_gpu
import tkpy.kernels as tkpy_kernels
from tkpy import cdiv

pytestmark = requires_gpu
BF16, FP16, F32 = torch.bfloat16, torch.float16, torch.float32
TOL = {BF16: 1e-2, FP16: 2e-3, F32: 1e-4}

SHAPES = [(1000, 3000, 700), (1, 4096, 4096), (1, 48, 16), (4096, 4096, 4096), (1024, 1024, 16), (128, 8192, 8192),
          (257, 129, 65), (2048, 2048, 2048), (100, 300, 70), (3000, 1000, 4096), (8, 28672, 1024), (640, 768, 8)]


def operands(m, n, k, dtype, transposed):
    a = rand(m, k, dtype=dtype)
    b = rand(n, k, dtype=dtype).T if transposed else rand(k, n, dtype=dtype)
    return a, b


def reference(a, b, bias=None, activation=None, scale=None):
    from tkpy.kernels.gemm import _epilogue
    return _epilogue(a.double() @ b.double(), None if bias is None else bias.double(), activation, scale)


@pytest.mark.parametrize("m,n,k", SHAPES)
@pytest.mark.parametrize("transposed", [False, True], ids=["nn", "nt"])
@pytest.mark.parametrize("dtype", [BF16, FP16], ids=["bf16", "fp16"])
def test_matmul(m, n, k, transposed, dtype):
    from tkpy.kernels import matmul
    a, b = operands(m, n, k, dtype, transposed)
    c = matmul(a, b, out=poisoned(m, n, dtype=dtype))
    assert rel_err(c, reference(a, b)) < TOL[dtype]


EPILOGUES = [  # out dtype, bias dtype, activation, scale
    (F32, None, None, None), (FP16, None, None, 0.25), (F32, F32, None, None), (BF16, BF16, "relu", None),
    (F32, BF16, "gelu", 0.02), (BF16, FP16, "silu", 0.02), (F32, F32, "silu", None), (FP16, None, "gelu", 0.01),
    (F32, F32, "gelu", 0.02)]


@pytest.mark.parametrize("out,bias,activation,scale", EPILOGUES)
@pytest.mark.parametrize("m,n,k", [(1000, 3000, 700), (2048, 2048, 1024)])
@pytest.mark.parametrize("transposed", [False, True], ids=["nn", "nt"])
def test_epilogues(out, bias, activation, scale, m, n, k, transposed):
    """act(scale * a @ b + bias) in bf16/fp16/fp32 (the scales keep the pre-activation values near 1)."""
    from tkpy.kernels import matmul
    dtype = FP16 if out == FP16 else BF16
    a, b = operands(m, n, k, dtype, transposed)
    v = None if bias is None else rand(n, dtype=bias)
    c = matmul(a, b, out=poisoned(m, n, dtype=out), bias=v, activation=activation, scale=scale)
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[out]


@pytest.mark.parametrize("activation,scale", [("gelu", 0.1), ("silu", None)])
@pytest.mark.parametrize("m,n,k", [(1, 512, 16), (7, 1000, 72)])
def test_epilogues_of_few_rows(m, n, k, activation, scale):
    from tkpy.kernels import matmul
    a, b = operands(m, n, k, BF16, False)
    v = rand(n, dtype=BF16)
    c = matmul(a, b, out=poisoned(m, n, dtype=F32), bias=v, activation=activation, scale=scale)
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[F32]


@pytest.mark.parametrize("block_n", [64, 128, 256])
@pytest.mark.parametrize("m,n,k", [(4096, 4096, 1024), (300, 520, 96), (1000, 3000, 700)])
@pytest.mark.parametrize("transposed", [False, True], ids=["nn", "nt"])
def test_every_tile_width(block_n, m, n, k, transposed):
    from tkpy.kernels import matmul
    a, b = operands(m, n, k, BF16, transposed)
    v = rand(n, dtype=F32)
    c = matmul(a, b, out=poisoned(m, n, dtype=F32), bias=v, activation="gelu", scale=0.02, block_n=block_n)
    assert rel_err(c, reference(a, b, v, "gelu", 0.02)) < TOL[F32]


WIDE64_SHAPES = [(1000, 3000, 700), (1, 1000, 4096), (640, 768, 16), (257, 129, 65), (1024, 1024, 1024),
                 (128, 8192, 512)]


@pytest.mark.parametrize("out", [BF16, FP16, F32], ids=["bf16", "fp16", "f32"])
@pytest.mark.parametrize("m,n,k", WIDE64_SHAPES)
@pytest.mark.parametrize("transposed", [False, True], ids=["nn", "nt"])
def test_64_wide_tiles(out, m, n, k, transposed):
    """128 x 64 tiles in every output dtype (one piece per tile in bf16/fp16, two 32-column pieces in fp32)
    at odd shapes: ragged edges, M = 1, K = 16, more tasks than SMs (1000 x 3000: 376 tiles)."""
    from tkpy.kernels import matmul
    dtype = FP16 if out == FP16 else BF16
    a, b = operands(m, n, k, dtype, transposed)
    c = matmul(a, b, out=poisoned(m, n, dtype=out), block_n=64)
    assert rel_err(c, reference(a, b)) < TOL[out]


@pytest.mark.parametrize("out,bias,activation,scale", EPILOGUES)
@pytest.mark.parametrize("transposed", [False, True], ids=["nn", "nt"])
def test_64_wide_tiles_with_epilogues(out, bias, activation, scale, transposed):
    from tkpy.kernels import matmul
    dtype = FP16 if out == FP16 else BF16
    a, b = operands(1000, 3000, 700, dtype, transposed)
    v = None if bias is None else rand(3000, dtype=bias)
    c = matmul(a, b, out=poisoned(1000, 3000, dtype=out), bias=v, activation=activation, scale=scale, block_n=64)
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[out]


def test_stores_stay_inside_the_output_view():
    from tkpy.kernels import matmul
    a, b = operands(1000, 3000, 704, BF16, True)
    big = torch.full((1100, 3200), 7.0, dtype=F32, device="cuda")
    c = matmul(a, b, out=big[50:1050, 64:3064])
    torch.cuda.synchronize()
    assert rel_err(c, reference(a, b)) < TOL[F32]
    inside = torch.zeros_like(big, dtype=torch.bool)
    inside[50:1050, 64:3064] = True
    assert torch.all(big[~inside] == 7.0)


def test_odd_layouts_are_copied_and_still_right():
    from tkpy.kernels import matmul
    a = rand(512, 1000, dtype=BF16).T                          # (1000, 512), strides (1, 1000)
    b = rand(512, 3002, dtype=BF16)[:, ::2][:, :1001]           # (512, 1001), column stride 2
    v = rand(1002, dtype=F32)[1:]                              # misaligned
    c = matmul(a, b, bias=v, activation="relu", scale=0.1)
    assert c.shape == (1000, 1001) and c.is_contiguous()
    assert rel_err(c, reference(a, b, v, "relu", 0.1)) < TOL[BF16]


def test_expanded_operands_are_copied():
    """Operands that repeat a row or a column (stride 0, .expand()) are copied before TMA reads them."""
    from tkpy.kernels import matmul
    a = rand(1, 256, dtype=BF16).expand(300, -1)
    for b in (rand(256, 1, dtype=BF16).expand(-1, 200), rand(1, 200, dtype=BF16).expand(256, -1)):
        assert rel_err(matmul(a, b), reference(a, b)) < TOL[BF16]


def test_matches_torch_matmul_like_for_like():
    """bf16 in, bf16 out: within bf16 rounding of cuBLAS's result."""
    from tkpy.kernels import matmul
    a, b = operands(2048, 4096, 1024, BF16, True)
    assert rel_err(matmul(a, b), torch.matmul(a, b)) < 1e-2


# -- the TMA epilogue (LCSF), split-K and the template variants (kernels/gemm_splitk.py, tests/test_lcsf_template.py)

SPLIT_CASES = [  # m, n, k, split_k (None: matmul's default, no split), deterministic, B transposed, out, bias, act., scale
    (128, 8192, 8192, None, True, True, BF16, None, None, None),
    (1, 4096, 4096, None, True, False, F32, F32, "gelu", 0.02),
    (100, 3000, 7000, 3, True, False, BF16, BF16, "relu", None),
    (257, 1000, 4096, 5, False, True, F32, None, "silu", 0.02),
    (128, 8192, 8192, 4, False, False, FP16, FP16, None, 0.5),
    (64, 200, 128, 6, True, True, BF16, None, None, None),          # more splits than K steps
]
SPLIT_CASES_64 = [  # the same with 64-wide tiles forced (the partials in two 32-column fp32 pieces per tile)
    (128, 4096, 8192, 2, True, True, BF16, None, None, None),
    (1000, 3000, 700, 3, False, False, F32, F32, "gelu", 0.02),
    (1, 1000, 4096, 4, True, False, FP16, BF16, "silu", None),
]


@pytest.mark.parametrize("m,n,k,split_k,deterministic,transposed,out,bias,activation,scale,block_n",
                         [c + (None,) for c in SPLIT_CASES] + [c + (64,) for c in SPLIT_CASES_64])
def test_split_k(m, n, k, split_k, deterministic, transposed, out, bias, activation, scale, block_n):
    from tkpy.kernels import matmul
    dtype = FP16 if out == FP16 else BF16
    a, b = operands(m, n, k, dtype, transposed)
    v = None if bias is None else rand(n, dtype=bias)
    c = matmul(a, b, out=poisoned(m, n, dtype=out), bias=v, activation=activation, scale=scale, split_k=split_k,
               deterministic=deterministic, block_n=block_n)
    assert rel_err(c, reference(a, b, v, activation, scale)) < TOL[out]


def test_split_k_ordered_gives_the_same_bits_every_run():
    from tkpy.kernels import matmul
    a, b = operands(128, 8192, 8192, BF16, True)
    first = matmul(a, b, out_dtype=F32, split_k=4)
    for _ in range(3):
        assert torch.equal(matmul(a, b, out_dtype=F32, split_k=4), first)
    assert rel_err(matmul(a, b, out_dtype=F32, split_k=4, deterministic=False), first) < 1e-6


@pytest.mark.parametrize("stages,output_stages,pieces,producer_warps,ragged", [
    (2, 2, 2, 4, False), (3, 1, 2, 4, False), (2, 3, 4, 2, False), (1, 2, 1, 3, False), (2, 2, 2, 4, True),
    (3, 1, 4, 2, True)])
def test_lcsf_template_kernels(stages, output_stages, pieces, producer_warps, ragged):
    """tests/test_lcsf_template.py's kernels: output rings of 1-3 stages in 1-4 pieces, producers of 2-4 warps,
    per-task step counts; 40 x 24 tiles, so every block runs several tasks."""
    from test_lcsf_template import BK, BM, BN, piece_gemm
    from test_lcsf_template import reference as lcsf_reference
    a, b = rand(40 * BM, 6 * BK, dtype=BF16), rand(6 * BK, 24 * BN, dtype=BF16)
    c = poisoned(40 * BM, 24 * BN, dtype=F32)
    piece_gemm(stages, output_stages, pieces, producer_warps, ragged)(a, b, c)
    assert rel_err(c, lcsf_reference(a, b, ragged)) < 1e-3


@pytest.mark.parametrize("splits", [2, 3, 7])
def test_lcsf_split_k_partials(splits):
    from test_lcsf_template import BK, BM, BN, piece_gemm
    a, b = rand(4 * BM, 20 * BK, dtype=BF16), rand(20 * BK, 6 * BN, dtype=BF16)
    c = poisoned(splits, 4 * BM, 6 * BN, dtype=F32)
    piece_gemm(2, 2, 2, 4, splits=splits)(a, b, c)
    assert rel_err(c.sum(0), reference(a, b)) < 1e-3


@pytest.mark.parametrize("stages", [2, 3, 4])
def test_lcf_finish_block_over_the_stages(stages):
    """tests/test_lcsf_template.py's LCF kernel whose finish stages its tile in a block over the last input
    stages (the producer holds back only the stages it overlaps until the finish is done)."""
    from test_lcsf_template import BK, BM, BN, finish_block_gemm
    a, b = rand(40 * BM, 6 * BK, dtype=BF16), rand(6 * BK, 24 * BN, dtype=BF16)
    c = poisoned(40 * BM, 24 * BN, dtype=BF16)
    finish_block_gemm(stages)(a, b, c)
    assert rel_err(c, reference(a, b)) < TOL[BF16]
