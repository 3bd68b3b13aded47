"""C = A @ B with Hopper's async machinery written out by hand: TMA loads into a 4-stage ring of
shared tiles, mbarrier semaphores, one producer warpgroup and two consumer warpgroups doing wgmma
(setmaxnreg moves registers from the producer to the consumers). No block template: this is what
tkpy's LCF template will generate for you.

Each block computes a 128 x 256 tile of C (64 rows per consumer warpgroup).
"""
from __future__ import annotations

import torch

import tkpy as tk
from tkpy import bf16, f32

BM, BN, BK = 128, 256, 64
STAGES = 4
CONSUMERS = 2


@tk.kernel(warps=4 * (1 + CONSUMERS))
def gemm_ws(A: tk.gl[bf16, "M", "K"], B: tk.gl[bf16, "K", "N"], C: tk.gl[bf16, "M", "N"]):
    a = tk.st(bf16, BM // CONSUMERS, BK, count=STAGES * CONSUMERS)   # stage s, consumer c: a[s * 2 + c]
    b = tk.st(bf16, BK, BN, count=STAGES)
    full = tk.semaphore(STAGES)      # stage loaded: 1 arrival (the expect) + the TMA bytes
    empty = tk.semaphore(STAGES)     # stage consumed: one arrival per consumer warp
    with tk.if_(tk.warp_id() == 0):
        for s in range(STAGES):
            tk.init_semaphore(full[s], 1)
            tk.init_semaphore(empty[s], 4 * CONSUMERS)
    tk.sync()

    row, col = tk.block_idx.y, tk.block_idx.x
    k_tiles = A.cols // BK
    wg = tk.warpgroup_id()
    with tk.if_(wg == 0):                                    # producer
        tk.producer_registers(40)
        with tk.if_(tk.warp_id() == 0):
            for k in tk.range(k_tiles):
                s = k % STAGES
                with tk.if_(k >= STAGES):
                    tk.wait(empty[s], (k // STAGES + 1) % 2)  # its previous round was consumed
                tk.tma.expect(full[s], a[s * 2], a[s * 2 + 1], b[s])
                for c in range(CONSUMERS):
                    tk.tma.load_async(a[s * 2 + c], A, (row * CONSUMERS + c, k), full[s])
                tk.tma.load_async(b[s], B, (k, col), full[s])
    with tk.else_():                                         # consumers
        tk.consumer_registers(232)
        acc = tk.rt(f32, 16, BN)                              # this warp's 16 rows of the warpgroup's 64
        tk.zero(acc)
        c = wg - 1
        for k in tk.range(k_tiles):
            s = k % STAGES
            tk.wait(full[s], (k // STAGES) % 2)
            tk.warpgroup.mma_AB(acc, a[s * 2 + c], b[s])
            tk.warpgroup.mma_async_wait()
            tk.arrive(empty[s])
        tk.warpgroup.store(C, acc, (row * CONSUMERS + c, col))


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """bf16 a @ b (fp32 accumulation) for M a multiple of 128, N of 256 and K of 64."""
    (m, k), n = a.shape, b.shape[1]
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or b.shape[0] != k:
        raise ValueError(f"expects bf16 (M, K) @ (K, N); got {a.dtype} {tuple(a.shape)} @ {b.dtype} {tuple(b.shape)}")
    if m % BM or n % BN or k % BK:
        raise ValueError(f"needs M % {BM} == 0, N % {BN} == 0, K % {BK} == 0; got M={m} N={n} K={k}")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device) if out is None else out
    gemm_ws[(n // BN, m // BM)](a, b, c)
    return c
