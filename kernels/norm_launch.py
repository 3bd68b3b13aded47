"""The norm kernels' launches: argument checks (shared with the operators' fake implementations), the rows as 2-D
views, placeholders for absent tensors, the persistent grid, and the backward's finishing column sums. The torch
operators and autograd are kernels/norms.py's; the kernels kernels/norm_kernel.py's."""
from __future__ import annotations

import math
from collections.abc import Sequence

import torch

from . import norm_kernel as body
from .norm_config import MAX_WIDTH, MIN_WIDTH, TICKETS
from .norm_policy import column_sums_for, config_for
from .op_support import check_device
from .row_split import CHUNK, grid, placeholder_tensor
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


def forward(kind: str, x, shape, weight, bias, residual, eps: float, options: dict | None = None,
            tickets: torch.Tensor | None = None):
    """(y, residual_out, mean, rstd) of the norm over the trailing `shape` dims: residual_out = x + residual (empty
    without one), mean and rstd fp32 of the leading dims' shape (mean empty for rms). `tickets` (new_tickets'): the
    kernel zeroes them for the backward's last-block sums. `options`: NormConfig fields overriding the policy's
    (tests, the benchmark's variants); an empty one is none."""
    width = checked(kind, x, shape, weight, bias, residual)
    tickets = tickets if tickets is not None and tickets.numel() else None
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
                   tickets=tickets is not None, **(options or {}))
    out = y.view(rows, width)
    f32 = placeholder_tensor(torch.float32, x.device)
    args = (_rows(x, width), _rows(residual, width) if residual is not None else placeholder_tensor(x.dtype, x.device),
            _vector(weight, x, weight), _vector(bias, x, weight), out,
            residual_out.view(rows, width) if residual is not None else placeholder_tensor(x.dtype, x.device),
            mean.view(rows) if kind == "layer" else f32, rstd.view(rows),
            tickets.view(torch.float32) if tickets is not None else f32, float(eps))
    kernel = body.forward_kernel(c)
    kernel[(grid(kernel, c, rows, args),)](*args)
    return y, residual_out, mean, rstd


def checked_backward(kind: str, dy, dres, x, weight, mean, rstd, shape, tickets=None) -> int:
    """The row width of the norm's backward, or the ValueError it raises before any GPU work (the fake
    implementations check with it too): the forward's checks, the gradients and statistics like the input, the
    tickets (None or empty: none) the forward's."""
    width = checked(kind, x, shape, weight)
    _check_gradient(kind, dy, x, "grad_output")
    if dres is not None:
        _check_gradient(kind, dres, x, "the residual output's gradient")
    stats = statistics_shape(x, shape)
    for what, t in (("rstd", rstd),) + ((("mean", mean),) if kind == "layer" else ()):
        if tuple(t.shape) != stats or t.dtype != torch.float32 or t.device != x.device:
            raise ValueError(f"{NAMES[kind]}_backward: {what} must be float32 of shape {stats} on the input's device "
                             f"({x.device}), got {t.dtype} {tuple(t.shape)} on {t.device}")
    if tickets is not None and tickets.numel() and (tickets.shape != (TICKETS,) or tickets.dtype != torch.int32
                                                    or tickets.device != x.device):
        raise ValueError(f"{NAMES[kind]}_backward: tickets must be the forward's, int32 of shape ({TICKETS},) on the "
                         f"input's device ({x.device}), got {tickets.dtype} {tuple(tickets.shape)} on {tickets.device}")
    return width


def backward(kind: str, dy, dres, x, weight, mean, rstd, shape, bias_grad: bool, options: dict | None = None,
             tickets: torch.Tensor | None = None):
    """(dx, dweight, dbias) of the norm of x (h = x + residual when fused) from the forward's statistics: dx also
    carries dres, the gradient of residual_out (None: none); dweight / dbias empty without a weight / bias_grad.
    `tickets`: the forward's (new_tickets', zeroed by it; the kernel leaves them at 0), which the "last_block" sums
    take (the policy's or `options`' choice; without tickets, or empty ones, the column_sums launch). `options`: as
    forward's."""
    width = checked_backward(kind, dy, dres, x, weight, mean, rstd, shape, tickets)
    tickets = tickets if tickets is not None and tickets.numel() else None
    stats = statistics_shape(x, shape)
    dx = x.new_empty(x.shape)
    empty = x.new_empty(0, dtype=weight.dtype if weight is not None else torch.float32)
    dweight = x.new_empty(shape, dtype=weight.dtype) if weight is not None else empty
    dbias = x.new_empty(shape, dtype=weight.dtype) if weight is not None and bias_grad else empty
    rows = dx.numel() // width
    if rows == 0:
        return dx, dweight.zero_(), dbias.zero_()
    sums = column_sums_for(width) if weight is not None and tickets is not None else "launch"
    c = config_for(kind, "backward", width, DTYPES[x.dtype], _dtype(weight), weight is not None and bias_grad,
                   dres is not None, **{"sums": sums, **(options or {})})
    if c.sums == "last_block" and tickets is None:
        raise ValueError(f"{NAMES[kind]}_backward: the last-block column sums take the forward's tickets "
                         "(norm_launch.new_tickets, zeroed by the forward)")
    tree = c.sums == "last_block"
    kernel = body.backward_kernel(c)
    f32 = placeholder_tensor(torch.float32, x.device)
    # The weight's partial-sum workspaces are sized by the grid, which the occupancy query sizes from the kernel:
    # a one-row workspace stands in for that query (the kernel declares them gl<f32, P, width>).
    workspace = x.new_empty(1, width, dtype=torch.float32) if weight is not None else f32
    no_weight = placeholder_tensor(weight.dtype if weight is not None else x.dtype, x.device)
    args = [_rows(dy, width), _rows(dres, width) if dres is not None else placeholder_tensor(x.dtype, x.device),
            _rows(x, width), _vector(weight, x, weight), mean.reshape(rows) if kind == "layer" else f32,
            rstd.reshape(rows).contiguous(), dx.view(rows, width), workspace, workspace if bias_grad else f32,
            dweight.view(width) if tree else no_weight, dbias.view(width) if tree and bias_grad else no_weight,
            tickets if tree else placeholder_tensor(torch.int32, x.device), 1]
    blocks = grid(kernel, c, rows, args)
    clusters = blocks // c.cluster
    parts = clusters * c.rows_per_block                     # a workspace row per row group of the grid
    if tree:                                                # ... and one a group of clusters
        args[-1] = group_size(clusters, c.rows_per_block, c.cluster)
        parts += cdiv(clusters, args[-1])
    if weight is not None:
        args[7] = x.new_empty(parts, width, dtype=torch.float32)
        if bias_grad:
            args[8] = x.new_empty(parts, width, dtype=torch.float32)
    kernel[(blocks,)](*args)
    if weight is not None and not tree:
        column_sums(args[7], dweight.view(width))
        if bias_grad:
            column_sums(args[8], dbias.view(width))
    return dx, dweight, dbias


def new_tickets(like: torch.Tensor) -> torch.Tensor:
    """The backward's last-block tickets (TICKETS int32, uninitialised: the forward that takes them zeroes them)."""
    return like.new_empty(TICKETS, dtype=torch.int32)


def tickets_for(x: torch.Tensor, shape, weight, bias) -> torch.Tensor:
    """What the forward operators return for their backward: new_tickets where the policy sums the backward's weight
    (or bias) gradient in its last blocks, else an empty int32 tensor (nothing to zero)."""
    if (weight is None and bias is None) or column_sums_for(math.prod(shape)) != "last_block":
        return x.new_empty(0, dtype=torch.int32)
    return new_tickets(x)


def group_size(clusters: int, rows_per_block: int, cluster: int) -> int:
    """Clusters a group of the last-block column sums: about sqrt(clusters / rows_per_block), which balances their
    tail on the last block (a group's partial rows, group x rows_per_block, then a row a group), at most
    TICKETS / cluster - 1 groups (a ticket a group and cluster rank, one a rank for the groups' sums)."""
    size = max(1, round(math.sqrt(clusters / rows_per_block)))
    return max(size, cdiv(clusters, TICKETS // cluster - 1))


def column_sums(partials: torch.Tensor, out: torch.Tensor) -> None:
    """out = partials.sum(0) (fp32 sums in a fixed order, written in out's dtype)."""
    width = partials.shape[1]
    kernel = body.column_sums_kernel(width, WEIGHT_DTYPES[out.dtype])
    kernel[(cdiv(width, CHUNK),)](partials, out)


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
