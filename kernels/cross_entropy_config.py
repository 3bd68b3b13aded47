"""The configs of kernels/cross_entropy_kernel.py's kernels, frozen dataclasses that check themselves and derive the
kernels' names: CrossEntropyConfig, the forward (the loss and log-sum-exp of each row of logits and, for autograd, the
logits' gradient in the same pass), whose blocks take the rows as kernels/row_split.py's RowSplit says; and
GradScaleConfig, the backward (the stored gradient scaled in place by the loss's gradient), an elementwise pass over
(row, piece) tasks. kernels/cross_entropy_policy.py chooses the splits."""
from __future__ import annotations

from dataclasses import dataclass

from .op_support import config_checks
from .row_split import PieceSplit, RowSplit

DTYPES = ("bf16", "fp16", "f32")            # the logits' (and their gradient's) type
WEIGHT_DTYPES = (None, *DTYPES)             # the per-class weights' (None: none)
REDUCTIONS = ("none", "mean", "sum")
MAX_WIDTH = 262144                          # classes (a vocabulary of 256k)
MAX_WEIGHTED_SMOOTHING = 32                 # values a lane of a row's piece with weights and smoothing: the weights'
WEIGHTED_SMOOTHING_CLASSES = 131072         # piece lies in registers too (these classes over 8 blocks of 16 warps)


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
    written. A cluster takes one row at a time (rows_per_block 1): an ignored row skips the reductions, which the
    whole cluster meets in."""

    width: int
    dtype: str = "bf16"
    reduction: str = "mean"
    grad: bool = True
    smoothing: bool = False
    weight: str | None = None
    prefetch: bool = False

    def __post_init__(self) -> None:
        fail = config_checks(self, dtype=DTYPES, reduction=REDUCTIONS, weight=WEIGHT_DTYPES)
        if not isinstance(self.width, int) or not 1 <= self.width <= MAX_WIDTH:
            fail(f"width (the classes) must be an int from 1 to {MAX_WIDTH}, got {self.width!r}")
        self.check_split(fail)
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
                self.blocks_per_sm > 1 and f"b{self.blocks_per_sm}", self.prefetch and "prefetch"]
        return "_".join(t for t in tags if t)


@dataclass(frozen=True)
class GradScaleConfig(PieceSplit):
    """The backward: the forward's gradient (rows of `width` elements of `dtype`) times the loss's gradient, in
    place: one factor for every row (`per_row` False: the gradient of a reduced loss) or one a row (the reduction
    "none"); a factor of exactly 1 (loss.backward() of a mean or sum) leaves its rows unread and unwritten.

    How: the PieceSplit fields (keyword-only: chunks, warps, blocks_per_sm; kernels/row_split.py), contig fp32
    vectors."""

    width: int
    dtype: str = "bf16"
    per_row: bool = False

    def __post_init__(self) -> None:
        fail = config_checks(self, dtype=DTYPES)
        if not isinstance(self.width, int) or not 1 <= self.width <= MAX_WIDTH:
            fail(f"width must be an int from 1 to {MAX_WIDTH}, got {self.width!r}")
        self.check_split(fail)

    @property
    def name(self) -> str:
        return f"cross_entropy_bwd_{self.dtype}_{self.width}{'_rows' if self.per_row else ''}_{self.split_name}"
