"""The policy of kernels/gemm_kernel.py's GEMMs: which options (gemm_config's MatmulConfig, MatmulFP8Config) matmul()
and matmul_fp8() run for a shape on a GPU of some SMs. The tables were measured on the H200 (MEASURED_ON); each
table's rows carry their evidence in EVIDENCE (runs of benchmarks/RESULTS.md), and tests/test_gemm_policy.py keeps a
golden record of the choices they make. TILE_RATE can be re-measured on another GPU (tkpy.kernels.tune): its rows
for that GPU, kept in tkpy's disk cache, then stand in for the shipped ones there.

A task is a BM x block_n tile of C. The tile width is block_n_for's: the width with the least modelled time, waves
of tasks over the SMs times a tile's work over the rate a full machine of such tiles sustains (TILE_RATE). Narrow
tiles fill the SMs when there are few tasks, wide ones do more per byte. The input stages are as many as fit beside
the output stages in shared memory (STAGES). matmul() splits K only when asked (split_k=S), then in SPLIT_BLOCK_N's
tiles unless block_n says otherwise.
"""
from __future__ import annotations

from tkpy.tune import tuned_rows

from .tensor_layout import cdiv

# The GPU the tables below were measured on (TILE_RATE: tkpy.kernels.tune re-measures it on another, whose rows then
# stand in for these there: tuned_rows).
MEASURED_ON = "NVIDIA H200"
BM = 128                            # rows of C per task: two consumer warpgroups of 64
WIDTHS = (256, 128, 64)             # the tile widths block_n of the bf16/fp16 GEMM, widest first
FP8_WIDTHS = (256, 128)             # ... and of the fp8 GEMM
# TFLOP/s of each width with every SM busy (4096^3 bf16): the per-tile cost of block_n_for's model, for the fp8
# GEMM too (its widths' rates not measured apart).
TILE_RATE = {256: 662, 128: 579, 64: 475}
# A cold cache's first calls (tk.QuickFirstCall): tiles this wide until the tuned width has compiled in the background.
QUICK_BLOCK_N = 64
# Input stages per tile width, as many as fit beside the 32 KB of two output stages in the 227 KB of shared memory
# (8 is also the template's most). bf16/fp16: a stage holds A's 128 x 64 slice, 16 KB, and B's 64 x block_n one:
# 4 x 48 KB, 6 x 32 KB, 8 x 24 KB. fp8: A's 128 x 128 slice, 16 KB, and B's block_n x 128 one: 4 x 48 KB, 6 x 32 KB.
STAGES = {256: 4, 128: 6, 64: 8}
FP8_STAGES = {256: 4, 128: 6}
OUTPUT_STAGES = 2                   # pieces of C in shared memory at a time, TMA-stored while the next tile runs
SPLIT_BLOCK_N = 256                 # the tile width of a split-K product unless block_n is given
# Variants that measured slower and left the kernel (RESULTS.md keeps them).
SLOWER_VARIANTS = {
    "the quick first-call kernel at NVRTC's fast-compile level (-Ofc=mid)": "RESULTS.md runs 299-300: 24 "
        "against 490 TFLOP/s at 4096^3",
    "the epilogue's masked stores straight from the registers (the LCF template)": "RESULTS.md runs 19 and 63: "
        "388 / 664 / 644 / 729 TFLOP/s against 435 / 718 / 684 / 726 at 2048^3, 4096^3, 8192^3 and 2048 x 8192 x "
        "8192 (run 19); 0.755x cuBLAS against 0.897x at 1024^3 in 64-wide tiles (run 63)",
    "clusters of two column-adjacent blocks sharing A by multicast": "RESULTS.md run 27: slower at every shape "
        "but one (2048^3 in 128-wide tiles, 604 against 580 TFLOP/s)",
    "clusters of two row-adjacent blocks multicasting halves of B": "RESULTS.md run 14: 400 / 436 / 406 TFLOP/s "
        "against 600 / 687 / 601 at 4096^3, 8192^3 and 2048 x 8192 x 8192",
    "split-K chosen by a cost model": "RESULTS.md run 19: every split slower than none (128 x 8192 x 8192 215 "
        "against 246 TFLOP/s, 256 x 4096 x 8192 262 against 271)",
}
# The measurements behind the tables, row by row (table -> key -> evidence; a scalar setting's, one string).
EVIDENCE = {
    "WIDTHS": "RESULTS.md run 21: the widths side by side, e.g. 1024^3 349 / 271 / 167 TFLOP/s in 64- / 128- / "
              "256-wide tiles, 4096^3 475 / 579 / 662",
    "FP8_WIDTHS": "RESULTS.md run 27: 4096^3 e4m3 in 256-wide tiles 1214 TFLOP/s, 1.07x torch._scaled_mm; 128-wide "
                  "tiles not timed apart",
    "QUICK_BLOCK_N": "RESULTS.md run 287: 4096^3 under NVRTC 13.0 on the H200 host: 64-wide tiles compile in 0.14 s "
                     "at 0.71x the 256-wide kernel's speed (0.46 s), 128-wide in 0.27 s at 0.93x",
    "TILE_RATE": {256: "RESULTS.md run 21: 4096^3 in 256-wide tiles, 662 TFLOP/s",
                  128: "RESULTS.md run 21: 4096^3 in 128-wide tiles, 579 TFLOP/s",
                  64: "RESULTS.md run 21: 4096^3 in 64-wide tiles, 475 TFLOP/s"},
    "STAGES": {256: "shared memory: the most that fit (no run times fewer)",
               128: "shared memory: the most that fit (no run times fewer)",
               64: "RESULTS.md run 63: 1024^3 in 64-wide tiles, 8 stages 0.897x cuBLAS, 4 stages 0.852x, 6 0.838x"},
    "FP8_STAGES": {256: "shared memory: the most that fit (no run times fewer)",
                   128: "shared memory: the most that fit (no run times fewer)"},
    "OUTPUT_STAGES": "RESULTS.md runs 19 and 63: 3 input + 4 output stages against 4 + 2 level at 2048^3 and 4096^3 "
                     "(438 / 435, 715 / 718 TFLOP/s), behind at 8192^3 (674 / 684), ahead at 2048 x 8192 x 8192 "
                     "(758 / 726; run 19); 1 output stage 0.894x cuBLAS against 0.897x at 1024^3 (run 63)",
    "SPLIT_BLOCK_N": "RESULTS.md run 19: split-K at 128 x 8192 x 8192, 2 splits in 128-wide tiles 215 TFLOP/s, 4 "
                     "in 256-wide 202, 8 in 256-wide 182 (none faster than no split)",
}


def block_n_for(m: int, n: int, sms: int, widths: tuple = WIDTHS) -> int:
    """The tile width of `widths` with the least modelled time for an M x N output on `sms` SMs: waves of tasks
    over the SMs, times one tile's work (proportional to its width) over the rate a full machine of such tiles
    sustains (TILE_RATE); ties to the wider. E.g. on 132 SMs: 1024^3 -> 64 (64 tiles of 128 x 64 in one wave,
    against 16 of 256 columns); 1024 x 3072 -> 256 (96 tiles in one wave beat 384 narrow ones in three);
    4096^3 -> 256. The rates are those tuned on the GPU at hand where tkpy.kernels.tune measured them."""
    rates = tuned_rows("gemm.TILE_RATE", TILE_RATE)

    def time(bn):
        return cdiv(cdiv(m, BM) * cdiv(n, bn), sms) * bn / rates[bn]
    return min(widths, key=lambda bn: (time(bn), -bn))
