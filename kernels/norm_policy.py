"""The policy of the norm kernels (kernels/norm_kernel.py): how a row of each width is split (warps a row, rows a
block, blocks a cluster) and how many blocks an SM gets in the persistent grid (its size: row_split.grid). Each table
row carries its evidence; tests/test_norms.py keeps a golden record of the choices (tests/golden/norm_policy.json).

The aim: a row's piece in each lane at most 16 fp32 values (the backward holds x, dy, the weight and the weight's
and bias's partial sums: ~5 x 16 registers; the forward x, the next row's x and residual, the weight, the bias),
enough rows in flight an SM to cover the memory latency (~30 KB an SM at 3.5 TB/s), blocks of at most 512 threads
(16 warps a row), and clusters only where a row is wider than that holds (16 x 32 lanes x 16 values = 8192
elements), as Quack does. blocks_per_sm is the launch bounds' minimum (the register cap); the grid holds as many
blocks as the GPU runs at once (the occupancy queries), at least that many an SM.
"""
from __future__ import annotations

from dataclasses import replace

from .norm_config import NormConfig
from .op_support import Row
from .row_split import warps_for

FIT = ("untimed: the register cap of this many blocks an SM holds the fullest variant (layer norm, weight, bias, "
       "residual) without spills (NVRTC, tests/test_norms.py); to be timed by bench_memory_bound.py --variants")
SWEPT_4096 = {     # RESULTS.md run 274 (H200, 16384 x 4096 bf16): the best of 37 splits for all four norms together
    "forward": "run 274: 0.94/0.98/0.90/0.96 of the copy (rms, rms+residual, layer, layer+residual; the register "
               "fit's 8 warps a row 0.93/0.96/0.82/0.95)",
    "backward": "run 274: 0.84/1.09/0.76/0.97 of the copy (the register fit's 0.78/1.02/0.73/0.88)",
}
SWEPT_16384 = ("RESULTS.md run 275 (H200, 4096 x 16384 bf16, forward): 0.93/0.89/0.91/0.90 of the copy (rms, "
               "rms+residual, layer, layer+residual; FIT's cluster of 2 0.81/0.96/0.77/0.94)")
SWEPT_8192 = {     # RESULTS.md run 311 (H200, 8192 x 8192 bf16): the best of 16 splits for all four norms together
    "forward": "run 311: 0.95/0.90/0.93/0.91 of the copy (rms, rms+residual, layer, layer+residual; the register "
               "fit's 16 warps a row 0.81/0.96/0.80/0.95)",
    "backward": "run 311: 0.72/0.91/0.68/0.84 of the copy (the register fit's 0.70/0.91/0.65/0.77; rms alone: 0.89 "
                "at 8 warps x 2 blocks an SM without the prefetch)",
}
# width up to -> (most warps a row, rows_per_block, cluster, blocks_per_sm, prefetch), forward; a row takes as many
# of its warps as cover it in pieces of about row_split.PIECE elements (row_split.warps_for: fewer for a width below
# the table row's limit)
FORWARD = (
    (512, Row((1, 8, 1, 2, True), FIT)),       # a warp a row (up to 16 values a lane), 8 rows a block
    (1024, Row((2, 4, 1, 2, True), FIT)),
    (2048, Row((4, 2, 1, 2, True), FIT)),
    (4096, Row((4, 1, 1, 2, True), SWEPT_4096["forward"])),
    (8192, Row((8, 2, 1, 1, True), SWEPT_8192["forward"])),
    (16384, Row((16, 1, 1, 1, True), SWEPT_16384)),   # 16 warps of 32 values a lane (FIT's cluster of 2 behind)
    (32768, Row((16, 1, 4, 1, True), FIT)),    # clusters: 16 warps of 4 or 8 blocks a row
    (65536, Row((16, 1, 8, 1, True), FIT)),
)
BACKWARD = (                                   # (no prefetch but where swept)
    (512, Row((1, 8, 1, 2, False), FIT)),
    (1024, Row((2, 4, 1, 2, False), FIT)),
    (2048, Row((4, 2, 1, 2, False), FIT)),
    (4096, Row((8, 2, 1, 1, True), SWEPT_4096["backward"])),
    (8192, Row((8, 1, 1, 1, True), SWEPT_8192["backward"])),
    (16384, Row((16, 1, 2, 1, False), FIT)),   # (runs 275, 311: this cluster of 2 ahead of 16 warps alone, 0.61-0.89)
    (32768, Row((16, 1, 4, 1, False), FIT)),
    (65536, Row((16, 1, 8, 1, False), FIT)),
)


def split_for(direction: str, width: int) -> Row:
    """The table row for rows of `width` elements."""
    table = FORWARD if direction == "forward" else BACKWARD
    return next(row for limit, row in table if width <= limit)


def config_for(kind: str, direction: str, width: int, dtype: str, weight: str | None, bias: bool,
               residual: bool, **forced) -> NormConfig:
    """The kernel a call runs: what it computes and the table's split for its width (`forced`: NormConfig fields
    that override the table's, e.g. for the benchmark's variants)."""
    most_warps, rows_per_block, cluster, blocks_per_sm, prefetch = split_for(direction, width).value
    c = NormConfig(kind, direction, width, dtype, weight, bias, residual, prefetch,
                   warps_per_row=warps_for(width, most_warps, cluster), rows_per_block=rows_per_block, cluster=cluster,
                   blocks_per_sm=blocks_per_sm)
    return replace(c, **forced) if forced else c
