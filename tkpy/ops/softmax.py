"""The online softmax (FlashAttention's) on register tiles: one step over a tile of raw scores, made of the warp ops.

Rows are queries, columns keys. Over the steps, `row_max` is the running max of each row's raw scores and `row_sum`
the running sum of its exponentials, kept in the scale of the latest max; what else the caller accumulates (O in
attention) it rescales by `factor` each step (tk.mul_row). After the last step, P's rows sum to `row_sum`.
"""
from __future__ import annotations

from .elementwise import copy, exp2, max as tile_max, mul
from .maps import map as tile_map
from .reduce import row_max, row_sum
from .sync import mark

__all__ = ["online_softmax"]


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
