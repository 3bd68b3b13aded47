"""The softmax's tile kernels, for narrow rows (tkpy.kernels.softmax is kernels/softmax_op.py; its policy chooses
these for rows up to kernels/softmax_policy.TILE_WIDTH wide, the split kernels of kernels/softmax_kernel.py beyond).

Each warp takes 16 rows in one fp32 register tile as wide as a row rounded up to 16 columns (at most 256), `warps`
warps a block; the last block's tile may hang past the last row and its columns past the row's end: the copies
are bounds-checked. Forward: y = exp(x - max) / sum(exp(x - max)). Backward: dx = y * (dy - rowsum(dy * y)).

`python -m tkpy.kernels` is their demo: on a Hopper GPU it runs and checks the softmax against torch; without one it
prints the generated CUDA and compiles it.
"""
# (No `from __future__ import annotations`: the kernels' annotations name their factory's argument `dtype`, so they
# are evaluated where they are written. As strings tkpy would look `dtype` up in the frame that applied @tk.kernel,
# which it does not search for inside the installed tkpy package.)
import functools
import math

import tkpy as tk
from tkpy import bf16, f32

from .softmax_config import TILE_ROWS

WARPS = 4                                      # the demo's and the tests' kernels: 64 rows a block


@functools.cache
def softmax_rows_factory(dtype, warps: int = WARPS):
    """The forward kernel for x and y of one dtype (bf16, fp16 or f32), `warps` warps a block. D: the tile width,
    the row length rounded up to 16."""
    @tk.kernel(warps=warps, name="softmax_rows" + ("" if warps == WARPS else f"_w{warps}"))
    def softmax_rows(x: tk.gl[dtype, "R", "C"], y: tk.gl[dtype, "R", "C"], D: tk.constexpr):
        row = tk.block_idx.x * warps + tk.warp_id()          # this warp's 16-row tile
        t = tk.rt(f32, TILE_ROWS, D)                          # register tile, row layout
        m, s = tk.col_vec(t), tk.col_vec(t)                   # one value per row
        tk.load(t, x, (row, 0), fill=-math.inf)               # -> f32; past the row's end exp gives 0
        tk.row_max(m, t)
        tk.sub_row(t, t, m)
        tk.exp(t, t)
        tk.row_sum(s, t)
        tk.div_row(t, t, s)
        tk.store(y, t, (row, 0), masked=True)                 # f32 -> the dtype
    return softmax_rows


@functools.cache
def softmax_backward_rows_factory(dtype, warps: int = WARPS):
    """The backward kernel: dx = dy * y - y * rowsum(dy * y), in fp32. y stays in a tile of its dtype (exactly: it
    is read from one; 16-bit, as two fp32 tiles of 256 columns would not fit in 255 registers a thread: fp32 rows up
    to 128); it is loaded first, while fewer registers are live (loaded the other way round, D = 256 spills)."""
    @tk.kernel(warps=warps, name="softmax_backward_rows" + ("" if warps == WARPS else f"_w{warps}"))
    def softmax_backward_rows(dy: tk.gl[dtype, "R", "C"], y: tk.gl[dtype, "R", "C"], dx: tk.gl[dtype, "R", "C"],
                              D: tk.constexpr):
        row = tk.block_idx.x * warps + tk.warp_id()
        p, g = tk.rt(dtype, TILE_ROWS, D), tk.rt(f32, TILE_ROWS, D)
        s = tk.col_vec(g)
        tk.load(p, y, (row, 0), masked=True)                  # zero past the edges: adds nothing to the sums
        tk.load(g, dy, (row, 0), masked=True)
        tk.mul(g, g, p)                                       # dy * y
        tk.row_sum(s, g)
        tk.map(g, lambda g, p, s: g - p * s, g, p, s)         # dy * y - y * s = y * (dy - s)
        tk.store(dx, g, (row, 0), masked=True)
    return softmax_backward_rows


softmax_rows = softmax_rows_factory(bf16)
softmax_backward_rows = softmax_backward_rows_factory(bf16)
