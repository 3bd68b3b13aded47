"""The config of kernels/rotary_kernel.py's kernel: RotaryConfig, a frozen dataclass of what one rotary kernel
computes (the layout, the head dim and rotary dim, q's and k's head counts, the dtypes, the direction) and how its
warps take the work (kernels/rotary_policy.py chooses that part), which checks itself and derives the kernel's name."""
from __future__ import annotations

import math
from dataclasses import dataclass

DTYPES = ("bf16", "fp16")
TABLE_DTYPES = ("bf16", "fp16", "f32")
CHUNK = 256                                 # a contig vector's chunk: 8 elements a lane, one 16-byte copy
MAX_POSITIONS = 8
MAX_WARPS = 32


def period(head_dim: int) -> int:
    """Chunks after which heads of head_dim start a chunk again: head_dim / gcd(head_dim, 256) (1 when it divides
    256): a piece holds a multiple of them."""
    return head_dim // math.gcd(head_dim, CHUNK)


@dataclass(frozen=True)
class RotaryConfig:
    """One rotary kernel: q and k (heads_q and heads_k heads of head_dim elements a position, rows of heads x
    head_dim) rotated over each head's first rotary_dim elements by the angles whose cos and sin tables (rotary_dim
    / 2 angles a position, of `table` dtype) it reads, the rest passed through; `interleaved`: GPT-J's pairs (2i, 2i +
    1), else GPT-NeoX's halves (i, i + rotary_dim / 2); `inverse`: by -theta (the backward).

    How: a warp takes `positions` rows of q and then the same rows of k at a time, each in pieces of up to `chunks`
    chunks of 256 elements (contig vectors: 16-byte copies; whole heads, so a multiple of `period` chunks), the
    tables' rows read once a position into registers; the `warps` warps of each of the blocks (`blocks_per_sm` an
    SM) loop over the positions, a persistent grid."""

    head_dim: int
    rotary_dim: int
    heads_q: int
    heads_k: int
    dtype: str = "bf16"
    table: str = "f32"
    interleaved: bool = False
    inverse: bool = False
    chunks: int = 4
    positions: int = 1
    warps: int = 4
    blocks_per_sm: int = 4

    def __post_init__(self) -> None:
        def fail(what: str):
            raise ValueError(f"RotaryConfig: {what}")
        if self.dtype not in DTYPES:
            fail(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.table not in TABLE_DTYPES:
            fail(f"table must be one of {TABLE_DTYPES}, got {self.table!r}")
        if not isinstance(self.head_dim, int) or self.head_dim % 16 or not 16 <= self.head_dim <= 256:
            fail(f"head_dim must be a multiple of 16 up to 256, got {self.head_dim!r}")
        if not isinstance(self.rotary_dim, int) or not 0 < self.rotary_dim <= self.head_dim or self.rotary_dim % 16:
            fail(f"rotary_dim must be a multiple of 16 up to head_dim {self.head_dim}, got {self.rotary_dim!r}")
        for option, most in (("heads_q", None), ("heads_k", None), ("positions", MAX_POSITIONS),
                             ("warps", MAX_WARPS), ("blocks_per_sm", 16)):
            value = getattr(self, option)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1 or most and value > most:
                fail(f"{option} must be a positive int{f' up to {most}' if most else ''}, got {value!r}")
        if not isinstance(self.chunks, int) or self.chunks < 1 or self.chunks % self.period:
            fail(f"chunks must be a positive multiple of {self.period} (head_dim {self.head_dim}: a piece holds whole "
                 f"heads), got {self.chunks!r}")

    @property
    def period(self) -> int:
        return period(self.head_dim)

    @property
    def angles(self) -> int:
        """Columns of the tables: an angle per pair."""
        return self.rotary_dim // 2

    def width(self, heads: int) -> int:
        """Elements of a row (a position) of a tensor of `heads` heads."""
        return heads * self.head_dim

    def piece(self, heads: int) -> int:
        """Elements a warp takes of such a row at a time: `chunks` chunks, fewer for a narrower row (whole periods)."""
        need = -(-self.width(heads) // CHUNK)
        return min(self.chunks, -(-need // self.period) * self.period) * CHUNK

    def pieces(self, heads: int) -> int:
        """Pieces a row: the last one masked where the row is not a multiple of the piece."""
        return -(-self.width(heads) // self.piece(heads))

    @property
    def name(self) -> str:
        return (f"rotary_{'gptj' if self.interleaved else 'neox'}{'_inv' if self.inverse else ''}_{self.dtype}_"
                f"t{self.table}_d{self.head_dim}r{self.rotary_dim}_h{self.heads_q}k{self.heads_k}_"
                f"c{self.chunks}p{self.positions}w{self.warps}b{self.blocks_per_sm}")
