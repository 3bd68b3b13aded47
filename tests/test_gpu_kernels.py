"""The example kernels in kernels/ against torch on the GPU, several shapes each."""
from __future__ import annotations

import pytest
import torch

from gpu_util import poisoned, rand, rel_err, requires_gpu
from test_softmax_op import TOL, check_forward_and_backward
from tkpy.kernels.row_softmax import softmax
from tkpy.kernels.warp_matmul import matmul

pytestmark = requires_gpu


@pytest.mark.parametrize("dtype", TOL)
@pytest.mark.parametrize("shape", [(64, 16), (1024, 64), (4096, 128), (192, 256), (2, 3, 40), (70, 1), (33, 5),
                                   (1000, 100), (3, 77, 256)])
def test_softmax(shape, dtype):
    """Forward and backward against float64 torch on every element (tests/test_softmax_op.py's checks)."""
    check_forward_and_backward(shape, dtype, "cuda")


def test_softmax_opcheck():
    x = rand(33, 40, dtype=torch.bfloat16).requires_grad_()
    torch.library.opcheck(torch.ops.tkpy.softmax.default, (x,))
    torch.library.opcheck(torch.ops.tkpy.softmax_backward.default,
                          (rand(33, 40, dtype=torch.bfloat16), softmax(x.detach())))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (128, 192, 96), (512, 256, 1024), (1024, 1024, 512)])
def test_warp_matmul(dtype, m, n, k):
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    c = matmul(a, b, out=poisoned(m, n, dtype=torch.float32))
    ref = a.double() @ b.double()
    assert rel_err(c, ref) < 1e-5


def test_softmax_rejects_wide_rows():
    with pytest.raises(ValueError, match="at most 256 elements"):
        softmax(torch.empty(100, 257, dtype=torch.bfloat16, device="cuda"))
