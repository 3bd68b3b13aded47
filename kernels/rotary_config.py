"""The config of kernels/rotary_kernel.py's kernel: RotaryConfig, a frozen dataclass of what one rotary kernel
computes (the layout, the head dim and rotary dim, q's and k's head counts, the dtypes, the direction) and how its
warps take the work (kernels/rotary_policy.py chooses that part), which checks itself and derives the kernel's name."""
from __future__ import annotations

from dataclasses import dataclass

from .op_support import config_checks

DTYPES = ("bf16", "fp16")
TABLE_DTYPES = ("bf16", "fp16", "f32")
CHUNK = 256                                 # a contig vector's chunk: 8 elements a lane, one 16-byte copy
MAX_CHUNKS = 8
MAX_POSITIONS = 8
MAX_WARPS = 32


@dataclass(frozen=True)
class RotaryConfig:
    """One rotary kernel: q and k (heads_q and heads_k heads of head_dim elements a position, rows of heads x
    head_dim) rotated over each head's first rotary_dim elements by the angles whose cos and sin tables (rotary_dim
    / 2 angles a position, of `table` dtype) it reads, the rest passed through; `interleaved`: GPT-J's pairs (2i, 2i +
    1), else GPT-NeoX's halves (i, i + rotary_dim / 2); `inverse`: by -theta (the backward).

    How: a warp takes `positions` positions of q and then of k at a time, the tables' rows read once a position
    into registers, and moves their heads in contig vectors (8 consecutive elements a lane, 16-byte copies), whose
    lanes must see the same head columns in every chunk of 256 elements (tk.load_rotary_table's once a position):
    where head_dim divides 256, a position's row of heads x head_dim elements in pieces (`piece` elements); else
    groups of `group(heads)` heads (at most 256 elements, a chunk each, masked past the group); `chunks` chunks of
    such vectors at a time. The `warps` warps of each of the blocks (`blocks_per_sm` an SM) loop over the positions, a
    persistent grid; `persistent=False`: a warp for every group of positions instead, one each."""

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
    warps: int = 8
    blocks_per_sm: int = 4
    persistent: bool = True

    def __post_init__(self) -> None:
        fail = config_checks(self, dtype=DTYPES, table=TABLE_DTYPES)
        if not isinstance(self.head_dim, int) or self.head_dim % 16 or not 16 <= self.head_dim <= 256:
            fail(f"head_dim must be a multiple of 16 up to 256, got {self.head_dim!r}")
        if not isinstance(self.rotary_dim, int) or not 0 < self.rotary_dim <= self.head_dim or self.rotary_dim % 16:
            fail(f"rotary_dim must be a multiple of 16 up to head_dim {self.head_dim}, got {self.rotary_dim!r}")
        for option, most in (("heads_q", None), ("heads_k", None), ("positions", MAX_POSITIONS),
                             ("warps", MAX_WARPS), ("blocks_per_sm", 4)):
            value = getattr(self, option)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1 or most and value > most:
                fail(f"{option} must be a positive int{f' up to {most}' if most else ''}, got {value!r}")
        if not isinstance(self.chunks, int) or isinstance(self.chunks, bool) or not 1 <= self.chunks <= MAX_CHUNKS:
            fail(f"chunks must be an int from 1 to {MAX_CHUNKS}, got {self.chunks!r}")
        if not isinstance(self.persistent, bool):
            fail(f"persistent must be a bool, got {self.persistent!r}")

    @property
    def angles(self) -> int:
        """Columns of the tables: an angle per pair."""
        return self.rotary_dim // 2

    @property
    def whole_rows(self) -> bool:
        """Whether a position's row of heads moves as it is: heads then never cross a chunk (head_dim divides 256)."""
        return CHUNK % self.head_dim == 0

    def group(self, heads: int) -> int:
        """Heads a vector's row holds: all of a position's, or (head_dim not dividing 256) the most that fit a chunk
        and divide `heads`."""
        if self.whole_rows:
            return heads
        return max(g for g in range(1, CHUNK // self.head_dim + 1) if heads % g == 0)

    def width(self, heads: int) -> int:
        """Elements of a row of the tensor as the kernel views it: a position's heads, or a group of them."""
        return self.group(heads) * self.head_dim

    @property
    def piece(self) -> int:
        """Elements of a vector, q's and k's alike (one length: one set of tables): up to `chunks` chunks of a
        position's row (the narrower row's, where it is narrower), or a chunk holding a group."""
        if not self.whole_rows:
            return CHUNK
        narrow = min(self.width(self.heads_q), self.width(self.heads_k))
        return min(self.chunks, -(-narrow // CHUNK)) * CHUNK

    def vectors(self, heads: int) -> list[tuple[int, int]]:
        """(group, piece) of each vector of a position, in order: the last piece of a row masked where the row is not
        a multiple of it."""
        parts = -(-self.width(heads) // self.piece)
        return [(g, part) for g in range(heads // self.group(heads)) for part in range(parts)]

    @property
    def together(self) -> int:
        """Vectors of a position loaded at once: `chunks` chunks of them (at least one vector)."""
        return max(1, self.chunks // (self.piece // CHUNK))

    @property
    def name(self) -> str:
        return (f"rotary_{'gptj' if self.interleaved else 'neox'}{'_inv' if self.inverse else ''}_{self.dtype}_"
                f"t{self.table}_d{self.head_dim}r{self.rotary_dim}_h{self.heads_q}k{self.heads_k}_"
                f"c{self.chunks}p{self.positions}w{self.warps}b{self.blocks_per_sm}"
                f"{'' if self.persistent else '_onestep'}")
