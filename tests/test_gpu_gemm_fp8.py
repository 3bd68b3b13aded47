"""kernels/gemm_fp8.py on the GPU (skipped without one): against the float64 product of the fp8 inputs (every
element, poisoned outputs) and against torch._scaled_mm."""
import pytest
import torch

from gpu_util import poisoned, requires_gpu

import tkpy.kernels as tkpy_kernels
from tkpy.kernels import gemm_fp8
from test_gemm_fp8 import E4, E5, check, operands

pytestmark = requires_gpu


@pytest.mark.parametrize("m,n,k", [(4096, 4096, 4096), (1000, 1040, 528), (128, 8192, 1024), (8192, 128, 256),
                                   (64, 16, 16)])
@pytest.mark.parametrize("ka,kb", [(E4, E4), (E4, E5), (E5, E4), (E5, E5)])
def test_against_float64(m, n, k, ka, kb):
    a, b, sa, sb = operands(m, n, k, ka, kb, per_column=(m + n) % 3 == 0, device="cuda")
    c = poisoned(m, n, dtype=torch.bfloat16)
    tkpy_kernels.matmul_fp8(a, b, sa, sb, out=c)
    torch.cuda.synchronize()
    check(c, a, b, sa, sb)


@pytest.mark.parametrize("bn", [256, 128])
def test_both_tile_widths(bn):
    a, b, sa, sb = operands(520, 1008, 400, E4, E4, per_column=True, device="cuda")
    c = poisoned(520, 1008, dtype=torch.bfloat16)
    tkpy_kernels.matmul_fp8(a, b, sa, sb, out=c, block_n=bn)
    torch.cuda.synchronize()
    check(c, a, b, sa, sb)


@pytest.mark.parametrize("ka,kb", [(E4, E4), (E4, E5)])
def test_matches_torch_scaled_mm(ka, kb):
    a, b, sa, sb = operands(2048, 1024, 512, ka, kb, device="cuda")
    try:
        ref = torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16)
    except RuntimeError as e:
        pytest.skip(f"torch._scaled_mm does not take this combination here: {e}")
    c = tkpy_kernels.matmul_fp8(a, b, sa, sb)
    torch.cuda.synchronize()
    rel = ((c.double() - ref.double()).norm() / ref.double().norm()).item()
    assert rel < 1e-2
