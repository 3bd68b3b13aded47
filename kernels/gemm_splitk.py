"""Split-K for kernels/gemm.py's matmul: products with few output tiles next to the SMs.

M = 128 against a 4096 x 8192 weight has 16 tiles of 128 x 256 (64 of 128 x 64) for 132 SMs, so
much of the GPU would idle. (Against an 8192 x 8192 one, 128 tiles of 128 x 64 keep the SMs busy
without splitting.) With split-K each tile's K steps are shared by S tasks (the template's
`schedule.SplitK`), which write fp32 partial sums through TMA into a workspace; a second kernel
(`reduce_kernel`) sums the partials and applies the epilogue (scale, bias, activation, the output dtype).

Determinism:
- "ordered" (the default, `deterministic=True`): split s stores its partial at depth s of an (S, M, N)
  fp32 workspace and the reduction adds them in split order, so a shape gives the same bits on every
  run (S depends only on the shape and the GPU's SM count; a different S rounds differently).
- "atomic" (`deterministic=False`): the splits add their partials into one zero-filled (M, N) workspace
  with TMA reductions (`tk.tma.store_add_async`, fp32 adds in L2): S times less workspace traffic, but
  the order of the additions, and so the last bits, vary from run to run.

`plan` picks the tile width (256, 128 or 64) and S from a cost model of the product (waves of
128 x BN x 64 steps over the SMs) plus the workspace traffic and the second launch, and splits only
when that is clearly faster; shapes with enough tiles for half the SMs are never split.
"""
from __future__ import annotations

import functools
import inspect

import torch

import tkpy as tk
from tkpy import f32
from tkpy.templates import Namespace

from .gemm import BK, BM, WIDTHS, _apply_epilogue, _load_bias
from .tensor_layout import cdiv

# One SM's 128 x BN x 64 step: at about 860 TFLOP/s over 132 SMs for BN = 256 and 128; a 64-wide step (24 KB
# of inputs for 1 MFLOP, three times a 256-wide one's bytes per flop) estimated bound by L2 bandwidth.
STEP_US = {256: 0.62, 128: 0.33, 64: 0.25}
WORKSPACE_BYTES_PER_US = 6e6        # partial sums written and read back, mostly in L2
SECOND_LAUNCH_US = 4.0              # the reduction kernel's launch, ramp-up and tail
# Split only if the model says it takes at most this fraction of the time. 0: never split on our own.
# On the H200 (run 19, benchmarks/RESULTS.md) every split measured slower than no split (128 x 8192 x 8192:
# 215 vs 246 TFLOP/s; 256 x 4096 x 8192: 256 vs 271), so automatic splitting stays off until the
# reduction is fused into the product; split_k= still forces it.
SPLIT_GAIN = 0.0
MIN_STEPS = 4                       # K steps (of 64) per split at least
MAX_SPLITS = 16
REDUCE_COLS = 64                    # columns of a warp's 16-row tile in the reduction
LOADS_AHEAD = 4                     # partials a warp of the reduction loads before adding them


def model_us(m: int, n: int, k: int, bn: int, splits: int, sms: int) -> float:
    """Estimated time of the product in 128 x bn tiles with `splits` tasks per tile (and, when split, the
    ordered reduction: S partials written and read, the output written)."""
    units = cdiv(m, BM) * cdiv(n, bn) * splits
    t = cdiv(units, sms) * cdiv(cdiv(k, BK), splits) * STEP_US[bn]
    if splits > 1:
        t += (2 * splits + 1) * m * n * 4 / WORKSPACE_BYTES_PER_US + SECOND_LAUNCH_US
    return t


def plan(m: int, n: int, k: int, sms: int, block_n: int, block_n_forced: bool = False,
         gain: float = SPLIT_GAIN) -> tuple:
    """(tile width, splits) for a product: `block_n` unsplit, unless splitting some tile width's K steps
    takes at most `gain` of the unsplit time by the model. With `block_n_forced` only that width is
    considered."""
    steps = cdiv(k, BK)
    unsplit = model_us(m, n, k, block_n, 1, sms)
    best = (unsplit * gain, block_n, 1)
    for bn in (block_n,) if block_n_forced else WIDTHS:
        if cdiv(m, BM) * cdiv(n, bn) * 2 > sms:          # half the SMs have a tile already
            continue
        for splits in range(2, min(MAX_SPLITS, steps // MIN_STEPS) + 1):
            best = min(best, (model_us(m, n, k, bn, splits, sms), bn, splits))
    return best[1], best[2]


@functools.cache
def reduce_kernel(splits: int, out=tk.bf16, bias=None, scale: bool = False, activation: str | None = None):
    """C = act(scale * (W[0] + W[1] + ... + W[S-1]) + bias), the partials added in split order; each warp
    takes a 16 x REDUCE_COLS tile (bounds-checked at the edges), loading LOADS_AHEAD partials at a time."""
    params = dict(W=tk.gl[f32, splits, "M", "N"], C=tk.gl[out, "M", "N"])
    if bias is not None:
        params["Bias"] = tk.gl[bias, "N"]
    if scale:
        params["alpha"] = float

    def body(*args):
        g = Namespace()
        for name, x in zip(params, args):
            object.__setattr__(g, name, x)
        st = Namespace()
        st.acc = tk.rt(f32, 16, REDUCE_COLS)
        if bias is not None:
            st.bias = tk.row_vec(st.acc)
        row, col = tk.let(tk.block_idx.y * 4 + tk.warp_id(), "row"), tk.block_idx.x
        partials = []
        for i in range(min(LOADS_AHEAD, splits - 1)):
            setattr(st, f"partial{i}", tk.rt(f32, 16, REDUCE_COLS))
            partials.append(getattr(st, f"partial{i}"))
        tk.load(st.acc, g.W, (0, row, col), masked=True)
        if bias is not None:                             # in flight with the partials
            _load_bias(g, st.bias, col)
        for first in range(1, splits, LOADS_AHEAD):      # up to LOADS_AHEAD partials in flight, added in order
            batch = list(zip(partials, range(first, min(first + LOADS_AHEAD, splits))))
            for partial, s in batch:
                tk.load(partial, g.W, (s, row, col), masked=True)
            for partial, _ in batch:
                tk.add(st.acc, st.acc, partial)
        _apply_epilogue(g, st.acc, getattr(st, "bias", None), scale, activation)
        tk.store(g.C, st.acc, (row, col), masked=True)

    body.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                              annotation=a) for n, a in params.items()])
    tags = [f"s{splits}", out.name, bias is not None and f"bias_{bias.name}", scale and "scale", activation]
    return tk.kernel(warps=4, name="splitk_reduce_" + "_".join(t for t in tags if t))(body)


class SplitPlan:
    """A split-K matmul for one shape and combination: the product into a workspace, then the reduction."""

    def __init__(self, template, reduce, splits: int, deterministic: bool, m: int, n: int):
        self.template, self.reduce, self.splits, self.deterministic = template, reduce, splits, deterministic
        self.m, self.n = m, n
        self.grid = None
        self.reduce_grid = (cdiv(n, REDUCE_COLS), cdiv(m, 64))

    def workspace(self, device) -> torch.Tensor:
        """(S, M, N) fp32 partial sums ("ordered"), or (1, M, N) zeros to add into ("atomic"); rows padded
        to 16 bytes for TMA."""
        shape = (self.splits if self.deterministic else 1, self.m, cdiv(self.n, 4) * 4)
        make = torch.empty if self.deterministic else torch.zeros
        return make(shape, dtype=torch.float32, device=device)[:, :, :self.n]

    def __call__(self, a, b, c, extras: tuple) -> None:
        w = self.workspace(a.device)
        args = (a, b, w, self.splits)
        if self.grid is None:
            self.grid = self.template.grid(*args)
        self.template.kernel[self.grid](*args)
        self.reduce[self.reduce_grid](w, c, *extras)


def split_plan(dtype, out, b_transposed: bool, bias, scale: bool, activation, bn: int, splits: int,
               deterministic: bool, m: int, n: int) -> SplitPlan:
    from .gemm import matmul_template

    template = matmul_template(dtype, f32, b_transposed, None, False, None, bn,
                               split="ordered" if deterministic else "atomic")
    reduce = reduce_kernel(splits if deterministic else 1, out, bias, scale, activation)
    return SplitPlan(template, reduce, splits, deterministic, m, n)
