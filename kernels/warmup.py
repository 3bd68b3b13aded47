"""What `python -m tkpy.warmup` compiles: for each operator of tkpy.kernels, its launch path run on tensors of a
shape, so that every kernel the operator would launch for that shape is compiled into the disk cache.

Each entry of OPS takes the shape's dims, its flags (name -> value; a bare flag's value is True) and `empty(shape,
dtype)`, which makes the tensors (meta tensors by default: no memory, no GPU), and calls the operator's launch
function (the one behind its torch operator) under tkpy's compile-only mode, in which a launch compiles and returns.
The choices a launch makes from the GPU's SM count are an H200's where the tensors are not on a GPU.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch

from . import attention_backward, attention_forward, gemm, gemm_fp8, softmax_op

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@dataclass(frozen=True)
class Op:
    """An operator warm-up can compile: `run(dims, flags, empty)`, its dims and flags (for the help and checks)."""

    run: Callable
    dims: str
    flags: dict            # flag -> what it means


def _dtype(flags: dict) -> torch.dtype:
    return torch.float16 if flags.get("fp16") else torch.bfloat16


def matmul(dims, flags, empty) -> None:
    m, n, k = dims
    dtype = _dtype(flags)
    a = empty((m, k), dtype)
    b = empty((n, k), dtype).T if flags.get("wt") else empty((k, n), dtype)
    bias = empty((n,), dtype) if flags.get("bias") else None
    activation = next((f for f in ("gelu", "relu", "silu") if flags.get(f)), None)
    gemm.run(a, b, bias=bias, activation=activation, out_dtype=torch.float32 if flags.get("out_f32") else None)


def matmul_fp8(dims, flags, empty) -> None:
    m, n, k = dims
    dtype = torch.float8_e5m2 if flags.get("e5m2") else torch.float8_e4m3fn
    one = empty((1,), torch.float32)
    gemm_fp8.run(empty((m, k), dtype), empty((n, k), dtype).T, one, one)


def attention(dims, flags, empty) -> None:
    b, h, n, d = dims
    dtype, kv_heads, keys = _dtype(flags), int(flags.get("kv_heads", h)), int(flags.get("keys", n))
    causal = "bottom_right" if flags.get("bottom_right") else bool(flags.get("causal"))
    q, k, v = empty((b, h, n, d), dtype), empty((b, kv_heads, keys, d), dtype), empty((b, kv_heads, keys, d), dtype)
    if not flags.get("train"):
        attention_forward.forward(q, k, v, causal)
        return
    out, lse = attention_forward.forward(q, k, v, causal, return_lse=True)
    attention_backward.attention_backward(empty(q.shape, dtype), q, k, v, out, lse, causal,
                                          deterministic=bool(flags.get("deterministic")))


def softmax(dims, flags, empty) -> None:
    x = empty(tuple(dims), torch.float32 if flags.get("f32") else _dtype(flags))
    y = softmax_op.forward(x)
    if flags.get("train"):
        softmax_op.backward(empty(x.shape, x.dtype), y)


_16BIT = {"fp16": "fp16 tensors (default bf16)"}
OPS = {
    "matmul": Op(matmul, "MxNxK", {**_16BIT, "wt": "B as w.T of an (N, K) weight", "bias": "a bias vector",
                                   "gelu": "GELU epilogue", "relu": "ReLU epilogue", "silu": "SiLU epilogue",
                                   "out_f32": "fp32 output"}),
    "matmul_fp8": Op(matmul_fp8, "MxNxK", {"e5m2": "float8_e5m2 inputs (default e4m3)"}),
    "attention": Op(attention, "BxHxNxD", {**_16BIT, "causal": "causal (top-left)", "bottom_right": "causal, "
                                           "bottom-right aligned", "kv_heads": "key/value heads (GQA), =N",
                                           "keys": "key length, =N (default N)",
                                           "train": "the forward with its log-sum-exp, and the backward",
                                           "deterministic": "with train: the deterministic backward"}),
    "softmax": Op(softmax, "RxC (or more dims, softmax over the last)", {**_16BIT, "f32": "fp32 tensors",
                                                                         "train": "and its backward"}),
}
