"""Parallel global tensors on the host: `tk.PGL`, what a `tk.pgl[...]` parameter takes.

A PGL is one tensor per GPU of a group of `world` GPUs of one host, all of one shape, dtype and strides, each
addressable from this rank's GPU, and the rank this process (or this launch) is. Peer memory comes from:

- torch's symmetric memory (one process per GPU, torchrun): `PGL.symmetric(shape, dtype, group)` allocates
  with `torch.distributed._symmetric_memory.empty` and rendezvouses (no multicast: tkpy never asks for it), and
  each peer's buffer is a tensor mapped into this GPU's address space (`get_buffer`);
- one process driving several GPUs: `PGL(tensors, rank)` with each tensor on its own GPU; peer access from the
  rank's GPU to the others' is enabled (cuCtxEnablePeerAccess);
- tkpy's interpreter: CPU tensors shared by the simulated ranks (tk.simulate_ranks).

A kernel launch takes a PGL where its parameter is a `tk.pgl[tk.gl[...], world]`: the launch passes each rank's
tensor as a gl of its own (pointer, dims, tensor maps) and the rank as a constexpr, and runs on the local tensor's
device (`tensors[rank]`).
"""
from __future__ import annotations

from collections.abc import Sequence

from ..errors import ArgumentError


class PGL:
    """`tensors[r]`: rank r's tensor, as this rank's GPU addresses it; `rank`: this rank; `world`: the group's size.
    Duck-types the local tensor's shape, dtype, device and dims for host code that reads them (templates' grids)."""

    __slots__ = ("tensors", "rank", "world", "keep")

    def __init__(self, tensors: Sequence, rank: int, *, keep=None):
        import torch

        tensors = tuple(tensors)
        if not tensors or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise ArgumentError(f"tk.PGL takes a sequence of torch tensors (one per rank), got {tensors!r}")
        if isinstance(rank, bool) or not isinstance(rank, int) or not 0 <= rank < len(tensors):
            raise ArgumentError(f"tk.PGL: rank must be an int in 0..{len(tensors) - 1}, got {rank!r}")
        first = tensors[0]
        for r, t in enumerate(tensors):
            if (t.shape, t.dtype, t.stride()) != (first.shape, first.dtype, first.stride()):
                raise ArgumentError(f"tk.PGL: every rank's tensor has one shape, dtype and strides; rank 0's is "
                                    f"{tuple(first.shape)} {first.dtype} {first.stride()}, rank {r}'s "
                                    f"{tuple(t.shape)} {t.dtype} {t.stride()}")
        self.tensors, self.rank, self.world = tensors, rank, len(tensors)
        self.keep = keep                # what keeps peer mappings alive (a symmetric-memory handle)
        local = tensors[rank]
        if local.is_cuda:
            peers = {t.get_device() for t in tensors if t.is_cuda} - {local.get_device()}
            if peers:
                from ..runtime.driver import enable_peer_access

                for peer in sorted(peers):
                    enable_peer_access(local.get_device(), peer)

    @classmethod
    def symmetric(cls, shape, dtype, group=None) -> "PGL":
        """A new buffer of `shape` and `dtype` in torch's symmetric memory on this process's GPU
        (torch.cuda.current_device()), rendezvoused over `group` (default: the world group): every rank calls it
        with the same arguments, in the same order."""
        import torch
        import torch.distributed as dist
        import torch.distributed._symmetric_memory as symm_mem

        group = group or dist.group.WORLD
        if not symm_mem.is_symm_mem_enabled_for_group(group.group_name):
            symm_mem.enable_symm_mem_for_group(group.group_name)
        local = symm_mem.empty(*shape, dtype=dtype, device=torch.device("cuda", torch.cuda.current_device()))
        handle = symm_mem.rendezvous(local, group)
        peers = [local if r == handle.rank else handle.get_buffer(r, tuple(shape), dtype)
                 for r in range(handle.world_size)]
        return cls(peers, handle.rank, keep=handle)

    @property
    def local(self):
        return self.tensors[self.rank]

    @property
    def shape(self):
        return self.local.shape

    @property
    def dtype(self):
        return self.local.dtype

    @property
    def device(self):
        return self.local.device

    @property
    def is_cuda(self) -> bool:
        return self.local.is_cuda

    def get_device(self) -> int:
        return self.local.get_device()

    def dim(self) -> int:
        return self.local.dim()

    def __repr__(self) -> str:
        return f"tk.PGL(rank {self.rank} of {self.world}, {tuple(self.shape)} {self.dtype} on {self.device})"


def flatten(specs, args) -> tuple:
    """A call's arguments with each PGL in place of a pgl parameter replaced by what its specs take (its tensors,
    then its rank; signature.pgl_specs). `specs`: the kernel's (flattened) specs."""
    out, i, n = [], 0, len(specs)
    for a in args:
        if i < n and specs[i].member is not None:
            name, world = specs[i].member[0], _world(specs, i)
            if not isinstance(a, PGL):
                raise ArgumentError(f"`{name}` is a tk.pgl of {world} GPUs: pass a tk.PGL of {world} tensors "
                                    f"(tk.PGL(tensors, rank), tk.PGL.symmetric(shape, dtype, group)), got "
                                    f"{type(a).__name__}")
            if a.world != world:
                raise ArgumentError(f"`{name}` is a tk.pgl of {world} GPUs, got a tk.PGL of {a.world}")
            out += a.tensors
            out.append(a.rank)
            i += world + 1
        else:
            out.append(a)
            i += 1
    return tuple(out)


def _world(specs, i: int) -> int:
    name = specs[i].member[0]
    return sum(1 for s in specs[i:] if s.member is not None and s.member[0] == name and s.member[1] is not None)


def local_members(specs, args) -> list[int]:
    """Positions of the flattened arguments that are a pgl's local tensor (the rank's own)."""
    rank_of = {s.member[0]: args[i] for i, s in enumerate(specs) if s.member is not None and s.member[1] is None}
    return [i for i, s in enumerate(specs) if s.member is not None and s.member[1] == rank_of[s.member[0]]]
