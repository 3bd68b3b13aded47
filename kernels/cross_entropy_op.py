"""cross_entropy as torch operators (`torch.ops.tkpy.cross_entropy` and its backward, `cross_entropy_backward_`) with
autograd, fused: the forward kernel writes the logits' gradient in the pass that computes the loss.

`cross_entropy(input, target, weight=None, *, ignore_index=-100, reduction="mean", label_smoothing=0.0)` follows
torch.nn.functional.cross_entropy for logits of shape (N, C) (or (C,)) and int64 class indices of shape (N,) (or
()); the keyword-only options keep torch's names (torch's deprecated size_average and reduce sit between them).
Per-class weights are torch's (the mean divided by the sum of the targets' weights); class-probability targets are
refused, naming what is missing.

Why the gradient is written in the forward (kernels/cross_entropy_kernel.py), in bytes moved for N rows of C logits
of b bytes each: a forward that only computes the loss reads N C b, and a backward that recomputes the softmax from
the logits and the log-sum-exp reads them again and writes the gradient, 3 N C b in all (Quack's way). Writing the
gradient in the forward, as Liger and unsloth do, moves 2 N C b, and the backward scales that gradient by the loss's
gradient in place: for loss.backward() of a mean or sum that factor is exactly 1 and the backward kernel reads the
factor and returns, without touching the gradient (it reads and writes it, 2 N C b more, only for another factor:
gradient accumulation's 1 / steps, a scaled loss, a per-row gradient of reduction "none").

The launches, and nothing of torch's but allocations and views (no reduction, conversion or fill: the op is its
kernels, tests/test_cross_entropy.py counts them):
- "mean": two. The prologue (cross_entropy_kernel.prologue_kernel) zeroes the forward's ticket and computes the
  divisor the gradient needs before any of it is written (the count of rows not ignored, or the sum of their
  targets' weights) as partial sums, one a block over up to MAX_PARTIALS blocks of consecutive rows (16 target loads
  in flight a warp: 10M rows take 1015 blocks); each warp of the forward adds the partials in one order before its
  first row, every warp to the same bits. The forward kernel then adds each block's rows' losses (already divided)
  into the block's partial, and its last block to finish (tk.last_block: a fence and an int32 atomic ticket) adds
  the partials in block order, writes the loss in the logits' dtype (torch's), and sets the ticket back to 0. No
  float atomics: the loss is the same bits every run.
- "sum": two, the prologue with one warp setting the ticket to 0, then the forward as for the mean. Why that small
  kernel and not a memset node (cuMemsetD32Async) or torch's zero_(): tkpy kernels are launched with programmatic
  dependent launch (runtime/dependent_launch.py: a kernel's blocks start while the kernel before it on the stream
  ends, and wait for it), which works between kernels only: after a memset the forward would start cold, its launch
  latency no longer hidden behind the work before it; torch's zero_() is itself a kernel launch (its fill kernel),
  no cheaper on the host than tkpy's (design.md: 5.9 and 5.8 us); a memset through cuda-bindings may cost the host
  less (unmeasured). A ticket kept between calls instead, left at 0 by each forward's last block, would need no
  launch, but calls on two streams (or CUDA graphs replayed on two) would share it. Each call's ticket and partials
  are one fresh workspace of torch's allocator, private to the call's stream. The prologue itself is launched
  without programmatic dependent launch (the forward with it): with both, the mean's forward took 20 us more a call
  (RESULTS.md runs 282-283).
- "none": one, the forward kernel writing each row's loss in the logits' dtype.
- the backward: one, reading the loss's gradient in its own dtype (no conversion first), or none where autograd has
  nothing to scale; a gradient expanded from one value (loss.sum() of a "none" loss) reads that one value.
No full-size softmax is kept: the gradient tensor, which autograd hands on, is the only N x C buffer. The backward
mutates the buffer the forward saved, so a graph's backward runs once (retain_graph=True and a second backward
raise). Precision: the gradient is rounded to the logits' dtype once for a factor of 1, twice for another (the
forward's rounding, then the scaled value's): within one unit in the last place rather than half of one.

The kernels read logits as 16-byte rows: C a multiple of 8 (bf16, fp16) or of 4 (fp32) reads them in place; another
C copies them into padded rows first, and the gradient is a view of padded rows. Targets outside 0..C-1 (but for
ignore_index) give NaN losses and gradients on the GPU (no device-to-host check) and a ValueError in the CPU
interpreter.
"""
from __future__ import annotations

import math
from typing import Optional

import torch

from . import cross_entropy_kernel as body
from .cross_entropy_config import MAX_WIDTH, REDUCTIONS, WEIGHTED_SMOOTHING_CLASSES
from .cross_entropy_policy import backward_config, forward_config, prologue_config
from .op_support import check_device, define, direct_call_ok, needs_grad, resident_blocks
from .row_split import INTERPRETER_SMS, grid, piece_grid, placeholder_tensor as placeholder
from .tensor_layout import ALIGN, padded_copy, padded_like, tma_ready

DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "f32"}
INT32 = (-2 ** 31, 2 ** 31 - 1)
WORDS = ALIGN // 4                          # 4-byte words of 16 bytes: the prologue's workspace views' alignment


def cross_entropy(input: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None = None, *,
                  ignore_index: int = -100, reduction: str = "mean", label_smoothing: float = 0.0) -> torch.Tensor:
    """torch.nn.functional.cross_entropy of logits `input` (N, C) or (C,), bf16, fp16 or fp32, and class indices
    `target` (int64, (N,) or ()): per row lse(x) - x[target] (with label_smoothing eps: lse - (1 - eps) x[target] -
    eps / C sum x, torch's smoothing), computed in fp32; rows whose target is ignore_index give 0 and do not count in
    the mean; reduction "mean" (over the rows not ignored: NaN if none), "sum" or "none" (a loss per row). `weight`:
    per-class weights (C,) in the input's dtype or fp32, as torch's (the smoothing term weighted by class too, the
    mean divided by the sum of the targets' weights; with smoothing up to 131072 classes). Returns the input's
    dtype, as torch. C from 1 to 262144.

    CUDA tensors, or CPU tensors under TKPY_INTERPRET=1 (tkpy's CPU interpreter). Differentiable in input: the
    forward kernel writes the gradient as it computes the loss (see the module's docstring; no double backward, one
    backward a graph); torch.compile sees torch.ops.tkpy.cross_entropy."""
    logits, targets = _rows(input, target)
    smoothing = float(label_smoothing)
    if direct_call_ok((input, weight)):
        loss, _, _ = forward(logits, targets, weight, ignore_index, smoothing, reduction, False)
    else:
        if needs_grad(weight):
            raise NotImplementedError("cross_entropy: no gradient for the per-class weights (the logits' only); "
                                      "pass weight.detach()")
        loss, _, _ = cross_entropy_op(logits, targets, weight, ignore_index, smoothing, reduction, needs_grad(input))
    return loss.view(()) if input.dim() == 1 and reduction == "none" else loss


def _rows(input: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """input and target as (N, C) and (N,), or the error for what tkpy does not take."""
    if isinstance(target, torch.Tensor) and target.is_floating_point():
        raise NotImplementedError("cross_entropy: class-probability targets (a float target of the input's shape) are "
                                  "not implemented; pass class indices (int64 of shape (N,))")
    if input.dim() == 1:
        return input.view(1, -1), target.view(1) if isinstance(target, torch.Tensor) else target
    if input.dim() != 2:
        raise ValueError(f"cross_entropy takes logits of shape (N, C) or (C,), got {tuple(input.shape)}; with the "
                         "classes in dim 1 of more dims (torch's (N, C, d1, ...)), move them last and flatten: "
                         "x.movedim(1, -1).reshape(-1, C) and target.reshape(-1)")
    return input, target


def checked(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
            smoothing: float, reduction: str) -> int:
    """The number of classes C, or the error the call raises before any GPU work (the fake implementation checks
    with it too): dtypes, devices, shapes, the options' ranges."""
    check_device("cross_entropy", logits)
    if logits.dtype not in DTYPES:
        raise ValueError(f"cross_entropy takes bf16, fp16 or fp32 logits (fp32 math), got {logits.dtype}")
    if not isinstance(target, torch.Tensor) or target.dtype != torch.int64:
        what = target.dtype if isinstance(target, torch.Tensor) else type(target).__name__
        raise ValueError(f"cross_entropy takes int64 class indices as target, got {what}; convert with .long()")
    if target.device != logits.device:
        raise ValueError(f"cross_entropy: target is on {target.device}, the logits on {logits.device}")
    if logits.dim() != 2 or target.shape != logits.shape[:1]:
        raise ValueError(f"cross_entropy: target must have shape (N,) for logits (N, C), got {tuple(target.shape)} "
                         f"for {tuple(logits.shape)}")
    classes = logits.shape[1]
    if not 1 <= classes <= MAX_WIDTH:
        raise ValueError(f"cross_entropy takes 1 to {MAX_WIDTH} classes, got {classes}")
    if weight is not None and (weight.shape != (classes,) or weight.device != logits.device
                               or weight.dtype not in (logits.dtype, torch.float32)):
        raise ValueError(f"cross_entropy: weight must be of shape ({classes},) (a weight a class) on "
                         f"{logits.device}, in the logits' dtype or float32; got {tuple(weight.shape)} {weight.dtype} "
                         f"on {weight.device}")
    if weight is not None and smoothing > 0 and classes > WEIGHTED_SMOOTHING_CLASSES:
        raise NotImplementedError(f"cross_entropy: per-class weights with label smoothing over more than "
                                  f"{WEIGHTED_SMOOTHING_CLASSES} classes are not implemented (the weights' piece of a "
                                  f"row lies in registers beside the row's, which {classes} classes overflow); either "
                                  "one alone takes up to 262144")
    if reduction not in REDUCTIONS:
        raise ValueError(f"cross_entropy: reduction must be one of {REDUCTIONS}, got {reduction!r}")
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {smoothing}")
    if isinstance(ignore_index, bool) or not isinstance(ignore_index, int) or not INT32[0] <= ignore_index <= INT32[1]:
        raise ValueError(f"cross_entropy: ignore_index must be an int in int32's range, got {ignore_index!r}")
    return classes


def forward(logits: torch.Tensor, target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int,
            smoothing: float, reduction: str, grad: bool, options: dict | None = None,
            prologue: dict | None = None):
    """(loss, lse, dlogits): the loss in the logits' dtype (0-d for "mean" and "sum", one a row for "none"), the
    rows' log-sum-exp (fp32; 0 for ignored rows), and with `grad` the gradient of the loss for a loss gradient of 1
    (the logits' dtype and shape; empty without). `options` / `prologue`: CrossEntropyConfig / PrologueConfig
    fields over the policy's (tests, the benchmark)."""
    classes = checked(logits, target, weight, ignore_index, smoothing, reduction)
    rows, device, reduced = logits.shape[0], logits.device, reduction != "none"
    if not logits.is_cuda:
        _check_targets(target, classes, ignore_index)
    loss = logits.new_empty(() if reduced else rows)
    lse = logits.new_empty(rows, dtype=torch.float32)
    dlogits = gradient_buffer(logits) if grad else logits.new_empty(0)
    if not rows:                                             # (the mean of no rows: NaN, as torch's 0 / 0)
        return (loss.fill_(math.nan if reduction == "mean" else 0.0) if reduced else loss), lse, dlogits
    c = forward_config(classes, DTYPES[logits.dtype], reduction, grad, smoothing > 0,
                       DTYPES[weight.dtype] if weight is not None else None, **(options or {}))
    x = logits if tma_ready(logits) else padded_copy(logits)
    t = target if tma_ready(target) else target.clone()
    f32 = placeholder(torch.float32, device)
    w = f32 if weight is None else weight if tma_ready(weight) else weight.clone()
    no_ticket = placeholder(torch.int32, device)           # (a reduced loss's stand-in: its one-element ticket's shape)
    args = [x, t, w, f32, loss.view(1) if reduced else loss, lse,
            dlogits if grad else placeholder(logits.dtype, device), f32, no_ticket[:1] if reduced else no_ticket,
            ignore_index, smoothing]
    kernel = body.forward_kernel(c)
    blocks = grid(kernel, c, rows, args)           # (the placeholders stand in for the partials in the query)
    if reduced:
        args[3], args[7], args[8] = _prologue(t, None if weight is None else w, ignore_index, reduction, blocks,
                                              prologue)
    kernel[(blocks,)](*args)
    return loss, lse, dlogits


def _prologue(target: torch.Tensor, weight: torch.Tensor | None, ignore_index: int, reduction: str, blocks: int,
              options: dict | None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Launch the prologue of a reduced loss whose forward runs `blocks` blocks; returns the forward's (divisor
    partials, loss partials, ticket): views of one workspace of this call's (no two calls share one), the divisor's
    a placeholder for the sum."""
    p = prologue_config(reduction, DTYPES[weight.dtype] if weight is not None else None, **(options or {}))
    parts, span = p.grid(target.shape[0])
    counts = -(-parts // WORDS) * WORDS if p.count else 0          # (each view 16-byte aligned)
    space = target.new_empty(WORDS + counts + blocks, dtype=torch.float32)
    ticket, divisor, partials = space[:1].view(torch.int32), space[WORDS:WORDS + parts], space[WORDS + counts:]
    f32 = placeholder(torch.float32, target.device)
    if p.count:
        body.prologue_kernel(p)[(parts,)](target, f32 if weight is None else weight, divisor, ticket, ignore_index,
                                          span)
        return divisor, partials, ticket
    body.prologue_kernel(p)[(1,)](placeholder(torch.int64, target.device), f32, f32, ticket, ignore_index, span)
    return f32, partials, ticket


def gradient_buffer(logits: torch.Tensor) -> torch.Tensor:
    """An uninitialised tensor of the logits' shape and dtype for their gradient: rows 16 bytes apart (a view of
    padded rows where the classes' bytes are not a multiple of 16)."""
    if logits.shape[1] * logits.element_size() % ALIGN:
        return padded_like(logits)
    return logits.new_empty(logits.shape)


def _check_targets(target: torch.Tensor, classes: int, ignore_index: int) -> None:
    """The interpreter's check of the targets' values (on the CPU it costs nothing; the GPU gives NaN instead)."""
    bad = (target != ignore_index) & ((target < 0) | (target >= classes))
    if bad.any():
        row = int(bad.nonzero()[0, 0])
        raise ValueError(f"cross_entropy: target {int(target[row])} of row {row} is not a class of 0..{classes - 1} "
                         f"(nor ignore_index {ignore_index})")


def backward(grad_logits: torch.Tensor, grad_loss: torch.Tensor, options: dict | None = None) -> None:
    """grad_logits (the forward's dlogits) *= grad_loss, in place: one factor (0-d grad_loss, or one of shape (N,)
    expanded from one: the gradient of loss.sum() or .mean() of a "none" loss) or one a row ((N,)), read in its own
    dtype (bf16, fp16 or fp32: no conversion first); rows whose factor is exactly 1 are not touched. `options`:
    GradScaleConfig fields over the policy's."""
    check_device("cross_entropy_backward", grad_logits)
    if grad_logits.dim() != 2 or grad_logits.dtype not in DTYPES:
        raise ValueError(f"cross_entropy_backward: grad_logits must be (N, C) bf16, fp16 or fp32, got "
                         f"{tuple(grad_logits.shape)} {grad_logits.dtype}")
    rows, classes = grad_logits.shape
    if grad_loss.shape not in ((), (rows,)) or grad_loss.device != grad_logits.device \
            or grad_loss.dtype not in DTYPES:
        raise ValueError(f"cross_entropy_backward: the loss's gradient must be 0-d or of shape ({rows},), bf16, fp16 "
                         f"or fp32, on {grad_logits.device}; got {tuple(grad_loss.shape)} {grad_loss.dtype} on "
                         f"{grad_loss.device}")
    if not rows:
        return
    per_row = grad_loss.dim() == 1 and grad_loss.stride(0) != 0      # (stride 0: one factor, expanded)
    factor = grad_loss if per_row else (grad_loss if grad_loss.dim() == 0 else grad_loss[0]).view(1)
    factor = factor if tma_ready(factor) else factor.clone()
    c = backward_config(classes, DTYPES[grad_logits.dtype], per_row, DTYPES[grad_loss.dtype], **(options or {}))
    kernel = body.backward_kernel(c)
    rows_ = grad_logits if tma_ready(grad_logits) else padded_copy(grad_logits)   # (the forward's is never copied)
    args = (rows_, factor)
    kernel[(piece_grid(c, rows, resident_blocks(kernel, c, args, INTERPRETER_SMS)),)](*args)
    if rows_ is not grad_logits:
        grad_logits.copy_(rows_)


# -- the operators ----------------------------------------------------------------------------------------------

def _forward_op(logits: torch.Tensor, target: torch.Tensor, weight: Optional[torch.Tensor], ignore_index: int,
                label_smoothing: float, reduction: str, grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return forward(logits, target, weight, ignore_index, label_smoothing, reduction, grad)


def _forward_fake(logits, target, weight, ignore_index, label_smoothing, reduction, grad):
    checked(logits, target, weight, ignore_index, label_smoothing, reduction)
    rows, classes = logits.shape
    loss = logits.new_empty(rows if reduction == "none" else ())
    dlogits = gradient_buffer(logits) if grad else logits.new_empty(0)
    return loss, logits.new_empty(rows, dtype=torch.float32), dlogits


def _backward_op(grad_logits: torch.Tensor, grad_loss: torch.Tensor) -> None:
    backward(grad_logits, grad_loss)


def _backward_fake(grad_logits, grad_loss):
    return None


# -- autograd -----------------------------------------------------------------------------------------------------
# The forward saves its gradient (computed for a loss gradient of 1); the backward scales it in place by the loss's
# gradient and hands it on. lse and the gradient are outputs for the backward only: non-differentiable.

def _setup(ctx, inputs, output):
    loss, lse, dlogits = output
    ctx.mark_non_differentiable(lse, dlogits)
    ctx.set_materialize_grads(False)        # (else autograd fills a zero gradient of dlogits' size each backward)
    ctx.save_for_backward(dlogits)
    ctx.computed, ctx.used = inputs[-1], False


def _gradient(ctx, grad_loss, grad_lse, grad_dlogits):
    if not ctx.computed:
        raise RuntimeError("cross_entropy: backward through a call with grad=False, whose forward wrote no "
                           "gradient; call torch.ops.tkpy.cross_entropy with grad=True (tkpy.kernels.cross_entropy "
                           "does, for inputs that require grad)")
    if torch.is_grad_enabled():               # (create_graph=True: the gradient would carry no graph, silently)
        raise NotImplementedError("double backward of cross_entropy is not implemented (create_graph=True)")
    if ctx.used:
        raise RuntimeError("cross_entropy: a second backward through the same graph; its backward scales the "
                           "gradient its forward wrote in place, once: compute the loss again instead of "
                           "retain_graph=True")
    dlogits, = ctx.saved_tensors
    ctx.used = True
    cross_entropy_backward_op(dlogits, grad_loss)
    return dlogits, None, None, None, None, None, None


cross_entropy_backward_op = define("cross_entropy_backward_", _backward_op, _backward_fake,
                                   mutates_args=("grad_logits",),
                                   differentiable="double backward of cross_entropy is not implemented")
cross_entropy_op = define("cross_entropy", _forward_op, _forward_fake, backward=_gradient, setup_context=_setup)
