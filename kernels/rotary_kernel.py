"""The body of the rotary-embedding kernel (kernels/rotary_op.py is the API): q and k rotated in one launch, one pass.

q and k arrive as rows of positions, (batch * seq, heads * head_dim) (where head_dim does not divide 256: rows of a
group of a position's heads, at most 256 elements), cos and sin as (seq, rotary_dim / 2) tables already offset to the
call's first position. A warp takes `positions` positions at a time: their tables' rows spread over a vector's head
columns once a position (tk.load_rotary_table: cos 1 and sin 0 past rotary_dim), then q's and k's rows in contig
vectors (8 consecutive elements a lane: 16-byte loads and stores; every vector starts at a head, so its lanes' head
columns are the tables'), `together` of them loaded at once, each rotated as Hugging Face writes it: x' = x cos +
rotate_half(x) sin (tk.rotate_half: GPT-NeoX's halves by lane shuffles, GPT-J's interleaved pairs within a lane; 0
past rotary_dim, so those columns pass through). fp32 math, rounded once; the inverse rotation (the backward) is by
-theta: sin negated. The blocks' warps loop over the positions, a persistent grid.
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
    qs, ks = tk.gl[dt, "R", c.width(c.heads_q)], tk.gl[dt, "Rk", c.width(c.heads_k)]
    table = tk.gl[tt, "S", c.angles]
    if c.inverse:           # by -theta
        rotate = lambda x, t, cs, sn: x * cs - t * sn          # noqa: E731
    else:
        rotate = lambda x, t, cs, sn: x * cs + t * sn          # noqa: E731
    n, together = c.piece, c.together
    groups_q = c.heads_q // c.group(c.heads_q)

    @tk.kernel(warps=c.warps, blocks_per_sm=c.blocks_per_sm, name=c.name)
    def rotary(q: qs, k: ks, cos: table, sin: table, q_out: qs, k_out: ks):
        # per position: the tables, and x and rotate_half(x) of each vector loaded at once
        tables = [[tk.rv(tt, n, "contig", name=f"{name}{i}") for name in ("cs", "sn")] for i in range(p)]
        regs = [[[tk.rv(dt, n, "contig", name=f"{name}{i}_{j}") for name in ("x", "t")] for j in range(together)]
                for i in range(p)]
        positions = q.rows // groups_q if groups_q > 1 else q.rows
        warps, first = tk.grid_dim.x * c.warps, tk.block_idx.x * c.warps + tk.warp_id()
        for task in tk.range(first, tk.cdiv(positions, p) if p > 1 else positions, warps):
            at = [tk.let(task * p + i, f"position{i}") if p > 1 else task for i in range(p)]
            for i, position in enumerate(at):   # the tables' rows spread over a vector's heads, once a position
                row = tk.let(position % cos.rows, f"angle_row{i}")
                tk.load_rotary_table(tables[i][0], cos, row, d, c.interleaved, fill=1.0)
                tk.load_rotary_table(tables[i][1], sin, row, d, c.interleaved, fill=0.0)
            for heads, src, dst in ((c.heads_q, q, q_out), (c.heads_k, k, k_out)):
                groups, vectors = heads // c.group(heads), c.vectors(heads)
                bounds = dict(fill=0.0) if p > 1 or c.width(heads) % n else {}
                for first_vector in range(0, len(vectors), together):
                    step = list(enumerate(vectors[first_vector:first_vector + together]))
                    for i, position in enumerate(at):         # (every load of the step in flight together)
                        for j, (group, part) in step:
                            tk.load(regs[i][j][0], src, (_row(position, groups, group), part), **bounds)
                    for i, position in enumerate(at):
                        cs, sn = tables[i]
                        for j, (group, part) in step:
                            x, t = regs[i][j]
                            tk.rotate_half(t, x, r, d, c.interleaved)
                            tk.map(x, rotate, x, t, cs, sn)      # x cos + rotate_half(x) sin
                            tk.store(dst, x, (_row(position, groups, group), part), masked=bool(bounds))
    return rotary


def _row(position, groups: int, group: int):
    """The row of a position's group of heads in the tensor's view (a row a position where groups is 1)."""
    return position * groups + group if groups > 1 else position
