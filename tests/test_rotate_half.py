"""tk.rotate_half and tk.load_rotary_table (tkpy/ops/rotary.py): Hugging Face's rotate_half and GPT-J's
rotate_every_two per head, of contig vectors (lane shuffles; heads crossing chunks where head_dim does not divide 256;
a head cut short by the vector's end) and of row-layout tiles (a register permutation), in bf16 and fp32, converting,
in place; the tables spread over the heads' columns. The interpreter against torch on every element with poisoned
outputs (exact: both ops only move, negate and convert values), NVRTC compiles without spills, the trace-time errors
naming the user's line; on the GPU the same kernels (test_on_the_gpu)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import gpu_util
import tkpy as tk
from tkpy import bf16, f32

ROWS = 3
DTYPES = {"bf16": bf16, "f32": f32}


def rotate_half_reference(x: torch.Tensor, rotary_dim: int, head_dim: int, interleaved: bool) -> torch.Tensor:
    """Hugging Face's rotate_half (GPT-J's rotate_every_two) of each head's first rotary_dim elements, 0 after, along
    the last dim (a head cut short by the end padded with 0)."""
    n = x.shape[-1]
    heads = F.pad(x.double(), (0, -n % head_dim)).unflatten(-1, (-1, head_dim))
    part = heads[..., :rotary_dim]
    if interleaved:
        turned = torch.stack((-part[..., 1::2], part[..., 0::2]), -1).flatten(-2)
    else:
        turned = torch.cat((-part[..., rotary_dim // 2:], part[..., :rotary_dim // 2]), -1)
    return F.pad(turned, (0, head_dim - rotary_dim)).flatten(-2)[..., :n]


def table_reference(t: torch.Tensor, n: int, head_dim: int, interleaved: bool, fill: float) -> torch.Tensor:
    """Each row of t (the angles) as a head's columns (cat(t, t), or each twice), `fill` past 2 x t's columns,
    repeated over n elements."""
    t = t.double()
    cols = t.repeat_interleave(2, -1) if interleaved else torch.cat((t, t), -1)
    head = F.pad(cols, (0, head_dim - cols.shape[-1]), value=fill)
    return head.repeat(1, -(-n // head_dim))[:, :n]


def vector_kernel(n, head_dim, rotary_dim, interleaved, src, dst, in_place=False):
    @tk.kernel(warps=1)
    def rotate(x: tk.gl[bf16, ROWS, n], y: tk.gl[f32, ROWS, n]):
        v = tk.rv(DTYPES[src], n, "contig")
        tk.load(v, x, (tk.block_idx.x, 0))
        out = v if in_place else tk.rv(DTYPES[dst], n, "contig")
        tk.rotate_half(out, v, rotary_dim, head_dim, interleaved)
        tk.store(y, out, (tk.block_idx.x, 0))
    return rotate


def tile_kernel(cols, head_dim, rotary_dim, interleaved, src, dst, in_place=False):
    @tk.kernel(warps=1)
    def rotate(x: tk.gl[bf16, 16, cols], y: tk.gl[f32, 16, cols]):
        t = tk.rt(DTYPES[src], 16, cols)
        tk.load(t, x, (0, 0))
        out = t if in_place else tk.rt(DTYPES[dst], 16, cols)
        tk.rotate_half(out, t, rotary_dim, head_dim, interleaved)
        tk.store(y, out, (0, 0))
    return rotate


def table_kernel(n, head_dim, angles, interleaved, table, dst, fill):
    @tk.kernel(warps=1)
    def spread(t: tk.gl[DTYPES[table], "S", angles], y: tk.gl[f32, "S", n]):
        v = tk.rv(DTYPES[dst], n, "contig")
        tk.load_rotary_table(v, t, tk.block_idx.x, head_dim, interleaved, fill=fill)
        tk.store(y, v, (tk.block_idx.x, 0))
    return spread


# (length, head_dim, rotary_dim, interleaved): heads within chunks, partial rotary dims, heads crossing chunks (96,
# 80, 160), a head cut short by the vector's end (512 = 6 x 80 + 32; 256 = 2 x 96 + 64)
VECTOR_CASES = [(256, 128, 128, False), (512, 64, 32, False), (768, 96, 96, False), (512, 80, 48, False),
                (256, 96, 64, False), (1280, 160, 160, False), (256, 128, 128, True), (512, 80, 40, True),
                (256, 256, 64, False)]
# (columns, head_dim, rotary_dim, interleaved): partners in the next base tile (32), within one (16), cut short (48)
TILE_CASES = [(64, 32, 32, False), (64, 64, 32, False), (32, 16, 16, False), (48, 32, 16, False),
              (64, 32, 24, True), (48, 32, 32, True)]
CONVERSIONS = [("bf16", "bf16", False), ("f32", "f32", False), ("bf16", "f32", False), ("bf16", "bf16", True)]
# (length, head_dim, angles, interleaved)
TABLE_CASES = [(256, 128, 64, False), (512, 64, 16, False), (768, 96, 48, False), (512, 80, 24, True),
               (256, 128, 32, True)]


def _run(make, rows, case, conversion, device="cpu"):
    """x (rows, length) rotated by make(*case, *conversion)'s kernel (a block a row for vectors, one for a tile) into
    a poisoned y, against the reference on every element."""
    (n, d, r, inter), (src, dst, in_place) = case, conversion
    x = gpu_util.rand(rows, n, dtype=torch.bfloat16, device=device)
    y = gpu_util.poisoned(rows, n, dtype=torch.float32, device=device)
    kernel = make(n, d, r, inter, src, dst, in_place)
    (kernel.interpret if device == "cpu" else kernel)[(rows if make is vector_kernel else 1,)](x, y)
    assert torch.equal(y.double(), rotate_half_reference(x, r, d, inter)), (case, conversion)
    return kernel, x, y


@pytest.mark.parametrize("conversion", CONVERSIONS, ids=lambda c: f"{c[0]}-{c[1]}{'-in-place' if c[2] else ''}")
@pytest.mark.parametrize("case", VECTOR_CASES, ids=lambda c: f"n{c[0]}d{c[1]}r{c[2]}{'i' if c[3] else ''}")
def test_contig_vectors_rotate_half_as_hugging_face(case, conversion):
    kernel, x, y = _run(vector_kernel, ROWS, case, conversion)
    if conversion == CONVERSIONS[0]:               # (one compile a case: NVRTC, no GPU)
        r = kernel.resources(x, y)
        assert r.found and r.spill_stores == r.spill_loads == 0, r
        assert f"tk::rotate_half<{case[2]}, {case[1]}, {'true' if case[3] else 'false'}>" in kernel.source(x, y)


@pytest.mark.parametrize("conversion", CONVERSIONS, ids=lambda c: f"{c[0]}-{c[1]}{'-in-place' if c[2] else ''}")
@pytest.mark.parametrize("case", TILE_CASES, ids=lambda c: f"c{c[0]}d{c[1]}r{c[2]}{'i' if c[3] else ''}")
def test_row_layout_tiles_rotate_half_within_lanes(case, conversion):
    kernel, x, y = _run(tile_kernel, 16, case, conversion)
    if conversion == CONVERSIONS[0]:
        assert kernel.resources(x, y).found
        assert "__shfl_sync" not in kernel.source(x, y).split('extern "C"')[1]   # (registers only)


def _table_run(case, table, dst, device="cpu"):
    n, d, angles, inter = case
    fill = 1.0 if inter else 0.5
    t = gpu_util.rand(5, angles, dtype=gpu_util.TORCH[table], device=device)
    y = gpu_util.poisoned(5, n, dtype=torch.float32, device=device)
    kernel = table_kernel(n, d, angles, inter, table, dst, fill)
    (kernel.interpret if device == "cpu" else kernel)[(5,)](t, y)
    expected = table_reference(t, n, d, inter, fill)
    assert torch.equal(y.double(), expected.to(gpu_util.TORCH[dst]).double()), (case, table, dst)
    return kernel, t, y


@pytest.mark.parametrize("table,dst", [("f32", "f32"), ("bf16", "bf16"), ("bf16", "f32")])
@pytest.mark.parametrize("case", TABLE_CASES, ids=lambda c: f"n{c[0]}d{c[1]}a{c[2]}{'i' if c[3] else ''}")
def test_tables_spread_over_each_heads_columns(case, table, dst):
    kernel, t, y = _table_run(case, table, dst)
    if (table, dst) == ("f32", "f32"):
        assert kernel.resources(t, y).found


@pytest.mark.parametrize("body,match", [
    (lambda: tk.rotate_half(tk.rt(f32, 16, 32, "col"), tk.rt(f32, 16, 32, "col"), 32), "row-layout tiles"),
    (lambda: tk.rotate_half(tk.rv(f32, 32, "naive"), tk.rv(f32, 32, "naive"), 32), "must be contig"),
    (lambda: tk.rotate_half(tk.rv(f32, 256, "contig"), tk.rt(f32, 16, 256), 32), "not both tiles or both vectors"),
    (lambda: tk.rotate_half(tk.rv(f32, 256, "contig"), tk.rv(f32, 512, "contig"), 32), "lengths differ"),
    (lambda: tk.rotate_half(tk.rv(f32, 256, "contig"), tk.rv(f32, 256, "contig"), 24, 64),
     "rotary_dim 24 must be a multiple of 16 up to head_dim 64"),
    (lambda: tk.rotate_half(tk.rv(f32, 256, "contig"), tk.rv(f32, 256, "contig"), 12, 64, interleaved=True),
     "rotary_dim 12 must be a multiple of 8"),
    (lambda: tk.rotate_half(tk.rv(f32, 256, "contig"), tk.rv(f32, 256, "contig"), 128, 64), "up to head_dim 64"),
    (lambda: tk.rotate_half(tk.rv(f32, 256, "contig"), tk.rv(f32, 256, "contig"), 16, 20),
     "head_dim 20 must be a multiple of 8"),
    (lambda: tk.rotate_half(tk.rv(f32, 1024, "contig"), tk.rv(f32, 1024, "contig"), 1024), "over 512"),
])
def test_bad_operands_are_refused_on_the_users_line(body, match):
    @tk.kernel(warps=1)
    def bad(x: tk.gl[f32, 16, 16]):
        body()
    with pytest.raises(tk.TraceError, match=match) as e:
        bad.source(torch.empty(16, 16))
    assert "test_rotate_half.py:" in str(e.value)


def test_bad_tables_are_refused_on_the_users_line():
    @tk.kernel(warps=1)
    def dynamic(t: tk.gl[f32, "S", "A"]):
        tk.load_rotary_table(tk.rv(f32, 256, "contig"), t, 0)

    @tk.kernel(warps=1)
    def not_contig(t: tk.gl[f32, "S", 32]):
        tk.load_rotary_table(tk.rv(f32, 32, "naive"), t, 0)

    @tk.kernel(warps=1)
    def odd(t: tk.gl[f32, "S", 12]):
        tk.load_rotary_table(tk.rv(f32, 256, "contig"), t, 0, 64)
    for kernel, match in ((dynamic, "needs static columns"), (not_contig, "must be a contig vector"),
                          (odd, r"rotary_dim 24 \(twice .* 12 columns\) must be a multiple of 16")):
        with pytest.raises(tk.TraceError, match=match) as e:
            kernel.source(torch.empty(4, 12 if kernel is odd else 32))
        assert "test_rotate_half.py:" in str(e.value)


def test_debug_mode_checks_the_tables_row_before_reading_it(monkeypatch):
    monkeypatch.setenv("TKPY_DEBUG", "1")
    kernel = table_kernel(256, 128, 64, False, "f32", "f32", 1.0)
    args = torch.empty(5, 64), torch.empty(5, 256)
    src = kernel.source(*args)
    assert ("tk::debug::check_tile(t, 0, 0, block_x, 0, 1, 64, false, 0);\n"
            "    tk::load_rotary_table<128, 128, false>(v, t.at(0, 0, block_x, 0), 1.0f);") in src
    assert "the row of 64 angles of `t`" in src
    res = kernel.resources(*args)
    assert res.found and res.spill_stores == 0


@gpu_util.on_gpu
def test_on_the_gpu():
    for case in VECTOR_CASES:
        for conversion in CONVERSIONS:
            _run(vector_kernel, ROWS, case, conversion, device="cuda")
    for case in TILE_CASES:
        for conversion in CONVERSIONS:
            _run(tile_kernel, 16, case, conversion, device="cuda")
    for case in TABLE_CASES:
        for table, dst in (("f32", "f32"), ("bf16", "bf16"), ("bf16", "f32")):
            _table_run(case, table, dst, device="cuda")
