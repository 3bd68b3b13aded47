"""The body of the rotary-embedding kernel (kernels/rotary.py is the API): q and k rotated in one launch, one pass.

q and k arrive as (batch, heads, seq, head_dim) views of their (batch, seq, heads, head_dim) tensors (strided: rows
head-dim apart by heads x head_dim), cos and sin as (seq, columns) tables already offset to the call's first
position. A warp takes 16 positions of one head at a time, a row-layout register tile of the input dtype: in that
layout every rotation is within a lane. Half-split (GPT-NeoX): columns i and i + r/2 share a lane, 16-column subtiles
a = x[:, i], b = x[:, i + r/2]: a' = a cos - b sin, b' = b cos + a sin (16 x 16 tiles of the tables, fp32 in
registers). Interleaved (GPT-J): columns 2i and 2i + 1 share a lane's register pair, so x' = x cos + swap_pairs(x) sin
with the tables expanded to a column each (cos twice, sin as (-sin, sin)). The inverse rotation (the backward) is by
-theta: sin negated. fp32 math, rounded once; columns past rotary_dim are stored as loaded. The blocks' warps loop
over q's (batch, 16-position block, head) tasks, heads fastest (neighbouring memory), then k's: a persistent grid.
"""
# (No `from __future__ import annotations`: the kernels' annotations use their factory's arguments.)
import functools

import tkpy as tk
from tkpy import bf16, f32, fp16

from .rotary_config import ROWS, RotaryConfig

DTYPES = {"bf16": bf16, "fp16": fp16, "f32": f32}


def _rotate(c: RotaryConfig, x, cos, sin, step, tiles):
    """The rotation of tile x at position block `step` (c, s, t: 16 x 16 temporaries)."""
    cs, sn, tmp = tiles
    sign = -1.0 if c.inverse else 1.0
    if c.interleaved:
        for j in range(c.rotary_dim // 16):
            tk.load(cs, cos, (step, j), fill=0.0)
            tk.load(sn, sin, (step, j), fill=0.0)
            a = x[:, 16 * j:16 * j + 16]
            tk.swap_pairs(tmp, a)
            tk.map(a, lambda a, w, c, s: a * c + w * (sign * s), a, tmp, cs, sn)
        return
    half = c.rotary_dim // 2
    for j in range(half // 16):
        tk.load(cs, cos, (step, j), fill=0.0)
        tk.load(sn, sin, (step, j), fill=0.0)
        a, b = x[:, 16 * j:16 * j + 16], x[:, half + 16 * j:half + 16 * j + 16]
        tk.copy(tmp, a)
        tk.map(a, lambda a, b, c, s: a * c - b * (sign * s), a, b, cs, sn)
        tk.map(b, lambda b, a, c, s: b * c + a * (sign * s), b, tmp, cs, sn)


@functools.cache
def rotary_kernel(c: RotaryConfig):
    """q_out, k_out = q, k rotated (or by -theta: c.inverse)."""
    dt, tt, d = DTYPES[c.dtype], DTYPES[c.table], c.head_dim
    qs, ks = tk.gl[dt, "B", c.heads_q, "S", d], tk.gl[dt, "B", c.heads_k, "S", d]
    table = tk.gl[tt, "S", c.table_cols]

    @tk.kernel(warps=c.warps, blocks_per_sm=c.blocks_per_sm, name=c.name)
    def rotary(q: qs, k: ks, cos: table, sin: table, q_out: qs, k_out: ks):
        x = tk.rt(dt, ROWS, d)
        tiles = [tk.rt(f32, 16, 16, name=name) for name in ("cs", "sn")] + [tk.rt(dt, 16, 16, name="tmp")]
        steps = tk.let(tk.cdiv(q.rows, ROWS), "steps")
        warps, first = tk.grid_dim.x * c.warps, tk.block_idx.x * c.warps + tk.warp_id()
        for src, dst, heads in ((q, q_out, c.heads_q), (k, k_out, c.heads_k)):
            for task in tk.range(first, q.batch * steps * heads, warps):
                head = tk.let(task % heads, "head")
                rest = tk.let(task // heads, "rest")
                step, batch = tk.let(rest % steps, "step"), tk.let(rest // steps, "batch")
                tk.load(x, src, (batch, head, step, 0), fill=0.0)
                _rotate(c, x, cos, sin, step, tiles)
                tk.store(dst, x, (batch, head, step, 0), masked=True)
    return rotary
