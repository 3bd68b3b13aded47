"""Peer memory and signals on GPUs (issue 36): the kernels of tests/test_pgl.py, each rank on a GPU of its own, driven
by one process (tk.PGL of tensors on each GPU, peer access enabled): every rank's launch is issued before any
finishes, so the kernels meet through NVLink as separate processes' would. Skipped with fewer than 2 GPUs. (The
same through torch's symmetric memory, a process per GPU: tests/test_gpu_comm.py.)"""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from gpu_util import on_gpus
from test_pgl import BLOCKS, N, exchange_kernel, tma_gather_kernel


@pytest.mark.parametrize("world", [2, 4])
@on_gpus(2)
def test_gpu_ranks_exchange_through_peer_memory_and_signals(world, monkeypatch):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    k = exchange_kernel(world)
    devices = [torch.device("cuda", r) for r in range(world)]
    x = [torch.zeros(N, 16, device=d) for d in devices]
    flags = [torch.zeros(2, world, BLOCKS, dtype=torch.int32, device=d) for d in devices]
    pgls = [(tk.PGL(x, r), tk.PGL(flags, r)) for r in range(world)]
    for epoch in (1, 2, 3):
        src = [torch.randn(N, 16, device=d) for d in devices]
        out = [torch.full((world, N, 16), float("nan"), device=d) for d in devices]
        for d in devices:
            torch.cuda.synchronize(d)               # inputs written before any rank's kernel reads them
        for r in range(world):                       # every launch issued before any kernel can finish
            k[(BLOCKS,)](src[r], *pgls[r], out[r], epoch)
        for r, d in enumerate(devices):
            torch.cuda.synchronize(d)
            for p in range(world):
                assert torch.equal(out[r][p], src[p].to(d)), (r, p, epoch)


@on_gpus(2)
def test_gpu_tma_loads_from_peers(monkeypatch):
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    world = 2
    k = tma_gather_kernel(world)
    devices = [torch.device("cuda", r) for r in range(world)]
    xs = [torch.randn(32, 64, device=d).to(torch.bfloat16) for d in devices]
    flags = [torch.zeros(world, dtype=torch.int32, device=d) for d in devices]
    outs = [torch.full((world, 32, 64), float("nan"), device=d).to(torch.bfloat16) for d in devices]
    for d in devices:
        torch.cuda.synchronize(d)
    for r in range(world):
        k[(2,)](tk.PGL(xs, r), tk.PGL(flags, r), outs[r], 1)
    for r, d in enumerate(devices):
        torch.cuda.synchronize(d)
        for p in range(world):
            assert torch.equal(outs[r][p], xs[p].to(d)), (r, p)
