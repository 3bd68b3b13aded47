"""The norm kernels' launches: argument checks (shared with the operators' fake implementations), the rows as 2-D
views, placeholders for absent tensors, the persistent grid, and the backward's finishing column sums. The torch
operators and autograd are kernels/norms.py's; the kernels kernels/norm_kernel.py's."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import norm_kernel as body
from .norm_config import MAX_WIDTH, MIN_WIDTH
from .norm_policy import config_for
from .op_support import check_device
from .row_split import CHUNK, INTERPRETER_SMS, grid, placeholder_tensor
from .tensor_layout import cdiv, row_view as _rows, tma_ready

DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
WEIGHT_DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "f32"}
NAMES = {"rms": "rms_norm", "layer": "layer_norm"}


def normalized(normalized_shape) -> list[int]:
    """normalized_shape as a list of ints (an int is one dim), as torch.nn.functional takes it."""
    if isinstance(normalized_shape, int):
        return [normalized_shape]
    if isinstance(normalized_shape, torch.Size) or (isinstance(normalized_shape, Sequence)
                                                    and all(isinstance(d, int) for d in normalized_shape)):
        return list(normalized_shape)
    raise TypeError(f"normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}")


def checked(kind: str, x: torch.Tensor, shape: list[int], weight=None, bias=None, residual=None) -> int:
    """The row width of a norm over the trailing `shape` dims of x, or the ValueError the call raises (before any GPU
    work; the fake implementations check with it too): dtypes, devices, shapes, the width's range."""
    name = NAMES[kind]
    check_device(name, x)
    if x.dtype not in DTYPES:
        raise ValueError(f"{name} takes bf16 or fp16 inputs (statistics in fp32), got {x.dtype}")
    if not shape or any(d < 1 for d in shape) or x.dim() < len(shape) or list(x.shape[x.dim() - len(shape):]) != shape:
        raise ValueError(f"{name}: normalized_shape {tuple(shape)} must be the last dims of the input, of shape "
                         f"{tuple(x.shape)}")
    width = math.prod(shape)
    if not MIN_WIDTH <= width <= MAX_WIDTH or width % 8:
        raise ValueError(f"{name} normalizes rows of {MIN_WIDTH} to {MAX_WIDTH} elements, a multiple of 8 (16-byte "
                         f"rows), got {width} (normalized_shape {tuple(shape)})")
    for what, t in (("weight", weight), ("bias", bias)):
        if t is None:
            continue
        if t.device != x.device:
            raise ValueError(f"{name}: {what} is on {t.device}, the input on {x.device}")
        if list(t.shape) != shape:
            raise ValueError(f"{name}: {what} must have shape normalized_shape {tuple(shape)}, got {tuple(t.shape)}")
        if t.dtype not in (x.dtype, torch.float32):
            raise ValueError(f"{name}: {what} must be the input's dtype ({x.dtype}) or float32, got {t.dtype}")
    if weight is not None and bias is not None and bias.dtype != weight.dtype:
        raise ValueError(f"{name}: weight and bias must have one dtype, got {weight.dtype} and {bias.dtype}")
    if residual is not None and (residual.shape != x.shape or residual.dtype != x.dtype or residual.device != x.device):
        raise ValueError(f"{name}: residual must have the input's shape, dtype and device; got {tuple(residual.shape)} "
                         f"{residual.dtype} on {residual.device} against {tuple(x.shape)} {x.dtype} on {x.device}")
    return width


def statistics_shape(x: torch.Tensor, shape: list[int]) -> tuple:
    return tuple(x.shape[:x.dim() - len(shape)])


def forward(kind: str, x, shape, weight, bias, residual, eps: float, options: dict | None = None):
    """(y, residual_out, mean, rstd) of the norm over the trailing `shape` dims: residual_out = x + residual (empty
    without one), mean and rstd fp32 of the leading dims' shape (mean empty for rms). `options`: NormConfig fields
    overriding the policy's (tests, the benchmark's variants)."""
    width = checked(kind, x, shape, weight, bias, residual)
    stats = statistics_shape(x, shape)
    y = x.new_empty(x.shape)
    residual_out = x.new_empty(x.shape) if residual is not None else x.new_empty(0)
    rstd = x.new_empty(stats, dtype=torch.float32)
    mean = x.new_empty(stats, dtype=torch.float32) if kind == "layer" else x.new_empty(0, dtype=torch.float32)
    rows = y.numel() // width
    if rows == 0:
        return y, residual_out, mean, rstd
    if bias is not None and weight is None:        # (the kernels scale before they shift)
        weight = torch.ones_like(bias)
    c = config_for(kind, "forward", width, DTYPES[x.dtype], _dtype(weight), bias is not None, residual is not None,
                   **(options or {}))
    out = y.view(rows, width)
    args = (_rows(x, width), _rows(residual, width) if residual is not None else placeholder_tensor(x.dtype, x.device),
            _vector(weight, x, weight), _vector(bias, x, weight), out,
            residual_out.view(rows, width) if residual is not None else placeholder_tensor(x.dtype, x.device),
            mean.view(rows) if kind == "layer" else placeholder_tensor(torch.float32, x.device), rstd.view(rows),
            float(eps))
    kernel = body.forward_kernel(c)
    kernel[(grid(kernel, c, rows, args),)](*args)
    return y, residual_out, mean, rstd


def checked_backward(kind: str, dy, dres, x, weight, mean, rstd, shape) -> int:
    """The row width of the norm's backward, or the ValueError it raises before any GPU work (the fake
    implementations check with it too): the forward's checks, and the gradients and statistics like the input."""
    width = checked(kind, x, shape, weight)
    _check_gradient(kind, dy, x, "grad_output")
    if dres is not None:
        _check_gradient(kind, dres, x, "the residual output's gradient")
    stats = statistics_shape(x, shape)
    for what, t in (("rstd", rstd),) + ((("mean", mean),) if kind == "layer" else ()):
        if tuple(t.shape) != stats or t.dtype != torch.float32 or t.device != x.device:
            raise ValueError(f"{NAMES[kind]}_backward: {what} must be float32 of shape {stats} on the input's device "
                             f"({x.device}), got {t.dtype} {tuple(t.shape)} on {t.device}")
    return width


def backward(kind: str, dy, dres, x, weight, mean, rstd, shape, bias_grad: bool, options: dict | None = None):
    """(dx, dweight, dbias) of the norm of x (h = x + residual when fused) from the forward's statistics: dx also
    carries dres, the gradient of residual_out (None: none); dweight / dbias empty without a weight / bias_grad.
    `options`: as forward's."""
    width = checked_backward(kind, dy, dres, x, weight, mean, rstd, shape)
    dx = x.new_empty(x.shape)
    rows = dx.numel() // width
    tensors = (weight is not None) + (weight is not None and bias_grad)     # the gradients column_sums finishes
    dtype = weight.dtype if weight is not None else torch.float32
    dweight, dbias = (x.new_empty(shape if i < tensors else 0, dtype=dtype) for i in range(2))
    if rows == 0:
        return dx, dweight.zero_(), dbias.zero_()
    c = config_for(kind, "backward", width, DTYPES[x.dtype], _dtype(weight), weight is not None and bias_grad,
                   dres is not None, **(options or {}))
    kernel = body.backward_kernel(c)
    f32 = placeholder_tensor(torch.float32, x.device)
    # The weight's partial-sum workspaces are sized by the grid, which the occupancy query sizes from the kernel:
    # a one-row workspace stands in for that query (the kernel declares them gl<f32, P, width>), as a placeholder
    # does for column_sums' ticket.
    workspace = x.new_empty(1, width, dtype=torch.float32) if weight is not None else f32
    args = [_rows(dy, width), _rows(dres, width) if dres is not None else placeholder_tensor(x.dtype, x.device),
            _rows(x, width), _vector(weight, x, weight), mean.reshape(rows) if kind == "layer" else f32,
            rstd.reshape(rows).contiguous(), dx.view(rows, width), workspace, workspace if bias_grad else f32,
            placeholder_tensor(torch.int32, x.device)]
    blocks = grid(kernel, c, rows, args)
    if tensors:
        parts = blocks // c.cluster * c.rows_per_block      # a workspace row per row group of the grid
        partials = x.new_empty(tensors, parts, width, dtype=torch.float32)
        slices = column_slices(parts, width, tensors, x)
        ticket = x.new_empty(max(4, tensors * cdiv(width, CHUNK)), dtype=torch.int32)   # (zeroed by the backward)
        args[7:10] = partials[0], partials[1] if bias_grad else f32, ticket
    kernel[(blocks,)](*args)
    if tensors:
        column_sums(partials, (dweight, dbias)[:tensors], slices, ticket)
    return dx, dweight, dbias


SLICE_ROWS = 16                 # column_sums: workspace rows a slice of a column chunk's at least (2 a warp)
MOST_SLICES = 32                # ... and slices at most (the last block adds their sums: one load a lane a warp)


def column_slices(parts: int, width: int, tensors: int, x: torch.Tensor) -> int:
    """Slices of the workspace's rows column_sums takes apart: enough blocks for two an SM."""
    from tkpy.templates import multiprocessors
    sms = multiprocessors(x) if x.is_cuda else INTERPRETER_SMS
    return max(1, min(MOST_SLICES, cdiv(parts, SLICE_ROWS), cdiv(2 * sms, cdiv(width, CHUNK) * tensors)))


def column_sums(partials: torch.Tensor, outs: tuple, slices: int, ticket: torch.Tensor) -> None:
    """outs[t] = partials[t].sum(0) (fp32 sums in a fixed order, written in the outputs' dtype), partials (T, P,
    width), in `slices` slices of the rows (ticket: T x the column chunks zeroed int32 counters, slices > 1)."""
    tensors, _, width = partials.shape
    kernel = body.column_sums_kernel(width, WEIGHT_DTYPES[outs[0].dtype], tensors, slices > 1)
    second = partials.new_empty(tensors, slices, width) if slices > 1 else placeholder_tensor(torch.float32,
                                                                                              partials.device)
    rows = [o.view(width) for o in outs] + [placeholder_tensor(outs[0].dtype, partials.device)] * (2 - tensors)
    kernel[(cdiv(width, CHUNK), slices, tensors)](
        partials, *rows, second, ticket if slices > 1 else placeholder_tensor(torch.int32, partials.device))


def _vector(t, x, weight) -> torch.Tensor:
    """A weight or bias as one contiguous row; absent, a placeholder of the weight's dtype (the input's without one),
    as the kernels declare it."""
    if t is None:
        return placeholder_tensor(weight.dtype if weight is not None else x.dtype, x.device)
    v = t.reshape(-1)
    return v if tma_ready(v) else v.clone(memory_format=torch.contiguous_format)


def _dtype(weight) -> str | None:
    return WEIGHT_DTYPES[weight.dtype] if weight is not None else None


def _check_gradient(kind: str, g, x, what: str) -> None:
    if g.shape != x.shape or g.dtype != x.dtype or g.device != x.device:
        raise ValueError(f"{NAMES[kind]}_backward: {what} must have the input's shape, dtype and device; got "
                         f"{tuple(g.shape)} {g.dtype} on {g.device} against {tuple(x.shape)} {x.dtype} on {x.device}")
