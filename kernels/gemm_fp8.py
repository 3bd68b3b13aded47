"""matmul_fp8(): C = scale_a * scale_b * (A @ B) in fp8 (e4m3 / e5m2) on Hopper, bf16 out (or fp16, fp32): the launch
behind the torch operator (kernels/matmul_fp8_op.py), its checks and a float64 reference.

The kernel is kernels/gemm_kernel.py's fp8_matmul_template, the same structure as the 16-bit GEMM's: persistent
blocks, a producer warp streaming K slices of A and B with TMA through a ring of stages, two consumer warpgroups
each accumulating 64 rows of a 128 x block_n tile in fp32 registers with wgmma, and an epilogue through shared
memory: each consumer scales its accumulator by the column scales, rounds it into a 128-byte-wide output piece and
a storer warp TMA-stores it while the next tile runs. Its options are gemm_config.MatmulFP8Config's; the tile width
is gemm_policy.block_n_for's, as the 16-bit GEMM's.

fp8 wgmma reads both operands K-major, so B comes as the transpose of a row-major (N, K) tensor: `b` is
(K, N) with strides (1, K), `w.T`, as torch._scaled_mm takes its second operand. K slices are 128 wide
(128 bytes: one 128-byte swizzle panel). Scales are fp32 tensors on the GPU, as _scaled_mm's: `scale_a`
one value (per tensor), `scale_b` one value or one per column of C; the kernel reads their products as a
vector of N column scales (made on the GPU: no host synchronisation). Any M and N; K and N multiples of
16 (TMA's 16-byte row strides: K for the fp8 operands, N for the bf16 output, as _scaled_mm requires);
TMA zero-fills partial boxes and clips the stores.

`python -m tkpy.kernels matmul_fp8` checks a product against a float64 reference (on the CPU interpreter
without a GPU) and, on a GPU, times it against torch._scaled_mm in the same run.
"""
from __future__ import annotations

import functools

import torch

from tkpy.templates import multiprocessors

from .gemm_config import DTYPES, FP8, MatmulFP8Config
from .gemm_kernel import fp8_matmul_template
from .gemm_policy import FP8_WIDTHS, block_n_for
from .op_support import check_device, refuse_overlap


def column_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, n: int) -> torch.Tensor:
    """The (N,) fp32 column scales scale_a * scale_b (computed on the tensors' device, no synchronisation)."""
    return (scale_a.float().reshape(1) * scale_b.float().reshape(-1)).expand(n).contiguous()


def checked(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
            out_dtype: torch.dtype, out: torch.Tensor | None = None, block_n: int | None = None) -> None:
    """A ValueError naming what matmul_fp8 cannot take (shapes, dtypes, strides, devices only: the operator's
    fake implementation checks with it too)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul_fp8 expects a (M, K) @ b (K, N); got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype not in FP8 or b.dtype not in FP8:
        raise ValueError(f"matmul_fp8 expects fp8 operands (float8_e4m3fn / float8_e5m2); got {a.dtype} and {b.dtype}")
    (m, k), n = a.shape, b.shape[1]
    if k % 16 or n % 16:
        raise ValueError(f"K and N must be multiples of 16 (16-byte TMA row strides); got K = {k}, N = {n}")
    if a.stride() != (k, 1):
        raise ValueError(f"a must be row-major (strides ({k}, 1)); got {a.stride()}")
    if b.stride() != (1, k):
        raise ValueError(f"b must be the transpose of a row-major (N, K) tensor (strides (1, {k}), e.g. w.T); "
                         f"got strides {b.stride()}")
    if out_dtype not in DTYPES:
        raise ValueError(f"out_dtype must be bf16, fp16 or fp32; got {out_dtype}")
    for name, x in (("b", b), ("scale_a", scale_a), ("scale_b", scale_b)):
        if x.device != a.device:
            raise ValueError(f"matmul_fp8: a is on {a.device}, {name} on {x.device}")
    if scale_a.numel() != 1:
        raise ValueError(f"scale_a must hold one value (per-tensor scaling); got shape {tuple(scale_a.shape)}")
    if scale_b.numel() not in (1, n):
        raise ValueError(f"scale_b must hold one value or one per column ({n}); got shape {tuple(scale_b.shape)}")
    if out is not None and (out.shape != (m, n) or out.dtype != out_dtype or not out.is_contiguous()
                            or out.device != a.device):
        raise ValueError(f"out must be a contiguous ({m}, {n}) {out_dtype} tensor on {a.device}; got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if block_n is not None and block_n not in FP8_WIDTHS:
        raise ValueError(f"block_n must be 256 or 128, got {block_n}")
    check_device("matmul_fp8", a)


def run(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
        out: torch.Tensor | None = None, out_dtype: torch.dtype = torch.bfloat16,
        block_n: int | None = None) -> torch.Tensor:
    """matmul_fp8's launch (tkpy.kernels.matmul_fp8 documents the arguments), into `out` or a new tensor."""
    checked(a, b, scale_a, scale_b, out_dtype, out, block_n)
    (m, k), n = a.shape, b.shape[1]
    if out is None:
        out = torch.empty(m, n, dtype=out_dtype, device=a.device)
    else:
        refuse_overlap("matmul_fp8", out, a=a, b=b, scale_a=scale_a, scale_b=scale_b)
    if m == 0 or n == 0:
        return out
    if k == 0:
        return out.zero_()
    scales = column_scales(scale_a, scale_b, n)
    template = _template(a, b, out_dtype, block_n)
    args = (a, b.T, out, scales)
    template.kernel[template.grid(*args)](*args)
    return out


def _template(a: torch.Tensor, b: torch.Tensor, out_dtype: torch.dtype, block_n: int | None):
    """The kernel template for these operands: their fp8 kinds, the output dtype, block_n or block_n_for's width."""
    (m, _), n = a.shape, b.shape[1]
    return _kernel(a.dtype, b.dtype, out_dtype, block_n or block_n_for(m, n, multiprocessors(a), FP8_WIDTHS))


@functools.cache
def _kernel(a_dtype: torch.dtype, b_dtype: torch.dtype, out_dtype: torch.dtype, block_n: int):
    """fp8_matmul_template of the config of these torch dtypes and tile width (made once, not a config a call)."""
    return fp8_matmul_template(MatmulFP8Config(FP8[a_dtype], FP8[b_dtype], DTYPES[out_dtype], block_n))


def reference(a, b, scale_a, scale_b, out_dtype=torch.bfloat16) -> torch.Tensor:
    """The float64 product of the fp8 values, scaled, rounded to `out_dtype` once."""
    n = b.shape[1]
    scales = column_scales(scale_a, scale_b, n).double()
    return ((a.double() @ b.double()) * scales).to(out_dtype)
