"""The config of kernels/norm_kernel.py's kernels: NormConfig, a frozen dataclass of what one kernel computes (RMS or
layer norm, forward or backward, the row width, the dtypes, which optional tensors it has) and how its blocks take
the rows (kernels/norm_policy.py chooses that part), which checks itself and derives the kernel's name."""
from __future__ import annotations

from dataclasses import dataclass

KINDS = ("rms", "layer")
DIRECTIONS = ("forward", "backward")
DTYPES = ("bf16", "fp16")                   # the input's and outputs' types
WEIGHT_DTYPES = (None, "bf16", "fp16", "f32")
CHUNK = 256                                 # a contig vector's chunk: 8 elements a lane, one 16-byte copy
CLUSTERS = (1, 2, 4, 8)
MAX_WARPS = 32                              # 1024 threads a block
MAX_VALUES_PER_LANE = 64                    # a row's piece in one lane's registers, at most (fp32 values)
MIN_WIDTH, MAX_WIDTH = 256, 65536


@dataclass(frozen=True)
class NormConfig:
    """One norm kernel.

    What it computes: `kind` "rms" (y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps)) or "layer" (y = (x - mean)
    * rstd * w + b, rstd = 1 / sqrt(var(x) + eps)), `direction` "forward" (y and the statistics; with `residual`,
    x + residual first, also written out) or "backward" (dx, and the weight's (and bias's) gradients as per-row-group
    fp32 partial sums for norm_kernel.column_sums; with `residual`, the gradient of residual_out added to dx), rows of
    `width` elements of `dtype`, a weight of `weight` dtype (None: none), a bias (layer norm with a weight).

    How: each row is split over `warps_per_row` warps of a block and `cluster` blocks of a cluster, each warp holding
    a piece of `piece` elements (a contig vector: width / (warps_per_row * cluster) rounded up to 256); a block holds
    `rows_per_block` rows at a time and loops over the rows (a persistent grid of `blocks_per_sm` blocks an SM).
    `prefetch`: the next row's x and residual (backward: x and dy) load while the current row is reduced and
    written.
    `weight_in_registers`: the weight's piece is loaded once before the row loop (else once a row, from L1/L2)."""

    kind: str
    direction: str
    width: int
    dtype: str = "bf16"
    weight: str | None = "bf16"
    bias: bool = False
    residual: bool = False
    warps_per_row: int = 1
    rows_per_block: int = 4
    cluster: int = 1
    blocks_per_sm: int = 1
    prefetch: bool = False
    weight_in_registers: bool = True

    def __post_init__(self) -> None:
        def fail(what: str):
            raise ValueError(f"NormConfig: {what}")
        if self.kind not in KINDS:
            fail(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.direction not in DIRECTIONS:
            fail(f"direction must be one of {DIRECTIONS}, got {self.direction!r}")
        if self.dtype not in DTYPES:
            fail(f"dtype must be one of {DTYPES}, got {self.dtype!r}")
        if self.weight not in WEIGHT_DTYPES:
            fail(f"weight must be one of {WEIGHT_DTYPES}, got {self.weight!r}")
        if not isinstance(self.width, int) or not MIN_WIDTH <= self.width <= MAX_WIDTH or self.width % 8:
            fail(f"width must be a multiple of 8 from {MIN_WIDTH} to {MAX_WIDTH}, got {self.width!r}")
        if self.bias and (self.kind != "layer" or self.weight is None):
            fail("a bias needs a layer norm with a weight")
        if self.cluster not in CLUSTERS:
            fail(f"cluster must be one of {CLUSTERS}, got {self.cluster!r}")
        for option in ("warps_per_row", "rows_per_block", "blocks_per_sm"):
            value = getattr(self, option)
            if not isinstance(value, int) or value < 1:
                fail(f"{option} must be a positive int, got {value!r}")
        if self.warps > MAX_WARPS:
            fail(f"{self.warps_per_row} warps a row x {self.rows_per_block} rows is {self.warps} warps, more than "
                 f"{MAX_WARPS} a block")
        if self.warps_per_row > 1 and self.rows_per_block > 15:
            fail("rows of several warps take a named barrier each: at most 15 rows a block")
        if self.piece // 32 > MAX_VALUES_PER_LANE:
            fail(f"a piece of {self.piece} elements is {self.piece // 32} values a lane, more than "
                 f"{MAX_VALUES_PER_LANE}: more warps a row or a larger cluster")

    @property
    def warps(self) -> int:
        return self.warps_per_row * self.rows_per_block

    @property
    def pieces(self) -> int:
        """The pieces a row is split into: one a warp of each block of the cluster."""
        return self.warps_per_row * self.cluster

    @property
    def piece(self) -> int:
        return -(-self.width // (self.pieces * CHUNK)) * CHUNK

    @property
    def ragged(self) -> bool:
        """Whether the pieces cover more than a row (the last ones are masked; a piece wholly past the row's end
        loads zeros and stores nothing: an idle warp)."""
        return self.piece * self.pieces != self.width

    @property
    def name(self) -> str:
        tags = [f"{self.kind}_norm", "fwd" if self.direction == "forward" else "bwd", self.dtype, str(self.width),
                self.weight and f"w{self.weight}", self.bias and "bias", self.residual and "residual",
                f"s{self.warps_per_row}g{self.rows_per_block}c{self.cluster}", self.prefetch and "prefetch",
                not self.weight_in_registers and self.weight and "wl2"]
        return "_".join(t for t in tags if t)
