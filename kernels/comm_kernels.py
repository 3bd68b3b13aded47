"""The fused communication operators' own kernels (kernels/comm.py has their protocol): a barrier of the group's
ranks, and the sum of `world` tensors after every rank signalled that its data are in (an all-reduce's, over the
ranks' buffers, and a reduce-scatter's, over the partial sums the ranks stored into this rank's slots)."""
from __future__ import annotations

import functools

import tkpy as tk
from tkpy import f32

from .comm import ARRIVED, FLAG_COLS, FLAG_ROWS, READY

ROWS, COLS = 16, 64         # a warp's tile of the sum
WARPS = 4


def flags_type(world: int):
    """The group's flags: FLAG_ROWS x FLAG_COLS int32 a rank."""
    return tk.pgl[tk.gl[tk.i32, FLAG_ROWS, FLAG_COLS], world]


def signal_all(flags, row: int, epoch) -> None:
    """Set this rank's flag `row` on every rank to the call's epoch."""
    for p in range(flags.world):
        tk.signal(flags[p], (row, flags.rank), epoch)


def wait_all(flags, row: int, epoch) -> None:
    """Wait until every rank has set this rank's flag `row` to the call's epoch."""
    for p in range(flags.world):
        tk.wait_signal(flags.local, (row, p), epoch)


@functools.cache
def barrier_kernel(world: int):
    """One warp: arrive (ARRIVED) on every rank, wait for every rank's arrival. A rank's kernels after it start once
    every rank has finished the kernels before its own barrier (stream order): then no rank still reads a buffer
    that this call writes."""
    @tk.kernel(warps=1, name=f"comm_barrier_w{world}")
    def comm_barrier(flags: flags_type(world), epoch: int):
        signal_all(flags, ARRIVED, epoch)
        wait_all(flags, ARRIVED, epoch)
    return comm_barrier


@functools.cache
def sum_kernel(world: int, dtype, peers: bool):
    """out = src_0 + ... + src_{world-1} (f32 sums in rank order, rounded once: every rank gets the same bits), for
    (R, C) tensors, once every rank has signalled READY (each block signals first: this rank's data were in place
    before the kernel started). src_q is rank q's buffer `src[q]` (`peers`: an all-reduce; a buffer of depth 1),
    or this rank's slot q, `src.local` at depth q (a reduce-scatter's partial sums, which rank q stored there).
    A persistent grid: each block sums 64 x 64 tiles (16 rows a warp), tile b, b + grid, ..."""
    @tk.kernel(warps=WARPS, name=f"comm_sum_{dtype.name}_w{world}_{'peers' if peers else 'slots'}")
    def comm_sum(src: tk.pgl[tk.gl[dtype, "Q", "R", "C"], world], flags: flags_type(world),
                 out: tk.gl[dtype, "R", "C"], epoch: int):
        signal_all(flags, READY, epoch)
        wait_all(flags, READY, epoch)
        col_tiles = tk.let(tk.cdiv(out.cols, COLS), "col_tiles")
        total, t = tk.rt(f32, ROWS, COLS), tk.rt(f32, ROWS, COLS)
        for tile in tk.range(tk.block_idx.x, tk.cdiv(out.rows, ROWS * WARPS) * col_tiles, tk.grid_dim.x):
            row = tk.let(tile // col_tiles * WARPS + tk.warp_id(), "row")
            col = tk.let(tile % col_tiles, "col")
            for q in range(world):
                source, depth = (src[q], 0) if peers else (src.local, q)
                tk.load(total if q == 0 else t, source, (depth, row, col), masked=True)
                if q:
                    tk.add(total, total, t)
            tk.store(out, total, (row, col), masked=True)
    return comm_sum
