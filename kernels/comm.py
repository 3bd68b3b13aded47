"""Groups of GPUs of one host, as the fused communication operators (kernels/comm_ops.py) use them: a group is its
size, the caller's rank, symmetric buffers (a tk.PGL each: every rank's buffer, reachable from every rank's GPU),
the group's flags and a count of its calls (each call's epoch).

- TorchGroup: a torch.distributed process group, one process per GPU (torchrun); buffers in torch's symmetric
  memory, without multicast (TORCH_SYMM_MEM_DISABLE_MULTICAST=1 is set where unset, as are NCCL_NVLS_ENABLE=0 and
  NVSHMEM_DISABLE_NVLS=1).
- SimulatedGroup: `world` simulated GPUs on the CPU (tk.simulate_ranks: a thread per rank), for the interpreter;
  buffers are CPU tensors the ranks share.

The protocol of a call (epoch e, e = 1, 2, ... on every rank alike, as every rank makes the same calls in the same
order): the flags are int32, FLAG_ROWS x FLAG_COLS a rank; a rank sets flag (row, its rank) of every rank to e, and
waits until its own flag (row, p) is at least e for a rank p. Row ARRIVED is the call's barrier (barrier_kernel: no
rank goes on before every rank has finished its previous call, so its buffers are free); row READY says that the
rank's data of the call are in place. Flags only grow: nothing resets them.
"""
from __future__ import annotations

import os
import threading

import torch

import tkpy as tk

ARRIVED, READY = 0, 1
FLAG_ROWS, FLAG_COLS = 2, 8      # a row per kind, a column per rank (8: the most GPUs of a host; 32-byte rows)
NO_MULTICAST = {"TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NCCL_NVLS_ENABLE": "0", "NVSHMEM_DISABLE_NVLS": "1"}


class Group:
    """What the fused operators need of a group of `world` GPUs (subclasses say where the memory comes from)."""

    world: int

    def __init__(self, world: int):
        self.world = world
        self._buffers: dict = {}
        self._lock = threading.Lock()

    def rank(self) -> int:
        raise NotImplementedError

    def buffer(self, name: str, shape: tuple, dtype: torch.dtype) -> tk.PGL:
        """The group's buffer `name` of this shape and dtype (made at its first use, by every rank alike: then
        zeros), the same on later calls."""
        raise NotImplementedError

    def flags(self) -> tk.PGL:
        return self.buffer("flags", (FLAG_ROWS, FLAG_COLS), torch.int32)

    def next_epoch(self) -> int:
        """The epoch of this rank's next call: 1, 2, ..."""
        raise NotImplementedError


class SimulatedGroup(Group):
    """`world` simulated GPUs (tk.simulate_ranks): a rank is the calling thread's simulated rank."""

    def __init__(self, world: int):
        super().__init__(world)
        self._epochs = [0] * world

    def rank(self) -> int:
        rank = tk.simulated_rank()
        if rank is None or rank >= self.world:
            raise RuntimeError(f"a SimulatedGroup of {self.world} GPUs is used by the ranks of tk.simulate_ranks("
                               f"{self.world}, ...); this thread is not one of them")
        return rank

    def buffer(self, name: str, shape: tuple, dtype: torch.dtype) -> tk.PGL:
        key = (name, tuple(shape), dtype)
        with self._lock:
            tensors = self._buffers.get(key)
            if tensors is None:
                tensors = self._buffers[key] = [torch.zeros(shape, dtype=dtype) for _ in range(self.world)]
        return tk.PGL(tensors, self.rank())

    def next_epoch(self) -> int:
        rank = self.rank()
        with self._lock:
            self._epochs[rank] += 1
            return self._epochs[rank]


class TorchGroup(Group):
    """A torch.distributed process group of GPUs of one host, a process per GPU (torch.cuda.current_device())."""

    def __init__(self, process_group):
        for key, value in NO_MULTICAST.items():
            os.environ.setdefault(key, value)
        super().__init__(process_group.size())
        self.process_group = process_group
        self._rank = process_group.rank()
        self._epoch = 0

    def rank(self) -> int:
        return self._rank

    def buffer(self, name: str, shape: tuple, dtype: torch.dtype) -> tk.PGL:
        key = (name, tuple(shape), dtype)
        with self._lock:
            pgl = self._buffers.get(key)
            if pgl is None:
                import torch.distributed as dist

                pgl = tk.PGL.symmetric(shape, dtype, self.process_group)
                pgl.local.zero_()
                torch.cuda.synchronize()
                dist.barrier(group=self.process_group)     # every rank's zeros are in before anyone signals
                self._buffers[key] = pgl
            return pgl

    def next_epoch(self) -> int:
        self._epoch += 1
        return self._epoch


_registry: dict = {}
_registry_lock = threading.Lock()


def name_of(group) -> str:
    """The name the operators know `group` by (a Group, a torch ProcessGroup, or a name already), registering it."""
    if isinstance(group, str):
        lookup(group)
        return group
    if isinstance(group, Group):
        name = f"tkpy-group-{id(group):x}"
        with _registry_lock:
            _registry.setdefault(name, group)
        return name
    name = group.group_name
    with _registry_lock:
        if name not in _registry:
            _registry[name] = TorchGroup(group)
    return name


def lookup(name: str) -> Group:
    """The group registered as `name` (a torch process group's name registers that group at first use)."""
    group = _registry.get(name)
    if group is None:
        import torch.distributed as dist

        if not dist.is_initialized():
            raise ValueError(f"no group {name!r}: pass a tkpy.kernels.comm.Group, a torch ProcessGroup or its name")
        from torch.distributed import distributed_c10d

        return lookup(name_of(distributed_c10d._resolve_process_group(name)))
    return group
