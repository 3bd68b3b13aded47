"""Kernels whose generated C++ (with debug mode off) is stored under tests/golden/: tests/test_debug_mode.py
checks that the debug-mode switch leaves the normal build byte-identical. Their line numbers are part of the
golden sources (`// debug_golden_kernels.py:LINE` comments): edit this file only together with the goldens
(`TKPY_REGEN_GOLDEN=1 python -m pytest -q tests/test_debug_mode.py -k golden` rewrites them).

Each factory returns a fresh kernel (traced anew, so that it reads the environment) and CPU arguments."""
from __future__ import annotations

import torch

import tkpy as tk
from tkpy import bf16, f32


def softmax():
    """Warp-level: loads, a reduction, maps, a store, a block barrier; no Hopper machinery."""
    @tk.kernel(warps=4, name="golden_softmax")
    def k(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, "R", 64]):
        row = tk.block_idx.x * 4 + tk.warp_id()
        t = tk.rt(f32, 16, 64)
        m = tk.col_vec(t)
        tk.load(t, x, (row, 0))
        tk.row_max(m, t)
        tk.sub_row(t, t, m)
        tk.exp(t, t)
        tk.sync()
        tk.store(y, t, (row, 0))
    return k, (torch.zeros(256, 64, dtype=torch.bfloat16), torch.zeros(256, 64, dtype=torch.bfloat16))


def producer_consumer():
    """Warp-specialized: warp 4 streams K slices by TMA through two stages (full/empty semaphore arrays),
    warpgroup 0 multiplies them with wgmma; named barriers between the consumers, a warpgroup vote."""
    @tk.kernel(warps=8, name="golden_ws")
    def k(a: tk.gl[bf16, 64, "K"], b: tk.gl[bf16, "K", 64], c: tk.gl[f32, 64, 64]):
        sa, sb = tk.st(bf16, 64, 64, count=2), tk.st(bf16, 64, 64, count=2)
        full, empty = tk.semaphore(2), tk.semaphore(2)
        acc = tk.rt(f32, 16, 64)
        with tk.if_(tk.warp_id() == 0):
            for i in range(2):
                tk.init_semaphore(full[i], 1)
                tk.init_semaphore(empty[i], 4)
        tk.sync()
        with tk.if_(tk.warp_id() == 4):
            for kk in tk.range(a.cols // 64):
                stage = tk.let(kk % 2, "stage")
                with tk.if_(kk >= 2):
                    tk.wait(empty[stage], (kk // 2 - 1) % 2)
                tk.tma.expect(full[stage], sa[stage], sb[stage])
                tk.tma.load_async(sa[stage], a, (0, kk), full[stage])
                tk.tma.load_async(sb[stage], b, (kk, 0), full[stage])
        with tk.if_(tk.warp_id() < 4):
            tk.zero(acc)
            for kk in tk.range(a.cols // 64):
                stage = tk.let(kk % 2, "stage")
                tk.wait(full[stage], (kk // 2) % 2)
                tk.warpgroup.mma_AB(acc, sa[stage], sb[stage])
                tk.warpgroup.mma_async_wait()
                tk.arrive(empty[stage])
            tk.named_sync(1, 4)
            tk.named_arrive(2, 4)
            seen = tk.warpgroup.any(tk.warp_id() == 0, 3)
            with tk.if_(seen):
                tk.warpgroup.store(c, acc, (0, 0))
    return k, (torch.zeros(64, 256, dtype=torch.bfloat16), torch.zeros(256, 64, dtype=torch.bfloat16),
               torch.zeros(64, 64))


def cluster_multicast():
    """Clusters of 2: a multicast TMA load, a remote arrive, cluster barriers."""
    @tk.kernel(warps=1, cluster=(2, 1, 1), name="golden_cluster")
    def k(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, "R2", 64]):
        s = tk.st(bf16, 64, 64)
        loaded, done = tk.semaphore(), tk.semaphore()
        t = tk.rt(bf16, 64, 64)
        tk.init_semaphore(loaded, 1)
        tk.init_semaphore(done, 1)
        tk.cluster.sync()
        tk.tma.expect(loaded, s)
        with tk.if_(tk.cluster.rank() == 0):
            tk.tma.load_async(s, x, (tk.block_idx.x // 2, 0), loaded, multicast=0b11)
        tk.wait(loaded, 0)
        tk.load(t, s)
        tk.store(y, t, (tk.block_idx.x, 0))
        with tk.if_(tk.cluster.rank() == 1):
            tk.cluster.arrive(done, 0)
        with tk.if_(tk.cluster.rank() == 0):
            tk.wait(done, 0)
        tk.cluster.sync()
    return k, (torch.zeros(128, 64, dtype=torch.bfloat16), torch.zeros(256, 64, dtype=torch.bfloat16))


GOLDEN = {"softmax": softmax, "producer_consumer": producer_consumer, "cluster_multicast": cluster_multicast}
