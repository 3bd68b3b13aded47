"""The config of kernels/glu_kernel.py's kernels: GluConfig, a frozen dataclass of what one gated-activation kernel
computes (the activation, forward or backward, the row width, the dtype) and how its warps take the rows
(kernels/glu_policy.py chooses that part), which checks itself and derives the kernel's name."""
from __future__ import annotations

from dataclasses import dataclass

from .op_support import config_checks
from .row_split import PieceSplit

ACTIVATIONS = ("silu", "gelu", "gelu_tanh")  # SwiGLU; GeGLU with the erf gelu, and with the tanh approximation
DIRECTIONS = ("forward", "backward")
DTYPES = ("bf16", "fp16")
MAX_CHUNKS = 4                              # chunks a warp's piece, at most (32 fp32 values a lane a vector)


@dataclass(frozen=True)
class GluConfig(PieceSplit):
    """One gated-activation kernel: out = act(gate) * up over rows of `width` elements (forward), or dgate and dup
    from dout (backward), act silu (SwiGLU) or gelu (GeGLU; "gelu_tanh": torch's approximate="tanh").

    How: the PieceSplit fields (keyword-only: chunks, warps, blocks_per_sm; kernels/row_split.py)."""

    activation: str
    direction: str
    width: int
    dtype: str = "bf16"

    def __post_init__(self) -> None:
        fail = config_checks(self, activation=ACTIVATIONS, direction=DIRECTIONS, dtype=DTYPES)
        if not isinstance(self.width, int) or self.width < 8 or self.width % 8:
            fail(f"width must be a positive multiple of 8 (16-byte rows), got {self.width!r}")
        self.check_split(fail, MAX_CHUNKS)

    @property
    def name(self) -> str:
        return (f"glu_{self.activation}_{'fwd' if self.direction == 'forward' else 'bwd'}_{self.dtype}_{self.width}_"
                f"{self.split_name}")
