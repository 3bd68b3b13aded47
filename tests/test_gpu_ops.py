"""Every warp-level op against torch on the GPU (skipped cleanly without a Hopper GPU)."""
from __future__ import annotations

import functools

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32, fp16

from gpu_util import TORCH, poisoned, rand, rel_err, requires_gpu

pytestmark = requires_gpu
DT = {"bf16": bf16, "fp16": fp16, "f32": f32}
WARPS = 2


@functools.cache
def roundtrip_kernel(gdt, tdt, layout, rows, cols):
    """x (gl) -> rt (tdt, layout) -> y (gl): one tile per warp, tiles stacked along rows."""
    @tk.kernel(warps=WARPS, name=f"rt_roundtrip_{gdt}_{tdt}_{layout}_{rows}x{cols}")
    def k(x: tk.gl[DT[gdt], "R", cols], y: tk.gl[DT[gdt], "R", cols]):
        t = tk.rt(DT[tdt], rows, cols, layout)
        tile = tk.block_idx.x * WARPS + tk.warp_id()
        tk.load(t, x, (tile, 0))
        tk.store(y, t, (tile, 0))
    return k


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("gdt,tdt", [("bf16", "bf16"), ("fp16", "fp16"), ("f32", "f32"), ("f32", "bf16"),
                                     ("bf16", "f32"), ("f32", "fp16")])
@pytest.mark.parametrize("rows,cols", [(16, 16), (32, 64), (64, 32)])
def test_register_tile_roundtrip(gdt, tdt, layout, rows, cols):
    blocks = 3
    x = rand(blocks * WARPS * rows, cols, dtype=TORCH[gdt])
    y = poisoned(*x.shape, dtype=TORCH[gdt])
    roundtrip_kernel(gdt, tdt, layout, rows, cols)[(blocks,)](x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x.to(TORCH[tdt]).to(TORCH[gdt]))


@functools.cache
def shared_roundtrip_kernel(dt, layout, rows, cols, swizzle):
    """x -> st (block load) -> rt (ldmatrix) -> st2 (stmatrix) -> y (block store)."""
    @tk.kernel(warps=4, name=f"st_roundtrip_{dt}_{layout}_{rows}x{cols}_s{swizzle}")
    def k(x: tk.gl[DT[dt], "R", cols], y: tk.gl[DT[dt], "R2", cols]):
        s_in = tk.st(DT[dt], 4 * rows, cols, swizzle=swizzle)
        s_out = tk.st(DT[dt], rows, cols, count=4, swizzle=swizzle)
        part = tk.st(DT[dt], rows, cols, count=4, swizzle=swizzle)
        t = tk.rt(DT[dt], rows, cols, layout)
        w = tk.warp_id()
        tk.block.load(s_in, x, (tk.block_idx.x, 0))
        tk.load(part[w], x, (tk.block_idx.x * 4 + w, 0))      # per-warp copy into a tile array
        tk.sync()
        tk.load(t, part[w])
        tk.store(s_out[w], t)
        tk.sync()
        tk.block.store(y, s_in, (tk.block_idx.x + tk.grid_dim.x, 0))  # second half of y: the block copy
        tk.store(y, s_out[w], (tk.block_idx.x * 4 + w, 0))
    return k


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("cols,swizzle", [(16, 0), (16, 32), (32, 64), (64, 128), (128, 128), (64, 0), (128, 64)])
def test_shared_tile_roundtrip(dt, layout, cols, swizzle):
    if (cols * (4 if dt == "f32" else 2)) % max(swizzle, 1):
        pytest.skip("row too narrow for this swizzle")
    rows, blocks = (16 if dt == "f32" and cols == 128 else 32), 3   # a 32x128 f32 tile per warp would spill
    x = rand(blocks * 4 * rows, cols, dtype=TORCH[dt])
    y = poisoned(2 * x.shape[0], cols, dtype=TORCH[dt])
    shared_roundtrip_kernel(dt, layout, rows, cols, swizzle)[(blocks,)](x, y)
    torch.cuda.synchronize()
    assert torch.equal(y[: x.shape[0]], x), "st -> rt -> st lost or moved elements"
    assert torch.equal(y[x.shape[0]:], x), "gl -> st -> gl block copy lost or moved elements"


UNARY = {
    "exp": (torch.exp, (-4, 4)), "exp2": (torch.exp2, (-4, 4)), "log": (torch.log, (0.1, 8)),
    "log2": (torch.log2, (0.1, 8)), "abs": (torch.abs, (-4, 4)), "relu": (torch.relu, (-4, 4)),
    "neg": (torch.neg, (-4, 4)), "copy": (lambda x: x, (-4, 4)),
}


@functools.cache
def unary_kernel(fn, layout, tdt):
    @tk.kernel(warps=WARPS, name=f"unary_{fn}_{layout}_{tdt}")
    def k(x: tk.gl[f32, "R", 64], y: tk.gl[f32, "R", 64]):
        t = tk.rt(DT[tdt], 32, 64, layout)
        u = tk.rt(DT[tdt], 32, 64, layout)
        tile = tk.block_idx.x * WARPS + tk.warp_id()
        tk.load(t, x, (tile, 0))
        getattr(tk, fn)(u, t)
        tk.store(y, u, (tile, 0))
    return k


@pytest.mark.parametrize("tdt", ["f32", "bf16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("fn", list(UNARY))
def test_unary(fn, layout, tdt):
    torch_fn, (lo, hi) = UNARY[fn]
    x = rand(4 * WARPS * 32, 64, dtype=torch.float32, low=lo, high=hi)
    y = poisoned(*x.shape, dtype=torch.float32)
    unary_kernel(fn, layout, tdt)[(4,)](x, y)
    xr = x.to(TORCH[tdt]).double()
    ref = torch_fn(xr).to(TORCH[tdt])
    assert rel_err(y, ref) < (1e-5 if tdt == "f32" else 8e-3)


BINARY = {"add": torch.add, "sub": torch.sub, "mul": torch.mul, "div": torch.div,
          "max": torch.maximum, "min": torch.minimum}


@functools.cache
def binary_kernel(fn, layout, operand):
    @tk.kernel(warps=WARPS, name=f"binary_{fn}_{layout}_{operand}")
    def k(a: tk.gl[f32, "R", 32], b: tk.gl[f32, "R", 32], y: tk.gl[f32, "R", 32], s: float):
        ta, tb = tk.rt(f32, 16, 32, layout), tk.rt(f32, 16, 32, layout)
        tile = tk.block_idx.x * WARPS + tk.warp_id()
        tk.load(ta, a, (tile, 0))
        tk.load(tb, b, (tile, 0))
        if operand == "tile":
            getattr(tk, fn)(ta, ta, tb)
        elif operand == "const":
            getattr(tk, fn)(ta, ta, 0.75)
        else:
            getattr(tk, fn)(ta, ta, s)
        tk.store(y, ta, (tile, 0))
    return k


@pytest.mark.parametrize("operand", ["tile", "const", "param"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("fn", list(BINARY))
def test_binary(fn, layout, operand):
    a = rand(3 * WARPS * 16, 32, dtype=torch.float32)
    b = rand(*a.shape, dtype=torch.float32, low=0.5, high=2.0)
    y = poisoned(*a.shape, dtype=torch.float32)
    s = -1.25
    binary_kernel(fn, layout, operand)[(3,)](a, b, y, s)
    other = {"tile": b.double(), "const": torch.tensor(0.75, dtype=torch.float64, device="cuda"),
             "param": torch.tensor(s, dtype=torch.float64, device="cuda")}[operand]
    assert rel_err(y, BINARY[fn](a.double(), other)) < 1e-6


REDUCE = {"max": lambda x, d: x.amax(d), "min": lambda x, d: x.amin(d), "sum": lambda x, d: x.sum(d),
          "prod": lambda x, d: x.prod(d)}
COMBINE = {"max": torch.maximum, "min": torch.minimum, "sum": torch.add, "prod": torch.mul}


@functools.cache
def reduce_kernel(fn, axis, layout, accum):
    """v = reduce(x) along axis (optionally combined with a first reduction), then y = x - broadcast(v)."""
    @tk.kernel(warps=WARPS, name=f"reduce_{axis}_{fn}_{layout}_{int(accum)}")
    def k(x: tk.gl[f32, "R", 32], v_out: tk.gl[f32, "R", 32], y: tk.gl[f32, "R", 32]):
        t = tk.rt(f32, 32, 32, layout)
        tile = tk.block_idx.x * WARPS + tk.warp_id()
        tk.load(t, x, (tile, 0))
        v = tk.col_vec(t) if axis == "row" else tk.row_vec(t)
        reduce = getattr(tk, f"{axis}_{fn}")
        if accum:
            first = tk.col_vec(t) if axis == "row" else tk.row_vec(t)
            reduce(first, t)
            reduce(v, t, first)             # v = fn(reduce(t), first)
        else:
            reduce(v, t)
        # materialise v through a broadcast: vt = 0 + v
        vt = tk.rt(f32, 32, 32, layout)
        tk.zero(vt)
        getattr(tk, f"add_{axis}")(vt, vt, v)
        tk.store(v_out, vt, (tile, 0))
        for name in ("sub", "mul", "div"):
            getattr(tk, f"{name}_{axis}")(t, t, v)
        tk.store(y, t, (tile, 0))
    return k


@pytest.mark.parametrize("accum", [False, True])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("axis", ["row", "col"])
@pytest.mark.parametrize("fn", list(REDUCE))
def test_reduce_and_broadcast(fn, axis, layout, accum):
    tiles = 2 * WARPS
    lo, hi = (0.8, 1.2) if fn == "prod" else (-2.0, 2.0)
    x = rand(tiles * 32, 32, dtype=torch.float32, low=lo, high=hi)
    vt, y = poisoned(*x.shape, dtype=torch.float32), poisoned(*x.shape, dtype=torch.float32)
    reduce_kernel(fn, axis, layout, accum)[(2,)](x, vt, y)
    check_reduce_and_broadcast(x, vt, y, fn, axis, accum)


def check_reduce_and_broadcast(x, vt, y, fn, axis, accum):
    """The outputs of reduce_kernel against torch (shared with the interpreter's tests)."""
    xs = x.double().view(-1, 32, 32)
    dim = 2 if axis == "row" else 1
    v = REDUCE[fn](xs, dim)
    if accum:
        v = COMBINE[fn](v, v)
    v = v.unsqueeze(dim)
    assert rel_err(vt.view_as(xs), v.expand_as(xs)) < 1e-6
    ref = ((xs - v) * v) / v
    assert rel_err(y.view_as(xs), ref) < 1e-5


@functools.cache
def mma_kernel(dt, m, n, k):
    @tk.kernel(warps=WARPS, name=f"mma_{dt}_{m}x{n}x{k}")
    def kern(a: tk.gl[DT[dt], "T", m, k], b: tk.gl[DT[dt], "T", k, n], c: tk.gl[f32, "T", m, n],
             d: tk.gl[f32, "T", m, n]):
        w = tk.block_idx.x * WARPS + tk.warp_id()
        ta, tb = tk.rt(DT[dt], m, k), tk.rt(DT[dt], k, n, layout="col")
        tc, td = tk.rt(f32, m, n), tk.rt(f32, m, n)
        tk.load(ta, a, (w, 0, 0))
        tk.load(tb, b, (w, 0, 0))
        tk.load(tc, c, (w, 0, 0))
        tk.mma_AB(td, ta, tb, tc)
        tk.store(d, td, (w, 0, 0))
    return kern


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k", [(16, 16, 16), (32, 64, 32), (64, 32, 48), (16, 64, 64), (32, 32, 128)])
def test_mma_AB(dt, m, n, k):
    tiles = 2 * WARPS
    a, b = rand(tiles, m, k, dtype=TORCH[dt]), rand(tiles, k, n, dtype=TORCH[dt])
    c = rand(tiles, m, n, dtype=torch.float32)
    d = poisoned(tiles, m, n, dtype=torch.float32)
    mma_kernel(dt, m, n, k)[(2,)](a, b, c, d)
    ref = a.double() @ b.double() + c.double()
    assert rel_err(d, ref) < 1e-5


@tk.kernel(warps=WARPS)
def loop_and_branch(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16], n: int):
    """y tile = x tile * 2^n for even warps, x tile - n for odd ones."""
    t = tk.rt(f32, 16, 16)
    tile = tk.block_idx.x * WARPS + tk.warp_id()
    tk.load(t, x, (tile, 0))
    with tk.if_(tk.warp_id() % 2 == 0):
        for _ in tk.range(n):
            tk.mul(t, t, 2.0)
    with tk.else_():
        for _ in tk.range(0, n, 1):
            tk.sub(t, t, 1.0)
    tk.store(y, t, (tile, 0))


def test_runtime_loop_and_branch():
    x = rand(4 * WARPS * 16, 16, dtype=torch.float32)
    y = poisoned(*x.shape, dtype=torch.float32)
    loop_and_branch[(4,)](x, y, 3)
    ref = x.view(-1, 16, 16).clone()
    ref[0::2] *= 8
    for _ in range(3):
        ref[1::2] -= 1        # three fp32 subtractions, as the kernel does them
    assert torch.equal(y, ref.view_as(x))


@tk.kernel(warps=4)
def big_shared(x: tk.gl[bf16, "R", 256], y: tk.gl[bf16, "R", 256]):
    """Stages 4 x 32 KB through shared memory: needs the >48 KB dynamic-smem opt-in."""
    s = tk.st(bf16, 64, 256, count=4)
    for i in range(4):
        tk.block.load(s[i], x, (tk.block_idx.x * 4 + i, 0))
    tk.sync()
    for i in range(4):
        tk.block.store(y, s[3 - i], (tk.block_idx.x * 4 + i, 0))


def test_dynamic_shared_memory_above_48k():
    x = rand(2 * 4 * 64, 256, dtype=torch.bfloat16)
    y = poisoned(*x.shape, dtype=torch.bfloat16)
    big_shared[(2,)](x, y)
    assert big_shared.trace(x, y).ir.shared_bytes == 4 * 64 * 256 * 2
    ref = x.view(2, 4, 64, 256).flip(1).reshape_as(x)
    assert torch.equal(y, ref)


def test_side_stream_and_cuda_graph():
    kern = roundtrip_kernel("f32", "f32", "row", 16, 16)
    x = rand(WARPS * 16 * 8, 16, dtype=torch.float32)
    y = poisoned(*x.shape, dtype=torch.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        kern[(8,)](x, y)
    side.synchronize()
    assert torch.equal(y, x)
    y.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        kern[(8,)](x, y)
    x2 = rand(*x.shape, dtype=torch.float32)
    x.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x2)


def test_bad_inputs_fail_before_launch():
    kern = roundtrip_kernel("f32", "f32", "row", 16, 16)
    x = rand(WARPS * 16, 16, dtype=torch.float32)
    with pytest.raises(tk.ArgumentError, match="dtype"):
        kern[(1,)](x.half(), x)
    with pytest.raises(tk.ArgumentError, match="cpu"):
        kern[(1,)](x.cpu(), x)
    with pytest.raises(tk.ArgumentError, match="dim 1 must be 16"):
        kern[(1,)](torch.empty(32, 32, device="cuda"), x)
    with pytest.raises(tk.ArgumentError, match="aligned"):
        buf = rand(WARPS * 16 * 16 + 1, dtype=torch.float32)
        kern[(1,)](buf[1:].view(WARPS * 16, 16), x)      # 4 bytes off a 16-byte boundary


def test_strided_views():
    """Non-contiguous views (row stride != cols) take their strides at run time."""
    kern = roundtrip_kernel("f32", "f32", "row", 16, 16)
    base = rand(WARPS * 16 * 2, 48, dtype=torch.float32)
    x = base[:, 16:32]                              # row stride 48
    out = poisoned(WARPS * 16 * 2, 64, dtype=torch.float32)
    y = out[:, 32:48]
    for _ in range(2):                              # the second call must not hit a cached packed-layout launch
        kern[(2,)](x, y)
    torch.cuda.synchronize()
    assert torch.equal(y, x)
    assert torch.isnan(out[:, :32]).all() and torch.isnan(out[:, 48:]).all(), "wrote outside the view"
    assert "stride" in kern.source(x, y)


@functools.cache
def depth_read_kernel():
    """Warp 0 reads tile (depth, row_tile) of a (D, R, 64) tensor into a 16 x 64 output (plain loads, no TMA)."""
    @tk.kernel(warps=1, name="depth_read")
    def k(x: tk.gl[bf16, "D", "R", 64], y: tk.gl[bf16, 16, 64], depth: int, row_tile: int):
        t = tk.rt(bf16, 16, 64)
        tk.load(t, x, (depth, row_tile, 0))
        tk.store(y, t, (0, 0))
    return k


def test_strides_of_tensors_past_2_to_the_31_elements():
    """A (3, 2^25, 64) tensor: depth 2 starts 2^32 elements in, past an int's reach; the strides the kernel builds from
    its dims are 64-bit products (codegen's wide_product), so tile (2, last) reads the right rows. 13 GB."""
    rows = 1 << 25
    x = torch.empty(3, rows, 64, dtype=torch.bfloat16, device="cuda")
    last = rows // 16 - 1
    x[2, last * 16:] = rand(16, 64, dtype=torch.bfloat16)
    y = poisoned(16, 64, dtype=torch.bfloat16)
    depth_read_kernel()[(1,)](x, y, 2, last)
    torch.cuda.synchronize()
    assert torch.equal(y, x[2, last * 16:])
    del x
    torch.cuda.empty_cache()
