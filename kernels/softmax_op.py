"""softmax over the last dim as a torch operator (`torch.ops.tkpy.softmax`) with autograd, its backward its own
operator (`torch.ops.tkpy.softmax_backward`): bf16, fp16 or fp32 in and out, fp32 statistics, rows of 1 to 262144
elements.

The kernels (kernels/softmax_policy.py chooses): rows up to 128 wide, 16 rows a warp in a register tile
(kernels/row_softmax.py); wider ones split over warps, blocks and clusters of blocks, one pass over memory each way
(kernels/softmax_kernel.py). Rows must start 16 bytes apart to be read in place: others (a width that is not a
multiple of 16 bytes, a strided view of unaligned rows) are copied into padded rows first, and the output written
through padded rows and copied back (two extra passes over memory).
"""
from __future__ import annotations

import torch

import tkpy as tk

from . import row_softmax
from . import row_split as split
from . import softmax_kernel as body
from .op_support import check_device, define, direct_call_ok
from .softmax_config import MAX_WIDTH
from .softmax_policy import config_for, tile_config
from .tensor_layout import cdiv, padded_copy, padded_like, tma_ready

DTYPES = {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "f32"}
TK = {"bf16": tk.bf16, "fp16": tk.fp16, "f32": tk.f32}


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.softmax(x, dim) over the last dim of a bf16, fp16 or fp32 tensor of any leading dims, rows of 1 to
    262144 elements (fp32 statistics: the max and the sum of exponentials). Returns a contiguous tensor of x's shape
    and dtype. A row of -inf only gives NaN, as torch's.

    CUDA tensors, or CPU tensors under TKPY_INTERPRET=1 (tkpy's CPU interpreter runs the kernels). x may be a
    strided view: read in place where its last dim is contiguous and its pointer and row strides are 16-byte
    aligned, else copied first. Differentiable (the backward is tkpy's kernel too; no double backward);
    torch.compile sees it as torch.ops.tkpy.softmax (and its backward as torch.ops.tkpy.softmax_backward)."""
    if dim not in (-1, x.dim() - 1):
        raise NotImplementedError(f"softmax over dim {dim} of a {x.dim()}-D tensor: only the last dim is implemented; "
                                  f"move it last: softmax(x.movedim({dim}, -1)).movedim(-1, {dim})")
    return forward(x) if direct_call_ok((x,)) else softmax_op(x)


def softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of softmax's input from y = softmax(x) and the gradient dy of y: y * (dy - rowsum(dy * y))."""
    return backward(dy, y) if direct_call_ok((dy, y)) else softmax_backward_op(dy, y)


def checked(x: torch.Tensor, name: str = "softmax") -> int:
    """x's row length, or the error softmax raises for x. Reads only shapes, dtypes and devices: the fake impls
    check with it too."""
    check_device(name, x)
    if x.dtype not in DTYPES:
        raise ValueError(f"{name} takes bf16, fp16 or fp32 tensors, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError(f"{name} takes a tensor of at least one dim, got a 0-d tensor")
    if x.shape[-1] > MAX_WIDTH:
        raise ValueError(f"{name} takes rows of at most {MAX_WIDTH} elements (a row held on chip by a cluster of 8 "
                         f"blocks), got {x.shape[-1]} (shape {tuple(x.shape)})")
    return x.shape[-1]


def checked_backward(dy: torch.Tensor, y: torch.Tensor) -> int:
    """checked(y), and dy like y."""
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"softmax_backward: dy must have y's shape, dtype and device; got {tuple(dy.shape)} "
                         f"{dy.dtype} on {dy.device} against {tuple(y.shape)} {y.dtype} on {y.device}")
    return checked(y, "softmax_backward")


def forward(x: torch.Tensor, options: dict | None = None) -> torch.Tensor:
    """softmax(x) over the last dim into a new contiguous tensor. `options`: SoftmaxConfig fields over the policy's
    (the tests', the benchmark's variants)."""
    width, y = checked(x), x.new_empty(x.shape)
    _launch("forward", (x,), y, width, options)
    return y


def backward(dy: torch.Tensor, y: torch.Tensor, options: dict | None = None) -> torch.Tensor:
    """softmax's input gradient into a new contiguous tensor (`options`: as forward's)."""
    width, dx = checked_backward(dy, y), y.new_empty(y.shape)
    _launch("backward", (dy, y), dx, width, options)
    return dx


def _launch(direction: str, inputs, out: torch.Tensor, width: int, options: dict | None) -> None:
    """The kernel over the rows of `inputs` (each as (rows, width); packed: (rows / packed, packed * width)) into
    `out` (a new contiguous tensor): the tile kernels a block per rows_per_block rows, the split ones a persistent
    grid or a block a row group; no launch for no rows."""
    if out.numel() == 0:
        return
    c = config_for(direction, width, DTYPES[out.dtype], **(options or {}))
    if c.packed and out.numel() // width % c.packed:           # (rows that do not fill whole packed ones)
        c = tile_config(direction, width, c.dtype)
    rows = out.view(-1, c.packed_width)                         # (packed: c.packed rows a kernel row)
    dst = rows if tma_ready(rows) else padded_like(rows)
    args = (*(_readable(x.reshape(-1, c.packed_width)) for x in inputs), dst)
    if c.tile:
        factory = row_softmax.softmax_rows_factory if direction == "forward" else \
            row_softmax.softmax_backward_rows_factory
        factory(TK[c.dtype], c.warps)[(cdiv(rows.shape[0], c.rows_per_block),)](*args, c.tile_width)
    else:
        kernel = (body.forward_kernel if direction == "forward" else body.backward_kernel)(c)
        kernel[(split.grid(kernel, c, rows.shape[0], args),)](*args)
    if dst is not rows:
        rows.copy_(dst)


def _readable(x: torch.Tensor) -> torch.Tensor:
    """x, or a copy a kernel can read: rows padded to 16 bytes."""
    return x if tma_ready(x) else padded_copy(x)


def _fake(x):
    checked(x)
    return x.new_empty(x.shape)


def _backward_fake(dy, y):
    checked_backward(dy, y)
    return y.new_empty(y.shape)


def _setup_context(ctx, inputs, output):
    ctx.save_for_backward(output)


def _gradient(ctx, dy):
    y, = ctx.saved_tensors
    return softmax_backward(dy, y)


def _forward_impl(x: torch.Tensor) -> torch.Tensor:
    return forward(x)


def _backward_impl(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return backward(dy, y)


softmax_op = define("softmax", _forward_impl, _fake, backward=_gradient, setup_context=_setup_context)
softmax_backward_op = define("softmax_backward", _backward_impl, _backward_fake,
                             differentiable="double backward of softmax is not implemented")
