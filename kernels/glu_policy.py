"""The policy of the gated-activation kernels (kernels/glu_kernel.py): the piece of a row a warp takes (chunks of
256 elements), the warps a block and blocks an SM of the persistent grid. Each table row carries its evidence;
tests/test_glu.py records the choices.

The aim, as the norms' (kernels/norm_policy.py): enough bytes in flight an SM to cover the memory latency, narrow
rows in pieces no wider than they are (fewer idle lanes). Swept (benchmarks/sweep_row_splits.py glu) by direction:
forward, two blocks an SM of 16 warps (the persistent grid); backward, three blocks an SM of 8 warps (16 fp32 values
a lane a vector), a warp a task, one each (persistent=False)."""
from __future__ import annotations

from dataclasses import replace

from .glu_config import GluConfig
from .op_support import Row
from .row_split import CHUNK

FIT = ("untimed: 16 fp32 values a lane a vector, ~48 KB in flight an SM; no spills (NVRTC, tests/test_glu.py); to "
       "be timed by bench_memory_bound.py")
SWEPT = ("RESULTS.md run 321 (H200, 16384 x 4096 bf16, 96 splits): the best for silu and gelu together, {} of the "
         "copy (silu, gelu; run 305's policy, 2 chunks x 8 warps x 3 blocks persistent, {})")
NARROW = Row((1, 8, 4, True), FIT)
# direction -> ((width up to (None: any), Row((chunks, warps, blocks_per_sm, persistent))), ...)
TABLE = {"forward": ((256, NARROW), (None, Row((2, 16, 2, True), SWEPT.format("0.99/0.90", "0.99/0.84")))),
         "backward": ((256, NARROW), (None, Row((2, 8, 3, False), SWEPT.format("1.00/0.89", "0.94/0.90"))))}


def config_for(activation: str, direction: str, width: int, dtype: str, **forced) -> GluConfig:
    """The kernel a call runs (`forced`: GluConfig fields over the table's)."""
    chunks, warps, blocks_per_sm, persistent = next(
        row for limit, row in TABLE[direction] if limit is None or width <= limit).value
    chunks = max(1, min(chunks, -(-width // CHUNK)))
    c = GluConfig(activation, direction, width, dtype, chunks=chunks, warps=warps, blocks_per_sm=blocks_per_sm,
                  persistent=persistent)
    return replace(c, **forced) if forced else c
