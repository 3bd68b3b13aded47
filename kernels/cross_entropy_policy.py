"""The policy of the cross-entropy kernels (kernels/cross_entropy_kernel.py): how a row of each vocabulary size and
dtype is split (warps a row, rows a block, blocks a cluster), the blocks an SM, whether the next row's logits load a
row ahead; the backward's pieces; the mean's prologue (warps a block, targets a warp loads at a time). Each table row
carries its evidence; tests/test_cross_entropy.py keeps a golden record of the choices
(tests/golden/cross_entropy_policy.json).

The aim, as the norms' (kernels/norm_policy.py): a row's piece in each lane at most 16 fp32 values up to 64k classes
(a block of 16 warps holds 8192, clusters of 2-8 blocks the wider rows), the row in one pass over memory, so that the
logits are read once; wider still (128k, 256k: Llama 3's, Gemma's vocabularies) clusters of 8 blocks of 16 warps
hold 32 and 64 values a lane, the latter without room for the prefetch. The prefetch (the next row's logits in their
dtype while this row reduces) keeps loads in flight through the two reductions a row; fp32 logits take twice its
registers.
"""
from __future__ import annotations

from dataclasses import replace

from .cross_entropy_config import CrossEntropyConfig, GradScaleConfig, PrologueConfig
from .op_support import Row
from .row_split import CHUNK, warps_for


FIT = ("register fit, unmeasured: the register cap of this many blocks an SM holds the variant with smoothing, fp32 "
       "weights (to 131072 classes) and the gradient without spills (NVRTC, tests/test_cross_entropy.py); to be timed "
       "by bench_memory_bound.py")
WIDE = (16, 1, 8, 1, True)                  # a cluster of 8 blocks of 16 warps a row
# classes up to -> (most warps a row, rows_per_block, cluster, blocks_per_sm, prefetch), per logits dtype ("16-bit":
# bf16 and fp16, whose prefetch takes half the registers); a row takes as many of its warps as cover it in pieces of
# about row_split.PIECE elements (row_split.warps_for: fewer for a vocabulary below the row's limit)
FORWARD = {
    "16-bit": (
        (512, Row((1, 8, 1, 2, True), FIT)),       # a warp a row (up to 16 values a lane), 8 rows a block
        (1024, Row((2, 4, 1, 2, True), FIT)),
        (2048, Row((4, 2, 1, 2, True), FIT)),
        (4096, Row((8, 1, 1, 2, True), FIT)),
        (8192, Row((8, 1, 1, 2, True), FIT)),      # 32 values a lane (16 warps: ptxas took 64 registers, and spilled)
        (16384, Row((16, 1, 2, 1, True), FIT)),    # clusters: 16 warps of 2, 4 or 8 blocks a row
        (32768, Row((16, 1, 4, 1, True), FIT)),
        (65536, Row(WIDE, FIT)),
        (131072, Row(WIDE, FIT)),                  # 32 values a lane
        (262144, Row((16, 1, 8, 1, False), FIT)),  # 64 values a lane: no registers for the prefetch
    ),
}
FORWARD["f32"] = FORWARD["16-bit"][:4] + (
    (8192, Row((16, 1, 1, 1, True), FIT)),         # (8 warps: 32 fp32 values a lane and as many ahead spill)
) + FORWARD["16-bit"][5:-2] + (
    (131072, Row((16, 1, 8, 1, False), FIT)),      # 32 fp32 values a lane and as many ahead: past the cap
    (262144, Row((16, 1, 8, 1, False), FIT)),
)
WEIGHTED_PREFETCH = 65536    # weights with smoothing: one block an SM, and past this many classes no registers for
                             # the prefetch (spills at 131072, NVRTC: the register fit's evidence)
# The backward, an elementwise pass: (chunks of 256 elements a warp's piece, warps, blocks_per_sm).
BACKWARD = Row((4, 8, 2), "register fit, unmeasured: 32 fp32 values a lane, 8 warps x 2 blocks x 16 KB in flight "
                          "an SM; to be timed by bench_memory_bound.py")
# The mean's prologue: (warps, targets a warp loads at a time). 128 rows a block step: up to 131072 rows one step a
# block; 10M rows (10 classes) over MAX_PARTIALS blocks, 16 loads in flight a warp, 8 warps a block.
PROLOGUE = Row((8, 16), "unmeasured: scalar target loads in flight (16 a warp, 8192 warps at 1024 blocks); to be "
                        "timed by bench_memory_bound.py")


def forward_split(width: int, dtype: str) -> Row:
    """The table row for rows of `width` classes of `dtype`."""
    return next(row for limit, row in FORWARD["f32" if dtype == "f32" else "16-bit"] if width <= limit)


def forward_config(width: int, dtype: str, reduction: str, grad: bool, smoothing: bool, weight: str | None = None,
                   **forced) -> CrossEntropyConfig:
    """The forward kernel a call runs: what it computes and the table's split for its width (`forced`:
    CrossEntropyConfig fields over the table's, e.g. the benchmark's variants)."""
    most_warps, rows_per_block, cluster, blocks_per_sm, prefetch = forward_split(width, dtype).value
    if weight and smoothing:        # the weights' piece (and w x) in registers beside the row's
        blocks_per_sm = 1
        prefetch = prefetch and width <= WEIGHTED_PREFETCH
    c = CrossEntropyConfig(width, dtype, reduction, grad, smoothing, weight, prefetch,
                           warps_per_row=warps_for(width, most_warps, cluster),
                           rows_per_block=rows_per_block, cluster=cluster, blocks_per_sm=blocks_per_sm)
    return replace(c, **forced) if forced else c


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
