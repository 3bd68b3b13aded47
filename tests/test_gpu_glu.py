"""tkpy.kernels.swiglu and geglu on the GPU (tests/test_glu.py's checks): output and both gradients against float64
on every element, outputs poisoned, across widths (narrow, ragged, LLM MLP widths), both dtypes, both forms."""
from __future__ import annotations

import pytest
import torch

from gpu_util import requires_gpu
from test_glu import check

pytestmark = requires_gpu


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("width", [8, 64, 256, 1000, 4096, 11008, 14336])
@pytest.mark.parametrize("activation", ["silu", "gelu", "gelu_tanh"])
def test_across_widths(activation, width, dtype):
    check(activation, (max(3, min(4000, 2 ** 21 // width)), width), dtype, device="cuda")
    check(activation, (3, 7, width), dtype, packed=True, device="cuda")


@pytest.mark.parametrize("activation", ["silu", "gelu"])
@pytest.mark.parametrize("width", [1000, 4096])
def test_a_warp_a_task(activation, width):
    """persistent=False: a warp for every (row, piece), no loop (the sweep's one-step splits)."""
    check(activation, (3000, width), torch.bfloat16, device="cuda", options=dict(chunks=2, warps=8, persistent=False))
