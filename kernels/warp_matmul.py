"""C = A @ B with warp-level mma.sync (bf16/fp16 in, fp32 accumulate): the foundation's tensor-core example.

Each block of 4 warps computes a 64x64 tile of C. Per 32-wide K step the block
stages A's and B's tiles in shared memory; each warp then pulls its 16 rows of A
(ldmatrix) and all of B (ldmatrix.trans into the col layout mma wants) into
registers and accumulates with mma_AB. A Hopper-speed GEMM uses wgmma and TMA
(kernels/gemm_kernel.py); this one shows the warp-level vocabulary.
"""
from __future__ import annotations

import torch

import tkpy as tk
from tkpy import bf16, f32

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32


def _make(dtype):
    @tk.kernel(warps=4, name=f"warp_matmul_{dtype}")
    def warp_matmul(A: tk.gl[dtype, "M", "K"], B: tk.gl[dtype, "K", "N"], C: tk.gl[f32, "M", "N"]):
        w = tk.warp_id()
        a_s = tk.st(dtype, 16, BLOCK_K, count=4)          # one 16-row slice of A per warp
        b_s = tk.st(dtype, BLOCK_K, BLOCK_N)              # B's tile, shared by the block
        a = tk.rt(dtype, 16, BLOCK_K)                     # row layout: the mma A operand
        b = tk.rt(dtype, BLOCK_K, BLOCK_N, layout="col")  # col layout: the mma B operand
        acc = tk.rt(f32, 16, BLOCK_N)
        tk.zero(acc)
        for k in tk.range(A.cols // BLOCK_K):
            tk.load(a_s[w], A, (tk.block_idx.y * 4 + w, k))
            tk.block.load(b_s, B, (k, tk.block_idx.x))
            tk.sync()
            tk.load(a, a_s[w])
            tk.load(b, b_s)
            tk.mma_AB(acc, a, b, acc)
            tk.sync()
        tk.store(C, acc, (tk.block_idx.y * 4 + w, tk.block_idx.x))
    return warp_matmul


warp_matmul_bf16 = _make(bf16)
warp_matmul_fp16 = _make(tk.fp16)


def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 result of a @ b for bf16/fp16 matrices with M, N multiples of 64 and K of 32."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul expects (M, K) @ (K, N), got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != b.dtype or a.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"matmul expects two bf16 or two fp16 matrices, got {a.dtype} and {b.dtype}")
    (m, k), n = a.shape, b.shape[1]
    if m % BLOCK_M or n % BLOCK_N or k % BLOCK_K:
        raise ValueError(f"matmul needs M, N multiples of 64 and K of 32; got M={m} N={n} K={k}")
    kern = warp_matmul_bf16 if a.dtype == torch.bfloat16 else warp_matmul_fp16
    c = torch.empty(m, n, dtype=torch.float32, device=a.device) if out is None else out
    kern[(n // BLOCK_N, m // BLOCK_M)](a, b, c)
    return c
