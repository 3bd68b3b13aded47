"""The policy of the cross-entropy kernels (kernels/cross_entropy_kernel.py): how a row of each vocabulary size and
dtype is split (warps a row, rows a block, blocks a cluster), the blocks an SM, whether the next row's logits load a
row ahead; the backward's pieces; the mean's prologue (warps a block, targets a warp loads at a time). Each table row
carries its evidence; tests/test_cross_entropy.py keeps a golden record of the choices
(tests/golden/cross_entropy_policy.json).

The aim, as the norms' (kernels/norm_policy.py): the row in one pass over memory, so that the logits are read once,
with as many bytes in flight an SM as cover the memory's latency. Swept on the H200 (RESULTS.md run 274): few warps a
row, each lane holding up to 64 values, many rows a block and several blocks an SM win over wide blocks of 16-value
pieces, and clusters (of 8 blocks) only from 64k classes (Llama 3's 128k, Gemma's 256k: 64 values a lane, without
room for the prefetch where the gradient is written). The prefetch (the next row's logits in their dtype while this
row reduces) keeps loads in flight through the two reductions a row; fp32 logits take twice its registers (their
table is the register fit's, to be swept), and weights with smoothing hold the weights' piece beside the row's.
"""
from __future__ import annotations

from dataclasses import replace

from .cross_entropy_config import CrossEntropyConfig, GradScaleConfig, PrologueConfig
from .op_support import Row
from .row_split import CHUNK, over_table, warps_for


FIT = ("register fit, unmeasured: the register cap of this many blocks an SM holds the variant with smoothing, fp32 "
       "weights (to 131072 classes) and the gradient without spills (NVRTC, tests/test_cross_entropy.py); to be timed "
       "by bench_memory_bound.py")
SWEPT = ("RESULTS.md run 274 (H200, mean, 2^26 logits): the best of 4-60 splits for the loss alone and with the "
         "gradient together ({}; the former table's {})")
# classes up to -> (most warps a row, rows_per_block, cluster, blocks_per_sm, prefetch, stages: the next rows
# through shared memory instead, CrossEntropyConfig.stages), per logits dtype ("16-bit":
# bf16 and fp16, whose prefetch takes half the registers); a row takes as many of its warps as cover it in pieces of
# about row_split.PIECE elements (row_split.warps_for: fewer for a vocabulary below the row's limit). Swept: few
# warps a row, each holding up to 64 values a lane, and no clusters below 64k classes beat the 16-value pieces of
# wide blocks and clusters by 10-40% (more bytes in flight a warp, fewer barriers a row). LOSS_ONLY: the prefetch
# without the gradient only (with it the prefetch has no registers).
STAGED_4096 = ("RESULTS.md run 313 (H200, mean, 2^26 logits): the logits 2 rows ahead through shared memory "
               "(stages) at 3 blocks an SM, the best of 104 splits for the loss alone and with the gradient together "
               "(0.73/0.86 of the copy; run 274's register prefetch at 4 blocks an SM 0.71/0.81 in the same run)")
SWEPT_F32 = SWEPT.replace("run 274 (H200,", "run 275 (H200, fp32,")
LOSS_ONLY = "loss only"
FORWARD = {
    "16-bit": (
        (512, Row((1, 16, 1, 2, True, 0), SWEPT.format("0.68/0.82 of the copy", "0.66/0.76"))),   # a warp a row
        (1024, Row((1, 8, 1, 3, True, 0), SWEPT.format("0.83/0.89", "0.64/0.72"))),
        (2048, Row((1, 4, 1, 4, True, 0), SWEPT.format("0.86/0.88", "0.64/0.70"))),               # 64 values a lane
        (4096, Row((2, 2, 1, 3, False, 2), STAGED_4096)),                  # 2 rows ahead through shared memory
        (8192, Row((4, 1, 1, 3, True, 0), SWEPT.format("0.75/0.83", "0.58/0.62"))),
        (16384, Row((8, 1, 1, 2, True, 0), SWEPT.format("0.70/0.76", "0.28/0.35"))),
        (32768, Row((8, 1, 2, 2, True, 0), SWEPT.format("0.62/0.70", "0.25/0.32"))),
        (65536, Row((4, 1, 8, 3, True, 0), SWEPT.format("0.59/0.66", "0.22/0.29"))),             # clusters of 8
        # (the prefetch, 0.87/0.94, spills under NVRTC 13.x)
        (131072, Row((8, 1, 8, 2, False, 0), SWEPT.format("0.74/0.82 of a slower copy", "0.55/0.63"))),
        (262144, Row((16, 1, 8, 1, LOSS_ONLY, 0), SWEPT.format("0.76/0.65", "0.66/0.65"))),     # 64 values a lane
    ),
    # fp32 logits (RESULTS.md run 275, swept at 1024, 4096, 16384 and 65536 classes): their prefetch takes twice
    # the registers, and without it more blocks an SM win
    "f32": (
        (1024, Row((1, 4, 1, 4, True, 0), SWEPT_F32.format("0.99/0.90", "0.95/0.76"))),
        (4096, Row((2, 2, 1, 2, False, 0), SWEPT_F32.format("0.98/0.86", "0.85/0.69"))),
        (16384, Row((4, 1, 2, 4, False, 0), SWEPT_F32.format("0.99/0.82", "0.49/0.47"))),
        (65536, Row((4, 1, 8, 4, False, 0), SWEPT_F32.format("1.50/1.19 of a slower copy", "0.61/0.57"))),
        (131072, Row((16, 1, 8, 1, False, 0), FIT)),  # 32 fp32 values a lane and as many ahead: past the cap
        (262144, Row((16, 1, 8, 1, False, 0), FIT)),
    ),
}
# Weights with smoothing hold the weights' piece in registers beside the row's (at most 32 values a lane), one block
# an SM: the register fit's 16-value pieces, the prefetch up to WEIGHTED_PREFETCH classes (16-bit logits; fp32's
# from 8192 classes on: 32 fp32 values a lane and as many ahead spill at 8 warps).
_WEIGHTED_16_BIT = (
    (512, Row((1, 8, 1, 2, True, 0), FIT)),           # a warp a row (up to 16 values a lane), 8 rows a block
    (1024, Row((2, 4, 1, 2, True, 0), FIT)),
    (2048, Row((4, 2, 1, 2, True, 0), FIT)),
    (4096, Row((8, 1, 1, 2, True, 0), FIT)),
    (8192, Row((8, 1, 1, 2, True, 0), FIT)),          # 32 values a lane (16 warps: ptxas took 64 registers, spilled)
    (16384, Row((16, 1, 2, 1, True, 0), FIT)),        # clusters: 16 warps of 2, 4 or 8 blocks a row
    (32768, Row((16, 1, 4, 1, True, 0), FIT)),
    (65536, Row((16, 1, 8, 1, True, 0), FIT)),
    (131072, Row((16, 1, 8, 1, True, 0), FIT)),       # 32 values a lane
    (262144, Row((16, 1, 8, 1, False, 0), FIT)),      # (refused: cross_entropy_config.WEIGHTED_SMOOTHING_CLASSES)
)
_WEIGHTED_F32 = {8192: Row((16, 1, 1, 1, True, 0), FIT), 131072: Row((16, 1, 8, 1, False, 0), FIT)}   # fp32's others
WEIGHTED_SMOOTHING = {
    "16-bit": _WEIGHTED_16_BIT,
    "f32": tuple((limit, _WEIGHTED_F32.get(limit, row)) for limit, row in _WEIGHTED_16_BIT),
}
FULL_LANE = 48              # smoothing or weights where a lane holds more values than this: at most
FULL_LANE_WARPS = 8         # this many warps an SM (255 registers a thread), the prefetch only within them (at the
                            # plain kernel's 128-register cap their sums and weights spill 12-104 bytes, NVRTC 13.x)
WEIGHTED_PREFETCH = 65536    # weights with smoothing: one block an SM, and past this many classes no registers for
                             # the prefetch (spills at 131072, NVRTC: the register fit's evidence)
# The backward, an elementwise pass: (chunks of 256 elements a warp's piece, warps, blocks_per_sm).
BACKWARD = Row((4, 8, 2), "register fit, unmeasured: 32 fp32 values a lane, 8 warps x 2 blocks x 16 KB in flight "
                          "an SM; to be timed by bench_memory_bound.py")
# The mean's prologue: (warps, targets a warp loads at a time). 128 rows a block step: up to 131072 rows one step a
# block; 10M rows (10 classes) over MAX_PARTIALS blocks, 16 loads in flight a warp, 8 warps a block.
PROLOGUE = Row((8, 16), "unmeasured: scalar target loads in flight (16 a warp, 8192 warps at 1024 blocks); to be "
                        "timed by bench_memory_bound.py")


def forward_split(width: int, dtype: str, weighted_smoothing: bool = False) -> Row:
    """The table row for rows of `width` classes of `dtype` (of the weighted smoothing's table)."""
    table = (WEIGHTED_SMOOTHING if weighted_smoothing else FORWARD)["f32" if dtype == "f32" else "16-bit"]
    return next(row for limit, row in table if width <= limit)


def forward_config(width: int, dtype: str, reduction: str, grad: bool, smoothing: bool, weight: str | None = None,
                   **forced) -> CrossEntropyConfig:
    """The forward kernel a call runs: what it computes and the table's split for its width (`forced`:
    CrossEntropyConfig fields over the table's, e.g. the benchmark's variants)."""
    weighted_smoothing = bool(weight and smoothing)
    split = forward_split(width, dtype, weighted_smoothing).value
    most_warps, rows_per_block, cluster, blocks_per_sm, prefetch, stages = split
    prefetch = (not grad) if prefetch == LOSS_ONLY else prefetch
    if weighted_smoothing:          # the weights' piece (and w x) in registers beside the row's
        blocks_per_sm = 1
        prefetch = prefetch and width <= WEIGHTED_PREFETCH
    c = CrossEntropyConfig(width, dtype, reduction, grad, smoothing, weight, prefetch, stages,
                           warps_per_row=warps_for(width, most_warps, cluster),
                           rows_per_block=rows_per_block, cluster=cluster, blocks_per_sm=blocks_per_sm)
    if (smoothing or weight) and c.values_per_lane > FULL_LANE:     # (see FULL_LANE_WARPS)
        blocks = max(1, min(c.blocks_per_sm, FULL_LANE_WARPS // c.warps))
        c = replace(c, blocks_per_sm=blocks, prefetch=c.prefetch and c.warps * blocks <= FULL_LANE_WARPS)
    return over_table(c, forced)


def prologue_config(reduction: str, weight: str | None = None, **forced) -> PrologueConfig:
    """The kernel before the forward of a reduced loss: the mean's divisor (and the ticket), or for the sum the
    ticket alone (`forced`: PrologueConfig fields over the table's)."""
    if reduction != "mean":
        return PrologueConfig(False, warps=1, unroll=1)
    warps, unroll = PROLOGUE.value
    c = PrologueConfig(True, weight, warps, unroll)
    return replace(c, **forced) if forced else c


def backward_config(width: int, dtype: str, per_row: bool, factor: str | None = None, **forced) -> GradScaleConfig:
    """The backward kernel a call runs, its loss gradient of dtype `factor` (None: the gradient's dtype, the loss's
    for autograd; `forced`: GradScaleConfig fields over the table's)."""
    chunks, warps, blocks_per_sm = BACKWARD.value
    c = GradScaleConfig(width, dtype, per_row, factor or dtype, chunks=max(1, min(chunks, -(-width // CHUNK))),
                        warps=warps, blocks_per_sm=blocks_per_sm)
    return replace(c, **forced) if forced else c
