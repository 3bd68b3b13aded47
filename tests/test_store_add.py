"""tk.store_add and tk.warpgroup.store_add: fp32 register tiles added into fp32 global tensors by red.global.add
from the registers (one red.global.add.v2.f32 per register pair in the row layout, two scalar reds in the col
layout), in the CPU interpreter, the C++ and its SASS (NVRTC, no GPU needed) and on the GPU where there is one:
many blocks adding into the same elements, partial tiles at the tensor's edges (masked), the warpgroup form,
subnormals flushed, and the errors that say what store_add takes."""
from __future__ import annotations

import functools
import re

import pytest
import torch

import tkpy as tk
from tests.gpu_util import on_gpu, rand
from tkpy import bf16, f32


@functools.cache
def adder(layout: str):
    """Block b's warp w adds rows 16w.. of x[b] into y: every block into the same 32 x 64 elements."""
    @tk.kernel(warps=2, name=f"add_blocks_{layout}")
    def add_blocks(x: tk.gl[f32, "G", 32, 64], y: tk.gl[f32, 32, 64]):
        t = tk.rt(f32, 16, 64, layout)
        tk.load(t, x, (tk.block_idx.x, tk.warp_id(), 0))
        tk.store_add(y, t, (tk.warp_id(), 0))
    return add_blocks


@tk.kernel(warps=1)
def add_edges(x: tk.gl[f32, "R", "C"], y: tk.gl[f32, "R", "C"]):
    """y += 3 x, a 16 x 32 tile a block, masked at the last row and column."""
    t = tk.rt(f32, 16, 32)
    tk.load(t, x, (tk.block_idx.x, tk.block_idx.y), masked=True)
    tk.mul(t, t, 3.0)
    tk.store_add(y, t, (tk.block_idx.x, tk.block_idx.y), masked=True)


@tk.kernel(warps=4)
def add_warpgroup(x: tk.gl[f32, "R", 32], y: tk.gl[f32, "R", 32]):
    """y += x, a warpgroup's 64 x 32 tile a block (each warp its 16-row quarter)."""
    t = tk.rt(f32, 16, 32)
    tk.warpgroup.load(t, x, (tk.block_idx.x, 0))
    tk.warpgroup.store_add(y, t, (tk.block_idx.x, 0))


def launch(kernel, device: str):
    return kernel if device == "cuda" else kernel.interpret


def within_fp32(got: torch.Tensor, expected: torch.Tensor, terms: int) -> None:
    """Every element within fp32 rounding of `terms` adds of the float64 `expected`'s size (any order)."""
    assert not torch.isnan(got).any()
    bound = terms * 2.0 ** -23 * (expected.abs() + 1)
    assert ((got.double().cpu() - expected).abs() <= bound).all()


def check_blocks(layout: str, device: str, blocks: int) -> None:
    x, y = rand(blocks, 32, 64, dtype=torch.float32, device=device), rand(32, 64, dtype=torch.float32, device=device)
    expected = y.double().cpu() + x.double().cpu().sum(0)
    launch(adder(layout), device)[(blocks,)](x, y)
    within_fp32(y, expected, blocks + 1)


def check_edges(device: str) -> None:
    """A 37 x 44 view (rows 48 floats apart) of a 40 x 48 buffer: the view's elements get 3 x, the buffer's others
    keep their values (the masked adds skip them)."""
    buffer = rand(40, 48, dtype=torch.float32, device=device)
    before = buffer.clone()
    y, x = buffer[:37, :44], rand(37, 44, dtype=torch.float32, device=device)
    launch(add_edges, device)[(3, 2)](x, y)
    within_fp32(y, before[:37, :44].double().cpu() + 3 * x.double().cpu(), 2)
    outside = torch.ones(40, 48, dtype=torch.bool)
    outside[:37, :44] = False
    assert torch.equal(buffer.cpu()[outside], before.cpu()[outside])


def check_warpgroup(device: str) -> None:
    x, y = rand(128, 32, dtype=torch.float32, device=device), rand(128, 32, dtype=torch.float32, device=device)
    expected = y.double().cpu() + x.double().cpu()
    launch(add_warpgroup, device)[(2,)](x, y)
    within_fp32(y, expected, 1)


@pytest.mark.parametrize("layout", ["row", "col"])
def test_blocks_add_into_the_same_elements_in_the_interpreter(layout):
    check_blocks(layout, "cpu", 5)


def test_partial_tiles_add_inside_the_tensor_only_in_the_interpreter():
    check_edges("cpu")


def test_warpgroup_form_in_the_interpreter():
    check_warpgroup("cpu")


def test_subnormals_flush_to_zero_in_the_interpreter():
    """red.global.add.f32 flushes subnormal inputs and results to zero (PTX ISA, red): so does the interpreter."""
    tiny = torch.finfo(torch.float32).tiny
    x = torch.full((1, 32, 64), 2.0)
    x[0, 0, :4] = torch.tensor([tiny / 4, -tiny / 8, 1.5 * tiny, tiny / 2])
    y = torch.zeros(32, 64)
    y[0, :4] = torch.tensor([0.0, -0.0, -tiny, tiny])
    adder("row").interpret[(1,)](x, y)
    assert y[0, :4].tolist() == [0.0, 0.0, 0.0, tiny] and torch.signbit(y[0, 1])    # -0 + -0: the sign kept
    assert torch.equal(y[1:], x[0, 1:]) and torch.equal(y[0, 4:], x[0, 0, 4:])


def test_source_and_sass_add_from_the_registers():
    """The C++ calls tk::store_add (store_add_masked where asked for, or where a static dim is not a multiple of the
    tile), whose prelude holds the red.global.add forms; NVRTC compiles the row layout's pairs to one 64-bit
    reduction each (REDG.E.ADD.F32x2: 16 x 64 fp32 is 32 values a lane, 16 pairs), the col layout's to scalar ones."""
    x, y = torch.empty(2, 32, 64), torch.empty(32, 64)
    for layout, sass_red, count in (("row", "REDG.E.ADD.F32x2.FTZ.RN", 16), ("col", "REDG.E.ADD.F32.FTZ.RN", 32)):
        kernel = adder(layout)
        src = kernel.source(x, y)
        assert "tk::store_add(y, t, 0, 0, warpid * 16, 0);" in src
        assert "red.global.add.v2.f32" in src if layout == "row" else "red.global.add.f32 [%0], %1;" in src
        sass = kernel.sass(x, y)
        assert len(re.findall(rf"{re.escape(sass_red)}\.STRONG\.GPU ", sass)) == count, layout
        assert kernel.resources(x, y).spill_stores == 0
    edges = add_edges.source(torch.empty(37, 44), torch.empty(37, 44))
    assert "tk::store_add_masked(y, t, 0, 0, block_x * 16, block_y * 32);" in edges
    assert "tk::store_add_masked(" in ragged.source(torch.empty(40, 36))
    with pytest.raises(tk.TraceError, match="store_add: masked=False, but .* 36 cols, not a multiple of"):
        ragged_unmasked.source(torch.empty(40, 36))


@tk.kernel(warps=1)
def ragged(y: tk.gl[f32, 40, 36]):
    """A static width (36) that no whole number of 32-column tiles covers: masked without being asked."""
    t = tk.rt(f32, 16, 32)
    tk.zero(t)
    tk.store_add(y, t, (tk.block_idx.x, tk.block_idx.y))


@tk.kernel(warps=1)
def ragged_unmasked(y: tk.gl[f32, 40, 36]):
    t = tk.rt(f32, 16, 32)
    tk.zero(t)
    tk.store_add(y, t, (0, 0), masked=False)


@pytest.mark.parametrize("body,message", [
    (lambda y, x: tk.store_add(x, tk.rt(f32, 16, 32), (0, 0)), r"adds fp32 into fp32: its destination .* is bf16; "
                                                               r"declare it tk.gl\[tk.f32"),
    (lambda y, x: tk.store_add(y, tk.rt(bf16, 16, 32), (0, 0)), r"its source .* is bf16; tk.copy it into a "
                                                                r"tk.rt\(tk.f32, 16, 32\) first"),
    (lambda y, x: tk.store_add(tk.st(f32, 16, 32), tk.rt(f32, 16, 32)), "adds a register tile into a global tensor"),
    (lambda y, x: tk.store_add(y, tk.rv(f32, 32), (0, 0)), "adds a register tile into a global tensor"),
    (lambda y, x: tk.block.store_add(y, tk.rt(f32, 16, 32), (0, 0)), "store_add of a register tile at block scope"),
])
def test_errors_say_what_store_add_takes(body, message):
    @tk.kernel(warps=4)
    def bad(y: tk.gl[f32, 64, 32], x: tk.gl[bf16, 64, 32]):
        body(y, x)
    with pytest.raises((tk.TraceError, tk.UnsupportedError), match=message) as info:
        bad.source(torch.empty(64, 32), torch.empty(64, 32, dtype=torch.bfloat16))
    assert "test_store_add.py" in str(info.value)       # the user's line


# -- on the GPU ------------------------------------------------------------------------------------------------

@on_gpu
@pytest.mark.parametrize("layout", ["row", "col"])
def test_gpu_blocks_add_into_the_same_elements(layout):
    check_blocks(layout, "cuda", 264)               # two blocks an SM, all at once on the same 2048 elements


@on_gpu
def test_gpu_partial_tiles_add_inside_the_tensor_only():
    check_edges("cuda")


@on_gpu
def test_gpu_warpgroup_form():
    check_warpgroup("cuda")
