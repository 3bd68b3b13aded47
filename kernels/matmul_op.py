"""`tkpy.kernels.matmul`: the GEMM of kernels/gemm.py as the torch operator `torch.ops.tkpy.matmul`, with autograd.

Backward: with Z = scale * A @ B + bias and C = act(Z), dZ = dC * act'(Z), dA = scale * dZ @ B^T and
dB = scale * A^T @ dZ, both through tkpy's own GEMM (dB as scale * dZ^T @ A when B is the transpose of a row-major
weight, so that the gradient has the weight's layout), and dbias = sum of dZ's rows (fp32, then the bias's dtype).
relu's derivative reads C. GELU and SiLU need Z: where a call needs gradients, matmul computes Z with tkpy's GEMM
and applies the activation with torch (its autograd keeps Z), as an unfused Linear + activation would; the
operator called directly with a gradient-requiring input recomputes Z in the backward instead.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import gemm
from .op_support import define, direct_call_ok, needs_grad

# The activations whose derivative needs the pre-activation Z, as torch functions of Z (matmul keeps Z for them).
PRE_ACTIVATION_NEEDED = {"gelu": lambda z: torch.nn.functional.gelu(z, approximate="tanh"),
                         "silu": torch.nn.functional.silu}


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, *, bias: torch.Tensor | None = None,
           activation: str | None = None, scale: float | None = None, out_dtype: torch.dtype | None = None,
           block_n: int | None = None, split_k: int | None = None, deterministic: bool = True) -> torch.Tensor:
    """`activation(scale * (a @ b) + bias)` with fp32 accumulation, written to `out` (or a new tensor).

    a: (M, K), b: (K, N), both bf16 or both fp16, CUDA tensors (CPU tensors under TKPY_INTERPRET=1). b may be
    row-major, or the transpose of a row-major (N, K) tensor (`w.T`, strides (1, K)): that layout is read as is.
    Other layouts are copied first. bias: (N,) added to every row (any float dtype; bf16/fp16/fp32 are read as
    is). activation: None, "relu", "silu" or "gelu" (the tanh approximation, torch's gelu(approximate="tanh")).
    scale: a number. Output dtype: `out_dtype`, else out's, else the inputs'; bf16, fp16 or fp32.
    Differentiable in a, b and bias (not with `out`, as torch's out= arguments); torch.compile sees it as
    torch.ops.tkpy.matmul. With GELU or SiLU and an input that requires grad, the product is rounded to the output
    dtype before the activation (as torch's Linear followed by the activation), not fused.

    Any M, N, K. TMA needs 16-byte aligned base pointers and row strides (K, or N for a row-major b, a
    multiple of 8 elements): an operand that is not is first copied into a padded buffer (one extra
    read and write of it), and so is C (computed into a padded buffer, then copied into place).
    `block_n`: force the tile width (256, 128 or 64; default: gemm_policy.block_n_for's, the widest unless a
    narrower one keeps clearly more SMs busy).

    Split-K (kernels/gemm_splitk.py): `split_k=S` (S > 1) has S tasks share each tile's K steps and write fp32
    partial sums that a second kernel adds up before the epilogue, for outputs of few tiles next to the SMs
    (e.g. M = 128 against an 8192 x 8192 weight); None or 1 (the default: splitting measured slower on the
    H200) does not split. `deterministic=True` adds the partials in a fixed order (the same bits on every run);
    False adds them with TMA fp32 reductions into one workspace (less traffic, run-to-run rounding
    differences)."""
    options = (block_n, split_k, deterministic)
    if out is not None:
        if direct_call_ok((a, b, bias, out)):
            return gemm.run(a, b, out, bias, activation, scale, out_dtype, *options)
        matmul_out_op(a, b, out, bias, activation, scale, out_dtype, *options)
        return out
    if activation in PRE_ACTIVATION_NEEDED and needs_grad(a, b, bias):
        z = matmul(a, b, bias=bias, scale=scale, out_dtype=out_dtype, block_n=block_n, split_k=split_k,
                   deterministic=deterministic)
        return PRE_ACTIVATION_NEEDED[activation](z)
    if direct_call_ok((a, b, bias)):
        return gemm.run(a, b, None, bias, activation, scale, out_dtype, *options)
    return matmul_op(a, b, bias, activation, scale, out_dtype, *options)


def _impl(a: torch.Tensor, b: torch.Tensor, bias: Optional[torch.Tensor] = None, activation: Optional[str] = None,
          scale: Optional[float] = None, out_dtype: Optional[torch.dtype] = None, block_n: Optional[int] = None,
          split_k: Optional[int] = None, deterministic: bool = True) -> torch.Tensor:
    return gemm.run(a, b, None, bias, activation, scale, out_dtype, block_n, split_k, deterministic)


def _fake(a, b, bias=None, activation=None, scale=None, out_dtype=None, block_n=None, split_k=None,
          deterministic=True):
    dtype = gemm.checked(a, b, bias, activation, out_dtype, None, block_n, split_k, scale)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=dtype)


def _setup_context(ctx, inputs, output):
    a, b, bias, activation, scale, out_dtype, *options = inputs     # (every argument, defaults filled in)
    ctx.save_for_backward(a, b, bias, output if activation == "relu" else None)
    ctx.activation, ctx.scale, ctx.options = activation, scale, options


def _backward(ctx, dc):
    a, b, bias, c = ctx.saved_tensors
    activation, scale, (block_n, split_k, deterministic) = ctx.activation, ctx.scale, ctx.options
    if activation == "relu":
        dz = torch.ops.aten.threshold_backward(dc, c, 0)
    elif activation is not None:                 # the operator called directly: Z recomputed
        z = matmul(a, b, bias=bias, scale=scale, out_dtype=torch.float32, block_n=block_n, split_k=split_k,
                   deterministic=deterministic)
        dz = (torch.ops.aten.gelu_backward(dc.float(), z, approximate="tanh") if activation == "gelu"
              else torch.ops.aten.silu_backward(dc.float(), z))
    else:
        dz = dc
    da = db = dbias = None
    low = dz.to(a.dtype)
    if ctx.needs_input_grad[0]:
        da = matmul(low, b.T, scale=scale, out_dtype=a.dtype)
    if ctx.needs_input_grad[1]:
        if b.stride(0) == 1 and b.stride(1) != 1:     # b = w.T: dW = scale * dZ^T @ A in w's layout, dB = dW^T
            db = matmul(low.T, a, scale=scale, out_dtype=b.dtype).T
        else:
            db = matmul(a.T, low, scale=scale, out_dtype=b.dtype)
    if bias is not None and ctx.needs_input_grad[2]:
        dbias = dz.float().sum(0).to(bias.dtype)
    return da, db, dbias, None, None, None, None, None, None


matmul_op = define("matmul", _impl, _fake, backward=_backward, setup_context=_setup_context)


def _out_impl(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: Optional[torch.Tensor] = None,
              activation: Optional[str] = None, scale: Optional[float] = None, out_dtype: Optional[torch.dtype] = None,
              block_n: Optional[int] = None, split_k: Optional[int] = None, deterministic: bool = True) -> None:
    gemm.run(a, b, out, bias, activation, scale, out_dtype, block_n, split_k, deterministic)


def _out_fake(a, b, out, bias=None, activation=None, scale=None, out_dtype=None, block_n=None, split_k=None,
              deterministic=True):
    gemm.checked(a, b, bias, activation, out_dtype, out, block_n, split_k, scale)


matmul_out_op = define("matmul_out", _out_impl, _out_fake, mutates_args=("out",),
                       differentiable="out= arguments do not support automatic differentiation, as in torch")
