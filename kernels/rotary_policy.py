"""The policy of the rotary kernel (kernels/rotary_kernel.py): the chunks of 256 elements a warp moves at a time for
each position (a piece of a position's row, or that many groups of heads), the positions it takes at a time, the
warps a block and blocks an SM of the persistent grid. Each table row carries its evidence; tests/test_rotary.py
records the choices.

The aim: 16-byte loads in flight to cover the memory latency (~30 KB an SM at 3.5 TB/s; here 4 chunks of 512 bytes
a warp, 32 warps an SM: 64 KB) in few registers (x and rotate_half(x) in packed 16-bit pairs, 4 + 4 registers a
chunk, and a position's tables, 8 + 8 fp32 values: ~60 registers at 4 chunks, the cap of 32 warps an SM being 64);
narrow rows (a decoding step's few heads) take two positions at a time instead. Wide rows take a warp a position,
one each (no persistent loop: measured faster, its warps' loads all in flight at once). Full occupancy (1 chunk, 16
warps x 4 blocks: 32 registers, no spills) keeps one load a warp in flight, 32 KB an SM: bench_memory_bound.py
--variants times it beside the table's choice."""
from __future__ import annotations

from dataclasses import replace

from .op_support import Row
from .rotary_config import CHUNK, RotaryConfig

FIT = "register fit, unmeasured: no spills (NVRTC, tests/test_rotary.py); to be timed by bench_memory_bound.py"
ONE_STEP = ("RESULTS.md run 320 (H200, q (16384, 32, 128) and k (16384, 8, 128) bf16): a warp a position, one each "
            "(persistent=False), 0.99/0.96 of the copy forward/backward (the persistent grid's 0.90/0.91; two "
            "positions a warp spill)")
# chunks of the wider of q's and k's rows, up to (None: any) -> (chunks, positions, warps, blocks_per_sm, persistent)
TABLE = ((1, Row((1, 2, 8, 4, True), FIT)), (2, Row((2, 1, 8, 4, True), FIT)),
         (None, Row((4, 1, 8, 4, False), ONE_STEP)))
INTERPRETER_SMS = 2


def config_for(head_dim: int, rotary_dim: int, heads_q: int, heads_k: int, dtype: str, table: str,
               interleaved: bool, inverse: bool = False, **forced) -> RotaryConfig:
    """The kernel a call runs (`forced`: RotaryConfig fields over the table's)."""
    wide = -(-max(heads_q, heads_k) * head_dim // CHUNK)
    chunks, positions, warps, blocks_per_sm, persistent = next(
        row for limit, row in TABLE if limit is None or wide <= limit).value
    c = RotaryConfig(head_dim, rotary_dim, heads_q, heads_k, dtype, table, interleaved, inverse, chunks, positions,
                     warps, blocks_per_sm, persistent)
    return replace(c, **forced) if forced else c


def grid_for(c: RotaryConfig, rows: int, resident: int) -> int:
    """Blocks of the persistent grid: enough warps for every group of positions, at most `resident` blocks (not
    c.persistent: no more than that)."""
    tasks = -(-rows // c.positions)
    blocks = -(-tasks // c.warps)
    return max(1, min(blocks, resident) if c.persistent else blocks)
