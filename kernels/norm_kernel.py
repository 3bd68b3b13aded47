"""The bodies of the norm kernels (rms_norm, layer_norm; kernels/norms.py is the API): forward, backward, and the
column sums that finish the weight's and bias's gradients.

A row lies in registers, split into pieces over warps and blocks (kernels/row_split.py: a contig vector of `piece`
fp32 values a warp, 16-byte copies), the blocks (clusters) looping over the row groups, a persistent grid; rows past
the last and elements past a row's end load as 0 and are not stored. A row's sums reduce over its warps with
tk.block.sum (tk.cluster.sum when it spans blocks), one barrier (or semaphore wait) a reduction; the statistics
(mean, rstd) are fp32 runtime scalars, stored once a row.

Forward: h = x (+ residual, rounded to the dtype: residual_out); rms: rstd = rsqrt(mean(h^2) + eps), y = h rstd w;
layer: mean, then var = mean((h - mean)^2) from the registers (two passes over them, one over memory), y = (h -
mean) rstd w + b. Backward, from h, dy, the saved statistics: xhat = (h - mean) rstd, g = dy w;
rms: dx = rstd (g - xhat mean(g xhat)); layer: dx = rstd (g - mean(g) - xhat mean(g xhat)) (+ the gradient of
residual_out); each warp adds dy xhat (and dy) of its rows into registers (`sums_in_shared`: into shared memory,
WeightSums), and writes them once, after its last row, into a row of an fp32 workspace (one row per row group of
the grid), which column_sums adds up in one launch for the weight and the bias (blocks on every SM, each a slice of
the workspace's rows, the last of a column's adding the slices' sums): no second pass over the rows.

`stage` (both directions): each warp's pieces of the row through shared memory instead (row_split.SharedPieces),
a chunk of each in registers at a time, so that more blocks an SM keep their rows' bytes in flight.

Tensors a config does not have are 16-byte placeholders (kernels/row_split.py's) the body never reads.
"""
# (No `from __future__ import annotations`: the kernels' annotations use their factory's arguments.)
import functools

import tkpy as tk
from tkpy import bf16, f32, fp16, i32

from . import row_split as split
from .norm_config import NormConfig
from .row_split import CHUNK, placeholder

DTYPES = {"bf16": bf16, "fp16": fp16, "f32": f32}
SUM_WARPS = 8                         # column_sums: warps a block (256 columns of a slice of the rows), each adding
SUM_UNROLL = 4                        # rows, this many a step, their loads in flight together


@functools.cache
def forward_kernel(c: NormConfig):
    """y (and residual_out, mean, rstd) of rows of x (+ residual)."""
    dt, n, piece = DTYPES[c.dtype], c.width, c.piece
    wt = DTYPES[c.weight] if c.weight else dt
    res = tk.gl[dt, "R", n] if c.residual else placeholder(dt)
    stat = tk.gl[f32, "R"]
    layer = c.kind == "layer"

    @tk.kernel(**c.kernel_options(), name=c.name)
    def norm_forward(x: tk.gl[dt, "R", n], residual: res, weight: tk.gl[wt, n] if c.weight else placeholder(wt),
                     bias: tk.gl[wt, n] if c.bias else placeholder(wt), y: tk.gl[dt, "R", n], residual_out: res,
                     mean: stat if layer else placeholder(f32), rstd: stat, eps: float):
        part = tk.let(split.part_of(c), "part")
        if c.stage:                                          # the row's pieces in shared memory, a chunk in registers
            _staged_forward(c, (x, residual, weight, bias, y, residual_out, mean, rstd), eps, part)
            return
        v = tk.rv(f32, piece, "contig")                       # the row's piece: h, then h - mean, then y
        h = tk.rv(dt, piece, "contig") if c.residual else None  # x + residual, rounded as residual_out is
        w = b = None
        if c.weight:                                         # (16-bit ones in packed pairs)
            w = tk.rv(wt, piece, "contig")
            b = tk.rv(wt, piece, "contig") if c.bias else None
            if c.weight_in_registers:
                _load_affine(c, w, b, weight, bias, part)
        if c.prefetch:
            ahead, ahead_res = tk.rv(dt, piece, "contig"), tk.rv(dt, piece, "contig") if c.residual else None
            _load_row(c, ahead, ahead_res, x, residual, split.row_of(c, split.first_step(c)), part)
        if c.stages:                                         # the next rows through shared memory instead
            staged = split.StagedRows(c, (x, residual) if c.residual else (x,), c.stages)
            staged.start(part)
        for step in split.steps(c, x.rows):
            row = split.row_of(c, step)
            if c.stages:
                staged.take((v, h) if c.residual else (v,), step, part)
                if c.residual:
                    tk.add(h, h, v)
            elif c.prefetch:                                 # this row's loads were issued a row ago
                if c.residual:
                    tk.add(h, ahead, ahead_res)
                else:
                    tk.copy(v, ahead)
                _load_row(c, ahead, ahead_res, x, residual, split.row_of(c, step + split.stride(c)), part)
            else:
                tk.load(v, x, (row, part), fill=0.0)
                if c.residual:
                    tk.load(h, residual, (row, part), fill=0.0)
                    tk.add(h, h, v)
            if c.residual:
                tk.store(residual_out, h, (row, part), masked=True)
                tk.copy(v, h)
            shift = None                                     # (merged: v - shift is x - mean)
            if layer and c.pieces > 1:                       # the mean and the centred sum in one exchange
                mu, squares, shift = _merged_moments(c, v, part)
            elif layer:
                mu = tk.let(split.row_sum(c, v) * (1.0 / n), "mu")
                tk.sub(v, v, mu)
                if c.ragged:                                 # (elements past the row's end: 0 - mu)
                    tk.right_fill(v, v, n - part * piece, 0.0)
                squares = tk.sum(v * v)
            else:
                squares = split.row_sum(c, v * v)
            r = tk.let(tk.rsqrt(squares * (1.0 / n) + eps), "r")
            if shift is not None:                            # (v - shift) r as one FFMA
                shift_r = tk.let(shift * r, "shift_r")
                normed = lambda v: v * r - shift_r  # noqa: E731
            else:
                normed = lambda v: v * r  # noqa: E731
            if c.weight and not c.weight_in_registers:
                _load_affine(c, w, b, weight, bias, part)
            _normalized(c, v, v, normed, w, b)
            tk.store(y, v, (row, part), masked=True)
            _store_statistics(c, rstd, mean, r, mu if layer else None, row, part)
    return norm_forward


def _normalized(c: NormConfig, dst, src, normed, w, b) -> None:
    """dst = normed(src) times the weight plus the bias, as the config has them."""
    if c.bias:
        tk.map(dst, lambda v, w_, b_: normed(v) * w_ + b_, src, w, b)
    elif c.weight:
        tk.map(dst, lambda v, w_: normed(v) * w_, src, w)
    else:
        tk.map(dst, normed, src)


def _store_statistics(c: NormConfig, rstd, mean, r, mu, row, part) -> None:
    with tk.if_(part == 0):                                  # one warp a row writes its statistics
        tk.store(rstd, r, (row,), masked=True)
        if c.kind == "layer":
            tk.store(mean, mu, (row,), masked=True)


def _staged_forward(c: NormConfig, tensors, eps, part) -> None:
    """The forward with each warp's pieces of x (and the residual) in shared memory (row_split.SharedPieces), read a
    chunk at a time in loops: h = x + residual written out and kept there, the statistics (rms: the sum of squares;
    layer: the piece's sum, then its squared deviations from the piece's mean, merged over the row as
    _merged_moments does), then y with the weight's (bias's) chunk from L1/L2."""
    x, residual, weight, bias, y, residual_out, mean, rstd = tensors
    dt, n = DTYPES[c.dtype], c.width
    wt = DTYPES[c.weight] if c.weight else dt
    layer = c.kind == "layer"
    pieces = split.SharedPieces(c, (x, residual) if c.residual else (x,))        # x's (then h's), the residual's
    held, held_res = tk.rv(dt, CHUNK, "contig", name="held"), tk.rv(dt, CHUNK, "contig", name="held_res")
    acc = tk.rv(f32, CHUNK, "contig", name="acc")             # the sums, then a chunk of y
    deviation = tk.rv(f32, CHUNK, "contig", name="deviation") if layer else None      # h - the piece's mean
    w = tk.rv(wt, CHUNK, "contig", name="w") if c.weight else None
    b = tk.rv(wt, CHUNK, "contig", name="b") if c.bias else None
    for step in split.steps(c, x.rows):
        row = split.row_of(c, step)
        pieces.load(row, part)                               # (0 past the rows and the row's end)
        if c.residual:                                       # (each lane rewrites the elements it reads)
            for k in tk.range(pieces.segments):
                tk.load(held, pieces.chunk(0, k))
                tk.load(held_res, pieces.chunk(1, k))
                tk.add(held, held, held_res)
                tk.store(residual_out, held, (row, pieces.col(part, k)), masked=True)
                tk.store(pieces.chunk(0, k), held)
        tk.zero(acc)
        for k in tk.range(pieces.segments):
            tk.load(held, pieces.chunk(0, k))
            if layer:
                tk.map(acc, lambda a, h: a + h, acc, held)
            else:
                tk.map(acc, lambda a, h: a + h * h, acc, held)
        if layer:
            count, total, local = _piece_mean(c, tk.sum(acc), part)
            tk.zero(acc)
            for k in tk.range(pieces.segments):              # the squared deviations, 0 past the row's end
                tk.load(held, pieces.chunk(0, k))
                tk.map(deviation, lambda h: h - local, held)
                if c.ragged:
                    tk.right_fill(deviation, deviation, n - pieces.col(part, k) * CHUNK, 0.0)
                tk.map(acc, lambda a, d: a + d * d, acc, deviation)
            if c.pieces > 1:
                mu, squares = split.scope(c).merge_variance(total, tk.sum(acc), count, warps=c.warps_per_row)
                mu = tk.let(mu, "mu")
            else:
                mu, squares = local, tk.sum(acc)
        else:
            squares = split.row_sum(c, acc)
        r = tk.let(tk.rsqrt(squares * (1.0 / n) + eps), "r")
        shift_r = tk.let(mu * r, "shift_r") if layer else None

        def normed(h):
            return h * r - shift_r if layer else h * r
        for k in tk.range(pieces.segments):
            col = pieces.col(part, k)
            tk.load(held, pieces.chunk(0, k))
            if c.weight:
                _load_affine(c, w, b, weight, bias, col)
            _normalized(c, acc, held, normed, w, b)
            tk.store(y, acc, (row, col), masked=True)
        _store_statistics(c, rstd, mean, r, mu if layer else None, row, part)


def _piece_mean(c: NormConfig, total, part) -> tuple:
    """(elements, sum, mean) of this warp's piece of the row, whose sum is `total`."""
    if c.ragged:                                     # (a piece past the row's end holds fewer, or none)
        count = tk.let(tk.call("min", tk.call("max", c.width - part * c.piece, 0), c.piece) * 1.0, "count")
    else:
        count = float(c.piece)
    total = tk.let(total, "piece_total")
    return count, total, tk.let(total / tk.call("max", count, 1.0), "piece_mean")


def _merged_moments(c: NormConfig, v, part):
    """(the row's mean, the sum over the row of (x - mean)^2, shift), v becoming x - the piece's own mean (x - mean =
    v - shift): each warp's sum and sum of squared deviations from its own mean merged in one exchange
    (tk.block.merge_variance / tk.cluster.merge_variance, Chan's) where the mean and then the centred sum took two."""
    n, piece = c.width, c.piece
    count, total, local = _piece_mean(c, tk.sum(v), part)
    tk.sub(v, v, local)
    if c.ragged:                                     # (elements past the row's end: 0 - the piece's mean)
        tk.right_fill(v, v, n - part * piece, 0.0)
    mu, squares = split.scope(c).merge_variance(total, tk.sum(v * v), count, warps=c.warps_per_row)
    return tk.let(mu, "mu"), squares, tk.let(mu - local, "shift")


def _load_row(c: NormConfig, v, r, x, residual, row, part):
    tk.load(v, x, (row, part), fill=0.0)
    if c.residual:
        tk.load(r, residual, (row, part), fill=0.0)


def _load_affine(c: NormConfig, w, b, weight, bias, index):
    """The weight's (and bias's) vector `index` (in w's lengths: a warp's piece, or a chunk of it)."""
    tk.load(w, weight, (index,), fill=0.0)
    if c.bias:
        tk.load(b, bias, (index,), fill=0.0)


@functools.cache
def backward_kernel(c: NormConfig):
    """dx (+ the gradient of residual_out) and the weight's (bias's) partial sums, one workspace row per row group
    of the grid (cluster_index * rows_per_block + the group's place in the block); block 0 zeroes column_sums'
    ticket."""
    dt, n, piece = DTYPES[c.dtype], c.width, c.piece
    wt = DTYPES[c.weight] if c.weight else dt
    layer = c.kind == "layer"
    rows = tk.gl[dt, "R", n]
    partials = tk.gl[f32, "P", n]

    @tk.kernel(**c.kernel_options(), name=c.name)
    def norm_backward(dy: rows, dres: rows if c.residual else placeholder(dt), x: rows,
                      weight: tk.gl[wt, n] if c.weight else placeholder(wt),
                      mean: tk.gl[f32, "R"] if layer else placeholder(f32), rstd: tk.gl[f32, "R"], dx: rows,
                      dweight: partials if c.weight else placeholder(f32),
                      dbias: partials if c.bias else placeholder(f32),
                      ticket: tk.gl[i32, "C"] if c.weight else placeholder(i32)):
        part = tk.let(split.part_of(c), "part")
        if c.weight:                                         # column_sums' counters, 0 before it runs
            with tk.if_((tk.block_idx.x == 0) & (tk.warp_id() == 0)):
                for i in tk.range(0, ticket.cols):
                    tk.store(ticket, 0, (i,))
        if c.stage:                                          # the row's pieces in shared memory, a chunk in registers
            _staged_backward(c, (dy, dres, x, weight, mean, rstd, dx, dweight, dbias), part)
            return
        xhat, g = tk.rv(f32, piece, "contig"), tk.rv(f32, piece, "contig")
        d = tk.rv(dt, piece, "contig") if c.residual else None          # residual_out's gradient (packed pairs)
        if c.weight:
            w, sums = tk.rv(wt, piece, "contig"), WeightSums(c, piece, 1)
            if c.weight_in_registers:
                tk.load(w, weight, (part,), fill=0.0)
        if c.prefetch:                                       # the next row's x and dy, in flight a row ahead
            ahead = [tk.rv(dt, piece, "contig", name=f"ahead_{t}") for t in ("x", "dy")]
            first = split.row_of(c, split.first_step(c))
            tk.load(ahead[0], x, (first, part), fill=0.0)
            tk.load(ahead[1], dy, (first, part), fill=0.0)
        if c.stages:                                         # ... or the next rows', through shared memory
            staged = split.StagedRows(c, (x, dy), c.stages)
            staged.start(part)
        stats = RowStatistics(c, rstd, mean)
        for step in split.steps(c, x.rows):
            row = split.row_of(c, step)
            if c.residual:                                   # (issued first: in flight through the reduction)
                tk.load(d, dres, (row, part), fill=0.0)
            if c.stages:
                staged.take((xhat, g), step, part)
            elif c.prefetch:
                tk.copy(xhat, ahead[0])
                tk.copy(g, ahead[1])
                following = split.row_of(c, step + split.stride(c))
                tk.load(ahead[0], x, (following, part), fill=0.0)
                tk.load(ahead[1], dy, (following, part), fill=0.0)
            else:
                tk.load(xhat, x, (row, part), fill=0.0)
                tk.load(g, dy, (row, part), fill=0.0)        # (0 past the rows and the row's end: adds nothing)
            r, mu = stats.take(step, row)
            if layer:
                tk.map(xhat, lambda x: (x - mu) * r, xhat)
            else:
                tk.mul(xhat, xhat, r)
            if c.weight:
                sums.add(0, g, xhat)
                if not c.weight_in_registers:
                    tk.load(w, weight, (part,), fill=0.0)
                tk.mul(g, g, w)                              # the gradient of xhat
            if layer:
                gx, gs = split.row_sum(c, g * xhat, g)
                a, s = tk.let(gx * (1.0 / n), "a"), tk.let(gs * (1.0 / n), "s")
                tk.map(g, lambda g, x: (g - x * a - s) * r, g, xhat)
            else:
                a = tk.let(split.row_sum(c, g * xhat) * (1.0 / n), "a")
                tk.map(g, lambda g, x: (g - x * a) * r, g, xhat)
            if c.residual:
                tk.add(g, g, d)
            tk.store(dx, g, (row, part), masked=True)
        if c.weight:
            sums.store((dweight, dbias), lambda k: part)
    return norm_backward


class RowStatistics:
    """The saved rstd (and layer norm's mean) of this warp's row, loaded at its step, or with `stats_ahead` the next
    row's a step ahead (where the row's x and dy were in flight rows ahead, its statistics' load would otherwise
    stand alone at the step's start)."""

    def __init__(self, c: NormConfig, rstd, mean):
        self.c, self.tensors = c, (rstd, mean) if c.kind == "layer" else (rstd,)
        if c.stats_ahead:
            self.ahead = [tk.var(0.0, f"{n}_ahead") for n in ("r", "mu")[:len(self.tensors)]]
            self._load(self.ahead, split.row_of(c, split.first_step(c)))

    def _load(self, values, row) -> None:
        for v, t in zip(values, self.tensors):
            tk.load(v, t, (row,), fill=0.0)

    def take(self, step, row) -> tuple:
        """(r, mu: None for rms) of this step's row."""
        values = [tk.var(0.0, n) for n in ("r", "mu")[:len(self.tensors)]]
        if self.c.stats_ahead:
            for v, a in zip(values, self.ahead):
                tk.assign(v, a)
            self._load(self.ahead, split.row_of(self.c, step + split.stride(self.c)))
        else:
            self._load(values, row)
        return values[0], values[1] if len(values) == 2 else None


class WeightSums:
    """This warp's partial sums of the weight's gradient, dy xhat (and the bias's, dy), over its rows: fp32 vectors
    of `length` values in `segments` pieces, in registers, or with `sums_in_shared` in shared memory (tk.store /
    tk.map / tk.load private=True: each lane its own values, no barrier, no bank conflicts, updated four at a time),
    which leaves their registers to more values a lane or more blocks an SM. `store` writes them after the last
    row into the workspace row of this warp's row group of the grid."""

    def __init__(self, c: NormConfig, length: int, segments: int):
        self.c, self.tensors, self.segments = c, 2 if c.bias else 1, segments
        names = ("dw", "db")[:self.tensors]
        if c.sums_in_shared:
            self.slots = tk.sv(f32, length, count=c.warps * self.tensors * segments, name="weight_sums")
            self.base = tk.let(tk.warp_id() * self.tensors * segments, "sums_base")
            self.held = [tk.rv(f32, length, "contig", name=n) for n in names]
            for t, held in enumerate(self.held):
                tk.zero(held)
                for k in range(segments):
                    tk.store(self._slot(t, k), held, private=True)
        else:
            self.regs = [[tk.rv(f32, length, "contig", name=n if segments == 1 else f"{n}_{k}")
                          for k in range(segments)] for n in names]
            for v in (v for regs in self.regs for v in regs):
                tk.zero(v)

    def _slot(self, t: int, k: int):
        return self.slots[self.base + t * self.segments + k]

    def _update(self, t: int, k: int, fn, *args) -> None:
        """Tensor t's segment k = fn(itself, *args), in registers or in shared memory (four values at a time)."""
        if self.c.sums_in_shared:
            tk.map(self._slot(t, k), fn, self._slot(t, k), *args, private=True)
        else:
            tk.map(self.regs[t][k], fn, self.regs[t][k], *args)

    def add(self, k: int, g, xhat) -> None:
        """Segment k's sums plus this row's: g xhat (and g), g the row's dy."""
        self._update(0, k, lambda a, g, x: a + g * x, g, xhat)
        if self.tensors == 2:
            self._update(1, k, lambda a, g: a + g, g)

    def store(self, outs: tuple, col_of) -> None:
        """Into the workspaces `outs` (the weight's, the bias's), segment k at column col_of(k) (in pieces of the
        segment's length)."""
        slot = tk.let(split.first_step(self.c) * self.c.rows_per_block + tk.warp_id() // self.c.warps_per_row,
                      "slot")
        for k in range(self.segments):
            for t in range(self.tensors):
                if self.c.sums_in_shared:
                    tk.load(self.held[t], self._slot(t, k), private=True)
                    value = self.held[t]
                else:
                    value = self.regs[t][k]
                tk.store(outs[t], value, (slot, col_of(k)), masked=True)


def _staged_backward(c: NormConfig, tensors, part) -> None:
    """The backward with each warp's pieces of x and dy (and residual_out's gradient) in shared memory
    (row_split.SharedPieces), read a chunk at a time twice: first the weight's (bias's) partial sums and the row's
    sums of the gradient of xhat (times xhat), then dx. The weight's chunks come from L1/L2; the chunk loops are
    unrolled, so that each chunk of the partial sums has registers of its own."""
    dy, dres, x, weight, mean, rstd, dx, dweight, dbias = tensors
    dt, n = DTYPES[c.dtype], c.width
    wt = DTYPES[c.weight] if c.weight else dt
    layer = c.kind == "layer"
    pieces = split.SharedPieces(c, (x, dy, dres) if c.residual else (x, dy))
    chunks = range(pieces.segments)
    held = tk.rv(dt, CHUNK, "contig", name="held")
    xhat, g = tk.rv(f32, CHUNK, "contig", name="xhat"), tk.rv(f32, CHUNK, "contig", name="g")
    sum_gx = tk.rv(f32, CHUNK, "contig", name="sum_gx")        # the row's sums of g * xhat (and of g) so far
    sum_g = tk.rv(f32, CHUNK, "contig", name="sum_g") if layer else None
    w = tk.rv(wt, CHUNK, "contig", name="w") if c.weight else None
    sums = WeightSums(c, CHUNK, pieces.segments) if c.weight else None

    def chunk_grads(k, r, mu, unweighted=None) -> None:
        """xhat and g of chunk k: dy, then (with the weight) the gradient of xhat; `unweighted(k)` runs between."""
        tk.load(held, pieces.chunk(0, k))
        if layer:
            tk.map(xhat, lambda h: (h - mu) * r, held)
        else:
            tk.map(xhat, lambda h: h * r, held)
        tk.load(held, pieces.chunk(1, k))
        tk.copy(g, held)
        if unweighted:
            unweighted(k)
        if c.weight:
            tk.load(w, weight, (pieces.col(part, k),), fill=0.0)
            tk.mul(g, g, w)

    stats = RowStatistics(c, rstd, mean)
    for step in split.steps(c, x.rows):
        row = split.row_of(c, step)
        pieces.start(row, part)                              # (0 past the rows and the row's end)
        r, mu = stats.take(step, row)
        pieces.wait()
        tk.zero(sum_gx)
        if layer:
            tk.zero(sum_g)
        for k in chunks:
            chunk_grads(k, r, mu, (lambda k: sums.add(k, g, xhat)) if c.weight else None)
            tk.map(sum_gx, lambda a, g, x: a + g * x, sum_gx, g, xhat)
            if layer:
                tk.add(sum_g, sum_g, g)
        if layer:
            gx, gs = split.row_sum(c, sum_gx, sum_g)
            a, s = tk.let(gx * (1.0 / n), "a"), tk.let(gs * (1.0 / n), "s")
        else:
            a, s = tk.let(split.row_sum(c, sum_gx) * (1.0 / n), "a"), None
        for k in chunks:
            chunk_grads(k, r, mu)
            if layer:
                tk.map(g, lambda g, x: (g - x * a - s) * r, g, xhat)
            else:
                tk.map(g, lambda g, x: (g - x * a) * r, g, xhat)
            if c.residual:
                tk.load(held, pieces.chunk(2, k))
                tk.add(g, g, held)
            tk.store(dx, g, (row, pieces.col(part, k)), masked=True)
    if c.weight:
        sums.store((dweight, dbias), lambda k: pieces.col(part, k))


@functools.cache
def column_sums_kernel(width: int, out_dtype: str, tensors: int, sliced: bool):
    """out[t][j] = sum over rows i of partials[t, i, j] (fp32, written as out_dtype) for each of the `tensors` (the
    weight's and the bias's gradients from the backward's partial sums, one launch; out_bias a placeholder for one). A
    block (x: 256 columns, y: a slice of the rows, z: the tensor) adds rows y, y + S, y + 2 S, ... (S = the grid's y,
    slices), its warps every SUM_WARPS-th of those, SUM_UNROLL loads in flight a warp; they meet in shared memory, where
    warp 0 adds their sums in order. `sliced` (S > 1, so that the rows are read by blocks on every SM, not by one block
    a 256 columns on a few: a narrow row's backward leaves thousands of partial rows): each block writes its sum into
    row y of `second`, and the last of a column chunk's S blocks to finish (tk.last_block, its warps together) adds the
    S sums in order. The same bits every run. `ticket` (T x the chunks int32 counters) must be 0: the backward zeroes
    it."""
    ot = DTYPES[out_dtype]
    chunks = -(-width // CHUNK)

    name = f"norm_column_sums_{width}_{out_dtype}_t{tensors}" + ("_sliced" if sliced else "")

    @tk.kernel(warps=SUM_WARPS, name=name)
    def norm_column_sums(partials: tk.gl[f32, tensors, "P", width], out_weight: tk.gl[ot, width],
                         out_bias: tk.gl[ot, width] if tensors == 2 else placeholder(ot),
                         second: tk.gl[f32, tensors, "S", width] if sliced else placeholder(f32),
                         ticket: tk.gl[i32, "C"] if sliced else placeholder(i32)):
        col, part, tensor = tk.block_idx.x, tk.block_idx.y, tk.block_idx.z
        slices = tk.grid_dim.y
        acc = tk.rv(f32, CHUNK, "contig")
        t = [tk.rv(f32, CHUNK, "contig", name=f"t{u}") for u in range(SUM_UNROLL)]
        sums = tk.sv(f32, CHUNK, count=SUM_WARPS)
        bias_out = out_bias if tensors == 2 else None
        _add_rows(acc, t, sums, partials, tensor, col, part, slices, tk.cdiv(partials.rows, slices))
        with tk.if_(tk.warp_id() == 0):
            if sliced:
                tk.store(second, acc, (tensor, part, col), masked=True)
            else:
                _store_out(out_weight, bias_out, acc, tensor, col)
        if sliced:
            with tk.last_block(ticket, tensor * chunks + col, arrivals=slices, whole_block=True):
                _add_rows(acc, t, sums, second, tensor, col, 0, 1, slices)
                with tk.if_(tk.warp_id() == 0):
                    _store_out(out_weight, bias_out, acc, tensor, col)
    return norm_column_sums


def _add_rows(acc, t, sums, g, tensor, col, first, stride, count) -> None:
    """acc of warp 0 = the sum of rows first, first + stride, ... (count of them; 0 past g's rows) of g's tensor
    `tensor`, column chunk `col`: each warp every SUM_WARPS-th row, SUM_UNROLL loads in flight together (the
    vectors t), the warps' sums added in warp order (sums: their shared slots)."""
    tk.zero(acc)
    for step in tk.range(0, tk.cdiv(count, SUM_WARPS * SUM_UNROLL)):
        for u in range(SUM_UNROLL):                          # (the loads first: in flight together)
            i = (step * SUM_UNROLL + u) * SUM_WARPS + tk.warp_id()
            tk.load(t[u], g, (tensor, first + i * stride, col), fill=0.0)
        for u in range(SUM_UNROLL):
            tk.add(acc, acc, t[u])
    _block_sum(acc, t[0], sums)


def _store_out(out_weight, out_bias, acc, tensor, col) -> None:
    """The sum of the weight's (tensor 0) or the bias's (1; None: none) gradient."""
    if out_bias is None:
        tk.store(out_weight, acc, (col,), masked=True)
        return
    with tk.if_(tensor == 0):
        tk.store(out_weight, acc, (col,), masked=True)
    with tk.else_():
        tk.store(out_bias, acc, (col,), masked=True)


def _block_sum(acc, scratch, sums) -> None:
    """acc of warp 0 = the sum of every warp's acc, added in warp order (one block barrier)."""
    tk.store(sums[tk.warp_id()], acc)
    tk.sync()
    with tk.if_(tk.warp_id() == 0):
        for i in range(1, SUM_WARPS):
            tk.load(scratch, sums[i])
            tk.add(acc, acc, scratch)
