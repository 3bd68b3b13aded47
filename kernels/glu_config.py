"""The config of kernels/glu_kernel.py's kernels: GluConfig, a frozen dataclass of what one gated-activation kernel
computes (the activation, forward or backward, the row width, the dtype) and how its warps take the rows
(kernels/glu_policy.py chooses that part), which checks itself and derives the kernel's name."""
from __future__ import annotations

from dataclasses import dataclass

from .row_split import CHUNK

ACTIVATIONS = ("silu", "gelu", "gelu_tanh")  # SwiGLU; GeGLU with the erf gelu, and with the tanh approximation
DIRECTIONS = ("forward", "backward")
DTYPES = ("bf16", "fp16")
MAX_CHUNKS = 4                              # chunks a warp's piece, at most (32 fp32 values a lane a vector)
MAX_WARPS = 32


@dataclass(frozen=True)
class GluConfig:
    """One gated-activation kernel: out = act(gate) * up over rows of `width` elements (forward), or dgate and dup
    from dout (backward), act silu (SwiGLU) or gelu (GeGLU; "gelu_tanh": torch's approximate="tanh").

    How: a row is cut into pieces of `chunks` x 256 elements (contig vectors, 16-byte copies), one (row, piece) a
    warp at a time; the `warps` warps of each of the blocks (`blocks_per_sm` an SM) loop over them, a persistent
    grid."""

    activation: str
    direction: str
    width: int
    dtype: str = "bf16"
    chunks: int = 2
    warps: int = 8
    blocks_per_sm: int = 2

    def __post_init__(self) -> None:
        def fail(what: str):
            raise ValueError(f"GluConfig: {what}")
        if self.activation not in ACTIVATIONS:
            fail(f"activation must be one of {ACTIVATIONS}, got {self.activation!r}")
        if self.direction not in DIRECTIONS:
            fail(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.dtype not in DTYPES:
            fail(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if not isinstance(self.width, int) or self.width < 8 or self.width % 8:
            fail(f"width must be a positive multiple of 8 (16-byte rows), got {self.width!r}")
        if self.chunks not in range(1, MAX_CHUNKS + 1):
            fail(f"chunks must be 1 to {MAX_CHUNKS}, got {self.chunks!r}")
        for option, most in (("warps", MAX_WARPS), ("blocks_per_sm", 16)):
            value = getattr(self, option)
            if not isinstance(value, int) or not 1 <= value <= most:
                fail(f"{option} must be an int from 1 to {most}, got {value!r}")

    @property
    def piece(self) -> int:
        """Elements of a row a warp takes at a time."""
        return self.chunks * CHUNK

    @property
    def pieces(self) -> int:
        """Pieces a row: the last one masked where the width is not a multiple of the piece."""
        return -(-self.width // self.piece)

    @property
    def name(self) -> str:
        return (f"glu_{self.activation}_{'fwd' if self.direction == 'forward' else 'bwd'}_{self.dtype}_{self.width}_"
                f"p{self.chunks}w{self.warps}b{self.blocks_per_sm}")
