"""matmul(): C = epilogue(A @ B) on Hopper, the launch behind the torch operator (kernels/matmul_op.py): argument
checks, the plan of a signature of inputs and the launch.

The kernel is kernels/gemm_kernel.py's (its module docstring says how it runs); its options are
gemm_config.MatmulConfig's, and the tile width matmul() runs for a shape gemm_policy's choice.

`matmul(a, b)` takes bf16 or fp16 inputs, B as a (K, N) row-major tensor or as `w.T` of an (N, K) one (the nn.Linear
weight layout; the kernel then multiplies by B^T tiles), writes bf16, fp16 or fp32, and fuses
`act(scale * A @ B + bias)`. Any M, N, K: TMA zero-fills the parts of boxes past the tensors and clips the stores past
C. One kernel per (dtype, out dtype, B layout, epilogue, tile width) is generated and cached
(gemm_kernel.matmul_template). The tile width follows the SMs (gemm_policy.block_n_for): e.g. 1024 x 1024 x 1024 has
32 tiles of 128 x 256 for an H200's 132 SMs but 128 of 128 x 64, so it runs in 64-wide tiles.

`matmul(..., split_k=S)` splits each tile's K steps over S tasks whose fp32 partial sums a second kernel adds up
before the epilogue (kernels/gemm_splitk.py; deterministic by default); matmul does not split by itself.
"""
from __future__ import annotations

import torch

import tkpy as tk
from tkpy import f32
from tkpy.templates import multiprocessors

from .gemm_config import DTYPES, MatmulConfig
from .gemm_epilogue import ACTIVATIONS
from .gemm_kernel import matmul_template
from .gemm_policy import QUICK_BLOCK_N, SPLIT_BLOCK_N, WIDTHS, block_n_for
from .gemm_splitk import SplitPlan, reduce_kernel
from .op_support import check_device, refuse_overlap
from .tensor_layout import ALIGN, padded_copy, padded_like, tma_layout


def check_operands(what: str, a: torch.Tensor, b: torch.Tensor) -> None:
    """A ValueError unless a (M, K) @ b (K, N) are both bf16 or both fp16 on one device (matmul's and the fused
    communication GEMMs' operands, kernels/comm_ops.py)."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"{what} expects a (M, K) @ b (K, N); got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype not in (torch.bfloat16, torch.float16) or b.dtype != a.dtype:
        raise ValueError(f"{what} expects a and b both bf16 or both fp16; got {a.dtype} and {b.dtype}")
    if b.device != a.device:
        raise ValueError(f"{what}: a is on {a.device}, b on {b.device}")
    check_device(what, a)


def checked(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, activation: str | None,
            out_dtype: torch.dtype | None, out: torch.Tensor | None = None, block_n: int | None = None,
            split_k: int | None = None, scale: float | None = None) -> torch.dtype:
    """The output dtype of matmul on these arguments, or a ValueError naming what it cannot take. Reads only
    shapes, dtypes and devices: the operator's fake implementation checks with it too."""
    check_operands("matmul", a, b)
    (m, _), n = a.shape, b.shape[1]
    if out_dtype is None:
        out_dtype = out.dtype if out is not None else a.dtype
    if out_dtype not in DTYPES:
        raise ValueError(f"matmul's output must be bf16, fp16 or fp32; got {out_dtype}")
    if out is not None and (out.shape != (m, n) or out.dtype != out_dtype or out.device != a.device):
        raise ValueError(f"out must be a ({m}, {n}) {out_dtype} tensor on {a.device}; got "
                         f"{tuple(out.shape)} {out.dtype} on {out.device}")
    if activation is not None and activation not in ACTIVATIONS:
        raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)} or None, got {activation!r}")
    if bias is not None and (bias.shape != (n,) or not bias.is_floating_point() or bias.device != a.device):
        raise ValueError(f"bias must be a ({n},) float tensor on {a.device}; got {tuple(bias.shape)} "
                         f"{bias.dtype} on {bias.device}")
    if block_n is not None and block_n not in WIDTHS:
        raise ValueError(f"block_n must be 256, 128 or 64, got {block_n}")
    if split_k is not None and not (type(split_k) is int and split_k >= 1):
        raise ValueError(f"split_k must be None or a positive int, got {split_k!r}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, (int, float))):
        raise TypeError(f"scale must be a number or None, got {scale!r}")
    return out_dtype


def run(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, bias: torch.Tensor | None = None,
        activation: str | None = None, scale: float | None = None, out_dtype: torch.dtype | None = None,
        block_n: int | None = None, split_k: int | None = None, deterministic: bool = True) -> torch.Tensor:
    """matmul's launch (tkpy.kernels.matmul documents the arguments): the kernel(s) for this shape, written into
    `out` or a new tensor, which it returns. What depends only on the arguments' shapes, strides, dtypes and
    options (the checks, the layout, the kernels and their grid) is decided once per such signature (_CALLS);
    a call then only checks its pointers, allocates and launches."""
    signature = (a.shape, a.stride(), b.shape, b.stride(), a.dtype, b.dtype, a.device,
                 bias is None or (bias.shape, bias.stride(), bias.dtype, bias.device),
                 out is None or (out.shape, out.stride(), out.dtype, out.device), activation, type(scale),
                 out_dtype, block_n, split_k, deterministic, tk.interpret_requested())
    call = _CALLS.get(signature)
    if call is None:
        call = _CALLS[signature] = _Call(signature, a, b, out, bias, activation, scale, out_dtype, block_n, split_k,
                                         deterministic)
    return call(a, b, out, bias, scale)


_CALLS: dict = {}


class _Call:
    """run for one signature of arguments: the checks passed, the layout known, the kernels (`launch`) made on the
    first call, as _plan reads tensors."""

    def __init__(self, signature, a, b, out, bias, activation, scale, out_dtype, block_n, split_k, deterministic):
        self.out_dtype = checked(a, b, bias, activation, out_dtype, out, block_n, split_k, scale)
        (self.m, self.k), self.n, self.device = a.shape, b.shape[1], a.device
        self.b_transposed = b.stride(0) == 1 and b.stride(1) != 1 and self.n > 1   # b = w.T of a row-major w
        self.bias_ready = bias is None or (bias.dtype in DTYPES and bias.stride(0) == 1)
        operand_b = b.T if self.b_transposed else b
        self.strides_ready = (tma_layout(a), tma_layout(operand_b),   # (a new output is contiguous)
                              tma_layout(out) if out is not None else self.n * self.out_dtype.itemsize % ALIGN == 0)
        self.options = (activation, block_n, split_k, deterministic)
        self.signature = signature
        self.launch = self.quick = None     # the plan, once compiled; on a cold cache a quick one meanwhile

    def _planned(self, a, b, c, extras, bias, scale, quick: bool = False):
        """_plan's launch for these operands (QUICK_BLOCK_N-wide tiles if `quick`), its kernels compiled."""
        activation, block_n, split_k, deterministic = self.options
        launch = _plan(a, b, c, extras, self.out_dtype, self.b_transposed, bias, scale, activation,
                       QUICK_BLOCK_N if quick else block_n, split_k, deterministic)
        launch.compile(a, b, c, extras)
        return launch

    def _quick_plan(self, a, b, c, extras, bias, scale):
        """A function making the quick plan once (QuickFirstCall's quick), or None where matmul runs what was asked
        (block_n or split_k given) or the tuned tiles are no wider than the quick ones."""
        activation, block_n, split_k, _ = self.options
        if block_n is not None or split_k is not None:
            return None
        if block_n_for(self.m, self.n, multiprocessors(a)) <= QUICK_BLOCK_N:
            return None

        def quick():
            if self.quick is None:
                self.quick = self._planned(a, b, c, extras, bias, scale, quick=True)
            return self.quick
        return quick

    def __call__(self, a, b, out, bias, scale):
        m, n, k = self.m, self.n, self.k
        activation = self.options[0]
        if out is not None:
            refuse_overlap("matmul", out, a=a, b=b, bias=bias)
        if bias is not None and not (self.bias_ready and bias.data_ptr() % ALIGN == 0):
            bias = _aligned((bias if bias.dtype in DTYPES else bias.float()).contiguous())
        if scale is not None:
            scale = float(scale)
        result = out if out is not None else torch.empty(m, n, dtype=self.out_dtype, device=self.device)
        if m == 0 or n == 0:
            return result
        if k == 0:                   # no K steps: the epilogue of a zero product
            return result.copy_(_epilogue(torch.zeros(m, n, device=self.device), bias, activation, scale))
        a_ready, b_ready, c_ready = self.strides_ready
        b = b.T if self.b_transposed else b
        a_ = a if a_ready and a.data_ptr() % ALIGN == 0 else padded_copy(a)
        b_ = b if b_ready and b.data_ptr() % ALIGN == 0 else padded_copy(b)
        c = result if c_ready and result.data_ptr() % ALIGN == 0 else padded_like(result)
        extras = (() if bias is None else (bias,)) + (() if scale is None else (scale,))
        launch = self.launch
        if launch is None:
            launch, final = _FIRST_CALLS.pick(self.signature, lambda: self._planned(a_, b_, c, extras, bias, scale),
                                              self._quick_plan(a_, b_, c, extras, bias, scale))
            if final:
                self.launch, self.quick = launch, None
        launch(a_, b_, c, extras)
        if c is not result:
            result.copy_(c)
        return result


def _plan(a, b, c, extras, out_dtype, b_transposed, bias, scale, activation, block_n, split_k, deterministic):
    """How to run one shape and combination: a callable (a, b, c, extras) launching the kernel(s): the product in
    tiles of block_n_for's width (or block_n's); with split_k > 1 (SPLIT_BLOCK_N-wide tiles unless block_n says
    otherwise) the split product into a workspace and the reduction that applies the epilogue
    (kernels/gemm_splitk.py)."""
    (m, _), n = a.shape, c.shape[1]
    dtype, out, bias_dtype = DTYPES[a.dtype], DTYPES[out_dtype], None if bias is None else DTYPES[bias.dtype]
    if split_k is not None and split_k > 1:
        config = MatmulConfig(dtype, f32, b_transposed, block_n=block_n or SPLIT_BLOCK_N,
                              split="ordered" if deterministic else "atomic")
        reduce = reduce_kernel(split_k if deterministic else 1, out, bias_dtype, scale is not None, activation)
        return SplitPlan(matmul_template(config), reduce, split_k, deterministic, m, n)
    config = MatmulConfig(dtype, out, b_transposed, bias_dtype, scale is not None, activation,
                          block_n or block_n_for(m, n, multiprocessors(a)))
    return _direct(matmul_template(config), (a, b, c) + extras)


def _direct(template, args):
    """One launch of `template`'s kernel on its grid for these shapes (`.template` says which; `.compile(a, b, c,
    extras)` compiles it ahead)."""
    kernel, grid = template.kernel, template.grid(*args)

    def run(a, b, c, extras):
        kernel[grid](a, b, c, *extras)
    run.template = template
    run.compile = lambda a, b, c, extras: kernel.compile(a, b, c, *extras)
    return run


_FIRST_CALLS = tk.QuickFirstCall("matmul")


def _epilogue(acc: torch.Tensor, bias, activation, scale) -> torch.Tensor:
    """The epilogue in torch on an fp32 product (for K = 0, and the tests' reference)."""
    if scale is not None:
        acc = acc * scale
    if bias is not None:
        acc = acc + bias.to(acc.dtype)
    if activation == "gelu":
        return torch.nn.functional.gelu(acc, approximate="tanh")
    if activation == "silu":
        return torch.nn.functional.silu(acc)
    if activation == "relu":
        return torch.relu(acc)
    return acc


def _aligned(v: torch.Tensor) -> torch.Tensor:
    """A contiguous vector at a 16-byte aligned address (a copy if it is not)."""
    return v if v.data_ptr() % ALIGN == 0 else v.clone()
