"""The GEMMs with communication fused in (kernels/gemm_kernel.py's GEMM, its steps shared: matmul_steps), for
tensor-parallel linear layers over a group of GPUs of one host (kernels/comm.py: the protocol of the flags):

- all_gather_matmul_template: C = [A_0; A_1; ...] @ B, the rows of every rank's A gathered by the producer itself.
  A task's 128 rows of C come from one rank's A (a rank's rows are a multiple of 128): at the task's first step the
  producer waits until that rank has signalled READY, then TMA-loads its A tiles from that rank's buffer (peer
  memory over NVLink; this rank's own from local memory). Each block signals READY to every rank at its first task
  (its rank's A was in place before the kernel started). No gathered copy of A is made.
- matmul_reduce_scatter_template: this rank's partial product A @ B (A: its K columns, B: its K rows), each 128-row
  tile of it stored by the storer warp straight into the slot of this rank in the buffer of the rank that owns those
  rows (TMA stores to peer memory); the owner sums its slots afterwards (comm_kernels.sum_kernel), once every rank
  has signalled that its stores are in.
"""
from __future__ import annotations

import functools

import tkpy as tk

from .comm import READY
from .comm_kernels import flags_type, signal_all
from .gemm_config import MatmulConfig
from .gemm_kernel import lcsf_options, matmul_steps
from .gemm_policy import BM
from .tensor_layout import cdiv


@functools.cache
def all_gather_matmul_template(config: MatmulConfig, world: int):
    """C (world x Ms rows) = the ranks' A (Ms rows each, Ms a multiple of BM) gathered in rank order, @ B."""
    dtype, out, b_transposed, bn, pieces = config.dtype, config.out, config.b_transposed, config.block_n, config.pieces

    @tk.lcsf(**lcsf_options(config, f"all_gather_{config.name}_w{world}"))
    class AllGatherMatmul(matmul_steps(config)):
        A: tk.pgl[tk.gl[dtype, "Ms", "K"], world]
        B: tk.gl[dtype, "N", "K"] if b_transposed else tk.gl[dtype, "K", "N"]
        C: tk.gl[out, "M", "N"]
        Flags: flags_type(world)
        epoch: int

        def tasks(self, g):
            return cdiv(g.C.rows, BM), cdiv(g.C.cols, bn)

        def load(self, g, task, inp, k, arrived):
            tiles = g.A.rows // BM                     # the row tiles of a rank's A
            owner = task.row // tiles
            with tk.if_(k == 0):
                with tk.if_(task.index < tk.grid_dim.x):   # the block's first task: this rank's A is in place
                    signal_all(g.Flags, READY, g.epoch)
                tk.wait_signal(g.Flags.local, (READY, owner), g.epoch)
            tk.tma.expect(arrived, inp)
            for i in range(2):
                tk.tma.load_async(inp.a[i], g.A[owner], ((task.row % tiles) * 2 + i, k), arrived)
            self.load_b(g, task, inp, k, arrived)

        def store(self, g, task, stage, piece):
            for i in range(2):
                tk.tma.store_async(g.C, stage.c[i], (task.row * 2 + i, task.col * pieces + piece))
    return AllGatherMatmul


@functools.cache
def matmul_reduce_scatter_template(config: MatmulConfig, world: int):
    """This rank's A (M x K) @ B, its rows r * Ms .. (r + 1) * Ms - 1 stored into rank r's P at depth (slot) this
    rank (Ms = M / world, a multiple of BM)."""
    dtype, out, b_transposed, bn, pieces = config.dtype, config.out, config.b_transposed, config.block_n, config.pieces

    @tk.lcsf(**lcsf_options(config, f"{config.name}_reduce_scatter_w{world}"))
    class MatmulReduceScatter(matmul_steps(config)):
        A: tk.gl[dtype, "M", "K"]
        B: tk.gl[dtype, "N", "K"] if b_transposed else tk.gl[dtype, "K", "N"]
        P: tk.pgl[tk.gl[out, world, "Ms", "N"], world]

        def tasks(self, g):
            return cdiv(g.A.rows, BM), cdiv(g.P.cols, bn)

        def store(self, g, task, stage, piece):
            tiles = g.P.rows // BM                     # the row tiles a rank owns
            owner = task.row // tiles
            for i in range(2):
                tk.tma.store_async(g.P[owner], stage.c[i], (g.P.rank, (task.row % tiles) * 2 + i,
                                                            task.col * pieces + piece))
    return MatmulReduceScatter
