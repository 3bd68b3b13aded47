"""`tkpy.kernels.matmul_fp8`: kernels/gemm_fp8.py's fp8 GEMM as the torch operator `torch.ops.tkpy.matmul_fp8`.

No backward: fp8 training needs a scaling recipe (amax histories, per-tensor or per-block scales) that this
operator does not choose; inputs that require grad are refused with that message.
"""
from __future__ import annotations

from typing import Optional

import torch

from . import gemm_fp8
from .op_support import define, direct_call_ok

NO_BACKWARD = "fp8 training needs a scaling recipe; differentiate a bf16 matmul instead"


def matmul_fp8(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
               out: torch.Tensor | None = None, *, out_dtype: torch.dtype = torch.bfloat16,
               block_n: int | None = None) -> torch.Tensor:
    """`scale_a * scale_b * (a @ b)` with fp32 accumulation, rounded to `out_dtype` (bf16 by default; fp16, fp32).

    a: (M, K) fp8 (float8_e4m3fn or float8_e5m2), row-major. b: (K, N) fp8, the transpose of a row-major
    (N, K) tensor (strides (1, K)), as torch._scaled_mm takes it. scale_a: a one-element fp32 tensor;
    scale_b: one element or (N,) (per-column scales). K and N multiples of 16. `block_n`: force the tile
    width (256 or 128). CUDA tensors (CPU under TKPY_INTERPRET=1); forward only. torch.compile sees it as
    torch.ops.tkpy.matmul_fp8 (matmul_fp8_out with `out`)."""
    if out is not None:
        if direct_call_ok((a, b, scale_a, scale_b, out)):
            return gemm_fp8.run(a, b, scale_a, scale_b, out, out_dtype, block_n)
        matmul_fp8_out_op(a, b, scale_a, scale_b, out, out_dtype, block_n)
        return out
    if direct_call_ok((a, b, scale_a, scale_b)):
        return gemm_fp8.run(a, b, scale_a, scale_b, None, out_dtype, block_n)
    return matmul_fp8_op(a, b, scale_a, scale_b, out_dtype, block_n)


def _impl(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, out_dtype: torch.dtype,
          block_n: Optional[int] = None) -> torch.Tensor:
    return gemm_fp8.run(a, b, scale_a, scale_b, None, out_dtype, block_n)


def _fake(a, b, scale_a, scale_b, out_dtype, block_n=None):
    gemm_fp8.checked(a, b, scale_a, scale_b, out_dtype, None, block_n)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)


matmul_fp8_op = define("matmul_fp8", _impl, _fake, differentiable=NO_BACKWARD)


def _out_impl(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor, out: torch.Tensor,
              out_dtype: torch.dtype, block_n: Optional[int] = None) -> None:
    gemm_fp8.run(a, b, scale_a, scale_b, out, out_dtype, block_n)


def _out_fake(a, b, scale_a, scale_b, out, out_dtype, block_n=None):
    gemm_fp8.checked(a, b, scale_a, scale_b, out_dtype, out, block_n)


matmul_fp8_out_op = define("matmul_fp8_out", _out_impl, _out_fake, mutates_args=("out",),
                           differentiable=NO_BACKWARD)
