"""The configs of kernels/cross_entropy_kernel.py's kernels, frozen dataclasses that check themselves and derive the
kernels' names: PrologueConfig, the small kernel before the forward of a reduced loss (the forward's ticket zeroed and
the mean's divisor in partial sums); CrossEntropyConfig, the forward (the loss and log-sum-exp of each row of logits
and, for autograd, the logits' gradient in the same pass), whose blocks take the rows as kernels/row_split.py's
RowSplit says; and GradScaleConfig, the backward (the stored gradient scaled in place by the loss's gradient), an
elementwise pass over (row, piece) tasks. kernels/cross_entropy_policy.py chooses the splits."""
from __future__ import annotations

from dataclasses import dataclass

from .op_support import config_checks
from .row_split import PieceSplit, RowSplit, check_stages

DTYPES = ("bf16", "fp16", "f32")            # the logits' (and their gradient's) type
WEIGHT_DTYPES = (None, *DTYPES)             # the per-class weights' (None: none)
REDUCTIONS = ("none", "mean", "sum")
MAX_WIDTH = 262144                          # classes (a vocabulary of 256k)
MAX_WEIGHTED_SMOOTHING = 32                 # values a lane of a row's piece with weights and smoothing: the weights'
WEIGHTED_SMOOTHING_CLASSES = 131072         # piece lies in registers too (these classes over 8 blocks of 16 warps)
MAX_PARTIALS = 1024                         # blocks of the prologue: the divisor's partial sums every forward warp
                                            # adds (row_split.sum_partials: 4 chunks of 256 loaded at once)


@dataclass(frozen=True)
class PrologueConfig:
    """The kernel that runs before the forward of a reduced loss ("mean", "sum"): block 0 sets the forward's ticket
    (tk.last_block's) to 0, and with `count` (the mean) each block writes its part of the mean's divisor, the
    count of its rows whose target is not ignore_index, or with per-class weights of dtype `weight` the sum of
    those targets' weights (fp32, added in one order: row_split.block_partial), which every warp of the forward sums
    in one order (row_split.sum_partials).

    How: a block takes `span` consecutive rows (a multiple of warps x unroll; the launch's), `warps` warps each
    loading `unroll` consecutive targets at a time (scalar loads in flight together; with weights the targets'
    weights after them), as many blocks as cover the rows, at most MAX_PARTIALS. Without `count` (the sum): one
    warp, the ticket only."""

    count: bool = True
    weight: str | None = None
    warps: int = 8
    unroll: int = 16

    def __post_init__(self) -> None:
        fail = config_checks(self, count=(False, True), weight=WEIGHT_DTYPES)
        for option, most in (("warps", 32), ("unroll", 32)):
            value = getattr(self, option)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= most:
                fail(f"{option} must be an int from 1 to {most}, got {value!r}")
        if not self.count and (self.weight, self.warps, self.unroll) != (None, 1, 1):
            fail("without count (the sum's prologue: the ticket only) one warp, unroll 1 and no weights")

    @property
    def rows_a_step(self) -> int:
        return self.warps * self.unroll

    def grid(self, rows: int) -> tuple[int, int]:
        """(blocks, span): the launch over `rows` rows (one block, no rows, without count)."""
        if not self.count:
            return 1, 0
        blocks = min(MAX_PARTIALS, max(1, -(-rows // self.rows_a_step)))
        span = -(-rows // (blocks * self.rows_a_step)) * self.rows_a_step
        return -(-rows // span) if rows else 1, span

    @property
    def name(self) -> str:
        if not self.count:
            return "cross_entropy_prologue"
        return f"cross_entropy_prologue_count{self.weight and f'_w{self.weight}' or ''}_w{self.warps}u{self.unroll}"


@dataclass(frozen=True)
class CrossEntropyConfig(RowSplit):
    """One cross-entropy forward kernel: rows of `width` logits of `dtype` and one int64 target class each.

    What it computes, for each row (ignored rows, target == ignore_index, read no logits and give 0): the
    log-sum-exp lse = m + log(sum exp(x - m)) (m the row's max), the loss lse - x[target] (with `smoothing`, torch's
    label smoothing eps: lse - (1 - eps) x[target] - eps / width * sum x), divided by the count of rows not ignored
    for the reduction "mean"; with `grad`, the gradient of that loss, softmax(x) - (1 - eps) onehot(target) - eps /
    width (times 1 / count for "mean"), in the logits' dtype. With per-class weights w of dtype `weight`, torch's
    weighted loss: (1 - eps) w[target] (lse - x[target]) + eps / width sum_j w_j (lse - x_j), the mean's divisor
    the sum of w[target] over the rows not ignored. A target outside 0..width-1 (not ignore_index) gives NaN (the
    loss and its row's gradient).

    How: the RowSplit fields (keyword-only), each warp holding a piece of a row in a contig fp32 vector; the row's
    max and its sum of exponentials (and of x, with smoothing) reduce over the row's warps (and cluster), two
    reductions a row. `prefetch`: the next row's logits load (in their dtype) while the current row is reduced and
    written; `stages` (2 to 4) instead: the next rows' through shared memory (row_split.StagedRows), an ignored
    row's read as nothing. A cluster takes one row at a time (rows_per_block 1): an ignored row skips the
    reductions, which the whole cluster meets in."""

    width: int
    dtype: str = "bf16"
    reduction: str = "mean"
    grad: bool = True
    smoothing: bool = False
    weight: str | None = None
    prefetch: bool = False
    stages: int = 0

    def __post_init__(self) -> None:
        fail = config_checks(self, dtype=DTYPES, reduction=REDUCTIONS, weight=WEIGHT_DTYPES)
        if not isinstance(self.width, int) or not 1 <= self.width <= MAX_WIDTH:
            fail(f"width (the classes) must be an int from 1 to {MAX_WIDTH}, got {self.width!r}")
        self.check_split(fail)
        check_stages(self, fail)
        if not self.persistent:
            fail("the loss's partial sums are one a block, at most MAX_PARTIALS: persistent only")
        if self.weight and self.smoothing and self.piece // 32 > MAX_WEIGHTED_SMOOTHING:
            fail(f"with weights and smoothing a piece holds at most {MAX_WEIGHTED_SMOOTHING} values a lane (the "
                 f"weights' piece lies in registers too), got {self.piece // 32}")
        if self.cluster > 1 and self.rows_per_block != 1:
            fail("a cluster takes one row at a time (rows_per_block 1): its blocks meet in each row's reductions, "
                 "which an ignored row skips")

    @property
    def name(self) -> str:
        tags = ["cross_entropy_fwd", self.dtype, str(self.width), self.reduction, self.grad and "grad",
                self.smoothing and "smoothing", self.weight and f"w{self.weight}", self.split_name,
                self.blocks_per_sm > 1 and f"b{self.blocks_per_sm}", self.prefetch and "prefetch",
                self.stages and f"st{self.stages}"]
        return "_".join(t for t in tags if t)


@dataclass(frozen=True)
class GradScaleConfig(PieceSplit):
    """The backward: the forward's gradient (rows of `width` elements of `dtype`) times the loss's gradient, in
    place: one factor for every row (`per_row` False: the gradient of a reduced loss) or one a row (the reduction
    "none"), read in its own dtype `factor` (the loss's: the logits' dtype, for autograd); a factor of exactly 1
    (loss.backward() of a mean or sum) leaves its rows unread and unwritten.

    How: the PieceSplit fields (keyword-only: chunks, warps, blocks_per_sm; kernels/row_split.py), contig fp32
    vectors."""

    width: int
    dtype: str = "bf16"
    per_row: bool = False
    factor: str = "f32"

    def __post_init__(self) -> None:
        fail = config_checks(self, dtype=DTYPES, factor=DTYPES)
        if not isinstance(self.width, int) or not 1 <= self.width <= MAX_WIDTH:
            fail(f"width must be an int from 1 to {MAX_WIDTH}, got {self.width!r}")
        self.check_split(fail)

    @property
    def name(self) -> str:
        factor = f"_f{self.factor}" if self.factor != self.dtype else ""     # (the factor's dtype, if not dtype's)
        return (f"cross_entropy_bwd_{self.dtype}_{self.width}{'_rows' if self.per_row else ''}{factor}_"
                f"{self.split_name}")
