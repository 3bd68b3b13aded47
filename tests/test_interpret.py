"""The CPU interpreter: every kernel of kernels/ and every warp-level op against torch, its numerics,
its error reports (out of bounds, unwritten shared memory, deadlock) and its speed. No GPU needed."""
from __future__ import annotations

import functools
import importlib
import math
import pkgutil
import time

import numpy as np
import pytest
import torch

import tkpy.kernels as kernels
import tkpy as tk
from tkpy import bf16, cdiv, f32, fp16
from tkpy.interpret import SEMANTICS
from tkpy.interpret.numerics import round_to
from tkpy.ir.evaluate import compile_expr
from tkpy.ir.expr import Sym
from tkpy.tiles.dtypes import i32

import gpu_util
from gpu_util import TORCH, rel_err
from test_gpu_ops import (BINARY, REDUCE, UNARY, WARPS, big_shared, binary_kernel, check_reduce_and_broadcast,
                          loop_and_branch, mma_kernel, reduce_kernel, roundtrip_kernel, shared_roundtrip_kernel,
                          unary_kernel)
from test_trace_codegen import line_of
from tkpy.kernels import softmax
from tkpy.kernels.row_softmax import softmax_backward_rows, softmax_rows
from tkpy.kernels.warp_matmul import matmul, warp_matmul_bf16, warp_matmul_fp16


rand = functools.partial(gpu_util.rand, device="cpu")
poisoned = functools.partial(gpu_util.poisoned, device="cpu")


# -- numerics -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("dt", [bf16, fp16])
def test_rounding_matches_torch_on_every_kind_of_float(dt):
    """Random bit patterns cover normals, subnormals, huge values (overflow to inf) and exact ties."""
    bits = torch.randint(-2**31, 2**31, (200_000,), dtype=torch.int64).to(torch.int32)
    x = bits.view(torch.float32)
    ties = torch.tensor([1 + 2**-8, 1 + 3 * 2**-8, 1 + 2**-11, 1 + 3 * 2**-11, 65520.0, -0.0, math.inf])
    x = torch.cat([x[~torch.isnan(x)], ties])
    got = torch.from_numpy(round_to(dt, x.numpy()))
    assert torch.equal(got, x.to(dt.torch).float())
    assert np.isnan(round_to(dt, np.array([math.nan], np.float32))).all()


def test_scalars_divide_like_cpp():
    a, b = Sym("a", i32), Sym("b", i32)
    div, mod = compile_expr(a // b), compile_expr(a % b)
    for x, y in [(7, 2), (-7, 2), (7, -2), (-7, -2), (6, 3)]:
        assert div({"a": x, "b": y}) == math.trunc(x / y)
        assert mod({"a": x, "b": y}) == math.fmod(x, y)
    s = Sym("s", f32)
    assert compile_expr(s * 3)({"s": 0.1}) == float(np.float32(0.1 * 3))


# -- the kernels of kernels/ --------------------------------------------------------------------------
SOFTMAX_SHAPES = [(64, 16), (1024, 64), (192, 256), (100, 40)]     # (the last: a partial tile, rows and columns)


@pytest.mark.parametrize("rows,d", SOFTMAX_SHAPES)
def test_softmax(rows, d):
    x = rand(rows, d, dtype=torch.bfloat16, low=-6, high=6)
    y = poisoned(rows, d, dtype=torch.bfloat16)
    softmax_rows.interpret[(cdiv(rows, 64),)](x, y, cdiv(d, 16) * 16)
    ref = torch.softmax(x.double(), dim=-1)
    assert rel_err(y, ref) < 1e-2


@pytest.mark.parametrize("rows,d", SOFTMAX_SHAPES)
def test_softmax_backward(rows, d):
    y = torch.softmax(rand(rows, d, dtype=torch.float64, low=-6, high=6), -1).to(torch.bfloat16)
    dy, dx = rand(rows, d, dtype=torch.bfloat16), poisoned(rows, d, dtype=torch.bfloat16)
    softmax_backward_rows.interpret[(cdiv(rows, 64),)](dy, y, dx, cdiv(d, 16) * 16)
    y64 = y.double()
    assert rel_err(dx, y64 * (dy.double() - (dy.double() * y64).sum(-1, keepdim=True))) < 1e-2


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("m,n,k", [(64, 64, 32), (128, 192, 96)])
def test_warp_matmul(dtype, m, n, k):
    a, b = rand(m, k, dtype=dtype), rand(k, n, dtype=dtype)
    c = poisoned(m, n, dtype=torch.float32)
    kern = warp_matmul_bf16 if dtype == torch.bfloat16 else warp_matmul_fp16
    kern.interpret[(n // 64, m // 64)](a, b, c)
    assert rel_err(c, a.double() @ b.double()) < 1e-5


def test_env_var_runs_the_torch_facing_functions_on_the_cpu(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    x = rand(128, 64, dtype=torch.bfloat16)
    assert rel_err(softmax(x), torch.softmax(x.double(), -1)) < 1e-2
    a, b = rand(64, 32, dtype=torch.float16), rand(32, 128, dtype=torch.float16)
    assert rel_err(matmul(a, b), a.double() @ b.double()) < 1e-5


INTERPRETED_HERE = {"softmax_rows", "softmax_backward_rows", "warp_matmul_bf16", "warp_matmul_fp16"}
INTERPRETED_IN_HOPPER_TESTS = {"gemm_ws", "matmul"}    # tests/test_interpret_hopper.py
AWAITING_SEMANTICS: dict = {}     # kernel name -> why the interpreter cannot run it yet


def test_every_kernel_in_kernels_is_checked_here():
    """CI checks every kernel of kernels/ (block templates included) through the interpreter: a new one
    needs a test in this file or in test_interpret_hopper.py."""
    found = set()
    for info in pkgutil.iter_modules(kernels.__path__):
        module = importlib.import_module(f"tkpy.kernels.{info.name}")
        candidates = [getattr(v, "kernel", v) for v in vars(module).values()]   # a template holds its kernel
        found |= {k.name for k in candidates if isinstance(k, tk.Kernel)}
    unchecked = found - INTERPRETED_HERE - INTERPRETED_IN_HOPPER_TESTS - set(AWAITING_SEMANTICS)
    assert not unchecked, f"add interpreter tests for {sorted(unchecked)} to tests/test_interpret.py"


# -- every warp-level op, with the GPU tests' kernels and tolerances -----------------------------------
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("gdt,tdt", [("bf16", "bf16"), ("fp16", "fp16"), ("f32", "f32"), ("f32", "bf16"),
                                     ("bf16", "f32"), ("f32", "fp16")])
@pytest.mark.parametrize("rows,cols", [(16, 16), (64, 32)])
def test_register_tile_roundtrip(gdt, tdt, layout, rows, cols):
    x = rand(3 * WARPS * rows, cols, dtype=TORCH[gdt])
    y = poisoned(*x.shape, dtype=TORCH[gdt])
    roundtrip_kernel(gdt, tdt, layout, rows, cols).interpret[(3,)](x, y)
    assert torch.equal(y, x.to(TORCH[tdt]).to(TORCH[gdt]))


@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("dt", ["bf16", "f32"])
@pytest.mark.parametrize("cols,swizzle", [(16, 0), (16, 32), (32, 64), (64, 128), (128, 64)])
def test_shared_tile_roundtrip(dt, layout, cols, swizzle):
    if (cols * (4 if dt == "f32" else 2)) % max(swizzle, 1):
        pytest.skip("row too narrow for this swizzle")
    x = rand(3 * 4 * 32, cols, dtype=TORCH[dt])
    y = poisoned(2 * x.shape[0], cols, dtype=TORCH[dt])
    shared_roundtrip_kernel(dt, layout, 32, cols, swizzle).interpret[(3,)](x, y)
    assert torch.equal(y[: x.shape[0]], x) and torch.equal(y[x.shape[0]:], x)


def test_shared_tiles_are_laid_out_as_on_the_gpu():
    """A 128-byte swizzle moves 16-byte chunks: row 1's first chunk lands at byte 128 + 16."""
    kern = shared_roundtrip_kernel("bf16", "row", 32, 64, 128)
    x = rand(4 * 32, 64, dtype=torch.bfloat16)
    program = kern.interpret.program((x, poisoned(2 * 128, 64, dtype=torch.bfloat16)))
    s_in = next(v for v in program.ir.shared_offsets if v.name == "s_in")
    assert s_in.type.byte_offset(1, 0) == 128 + 16 and s_in.type.byte_offset(1, 8) == 128


@pytest.mark.parametrize("tdt", ["f32", "bf16"])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("fn", list(UNARY))
def test_unary(fn, layout, tdt):
    torch_fn, (lo, hi) = UNARY[fn]
    x = rand(4 * WARPS * 32, 64, dtype=torch.float32, low=lo, high=hi)
    y = poisoned(*x.shape, dtype=torch.float32)
    unary_kernel(fn, layout, tdt).interpret[(4,)](x, y)
    ref = torch_fn(x.to(TORCH[tdt]).double()).to(TORCH[tdt])
    assert rel_err(y, ref) < (1e-5 if tdt == "f32" else 8e-3)


@pytest.mark.parametrize("operand", ["tile", "const", "param"])
@pytest.mark.parametrize("fn", list(BINARY))
def test_binary(fn, operand):
    a = rand(3 * WARPS * 16, 32, dtype=torch.float32)
    b = rand(*a.shape, dtype=torch.float32, low=0.5, high=2.0)
    y = poisoned(*a.shape, dtype=torch.float32)
    binary_kernel(fn, "row", operand).interpret[(3,)](a, b, y, -1.25)
    other = {"tile": b.double(), "const": torch.tensor(0.75, dtype=torch.float64),
             "param": torch.tensor(-1.25, dtype=torch.float64)}[operand]
    assert rel_err(y, BINARY[fn](a.double(), other)) < 1e-6


@pytest.mark.parametrize("accum", [False, True])
@pytest.mark.parametrize("layout", ["row", "col"])
@pytest.mark.parametrize("axis", ["row", "col"])
@pytest.mark.parametrize("fn", list(REDUCE))
def test_reduce_and_broadcast(fn, axis, layout, accum):
    tiles = 2 * WARPS
    lo, hi = (0.8, 1.2) if fn == "prod" else (-2.0, 2.0)
    x = rand(tiles * 32, 32, dtype=torch.float32, low=lo, high=hi)
    vt, y = poisoned(*x.shape, dtype=torch.float32), poisoned(*x.shape, dtype=torch.float32)
    reduce_kernel(fn, axis, layout, accum).interpret[(2,)](x, vt, y)
    check_reduce_and_broadcast(x, vt, y, fn, axis, accum)


@pytest.mark.parametrize("dt", ["bf16", "fp16"])
@pytest.mark.parametrize("m,n,k", [(16, 16, 16), (64, 32, 48), (32, 32, 128)])
def test_mma_AB(dt, m, n, k):
    tiles = 2 * WARPS
    a, b = rand(tiles, m, k, dtype=TORCH[dt]), rand(tiles, k, n, dtype=TORCH[dt])
    c = rand(tiles, m, n, dtype=torch.float32)
    d = poisoned(tiles, m, n, dtype=torch.float32)
    mma_kernel(dt, m, n, k).interpret[(2,)](a, b, c, d)
    assert rel_err(d, a.double() @ b.double() + c.double()) < 1e-5


def test_runtime_loop_and_branch():
    x = rand(4 * WARPS * 16, 16, dtype=torch.float32)
    y = poisoned(*x.shape, dtype=torch.float32)
    loop_and_branch.interpret[(4,)](x, y, 3)
    ref = x.view(-1, 16, 16).clone()
    ref[0::2] *= 8
    for _ in range(3):
        ref[1::2] -= 1
    assert torch.equal(y, ref.view_as(x))


def test_big_shared_block_copies():
    x = rand(2 * 4 * 64, 256, dtype=torch.bfloat16)
    y = poisoned(*x.shape, dtype=torch.bfloat16)
    big_shared.interpret[(2,)](x, y)
    assert torch.equal(y, x.view(2, 4, 64, 256).flip(1).reshape_as(x))


def test_strided_views_are_read_and_written_in_place():
    base = rand(WARPS * 16 * 2, 48, dtype=torch.float32)
    out = poisoned(WARPS * 16 * 2, 64, dtype=torch.float32)
    roundtrip_kernel("f32", "f32", "row", 16, 16).interpret[(2,)](base[:, 16:32], out[:, 32:48])
    assert torch.equal(out[:, 32:48], base[:, 16:32])
    assert torch.isnan(out[:, :32]).all() and torch.isnan(out[:, 48:]).all()


@tk.kernel(warps=2)
def subtiles(x: tk.gl[bf16, "R", 128], y: tk.gl[bf16, "R", 128]):
    s = tk.st(bf16, 32, 128)                  # 128-byte swizzle: two panels of 64 columns
    t = tk.rt(f32, 32, 64)
    tk.block.load(s, x, (0, 0))
    tk.sync()
    tk.load(t, s.subtile(32, 64, (0, tk.warp_id())))   # warp w reads panel w: a runtime window
    tk.mul(t[16:32], t[16:32], 2.0)           # a register window: rows 16..31
    tk.store(y, t, (0, tk.warp_id()))


def test_subtiles_are_windows_of_their_tiles():
    x = rand(32, 128, dtype=torch.bfloat16)
    y = poisoned(32, 128, dtype=torch.bfloat16)
    subtiles.interpret[(1,)](x, y)
    ref = x.clone()
    ref[16:] *= 2
    assert torch.equal(y, ref)


# -- errors -------------------------------------------------------------------------------------------
X = torch.zeros(64, 16)


@tk.kernel(warps=2)
def off_by_one(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
    t = tk.rt(f32, 16, 16)
    tk.load(t, x, (tk.block_idx.x * 2 + tk.warp_id() + 1, 0))   # the last warp reads past the end
    tk.store(y, t, (tk.block_idx.x * 2 + tk.warp_id(), 0))


def test_out_of_range_coordinate_names_the_line():
    with pytest.raises(tk.InterpretError, match=r"out-of-bounds access of `x` \(shape \(64, 16\)\).*row 64..79, "
                                                r"but that axis has 64 \(in block \(1, 0, 0\), warp 1\)") as e:
        off_by_one.interpret[(2,)](X, X.clone())
    assert e.value.loc.line == line_of(off_by_one.fn, "tk.load(t, x")
    assert "tk.load(t, x, (tk.block_idx.x * 2 + tk.warp_id() + 1, 0))" in str(e.value)


@tk.kernel(warps=4)
def partial_block_load(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
    s = tk.st(f32, 64, 16)
    t = tk.rt(f32, 64, 16)
    with tk.if_(tk.warp_id() == 0):
        tk.block.load(s, x, (0, 0))           # a block-wide copy made by one warp fills a quarter of s
    tk.sync()
    tk.load(t, s)
    tk.store(y, t, (0, 0))


def test_read_of_unwritten_shared_memory_names_the_line():
    with pytest.raises(tk.InterpretError, match=r"reads shared memory that nothing has written.*"
                                                r"768 elements .* first at \(row 8, col 0\)") as e:
        partial_block_load.interpret[(1,)](X, X.clone())
    assert e.value.loc.line == line_of(partial_block_load.fn, "tk.load(t, s)")


@tk.kernel(warps=4)
def skipped_sync(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
    t = tk.rt(f32, 16, 16)
    tk.load(t, x, (tk.warp_id(), 0))
    with tk.if_(tk.warp_id() == 0):
        tk.sync()                             # warps 1-3 never get here
    tk.store(y, t, (tk.warp_id(), 0))


def test_deadlock_names_the_barrier_the_blocked_warps_and_their_lines():
    with pytest.raises(tk.DeadlockError) as e:
        skipped_sync.interpret[(1,)](X, X.clone())
    text = str(e.value)
    sync_line = line_of(skipped_sync.fn, "tk.sync()")
    branch_line = line_of(skipped_sync.fn, "with tk.if_")
    assert "deadlock in block (0, 0, 0) of kernel skipped_sync" in text
    assert f"warp 0 waits at test_interpret.py:{sync_line} `tk.sync()" in text
    assert f"inside the branch at test_interpret.py:{branch_line}" in text
    assert "__syncthreads (phase 0): 1 of 4 warps arrived (warp 0)" in text
    assert "warps 1, 2, 3 have finished the kernel" in text


@tk.kernel(warps=2, cluster=2)
def skipped_sync_in_a_cluster(x: tk.gl[f32, "R", 16]):
    with tk.if_((tk.block_idx.x == 1) & (tk.warp_id() == 0)):
        tk.sync()


def test_deadlock_in_a_cluster_names_the_blocks():
    with pytest.raises(tk.DeadlockError) as e:
        skipped_sync_in_a_cluster.interpret[(2,)](X)
    text = str(e.value)
    assert "deadlock in the cluster of block (0, 0, 0)" in text
    assert f"block (1, 0, 0), warp 0 waits at test_interpret.py:{line_of(skipped_sync_in_a_cluster.fn, 'tk.sync()')}" in text
    assert "warps block (0, 0, 0), warp 0, block (0, 0, 0), warp 1, block (1, 0, 0), warp 1 have finished" in text


@tk.kernel(warps=2)
def divergent_syncs(x: tk.gl[f32, "R", 16]):
    with tk.if_(tk.warp_id() == 0):
        tk.sync()
    with tk.else_():
        tk.sync()


def test_syncs_reached_from_different_lines_are_reported():
    with pytest.raises(tk.InterpretError, match="reached it from different lines"):
        divergent_syncs.interpret[(1,)](X)


@tk.kernel(warps=1)
def uses_before_writing(x: tk.gl[f32, "R", 16]):
    acc = tk.rt(f32, 16, 16)
    tk.store(x, acc, (0, 0))                  # forgot tk.zero(acc)


@tk.kernel(warps=2)
def tile_index_out_of_range(x: tk.gl[f32, "R", 16]):
    s = tk.st(f32, 16, 16, count=2)
    tk.load(s[tk.warp_id() + 1], x, (0, 0))


@tk.kernel(warps=2)
def subtile_out_of_range(x: tk.gl[f32, "R", 16]):
    s = tk.st(f32, 32, 16)
    tk.load(s.subtile(16, 16, (tk.warp_id() + 1, 0)), x, (0, 0))


@tk.kernel(warps=1)
def lane_dependent(x: tk.gl[f32, "R", 16]):
    t = tk.rt(f32, 16, 16)
    tk.zero(t)
    with tk.if_(tk.lane_id() == 0):
        tk.store(x, t, (0, 0))


@pytest.mark.parametrize("kern,error,match", [
    (uses_before_writing, tk.InterpretError, r"`acc` \(rt<f32, 16x16, row>\) is read before anything wrote it"),
    (tile_index_out_of_range, tk.InterpretError, "shared tile index 2 is out of range for `s`, an array of 2"),
    (subtile_out_of_range, tk.InterpretError, r"the 16x16 subtile at element \(32, 0\) lies outside `s`"),
    (lane_dependent, NotImplementedError, "differs per lane"),
])
def test_other_runtime_errors_name_the_line(kern, error, match):
    with pytest.raises(error, match=match) as e:
        kern.interpret[(1,)](X)
    assert e.value.loc.file == __file__


def test_an_op_attribute_the_semantics_do_not_handle_is_refused(monkeypatch):
    monkeypatch.setitem(SEMANTICS, "unary", (SEMANTICS["unary"][0], frozenset()))
    with pytest.raises(NotImplementedError, match="semantics of op `unary` do not handle fn='exp'"):
        unary_kernel("exp", "row", "f32").interpret[(1,)](*(torch.zeros(WARPS * 32, 64) for _ in range(2)))


def test_an_op_without_semantics_is_named(monkeypatch):
    monkeypatch.delitem(SEMANTICS, "store_gl_rt")
    with pytest.raises(NotImplementedError, match="no semantics for op `store_gl_rt`") as e:
        uses_before_writing.interpret[(1,)](X)
    assert e.value.loc.line == line_of(uses_before_writing.fn, "tk.store(x, acc")


# -- speed --------------------------------------------------------------------------------------------
@tk.kernel(warps=4)
def attention_fwd(q: tk.gl[bf16, "B", "H", "N", 64], kt: tk.gl[bf16, "B", "H", 64, "N"],
                  v: tk.gl[bf16, "B", "H", "N", 64], o: tk.gl[bf16, "B", "H", "N", 64], scale_log2: float):
    """Flash-attention forward with warp-level ops (each warp 16 queries, 64 keys per step; K given
    transposed): the interpreter's stand-in workload until kernels/ has an attention kernel."""
    b, h, rows = tk.block_idx.z, tk.block_idx.y, tk.block_idx.x * 4 + tk.warp_id()
    qt, p = tk.rt(bf16, 16, 64), tk.rt(bf16, 16, 64)
    k_t, v_t = tk.rt(bf16, 64, 64, layout="col"), tk.rt(bf16, 64, 64, layout="col")
    s, acc = tk.rt(f32, 16, 64), tk.rt(f32, 16, 64)
    m, m_new, l, corr = (tk.col_vec(s) for _ in range(4))
    tk.load(qt, q, (b, h, rows, 0))
    tk.zero(acc)
    tk.neg_infty(m)
    tk.zero(l)
    for j in tk.range(q.rows // 64):
        tk.load(k_t, kt, (b, h, 0, j))
        tk.zero(s)
        tk.mma_AB(s, qt, k_t, s)
        tk.mul(s, s, scale_log2)
        tk.row_max(m_new, s, m)
        tk.sub(corr, m, m_new)
        tk.exp2(corr, corr)
        tk.sub_row(s, s, m_new)
        tk.exp2(s, s)
        tk.mul(l, l, corr)
        tk.row_sum(l, s, l)
        tk.mul_row(acc, acc, corr)
        tk.copy(p, s)
        tk.load(v_t, v, (b, h, j, 0))
        tk.mma_AB(acc, p, v_t, acc)
        tk.copy(m, m_new)
    tk.div_row(acc, acc, l)
    tk.store(o, acc, (b, h, rows, 0))


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def test_a_512_cubed_gemm_interprets_in_under_10_s():
    a, b = rand(512, 512, dtype=torch.bfloat16), rand(512, 512, dtype=torch.bfloat16)
    c = poisoned(512, 512, dtype=torch.float32)
    seconds = timed(lambda: warp_matmul_bf16.interpret[(8, 8)](a, b, c))
    assert rel_err(c, a.double() @ b.double()) < 1e-5
    assert seconds < 10, f"512^3 GEMM took {seconds:.1f} s in the interpreter"


def test_attention_forward_of_512_tokens_interprets_in_under_10_s():
    q, k, v = (rand(1, 2, 512, 64, dtype=torch.bfloat16) for _ in range(3))
    o = poisoned(1, 2, 512, 64, dtype=torch.bfloat16)
    kt = k.transpose(-1, -2).contiguous()
    seconds = timed(lambda: attention_fwd.interpret[(512 // 64, 2, 1)](q, kt, v, o, math.log2(math.e) / 8))
    ref = torch.nn.functional.scaled_dot_product_attention(q.double(), k.double(), v.double())
    assert rel_err(o, ref) < 1e-2
    assert seconds < 10, f"attention forward took {seconds:.1f} s in the interpreter"
