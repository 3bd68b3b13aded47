"""Row softmax over the last dim, `torch.ops.tkpy.softmax`, and its backward, each a tkpy kernel.

Each warp takes 16 rows in one fp32 register tile as wide as a row rounded up to 16 columns (at most 256), four
warps a block; the last block's tile may hang past the last row and its columns past the row's end: the copies
are bounds-checked. Forward: y = exp(x - max) / sum(exp(x - max)). Backward: dx = y * (dy - rowsum(dy * y)).

`python -m tkpy.kernels` is its demo: on a Hopper GPU it runs and checks both against torch; without one it prints
the generated CUDA and compiles it.
"""
# (No `from __future__ import annotations`: the kernels' annotations name their factory's argument `dtype`, so they
# are evaluated where they are written. As strings tkpy would look `dtype` up in the frame that applied @tk.kernel,
# which it does not search for inside the installed tkpy package.)
import functools
import math

import torch

import tkpy as tk
from tkpy import bf16, f32, fp16
from .op_support import check_device, define, direct_call_ok
from .tensor_layout import cdiv, padded_copy, padded_like, tma_ready

WARPS = 4
ROWS_PER_WARP = 16
ROWS_PER_BLOCK = WARPS * ROWS_PER_WARP
MAX_D = 256                                    # a row in one warp's registers (wider rows: a later kernel)
DTYPES = {torch.bfloat16: bf16, torch.float16: fp16}


@functools.cache
def softmax_rows_factory(dtype):
    """The forward kernel for x and y of one dtype (bf16 or fp16). D: the tile width, the row length rounded up
    to 16."""
    @tk.kernel(warps=WARPS, name="softmax_rows")
    def softmax_rows(x: tk.gl[dtype, "R", "C"], y: tk.gl[dtype, "R", "C"], D: tk.constexpr):
        row = tk.block_idx.x * WARPS + tk.warp_id()          # this warp's 16-row tile
        t = tk.rt(f32, ROWS_PER_WARP, D)                      # register tile, row layout
        m, s = tk.col_vec(t), tk.col_vec(t)                   # one value per row
        tk.load(t, x, (row, 0), fill=-math.inf)               # 16-bit -> f32; past the row's end exp gives 0
        tk.row_max(m, t)
        tk.sub_row(t, t, m)
        tk.exp(t, t)
        tk.row_sum(s, t)
        tk.div_row(t, t, s)
        tk.store(y, t, (row, 0), masked=True)                 # f32 -> 16-bit
    return softmax_rows


@functools.cache
def softmax_backward_rows_factory(dtype):
    """The backward kernel: dx = dy * y - y * rowsum(dy * y), in fp32. y stays in a 16-bit tile (exactly: it
    is read from one), as two fp32 tiles of 256 columns would not fit in 255 registers a thread; it is loaded
    first, while fewer registers are live (loaded the other way round, D = 256 spills)."""
    @tk.kernel(warps=WARPS, name="softmax_backward_rows")
    def softmax_backward_rows(dy: tk.gl[dtype, "R", "C"], y: tk.gl[dtype, "R", "C"], dx: tk.gl[dtype, "R", "C"],
                              D: tk.constexpr):
        row = tk.block_idx.x * WARPS + tk.warp_id()
        p, g = tk.rt(dtype, ROWS_PER_WARP, D), tk.rt(f32, ROWS_PER_WARP, D)
        s = tk.col_vec(g)
        tk.load(p, y, (row, 0), masked=True)                  # zero past the edges: adds nothing to the sums
        tk.load(g, dy, (row, 0), masked=True)
        tk.mul(g, g, p)                                       # dy * y
        tk.row_sum(s, g)
        tk.map(g, lambda g, p, s: g - p * s, g, p, s)         # dy * y - y * s = y * (dy - s)
        tk.store(dx, g, (row, 0), masked=True)
    return softmax_backward_rows


softmax_rows = softmax_rows_factory(bf16)
softmax_backward_rows = softmax_backward_rows_factory(bf16)


def softmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """torch.softmax(x, dim) over the last dim of a bf16 or fp16 tensor of any leading dims, rows of 1 to 256
    elements (fp32 statistics). Returns a contiguous tensor of x's shape and dtype.

    CUDA tensors, or CPU tensors under TKPY_INTERPRET=1 (tkpy's CPU interpreter runs the kernel). x may be a
    strided view: read in place where its last dim is contiguous and its pointer and row strides are 16-byte
    aligned, else copied first. Differentiable (the backward is the tkpy kernel softmax_backward_rows; no double
    backward); torch.compile sees it as torch.ops.tkpy.softmax (and its backward as torch.ops.tkpy.softmax_backward).
    """
    if dim not in (-1, x.dim() - 1):
        raise NotImplementedError(f"softmax over dim {dim} of a {x.dim()}-D tensor: only the last dim is implemented; "
                                  f"move it last: softmax(x.movedim({dim}, -1)).movedim(-1, {dim})")
    return _forward(x) if direct_call_ok((x,)) else softmax_op(x)


def softmax_backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """The gradient of softmax's input from y = softmax(x) and the gradient dy of y: y * (dy - rowsum(dy * y))."""
    return _backward(dy, y) if direct_call_ok((dy, y)) else softmax_backward_op(dy, y)


def checked(x: torch.Tensor, name: str = "softmax") -> int:
    """x's row length, or the error softmax raises for x. Reads only shapes, dtypes and devices: the fake impls
    check with it too."""
    check_device(name, x)
    if x.dtype not in DTYPES:
        raise ValueError(f"{name} takes bf16 or fp16 tensors, got {x.dtype}")
    if x.dim() == 0:
        raise ValueError(f"{name} takes a tensor of at least one dim, got a 0-d tensor")
    if x.shape[-1] > MAX_D:
        raise ValueError(f"{name} takes rows of at most {MAX_D} elements (a row lies in one warp's registers), "
                         f"got {x.shape[-1]} (shape {tuple(x.shape)})")
    return x.shape[-1]


def checked_backward(dy: torch.Tensor, y: torch.Tensor) -> int:
    """checked(y), and dy like y."""
    if dy.shape != y.shape or dy.dtype != y.dtype or dy.device != y.device:
        raise ValueError(f"softmax_backward: dy must have y's shape, dtype and device; got {tuple(dy.shape)} "
                         f"{dy.dtype} on {dy.device} against {tuple(y.shape)} {y.dtype} on {y.device}")
    return checked(y, "softmax_backward")


def _forward(x: torch.Tensor) -> torch.Tensor:
    d, y = checked(x), x.new_empty(x.shape)
    _launch(softmax_rows_factory(DTYPES[x.dtype]), (x,), y, d)
    return y


def _backward(dy: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    d, dx = checked_backward(dy, y), y.new_empty(y.shape)
    _launch(softmax_backward_rows_factory(DTYPES[y.dtype]), (dy, y), dx, d)
    return dx


def _launch(kernel, inputs, out: torch.Tensor, d: int) -> None:
    """kernel over the rows of `inputs` (each as (rows, d)) into `out` (a new contiguous tensor), one block per
    64 rows; no launch for no rows."""
    if out.numel() == 0:
        return
    rows = out.view(-1, d)
    dst = rows if tma_ready(rows) else padded_like(rows)
    kernel[(cdiv(rows.shape[0], ROWS_PER_BLOCK),)](*(_readable(x.reshape(-1, d)) for x in inputs), dst,
                                                   cdiv(d, 16) * 16)
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


softmax_op = define("softmax", _forward, _fake, backward=_gradient, setup_context=_setup_context)
softmax_backward_op = define("softmax_backward", _backward, _backward_fake,
                             differentiable="double backward of softmax is not implemented")
