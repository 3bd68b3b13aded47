"""The example kernels in kernels/ against torch on the GPU, several shapes each."""
from __future__ import annotations

import pytest
import torch

from gpu_util import poisoned, rand, rel_err, requires_gpu
from kernels.softmax import softmax
from kernels.warp_matmul import matmul

pytestmark = requires_gpu


@pytest.mark.parametrize("rows,d", [(64, 16), (1024, 64), (4096, 128), (192, 256)])
def test_softmax(rows, d):
    x = rand(rows, d, dtype=torch.bfloat16, low=-6, high=6)
    y = softmax(x, out=poisoned(rows, d, dtype=torch.bfloat16))
    ref = torch.softmax(x.double(), dim=-1)
    assert rel_err(y, ref) < 1e-2
    assert torch.allclose(y.double().sum(-1), torch.ones(rows, dtype=torch.float64, device="cuda"), atol=2e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (128, 192, 96), (512, 256, 1024), (1024, 1024, 512)])
def test_warp_matmul(dtype, m, n, k):
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    c = matmul(a, b, out=poisoned(m, n, dtype=torch.float32))
    ref = a.double() @ b.double()
    assert rel_err(c, ref) < 1e-5


def test_softmax_rejects_bad_shape():
    with pytest.raises(ValueError, match="multiple"):
        softmax(torch.empty(100, 64, dtype=torch.bfloat16, device="cuda"))
