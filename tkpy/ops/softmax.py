"""The online softmax (FlashAttention's) on register tiles: one step over a tile of raw scores, made of the warp ops.

Rows are queries, columns keys. Over the steps, `row_max` is the running max of each row's raw scores and `row_sum`
the running sum of its exponentials, kept in the scale of the latest max; what else the caller accumulates (O in
attention) it rescales by `factor` each step (tk.mul_row). After the last step, P's rows sum to `row_sum`.

`online_softmax_stale` is FlashAttention-3-style's cheaper step: P on the running shift as the scores arrive (no row
max, no rescale), redone with the max only where some row's P grew too large.
"""
from __future__ import annotations

from ..frontend.control import else_, if_
from .declare import col_vec
from .elementwise import add, copy, exp2, max as tile_max, mul, neg_infty, zero
from .maps import map as tile_map
from .reduce import mul_row, row_max, row_sum
from .sync import mark
from .warpgroup import warpgroup

__all__ = ["OnlineSoftmax", "online_softmax", "online_softmax_stale"]


def online_softmax(scores, row_max_, shift, factor, row_sum_, scale_log2, *, floor=None) -> None:
    """One step of the online softmax, in place:

        factor  <- shift                               (the previous step's shift)
        row_max <- max(row_max, each row's max of scores)
        shift   <- row_max * scale_log2                (at least `floor` where given: e.g. -FLT_MAX so that a row
                                                        that saw only masked keys, max -inf, gives exp2(-inf) = 0)
        scores  <- exp2(scores * scale_log2 - shift)   (P)
        factor  <- exp2(factor - shift)                (the rescale of what was accumulated under the old shift)
        row_sum <- row_sum * factor + each row's sum of P

    `scores` is a register tile of raw scores (their max is the max of the scaled ones for a positive
    scale_log2); `row_max_`, `shift`, `factor` and `row_sum_` are its column vectors (tk.col_vec), row_max starting
    at -inf (tk.neg_infty), shift at the same (or `floor`) and row_sum at 0. `scale_log2` is a number or a run-time
    scalar (the softmax scale times log2(e)). Per score: a max, one FFMA and one MUFU.EX2, an add. The timeline
    marks "softmax: row max" and "softmax: exponentials" (TKPY_TIMELINE) fall after the max and after P."""
    copy(factor, shift)
    row_max(row_max_, scores, row_max_)
    mark("softmax: row max")
    if floor is None:
        mul(shift, row_max_, scale_log2)
    else:
        tile_map(shift, lambda m: tile_max(m * scale_log2, floor), row_max_)
    tile_map(scores, lambda s, m: exp2(s * scale_log2 - m), scores, shift)
    mark("softmax: exponentials")
    tile_map(factor, lambda prev, m: exp2(prev - m), factor, shift)
    mul(row_sum_, row_sum_, factor)
    row_sum(row_sum_, scores, row_sum_)


def online_softmax_stale(scores, row_max_, shift, factor, row_sum_, step_sum, scale_log2, *, redo, rescale=(),
                         vote_barrier, slack: float = 8.0, floor=None) -> None:
    """One step of the online softmax on the stale shift, in place, for a warpgroup (every warp of it calls it):

        scores   <- exp2(scores * scale_log2 - shift)   (P, on the shift of the steps before: no row max)
        step_sum <- each row's sum of P

    and then, where some row's step_sum in the warpgroup passes 2^slack (a vote, tk.warpgroup.any_greater on
    named barrier `vote_barrier`, e.g. tkpy.templates.own_barrier()), the step is redone: redo() puts the raw
    scores back into `scores` (e.g. S = Q K^T again and its mask, every MMA waited for), online_softmax runs on
    them (with `floor`) and each tile of `rescale` (what was accumulated under the old shift, e.g. O) is multiplied
    by `factor`; otherwise row_sum += step_sum and nothing accumulated changes scale. So a kept step's P is at most
    2^slack (within bf16's and fp16's range) and `shift` is always the one P used: the results are the max-first
    softmax's. The first step of a row must be online_softmax's (the shift starts at -inf). Per score: one FFMA and
    one MUFU.EX2, an add; per step a warpgroup barrier."""
    tile_map(scores, lambda s, m: exp2(s * scale_log2 - m), scores, shift)
    mark("softmax: exponentials")
    row_sum(step_sum, scores)
    grew = warpgroup.any_greater(step_sum, 2.0 ** slack, vote_barrier, name="grew")
    with if_(grew):                                   # (rare: a row max grew by about `slack`)
        redo()
        online_softmax(scores, row_max_, shift, factor, row_sum_, scale_log2, floor=floor)
        for tile in rescale:
            mul_row(tile, tile, factor)
    with else_():
        add(row_sum_, row_sum_, step_sum)
    mark("softmax: row sums")


class OnlineSoftmax:
    """The running state of the online softmax over the rows of register tiles like `like` (one value a row: the
    running max, the shift, the rescale factor, the running sum, and with `stale` a step's sum), and its steps:

        softmax = tk.OnlineSoftmax(o, floor=-FLT_MAX, rescale=(o,), vote_barrier=own_barrier())   # in setup
        softmax.reset()                                  # at a task's start
        softmax.step(scores, scale_log2)                 # online_softmax, max first
        softmax.step_stale(scores, scale_log2, redo=...) # online_softmax_stale (with vote_barrier; o rescaled
                                                         # where redone)
        softmax.normalize(o)                             # o / the row sums (rows of no keys: 0)

    The vectors are attributes (row_max, shift, factor, row_sum, step_sum), named so in the generated C++."""

    def __init__(self, like, *, floor=None, rescale=(), vote_barrier=None):
        stale = vote_barrier is not None           # (step_stale's vote: a warpgroup's named barrier)
        for name in ("row_max", "shift", "factor", "row_sum") + (("step_sum",) if stale else ()):
            setattr(self, name, col_vec(like, name=name))
        self.floor, self.rescale, self.vote_barrier = floor, tuple(rescale), vote_barrier

    def reset(self) -> None:
        neg_infty(self.row_max)
        neg_infty(self.shift)
        zero(self.row_sum)

    def step(self, scores, scale_log2) -> None:
        online_softmax(scores, self.row_max, self.shift, self.factor, self.row_sum, scale_log2, floor=self.floor)

    def step_stale(self, scores, scale_log2, *, redo, slack: float = 8.0) -> None:
        if self.vote_barrier is None:
            raise TypeError("OnlineSoftmax.step_stale votes on a warpgroup barrier: make it with vote_barrier=...")
        online_softmax_stale(scores, self.row_max, self.shift, self.factor, self.row_sum, self.step_sum, scale_log2,
                             redo=redo, rescale=self.rescale, vote_barrier=self.vote_barrier, slack=slack,
                             floor=self.floor)

    def normalize(self, out) -> None:
        """out / row_sum, by one division a row (rows whose sum is 0, that saw no key: 0)."""
        tile_map(self.factor, lambda total: 1.0 / tile_max(total, 1e-30), self.row_sum)
        mul_row(out, out, self.factor)
