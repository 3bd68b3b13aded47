"""The bodies of the softmax kernels over rows split across warps, blocks and clusters (kernels/softmax_op.py is the
API; the narrow rows' tile kernels are kernels/row_softmax.py's): forward and backward, one pass over memory each.

A row lies on chip, split into pieces (kernels/row_split.py: a contig vector a warp, 16-byte copies, the blocks of
a persistent grid looping over the row groups). Forward: each warp's piece (fp32; -inf past the row's end) gives its
max m and exponentials e = exp(x - m), summed to s; the (m, s) of a row's warps (and blocks) merge in one exchange
(tk.block.merge_softmax, tk.cluster.merge_softmax: over distributed shared memory) into the row's max M and sum S,
and y = e * exp(m - M) / S: one read of x, one exponential an element, one write of y. Backward: dx = y * (dy - s),
s = rowsum(dy * y): y and dy held in their dtype (16-bit ones as packed pairs), the products summed in fp32 over the
row (one reduction), dx computed in fp32 and rounded once; a warp's piece as vectors of a chunk each, so that the
fp32 products take one chunk's registers. With `stage`, y goes into shared memory by cp.async (no registers on the
way) and is read from there a chunk at a time, dy alone staying in registers: rows of 262144 fp32 elements hold 128 KB
of each an SM; with `stage_dy` dy too (read twice a chunk at a time), and in the forward x (read three times: the max,
the sum, y): a block holding a chunk in registers. With `packed`, rows of 8 to 128 elements lie several to a warp's
piece (a kernel row of packed x width elements), each one's max and sums taken over its own lanes (tk.segment_max,
tk.segment_sum: vectors, no scalars).
"""
# (No `from __future__ import annotations`: the kernels' annotations use their factory's arguments.)
import functools
import math

import tkpy as tk
from tkpy import bf16, f32, fp16

from . import row_split as split
from .row_split import CHUNK
from .softmax_config import SoftmaxConfig

DTYPES = {"bf16": bf16, "fp16": fp16, "f32": f32}


@functools.cache
def forward_kernel(c: SoftmaxConfig):
    """y = softmax(x) over rows of c.width elements (packed: c.packed of them a kernel row)."""
    dt, piece = DTYPES[c.dtype], c.piece
    rows = tk.gl[dt, "R", c.packed_width]

    @tk.kernel(**c.kernel_options(), name=c.name)
    def softmax_forward(x: rows, y: rows):
        part = tk.let(split.part_of(c), "part")
        if c.stage:                                           # the piece in shared memory, a chunk in registers
            _staged_forward(c, x, y, part)
            return
        v = tk.rv(f32, piece, "contig")                       # the row's piece: x, then e, then y
        if c.packed:                                          # each row's max, then its sum, in each of its elements
            stats = tk.rv(f32, piece, "contig", name="stats")
        if c.prefetch:                                        # the next row's x, in flight a row ahead
            ahead = tk.rv(dt, piece, "contig")
            tk.load(ahead, x, (split.row_of(c, split.first_step(c)), part), fill=-math.inf)
        if c.stages:                                          # the next rows through shared memory instead
            staged = split.StagedRows(c, (x,), c.stages)
            staged.start(part)
        for step in split.steps(c, x.rows):
            row = split.row_of(c, step)
            if c.stages:                                      # (0 past the row's end: -inf for the max)
                staged.take((v,), step, part)
                if c.ragged:
                    tk.right_fill(v, v, c.width - part * piece, -math.inf)
            elif c.prefetch:
                tk.copy(v, ahead)
                tk.load(ahead, x, (split.row_of(c, step + split.stride(c)), part), fill=-math.inf)
            else:
                tk.load(v, x, (row, part), fill=-math.inf)
            if c.packed:
                _packed_rows_softmax(v, stats, c.width)
            else:
                m = tk.amax(v)
                shift = tk.let(tk.call("max", m * tk.LOG2E, -tk.FLT_MAX), "shift")   # (a piece of -inf only: e = 0)
                tk.map(v, lambda a: tk.exp2(a * tk.LOG2E - shift), v)
                top, total = split.scope(c).merge_softmax(m, tk.sum(v), warps=c.warps_per_row)   # (one warp: m, s)
                tk.mul(v, v, tk.let(tk.exp2(shift - top * tk.LOG2E) / total, "scale"))
            tk.store(y, v, (row, part), masked=True)
    return softmax_forward


def _staged_forward(c: SoftmaxConfig, x, y, part) -> None:
    """The forward with each warp's piece of x in shared memory (row_split.SharedPieces): three reads of it a chunk
    at a time (loops, not unrolled: few registers), for the max, the sum of the exponentials and y (two exponentials
    an element)."""
    dt = DTYPES[c.dtype]
    pieces = split.SharedPieces(c, (x,))
    held = tk.rv(dt, CHUNK, "contig", name="held")            # a chunk of x
    top_x = tk.rv(dt, CHUNK, "contig", name="top_x")          # the largest of each element's chunks
    e = tk.rv(f32, CHUNK, "contig", name="e")                 # the exponentials' sums, then a chunk of y

    def chunk(vector, k) -> None:
        """Chunk k of the piece into `vector`, -inf past the row's end (0 there from the copy)."""
        tk.load(vector, pieces.chunk(0, k))
        if c.ragged:
            tk.right_fill(vector, vector, c.width - pieces.col(part, k) * CHUNK, -math.inf)

    for step in split.steps(c, x.rows):
        row = split.row_of(c, step)
        pieces.load(row, part)
        chunk(top_x, 0)
        for k in tk.range(1, pieces.segments):
            chunk(held, k)
            tk.max(top_x, top_x, held)
        m = tk.amax(top_x)
        shift = tk.let(tk.call("max", m * tk.LOG2E, -tk.FLT_MAX), "shift")       # (a piece of -inf only: e = 0)
        tk.zero(e)
        for k in tk.range(pieces.segments):
            chunk(held, k)
            tk.map(e, lambda t, a: t + tk.exp2(a * tk.LOG2E - shift), e, held)
        top, total = split.scope(c).merge_softmax(m, tk.sum(e), warps=c.warps_per_row)
        scale = tk.let(tk.exp2(shift - top * tk.LOG2E) / total, "scale")
        for k in tk.range(pieces.segments):
            tk.load(held, pieces.chunk(0, k))
            tk.map(e, lambda a: tk.exp2(a * tk.LOG2E - shift) * scale, held)
            tk.store(y, e, (row, pieces.col(part, k)), masked=True)


def _packed_rows_softmax(v, stats, width: int) -> None:
    """v = softmax of each row of `width` elements packed in it (stats: a vector of v's shape for each row's max and
    sum). A row of -inf only gives NaN (as torch), a row past the tensor's end (its fill, -inf) too, never stored."""
    tk.segment_max(stats, v, width)
    tk.map(v, lambda a, m: tk.exp2(a * tk.LOG2E - m * tk.LOG2E), v, stats)      # (an FFMA: m's product one a row)
    tk.segment_sum(stats, v, width)
    tk.map(v, lambda e, s: e / s, v, stats)


@functools.cache
def backward_kernel(c: SoftmaxConfig):
    """dx = y * (dy - rowsum(dy * y)) over rows of c.width elements. A warp's piece is held as vectors of a chunk
    each (segments), so that the fp32 products of y and dy take one chunk's registers, added up segment by segment
    (packed: c.packed rows a kernel row, whole ones a chunk, each chunk's rows summed on their own)."""
    dt, segments = DTYPES[c.dtype], c.piece // CHUNK
    rows = tk.gl[dt, "R", c.packed_width]

    @tk.kernel(**c.kernel_options(), name=c.name)
    def softmax_backward(dy: rows, y: rows, dx: rows):
        part = tk.let(split.part_of(c), "part")
        if c.stage_dy:                                       # y's and dy's pieces in shared memory
            _staged_backward(c, dy, y, dx, part)
            return
        g = [tk.rv(dt, CHUNK, "contig", name="g") for _ in range(segments)]       # dy, then dx
        staged = split.SharedPieces(c, (y,)) if c.stage else None     # each warp's y in shared memory, a segment
        if c.stage:                                                      # at a time in registers
            ys = [tk.rv(dt, CHUNK, "contig", name="held")] * segments
        else:
            ys = [tk.rv(dt, CHUNK, "contig", name="y") for _ in range(segments)]
        p = tk.rv(f32, CHUNK, "contig", name="p")            # dy * y, added over the segments
        if c.prefetch:                                       # the next row's dy and y, in flight a row ahead
            ahead = [[tk.rv(dt, CHUNK, "contig", name=f"ahead_{t}") for _ in range(segments)] for t in ("dy", "y")]
            _load_segments(ahead, (dy, y), split.row_of(c, split.first_step(c)), part, segments)
        for step in split.steps(c, y.rows):
            row = split.row_of(c, step)
            if c.stage:
                staged.start(row, part)                      # (in flight with dy's loads)
            if c.prefetch:
                for k in range(segments):
                    tk.copy(g[k], ahead[0][k])
                    tk.copy(ys[k], ahead[1][k])
                _load_segments(ahead, (dy, y), split.row_of(c, step + split.stride(c)), part, segments)
            else:                                            # (0 past the rows and the row's end: adds nothing)
                _load_segments([g] if c.stage else [g, ys], (dy, y), row, part, segments)
            if c.stage:
                staged.wait()
            if c.packed:
                for k in range(segments):
                    tk.map(p, lambda d, y_: d * y_, g[k], ys[k])
                    tk.segment_sum(p, p, c.width)
                    tk.map(g[k], lambda d, y_, s: y_ * (d - s), g[k], ys[k], p)
                    tk.store(dx, g[k], (row, part * segments + k), masked=True)
            else:
                _row_backward(c, g, ys, p, staged, dx, row, part, segments)
    return softmax_backward


def _staged_backward(c: SoftmaxConfig, dy, y, dx, part) -> None:
    """The backward with each warp's pieces of dy and y in shared memory (row_split.SharedPieces): two reads of them
    a chunk at a time (loops), for the sum of dy * y and for dx."""
    dt = DTYPES[c.dtype]
    pieces = split.SharedPieces(c, (dy, y))
    d_, y_ = tk.rv(dt, CHUNK, "contig", name="held_dy"), tk.rv(dt, CHUNK, "contig", name="held_y")
    p = tk.rv(f32, CHUNK, "contig", name="p")                # dy * y, added over the chunks, then a chunk of dx
    for step in split.steps(c, y.rows):
        row = split.row_of(c, step)
        pieces.load(row, part)                               # (0 past the rows and the row's end: adds nothing)
        tk.zero(p)
        for k in tk.range(pieces.segments):
            tk.load(d_, pieces.chunk(0, k))
            tk.load(y_, pieces.chunk(1, k))
            tk.map(p, lambda q, d, yy: q + d * yy, p, d_, y_)
        s = tk.let(split.row_sum(c, p), "s")
        for k in tk.range(pieces.segments):
            tk.load(d_, pieces.chunk(0, k))
            tk.load(y_, pieces.chunk(1, k))
            tk.map(p, lambda d, yy: yy * (d - s), d_, y_)
            tk.store(dx, p, (row, pieces.col(part, k)), masked=True)


def _row_backward(c: SoftmaxConfig, g, ys, p, staged, dx, row, part, segments: int) -> None:
    """dx = y * (dy - s) of a row split over warps: s = the row's sum of dy * y (p, added over the segments), y read
    again from `staged` (row_split.SharedPieces) where the rows are staged."""
    for k in range(segments):
        if staged is not None:
            tk.load(ys[k], staged.chunk(0, k))
        if k == 0:
            tk.map(p, lambda d, y_: d * y_, g[k], ys[k])
        else:
            tk.map(p, lambda q, d, y_: q + d * y_, p, g[k], ys[k])
    s = tk.let(split.row_sum(c, p), "s")
    for k in range(segments):
        if staged is not None:
            tk.load(ys[k], staged.chunk(0, k))
        tk.map(g[k], lambda d, y_: y_ * (d - s), g[k], ys[k])
        tk.store(dx, g[k], (row, part * segments + k), masked=True)


def _load_segments(vectors, tensors, row, part, segments: int) -> None:
    """Each list of segment vectors from its tensor's row `row`, piece `part` (0 past the edges)."""
    for vs, t in zip(vectors, tensors):
        for k in range(segments):
            tk.load(vs[k], t, (row, part * segments + k), fill=0.0)
