"""The bodies of the cross-entropy kernels (kernels/cross_entropy_op.py is the API): the prologue of a reduced loss, the
fused forward, which writes the logits' gradient in the pass that computes the loss, and the backward, which scales
that gradient in place.

Prologue ("mean" and "sum"): block 0 zeroes the forward's ticket; for the mean, each block writes its part of the
divisor, the count of its rows not ignored (or the sum of their targets' weights), which each warp of the forward
adds up in one order (kernels/row_split.py's partial sums) before its first row.

Forward, for each row of logits x with target class t (a block, or a cluster of blocks, a row; kernels/row_split.py):
the target is read first (a row ahead); an ignored row (t == ignore_index, and the rows past the last) reads no
logits, stores a zero gradient and a zero loss (0 / divisor for "mean": NaN where every row is ignored, as torch's 0 /
0). Otherwise: x (fp32, -inf past the row's end; x[t] and w[t] read as scalars, from L1/L2, in flight meanwhile) -> m
= the row's max -> (smoothing: each warp's sum of x, or of w x) -> e = exp(x - m) in place (as exp2(x log2 e - m
log2 e)) -> others = the sum of e but e[t] (and sum x) over the row -> s = others + e[t], lse = m + log(s). With n =
share w[t] (share: 1, or 1 / the mean's divisor, a device scalar; w[t] 1 without weights; NaN for a target outside 0..V-1)
and q = share eps / V: loss = (1 - eps) n (lse - x[t]) + q (W lse - sum_j w_j x_j) (W = sum w, or V and sum x without
weights), gradient = e a - q w with a = ((1 - eps) n + q W) / s, and at t less (1 - eps) n more, written as q W e[t] /
s - (1 - eps) n others / s - q w[t] (tk.index_fill: the one element of the piece holding t), whose digits hold where
p[t] is near 1 (e[t] a - n would cancel). Without smoothing: loss n (lse - x[t]), gradient e n / s, -n others / s at
t. Where a row spans warps, the max and the sums take one exchange: each warp's own max m_w, its sum of exp(x - m_w)
but at t (and its sum of x) merged (tk.block.merge_softmax / tk.cluster.merge_softmax) into m, others (and sum x),
each warp's e rescaled by exp(m_w - m) with the gradient's factor (an ignored row's warps meet too, keeping every
warp's count of exchanges the same: the reductions' buffers alternate by it).
The loss: "none" writes each row's in the logits' dtype; "mean" and "sum" add each block's rows' in loop order, write
the block's sum to its partial, and the last block to finish (tk.last_block) adds the partials in block order and
writes the loss in the logits' dtype (for the mean times 0 x share more: NaN over no rows, torch's 0 / 0).

Tensors a config does not have are 16-byte placeholders (kernels/row_split.py's) the body never reads.
"""
# (No `from __future__ import annotations`: the kernels' annotations use their factory's arguments.)
import functools
import math

import tkpy as tk
from tkpy import bf16, f32, fp16, i32, i64

from .cross_entropy_config import CrossEntropyConfig, GradScaleConfig, PrologueConfig
from . import row_split as split
from .row_split import block_partial, piece_place, piece_tasks, placeholder, row_sum, sum_partials

LN2 = math.log(2.0)
DTYPES = {"bf16": bf16, "fp16": fp16, "f32": f32}


@functools.cache
def prologue_kernel(c: PrologueConfig):
    """The forward's ticket zeroed; with c.count, each block's part of the mean's divisor (see the module's
    docstring). `span`: rows a block (a multiple of c.rows_a_step)."""
    wt = DTYPES[c.weight] if c.weight else f32

    # Without programmatic dependent launch: with it, between two launches of the forward with it, the mean's
    # forward took 65.7 us a call at 16384 x 4096 bf16, without it on either kernel 45.4-45.5 (RESULTS.md runs
    # 282-283; why, unexplained). The forward still overlaps its own launch with this kernel.
    @tk.kernel(warps=c.warps, name=c.name, dependent_launch=False)
    def cross_entropy_prologue(target: tk.gl[i64, "R"] if c.count else placeholder(i64),
                               weight: tk.gl[wt, "C"] if c.weight else placeholder(wt),
                               partials: tk.gl[f32, "P"] if c.count else placeholder(f32), ticket: tk.gl[i32, 1],
                               ignore_index: int, span: int):
        with tk.if_((tk.block_idx.x == 0) & (tk.warp_id() == 0)):
            tk.store(ticket, 0, (0,))
        if not c.count:
            return
        count = tk.var(0.0, "count")
        for step in tk.range(0, span, c.rows_a_step):
            row = tk.let(tk.block_idx.x * span + step + tk.warp_id() * c.unroll, "row")
            t = [tk.var(0, "t") for _ in range(c.unroll)]
            for u in range(c.unroll):                        # (in flight together; past the last row: ignored)
                tk.load(t[u], target, (row + u,), fill=ignore_index)
            if c.weight:                                     # (a target outside the classes: its loss is NaN)
                w = [tk.var(0.0, "w") for _ in range(c.unroll)]
                for u in range(c.unroll):
                    tk.load(w[u], weight, (tk.call("min", tk.call("max", t[u], 0), weight.cols - 1),))
            for u in range(c.unroll):
                with tk.if_(t[u] != ignore_index):
                    count += w[u] if c.weight else 1.0
        block_partial(partials, count)
    return cross_entropy_prologue


@functools.cache
def forward_kernel(c: CrossEntropyConfig):
    """loss, lse (and the gradient) of each row (see the module's docstring)."""
    dt, n, piece = DTYPES[c.dtype], c.width, c.piece
    wt = DTYPES[c.weight] if c.weight else f32
    rows = tk.gl[dt, "R", n]
    mean, weighted, reduced = c.reduction == "mean", c.weight is not None, c.reduction != "none"
    fill = 0.0 if c.smoothing else -math.inf          # past the row's end (smoothing: 0 for the sum of x, then -inf)

    @tk.kernel(**c.kernel_options(), name=c.name)
    def cross_entropy_forward(logits: rows, target: tk.gl[i64, "R"],
                              weight: tk.gl[wt, n] if weighted else placeholder(wt),
                              divisor: tk.gl[f32, "Q"] if mean else placeholder(f32),
                              loss: tk.gl[dt, 1] if reduced else tk.gl[dt, "R"], lse: tk.gl[f32, "R"],
                              dlogits: rows if c.grad else placeholder(dt),
                              partials: tk.gl[f32, "P"] if reduced else placeholder(f32),
                              ticket: tk.gl[i32, 1] if reduced else placeholder(i32), ignore_index: int,
                              smoothing: float):
        part = tk.let(split.part_of(c), "part")
        first = tk.let(part * piece, "first")                # this piece's first column
        if reduced:
            rows_loss = tk.var(0.0, "rows_loss")              # this warp's rows' (its block's partial, over warps)
        if weighted and c.smoothing:                          # this warp's piece of the weights, for every row
            wv = tk.rv(wt, piece, "contig")
            tk.load(wv, weight, (part,), fill=0.0)
            weights = tk.let(row_sum(c, wv), "weights")      # W
        v = tk.rv(f32, piece, "contig")                       # the row's piece: x, then exp(x - m), then the gradient
        # The targets load a row ahead of their use (two with prefetch, whose logits load a row ahead): no load waits
        # on another just issued (rows past the last: ignored).
        t, t_next = tk.var(0, "t"), tk.var(0, "t_next")
        tk.load(t_next, target, (split.row_of(c, split.first_step(c)),), fill=ignore_index)
        if c.prefetch:
            ahead, t_after = tk.rv(dt, piece, "contig"), tk.var(0, "t_after")
            tk.load(t_after, target, (split.row_of(c, split.first_step(c) + split.stride(c)),), fill=ignore_index)
            _load_unless_ignored(ahead, logits, split.row_of(c, split.first_step(c)), part, t_next, ignore_index, fill)
        if c.stages:                   # the next rows through shared memory; an ignored row's read as nothing
            staged = split.StagedRows(c, (logits,), c.stages)
            firsts = [tk.var(0, "t_issued") for _ in range(c.stages)]
            for k, t_k in enumerate(firsts):
                tk.load(t_k, target, (split.row_of(c, split.first_step(c) + k * split.stride(c)),), fill=ignore_index)
            staged.start(part, [t_k == ignore_index for t_k in firsts])
            t_issue = tk.var(0, "t_issue")                   # the target of the row the next step issues
            tk.load(t_issue, target, (split.row_of(c, split.first_step(c) + c.stages * split.stride(c)),),
                    fill=ignore_index)
        if mean:                                             # (the first loads in flight meanwhile)
            share = tk.let(1.0 / sum_partials(divisor), "share")     # a row's share of the mean (inf for no rows)
        else:
            share = 1.0
        for step in split.steps(c, logits.rows):
            row = split.row_of(c, step)
            tk.assign(t, t_next)
            if c.prefetch:                                   # this row's logits were loaded a row ago
                with tk.if_(t != ignore_index):
                    tk.copy(v, ahead)
                tk.assign(t_next, t_after)
                _load_unless_ignored(ahead, logits, split.row_of(c, step + split.stride(c)), part, t_next,
                                     ignore_index, fill)
                tk.load(t_after, target, (split.row_of(c, step + 2 * split.stride(c)),), fill=ignore_index)
            else:
                tk.load(t_next, target, (split.row_of(c, step + split.stride(c)),), fill=ignore_index)
            if c.stages:                                     # (0 past the row's end: -inf for the max below)
                staged.take((v,), step, part, t_issue == ignore_index)
                tk.load(t_issue, target, (split.row_of(c, step + (c.stages + 1) * split.stride(c)),),
                        fill=ignore_index)
                if c.ragged and not c.smoothing:
                    tk.right_fill(v, v, n - first, -math.inf)
            with tk.if_(t == ignore_index):                  # (and the rows past the last): no logits read
                if c.pieces > 1 and c.rows_per_block > 1:
                    # The block's reductions alternate buffers by their count, the same in every warp at the
                    # loss's block sum: an ignored row's warps meet once, as a counted row's do.
                    split.scope(c).merge_softmax(-math.inf, 0.0, warps=c.warps_per_row)
                if c.grad:
                    tk.zero(v)
                    tk.store(dlogits, v, (row, part), masked=True)
                with tk.if_(part == 0):
                    if not reduced:
                        tk.store(loss, 0.0, (row,), masked=True)
                    tk.store(lse, 0.0, (row,), masked=True)
            with tk.else_():
                if not c.prefetch and not c.stages:
                    tk.load(v, logits, (row, part), fill=fill)
                xt = tk.var(0.0, "xt")                       # (from L1/L2, in flight through the reductions; a
                tk.load(xt, logits, (row, t), fill=0.0)      # target past the row: NaN below)
                if weighted:
                    wt_ = tk.var(0.0, "w_target")
                    tk.load(wt_, weight, (t,), fill=0.0)
                if c.smoothing:                              # each warp's sum of x (w x), 0 past the row's end
                    xs = tk.let(tk.sum(v * wv) if weighted else tk.sum(v), "xs")
                    if c.ragged:
                        tk.right_fill(v, v, n - first, -math.inf)
                # each warp's max and sums (and sum of x) merged in one exchange
                shift, others, rescale, *sum_x = _merged_statistics(c, v, t - first, (xs,) if c.smoothing else ())
                et = tk.let(tk.exp2(xt * tk.LOG2E - shift), "e_target")      # (as the piece's e[t])
                s = tk.let(others + et, "s")
                r = tk.let((shift + tk.log2(s)) * LN2, "r")         # m + log(s)
                ok = tk.var(1.0, "ok")                       # NaN for a target outside the classes
                with tk.if_((t < 0) | (t >= n)):
                    tk.assign(ok, math.nan)
                nll = tk.let(share * wt_ * ok if weighted else share * ok, "nll")     # the target term's weight
                if c.smoothing:
                    q = tk.let(share * smoothing * (1.0 / n) * ok, "q")               # the smoothing term's
                    total_w = weights if weighted else float(n)
                    value = (1.0 - smoothing) * nll * (r - xt) + q * (total_w * r - sum_x[0])
                else:
                    value = nll * (r - xt)
                with tk.if_(part == 0):
                    if reduced:
                        rows_loss += value
                    else:
                        tk.store(loss, value, (row,), masked=True)
                    tk.store(lse, r, (row,), masked=True)
                if c.grad:                                   # gradient = e a - q w, at t less (1 - eps) nll more
                    if c.smoothing:
                        a = ((1.0 - smoothing) * nll + q * total_w) / s
                    else:
                        a = nll / s
                    a = tk.let(a * rescale if rescale is not None else a, "a")    # (v: e to this warp's max)
                    # at t: e[t] a - (1 - eps) nll - q w[t] = q W e[t] / s - (1 - eps) nll others / s - q w[t]
                    if c.smoothing and weighted:
                        tk.map(v, lambda e, w: e * a - q * w, v, wv)
                        at_target = (q * total_w * et - (1.0 - smoothing) * nll * others) / s - q * wt_
                    elif c.smoothing:
                        tk.map(v, lambda e: e * a - q, v)
                        at_target = (q * total_w * et - (1.0 - smoothing) * nll * others) / s - q
                    else:
                        tk.mul(v, v, a)
                        at_target = -nll * others / s
                    tk.index_fill(v, v, t - first, at_target)
                    tk.store(dlogits, v, (row, part), masked=True)
        if reduced:                                          # the block's partial; the last block's sum of them
            block_partial(partials, rows_loss)
            with tk.last_block(ticket):
                total = sum_partials(partials)
                tk.store(loss, total + 0.0 * share if mean else total, (0,))
    return cross_entropy_forward


def _merged_statistics(c: CrossEntropyConfig, v, target_col, sums: tuple = ()):
    """(m log2 e, the sum of exp(x - m) over the row but at the target, the factor that takes v to exp(x - m), and
    `sums`' totals over the row) for the row's max m, with v's x replaced by each warp's own exp(x - m_w) (0 at the
    target): each warp's max, sum and `sums` (float scalars: smoothing's sum of x) merged in one exchange
    (tk.block.merge_softmax / tk.cluster.merge_softmax), where the max and then the sums took two. The factor is None
    for a row in one warp (m_w is m)."""
    m = tk.amax(v)
    local = tk.let(tk.call("max", m * tk.LOG2E, -tk.FLT_MAX), "local_shift")   # (a piece of -inf only: e = 0)
    tk.map(v, lambda x: tk.exp2(x * tk.LOG2E - local), v)
    tk.index_fill(v, v, target_col, 0.0)         # (e[t] left out: 1 - p[t] = others / s keeps its digits)
    if c.pieces == 1:
        return (local, tk.sum(v), None, *sums)
    top, others, *totals = split.scope(c).merge_softmax(m, tk.sum(v), *sums, warps=c.warps_per_row)
    shift = tk.let(top * tk.LOG2E, "shift")
    return (shift, others, tk.let(tk.exp2(local - shift), "rescale"), *totals)


def _load_unless_ignored(v, logits, row, part, t, ignore_index, fill):
    """The row's piece, unless its target `t` says it is ignored (then nothing is read)."""
    with tk.if_(t != ignore_index):
        tk.load(v, logits, (row, part), fill=fill)


@functools.cache
def backward_kernel(c: GradScaleConfig):
    """grad *= factor (one for all rows, or one a row), in place; rows whose factor is exactly 1 are not touched."""
    dt, n, ft = DTYPES[c.dtype], c.width, DTYPES[c.factor]

    @tk.kernel(warps=c.warps, blocks_per_sm=c.blocks_per_sm, name=c.name)
    def cross_entropy_backward(grad: tk.gl[dt, "R", n], factor: tk.gl[ft, "R"] if c.per_row else tk.gl[ft, 1]):
        f = tk.var(0.0, "f")
        v = tk.rv(f32, c.piece, "contig")

        def scale(row, part):
            tk.load(v, grad, (row, part), fill=0.0)
            tk.mul(v, v, f)
            tk.store(grad, v, (row, part), masked=True)

        if c.per_row:
            for task in piece_tasks(c, grad.rows):
                row, part = piece_place(c, task)
                tk.load(f, factor, (row,))
                with tk.if_(f != 1.0):
                    scale(row, part)
        else:
            tk.load(f, factor, (0,))
            with tk.if_(f != 1.0):                           # (1: the whole grid returns at once)
                for task in piece_tasks(c, grad.rows):
                    scale(*piece_place(c, task))
    return cross_entropy_backward
