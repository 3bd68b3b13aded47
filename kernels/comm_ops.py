"""Communication fused into compute, as torch operators, for tensor-parallel layers over a group of GPUs of one host:

- `all_gather_matmul(a, b, group)`: [a_0; a_1; ...] @ b, every rank's rows of a gathered by the GEMM's producer
  itself (torch.ops.tkpy.all_gather_matmul);
- `matmul_reduce_scatter(a, b, group)`: this rank's rows of (a_0 @ b_0 + a_1 @ b_1 + ...), each rank's partial
  tiles stored by its GEMM straight into the owner's memory, summed there (torch.ops.tkpy.matmul_reduce_scatter);
- `all_reduce(x, group)`: x_0 + x_1 + ... on every rank, the same bits everywhere (torch.ops.tkpy.all_reduce).

`group`: a torch ProcessGroup (one process per GPU, buffers in torch's symmetric memory without multicast), a
kernels.comm.Group (SimulatedGroup: the interpreter's simulated GPUs, tk.simulate_ranks) or the name of either.
Every rank makes the same calls in the same order (as with NCCL). bf16 or fp16; sums in fp32. A call's steps, in
stream order on each rank (kernels/comm.py has the protocol): a barrier kernel (every rank has finished its last
call: the group's buffers are free), the copy of the input into the group's buffer (all_gather_matmul, all_reduce),
the fused kernel (comm_gemm.py, comm_kernels.sum_kernel), and for matmul_reduce_scatter the sum of its slots.
Forward only (the backward of one is the other: not wired up yet).
"""
from __future__ import annotations

import torch

from tkpy.templates import multiprocessors

from . import comm
from .comm_gemm import all_gather_matmul_template, matmul_reduce_scatter_template
from .comm_kernels import COLS, ROWS, WARPS, barrier_kernel, sum_kernel
from .gemm import check_operands
from .gemm_config import DTYPES, MatmulConfig
from .gemm_policy import BM, block_n_for
from .op_support import check_device, define, direct_call_ok
from .tensor_layout import ALIGN, cdiv, tma_ready

NO_BACKWARD = "the backward of a fused communication GEMM is not implemented yet (each one's is the other)"
SUM_BLOCKS_PER_SM = 4


def all_gather_matmul(a: torch.Tensor, b: torch.Tensor, group) -> torch.Tensor:
    """[a_0; a_1; ...; a_{world-1}] @ b on every rank r, a_r its a: (Ms, K) each, Ms a multiple of 128; b: (K, N),
    row-major or the transpose of a row-major (N, K) weight (w.T); -> (world * Ms, N), fp32 accumulation."""
    name = comm.name_of(group)
    return _all_gather_matmul(a, b, name) if direct_call_ok((a, b)) else all_gather_matmul_op(a, b, name)


def matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, group) -> torch.Tensor:
    """Rows r * Ms .. (r + 1) * Ms - 1 of (a_0 @ b_0 + ... + a_{world-1} @ b_{world-1}) on rank r, a_q (M, K_q) and
    b_q (K_q, N) rank q's, M = world * Ms, Ms a multiple of 128; -> (Ms, N). Each partial product is rounded to the
    output dtype, the sum of the partials is fp32 in rank order."""
    name = comm.name_of(group)
    return _matmul_reduce_scatter(a, b, name) if direct_call_ok((a, b)) else matmul_reduce_scatter_op(a, b, name)


def all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    """x_0 + x_1 + ... + x_{world-1} (every rank's x, one shape; last dim a multiple of 8), fp32 sums in rank order,
    the same bits on every rank; a new tensor."""
    name = comm.name_of(group)
    return _all_reduce(x, name) if direct_call_ok((x,)) else all_reduce_op(x, name)


# -- checks ---------------------------------------------------------------------------------------------------------

def _check_pair(what: str, a: torch.Tensor, b: torch.Tensor, rows: int) -> None:
    """a (R, K) @ b (K, N): dtypes, devices, shapes (gemm.check_operands); `rows` must divide R (the rows of a
    rank)."""
    check_operands(what, a, b)
    if a.shape[0] == 0 or a.shape[0] % rows:
        raise ValueError(f"{what}: a's rows ({a.shape[0]}) must be a positive multiple of {rows} (each 128-row tile "
                         "of the output lies on one rank)")
    if a.shape[1] * a.element_size() % ALIGN or b.shape[1] * b.element_size() % ALIGN:
        raise ValueError(f"{what}: K and N must be multiples of {ALIGN // a.element_size()} (16-byte rows); got "
                         f"K = {a.shape[1]}, N = {b.shape[1]}")


def _b_operand(b: torch.Tensor) -> tuple[torch.Tensor, bool]:
    """(what the kernel reads of b, whether it is (N, K) tiles): a w.T as its row-major w, b as it is if TMA reads it
    in place, else a contiguous copy."""
    if b.stride(0) == 1 and b.stride(1) == b.shape[0] and b.shape[1] > 1 and tma_ready(b.T):
        return b.T, True
    return (b if tma_ready(b) else b.contiguous()), False


def _config(a: torch.Tensor, b_transposed: bool, m: int, n: int) -> MatmulConfig:
    dtype = DTYPES[a.dtype]
    return MatmulConfig(dtype, dtype, b_transposed, block_n=block_n_for(m, n, multiprocessors(a)))


# -- launches -------------------------------------------------------------------------------------------------------

def _all_gather_matmul(a: torch.Tensor, b: torch.Tensor, name: str) -> torch.Tensor:
    group = comm.lookup(name)
    _check_pair("all_gather_matmul", a, b, BM)
    (ms, k), n, world = a.shape, b.shape[1], group.world
    epoch, flags = group.next_epoch(), group.flags()
    shards = group.buffer("all_gather_matmul.a", (ms, k), a.dtype)
    barrier_kernel(world)[(1,)](flags, epoch)
    shards.local.copy_(a)
    b_, b_transposed = _b_operand(b)
    c = torch.empty(world * ms, n, dtype=a.dtype, device=a.device)
    template = all_gather_matmul_template(_config(a, b_transposed, world * ms, n), world)
    template.kernel[template.grid(shards, b_, c, flags, 0)](shards, b_, c, flags, epoch)
    return c


def _matmul_reduce_scatter(a: torch.Tensor, b: torch.Tensor, name: str) -> torch.Tensor:
    group = comm.lookup(name)
    world = group.world
    _check_pair("matmul_reduce_scatter", a, b, world * BM)
    (m, _), n = a.shape, b.shape[1]
    ms = m // world
    epoch, flags = group.next_epoch(), group.flags()
    partials = group.buffer("matmul_reduce_scatter.partials", (world, ms, n), a.dtype)
    barrier_kernel(world)[(1,)](flags, epoch)
    a_ = a if tma_ready(a) else a.contiguous()
    b_, b_transposed = _b_operand(b)
    template = matmul_reduce_scatter_template(_config(a, b_transposed, m, n), world)
    template.kernel[template.grid(a_, b_, partials)](a_, b_, partials)
    out = torch.empty(ms, n, dtype=a.dtype, device=a.device)
    _sum(partials, flags, out, epoch, peers=False)
    return out


def _all_reduce(x: torch.Tensor, name: str) -> torch.Tensor:
    group = comm.lookup(name)
    _check_reduce(x)
    rows = x.view(-1, x.shape[-1]) if x.is_contiguous() else x.reshape(-1, x.shape[-1])
    epoch, flags = group.next_epoch(), group.flags()
    buffers = group.buffer("all_reduce.x", (1, *rows.shape), x.dtype)
    barrier_kernel(group.world)[(1,)](flags, epoch)
    buffers.local[0].copy_(rows)
    out = torch.empty(rows.shape, dtype=x.dtype, device=x.device)
    _sum(buffers, flags, out, epoch, peers=True)
    return out.view(x.shape)


def _check_reduce(x: torch.Tensor) -> None:
    if x.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"all_reduce takes bf16 or fp16 tensors (fp32 sums), got {x.dtype}")
    check_device("all_reduce", x)
    if x.dim() == 0 or x.numel() == 0 or x.shape[-1] * x.element_size() % ALIGN:
        raise ValueError(f"all_reduce: x's last dim must be a positive multiple of {ALIGN // x.element_size()} "
                         f"(16-byte rows), got shape {tuple(x.shape)}")


def _sum(src, flags, out: torch.Tensor, epoch: int, peers: bool) -> None:
    """out = the sum over the ranks (comm_kernels.sum_kernel) on a persistent grid."""
    tiles = cdiv(out.shape[0], ROWS * WARPS) * cdiv(out.shape[1], COLS)
    kernel = sum_kernel(flags.world, DTYPES[out.dtype], peers)
    kernel[(min(tiles, multiprocessors(out) * SUM_BLOCKS_PER_SM),)](src, flags, out, epoch)


# -- the operators --------------------------------------------------------------------------------------------------

def _ag_fake(a: torch.Tensor, b: torch.Tensor, group: str) -> torch.Tensor:
    _check_pair("all_gather_matmul", a, b, BM)
    return a.new_empty(comm.lookup(group).world * a.shape[0], b.shape[1])


def _rs_fake(a: torch.Tensor, b: torch.Tensor, group: str) -> torch.Tensor:
    world = comm.lookup(group).world
    _check_pair("matmul_reduce_scatter", a, b, world * BM)
    return a.new_empty(a.shape[0] // world, b.shape[1])


def _ar_fake(x: torch.Tensor, group: str) -> torch.Tensor:
    comm.lookup(group)
    _check_reduce(x)
    return x.new_empty(x.shape)


all_gather_matmul_op = define("all_gather_matmul", _all_gather_matmul, _ag_fake, differentiable=NO_BACKWARD)
matmul_reduce_scatter_op = define("matmul_reduce_scatter", _matmul_reduce_scatter, _rs_fake,
                                  differentiable=NO_BACKWARD)
all_reduce_op = define("all_reduce", _all_reduce, _ar_fake, differentiable=NO_BACKWARD)
