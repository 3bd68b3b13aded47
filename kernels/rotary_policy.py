"""The policy of the rotary kernel (kernels/rotary_kernel.py): the piece of a row a warp takes (chunks of 256
elements), the positions it takes at a time, the warps a block and blocks an SM of the persistent grid. Each table
row carries its evidence; tests/test_rotary.py records the choices.

The aim: 16-byte loads in flight to cover the memory latency (~30 KB an SM at 3.5 TB/s; here 4 chunks of 512 bytes
a warp, 32 warps an SM: 64 KB) in few registers (a piece is x and rotate_half(x) in packed 16-bit pairs, 4 + 4
registers a chunk, and the tables' 8 + 8 fp32 values a position: ~60 registers at 4 chunks, 32 warps an SM); narrow
rows (a decoding step's few heads) take more positions at a time instead of wider pieces."""
from __future__ import annotations

from dataclasses import dataclass, replace

from .rotary_config import CHUNK, RotaryConfig, period


@dataclass(frozen=True)
class Row:
    """A policy table row: (chunks, positions, warps, blocks_per_sm) and why."""

    value: tuple
    evidence: str


FIT = "register fit, unmeasured: no spills (NVRTC, tests/test_rotary.py); to be timed by bench_memory_bound.py"
# chunks of the narrower of q's and k's rows, up to (None: any) -> the split
TABLE = ((1, Row((1, 4, 8, 4), FIT)), (2, Row((2, 2, 8, 4), FIT)), (None, Row((4, 1, 8, 4), FIT)))
INTERPRETER_SMS = 2


def config_for(head_dim: int, rotary_dim: int, heads_q: int, heads_k: int, dtype: str, table: str,
               interleaved: bool, inverse: bool = False, **forced) -> RotaryConfig:
    """The kernel a call runs (`forced`: RotaryConfig fields over the table's). Head dims that do not divide 256
    take pieces of whole periods (tables of several chunks a position) one position at a time."""
    narrow = -(-min(heads_q, heads_k) * head_dim // CHUNK)
    chunks, positions, warps, blocks_per_sm = next(row for limit, row in TABLE if limit is None or narrow <= limit).value
    step = period(head_dim)
    c = RotaryConfig(head_dim, rotary_dim, heads_q, heads_k, dtype, table, interleaved, inverse,
                     -(-chunks // step) * step, positions if step == 1 else 1, warps, blocks_per_sm)
    return replace(c, **forced) if forced else c


def grid_for(c: RotaryConfig, rows: int, resident: int) -> int:
    """Blocks of the persistent grid: enough warps for every group of positions, at most `resident` blocks."""
    tasks = -(-rows // c.positions)
    return max(1, min(-(-tasks // c.warps), resident))
