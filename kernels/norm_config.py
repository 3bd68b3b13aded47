"""The config of kernels/norm_kernel.py's kernels: NormConfig, a frozen dataclass of what one kernel computes (RMS or
layer norm, forward or backward, the row width, the dtypes, which optional tensors it has) and how its blocks take
the rows (kernels/row_split.py's RowSplit; kernels/norm_policy.py chooses it), which checks itself and derives the
kernel's name."""
from __future__ import annotations

from dataclasses import dataclass

from .op_support import config_checks
from .row_split import RowSplit, check_stages

KINDS = ("rms", "layer")
DIRECTIONS = ("forward", "backward")
DTYPES = ("bf16", "fp16")                   # the input's and outputs' types
WEIGHT_DTYPES = (None, "bf16", "fp16", "f32")
MIN_WIDTH, MAX_WIDTH = 256, 65536


@dataclass(frozen=True)
class NormConfig(RowSplit):
    """One norm kernel.

    What it computes: `kind` "rms" (y = x * rstd * w, rstd = 1 / sqrt(mean(x^2) + eps)) or "layer" (y = (x - mean)
    * rstd * w + b, rstd = 1 / sqrt(var(x) + eps)), `direction` "forward" (y and the statistics; with `residual`,
    x + residual first, also written out) or "backward" (dx, and the weight's (and bias's) gradients as per-row-group
    fp32 partial sums for norm_kernel.column_sums; with `residual`, the gradient of residual_out added to dx), rows of
    `width` elements of `dtype`, a weight of `weight` dtype (None: none), a bias (layer norm with a weight).

    How: the RowSplit fields (keyword-only: warps_per_row, rows_per_block, cluster, blocks_per_sm), each warp holding
    a piece of a row in a contig vector. `prefetch`: the next row's x and residual (backward: x and dy) load while
    the current row is reduced and written.
    `weight_in_registers`: the weight's piece is loaded once before the row loop (else once a row, from L1/L2).
    `stages` (2 to 4; 0: none): the next rows' loads (x and the residual; backward: x and dy) in flight through
    shared memory instead (row_split.StagedRows), that many rows ahead. `stage`: each row's pieces of x and the
    residual (backward: x, dy and residual_out's gradient) through shared memory, read a chunk at a time, the
    weight's chunks from L1/L2 (not weight_in_registers): a chunk in registers, several blocks an SM.
    `sums_in_shared` (backward with a weight): each warp's partial sums of the weight's (bias's) gradient in shared
    memory, not registers (norm_kernel.WeightSums): 32 values a lane of x and dy where they spilled beside them.
    `stats_ahead` (backward): the saved rstd and mean of the next row loaded a step ahead (norm_kernel.RowStatistics)."""

    kind: str
    direction: str
    width: int
    dtype: str = "bf16"
    weight: str | None = "bf16"
    bias: bool = False
    residual: bool = False
    prefetch: bool = False
    weight_in_registers: bool = True
    stages: int = 0
    stage: bool = False
    sums_in_shared: bool = False
    stats_ahead: bool = False

    def __post_init__(self) -> None:
        fail = config_checks(self, kind=KINDS, direction=DIRECTIONS, dtype=DTYPES, weight=WEIGHT_DTYPES)
        if not isinstance(self.width, int) or not MIN_WIDTH <= self.width <= MAX_WIDTH or self.width % 8:
            fail(f"width must be a multiple of 8 from {MIN_WIDTH} to {MAX_WIDTH}, got {self.width!r}")
        if self.bias and (self.kind != "layer" or self.weight is None):
            fail("a bias needs a layer norm with a weight")
        self.check_split(fail)
        check_stages(self, fail)
        pieces_in_registers = self.prefetch or self.stages or self.weight_in_registers and self.weight
        if self.stage not in (True, False) or self.stage and pieces_in_registers:
            fail(f"stage (the row's pieces through shared memory) is without prefetch, stages or "
                 f"weight_in_registers; got {self.stage!r}")
        if self.sums_in_shared not in (True, False) or self.sums_in_shared and not (
                self.direction == "backward" and self.weight):
            fail(f"sums_in_shared (the weight's gradient sums in shared memory) is the backward's with a weight; got "
                 f"{self.sums_in_shared!r} for the {self.direction}{'' if self.weight else ' without a weight'}")
        if self.stats_ahead not in (True, False) or self.stats_ahead and self.direction != "backward":
            fail(f"stats_ahead (the next row's saved statistics a step ahead) is the backward's; got "
                 f"{self.stats_ahead!r} for the {self.direction}")
        if self.direction == "backward" and not self.persistent:
            fail("the backward's weight and bias sums take a workspace row a row group of the grid: persistent only")

    @property
    def name(self) -> str:
        tags = [f"{self.kind}_norm", "fwd" if self.direction == "forward" else "bwd", self.dtype, str(self.width),
                self.weight and f"w{self.weight}", self.bias and "bias", self.residual and "residual",
                self.split_name, self.prefetch and "prefetch", self.stages and f"st{self.stages}",
                self.stage and "stage", not self.weight_in_registers and self.weight and not self.stage and "wl2",
                self.sums_in_shared and "ssum", self.stats_ahead and "sa"]
        return "_".join(t for t in tags if t)
