"""tk.online_softmax (tkpy/ops/softmax.py): steps over a row's key tiles give softmax's P once rescaled, as
attention accumulates it, in the interpreter (the attention kernels' tests run it on the GPU); a row whose first
tile is all masked needs the floor. tk.online_softmax_stale: the same results, the step redone exactly where some
row's P grew past 2^slack (a warpgroup's vote)."""
from __future__ import annotations

import functools
import math

import pytest
import torch

import tkpy as tk
from tkpy import f32, i32
from tkpy.templates import own_barrier

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


@functools.cache
def stale_kernel():
    @tk.kernel(warps=4, name="online_softmax_stale")
    def k(x: tk.gl[f32, 64, 96], y: tk.gl[f32, 64, 32], lse: tk.gl[f32, 1, 64], redos: tk.gl[i32, 1, 4],
          scale_log2: float):
        """Three steps of 32 keys for a warpgroup's 64 rows (16 a warp): the first max-first, the others on the
        stale shift; each redo counted once per warp."""
        scores, o = tk.rt(f32, 16, 32), tk.rt(f32, 16, 32)
        row_max, shift, factor, row_sum, step_sum = (tk.col_vec(o) for _ in range(5))
        tk.neg_infty(row_max)
        tk.neg_infty(shift)
        tk.zero(row_sum)
        tk.zero(o)
        for step in range(3):
            tk.load(scores, x, (tk.warp_id(), step))
            if step == 0:
                tk.online_softmax(scores, row_max, shift, factor, row_sum, scale_log2)
            else:
                def redo(step=step):
                    tk.load(scores, x, (tk.warp_id(), step))
                    tk.atomic_add(redos, (0, 0), 1)
                tk.online_softmax_stale(scores, row_max, shift, factor, row_sum, step_sum, scale_log2, redo=redo,
                                        rescale=(o,), vote_barrier=own_barrier(), slack=8.0)
            tk.add(o, o, scores)
        tk.div_row(o, o, row_sum)
        tk.store(y, o, (tk.warp_id(), 0))
        tk.map(row_sum, lambda s, m: tk.log2(s) + m, row_sum, shift)
        tk.store(lse, row_sum, (0, tk.warp_id()))
    return k


@pytest.mark.parametrize("grows", [False, True])
def test_stale_steps_give_softmax_and_redo_only_where_p_grew(grows):
    """Random scores: no step redone, every step's P within 2^8. A row whose max jumps by 400 (P = 2^577 on the
    stale shift: inf in fp32) at the second step: that step redone once (by each of the 4 warps), the results exact."""
    gen = torch.Generator().manual_seed(7)
    x = torch.randn(64, 96, generator=gen)
    if grows:
        x[37, 40] = 400.0
    scale = 1.0
    y, lse = torch.full((64, 32), math.nan), torch.full((1, 64), math.nan)
    redos = torch.zeros(1, 4, dtype=torch.int32)
    stale_kernel().interpret[(1,)](x, y, lse, redos, scale * LOG2E)
    assert redos[0, 0].item() == (4 if grows else 0)
    p = torch.softmax(x.double() * scale, dim=1)
    torch.testing.assert_close(y.double(), p[:, :32] + p[:, 32:64] + p[:, 64:], rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(lse[0].double(), torch.logsumexp(x.double() * scale, dim=1) * LOG2E,
                               rtol=1e-5, atol=1e-5)
