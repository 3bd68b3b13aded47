"""Column pieces of register tiles (`acc[:, 64:128]`, windows of one 16-row band) and warpgroup-scope copies
between a warpgroup's shared tile and each warp's register quarter: in the interpreter, through NVRTC (the
converting st <- rt store packs fp32 for stmatrix), and on the GPU (skipped without one)."""
from __future__ import annotations

import functools
import re

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32

from gpu_util import on_gpu, rand


@functools.cache
def pieces_kernel(dtype):
    """One warpgroup: each warp scales column piece j of its 16 x 128 fp32 tile by j + 1, stores the pieces
    into a 64 x 64 shared tile of `dtype` (the warpgroup's) one at a time and reads each back, converted."""
    @tk.kernel(warps=4, name=f"register_pieces_{dtype.name}")
    def register_pieces(x: tk.gl[f32, 64, 128], y: tk.gl[f32, 64, 128]):
        t = tk.rt(f32, 16, 128)
        back = tk.rt(f32, 16, 64)
        s = tk.st(dtype, 64, 64)
        tk.warpgroup.load(t, x, (0, 0))
        for j in range(2):
            piece = t[:, 64 * j:64 * (j + 1)]
            tk.mul(piece, piece, float(j + 1))
            tk.warpgroup.store(s, piece)
            tk.warp_sync()
            tk.warpgroup.load(back, s)
            tk.copy(piece, back)
            tk.sync()
        tk.warpgroup.store(y, t, (0, 0))
    return register_pieces


def expected(x, dtype):
    out = x.clone()
    out[:, 64:] *= 2
    return out.to(dtype.torch).float()


@pytest.mark.parametrize("dtype", [bf16, f32])
def test_pieces_in_the_interpreter(dtype):
    x, y = rand(64, 128, dtype=torch.float32, device="cpu"), torch.zeros(64, 128)
    pieces_kernel(dtype).interpret[(1,)](x, y)
    assert torch.equal(y, expected(x, dtype))


def test_pieces_compile_to_stmatrix_and_shared_stores():
    x, y = torch.empty(64, 128), torch.empty(64, 128)
    assert "STSM" in pieces_kernel(bf16).sass(x, y)
    src = pieces_kernel(bf16).source(x, y)
    assert "tk::subtile_inplace<16, 64>(t, 0, 1)" in src and "tk::subtile<16, 64>(s, warpid % 4, 0)" in src
    sass = pieces_kernel(f32).sass(x, y)
    assert "STS.64" in sass and not re.search(r"\bST\.E", sass)


@pytest.mark.parametrize("make,match", [
    (lambda: tk.rt(f32, 32, 64).subtile(32, 32, (0, 0)), "columns of one 16-row band"),
    (lambda: tk.rt(f32, 16, 64).subtile(16, 48, (0, 1)), "outside"),
    (lambda: tk.warpgroup.store(tk.st(bf16, 32, 64), tk.rt(f32, 16, 64)), "4 x 16 rows by 64"),
])
def test_errors(make, match):
    @tk.kernel(warps=4)
    def bad(x: tk.gl[f32, 16, 16]):
        make()
    with pytest.raises(tk.TraceError, match=match):
        bad.trace(torch.empty(16, 16))


@pytest.mark.parametrize("dtype", [bf16, f32])
@on_gpu
def test_pieces_on_the_gpu(dtype):
    x = rand(64, 128, dtype=torch.float32)
    y = torch.full_like(x, float("nan"))
    pieces_kernel(dtype)[(1,)](x, y)
    assert torch.equal(y, expected(x, dtype))
