"""The warp-level vocabulary without a GPU: the shuffle maps against the fragment maps, subtile addressing,
trace-time errors, the generated code and its SASS, NVRTC compiles of every GPU test kernel of
test_gpu_ops_extra.py and those tests' cases run on the CPU interpreter."""
from __future__ import annotations

import re

import numpy as np
import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.tiles import ST, layouts, shuffles, swizzle

from test_gpu_ops_extra import ALL_CASES
from test_trace_codegen import line_of

PER_CHUNK = {"ortho": 2, "align": 4, "naive": 1}
CHUNK_LEN = {"ortho": 16, "align": 16, "naive": 32}


# -- layout math ----------------------------------------------------------------------------------------
def held(layout: str, length: int) -> np.ndarray:
    """[lane, flat value] -> the vector index a lane holds, as the prelude's rv stores it."""
    lane, c, k = np.meshgrid(np.arange(32), np.arange(length // CHUNK_LEN[layout]), np.arange(PER_CHUNK[layout]),
                             indexing="ij")
    return (c * CHUNK_LEN[layout] + layouts.vector_index(layout, lane, k)).reshape(32, -1)


@pytest.mark.parametrize("dst,src", list(shuffles.VECTOR_SHUFFLES))
@pytest.mark.parametrize("length", [32, 64, 128])
def test_vector_shuffles_deliver_every_value(dst, src, length):
    have, want = held(src, length), held(dst, length)
    spec = shuffles.VECTOR_SHUFFLES[(dst, src)]
    for lane in range(32):
        for flat, index in enumerate(want[lane]):
            c, k = divmod(flat, PER_CHUNK[dst])
            source, sent = shuffles.vector_shuffle_source(dst, src, lane, c, k)
            offset = eval(spec.send_offset, {}, {"lane": source})
            assert 0 <= offset < spec.span
            assert have[source, sent] == index, f"lane {lane} value {flat}"


@pytest.mark.parametrize("layout", ["ortho", "align", "naive"])
def test_one_owner_lane_stores_each_vector_value(layout):
    idx = held(layout, 64)
    owners = [lane for lane in range(32) if eval(shuffles.VECTOR_OWNER[layout], {}, {"lane": lane})]
    stored = np.concatenate([idx[lane] for lane in owners])
    assert sorted(stored) == list(range(64))


def fragments(layout: str, m: np.ndarray) -> np.ndarray:
    """[lane, reg, half] values of a 16x16 base tile in a register layout."""
    lane, reg, half = np.meshgrid(np.arange(32), np.arange(4), np.arange(2), indexing="ij")
    r, c = layouts.fragment_position(layout, lane, reg, half)
    return m[r, c]


def movmatrix_trans(v: np.ndarray) -> np.ndarray:
    """PTX movmatrix.m8n8.trans.b16: lane i holds row i / 4, cols 2 (i % 4) + {0, 1}; the result is the
    same fragment of the transposed 8x8 matrix."""
    m = np.empty((8, 8), v.dtype)
    for lane in range(32):
        m[lane >> 2, 2 * (lane & 3):2 * (lane & 3) + 2] = v[lane]
    return np.stack([m.T[lane >> 2, 2 * (lane & 3):2 * (lane & 3) + 2] for lane in range(32)])


def shuffle_transpose8(v: np.ndarray) -> np.ndarray:
    """The fp32 transpose8 of the prelude: two shuffles of the values each lane sends (shuffles.py)."""
    out = np.empty_like(v)
    for lane in range(32):
        (a_lane, a_comp), (b_lane, b_comp) = shuffles.transpose8_sources(lane)
        a, b = v[a_lane, a_comp], v[b_lane, b_comp]
        out[lane] = (b, a) if eval(shuffles.TRANSPOSE8_ODD, {}, {"lane": lane}) else (a, b)
    return out


@pytest.mark.parametrize("transpose8", [movmatrix_trans, shuffle_transpose8], ids=["16-bit", "fp32"])
@pytest.mark.parametrize("layout", ["row", "col"])
def test_transpose_base_swaps_layout_and_transposes(transpose8, layout):
    """transpose_base (each register's 8x8 block transposed, registers 1 and 2 traded) holds the same
    matrix in the other layout (swap_layout), which is its transpose in the same layout (transpose)."""
    m = np.arange(256, dtype=np.float64).reshape(16, 16)
    regs = fragments(layout, m)
    out = np.stack([transpose8(regs[:, r]) for r in (0, 2, 1, 3)], axis=1)
    other = {"row": "col", "col": "row"}[layout]
    assert (out == fragments(other, m)).all()
    assert (out == fragments(layout, m.T)).all()


@pytest.mark.parametrize("dtype,cols,mode", [(bf16, 128, 128), (bf16, 128, 64), (bf16, 64, 32), (f32, 64, 128),
                                            (bf16, 64, 0), (f32, 48, 0)])
def test_subtiles_keep_the_address_function(dtype, cols, mode):
    """A window at whole swizzle atoms and panels: the root's address of each element is the window's base
    plus the window's own swizzled offset with the root's panel height (unswizzled: its row pitch)."""
    root = ST(dtype, 64, cols, mode)
    sub_rows, sub_cols = 16, (root.panel_cols if mode else 16)
    r, c = np.indices((sub_rows, sub_cols))
    for r0 in range(0, 64, sub_rows):
        for c0 in range(0, cols, sub_cols):
            inner = swizzle.byte_offset(r, c, rows=root.rows, cols=sub_cols if mode else cols,
                                        elem_bytes=dtype.nbytes, swizzle=mode)
            assert (root.byte_offset(r0 + r, c0 + c) == root.byte_offset(r0, c0) + inner).all()


# -- every GPU test kernel compiles, and its case passes on the interpreter ------------------------------
CASES = [pytest.param(builder, params, id=f"{builder.__name__}-{'-'.join(map(str, params))}")
         for builder, param_list in ALL_CASES for params in param_list]


@pytest.mark.parametrize("builder,params", CASES)
def test_gpu_test_kernel_compiles(builder, params):
    case = builder(*params, device="cpu")
    res = case.kernel.resources(*case.args)
    assert res.spill_stores == 0 and res.stack_frame == 0, res


@pytest.mark.parametrize("builder,params", CASES)
def test_gpu_test_case_on_the_interpreter(builder, params):
    case = builder(*params, device="cpu")
    case.run(case.kernel.interpret)


# -- generated code --------------------------------------------------------------------------------------
@tk.kernel(warps=2)
def tour(x: tk.gl[bf16, "R", 128], y: tk.gl[f32, "R", 64], v: tk.gl[f32, "R"], s: float):
    t = tk.rt(bf16, 32, 64)
    tc = tk.rt(bf16, 32, 64, "col")
    tk.load(t, x, (tk.block_idx.x, 0), masked=True)
    tk.swap_layout(tc, t)
    tk.store(y, tc, (tk.block_idx.x + 1, 0))
    top = t.subtile(16, 64, (1, 0))
    tk.exp(top, top)
    m = tk.row_max(t)
    z = tk.exp(t - m) * 2.0 + s
    tk.map(z, lambda a, b: tk.exp(a - b) * s, z, t)
    tk.tril(z, z, tk.block_idx.x * 2, -1.0)
    sh = tk.st(bf16, 64, 128)
    tk.block.load_async(sh, x, (0, 0))
    tk.load_async_wait()
    tk.sync()
    tk.load(t, sh.subtile(32, 64, (1, tk.block_idx.x % 2)))
    q = tk.rv(f32, 32, "naive")
    tk.copy(q, m)
    tk.store(v, q, (0, tk.block_idx.x), masked=True)
    tk.store(y, z, (tk.block_idx.x, 0))


TOUR_ARGS = (torch.empty(100, 128, dtype=torch.bfloat16), torch.empty(100, 64), torch.empty(100), 1.0)


def test_generated_code_reads_like_thunderkittens():
    body = tour.source(*TOUR_ARGS).split("// ---- end of prelude ----")[1]
    for stmt in ("tk::load_masked(t, x, 0, 0, block_x * 32, 0, 0.0f);", "tk::swap_layout(tc, t);",
                 "auto& top = tk::subtile_inplace<16>(t, 1);", "tk::sub_row(", "tk::row_max(m, t);",
                 "tk::map(z, [=](float x0, float x1) { return tk::op_exp{}(x0 - x1) * s; }, z, t);",
                 "tk::tril(z, z, block_x * 2, -1.0f);", "tk::load_async<false, 64>(sh, x, 0, 0, 0, 0, threadIdx.x);",
                 "tk::load_async_wait<0>();", "= tk::subtile<32, 64>(sh, 1, block_x % 2);", "tk::copy(q, m);",
                 "tk::store_masked(v, q, 0, 0, 0, block_x * 32);"):
        assert stmt in body, stmt
    ir = tour.ir(*TOUR_ARGS)
    for line in ("%top = rt<bf16, 16x64, row> subtile of %t at (1, 0)", "load[fill=0.0f] %t, @x",
                 "map[fn=exp(x0 - x1) * s] %z, %z, %t", "tril %z, %z, block_x * 2, -1.0f",
                 "load_async[scope=block] %sh", "store[masked=True] @v, %q"):
        assert line in ir, line


@pytest.mark.parametrize("fn,cpp", [
    (lambda a, b: (a - b) - (a - b), "x0 - x1 - (x0 - x1)"),
    (lambda a, b: -(-a) * (a + b), "-(-x0) * (x0 + x1)"),
    (lambda a, b: a - -2.0 + b / 3.0, "x0 - (-2.0f) + tk::op_div{}(x1, 3.0f)"),
    (lambda a, b: tk.max(tk.exp2(a), tk.relu(b)) * 0.5, "tk::op_max{}(tk::op_exp2{}(x0), tk::op_relu{}(x1)) * 0.5f"),
    (lambda a, b: 1.0, "1.0f"),
])
def test_map_lambdas_evaluate_in_the_order_written(fn, cpp):
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        a, b = tk.rt(f32, 16, 16), tk.rt(f32, 16, 16)
        tk.load(a, x, (0, 0))
        tk.load(b, x, (1, 0))
        tk.map(a, fn, a, b)
        tk.store(x, a, (0, 0))
    assert f"tk::map(a, [](float x0, float x1) {{ return {cpp}; }}, a, b);" in k.source(torch.empty(32, 16))


def test_map_broadcasts_vectors_per_row_and_per_column():
    """A vector source of a tile map is wrapped as tk::per_row / tk::per_col by its layout, also on a square
    tile (row layout: col_vec is ortho, row_vec align; col layout the other way round)."""
    for layout, (per_row, per_col) in (("row", ("ortho", "align")), ("col", ("align", "ortho"))):
        @tk.kernel(warps=1)
        def k(x: tk.gl[f32, "R", 32], s: float):
            t = tk.rt(f32, 32, 32, layout)
            m, c = tk.rv(f32, 32, per_row), tk.rv(f32, 32, per_col)
            tk.load(t, x, (0, 0))
            tk.load(m, x, (0, 0))
            tk.load(c, x, (1, 0))
            tk.map(t, lambda a, b: tk.exp2(a * s - b), t, m)
            tk.map(t, lambda a, b, d: a * b + d, t, c, t)
            tk.store(x, t, (0, 0))
        src = k.source(torch.empty(32, 32), 1.0)
        assert "tk::map(t, [=](float x0, float x1) { return tk::op_exp2{}(x0 * s - x1); }, t, tk::per_row(m));" in src
        assert "tk::map(t, [](float x0, float x1, float x2) { return x0 * x1 + x2; }, t, tk::per_col(c), t);" in src


def _fp_instructions(sass: str) -> dict:
    ops = re.findall(r"^\s+/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z0-9_]+)(?:\.[A-Z0-9_.]+)?", sass, re.M)
    mufu = re.findall(r"\bMUFU\.(\w+)", sass)
    return {name: ops.count(name) for name in ("FMUL", "FADD", "FFMA", "FSETP", "FSEL")} | \
        {f"MUFU.{f}": mufu.count(f) for f in set(mufu)}


def test_exp2_and_exp_are_one_mufu_ex2_without_range_fixups():
    """tk.exp2 is ex2.approx.ftz: a single MUFU.EX2 per element, none of exp2f's compare-select fix-up;
    tk.exp adds one multiply by log2(e); in a map, `s * scale - m` with a per-row m is one FFMA."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16], s: float):
        a, b, c = tk.rt(f32, 16, 16), tk.rt(f32, 16, 16), tk.rt(f32, 16, 16)
        m = tk.col_vec(a)
        tk.load(a, x, (0, 0))
        tk.load(b, x, (1, 0))
        tk.load(c, x, (2, 0))
        tk.load(m, x, (3, 0))
        tk.exp2(a, a)
        tk.exp(b, b)
        tk.map(c, lambda v, mx: tk.exp2(v * s - mx), c, m)
        tk.store(x, a, (0, 0))
        tk.store(x, b, (1, 0))
        tk.store(x, c, (2, 0))
    n = 16 * 16 // 32                                   # elements per lane per tile
    counts = _fp_instructions(k.sass(torch.empty(64, 16), 0.5))
    assert counts == {"FMUL": n, "FADD": 0, "FFMA": n, "FSETP": 0, "FSEL": 0, "MUFU.EX2": 3 * n}, counts


def test_exp2_emulated_moves_its_share_off_the_mufu():
    """tk.exp2(x, emulated=3/8): 3 of each lane's 8 elements by the polynomial (3 FFMA and one FMUL each, no
    MUFU), the rest one MUFU.EX2 each; no branch is left (the element numbers are constants)."""
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 64]):
        a = tk.rt(f32, 16, 64)
        tk.load(a, x, (0, 0))
        tk.exp2(a, a, emulated=3 / 8)
        tk.store(x, a, (0, 0))
    n = 16 * 64 // 32
    sass = k.sass(torch.empty(16, 64))
    counts = _fp_instructions(sass)
    assert counts["MUFU.EX2"] == n * 5 // 8 and counts["FFMA"] == 3 * (n * 3 // 8) and counts["FMUL"] == n * 3 // 8
    assert "BRA" not in sass.split("EXIT")[0]


@pytest.mark.parametrize("share", [0.3, -0.125, 1.5, True, "1/8"])
def test_exp2_emulated_share_must_be_eighths(share):
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 16]):
        a = tk.rt(f32, 16, 16)
        tk.exp2(a, a, emulated=share)
    with pytest.raises(tk.TraceError, match="multiple of 1/8"):
        k.ir(torch.empty(16, 16))


def test_sass_uses_movmatrix_cp_async_and_no_local_memory():
    sass = tour.sass(*TOUR_ARGS)
    assert "MOVM.16.MT88" in sass                   # 16-bit swap_layout
    assert "LDGSTS" in sass                         # cp.async
    assert not re.search(r"\b(STL|LDL)\b", sass)    # vector relayouts select, never index registers


@pytest.mark.parametrize("name", ["mma_AB", "mma_ABt", "mma_AtB", "mma_AtBt"])
def test_mma_variants_are_pure_tensor_core_code(name):
    from test_gpu_ops_extra import mma_variant_kernel
    trans_a, trans_b = "At" in name, name.endswith("Bt")
    a = torch.empty(2, *((64, 32) if trans_a else (32, 64)), dtype=torch.bfloat16)
    b = torch.empty(2, *((48, 64) if trans_b else (64, 48)), dtype=torch.bfloat16)
    c = torch.empty(2, 32, 48)
    sass = mma_variant_kernel(name, "bf16", 32, 48, 64).sass(a, b, c, c)
    assert sass.count("HMMA.16816.F32.BF16") == 2 * 3 * 2 * 4     # M/16 * N/16 * 2 n8 halves * K/16
    assert "MOVM" not in sass and sass.count("SHFL") == 1       # just the warp id's broadcast


def test_ragged_static_dims_are_bounds_checked_automatically():
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, 40, 64], y: tk.gl[f32, 40, 64]):
        t = tk.rt(f32, 16, 64)
        tk.load(t, x, (2, 0))
        tk.store(y, t, (2, 0))
    x = torch.empty(40, 64)
    src = k.source(x, x)
    assert "tk::load_masked(t, x, 0, 0, 32, 0, 0.0f);" in src and "tk::store_masked(y, t, 0, 0, 32, 0);" in src


def test_temporaries_only_cost_registers_while_live():
    @tk.kernel(warps=1)
    def k(x: tk.gl[f32, "R", 64]):
        t = tk.rt(f32, 32, 64)                      # 64 registers
        tk.load(t, x, (0, 0))
        for _ in range(8):                          # eight 64-register temporaries, one live at a time
            tk.store(x, t * 2.0, (0, 0))
    assert tk.ir.register_estimate(k.trace(torch.empty(64, 64)).ir) == 128


# -- trace-time errors name the user's line ---------------------------------------------------------------
def _kernel(body):
    @tk.kernel(warps=1)
    def k(x: tk.gl[bf16, "R", 64]):
        body(x)
    return k


@pytest.mark.parametrize("body,match", [
    (lambda x: tk.swap_layout(tk.rt(bf16, 16, 16), tk.rt(bf16, 16, 16)), "must be in the other layout"),
    (lambda x: tk.transpose(tk.rt(bf16, 16, 32), tk.rt(bf16, 16, 32)), "must be 32x16"),
    (lambda x: tk.mma_ABt(tk.rt(f32, 16, 16), tk.rt(bf16, 16, 32), tk.rt(bf16, 16, 32, "col"), tk.rt(f32, 16, 16)),
     r"b must be in row layout \(N x K"),
    (lambda x: tk.mma_AtB(tk.rt(f32, 16, 16), tk.rt(bf16, 32, 16, "col"), tk.rt(bf16, 16, 16, "col"),
                          tk.rt(f32, 16, 16)), "inner dimensions differ"),
    (lambda x: tk.rt(f32, 32, 32).subtile(32, 16, (0, 0)), "takes whole rows"),
    (lambda x: tk.rt(f32, 32, 32).subtile(16, 32, (tk.warp_id(), 0)), "known at trace time"),
    (lambda x: tk.st(bf16, 32, 128).subtile(16, 32, (0, 0)), "whole swizzle panels"),
    (lambda x: tk.st(bf16, 32, 64).subtile(16, 64, (2, 0)), "outside"),
    (lambda x: tk.rt(f32, 32, 32)[8:24], "starting at a multiple of its length"),
    (lambda x: tk.sv(f32, 128).subvec(24, 0), "subvec: length must be a positive multiple of 16"),
    (lambda x: tk.sv(f32, 128).subvec(64, 2), "subvec: index 2 puts the 64-element window outside"),
    (lambda x: tk.sv(f32, 128)[16:48], "subvec: the slice 16:48 must be a step-1 range starting at a multiple"),
    (lambda x: tk.subvec(tk.st(bf16, 16, 64), 16), "subvec: expected a shared vector"),
    (lambda x: tk.map(tk.rt(f32, 16, 16), lambda a: a * tk.rt(f32, 16, 16), tk.rt(f32, 16, 16)),
     "only its arguments and scalars"),
    (lambda x: tk.map(tk.rt(f32, 16, 16), lambda a: a if a else a, tk.rt(f32, 16, 16)), "cannot branch"),
    (lambda x: tk.rt(f32, 16, 32) - tk.rv(f32, 32, "ortho"), "neither one value per row"),
    (lambda x: tk.max(tk.rt(f32, 16, 32), tk.col_vec(tk.rt(f32, 16, 32))), "combine with add, sub, mul, div"),
    (lambda x: tk.tril(tk.rt(f32, 16, 16), tk.rt(f32, 16, 16), 1.5), "must be an integer"),
    (lambda x: tk.make_causal(tk.rt(f32, 16, 16), tk.rt(f32, 16, 16, "col")), "differ in shape or layout"),
    (lambda x: tk.load(tk.rt(f32, 16, 64), x, (0, 0), masked=False, fill=1.0), "a fill value was given"),
    (lambda x: tk.load_async(tk.rt(f32, 16, 64), x, (0, 0)), "into a shared tile"),
    (lambda x: tk.load_async_wait(-1), "non-negative"),
    (lambda x: tk.store(tk.sv(bf16, 256), tk.rv(bf16, 256, "contig"), private=True), "fp32 vectors of the contig"),
    (lambda x: tk.load(tk.rv(f32, 256, "ortho"), tk.sv(f32, 256), private=True), "fp32 vectors of the contig"),
    (lambda x: tk.load(tk.rt(f32, 16, 16), tk.st(f32, 16, 16), private=True), "moves a register vector"),
    (lambda x: tk.load(tk.rv(f32, 256, "contig"), x, (0, 0), private=True), "moves a register vector"),
    (lambda x: tk.copy(tk.rv(f32, 16), tk.rt(f32, 16, 16)), "not the same kind of operand"),
    (lambda x: tk.broadcast_col(tk.rt(f32, 16, 32), tk.rv(f32, 16, "ortho")), "one value per column"),
    (lambda x: tk.map(tk.rt(f32, 16, 32), lambda a, v: a - v, tk.rt(f32, 16, 32), tk.rv(f32, 32, "ortho")),
     r"map source 1: .* neither one value per row .*expected rv<16, ortho>: tk.col_vec.*expected rv<32, align>"),
    (lambda x: tk.map(tk.rt(f32, 32, 32, "col"), lambda a, v: a - v, tk.rt(f32, 32, 32, "col"), tk.rv(f32, 32, "naive")),
     r"neither one value per row .*rv<32, align>: tk.col_vec.*rv<32, ortho>: tk.row_vec"),
    (lambda x: tk.map(tk.rv(f32, 16), lambda v, a: v + a, tk.rv(f32, 16), tk.rt(f32, 16, 16)),
     "not the same kind of operand"),
])
def test_trace_time_errors(body, match):
    k = _kernel(body)
    with pytest.raises(tk.TraceError, match=match) as e:
        k.trace(torch.empty(32, 64, dtype=torch.bfloat16))
    assert f"test_warp_ops_cpu.py:" in str(e.value)


def test_errors_name_the_line_in_the_kernel():
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, "R", 32]):
        a, b = tk.rt(bf16, 16, 32), tk.rt(bf16, 16, 32)
        tk.swap_layout(a, b)
    with pytest.raises(tk.TraceError) as e:
        bad.trace(torch.empty(32, 32))
    assert f"test_warp_ops_cpu.py:{line_of(bad.fn, 'tk.swap_layout(a, b)')}" in str(e.value)
