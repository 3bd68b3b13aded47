"""The policy of the gated-activation kernels (kernels/glu_kernel.py): the piece of a row a warp takes (chunks of
256 elements), the warps a block and blocks an SM of the persistent grid. Each table row carries its evidence;
tests/test_glu.py records the choices.

The aim, as the norms' (kernels/norm_policy.py): 16 fp32 values a lane a vector (the backward holds gate, up, dout
and a temporary), enough bytes in flight an SM to cover the memory latency (8 warps x 2 blocks x 3 vectors x 16 B x
512 elements ~ 48 KB), narrow rows in pieces no wider than they are (fewer idle lanes)."""
from __future__ import annotations

from dataclasses import replace

from .glu_config import GluConfig
from .op_support import Row
from .row_split import CHUNK

FIT = ("untimed: 16 fp32 values a lane a vector, ~48 KB in flight an SM; no spills (NVRTC, tests/test_glu.py); to "
       "be timed by bench_memory_bound.py")
# width up to (None: any) -> (chunks, warps, blocks_per_sm)
TABLE = ((256, Row((1, 8, 4), FIT)), (None, Row((2, 8, 2), FIT)))


def config_for(activation: str, direction: str, width: int, dtype: str, **forced) -> GluConfig:
    """The kernel a call runs (`forced`: GluConfig fields over the table's)."""
    chunks, warps, blocks_per_sm = next(row for limit, row in TABLE if limit is None or width <= limit).value
    chunks = max(1, min(chunks, -(-width // CHUNK)))
    c = GluConfig(activation, direction, width, dtype, chunks=chunks, warps=warps, blocks_per_sm=blocks_per_sm)
    return replace(c, **forced) if forced else c
