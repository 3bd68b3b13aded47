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

from typing import NamedTuple

from .norm_config import NormConfig
from .op_support import Row
from .row_split import over_table, warps_for

FIT = ("untimed: the register cap of this many blocks an SM holds the fullest variant (layer norm, weight, bias, "
       "residual) without spills (NVRTC, tests/test_norms.py); to be timed by bench_memory_bound.py --variants")
SWEPT_4096 = {     # RESULTS.md runs 274, 312 (H200, 16384 x 4096 bf16): the best of 37 (64) splits for all four norms
    "forward": "run 274: 0.94/0.98/0.90/0.96 of the copy (rms, rms+residual, layer, layer+residual; the register "
               "fit's 8 warps a row 0.93/0.96/0.82/0.95)",
    "backward": "run 312: x and dy 2 rows ahead through shared memory, 4 warps a row; layer norm 0.85 of the copy "
                "(run 274's 8 warps x 2 rows with the register prefetch 0.78), rms not in the sweep's printed best; "
                "the sweep's best for all eight cases, the same at 3 blocks an SM (rms 0.85 or more, layer 0.87), "
                "spills the fullest variant at its 168 registers (NVRTC 13.5)",
    "backward 348": "run 348: 8 warps x 2 rows a block, x and dy 2 rows ahead, 0.91/0.97/0.83/0.95 of the copy (rms, "
                    "rms+residual, layer, layer+residual; run 312's 4 warps x 1 row 0.89/0.91/0.85/0.92 in the same "
                    "run), the sweep's best for all four, within 3.4% of each one's best of 156 splits",
}
SWEPT_1024 = {     # RESULTS.md runs 323, 329 (H200, 65536 x 1024 bf16): 80 splits of each norm
    "backward": "2 rows ahead through shared memory: 0.94/0.98/0.87/0.95 of the copy (rms, rms+residual, layer, "
                "layer+residual; the register fit's 0.83/0.95/0.81/0.92)",
    "layer forward": "a warp a row, the next row's in registers: 0.92 of the copy (the four norms' row 0.84; for "
                     "the other three that row, 0.94/0.94/0.94, is within 1.2% of each one's best)",
    "layer backward": "a warp a row, 2 rows ahead, 3 blocks an SM: 0.90 of the copy (the four norms' row 0.87)",
}
SWEPT_16384 = ("RESULTS.md run 275 (H200, 4096 x 16384 bf16, forward): 0.93/0.89/0.91/0.90 of the copy (rms, "
               "rms+residual, layer, layer+residual; FIT's cluster of 2 0.81/0.96/0.77/0.94)")
SWEPT_8192 = {     # RESULTS.md run 311 (H200, 8192 x 8192 bf16): the best of 16 splits for all four norms together
    "forward": "run 311: 0.95/0.90/0.93/0.91 of the copy (rms, rms+residual, layer, layer+residual; the register "
               "fit's 16 warps a row 0.81/0.96/0.80/0.95); run 344: layer's 0.92 (the staged row's 0.88; 8 warps x "
               "1 row with the prefetch 0.92); its rms+residual spills 32 bytes under NVRTC 13.0",
    "backward": "run 311: 0.72/0.91/0.68/0.84 of the copy (the register fit's 0.70/0.91/0.65/0.77; rms alone: 0.89 "
                "at 8 warps x 2 blocks an SM without the prefetch)",
}
STAGED_8192 = ("RESULTS.md runs 343-344 (H200, 8192 x 8192 bf16, forward): each row's pieces of x and the residual "
               "through shared memory, a block a row group: 0.96/0.96/0.97 of the copy (rms, rms+residual, "
               "layer+residual; run 311's row, 8 warps x 2 rows with the prefetch, 0.94/0.90/0.89; layer keeps it, "
               "BY_NORM)")
SWEPT_WIDE = {     # RESULTS.md run 314 (H200, 2^26 bf16 elements): the best of 27-64 splits for all four norms
    "forward 32768": "run 314: 0.86/0.89/0.86/0.89 of the copy (rms, rms+residual, layer, layer+residual; the "
                     "register fit's 16 warps x 4 blocks with the prefetch 0.78/0.94/0.69/0.92)",
    "forward 65536": "run 314: 0.86/0.84/0.86/0.85 of the copy (the register fit's 16 warps x 8 blocks "
                     "0.75/0.93/0.58/0.90; the best for all four, 8 warps x 8 blocks at 2 blocks an SM with the "
                     "prefetch, 0.91/0.89/0.85/0.84, spills the fullest variant)",
    "backward 8192": "run 314: 0.84/0.93/0.75/0.85 of the copy (run 311's 8 warps with the register prefetch "
                     "0.72/0.86/0.68/0.82 in the same run)",
    "backward 16384": "runs 311, 314: 0.66/0.83/0.61/0.70 of the copy, the best of the 5 splits that fit (16 warps "
                      "alone with 2 rows ahead: rms 0.78, layer 0.53)",
    "backward 32768": "run 314: 0.73/0.83/0.68/0.80 of the copy (the register fit's 16 warps x 4 blocks "
                      "0.60/0.76/0.54/0.68)",
    "backward 65536": "run 314: 0.71/0.83/0.69/0.77 of the copy (the register fit's 16 warps x 8 blocks "
                      "0.57/0.72/0.50/0.64)",
}
SWEPT_2048 = ("RESULTS.md run 336 (H200, 32768 x 2048 bf16): the next row 2 rows ahead through shared memory, 0.93 "
              "of the copy, the best of 292 splits (FIT's 0.83; for rms 0.91 against FIT's 0.94, run 337)")


class Split(NamedTuple):
    """A table row's split: a row takes as many of its `most_warps` as cover it in pieces of about row_split.PIECE
    elements (row_split.warps_for: fewer for a width below the table row's limit); `stages`: the next rows through
    shared memory (NormConfig.stages); `stage`: the row's pieces through shared memory (NormConfig.stage, the
    weight's chunks from L1/L2); `weight_l2`: the weight's piece read from L1/L2 a row, not held in registers
    (NormConfig.weight_in_registers)."""
    most_warps: int
    rows_per_block: int
    cluster: int
    blocks_per_sm: int
    prefetch: bool
    stages: int
    stage: bool
    persistent: bool
    weight_l2: bool = False


# width up to -> Row(Split(...)), forward
FORWARD = (
    (512, Row(Split(1, 8, 1, 2, True, 0, False, True), FIT)),   # a warp a row (up to 16 values a lane), 8 rows a block
    (1024, Row(Split(2, 4, 1, 2, True, 0, False, True), FIT)),
    (2048, Row(Split(4, 2, 1, 2, True, 0, False, True), FIT)),
    (4096, Row(Split(4, 1, 1, 2, True, 0, False, True), SWEPT_4096["forward"])),
    (8192, Row(Split(8, 1, 1, 1, False, 0, True, False), STAGED_8192)),     # a row's pieces through shared memory
    (16384, Row(Split(16, 1, 1, 1, True, 0, False, True), SWEPT_16384)),   # 16 warps of 32 values a lane (FIT's
                                                                           # cluster of 2 behind)
    (32768, Row(Split(16, 1, 2, 1, False, 2, False, True), SWEPT_WIDE["forward 32768"])),   # clusters of 2, 2 ahead
    (65536, Row(Split(16, 1, 4, 1, False, 2, False, True), SWEPT_WIDE["forward 65536"])),   # clusters of 4, 2 ahead
)
BACKWARD = (                                   # (no prefetch but where swept)
    (512, Row(Split(1, 8, 1, 2, False, 0, False, True), FIT)),
    (1024, Row(Split(2, 4, 1, 2, False, 2, False, True), SWEPT_1024["backward"])),   # 2 rows ahead
    (2048, Row(Split(4, 2, 1, 2, False, 0, False, True), FIT)),
    (4096, Row(Split(8, 2, 1, 1, False, 2, False, True), SWEPT_4096["backward 348"])),    # 8 warps x 2 rows
    (8192, Row(Split(16, 1, 1, 1, False, 2, False, True), SWEPT_WIDE["backward 8192"])),
    (16384, Row(Split(16, 1, 2, 1, False, 0, False, True), SWEPT_WIDE["backward 16384"])),
    (32768, Row(Split(8, 1, 4, 1, False, 2, False, True), SWEPT_WIDE["backward 32768"])),  # x and dy 2 rows ahead
    (65536, Row(Split(8, 1, 8, 1, False, 2, False, True), SWEPT_WIDE["backward 65536"])),
)


# (direction, kind, residual, the table row's width limit) -> Row: one norm's own row where its sweep beat the
# four's by far
SWEPT_326 = ("RESULTS.md run 326 (H200, 2^26 bf16 elements, rms and layer+residual swept): the best of {} splits, {} "
             "of the copy (the four norms' row {})")
BY_NORM = {
    ("forward", "rms", False, 16384): Row(Split(16, 1, 1, 1, False, 0, True, False), SWEPT_326.format(24, 0.95, 0.93)),
    ("forward", "layer", True, 16384): Row(Split(16, 1, 1, 1, False, 0, True, False), SWEPT_326.format(24, 0.92, 0.90)),
    ("forward", "rms", True, 16384): Row(Split(16, 1, 1, 1, False, 0, True, False),
                                         "RESULTS.md run 343 (H200, 4096 x 16384 bf16): the best of 34 splits, 0.96 "
                                         "of the copy (the four norms' row 0.90, which spills 32 bytes under NVRTC "
                                         "13.0)"),
    ("forward", "layer", False, 8192): Row(Split(8, 2, 1, 1, True, 0, False, True), SWEPT_8192["forward"]),
    ("forward", "rms", False, 32768): Row(Split(16, 1, 2, 1, True, 0, False, True), SWEPT_326.format(116, 0.93, 0.85)),
    ("forward", "layer", True, 32768): Row(Split(16, 1, 4, 1, True, 0, False, True), SWEPT_326.format(116, 0.91, 0.88)),
    ("backward", "rms", False, 16384): Row(Split(16, 1, 1, 1, False, 0, False, True), SWEPT_326.format(9, 0.81, 0.65)
                                           + "; layer+residual's best is the four's row, 0.71, a block a row 0.36"),
    ("forward", "layer", False, 2048): Row(Split(4, 1, 1, 2, False, 2, False, True), SWEPT_2048),
    ("forward", "rms", True, 1024): Row(Split(2, 8, 1, 1, True, 0, False, True, weight_l2=True),
                                        "RESULTS.md run 337 (H200, 65536 x 1024 bf16): the weight from L1/L2 a row, "
                                        "0.96 of the copy, the best of 292 splits (the four norms' row 0.94)"),
    ("forward", "layer", False, 1024): Row(Split(1, 8, 1, 2, True, 0, False, True), SWEPT_1024["layer forward"]),
    ("backward", "layer", False, 4096): Row(Split(4, 1, 1, 2, False, 2, False, True), SWEPT_4096["backward"]
                                            + "; run 348: 0.85 of the copy (the four norms' row 0.83)"),
    ("backward", "rms", False, 8192): Row(Split(8, 1, 1, 2, False, 0, False, True),
                                          "RESULTS.md runs 311, 348 (H200, 8192 x 8192 bf16): 8 warps x 2 blocks an "
                                          "SM, the register fit without the prefetch, 0.89 of the copy in both (the "
                                          "four norms' row 0.85, run 348)"),
    ("backward", "layer", False, 1024): Row(Split(1, 4, 1, 3, False, 2, False, True), SWEPT_1024["layer backward"]),
}


def split_for(direction: str, width: int, kind: str, residual: bool) -> Row:
    """The table row for rows of `width` elements of norm `kind` (with the residual or not)."""
    table = FORWARD if direction == "forward" else BACKWARD
    limit, row = next((limit, row) for limit, row in table if width <= limit)
    return BY_NORM.get((direction, kind, residual, limit), row)


def config_for(kind: str, direction: str, width: int, dtype: str, weight: str | None, bias: bool,
               residual: bool, **forced) -> NormConfig:
    """The kernel a call runs: what it computes and the table's split for its width (`forced`: NormConfig fields
    that override the table's, e.g. for the benchmark's variants; forcing the prefetch without `stages` takes none,
    the table's stages being instead of a prefetch)."""
    split = split_for(direction, width, kind, residual).value
    c = NormConfig(kind, direction, width, dtype, weight, bias, residual, split.prefetch, stages=split.stages,
                   stage=split.stage, weight_in_registers=not (split.stage or split.weight_l2),
                   warps_per_row=warps_for(width, split.most_warps, split.cluster),
                   rows_per_block=split.rows_per_block, cluster=split.cluster, blocks_per_sm=split.blocks_per_sm,
                   persistent=split.persistent)
    return over_table(c, forced)
