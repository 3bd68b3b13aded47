"""The torch-facing kernels have no backward pass: inputs that require grad under grad mode are refused before any
work (the output would carry no gradient, silently); under torch.no_grad() they run."""
from __future__ import annotations

import functools

import pytest
import torch

import gpu_util
from kernels.attention import attention
from kernels.gemm import matmul
from kernels.gemm_fp8 import matmul_fp8
from kernels.softmax import softmax


rand = functools.partial(gpu_util.rand, device="cpu")


def plain(*shape, dtype=torch.bfloat16):
    return rand(*shape, dtype=dtype)


def needs_grad(*shape, dtype=torch.bfloat16):
    return plain(*shape, dtype=dtype).requires_grad_()


def fp8_weight(n, k):
    """(K, N) fp8, the transpose of a row-major (N, K) tensor, as matmul_fp8 takes it."""
    return plain(n, k, dtype=torch.float8_e4m3fn).T


CALLS = {
    "attention": lambda: attention(needs_grad(1, 2, 64, 64), plain(1, 2, 64, 64), plain(1, 2, 64, 64)),
    "matmul": lambda: matmul(plain(64, 64), needs_grad(64, 64)),
    "matmul bias": lambda: matmul(plain(64, 64), plain(64, 64), bias=needs_grad(64, dtype=torch.float32)),
    "matmul_fp8": lambda: matmul_fp8(plain(64, 64, dtype=torch.float8_e4m3fn), fp8_weight(64, 64),
                                     needs_grad(1, dtype=torch.float32), torch.ones(1)),
    "softmax": lambda: softmax(needs_grad(64, 64))}


@pytest.mark.parametrize("name", CALLS)
def test_inputs_that_require_grad_are_refused(name):
    with pytest.raises(NotImplementedError, match=f"{name.split()[0]}: no backward pass"):
        CALLS[name]()


def test_attention_runs_under_no_grad(monkeypatch):
    """The same inputs under torch.no_grad(): attention() runs (the CPU interpreter) and its output needs no grad."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q, k, v = (needs_grad(1, 2, 64, 64) for _ in range(3))
    with torch.no_grad():
        o = attention(q, k, v)
    assert not o.requires_grad
    ref, _ = gpu_util.attention_reference(q.detach(), k.detach(), v.detach())
    assert gpu_util.rel_err(o, ref) < 1e-2
