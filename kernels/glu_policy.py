"""The policy of the gated-activation kernels (kernels/glu_kernel.py): the piece of a row a warp takes (chunks of
256 elements), the warps a block and blocks an SM of the persistent grid. Each table row carries its evidence;
tests/test_glu.py records the choices.

The aim, as the norms' (kernels/norm_policy.py): enough bytes in flight an SM to cover the memory latency, narrow
rows in pieces no wider than they are (fewer idle lanes). Swept (benchmarks/sweep_row_splits.py glu): three blocks
an SM of 8 warps (16 fp32 values a lane a vector) beat the register fit's two."""
from __future__ import annotations

from dataclasses import replace

from .glu_config import GluConfig
from .op_support import Row
from .row_split import CHUNK

FIT = ("untimed: 16 fp32 values a lane a vector, ~48 KB in flight an SM; no spills (NVRTC, tests/test_glu.py); to "
       "be timed by bench_memory_bound.py")
SWEPT = ("RESULTS.md run 305 (H200, 16384 x 4096 bf16, 36 splits): 0.99/0.94/0.85/0.91 of the copy (silu fwd/bwd, "
         "gelu fwd/bwd; 2 chunks x 8 warps x 2 blocks 0.94/0.91/0.86/0.84; the best for all four, 1 x 16 x 3, "
         "0.97/0.94/0.88/0.92, spills gelu_tanh's backward at its 40-register cap)")
# width up to (None: any) -> (chunks, warps, blocks_per_sm)
TABLE = ((256, Row((1, 8, 4), FIT)), (None, Row((2, 8, 3), SWEPT)))


def config_for(activation: str, direction: str, width: int, dtype: str, **forced) -> GluConfig:
    """The kernel a call runs (`forced`: GluConfig fields over the table's)."""
    chunks, warps, blocks_per_sm = next(row for limit, row in TABLE if limit is None or width <= limit).value
    chunks = max(1, min(chunks, -(-width // CHUNK)))
    c = GluConfig(activation, direction, width, dtype, chunks=chunks, warps=warps, blocks_per_sm=blocks_per_sm)
    return replace(c, **forced) if forced else c
