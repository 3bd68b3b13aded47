"""A process per GPU of this host, as torchrun would start them: `spawn(world, fn, *args)` runs fn(rank, world, *args)
in `world` processes (torch.multiprocessing, spawn), each on cuda:rank with NCCL's default process group initialised
(device_id bound), and returns their results in rank order (each must be JSON: they come back through files). Under
torchrun, `torchrun_main(fn, *args)` runs fn in the process torchrun started instead.

NVLink multicast stays off in every process (NO_MULTICAST: NCCL_NVLS_ENABLE=0, TORCH_SYMM_MEM_DISABLE_MULTICAST=1,
NVSHMEM_DISABLE_NVLS=1, set before anything starts; tkpy never calls cuMulticastCreate). Used by
benchmarks/bench_multi_gpu.py and tests/test_gpu_comm.py.
"""
from __future__ import annotations

import json
import os
import socket
import tempfile
from pathlib import Path

NO_MULTICAST = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}


def no_multicast() -> None:
    """Set NO_MULTICAST in this process's environment (what its children inherit)."""
    os.environ.update(NO_MULTICAST)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _child(rank: int, world: int, port: int, out_dir: str, fn, args) -> None:
    import torch
    import torch.distributed as dist

    no_multicast()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        result = fn(rank, world, *args)
        Path(out_dir, f"{rank}.json").write_text(json.dumps(result))
    finally:
        dist.destroy_process_group()


def spawn(world: int, fn, *args) -> list:
    """fn(rank, world, *args) in `world` processes, one a GPU (see the module docstring); their results."""
    import torch.multiprocessing as mp

    no_multicast()
    with tempfile.TemporaryDirectory(prefix="tkpy-multi-gpu-") as out_dir:
        mp.spawn(_child, args=(world, _free_port(), out_dir, fn, args), nprocs=world, join=True)
        return [json.loads(Path(out_dir, f"{r}.json").read_text()) for r in range(world)]


def torchrun_main(fn, *args):
    """fn(rank, world, *args) in a process torchrun started (RANK, WORLD_SIZE, LOCAL_RANK set), its GPU LOCAL_RANK."""
    import torch
    import torch.distributed as dist

    no_multicast()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local = int(os.environ.get("LOCAL_RANK", rank))
    torch.cuda.set_device(local)
    dist.init_process_group("nccl", device_id=torch.device("cuda", local))
    try:
        return fn(rank, world, *args)
    finally:
        dist.destroy_process_group()
