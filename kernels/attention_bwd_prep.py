"""The small kernels around attention's backward: prep_kernel (before the main kernel: the row vectors it reads, and
the zeroed dQ workspace) and convert_kernel (after it: dQ in the input dtype)."""
from __future__ import annotations

import functools
import math

import tkpy as tk
from tkpy import bf16, f32

from .tensor_layout import cdiv

LOG2E = 1.4426950408889634
ROWS = 64                           # rows per block: 16 per warp


def chunk_cols(d: int) -> int:
    """Columns of each warp's register tiles: d in chunks of at most 64 (a 16 x 64 fp32 tile is 32 registers)."""
    return next(cols for cols in (64, 48, 32, 16) if d % cols == 0)


@functools.cache
def prep_kernel(d: int, dtype, zero_dq: bool):
    """For each query row i of each (batch, head): L[i] = lse[i] * log2(e) (+inf past N, where P is then 0) and
    D[i] = sum_c dO[i, c] * O[i, c] in fp32 (0 past N); with zero_dq, also the fp32 workspace DQ zeroed (its rows
    NQ, N rounded up). A warp per 16 rows, on prep_grid."""
    cols = chunk_cols(d)
    name = f"attention_bwd_prep_d{d}" + ("" if dtype == bf16 else f"_{dtype.name}") + ("" if zero_dq else "_nodq")

    def body(O, DO, LSE, L, D, DQ=None):
        row = tk.let(tk.block_idx.x * 4 + tk.warp_id(), "row")                 # 16-row units
        b, h = tk.block_idx.y // O.depth, tk.block_idx.y % O.depth
        out, grad = tk.rt(f32, 16, cols, name="out"), tk.rt(f32, 16, cols, name="grad")
        delta, lse = tk.col_vec(out, name="delta"), tk.col_vec(out, name="lse")
        for c in range(d // cols):
            tk.load(out, O, (b, h, row, c), masked=True)
            tk.load(grad, DO, (b, h, row, c), masked=True)
            tk.mul(out, out, grad)
            tk.row_sum(delta, out, *([delta] if c else []))
        tk.store(D, delta, (b, h, row))
        tk.load(lse, LSE, (b, h, row), fill=math.inf)
        tk.mul(lse, lse, LOG2E)
        tk.store(L, lse, (b, h, row))
        if DQ is not None:
            tk.zero(out)
            for c in range(d // cols):
                tk.store(DQ, out, (b, h, row, c))

    rows, vector = tk.gl[dtype, "B", "H", "N", d], tk.gl[f32, "B", "H", "NQ"]
    if zero_dq:
        @tk.kernel(warps=4, name=name)
        def prep(O: rows, DO: rows, LSE: tk.gl[f32, "B", "H", "N"], L: vector, D: vector,
                 DQ: tk.gl[f32, "B", "H", "NQ", d]):
            body(O, DO, LSE, L, D, DQ)
    else:
        @tk.kernel(warps=4, name=name)
        def prep(O: rows, DO: rows, LSE: tk.gl[f32, "B", "H", "N"], L: vector, D: vector):
            body(O, DO, LSE, L, D)
    return prep


@functools.cache
def convert_kernel(d: int, dtype):
    """dQ = DQ * scale in the input dtype, DQ the main kernel's fp32 workspace: a warp per 16 rows, on prep_grid
    (rows past N are not stored)."""
    cols = chunk_cols(d)

    @tk.kernel(warps=4, name=f"attention_bwd_dq_convert_d{d}" + ("" if dtype == bf16 else f"_{dtype.name}"))
    def convert(DQ: tk.gl[f32, "B", "H", "NQ", d], dQ: tk.gl[dtype, "B", "H", "N", d], scale: float):
        row = tk.let(tk.block_idx.x * 4 + tk.warp_id(), "row")
        b, h = tk.block_idx.y // dQ.depth, tk.block_idx.y % dQ.depth
        part = tk.rt(f32, 16, cols)
        for c in range(d // cols):
            tk.load(part, DQ, (b, h, row, c))
            tk.mul(part, part, scale)
            tk.store(dQ, part, (b, h, row, c), masked=True)
    return convert


def prep_grid(b: int, h: int, nq: int) -> tuple[int, int]:
    """The blocks of prep_kernel and convert_kernel: ROWS-row units of the padded rows nq, b x h heads."""
    return cdiv(nq, ROWS), b * h

