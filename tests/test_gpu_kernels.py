"""The warp-level example kernel in kernels/ against torch on the GPU, several shapes (the softmax's:
tests/test_gpu_softmax.py)."""
from __future__ import annotations

import pytest
import torch

from gpu_util import poisoned, rand, rel_err, requires_gpu
from tkpy.kernels.warp_matmul import matmul

pytestmark = requires_gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (128, 192, 96), (512, 256, 1024), (1024, 1024, 512)])
def test_warp_matmul(dtype, m, n, k):
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    c = matmul(a, b, out=poisoned(m, n, dtype=torch.float32))
    ref = a.double() @ b.double()
    assert rel_err(c, ref) < 1e-5
