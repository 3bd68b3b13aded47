"""C = A @ B on Hopper through tkpy's LCF block template: the kernel is just load, compute, finish.

Each task is a 128 x 256 tile of C: two consumer warpgroups each own 64 rows and accumulate in fp32
registers with wgmma, while a producer warpgroup streams 64-wide K slices of A and B with TMA
through a 4-stage ring. Blocks are persistent (one per SM) and walk the tiles in L2-friendly groups.
`matmul(..., cluster=2)` runs blocks in clusters of two that take vertically adjacent tiles and
share B: each loads half of B's slice and multicasts it to both, halving B's L2 traffic. On the H200
it measured slower than the plain version (see benchmarks/RESULTS.md), so it is not the default.
"""
from __future__ import annotations

import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.templates import shared

BM, BN, BK = 128, 256, 64
HALF = BN // 2


def _tasks(self, g):
    return (g.C.rows + BM - 1) // BM, (g.C.cols + BN - 1) // BN


def _iters(self, g):
    return (g.A.cols + BK - 1) // BK


@tk.lcf(consumer_warpgroups=2, stages=4, persistent=True, name="matmul")
class Matmul:
    A: tk.gl[bf16, "M", "K"]
    B: tk.gl[bf16, "K", "N"]
    C: tk.gl[bf16, "M", "N"]
    inputs = dict(a=shared(bf16, BM // 2, BK, count=2), b=shared(bf16, BK, BN))
    tasks, iters = _tasks, _iters

    def load(self, g, task, inp, k, arrived):
        tk.tma.expect(arrived, inp)
        for i in range(2):
            tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
        tk.tma.load_async(inp.b, g.B, (k, task.col), arrived)

    def setup(self, st):
        st.acc = tk.rt(f32, 16, BN)

    def start(self, st, task):
        tk.zero(st.acc)

    def compute(self, st, inp, k):
        tk.warpgroup.mma_AB(st.acc, inp.a[tk.warpgroup.id()], inp.b)

    def finish(self, g, st, task):
        tk.warpgroup.store(g.C, st.acc, (task.row * 2 + tk.warpgroup.id(), task.col))


@tk.lcf(consumer_warpgroups=2, stages=4, persistent=True, cluster=2, name="matmul_cluster2")
class MatmulCluster2:
    """Clusters of two blocks on vertically adjacent tiles; B's slice is split in halves, each block
    loads one and multicasts it to both."""

    A: tk.gl[bf16, "M", "K"]
    B: tk.gl[bf16, "K", "N"]
    C: tk.gl[bf16, "M", "N"]
    inputs = dict(a=shared(bf16, BM // 2, BK, count=2), b=shared(bf16, BK, HALF, count=2))

    tasks, iters = _tasks, _iters

    def load(self, g, task, inp, k, arrived):
        tk.tma.expect(arrived, inp)
        for i in range(2):
            tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)
        tk.tma.load_async(inp.b[task.rank], g.B, (k, task.col * 2 + task.rank), arrived, multicast=0b11)

    def setup(self, st):
        st.acc_left = tk.rt(f32, 16, HALF)
        st.acc_right = tk.rt(f32, 16, HALF)

    def start(self, st, task):
        tk.zero(st.acc_left)
        tk.zero(st.acc_right)

    def compute(self, st, inp, k):
        a = inp.a[tk.warpgroup.id()]
        tk.warpgroup.mma_AB(st.acc_left, a, inp.b[0])
        tk.warpgroup.mma_AB(st.acc_right, a, inp.b[1])

    def finish(self, g, st, task):
        row = task.row * 2 + tk.warpgroup.id()
        tk.warpgroup.store(g.C, st.acc_left, (row, task.col * 2))
        tk.warpgroup.store(g.C, st.acc_right, (row, task.col * 2 + 1))


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None, cluster: int = 1) -> torch.Tensor:
    """bf16 a @ b with fp32 accumulation (M a multiple of 128, N of 256 and K of 64 for now;
    with cluster=2, M a multiple of 256)."""
    (m, k), n = a.shape, b.shape[1]
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or b.shape[0] != k:
        raise ValueError(f"expects bf16 (M, K) @ (K, N); got {a.dtype} {tuple(a.shape)} @ {b.dtype} {tuple(b.shape)}")
    if m % BM or n % BN or k % BK:
        raise NotImplementedError(f"tail tiles are not handled yet: needs M % {BM}, N % {BN}, K % {BK} == 0; "
                                  f"got M={m} N={n} K={k}")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    if cluster not in (1, 2):
        raise ValueError(f"cluster must be 1 or 2, got {cluster}")
    (MatmulCluster2 if cluster == 2 else Matmul)(a, b, c)
    return c
