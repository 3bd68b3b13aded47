"""tk.online_softmax (tkpy/ops/softmax.py): steps over a row's key tiles give softmax's P once rescaled, as
attention accumulates it, in the interpreter (the attention kernels' tests run it on the GPU); a row whose first
tile is all masked needs the floor."""
from __future__ import annotations

import math

import pytest
import torch

import tkpy as tk
from tkpy import f32

FLT_MAX = 3.4028234663852886e38
LOG2E = 1.4426950408889634


def steps_kernel(floor):
    @tk.kernel(warps=1, name=f"online_softmax_{'floor' if floor else 'plain'}")
    def k(x: tk.gl[f32, 16, 64], y: tk.gl[f32, 16, 32], lse: tk.gl[f32, 1, 16], scale_log2: float):
        """Two steps of 32 keys: o accumulates each step's P, rescaled by the step's factor (as attention's O)."""
        scores, o = tk.rt(f32, 16, 32), tk.rt(f32, 16, 32)
        row_max, shift, factor, row_sum = (tk.col_vec(o) for _ in range(4))
        tk.neg_infty(row_max)
        tk.neg_infty(shift)
        tk.zero(row_sum)
        tk.zero(o)
        for step in range(2):
            tk.load(scores, x, (0, step))
            tk.online_softmax(scores, row_max, shift, factor, row_sum, scale_log2, floor=floor)
            tk.mul_row(o, o, factor)
            tk.add(o, o, scores)
        tk.div_row(o, o, row_sum)
        tk.store(y, o, (0, 0))
        tk.map(row_sum, lambda s, m: tk.log2(s) + m, row_sum, shift)      # log2-sum-exp2 of the scaled scores
        tk.store(lse, row_sum, (0, 0))
    return k


@pytest.mark.parametrize("masked_first_tile", [False, True])
def test_steps_give_softmax(masked_first_tile):
    gen = torch.Generator().manual_seed(31)
    x = torch.randn(16, 64, generator=gen) * 4
    if masked_first_tile:
        x[3, :32] = -math.inf                    # row 3 sees only masked keys in the first step
    scale = 0.3
    y, lse = torch.full((16, 32), math.nan), torch.full((1, 16), math.nan)
    steps_kernel(-FLT_MAX if masked_first_tile else None).interpret[(1,)](x, y, lse, scale * LOG2E)
    p = torch.softmax(x.double() * scale, dim=1)
    torch.testing.assert_close(y.double(), p[:, :32] + p[:, 32:], rtol=1e-5, atol=1e-6)
    ref_lse = torch.logsumexp(x.double() * scale, dim=1) * LOG2E
    torch.testing.assert_close(lse[0].double(), ref_lse, rtol=1e-5, atol=1e-5)


def test_a_masked_first_tile_without_the_floor_is_nan():
    """Why attention's causal kernels pass the floor: max -inf gives exp2(-inf - -inf) = NaN."""
    x = torch.randn(16, 64)
    x[0, :32] = -math.inf
    y, lse = torch.empty(16, 32), torch.empty(1, 16)
    steps_kernel(None).interpret[(1,)](x, y, lse, LOG2E)
    assert torch.isnan(y[0]).all() and not torch.isnan(y[1:]).any()
