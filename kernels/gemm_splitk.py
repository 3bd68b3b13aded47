"""Split-K for kernels/gemm.py's matmul: products with few output tiles next to the SMs.

M = 128 against a 4096 x 8192 weight has 16 tiles of 128 x 256 (64 of 128 x 64) for 132 SMs, so
much of the GPU would idle. (Against an 8192 x 8192 one, 128 tiles of 128 x 64 keep the SMs busy
without splitting.) With split-K each tile's K steps are shared by S tasks (the template's
`schedule.SplitK`), which write fp32 partial sums through TMA into a workspace; a second kernel
(`reduce_kernel`) sums the partials and applies the epilogue (scale, bias, activation, the output dtype).

Determinism:
- "ordered" (the default, `deterministic=True`): split s stores its partial at depth s of an (S, M, N)
  fp32 workspace and the reduction adds them in split order, so a shape gives the same bits on every
  run for a given S (a different S rounds differently).
- "atomic" (`deterministic=False`): the splits add their partials into one zero-filled (M, N) workspace
  with TMA reductions (`tk.tma.store_add_async`, fp32 adds in L2): S times less workspace traffic, but
  the order of the additions, and so the last bits, vary from run to run.

matmul splits only when asked (`split_k=S`, in gemm_policy.SPLIT_BLOCK_N-wide tiles unless `block_n` says
otherwise): a cost model that chose S by itself measured slower than no split at every shape it split on the H200
(gemm_policy.SLOWER_VARIANTS) and left the code, until the reduction is fused into the product.
"""
from __future__ import annotations

import functools
import inspect

import torch

import tkpy as tk
from tkpy import f32
from tkpy.templates import Namespace

from .gemm_epilogue import apply_epilogue, load_bias
from .tensor_layout import cdiv

REDUCE_COLS = 64                    # columns of a warp's 16-row tile in the reduction
LOADS_AHEAD = 4                     # partials a warp of the reduction loads before adding them


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
            load_bias(g, st.bias, col)
        for first in range(1, splits, LOADS_AHEAD):      # up to LOADS_AHEAD partials in flight, added in order
            batch = list(zip(partials, range(first, min(first + LOADS_AHEAD, splits))))
            for partial, s in batch:
                tk.load(partial, g.W, (s, row, col), masked=True)
            for partial, _ in batch:
                tk.add(st.acc, st.acc, partial)
        apply_epilogue(g, st.acc, getattr(st, "bias", None), scale, activation)
        tk.store(g.C, st.acc, (row, col), masked=True)

    body.__signature__ = inspect.Signature([inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD,
                                                              annotation=a) for n, a in params.items()])
    tags = [f"s{splits}", out.name, bias is not None and f"bias_{bias.name}", scale and "scale", activation]
    return tk.kernel(warps=4, name="splitk_reduce_" + "_".join(t for t in tags if t))(body)


class SplitPlan:
    """A split-K matmul for one shape and combination: the product (`template`, kernels/gemm_kernel.py's
    matmul_template of a config with split="ordered" or "atomic") into a workspace, then the reduction
    (reduce_kernel)."""

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

    def compile(self, a, b, c, extras: tuple) -> None:
        """Both kernels compiled for these operands ahead of a launch (the workspace a meta tensor: shapes only)."""
        w = self.workspace("meta")
        self.template.kernel.compile(a, b, w, self.splits)
        self.reduce.compile(w, c, *extras)

    def __call__(self, a, b, c, extras: tuple) -> None:
        w = self.workspace(a.device)
        args = (a, b, w, self.splits)
        if self.grid is None:
            self.grid = self.template.grid(*args)
        self.template.kernel[self.grid](*args)
        self.reduce[self.reduce_grid](w, c, *extras)
