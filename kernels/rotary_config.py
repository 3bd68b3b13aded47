"""The config of kernels/rotary_kernel.py's kernel: RotaryConfig, a frozen dataclass of what one rotary kernel
computes (the layout, the head dim and rotary dim, q's and k's head counts, the dtypes, the direction) and how its
warps take the work, which checks itself and derives the kernel's name; and the policy's one row (untimed)."""
from __future__ import annotations

from dataclasses import dataclass

DTYPES = ("bf16", "fp16")
TABLE_DTYPES = ("bf16", "fp16", "f32")
ROWS = 16                                   # positions a warp takes at a time: a register tile's rows
# The policy: warps a block and blocks an SM of the persistent grid (each warp a 16 x head_dim tile in flight, 4 KB
# at head_dim 128 in bf16: 64 KB an SM). Untimed: to be set by bench_memory_bound.py on the H200.
WARPS, BLOCKS_PER_SM = 4, 4
INTERPRETER_SMS = 2


@dataclass(frozen=True)
class RotaryConfig:
    """One rotary kernel: q and k (heads_q and heads_k heads of head_dim elements) rotated over their first
    rotary_dim elements by the angles whose cos and sin tables (of `table` dtype) it reads, the rest passed through;
    `interleaved`: GPT-J's pairs (2i, 2i + 1) (the tables expanded to rotary_dim columns, sin signed), else GPT-NeoX's
    halves (i, i + rotary_dim / 2); `inverse`: by -theta (the backward)."""

    head_dim: int
    rotary_dim: int
    heads_q: int
    heads_k: int
    dtype: str = "bf16"
    table: str = "f32"
    interleaved: bool = False
    inverse: bool = False
    warps: int = WARPS
    blocks_per_sm: int = BLOCKS_PER_SM

    def __post_init__(self) -> None:
        def fail(what: str):
            raise ValueError(f"RotaryConfig: {what}")
        if self.dtype not in DTYPES:
            fail(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.table not in TABLE_DTYPES:
            fail(f"table must be one of {TABLE_DTYPES}, got {self.table!r}")
        if self.head_dim % 16 or not 16 <= self.head_dim <= 256:
            fail(f"head_dim must be a multiple of 16 up to 256, got {self.head_dim}")
        if not 0 < self.rotary_dim <= self.head_dim or self.rotary_dim % self.unit:
            fail(f"rotary_dim must be a multiple of {self.unit} up to head_dim {self.head_dim}, got {self.rotary_dim}")
        for option in ("heads_q", "heads_k", "warps", "blocks_per_sm"):
            if not isinstance(getattr(self, option), int) or getattr(self, option) < 1:
                fail(f"{option} must be a positive int, got {getattr(self, option)!r}")

    @property
    def unit(self) -> int:
        """What rotary_dim must be a multiple of: register subtiles are 16 columns (each half of them, half-split)."""
        return 16 if self.interleaved else 32

    @property
    def table_cols(self) -> int:
        return self.rotary_dim if self.interleaved else self.rotary_dim // 2

    @property
    def name(self) -> str:
        return (f"rotary_{'gptj' if self.interleaved else 'neox'}{'_inv' if self.inverse else ''}_{self.dtype}_"
                f"t{self.table}_d{self.head_dim}r{self.rotary_dim}_h{self.heads_q}k{self.heads_k}_"
                f"w{self.warps}b{self.blocks_per_sm}")
