"""rms_norm and layer_norm as torch operators (`torch.ops.tkpy.rms_norm`, `layer_norm` and their `_backward`s) with
autograd, and the fused residual variant LLM blocks use: `y, residual_out = rms_norm(x, shape, w, residual=r)`
normalizes h = x + r (rounded to the dtype) and returns h too, the next block's residual.

Names and arguments follow torch.nn.functional (`F.rms_norm(input, normalized_shape, weight=None, eps=None)`,
`F.layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5)`), `residual=` keyword-only. The kernels:
kernels/norm_kernel.py (one pass over the rows each way, fp32 statistics), their launches kernels/norm_launch.py.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import norm_launch as launch
from .op_support import define, direct_call_ok


def rms_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None, eps: float | None = None, *,
             residual: torch.Tensor | None = None):
    """torch.nn.functional.rms_norm: y = x / sqrt(mean(x^2) + eps) * weight over the trailing `normalized_shape` dims
    (rows of 256 to 65536 elements, a multiple of 8), bf16 or fp16 in and out, fp32 statistics; weight of shape
    normalized_shape in the input's dtype or float32 (None: none); eps None is torch.finfo(input.dtype).eps, as in
    torch. With `residual` (the input's shape and dtype): h = input + residual, rounded to the dtype, is normalized
    and returned as well, `(y, h)`.

    CUDA tensors, or CPU tensors under TKPY_INTERPRET=1 (tkpy's CPU interpreter). Differentiable in input, weight
    and residual (the backward is tkpy's kernel; no double backward); torch.compile sees torch.ops.tkpy.rms_norm."""
    shape = launch.normalized(normalized_shape)
    eps = torch.finfo(input.dtype).eps if eps is None else float(eps)
    if direct_call_ok((input, weight, residual)):
        y, residual_out, _, _ = launch.forward("rms", input, shape, weight, None, residual, eps)
    else:
        y, residual_out, _ = rms_norm_op(input, shape, weight, residual, eps)
    return (y, residual_out) if residual is not None else y


def layer_norm(input: torch.Tensor, normalized_shape, weight: torch.Tensor | None = None,
               bias: torch.Tensor | None = None, eps: float = 1e-5, *, residual: torch.Tensor | None = None):
    """torch.nn.functional.layer_norm: y = (x - mean) / sqrt(var + eps) * weight + bias over the trailing
    `normalized_shape` dims (the biased variance; rows of 256 to 65536 elements, a multiple of 8), bf16 or fp16 in and
    out, fp32 statistics (the variance from the registers, centred: one pass over memory), weight and bias of shape
    normalized_shape in the input's dtype or float32, both or either (None: none). With `residual`: `(y, h)` as
    rms_norm's. Differentiable in input, weight, bias and residual; torch.compile sees torch.ops.tkpy.layer_norm."""
    shape = launch.normalized(normalized_shape)
    if direct_call_ok((input, weight, bias, residual)):
        y, residual_out, _, _ = launch.forward("layer", input, shape, weight, bias, residual, float(eps))
    else:
        y, residual_out, _, _ = layer_norm_op(input, shape, weight, bias, residual, float(eps))
    return (y, residual_out) if residual is not None else y


# -- the operators ----------------------------------------------------------------------------------------------

def _rms(input: torch.Tensor, normalized_shape: list[int], weight: Optional[torch.Tensor],
         residual: Optional[torch.Tensor], eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    y, residual_out, _, rstd = launch.forward("rms", input, normalized_shape, weight, None, residual, eps)
    return y, residual_out, rstd


def _layer(input: torch.Tensor, normalized_shape: list[int], weight: Optional[torch.Tensor],
           bias: Optional[torch.Tensor], residual: Optional[torch.Tensor],
           eps: float) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return launch.forward("layer", input, normalized_shape, weight, bias, residual, eps)


def _rms_backward(grad_out: torch.Tensor, grad_residual: Optional[torch.Tensor], input: torch.Tensor,
                  weight: Optional[torch.Tensor], rstd: torch.Tensor,
                  normalized_shape: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    dx, dweight, _ = launch.backward("rms", grad_out, grad_residual, input, weight, None, rstd, normalized_shape, False)
    return dx, dweight


def _layer_backward(grad_out: torch.Tensor, grad_residual: Optional[torch.Tensor], input: torch.Tensor,
                    weight: Optional[torch.Tensor], mean: torch.Tensor, rstd: torch.Tensor,
                    normalized_shape: list[int], bias_grad: bool) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    return launch.backward("layer", grad_out, grad_residual, input, weight, mean, rstd, normalized_shape, bias_grad)


def _outputs(kind: str, input, shape, weight, bias, residual):
    """The forward's outputs, empty, after its checks (what the fake implementations return)."""
    launch.checked(kind, input, shape, weight, bias, residual)
    stats = launch.statistics_shape(input, shape)
    residual_out = input.new_empty(input.shape) if residual is not None else input.new_empty(0)
    rstd = input.new_empty(stats, dtype=torch.float32)
    mean = input.new_empty(stats if kind == "layer" else (0,), dtype=torch.float32)
    return input.new_empty(input.shape), residual_out, mean, rstd


def _rms_fake(input, normalized_shape, weight, residual, eps):
    y, residual_out, _, rstd = _outputs("rms", input, normalized_shape, weight, None, residual)
    return y, residual_out, rstd


def _layer_fake(input, normalized_shape, weight, bias, residual, eps):
    return _outputs("layer", input, normalized_shape, weight, bias, residual)


def _gradients_fake(kind, grad_out, grad_residual, input, weight, mean, rstd, normalized_shape, bias_grad):
    launch.checked_backward(kind, grad_out, grad_residual, input, weight, mean, rstd, normalized_shape)
    empty = input.new_empty(0, dtype=weight.dtype if weight is not None else torch.float32)
    dweight = input.new_empty(normalized_shape, dtype=weight.dtype) if weight is not None else empty
    dbias = input.new_empty(normalized_shape, dtype=weight.dtype) if weight is not None and bias_grad else empty
    return input.new_empty(input.shape), dweight, dbias


def _rms_backward_fake(grad_out, grad_residual, input, weight, rstd, normalized_shape):
    return _gradients_fake("rms", grad_out, grad_residual, input, weight, None, rstd, normalized_shape, False)[:2]


def _layer_backward_fake(grad_out, grad_residual, input, weight, mean, rstd, normalized_shape, bias_grad):
    return _gradients_fake("layer", grad_out, grad_residual, input, weight, mean, rstd, normalized_shape, bias_grad)


# -- autograd -----------------------------------------------------------------------------------------------------
# The forward saves h (the input, or input + residual), the weight and the statistics; the backward's kernel returns
# dh (with the gradient of residual_out added), which is the input's gradient and the residual's. The statistics are
# outputs for the backward only: they are marked non-differentiable. No zero gradient is materialized for an output
# the loss does not reach (autograd would fill one of each: the statistics', and residual_out's of rows x width where
# only y is used): a None gradient of residual_out is no term (the kernel without it), a None gradient of y leaves h's
# gradient residual_out's and none for the weight and bias, as torch's eager graph (whose norm would not run).

def _rms_setup(ctx, inputs, output):
    input, shape, weight, residual, eps = inputs
    y, residual_out, rstd = output
    ctx.mark_non_differentiable(rstd)
    ctx.set_materialize_grads(False)
    ctx.save_for_backward(residual_out if residual is not None else input, weight, rstd)
    ctx.shape, ctx.fused = shape, residual is not None


def _rms_gradient(ctx, grad_y, grad_residual_out, grad_rstd):
    h, weight, rstd = ctx.saved_tensors
    dres = grad_residual_out if ctx.fused else None
    if grad_y is None:                                # (only residual_out reaches the loss, or nothing does)
        return dres, None, None, dres, None
    dh, dweight = rms_norm_backward_op(grad_y, dres, h, weight, rstd, ctx.shape)
    return dh, None, dweight if weight is not None else None, dh if ctx.fused else None, None


def _layer_setup(ctx, inputs, output):
    input, shape, weight, bias, residual, eps = inputs
    y, residual_out, mean, rstd = output
    ctx.mark_non_differentiable(mean, rstd)
    ctx.set_materialize_grads(False)
    if bias is not None and weight is None:           # (the forward scaled by ones)
        weight = torch.ones_like(bias)
        ctx.ones = True
    else:
        ctx.ones = False
    ctx.save_for_backward(residual_out if residual is not None else input, weight, mean, rstd)
    ctx.shape, ctx.fused, ctx.bias = shape, residual is not None, bias is not None


def _layer_gradient(ctx, grad_y, grad_residual_out, grad_mean, grad_rstd):
    h, weight, mean, rstd = ctx.saved_tensors
    dres = grad_residual_out if ctx.fused else None
    if grad_y is None:
        return dres, None, None, None, dres, None
    dh, dweight, dbias = layer_norm_backward_op(grad_y, dres, h, weight, mean, rstd, ctx.shape, ctx.bias)
    dweight = dweight if weight is not None and not ctx.ones else None
    return dh, None, dweight, dbias if ctx.bias else None, dh if ctx.fused else None, None


rms_norm_backward_op = define("rms_norm_backward", _rms_backward, _rms_backward_fake,
                              differentiable="double backward of rms_norm is not implemented")
layer_norm_backward_op = define("layer_norm_backward", _layer_backward, _layer_backward_fake,
                                differentiable="double backward of layer_norm is not implemented")
rms_norm_op = define("rms_norm", _rms, _rms_fake, backward=_rms_gradient, setup_context=_rms_setup)
layer_norm_op = define("layer_norm", _layer, _layer_fake, backward=_layer_gradient, setup_context=_layer_setup)
