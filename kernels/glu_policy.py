"""The policy of the gated-activation kernels (kernels/glu_kernel.py): the piece of a row a warp takes (chunks of
256 elements), the warps a block and blocks an SM of the persistent grid. Each table row carries its evidence;
tests/test_glu.py records the choices.

The aim, as the norms' (kernels/norm_policy.py): enough bytes in flight an SM to cover the memory latency, narrow
rows in pieces no wider than they are (fewer idle lanes). Swept (benchmarks/sweep_row_splits.py glu) by direction:
16-warp blocks forward (silu's a chunk a warp, a warp a task, one each: persistent=False; gelu's two chunks, the
persistent grid), 8-warp blocks backward (16 fp32 values a lane a vector; silu's a warp a task, gelu's, with more
math a value, the persistent grid)."""
from __future__ import annotations

from dataclasses import replace

from .glu_config import GluConfig
from .op_support import Row
from .row_split import CHUNK

FIT = ("untimed: 16 fp32 values a lane a vector, ~48 KB in flight an SM; no spills (NVRTC, tests/test_glu.py); to "
       "be timed by bench_memory_bound.py")
SWEPT = ("RESULTS.md run 321 (H200, 16384 x 4096 bf16, 96 splits, the launch alone): {} of the copy (run 305's "
         "policy, 2 chunks x 8 warps x 3 blocks persistent, {})")
NARROW = Row((1, 8, 4, True), FIT)
# (direction, activation) -> ((width up to (None: any), Row((chunks, warps, blocks_per_sm, persistent))), ...)
TABLE = {("forward", "silu"): ((256, NARROW), (None, Row((1, 16, 4, False), SWEPT.format(
             "the best, a warp a task, 1.01", "0.99")))),
         ("forward", "gelu"): ((256, NARROW), (None, Row((2, 16, 2, True), SWEPT.format(
             "the best, 0.90 (silu's 0.99 so)", "0.84")))),
         ("backward", "silu"): ((256, NARROW), (None, Row((2, 8, 4, False), SWEPT.format("the best, 1.02", "0.94")))),
         ("backward", "gelu"): ((256, NARROW), (None, Row((2, 8, 3, True), SWEPT.format("the best, 0.90",
                                                                                        "the same"))))}


def config_for(activation: str, direction: str, width: int, dtype: str, **forced) -> GluConfig:
    """The kernel a call runs (`forced`: GluConfig fields over the table's)."""
    chunks, warps, blocks_per_sm, persistent = next(
        row for limit, row in TABLE[direction, "silu" if activation == "silu" else "gelu"]
        if limit is None or width <= limit).value
    chunks = max(1, min(chunks, -(-width // CHUNK)))
    c = GluConfig(activation, direction, width, dtype, chunks=chunks, warps=warps, blocks_per_sm=blocks_per_sm,
                  persistent=persistent)
    return replace(c, **forced) if forced else c
