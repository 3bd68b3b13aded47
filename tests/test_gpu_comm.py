"""The fused communication operators on GPUs (issue 36): a process per GPU (benchmarks/multi_gpu.spawn, NCCL's process
group, buffers in torch's symmetric memory without multicast), each operator against float64 references (every
element, fresh random inputs, several calls) and against NCCL + torch.matmul run in the same processes. Skipped with
fewer than 2 GPUs. (The same operators in the interpreter over simulated GPUs: tests/test_comm.py.)"""
from __future__ import annotations

import pytest
import torch

from gpu_util import on_gpus
from test_comm import error_ratio

CALLS = 3


def check_ops(rank: int, world: int) -> dict:
    """(in each process) The worst error ratio (test_comm.error_ratio) of each operator against float64, and the
    largest difference from NCCL + torch.matmul in units of the output's rounding, over CALLS calls."""
    import torch.distributed as dist

    from tkpy.kernels import all_gather_matmul, all_reduce, matmul_reduce_scatter

    group, device = dist.group.WORLD, torch.device("cuda", rank)
    torch.manual_seed(1000 + rank)
    worst: dict = {}

    def keep(name: str, value: float) -> None:
        worst[name] = max(worst.get(name, 0.0), value)

    def rand(*shape):
        return torch.randn(*shape, device=device).to(torch.bfloat16)

    for _ in range(CALLS):
        ms, k, n = 256, 512, 384                           # all_gather_matmul: a column-parallel layer
        a, w = rand(ms, k), rand(n, k)
        c = all_gather_matmul(a, w.T, group)
        gathered = torch.empty(world * ms, k, device=device, dtype=a.dtype)
        dist.all_gather_into_tensor(gathered, a)
        keep("all_gather_matmul", error_ratio(c, gathered.double() @ w.T.double()))
        keep("all_gather_matmul vs nccl", error_ratio(c, (gathered @ w.T).double()))

        m, kr = world * 256, 320                           # matmul_reduce_scatter: a row-parallel layer
        a, b = rand(m, kr), rand(kr, n)
        out = matmul_reduce_scatter(a, b, group)
        products = a.double() @ b.double()
        total = torch.empty_like(products)
        dist.all_reduce(total.copy_(products))             # float64 sums of the exact partial products
        magnitude = products.abs()
        dist.all_reduce(magnitude)
        rows = slice(rank * 256, (rank + 1) * 256)
        keep("matmul_reduce_scatter", error_ratio(out, total[rows], magnitude[rows]))
        nccl = torch.empty(256, n, device=device, dtype=out.dtype)
        dist.reduce_scatter_tensor(nccl, a @ b)
        keep("matmul_reduce_scatter vs nccl", error_ratio(out, nccl.double(), world * magnitude[rows]))   # (its
        # roundings of the partial sums too)

        x = rand(1000, 1024)                               # all_reduce
        y = all_reduce(x, group)
        xs = [torch.empty_like(x) for _ in range(world)]
        dist.all_gather(xs, x)
        expected = sum(v.float() for v in xs).to(torch.bfloat16)
        keep("all_reduce (differing elements)", float((y != expected).sum().item()))
        ys = [torch.empty_like(y) for _ in range(world)]
        dist.all_gather(ys, y)
        keep("all_reduce (ranks differing)", float(sum((v != ys[0]).sum().item() for v in ys)))
        nccl = x.clone()
        dist.all_reduce(nccl)
        keep("all_reduce vs nccl", error_ratio(y, nccl.double(), world * sum(v.double().abs() for v in xs)))
    torch.cuda.synchronize()
    return worst


@pytest.mark.parametrize("world", [2, 4, 8])
@on_gpus(2)
def test_gpu_fused_communication_operators(world):
    if torch.cuda.device_count() < world:
        pytest.skip(f"needs {world} GPUs")
    from benchmarks.multi_gpu import spawn

    for rank, worst in enumerate(spawn(world, check_ops)):
        for name, value in worst.items():
            limit = 0 if "(" in name else 1                 # counts of differing elements: none
            assert value <= limit, f"rank {rank} of {world}: {name}: {value:.3g} (at most {limit})"
