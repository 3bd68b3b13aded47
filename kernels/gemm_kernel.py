"""The GEMM kernels on Hopper's LCSF template: C = epilogue(A @ B) in bf16/fp16 (matmul_template) and
C = column scales * (A @ B) in fp8 (fp8_matmul_template), each the template of its config (gemm_config), cached.
Which config matmul() runs for a shape is gemm_policy's choice; the launch is kernels/gemm.py's (gemm_fp8.py's).

Each task is a BM x block_n tile of C: two consumer warpgroups each own 64 rows and accumulate in fp32 registers
with wgmma, while a producer warpgroup streams K slices of A and B (64 wide, or 128 in fp8: one 128-byte swizzle
panel) with TMA through a ring of stages. Blocks are persistent (one per SM) and walk the tiles in L2-friendly
groups. The epilogue goes through shared memory: the consumers apply scale, bias and activation (fp8: the column
scales) in registers piece by piece, copy each piece to a ring of output stages in 128-byte-wide column pieces
(stmatrix) and go on with the next tile while a storer warp TMA-stores the pieces, so the stores overlap the next
tile's main loop. TMA zero-fills the parts of boxes past the tensors (K tails add zeros, edge tiles compute on
zeros) and clips the stores past C's last row or column.

fp8 wgmma reads both operands K-major, so the fp8 kernel takes B as (N, K) tiles; the 16-bit kernel takes either
layout (b_transposed: (N, K), multiplied by B^T tiles).
"""
from __future__ import annotations

import functools

import tkpy as tk
from tkpy import f32
from tkpy.templates import shared

from .gemm_config import MatmulConfig, MatmulFP8Config
from .gemm_epilogue import apply_epilogue, load_bias
from .gemm_policy import BM, OUTPUT_STAGES
from .tensor_layout import cdiv

BK = 64                             # K per step of the 16-bit kernel
FP8_BK = 128                        # ... and of the fp8 kernel


def matmul_steps(config: MatmulConfig) -> type:
    """What the GEMM kernel of `config` and the fused communication GEMMs (kernels/comm_gemm.py) share: the input and
    output stages, the K steps, the accumulator, the main loop and the epilogue (iters, setup, start, compute,
    finish) and the loads of a step (load, its B tile alone: load_b); each kernel's class adds its parameters,
    tasks and store (and another load where its A comes from elsewhere)."""
    dtype, out, b_transposed, bias = config.dtype, config.out, config.b_transposed, config.bias
    scale, activation, bn = config.scale, config.activation, config.block_n
    piece_cols, pieces = config.piece_cols, config.pieces

    class MatmulSteps:
        inputs = dict(a=shared(dtype, BM // 2, BK, count=2),
                      b=shared(dtype, bn, BK) if b_transposed else shared(dtype, BK, bn))
        outputs = dict(c=shared(out, BM // 2, piece_cols, count=2))    # a piece of each consumer's 64 rows
        output_pieces = pieces

        def iters(self, g):
            return cdiv(g.A.cols, BK)

        def load(self, g, task, inp, k, arrived):
            k = task.k0 + k                  # the K step (a split-K task starts at its share's first)
            tk.tma.expect(arrived, inp)
            for i in range(2):
                tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
            self.load_b(g, task, inp, k, arrived)

        def load_b(self, g, task, inp, k, arrived):
            tk.tma.load_async(inp.b, g.B, (task.col, k) if b_transposed else (k, task.col), arrived)

        def setup(self, st):
            st.acc = tk.rt(f32, 16, bn)
            if bias is not None:             # the bias of the columns the epilogue works on at a time
                st.bias = tk.rv(f32, piece_cols, "align")

        def start(self, st, task):
            tk.zero(st.acc)

        def compute(self, st, inp, k):
            mma = tk.warpgroup.mma_ABt if b_transposed else tk.warpgroup.mma_AB
            mma(st.acc, inp.a[tk.warpgroup.id()], inp.b)

        def finish(self, g, st, task, stage, piece):
            """The epilogue piece by piece, so that only one piece's bias values are live next to the
            accumulator; the next piece's are loaded as soon as this piece's are used."""
            acc = st.acc[:, piece * piece_cols:(piece + 1) * piece_cols]
            if bias is not None and piece == 0:
                load_bias(g, st.bias, task.col * pieces)
            apply_epilogue(g, acc, getattr(st, "bias", None), scale, activation)
            tk.warpgroup.store(stage.c[tk.warpgroup.id()], acc)
            if bias is not None and piece + 1 < pieces:
                load_bias(g, st.bias, task.col * pieces + piece + 1)
    return MatmulSteps


def lcsf_options(config: MatmulConfig, name: str | None = None) -> dict:
    """The LCSF template's options for the GEMMs of `config` (`name`: the kernel's, config.name by default)."""
    return dict(consumer_warpgroups=2, stages=config.stages, output_stages=config.output_stages, persistent=True,
                name=name or config.name,
                scheduler=tk.templates.SplitK(lambda g: g.splits) if config.split else None)


@functools.cache
def matmul_template(config: MatmulConfig):
    """The GEMM kernel of `config` (gemm_config.MatmulConfig says what each option does)."""
    dtype, out, b_transposed, bias = config.dtype, config.out, config.b_transposed, config.bias
    scale, bn, split, pieces = config.scale, config.block_n, config.split, config.pieces

    @tk.lcsf(**lcsf_options(config))
    class Matmul(matmul_steps(config)):
        A: tk.gl[dtype, "M", "K"]
        B: tk.gl[dtype, "N", "K"] if b_transposed else tk.gl[dtype, "K", "N"]
        if split:
            C: tk.gl[f32, "S", "M", "N"]
            splits: int
        else:
            C: tk.gl[out, "M", "N"]
        if bias is not None:
            Bias: tk.gl[bias, "N"]
        if scale:
            alpha: float

        def tasks(self, g):
            return cdiv(g.C.rows, BM), cdiv(g.C.cols, bn)

        def store(self, g, task, stage, piece):
            col = task.col * pieces + piece
            for i in range(2):
                if split == "ordered":
                    tk.tma.store_async(g.C, stage.c[i], (task.split, task.row * 2 + i, col))
                elif split == "atomic":
                    tk.tma.store_add_async(g.C, stage.c[i], (0, task.row * 2 + i, col))
                else:
                    tk.tma.store_async(g.C, stage.c[i], (task.row * 2 + i, col))
    return Matmul


Matmul = matmul_template(MatmulConfig())           # the plain bf16 GEMM (kernel name "matmul")


@functools.cache
def fp8_matmul_template(config: MatmulFP8Config):
    """The fp8 GEMM kernel of `config`: C = Scale * (A @ B^T) with B as (N, K) tiles, Scale the (N,) column scales
    (gemm_fp8.column_scales), m64nNk32 wgmma (e4m3/e5m2, one instruction per 32 of K)."""
    a_dtype, b_dtype, out, bn = config.a_dtype, config.b_dtype, config.out, config.block_n
    piece_cols, pieces = config.piece_cols, config.pieces

    @tk.lcsf(consumer_warpgroups=2, stages=config.stages, output_stages=OUTPUT_STAGES, persistent=True,
             name=config.name)
    class MatmulFP8:
        A: tk.gl[a_dtype, "M", "K"]
        B: tk.gl[b_dtype, "N", "K"]            # B^T, row-major: both operands K-major
        C: tk.gl[out, "M", "N"]
        Scale: tk.gl[f32, "N"]                 # scale_a * scale_b per column of C
        inputs = dict(a=shared(a_dtype, BM // 2, FP8_BK, count=2), b=shared(b_dtype, bn, FP8_BK))
        outputs = dict(c=shared(out, BM // 2, piece_cols, count=2))
        output_pieces = pieces

        def tasks(self, g):
            return cdiv(g.C.rows, BM), cdiv(g.C.cols, bn)

        def iters(self, g):
            return cdiv(g.A.cols, FP8_BK)

        def load(self, g, task, inp, k, arrived):
            tk.tma.expect(arrived, inp)
            for i in range(2):
                tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
            tk.tma.load_async(inp.b, g.B, (task.col, k), arrived)

        def setup(self, st):
            st.acc = tk.rt(f32, 16, bn)
            st.scale = tk.rv(f32, piece_cols, "align")     # the column scales of one output piece

        def start(self, st, task):
            tk.zero(st.acc)

        def compute(self, st, inp, k):
            tk.warpgroup.mma_ABt(st.acc, inp.a[tk.warpgroup.id()], inp.b)

        def finish(self, g, st, task, stage, piece):
            acc = st.acc[:, piece * piece_cols:(piece + 1) * piece_cols]
            tk.load(st.scale, g.Scale, (0, task.col * pieces + piece), masked=True)
            tk.mul_col(acc, acc, st.scale)
            tk.warpgroup.store(stage.c[tk.warpgroup.id()], acc)

        def store(self, g, task, stage, piece):
            for i in range(2):
                tk.tma.store_async(g.C, stage.c[i], (task.row * 2 + i, task.col * pieces + piece))
    return MatmulFP8
