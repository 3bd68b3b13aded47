"""The policy of the softmax kernels: rows of PACKED_WIDTHS (8 to 128) elements are packed, a warp's chunk of 256
elements several whole rows (kernels/softmax_kernel.py, tk.segment_sum); other rows up to TILE_WIDTH wide take the
tile kernels (kernels/row_softmax.py: 16 rows a warp in a register tile), wider ones a split of each row
(kernels/softmax_kernel.py: warps a row, rows a block, blocks a cluster, blocks an SM, prefetch, stage) by direction,
the dtype's size and the width. Each table row carries its evidence; tests/test_softmax_op.py keeps a golden record
of the choices (tests/golden/softmax_policy.json).

The aim, as the norms' (kernels/norm_policy.py): a lane's piece of a row at most 16 fp32 values up to 8192 elements
(enough warps an SM, 24-32, to keep ~30 KB of loads in flight), 32 up to 131072 (a block of 16 warps an SM, the next
row's loads in flight), and the widest rows spread over a cluster of 8 blocks at 64 values a lane (no prefetch:
262144 fp32 elements are 128 KB an SM, all its registers can give). Registers a lane holds: forward, the piece in
fp32 and the next row's in the dtype (16-bit ones in packed pairs); backward, y and dy in the dtype, both twice
with prefetch, and one chunk of fp32 products. From 32768 on (fp32: from 4096) the sweeps (RESULTS.md runs 325-328,
349) chose, by width, pieces through shared memory (`stage`: a chunk at a time in registers; the backward's y, with `stage_dy` dy too)
or the next row's in registers; the table rows' `staged` counts the tensors staged (0 none, 1 x or y, 2 y and
dy). Clusters only where a row is wider than a block's 16 warps hold, as Quack does (its 16-block clusters past
128k are beyond the portable 8), or where the sweeps chose them (fp32 rows of 32768, bf16 backward 65536:
fewer warps a block, more blocks an SM). Swept at 4096 (benchmarks/sweep_row_splits.py softmax): fewer warps
a row with more values a lane, and more rows a block. blocks_per_sm is the launch bounds' minimum (the register
cap).
"""
from __future__ import annotations

import functools

from .op_support import Row
from .row_split import CHUNK, over_table, warps_for
from .softmax_config import PACKED_WIDTHS, SoftmaxConfig

FIT = ("register fit, unmeasured: the table's register cap holds the kernel without spills (NVRTC, "
       "tests/test_softmax_op.py); to be timed by bench_memory_bound.py --variants")
SWEPT = ("RESULTS.md run 306 (H200, 16384 x 4096, {}): the best of 32 splits, {} of the copy (the register fit's "
         "{})")
TILE_WIDTH = 128             # rows up to this wide: the tile kernels
TILE = Row((64,), "the softmax example's tiling (4 warps of 16 rows, a block per 64 rows): 0.49/0.71 of the copy "
                  "forward/backward at 524288 x 128 bf16, 0.91 f32 backward (RESULTS.md run 320); rows of 1 to 128 "
                  "elements other than PACKED_WIDTHS, and packed rows' remainders")
PACKED_SWEPT = ("RESULTS.md run 320 (H200, 524288 x 128, {}): the best of 55 packed splits, {} (the tile kernels' {}); "
                "narrower PACKED_WIDTHS the same shape, a warp's chunk CHUNK / width rows, unmeasured")
# (direction, bytes an element) -> Row((rows_per_block, blocks_per_sm, persistent)) of packed rows: a warp's piece
# one chunk of CHUNK / width whole rows, a warp a piece
PACKED = {
    ("forward", 2): Row((8, 4, False), PACKED_SWEPT.format("bf16", "0.98 of the copy", 0.49)),
    ("forward", 4): Row((4, 4, True), PACKED_SWEPT.format("f32", "its number lost to a rewritten JSON", "(lost too)")),
    ("backward", 2): Row((8, 4, False), PACKED_SWEPT.format("bf16", "1.04 of the copy", 0.71)),
    ("backward", 4): Row((8, 4, False), PACKED_SWEPT.format("f32", "1.04 of the copy", 0.91)),
}
ONE_STEP = {     # RESULTS.md run 317 (H200, 2^26 elements): the split without its prefetch, a block a row group
    # (persistent=False), against the persistent policy in the same run (fraction of the copy)
    "16-bit backward": "run 317 (bf16): 1.04/1.05/1.05 of the copy at 512/1024/4096 (the persistent policy's "
                       "0.96/0.97/1.00; run 306's split at 4096); 2048 between, unmeasured",
    "f32 backward": "run 317: 1.04/0.95 of the copy at 1024/4096 (the persistent policy's 0.97/0.93; run 306's split "
                    "at 4096); 512 unmeasured",
    "f32 forward": "run 317: 0.99/0.90 of the copy at 1024/4096 (the persistent policy's 0.92/0.88; run 306's split "
                   "at 4096); 512 unmeasured",
    "bf16 forward 512": "run 317: without the prefetch 0.93 of the copy (the register fit's prefetch 0.89; a block a "
                        "row group 0.92)",
}
F32_2048 = ("RESULTS.md run 337 (H200, 32768 x 2048 f32, {}): {} of the copy, the sweep's best for both directions "
            "within 0.1% of each one's best of 190/114 splits (the row before, 4 warps of 16 values a lane, {})")
STAGED_F32 = ("RESULTS.md run 349 (H200, 2^26 f32 elements, {}): {}, {} of the copy, the best of {} splits (the table's "
              "row before {})")
BF16_353 = ("RESULTS.md run 353 (H200, 2^26 bf16 elements, {}): {}, {} of the copy, the best of {} splits (the "
            "table's row before {} in the same run)")
WIDE = ("RESULTS.md run {} (H200, 2^26 elements, {}): the best of {} splits, {} of the copy (the table's row before "
        "{})")
# (direction, bytes an element) -> ((width up to, Row((most warps a row, rows_per_block, cluster, blocks_per_sm,
# prefetch, staged, persistent))), ...). A width takes as many of its warps as pieces of row_split.PIECE elements
# cover it.
SPLIT = {
    ("forward", 2): (
        (512, Row((1, 8, 1, 4, False, 0, True), ONE_STEP["bf16 forward 512"])),   # a warp a row, 8 rows a block
        (1024, Row((1, 8, 1, 4, False, 0, False), WIDE.format(328, "bf16", 100, 0.95, 0.92))),   # a warp a row
        (2048, Row((4, 2, 1, 4, True, 0, True), FIT)),
        (4096, Row((4, 4, 1, 1, True, 0, True), SWEPT.format("bf16", 0.93, 0.88))),   # 32 values a lane
        (8192, Row((4, 1, 1, 2, False, 1, False), BF16_353.format("forward", "x through shared memory, 4 warps a row",
                                                                  0.95, 120, "0.88, 16 warps with the prefetch"))),
        (16384, Row((16, 1, 1, 4, False, 1, False), BF16_353.format("forward", "x through shared memory, 4 blocks an "
                                                                   "SM", 0.97, 298, "0.91, the next row's in "
                                                                                    "registers"))),
        (32768, Row((16, 1, 1, 1, False, 1, False), WIDE.format(326, "bf16", 132, 0.95, 0.90))),  # a block a row
        (65536, Row((16, 1, 4, 1, True, 0, True), WIDE.format(326, "bf16", 76, "within 1% of", "the same"))),
        (131072, Row((16, 1, 8, 2, True, 0, True), WIDE.format(325, "bf16", 26, 0.87, 0.77))),
        (262144, Row((16, 1, 8, 1, False, 1, False), WIDE.format(325, "bf16", 5, 0.79, 0.55))),
    ),
    ("forward", 4): (
        (512, Row((1, 8, 1, 3, False, 0, False), ONE_STEP["f32 forward"])),      # a block a row group
        (1024, Row((2, 4, 1, 3, False, 0, False), ONE_STEP["f32 forward"])),
        (2048, Row((2, 2, 1, 2, False, 0, False), F32_2048.format("forward", 0.98, 0.93))),   # 32 values a lane
        (4096, Row((8, 1, 1, 2, False, 1, False), STAGED_F32.format("forward", "x through shared memory", 0.93, 188,
                                                                    0.89))),
        (8192, Row((16, 1, 1, 1, False, 1, False), STAGED_F32.format("forward", "x through shared memory", 0.90, 96,
                                                                     "0.88; 16 warps of 16 values a lane at 4 blocks "
                                                                     "an SM 0.92, which spill 4 bytes under NVRTC "
                                                                     "13.5"))),
        (16384, Row((8, 1, 1, 2, False, 1, False), STAGED_F32.format("forward", "x through shared memory", 0.86, 258,
                                                                     "0.85, clusters of 2"))),
        (32768, Row((8, 1, 4, 4, False, 0, True), WIDE.format(328, "f32", 123, 0.82, 0.72))),
        (65536, Row((8, 1, 8, 2, False, 1, True), WIDE.format(326, "f32", 67, 0.79, 0.69))),
        (131072, Row((8, 1, 8, 2, False, 1, True), WIDE.format(326, "f32", 20, 0.74, 0.63))),
        (262144, Row((16, 1, 8, 1, False, 0, True), FIT)),
    ),
    ("backward", 2): (
        (512, Row((1, 8, 1, 4, False, 0, False), ONE_STEP["16-bit backward"])),  # a block a row group
        (1024, Row((2, 4, 1, 3, False, 0, False), ONE_STEP["16-bit backward"])),
        (2048, Row((4, 2, 1, 3, False, 0, False), ONE_STEP["16-bit backward"])),
        (4096, Row((8, 2, 1, 1, False, 0, False), ONE_STEP["16-bit backward"])),  # (run 306's split)
        (8192, Row((16, 1, 1, 2, False, 0, False), BF16_353.format("backward", "a block a row group", "1.04", 84,
                                                                   "0.96, persistent"))),
        (16384, Row((16, 1, 1, 1, False, 0, True), FIT)),    # (... at 128, beside a ragged row's copies: spills)
        (32768, Row((16, 1, 1, 1, False, 2, False), WIDE.format(326, "bf16", 96, "1.00", 0.97))),  # a block a row
        (65536, Row((8, 1, 8, 2, True, 0, True), WIDE.format(326, "bf16", 56, 0.98, 0.92))),
        (131072, Row((16, 1, 8, 1, True, 0, True), WIDE.format(325, "bf16", 18, 0.995, 0.88))),
        (262144, Row((16, 1, 8, 1, False, 1, True), WIDE.format(325, "bf16", 3, 0.77, "the same; y and dy staged "
                                                                                      "0.65"))),
    ),
    ("backward", 4): (
        (512, Row((1, 8, 1, 4, False, 0, False), ONE_STEP["f32 backward"])),     # a block a row group
        (1024, Row((2, 4, 1, 4, False, 0, False), ONE_STEP["f32 backward"])),
        (2048, Row((2, 2, 1, 2, False, 0, False), F32_2048.format("backward", 1.02, 0.95))),
        (4096, Row((2, 4, 1, 1, False, 2, False), STAGED_F32.format("backward", "y and dy through shared memory",
                                                                    "1.01", 130, 0.94))),
        (8192, Row((4, 2, 1, 1, False, 2, False), STAGED_F32.format("backward", "y and dy through shared memory",
                                                                    "1.01", 64, 0.92))),
        (16384, Row((8, 1, 1, 1, False, 2, False), STAGED_F32.format("backward", "y and dy through shared memory",
                                                                     "1.01", 180, "0.91, clusters of 8"))),
        (32768, Row((4, 1, 8, 3, True, 0, True), WIDE.format(328, "f32", 84, 0.88, 0.79))),   # clusters of 8
        (65536, Row((8, 1, 8, 2, False, 0, True), WIDE.format(326, "f32", 44, 0.85, 0.77))),
        (131072, Row((8, 1, 8, 1, False, 2, True), WIDE.format(326, "f32", 10, 0.75, 0.71))),
        (262144, Row((16, 1, 8, 1, False, 1, True), FIT)),    # y through shared memory: 128 KB a block
    ),
}
SIZES = {"bf16": 2, "fp16": 2, "f32": 4}
# (direction, the table row's width limit) -> Row: fp16's own where the 16-bit row spills for fp16 (its conversions)
FP16 = {
    ("forward", 131072): Row((16, 1, 8, 1, True, 0, True), "the 16-bit row's 2 blocks an SM (64 registers) spill 4 "
                                                           "bytes for fp16 under NVRTC 13.0 and 13.5; 1 block (bf16's "
                                                           "0.77 of the copy, run 325), fp16 unmeasured"),
}


def choice(direction: str, width: int, dtype: str) -> Row:
    """The table row for rows of `width` elements of `dtype`."""
    if width in PACKED_WIDTHS:
        return PACKED[direction, SIZES[dtype]]
    if width <= TILE_WIDTH:
        return TILE
    limit, row = next((limit, row) for limit, row in SPLIT[direction, SIZES[dtype]] if width <= limit)
    return FP16.get((direction, limit), row) if dtype == "fp16" else row


@functools.cache
def tile_config(direction: str, width: int, dtype: str) -> SoftmaxConfig:
    """The tile kernels' config for rows of `width` (up to TILE_WIDTH: the policy's, and what packed rows fall back to
    where the rows do not fill whole packed ones)."""
    return SoftmaxConfig(direction, width, dtype, tile=True, rows_per_block=TILE.value[0])


@functools.cache
def config_for(direction: str, width: int, dtype: str, **forced) -> SoftmaxConfig:
    """The kernel a call runs (`forced`: SoftmaxConfig fields over the table's, e.g. for the benchmark's variants and
    the tests); made once a call's arguments (it is on every launch's path)."""
    row = choice(direction, width, dtype)
    if row is TILE:
        c = tile_config(direction, width, dtype)
    elif width in PACKED_WIDTHS:
        rows_per_block, blocks_per_sm, persistent = row.value
        c = SoftmaxConfig(direction, width, dtype, packed=CHUNK // width, rows_per_block=rows_per_block,
                          blocks_per_sm=blocks_per_sm, persistent=persistent)
    else:
        most, rows_per_block, cluster, blocks_per_sm, prefetch, staged, persistent = row.value
        c = SoftmaxConfig(direction, width, dtype, prefetch=prefetch, stage=staged >= 1, stage_dy=staged == 2,
                          warps_per_row=warps_for(width, most, cluster), rows_per_block=rows_per_block,
                          cluster=cluster, blocks_per_sm=blocks_per_sm, persistent=persistent)
    return over_table(c, forced)
