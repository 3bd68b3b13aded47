"""The body of the rotary-embedding kernel (kernels/rotary_op.py is the API): q and k rotated in one launch, one pass.

q and k arrive as rows of positions, (batch * seq, heads * head_dim), cos and sin as (seq, rotary_dim / 2) tables
already offset to the call's first position. A warp takes `positions` rows of q, then the same rows of k, in pieces
of contig vectors (8 consecutive elements a lane: 16-byte loads and stores; a piece holds whole heads) and rotates
them as Hugging Face writes it, x' = x cos + rotate_half(x) sin (GPT-NeoX's halves, or GPT-J's interleaved pairs:
tk.rotate_half, lane shuffles or a lane's own pairs), the tables spread over each head's columns once a position
(tk.load_rotary_table: cos 1 and sin 0 past rotary_dim, where rotate_half is 0, so those columns pass through). fp32
math, rounded once; the inverse rotation (the backward) is by -theta: sin negated. The blocks' warps loop over the
positions, a persistent grid.
"""
# (No `from __future__ import annotations`: the kernels' annotations use their factory's arguments.)
import functools

import tkpy as tk
from tkpy import bf16, f32, fp16

from .rotary_config import RotaryConfig

DTYPES = {"bf16": bf16, "fp16": fp16, "f32": f32}


@functools.cache
def rotary_kernel(c: RotaryConfig):
    """q_out, k_out = q, k rotated (or by -theta: c.inverse)."""
    dt, tt, d, r, p = DTYPES[c.dtype], DTYPES[c.table], c.head_dim, c.rotary_dim, c.positions
    qs, ks = tk.gl[dt, "R", c.width(c.heads_q)], tk.gl[dt, "R", c.width(c.heads_k)]
    table = tk.gl[tt, "S", c.angles]
    sign = -1.0 if c.inverse else 1.0
    tensors = ((c.heads_q, "q"), (c.heads_k, "k"))
    lengths = sorted({c.piece(heads) for heads, _ in tensors}, reverse=True)

    @tk.kernel(warps=c.warps, blocks_per_sm=c.blocks_per_sm, name=c.name)
    def rotary(q: qs, k: ks, cos: table, sin: table, q_out: qs, k_out: ks):
        # per piece length (q's, and k's where it differs) and position: x, rotate_half(x), the tables
        regs = {n: [[tk.rv(dtype, n, "contig", name=f"{name}{i}_{n}") for dtype, name in
                     ((dt, "x"), (dt, "t"), (tt, "cs"), (tt, "sn"))] for i in range(p)] for n in lengths}
        warps, first = tk.grid_dim.x * c.warps, tk.block_idx.x * c.warps + tk.warp_id()
        for task in tk.range(first, tk.cdiv(q.rows, p) if p > 1 else q.rows, warps):
            rows = [tk.let(task * p + i, f"row{i}") if p > 1 else task for i in range(p)]
            loaded = None
            for (heads, _), src, dst in zip(tensors, (q, k), (q_out, k_out)):
                n = c.piece(heads)
                if n != loaded:         # the tables' rows spread over the heads of a piece, once a position
                    for i, row in enumerate(rows):
                        at = tk.let(row % cos.rows, f"pos{i}")
                        x, t, cs, sn = regs[n][i]
                        tk.load_rotary_table(cs, cos, at, d, c.interleaved, fill=1.0)
                        tk.load_rotary_table(sn, sin, at, d, c.interleaved, fill=0.0)
                    loaded = n
                bounds = dict(fill=0.0) if p > 1 or c.width(heads) % n else {}
                for part in range(c.pieces(heads)):
                    for i, row in enumerate(rows):          # (every load of the step in flight together)
                        tk.load(regs[n][i][0], src, (row, part), **bounds)
                    for i, row in enumerate(rows):
                        x, t, cs, sn = regs[n][i]
                        tk.rotate_half(t, x, r, d, c.interleaved)
                        tk.map(x, lambda x, t, cs, sn: x * cs + t * (sign * sn), x, t, cs, sn)
                        tk.store(dst, x, (row, part), masked=bool(bounds))
    return rotary
