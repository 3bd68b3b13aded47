"""The combine kernel of split-K attention (flash-decoding): kernels/attention_kernel.py's split_k=True tasks each
write O normalized over their own keys and its log-sum-exp into fp32 workspaces, which combine_kernel merges."""
from __future__ import annotations

import contextlib
import functools

import torch

import tkpy as tk
from tkpy import bf16, f32

from .attention_config import DTYPES
from .attention_kernel import FLT_MAX, LOG2E
from .tensor_layout import cdiv

COMBINE_COLS = 16                   # columns of O per warp of combine_kernel


@functools.cache
def combine_kernel(d: int, dtype, splits: int):
    """Merges split-K results (flash-decoding): for each query row, the `splits` partial outputs O_s (normalized
    over their own keys) and log-sum-exps l_s become O = sum_s e^(l_s - l) O_s and l = ln sum_s e^(l_s) (rows
    that see no key in any split: O = 0, l = -inf). Launched on combine_grid: a warp per 16 rows and COMBINE_COLS
    columns, which loads every split's slice before it adds any (16 splits of 16 x 16 fp32 are 128 registers a
    thread), so that its time is one round trip to L2 and not one per split; rows past N are
    skipped."""
    @tk.kernel(warps=4, name=f"attention_combine_d{d}" + ("" if dtype == bf16 else f"_{dtype.name}") + f"_s{splits}")
    def combine(Ow: tk.gl[f32, "SB", "H", "N", d], Lw: tk.gl[f32, "SB", "H", "NW"],
                O: tk.gl[dtype, "B", "H", "N", d], L: tk.gl[f32, "B", "H", "NL"]):
        col = tk.let(tk.block_idx.z * 4 + tk.warp_id(), "col")                  # COMBINE_COLS-column units
        units = d // COMBINE_COLS                                           # (the last block's warps may pass d)
        with tk.if_(col < units) if units % 4 else contextlib.nullcontext():
            out = tk.rt(f32, 16, COMBINE_COLS)
            parts = [tk.rt(f32, 16, COMBINE_COLS, name="part") for _ in range(splits)]
            weights = [tk.col_vec(out, name="weight") for _ in range(splits)]
            top, total, denominator = tk.col_vec(out), tk.col_vec(out), tk.col_vec(out)
            row = tk.block_idx.x                                                # 16-row units
            b, h = tk.block_idx.y // O.depth, tk.block_idx.y % O.depth
            for s, (weight, part) in enumerate(zip(weights, parts)):
                tk.load(weight, Lw, (s * O.batch + b, h, row))
                tk.load(part, Ow, (s * O.batch + b, h, row, col), masked=True)
            tk.fill(top, -FLT_MAX)                  # (so a row that sees no key weighs its splits e^-inf = 0)
            for weight in weights:
                tk.max(top, top, weight)
            tk.zero(total)
            for weight in weights:                  # each split's log-sum-exp becomes its weight e^(l_s - max)
                tk.map(weight, lambda l, m: tk.exp2((l - m) * LOG2E), weight, top)
                tk.add(total, total, weight)
            tk.max(denominator, total, 1e-30)
            tk.zero(out)
            for weight, part in zip(weights, parts):
                tk.mul_row(part, part, weight)
                tk.add(out, out, part)
            tk.div_row(out, out, denominator)
            tk.store(O, out, (b, h, row, col), masked=True)
            with tk.if_(col == 0):
                tk.map(total, lambda t, m: m + tk.log2(t) * (1.0 / LOG2E), total, top)
                tk.store(L, total, (b, h, row), masked=True)
    return combine


def combine_grid(b: int, h: int, n: int, d: int) -> tuple[int, int, int]:
    """combine_kernel's blocks: 16-row units of n, b x h heads, and d over 4 warps of COMBINE_COLS columns."""
    return cdiv(n, 16), b * h, cdiv(d, 4 * COMBINE_COLS)


def _combine(q, o, lse, args) -> None:
    """Merge a split-K kernel's workspaces (its arguments 3 and 4; its last, the splits) into o and lse (None: into
    a scratch buffer)."""
    b, h, n, d = q.shape
    if lse is None:                             # (rows padded to a 16-byte stride)
        lse = torch.empty(b, h, cdiv(n, 4) * 4, dtype=torch.float32, device=q.device)
    combine_kernel(d, DTYPES[q.dtype], args[-1])[combine_grid(b, h, n, d)](args[3], args[4], o, lse)
