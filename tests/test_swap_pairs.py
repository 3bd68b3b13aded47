"""tk.swap_pairs (tkpy/ops/layout.py): each row's columns 2i and 2i + 1 trade places in a row-layout register tile or
a contig vector, 16-bit and fp32, converting the dtype, in place too: the interpreter against torch, NVRTC compiles
(no GPU needed), the trace-time errors; the same kernels on the GPU (test_on_the_gpu)."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from gpu_util import on_gpu


def _kernel(dtype):
    @tk.kernel(warps=1)
    def swap(x: tk.gl[bf16, 16, 32], y: tk.gl[bf16, 16, 32]):
        t, u = tk.rt(dtype, 16, 32), tk.rt(f32, 16, 32)
        tk.load(t, x, (0, 0))
        tk.swap_pairs(u, t)               # (converting)
        tk.swap_pairs(t, t)               # (in place)
        tk.add(u, u, t)
        tk.store(y, u, (0, 0))
    return swap


@pytest.mark.parametrize("dtype", [bf16, f32], ids=["bf16", "f32"])
def test_pairs_trade_places(dtype):
    x = torch.randn(16, 32).bfloat16()
    y = torch.full_like(x, float("nan"))
    kernel = _kernel(dtype)
    kernel.interpret[(1,)](x, y)
    assert torch.equal(y, (x.view(16, 16, 2).flip(-1).reshape(16, 32).float() * 2).bfloat16())
    assert "tk::swap_pairs(u, t);" in kernel.source(x, y)
    assert kernel.resources(x, y).found


def _vector_kernel(dtype):
    @tk.kernel(warps=1)
    def swap(x: tk.gl[bf16, 2, 512], y: tk.gl[bf16, 2, 512]):
        v, u = tk.rv(dtype, 512, "contig"), tk.rv(f32, 512, "contig")
        tk.load(v, x, (tk.block_idx.x, 0))
        tk.swap_pairs(u, v)               # (converting)
        tk.swap_pairs(v, v)               # (in place)
        tk.add(u, u, v)
        tk.store(y, u, (tk.block_idx.x, 0))
    return swap


def _check_vectors(dtype, device):
    x = torch.randn(2, 512, device=device).bfloat16()
    y = torch.full_like(x, float("nan"))
    kernel = _vector_kernel(dtype)
    (kernel.interpret if device == "cpu" else kernel)[(2,)](x, y)
    assert torch.equal(y, (x.view(2, 256, 2).flip(-1).reshape(2, 512).float() * 2).bfloat16())
    return kernel, x, y


@pytest.mark.parametrize("dtype", [bf16, f32], ids=["bf16", "f32"])
def test_contig_vectors_pairs_trade_places(dtype):
    kernel, x, y = _check_vectors(dtype, "cpu")
    assert "tk::swap_pairs(u, v);" in kernel.source(x, y)
    assert kernel.resources(x, y).found


@on_gpu
def test_on_the_gpu():
    for dtype in (bf16, f32):
        _check_vectors(dtype, "cuda")
        x = torch.randn(16, 32, device="cuda").bfloat16()
        y = torch.full_like(x, float("nan"))
        _kernel(dtype)[(1,)](x, y)
        assert torch.equal(y, (x.view(16, 16, 2).flip(-1).reshape(16, 32).float() * 2).bfloat16())


def test_other_vectors_are_refused_naming_the_fix():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[bf16, 16, 32]):
        v = tk.rv(f32, 32, "naive")
        tk.swap_pairs(v, v)
    with pytest.raises(Exception, match="vectors must be contig"):
        bad.source(torch.empty(16, 32, dtype=torch.bfloat16))


def test_col_layout_is_refused_naming_the_fix():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[bf16, 16, 32]):
        t = tk.rt(f32, 16, 32, "col")
        tk.swap_pairs(t, t)
    with pytest.raises(Exception, match="row-layout tiles.*tk.swap_layout first"):
        bad.source(torch.empty(16, 32, dtype=torch.bfloat16))
