"""Test kernels for rows held in contig register vectors, shared by the CPU tests (test_row_ops.py: interpreter,
trace-time errors, NVRTC and SASS) and the GPU tests (test_gpu_row_ops.py): a persistent loop over groups of rows,
each row split over `group` warps of a block and `cluster` blocks, its sum, sum of squares, max and min reduced over
them (tk.block.* or tk.cluster.*), x - mean written back, and the statistics stored as scalars; and a row softmax
split the same way, its statistics merged in one exchange (tk.block.merge_softmax / tk.cluster.merge_softmax)."""
from __future__ import annotations

import functools

import torch

import tkpy as tk
from tkpy import f32

STATS = ("sum", "squares", "max", "min")
TK = {torch.bfloat16: tk.bf16, torch.float16: tk.fp16, torch.float32: tk.f32}


@functools.cache
def row_stats(dtype, n: int, warps: int, group: int, cluster: int = 1):
    """y = x - mean(x) over each row of an (R, n) tensor and stats[:, r] = (sum, sum of squares, max, min) of row r.
    A row's `group * cluster` warps (`group` of a block, in `cluster` blocks) each hold a piece of it: a contig vector
    of n / (group * cluster) elements rounded up to 256 (the last pieces partly or wholly past the row's end: masked
    loads and stores, masks for the max and min). Blocks loop over groups of `warps // group` rows."""
    piece = tk.cdiv(n, group * cluster * 256) * 256
    rows_at_once = warps // group
    scope = tk.cluster if cluster > 1 else tk.block

    @tk.kernel(warps=warps, cluster=(cluster, 1, 1) if cluster > 1 else None,
               name=f"row_stats_{n}_w{warps}_g{group}_c{cluster}")
    def k(x: tk.gl[dtype, "R", n], y: tk.gl[dtype, "R", n], stats: tk.gl[f32, 4, "R"]):
        part = (tk.cluster.rank() * group if cluster > 1 else 0) + tk.warp_id() % group
        valid = n - part * piece                             # this warp's elements inside the row (may be <= 0)
        v, edge = tk.rv(f32, piece, "contig"), tk.rv(f32, piece, "contig")
        for step in tk.range(tk.block_idx.x // cluster, tk.cdiv(x.rows, rows_at_once), tk.grid_dim.x // cluster):
            row = tk.let(step * rows_at_once + tk.warp_id() // group, "row")
            tk.load(v, x, (row, part), fill=0.0)
            total, squares = scope.sum(v, v * v, warps=group)
            tk.right_fill(edge, v, valid, -float("inf"))
            top = scope.amax(edge, warps=group)
            tk.right_fill(edge, v, valid, float("inf"))
            bottom = scope.amin(edge, warps=group)
            tk.sub(v, v, total * (1.0 / n))
            tk.store(y, v, (row, part), masked=True)
            with tk.if_(part == 0):
                for i, value in enumerate((total, squares, top, bottom)):
                    tk.store(stats, value, (i, row), masked=True)
    return k


def run_row_stats(x: torch.Tensor, warps: int, group: int, cluster: int = 1, blocks: int = 3,
                  interpret: bool = False):
    """(y, stats) of row_stats on x (2-D), with `blocks` clusters of blocks; outputs poisoned with NaN."""
    k = row_stats(TK[x.dtype], x.shape[1], warps, group, cluster)
    y = torch.full_like(x, float("nan"))
    rows = x.shape[0]
    stats = torch.full((4, -(-rows // 4) * 4), float("nan"), dtype=torch.float32, device=x.device)[:, :rows]
    launch = k.interpret if interpret else k
    launch[(blocks * cluster,)](x, y, stats)
    return y, stats


def reference(x: torch.Tensor):
    """float64 (x - mean, stats) of row_stats."""
    x64 = x.double()
    stats = torch.stack([x64.sum(1), (x64 * x64).sum(1), x64.amax(1), x64.amin(1)])
    return x64 - x64.mean(1, keepdim=True), stats



@functools.cache
def row_softmax(dtype, n: int, warps: int, group: int, cluster: int = 1):
    """y = softmax(x) over each row of an (R, n) tensor, split as row_stats's: each warp's max m and sum of
    exp(x - m) over its piece merged over the row's warps in one exchange (tk.block.merge_softmax or
    tk.cluster.merge_softmax), then its exponentials rescaled by exp(m - M) / S (runtime scalars: tk.exp2 of one)."""
    piece = tk.cdiv(n, group * cluster * 256) * 256
    rows_at_once = warps // group
    scope = tk.cluster if cluster > 1 else tk.block

    @tk.kernel(warps=warps, cluster=(cluster, 1, 1) if cluster > 1 else None,
               name=f"row_softmax_{n}_w{warps}_g{group}_c{cluster}")
    def k(x: tk.gl[dtype, "R", n], y: tk.gl[dtype, "R", n]):
        part = (tk.cluster.rank() * group if cluster > 1 else 0) + tk.warp_id() % group
        v = tk.rv(f32, piece, "contig")
        for step in tk.range(tk.block_idx.x // cluster, tk.cdiv(x.rows, rows_at_once), tk.grid_dim.x // cluster):
            row = tk.let(step * rows_at_once + tk.warp_id() // group, "row")
            tk.load(v, x, (row, part), fill=-float("inf"))
            m = tk.amax(v)                                   # (-inf for a piece wholly past the row's end)
            shift = tk.let(tk.call("max", m * tk.LOG2E, -tk.FLT_MAX), "shift")
            tk.map(v, lambda a: tk.exp2(a * tk.LOG2E - shift), v)
            top, total = scope.merge_softmax(m, tk.sum(v), warps=group)
            tk.mul(v, v, tk.exp2(shift - top * tk.LOG2E) / total)
            tk.store(y, v, (row, part), masked=True)
    return k


def run_row_softmax(x: torch.Tensor, warps: int, group: int, cluster: int = 1, blocks: int = 3,
                    interpret: bool = False) -> torch.Tensor:
    """row_softmax of x (2-D) on `blocks` clusters of blocks, the output poisoned with NaN first."""
    k = row_softmax(TK[x.dtype], x.shape[1], warps, group, cluster)
    y = torch.full_like(x, float("nan"))
    (k.interpret if interpret else k)[(blocks * cluster,)](x, y)
    return y
