"""tk.warpgroup.any_greater (bar.red.or): a warpgroup-uniform vote over a register vector, in the CPU interpreter,
the generated C++ (compiled by NVRTC, BAR.RED in the SASS) and, where there is one, on the GPU."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tests.gpu_util import on_gpu, poisoned
from tkpy import f32


@tk.kernel(warps=8)
def vote(x: tk.gl[f32, 1, 1, 128, 16], out: tk.gl[f32, 1, 1, 128, 16], threshold: float):
    """Warp w's 16 rows of x; its row maxima vote in its warpgroup (barrier 1 + warpgroup) on whether any exceeds
    the threshold; every warp writes the verdict (1 or 0) over its 16 rows of out."""
    t = tk.rt(f32, 16, 16)
    tk.load(t, x, (0, 0, tk.warp_id(), 0))
    row_max = tk.col_vec(t)
    tk.row_max(row_max, t)
    above = tk.warpgroup.any_greater(row_max, threshold, 1 + tk.warpgroup.id())
    with tk.if_(above):
        tk.fill(t, 1.0)
    with tk.else_():
        tk.zero(t)
    tk.store(out, t, (0, 0, tk.warp_id(), 0))


def inputs(device="cpu"):
    """Values in [0, 1), but 7.0 in one row of warp 2 (warpgroup 0) and NaN in one of warp 5 (warpgroup 1)."""
    x = torch.rand(1, 1, 128, 16, device=device)
    x[0, 0, 2 * 16 + 3, 5] = 7.0
    x[0, 0, 5 * 16 + 9, 0] = float("nan")
    return x


def verdicts(out: torch.Tensor) -> list:
    """Each warp's verdict (its 16 rows of out, all equal)."""
    rows = out.reshape(8, 16 * 16)
    assert torch.equal(rows, rows[:, :1].expand_as(rows)), "a warp's rows disagree"
    return rows[:, 0].tolist()


@pytest.mark.parametrize("threshold, expected", [(2.0, [1.0] * 4 + [0.0] * 4),     # only warpgroup 0 has the 7
                                                 (8.0, [0.0] * 8),                  # nothing above; NaN is not
                                                 (-1.0, [1.0] * 8)])
def test_vote_in_the_interpreter(threshold, expected):
    out = torch.full((1, 1, 128, 16), float("nan"))
    vote.interpret[(1,)](inputs(), out, threshold)
    assert verdicts(out) == expected


def test_vote_emits_bar_red_and_compiles():
    x = inputs()
    src = vote.source(x, x, 2.0)
    assert "above = tk::named_any(tk::any_greater(row_max, threshold), 1 + warpid / 4, 128);" in src
    assert "bar.red.or.pred" in src
    assert "BAR.RED.OR" in vote.sass(x, x, 2.0)


def zero_rows():
    """(Traced inside a kernel) a zero 16x16 tile and its row maxima, a vector to vote on."""
    t = tk.rt(f32, 16, 16)
    tk.zero(t)
    m = tk.col_vec(t)
    tk.row_max(m, t)
    return t, m


@tk.kernel(warps=4)
def mixed(out: tk.gl[f32, 1, 1, 64, 16]):
    """Warp 0 votes on barrier 1 while the others sync on it: one phase, two kinds of arrival."""
    t, m = zero_rows()
    with tk.if_(tk.warp_id() == 0):
        tk.warpgroup.any_greater(m, 0.0, 1)
    with tk.else_():
        tk.warpgroup.sync(1)
    tk.store(out, t, (0, 0, tk.warp_id(), 0))


def test_a_phase_of_votes_and_syncs_is_reported():
    with pytest.raises(tk.InterpretError, match="1 of the 4 warps of one phase voted"):
        mixed.interpret[(1,)](torch.zeros(1, 1, 64, 16))


def test_bad_barrier_ids_are_refused():
    @tk.kernel(warps=4)
    def bad(out: tk.gl[f32, 1, 1, 64, 16]):
        _, m = zero_rows()
        tk.warpgroup.any_greater(m, 0.0, 16)
    with pytest.raises(tk.TraceError, match="barrier id must be an int in 1..15"):
        bad.source(torch.zeros(1, 1, 64, 16))


@on_gpu
@pytest.mark.parametrize("threshold, expected", [(2.0, [1.0] * 4 + [0.0] * 4), (8.0, [0.0] * 8), (-1.0, [1.0] * 8)])
def test_vote_on_the_gpu(threshold, expected):
    out = poisoned(1, 1, 128, 16, dtype=torch.float32)
    vote[(1,)](inputs("cuda"), out, threshold)
    torch.cuda.synchronize()
    assert verdicts(out.cpu()) == expected
