"""Rows in registers, without a GPU: contig vectors (16-byte copies), whole-vector reductions to runtime scalars over
a warp, groups of a block's warps and a cluster's blocks, scalar loads and stores, math functions of scalars and
vector masks. The interpreter against float64 torch on every element, the trace-time errors, and what NVRTC makes
of it (16-byte loads and stores, one barrier or semaphore wait per reduction, no GPU-wide fence in the loop). The
same kernels on the GPU: tests/test_gpu_row_ops.py."""
from __future__ import annotations

import collections
import functools
import re

import pytest
import torch

import row_kernels
import tkpy as tk
from tkpy import bf16, f32, fp16

# (width, warps, group, cluster): one warp a row, groups of 2 and of a whole block, clusters of 2 and 4 blocks;
# widths with pieces past the row's end.
CASES = [(1000, 8, 2, 1), (512, 4, 1, 1), (2048, 8, 8, 1), (3000, 4, 2, 2), (1024, 2, 1, 4)]
DTYPES = {torch.bfloat16: 2 ** -8, torch.float16: 2 ** -11, torch.float32: 2 ** -22}


def check_row_stats(x, warps, group, cluster, interpret):
    y, stats = row_kernels.run_row_stats(x, warps, group, cluster, interpret=interpret)
    y_ref, stats_ref = row_kernels.reference(x)
    # y rounds to x's dtype; the statistics are fp32 sums of a few thousand terms
    scale = y_ref.abs().amax(1, keepdim=True)
    assert ((y.double() - y_ref).abs() <= DTYPES[x.dtype] * scale + 1e-6 * scale).all()
    err = (stats.double() - stats_ref).abs() / stats_ref.abs().amax(1, keepdim=True)
    assert (err[:2] < 1e-5).all() and (err[2:] == 0).all(), err.amax(1)


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}-w{}-g{}-c{}".format(*c))
def test_row_statistics_match_float64_in_the_interpreter(case, dtype):
    n, warps, group, cluster = case
    x = (torch.randn(13, n) * 2 + 1).to(dtype)      # 13 rows: a last group of rows partly past the end
    check_row_stats(x, warps, group, cluster, interpret=True)


def softmax_input(rows: int, n: int, dtype) -> torch.Tensor:
    """Random rows (max ~ 6: exponentials over 5 orders of magnitude) with a few -inf (masked) elements, one row all
    -inf (NaN, as torch gives) and one of a single finite element."""
    x = torch.randn(rows, n) * 3
    x[1, ::7] = -float("inf")
    x[2] = -float("inf")
    x[3, 1:] = -float("inf")
    return x.to(dtype)


# softmax's error, relative to each element: twice the output's unit roundoff (fp32: x log2 e - shift rounded where
# |x| ~ 10, then exp2), and fp16's subnormals (below 2^-14: a step of 2^-24)
SOFTMAX_TOL = {torch.bfloat16: (2 ** -7, 0), torch.float16: (2 ** -10, 2 ** -25), torch.float32: (2 ** -18, 0)}


def check_row_softmax(x, warps, group, cluster, interpret):
    y = row_kernels.run_row_softmax(x, warps, group, cluster, interpret=interpret)
    ref = torch.softmax(x.double(), -1)
    assert y[2].isnan().all() and ref[2].isnan().all()              # all -inf: NaN, as torch
    y, ref = y[torch.arange(len(x)) != 2].double(), ref[torch.arange(len(x)) != 2]
    relative, tiny = SOFTMAX_TOL[x.dtype]
    bound = relative * ref + tiny + 1e-45
    assert ((y - ref).abs() <= bound).all(), ((y - ref).abs() / bound).nan_to_num(float("inf")).max()


@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("case", CASES, ids=lambda c: "n{}-w{}-g{}-c{}".format(*c))
def test_split_softmax_matches_float64_in_the_interpreter(case, dtype):
    """Each warp's (max, sum of exponentials) merged over a block's warps or a cluster's blocks: the row's softmax,
    pieces wholly past the row's end (max -inf, sum 0) included."""
    n, warps, group, cluster = case
    check_row_softmax(softmax_input(13, n, dtype), warps, group, cluster, interpret=True)


@pytest.mark.parametrize("order", ["reverse", "random:3"])
def test_group_and_cluster_reductions_do_not_depend_on_the_warps_order(monkeypatch, order):
    """The scratch's two buffers and the semaphores' phases keep a fast warp from overwriting what a slow one reads:
    the same results whichever warp runs first (the interpreter's warp order)."""
    monkeypatch.setenv("TKPY_INTERPRET_ORDER", order)
    x = torch.randn(9, 1000).to(torch.bfloat16)
    for warps, group, cluster in ((8, 2, 1), (4, 2, 2)):
        check_row_stats(x, warps, group, cluster, interpret=True)
        check_row_softmax(softmax_input(9, 1000, torch.bfloat16), warps, group, cluster, interpret=True)


def test_warp_sums_of_every_vector_layout():
    """tk.sum / tk.amax / tk.amin over a warp, of the tile-shaped layouts too (their values repeated in several
    lanes count once) and of 16-bit vectors."""
    @tk.kernel(warps=1)
    def k(t: tk.gl[f32, 16, 64], v: tk.gl[bf16, 64], u: tk.gl[f32, 256], out: tk.gl[f32, 16]):
        tile = tk.rt(f32, 16, 64)
        tk.load(tile, t, (0, 0))
        rows, cols = tk.row_sum(tile), tk.col_max(tile)          # ortho and align vectors
        naive, contig = tk.rv(f32, 64, "naive"), tk.rv(bf16, 256, "contig")
        tk.load(naive, v, (0,))
        tk.load(contig, u, (0,))                                  # (rounded to bf16)
        s, m = tk.sum(rows), tk.amax(cols)
        lo = tk.amin(naive)
        a, b = tk.sum(naive, contig)
        for i, value in enumerate((s, m, lo, a, b)):
            tk.store(out, value, (i,))

    t, v, u = torch.randn(16, 64), torch.randn(64).to(torch.bfloat16), torch.randn(256)
    out = torch.full((16,), float("nan"))
    k.interpret[(1,)](t, v, u, out)
    want = [t.double().sum(), t.double().amax(0).max(), v.double().min(), v.double().sum(),
            u.to(torch.bfloat16).double().sum()]
    torch.testing.assert_close(out[:5].double(), torch.stack(want), rtol=1e-6, atol=1e-5)


def test_scalar_loads_and_stores():
    """One element: a float tk.var from a global tensor (fill past the end) or a shared vector, a scalar into
    either (masked past the end), converted to and from 16-bit tensors."""
    @tk.kernel(warps=1)
    def k(a: tk.gl[bf16, "N"], out: tk.gl[f32, 16], h: tk.gl[fp16, 16]):
        s = tk.sv(f32, 16)
        first, past = tk.var(0.0, "first"), tk.var(0.0, "past")
        tk.load(first, a, (2,))
        tk.load(past, a, (a.cols + 3,), fill=-7.0)
        tk.store(s, first * 2, 5)
        got = tk.var(0.0, "got")
        tk.load(got, s, (5,))
        tk.store(out, got, (0,))
        tk.store(out, past, (1,))
        tk.store(out, 1.0, (out.cols + 1,), masked=True)       # skipped
        tk.store(h, first / 3, (4,))

    a = torch.randn(10).to(torch.bfloat16)
    out, h = torch.zeros(16), torch.zeros(16, dtype=torch.float16)
    k.interpret[(1,)](a, out, h)
    assert out[0] == 2 * a[2].float() and out[1] == -7.0 and (out[2:] == 0).all()
    assert h[4] == (a[2].float() / 3).to(torch.float16) and h.count_nonzero() == 1


def test_math_functions_of_runtime_scalars():
    """tk.rsqrt(s) and friends of a runtime float scalar: their fp32 twins in the interpreter, tk::op_* functors (and
    the math prelude) in the C++; of a number, a constant."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, 16], out: tk.gl[f32, 16], eps: float):
        v = tk.var(0.0, "v")
        tk.load(v, x, (0,))
        for i, value in enumerate((tk.rsqrt(v + eps), tk.sqrt(v), tk.sigmoid(-v), tk.tanh(v), tk.erf(v),
                                   tk.log1p(v), tk.rsqrt(4.0) * v, tk.exp(v), tk.log(v), tk.exp2(-v), tk.log2(v),
                                   tk.log(4.0) + v, tk.exp2(3.0) * v)):
            tk.store(out, value, (i,))

    x, out = torch.full((16,), 0.3), torch.zeros(16)
    k.interpret[(1,)](x, out, 1e-3)
    v = torch.tensor(0.3, dtype=torch.float64)
    want = [torch.rsqrt(v + 1e-3), v.sqrt(), torch.sigmoid(-v), v.tanh(), torch.erf(v), torch.log1p(v), v / 2,
            v.exp(), v.log(), 2 ** -v, v.log2(), v + torch.log(torch.tensor(4.0)), 8 * v]
    torch.testing.assert_close(out[:13].double(), torch.stack(want).float().double(), rtol=1e-6, atol=0)
    source = k.source(x, out, 1e-3)
    assert "tk::op_rsqrt{}(v + eps)" in source and "struct op_erf" in source
    assert "tk::op_exp{}(v)" in source and "tk::op_log{}(v)" in source and k.resources(x, out, 1e-3).found
    assert "tk::op_exp2{}(0.0f - v)" in source and "tk::op_log2{}(v)" in source and "8.0f * v" in source

    @tk.kernel(warps=1)
    def in_a_map(x: tk.gl[f32, 256], y: tk.gl[f32, 256]):       # only a map's scalar computes one: still the prelude
        v = tk.rv(f32, 256, "contig")
        s = tk.var(0.0, "s")
        tk.load(s, x, (0,))
        tk.load(v, x, (0,))
        tk.map(v, lambda a: a * tk.rsqrt(s), v)
        tk.store(y, v, (0,))

    assert in_a_map.resources(torch.ones(256), torch.ones(256)).found


def test_vector_masks_by_index():
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, 512], y: tk.gl[f32, 4, 512], n: int, value: float):
        v, w = tk.rv(f32, 512, "contig"), tk.rv(f32, 512, "contig")
        tk.load(v, x, (0,))
        tk.right_fill(w, v, n, -1.0)
        tk.store(y, w, (0, 0))
        tk.left_fill(w, v, n)
        tk.store(y, w, (1, 0))
        tk.index_fill(w, v, n, value * 2)
        tk.store(y, w, (2, 0))
        tk.index_fill(w, v, n + 512, value)                 # past the vector: nothing changes
        tk.store(y, w, (3, 0))

    x, y = torch.randn(512), torch.zeros(4, 512)
    k.interpret[(1,)](x, y, 300, 1.25)
    assert torch.equal(y[0, :300], x[:300]) and (y[0, 300:] == -1).all()
    assert (y[1, :300] == 0).all() and torch.equal(y[1, 300:], x[300:])
    assert y[2, 300] == 2.5 and torch.equal(y[2, :300], x[:300]) and torch.equal(y[2, 301:], x[301:])
    assert torch.equal(y[3], x)
    assert "tk::index_fill(w, v, n, value * 2);" in k.source(x, y, 300, 1.25) and k.resources(x, y, 300, 1.0).found


VECTOR_LAYOUTS = {"contig": 512, "ortho": 64, "align": 64, "naive": 64}    # layout -> length (the last three replicate)


def index_fill_places(n: int) -> tuple:
    return (0, 1, 7, 8, n // 2 - 1, n // 2, n * 3 // 5, n - 1, -1, n, 5000)   # (the last three: nothing changes)


@functools.cache
def index_fill_kernel(dtype, layout: str):
    """y[i] = x with element index_fill_places(n)[i] set to value + i, in place (even i) or into another vector (odd
    i), for a vector of VECTOR_LAYOUTS[layout] values of `dtype` in `layout` (the prelude's vector index_fill: the lane
    holding the index writes its one slot)."""
    n = VECTOR_LAYOUTS[layout]
    places = index_fill_places(n)

    @tk.kernel(warps=1, name=f"index_fill_{dtype}_{layout}")
    def k(x: tk.gl[dtype, n], y: tk.gl[dtype, len(places), n], value: float):
        for i, at in enumerate(places):
            v, w = tk.rv(dtype, n, layout), tk.rv(dtype, n, layout)
            tk.load(v, x, (0,))
            dst = v if i % 2 == 0 else w
            tk.index_fill(dst, v, at, value + i)
            tk.store(y, dst, (i, 0))
    return k


def check_vector_index_fill(dtype, layout: str, device="cpu"):
    """Every element of each fill against torch's, the output poisoned first."""
    tdt, n = {bf16: torch.bfloat16, f32: torch.float32}[dtype], VECTOR_LAYOUTS[layout]
    places = index_fill_places(n)
    x = torch.randn(n, device=device).to(tdt)
    y = torch.full((len(places), n), float("nan"), device=device).to(tdt)
    kernel = index_fill_kernel(dtype, layout)
    (kernel if device != "cpu" else kernel.interpret)[(1,)](x, y, 3.5)
    want = x.expand(len(places), n).clone()
    for i, at in enumerate(places):
        if 0 <= at < n:
            want[i, at] = 3.5 + i
    assert torch.equal(y, want), [i for i in range(len(places)) if not torch.equal(y[i], want[i])]
    if device == "cpu":
        assert kernel.resources(x, y, 1.0).found


@pytest.mark.parametrize("layout", VECTOR_LAYOUTS)
@pytest.mark.parametrize("dtype", [f32, bf16], ids=str)
def test_vector_index_fill_in_every_layout(dtype, layout):
    check_vector_index_fill(dtype, layout)


@functools.cache
def segment_kernel(dtype, size: int, length: int):
    """Each row of x (length elements, a contig vector of that dtype) as segments of `size`: y = each segment's
    max and sum (fp32), dst being the source for the max (in place) and another vector for the sum."""
    @tk.kernel(warps=2, name=f"segments_{dtype}_{size}_{length}")
    def k(x: tk.gl[dtype, "R", length], top: tk.gl[f32, "R", length], total: tk.gl[f32, "R", length]):
        v, s = tk.rv(dtype, length, "contig"), tk.rv(f32, length, "contig")
        row = tk.warp_id()
        tk.load(v, x, (row, 0))
        tk.segment_sum(s, v, size)
        tk.store(total, s, (row, 0))
        tk.segment_max(v, v, size)
        tk.store(top, v, (row, 0))
    return k


def check_segment_reductions(dtype, size: int, length: int, device="cpu"):
    """Every segment's max and sum against torch's (float64 sums), the outputs poisoned first."""
    tdt = {bf16: torch.bfloat16, f32: torch.float32}[dtype]
    x = (torch.randn(2, length, device=device) * 4).to(tdt)
    top, total = (torch.full((2, length), float("nan"), device=device) for _ in range(2))
    kernel = segment_kernel(dtype, size, length)
    (kernel if device != "cpu" else kernel.interpret)[(1,)](x, top, total)
    segments = x.double().reshape(2, -1, size)
    want_top = segments.amax(-1, keepdim=True).expand_as(segments).reshape(2, length)
    want_total = segments.sum(-1, keepdim=True).expand_as(segments).reshape(2, length)
    assert torch.equal(top.double(), want_top.to(tdt).double())         # (a max is one of its elements)
    torch.testing.assert_close(total.double(), want_total, rtol=1e-6, atol=1e-5 * size)
    if device == "cpu":
        r = kernel.resources(x, top, total)
        assert r.found and not r.spills, r.summary()


@pytest.mark.parametrize("size", [8, 16, 32, 64, 128, 256])
@pytest.mark.parametrize("dtype", [f32, bf16], ids=str)
def test_segment_reductions_of_contig_vectors(dtype, size):
    check_segment_reductions(dtype, size, 512)


@pytest.mark.parametrize("body,match", [
    (lambda v, w: tk.segment_sum(v, v, 512), "size must be one of"),
    (lambda v, w: tk.segment_max(v, v, 4), "size must be one of"),
    (lambda v, w: tk.segment_sum(w, v, 128), "differ in length"),
    (lambda v, w: tk.segment_sum(tk.rv(f32, 256, "naive"), v, 128), "must be a contig vector"),
])
def test_segment_reduction_mistakes_are_explained(body, match):
    @tk.kernel(warps=1, name="bad_segments")
    def k(x: tk.gl[f32, 1, 256]):
        body(tk.rv(f32, 256, "contig"), tk.rv(f32, 512, "contig"))
    with pytest.raises(tk.TraceError, match=match):
        k.interpret[(1,)](torch.zeros(1, 256))


@functools.cache
def int_loads_kernel(dtype):
    """Each of 8 int tk.vars from an int32 or int64 tensor (fill -5 past its end) used as an index of a float tensor
    where it is one, else stored clamped to +-1000 (int64 values past int32's range saturate)."""
    @tk.kernel(warps=1, name=f"int_loads_{dtype}")
    def k(t: tk.gl[dtype, "N"], x: tk.gl[f32, 64], out: tk.gl[f32, 8]):
        for i in range(8):
            index = tk.var(0, "index")
            tk.load(index, t, (i,), fill=-5)
            with tk.if_((index >= 0) & (index < 64)):
                got = tk.var(0.0, "got")
                tk.load(got, x, (index,))
                tk.store(out, got, (i,))
            with tk.else_():
                tk.store(out, tk.call("max", tk.call("min", index, 1000), -1000) * 1.0, (i,))
    return k


def check_int_scalar_loads(dtype, device="cpu"):
    big = [2**40, -2**40] if dtype == tk.i64 else [2**31 - 1, -2**31]
    t = torch.tensor([3, 63, 0, -100, 64, *big], dtype=dtype.torch, device=device)
    x, out = torch.randn(64, device=device), torch.full((8,), float("nan"), device=device)
    k = int_loads_kernel(dtype)
    (k.interpret if device == "cpu" else k)[(1,)](t, x, out)
    rest = torch.tensor([-100.0, 64, 1000, -1000, -5], device=device)
    assert torch.equal(out, torch.cat([x[[3, 63, 0]], rest]))
    return k, (t, x, out)


@pytest.mark.parametrize("dtype", [tk.i32, tk.i64])
def test_int_scalar_loads(dtype):
    """An int tk.var from an int32 or int64 tensor (a cross-entropy's target): fill past the end, int64 values
    saturated to int32's range; used as an index (here of a float tensor). (On the GPU: tests/test_gpu_row_ops.py.)"""
    k, args = check_int_scalar_loads(dtype)
    source = k.source(*args)
    assert "tk::load_scalar_int_masked(t, 0, 0, 0, 0, -5)" in source and k.resources(*args).found
    assert ("long long* __restrict__ t_ptr" in source) == (dtype == tk.i64)


@functools.cache
def int_stores_kernel(dtype):
    """out[i] = 3 t[i] - 7 for the 6 ints of t (an int tk.var stored into an int32 or int64 tensor), and a masked
    store past out's end that writes nothing."""
    @tk.kernel(warps=1, name=f"int_stores_{dtype}")
    def k(t: tk.gl[tk.i32, 6], out: tk.gl[dtype, "N"]):
        for i in range(6):
            value = tk.var(0, "value")
            tk.load(value, t, (i,))
            tk.store(out, value * 3 - 7, (i,))
        tk.store(out, 1, (out.cols,), masked=True)
    return k


def check_int_scalar_stores(dtype, device="cpu"):
    t = torch.tensor([0, 1, -5, 2**29, -2**29, 100], dtype=torch.int32, device=device)
    out = torch.full((6,), 123456789, dtype=dtype.torch, device=device)
    k = int_stores_kernel(dtype)
    (k.interpret if device == "cpu" else k)[(1,)](t, out)
    assert out.tolist() == [3 * v - 7 for v in t.tolist()]
    return k, (t, out)


@pytest.mark.parametrize("dtype", [tk.i32, tk.i64])
def test_int_scalar_stores(dtype):
    """An int into an int32 or int64 tensor's element (a counter reset, a token id), lane 0's store; masked past the
    end. (On the GPU: tests/test_gpu_row_ops.py.)"""
    k, args = check_int_scalar_stores(dtype)
    source = k.source(*args)
    assert "tk::store_scalar_int(out, 0, 0, 0, 0, value * 3 - 7);" in source and k.resources(*args).found
    assert "tk::store_scalar_int_masked(out, 0, 0, 0, N, 1);" in source


def test_a_float_into_an_int_tensor_is_explained():
    @tk.kernel(warps=1)
    def k(out: tk.gl[tk.i32, 4]):
        tk.store(out, 1.5, (0,))
    with pytest.raises(tk.TraceError, match="scalar store into `out`, an int32 tensor: the value must be an int"):
        k.trace(torch.zeros(4, dtype=torch.int32))


@functools.cache
def scalar_partials_kernel():
    @tk.kernel(warps=4, cluster=(2, 1, 1), name="scalar_partials")
    def k(x: tk.gl[f32, 8, 256], out: tk.gl[f32, 2, 8]):
        v = tk.rv(f32, 256, "contig")
        row = tk.cluster.rank() * 4 + tk.warp_id()
        tk.load(v, x, (row, 0))
        own = tk.let(tk.sum(v) * 2.0, "own")
        block_total, block_twice = tk.block.sum(v, own, warps=2)
        total, twice = tk.cluster.sum(v, own, warps=2)
        tk.store(out, block_twice - 2.0 * block_total, (0, row))
        tk.store(out, twice, (1, row))
    return k


def check_scalar_partials(device="cpu"):
    x, out = torch.randn(8, 256, device=device), torch.full((2, 8), float("nan"), device=device)
    k = scalar_partials_kernel()
    (k.interpret if device == "cpu" else k)[(2,)](x, out)
    sums = x.double().sum(1)
    assert (out[0].abs() < 1e-4).all()
    pairs = (sums.view(2, 2, 2).sum(2) * 2).sum(0)              # warps w and w + 1 of both blocks
    torch.testing.assert_close(out[1].double(), pairs.repeat_interleave(2).repeat(2), rtol=1e-5, atol=1e-5)
    return k, (x, out)


def test_scalar_partials_reduce_with_vectors():
    """A float scalar among a group reduction's vectors is its warp's partial: summed over the group (and the
    cluster) in the same barrier. (On the GPU: tests/test_gpu_row_ops.py.)"""
    k, args = check_scalar_partials()
    assert k.resources(*args).found


@pytest.mark.parametrize("dtype", [bf16, f32])
def test_shared_vectors_load_asynchronously(dtype):
    """tk.load_async into a shared vector (cp.async, no registers on the way; masked: zeros past the row's end), read
    back into a contig vector after the wait: the interpreter's values, and the C++'s LDGSTS copies."""
    @tk.kernel(warps=2)
    def k(x: tk.gl[dtype, "R", 1000], y: tk.gl[dtype, "R", 1000]):
        s = tk.sv(dtype, 512, count=2)
        v = tk.rv(f32, 512, "contig")
        tk.load_async(s[tk.warp_id()], x, (tk.block_idx.x, tk.warp_id()), masked=True)
        tk.load_async_wait(0)
        tk.warp_sync()
        tk.load(v, s[tk.warp_id()])
        tk.store(y, v + 1.0, (tk.block_idx.x, tk.warp_id()), masked=True)

    x = torch.randn(3, 1000).to(dtype.torch)
    y = torch.full_like(x, float("nan"))
    k.interpret[(3,)](x, y)
    assert torch.equal(y, (x.float() + 1).to(dtype.torch))
    assert _sass_counts(k, x, y)["LDGSTS.E.BYPASS.128.ZFILL"] == 512 // (16 // dtype.nbytes) // 32


def test_reading_a_cluster_partial_before_its_semaphore_is_an_error():
    """An asynchronous cluster store is in flight until its semaphore's phase completes and is waited on."""
    @tk.kernel(warps=1, cluster=(2, 1, 1))
    def k(out: tk.gl[f32, 16]):
        s, sem = tk.sv(f32, 16), tk.semaphore()
        tk.init_semaphore(sem, 1)
        tk.cluster.sync()
        tk.expect_bytes(sem, 8)
        tk.cluster.store(s, 1.0, tk.cluster.rank(), None, sem)
        got = tk.var(0.0, "got")
        tk.load(got, s, (tk.cluster.rank(),))        # its own store, in flight: no tk.wait(sem, 0) first
        tk.store(out, got, (tk.cluster.rank(),))

    with pytest.raises(tk.InterpretError, match="before its TMA load arrived.*the cluster store into `s`"):
        k.interpret[(2,)](torch.zeros(16))


def _trace_error(body, cluster=None, warps=4):
    @tk.kernel(warps=warps, cluster=cluster)
    def k(x: tk.gl[f32, "R", 1024], y: tk.gl[f32, "R"]):
        body(x, y)

    with pytest.raises(tk.TraceError) as info:
        k.trace(torch.zeros(4, 1024), torch.zeros(4))
    return str(info.value)


@pytest.mark.parametrize("body,match", [
    (lambda x, y: tk.copy(tk.rv(f32, 256, "ortho"), tk.rv(f32, 256, "contig")), "contig vector converts to no"),
    (lambda x, y: tk.cluster.sum(tk.rv(f32, 256, "contig")), "needs a kernel launched in clusters"),
    (lambda x, y: tk.cluster.merge_softmax(1.0, 2.0), "merge_softmax needs a kernel launched in clusters"),
    (lambda x, y: tk.block.merge_softmax(tk.rv(f32, 256, "contig"), 1.0, warps=2),
     "merge_softmax's max: expected a scalar"),
    (lambda x, y: tk.block.sum(tk.rv(f32, 256, "contig"), warps=3), "warps must be a positive int dividing"),
    (lambda x, y: tk.sum(*[tk.rv(f32, 256, "contig")] * 5), "at most 4 vectors"),
    (lambda x, y: tk.load(tk.var(0, "i"), y, (0,)), "float tensors and shared vectors take a float tk.var"),
    (lambda x, y: tk.block.sum(tk.rv(f32, 256, "contig"), tk.warp_id()), "a scalar partial must be a float"),
    (lambda x, y: tk.warpgroup.sum(tk.rv(f32, 256, "contig")), "has no attribute|no vector reductions"),
    (lambda x, y: tk.rv(f32, 128, "contig"), "multiple of 256"),
    (lambda x, y: tk.load_async(tk.rv(f32, 256, "contig"), x, (0, 0)), "into a shared tile or vector"),
])
def test_mistakes_are_explained_at_trace_time(body, match):
    assert re.search(match, _trace_error(body))


def test_cluster_store_takes_f32_vectors():
    assert "f32 shared vectors" in _trace_error(lambda x, y: tk.cluster.store(tk.sv(bf16, 16), 1.0, 0, 0),
                                                cluster=(2, 1, 1))


def _sass_counts(k, *args) -> collections.Counter:
    return collections.Counter(re.findall(r"\b(LDG\.E\.128\S*|STG\.E\.128|BAR\.SYNC\S*|STAS|MEMBAR\.ALL\.GPU|"
                                          r"SYNCS\.PHASECHK\S*|LDS\S*|STS\S*|LDGSTS\S*)\s", k.sass(*args)))


@pytest.mark.parametrize("dtype", [bf16, f32])
def test_contig_copies_are_16_byte_accesses_and_block_sums_one_barrier_each(dtype):
    """Each lane's 8 values of a chunk: one 16-byte load and store (two for fp32), global and shared; a block
    reduction of several vectors: one barrier."""
    @tk.kernel(warps=4)
    def k(x: tk.gl[dtype, "R", 2048], y: tk.gl[dtype, "R", 2048]):
        v, w, s = tk.rv(f32, 512, "contig"), tk.rv(f32, 512, "contig"), tk.sv(dtype, 512, count=4)
        for row in tk.range(tk.block_idx.x, x.rows, tk.grid_dim.x):
            tk.load(v, x, (row, tk.warp_id()))
            a, b = tk.block.sum(v, v * v)
            tk.map(v, lambda x: (x - a) * b, v)
            tk.store(s[tk.warp_id()], v)
            tk.load(w, s[tk.warp_id()])
            tk.store(y, w, (row, tk.warp_id()))

    x = torch.empty(8, 2048, dtype=dtype.torch)
    counts = _sass_counts(k, x, x)
    per = 2 if dtype == bf16 else 4                          # 2 chunks a lane; fp32 takes 2 accesses a chunk
    assert counts["LDG.E.128.CONSTANT"] == per and counts["STG.E.128"] == per
    assert counts["STS.128"] == per and counts["LDS.128"] and not counts["LDS.U16"] and not counts["STS.U16"]
    assert counts["BAR.SYNC.DEFER_BLOCKING"] == 1 and not counts["MEMBAR.ALL.GPU"]
    assert k.resources(x, x).spill_stores == 0


def test_cluster_sums_wait_on_a_semaphore_not_a_fence():
    """Across a cluster: st.async stores completing on the readers' semaphores and one wait a reduction; the only
    cluster barrier (and its GPU-wide fence) is the one at the kernel's start, after the semaphores' init."""
    k = row_kernels.row_stats(bf16, 3000, 4, 2, 2)
    x = torch.empty(13, 3000, dtype=torch.bfloat16)
    stats = torch.empty(4, 16)[:, :13]
    counts = _sass_counts(k, x, x, stats)
    source = k.source(x, x, stats)
    assert source.count("tk::cluster_sync();") == 1 and counts["MEMBAR.ALL.GPU"] == 1
    assert counts["STAS"] >= 3 and counts["SYNCS.PHASECHK.TRANS64.TRYWAIT"] >= 3
    assert "st.async.shared::cluster.mbarrier::complete_tx::bytes.f32" in source
    assert k.resources(x, x, stats).spill_stores == 0


def test_merged_softmax_statistics_take_one_barrier_or_one_semaphore_wait_a_row():
    """tk.block.merge_softmax: one barrier a row (a max and then a sum would take two); tk.cluster.merge_softmax: the
    two values a warp sent by st.async, one semaphore wait a row, no fence."""
    x = torch.empty(13, 3000, dtype=torch.bfloat16)
    block = _sass_counts(row_kernels.row_softmax(bf16, 3000, 8, 8), x, x)
    assert block["BAR.SYNC.DEFER_BLOCKING"] == 1 and not block["MEMBAR.ALL.GPU"]
    k = row_kernels.row_softmax(bf16, 3000, 4, 2, 2)
    counts, source = _sass_counts(k, x, x), k.source(x, x)
    assert source.count("tk::merge_softmax_slots<4, 2, 4, 16>") == 1 and source.count("tk::wait(") == 1
    assert counts["MEMBAR.ALL.GPU"] == 1 and counts["STAS"] >= 2
    assert k.resources(x, x).spill_stores == 0
