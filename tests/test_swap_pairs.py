"""tk.swap_pairs (tkpy/ops/layout.py): each row's columns 2i and 2i + 1 trade places in a row-layout register tile,
16-bit and fp32, converting the dtype, in place too: the interpreter against torch, NVRTC compiles (no GPU needed),
the trace-time errors. On the GPU it runs in the interleaved rotary kernel (tests/test_gpu_rotary.py)."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32


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


def test_col_layout_is_refused_naming_the_fix():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[bf16, 16, 32]):
        t = tk.rt(f32, 16, 32, "col")
        tk.swap_pairs(t, t)
    with pytest.raises(Exception, match="row-layout tiles.*tk.swap_layout first"):
        bad.source(torch.empty(16, 32, dtype=torch.bfloat16))
