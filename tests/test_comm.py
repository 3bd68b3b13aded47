"""The fused communication operators (kernels/comm_ops.py) in the interpreter, over 2 to 4 simulated GPUs
(tk.simulate_ranks, kernels.comm.SimulatedGroup), against float64 references on fresh random inputs, every element
checked; several calls in a row (the flags' epochs, the group's buffers reused); the argument checks. On GPUs, a
process per GPU through torch's symmetric memory against NCCL + torch.matmul: tests/test_gpu_comm.py."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy.kernels import all_gather_matmul, all_reduce, matmul_reduce_scatter
from tkpy.kernels.comm import SimulatedGroup

BF16, FP16 = torch.bfloat16, torch.float16


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")


def rand(*shape, dtype=BF16):
    return torch.randn(*shape, dtype=torch.float64).to(dtype)


def error_ratio(out: torch.Tensor, ref: torch.Tensor, rounded=None) -> float:
    """The worst error of `out` against the float64 reference `ref`, over what the output dtype's rounding and fp32
    accumulation allow (1 or less: within it; inf: a NaN, an element never written); `rounded`: the magnitudes of
    terms rounded to the output dtype on the way (a reduce-scatter's partial products), which each add theirs."""
    if torch.isnan(out).any():
        return float("inf")
    eps = torch.finfo(out.dtype).eps
    err = (out.double() - ref).abs()
    bound = (ref.abs() + (0 if rounded is None else rounded)) * eps + ref.abs().max() * 2 ** -20 + 1e-6
    return (err / bound).max().item()


def close(out: torch.Tensor, ref: torch.Tensor, what: str, rounded=None) -> None:
    ratio = error_ratio(out, ref, rounded)
    assert ratio <= 1, f"{what}: the worst error is {ratio:.3g} times its bound"


def run_ranks(world: int, fn) -> list:
    return tk.simulate_ranks(world, fn)


@pytest.mark.parametrize("world, b_layout, dtype", [(2, "kn", BF16), (4, "w.T", BF16), (2, "w.T", FP16)])
def test_all_gather_matmul(world, b_layout, dtype):
    group = SimulatedGroup(world)
    ms, k, n = 128, 96, 192
    for call in range(2):                      # the second reuses the group's buffers, at the next epoch
        shards = [rand(ms, k, dtype=dtype) for _ in range(world)]
        bs = [rand(k, n, dtype=dtype) if b_layout == "kn" else rand(n, k, dtype=dtype).T for _ in range(world)]
        outs = run_ranks(world, lambda r: all_gather_matmul(shards[r], bs[r], group))
        gathered = torch.cat(shards).double()
        for r in range(world):
            assert outs[r].shape == (world * ms, n) and outs[r].dtype == dtype
            close(outs[r], gathered @ bs[r].double(), f"call {call}, rank {r}")


@pytest.mark.parametrize("world, b_layout, dtype", [(2, "w.T", BF16), (4, "kn", BF16), (2, "kn", FP16)])
def test_matmul_reduce_scatter(world, b_layout, dtype):
    group = SimulatedGroup(world)
    m, k, n = world * 128, 64, 128
    for call in range(2):
        a = [rand(m, k, dtype=dtype) for _ in range(world)]
        b = [rand(k, n, dtype=dtype) if b_layout == "kn" else rand(n, k, dtype=dtype).T for _ in range(world)]
        outs = run_ranks(world, lambda r: matmul_reduce_scatter(a[r], b[r], group))
        partials = [a[q].double() @ b[q].double() for q in range(world)]
        total, magnitude = sum(partials), sum(p.abs() for p in partials)
        for r in range(world):
            assert outs[r].shape == (128, n) and outs[r].dtype == dtype
            rows = slice(r * 128, (r + 1) * 128)
            close(outs[r], total[rows], f"call {call}, rank {r}", rounded=magnitude[rows])


@pytest.mark.parametrize("world, shape", [(2, (3, 100, 72)), (3, (130, 64)), (4, (16, 8))])
def test_all_reduce_is_the_same_on_every_rank(world, shape):
    """fp32 sums in rank order, rounded once: bit for bit torch's sum in that order, on every rank; edge tiles
    (rows and columns past 64) masked."""
    group = SimulatedGroup(world)
    for call in range(3):
        xs = [rand(*shape) for _ in range(world)]
        outs = run_ranks(world, lambda r: all_reduce(xs[r], group))
        expected = sum(x.float() for x in xs).to(BF16)
        for r in range(world):
            assert outs[r].shape == shape and torch.equal(outs[r], expected), f"call {call}, rank {r}"


def test_calls_of_different_shapes_interleave():
    """One group, three operators and two shapes, in the same order on each rank: each call's epoch and buffers."""
    world = 2
    group = SimulatedGroup(world)
    x1, x2 = [rand(32, 64) for _ in range(world)], [rand(8, 128) for _ in range(world)]
    shards, bs = [rand(128, 64) for _ in range(world)], [rand(64, 64) for _ in range(world)]

    def rank(r):
        return (all_reduce(x1[r], group), all_gather_matmul(shards[r], bs[r], group), all_reduce(x2[r], group),
                all_reduce(x1[r], group))

    outs = run_ranks(world, rank)
    for r in range(world):
        assert torch.equal(outs[r][0], sum(x.float() for x in x1).to(BF16))
        close(outs[r][1], torch.cat(shards).double() @ bs[r].double(), f"rank {r}")
        assert torch.equal(outs[r][2], sum(x.float() for x in x2).to(BF16))
        assert torch.equal(outs[r][3], outs[r][0])


def test_arguments_are_checked_before_any_work():
    group = SimulatedGroup(2)

    def rank(r):
        with pytest.raises(ValueError, match=r"a's rows \(64\) must be a positive multiple of 128"):
            all_gather_matmul(rand(64, 64), rand(64, 64), group)
        with pytest.raises(ValueError, match="a's rows \\(128\\) must be a positive multiple of 256"):
            matmul_reduce_scatter(rand(128, 64), rand(64, 64), group)
        with pytest.raises(ValueError, match="both bf16 or both fp16"):
            all_gather_matmul(rand(128, 64), rand(64, 64, dtype=FP16), group)
        with pytest.raises(ValueError, match="multiples of 8"):
            all_gather_matmul(rand(128, 60), rand(60, 64), group)
        with pytest.raises(ValueError, match="bf16 or fp16 tensors"):
            all_reduce(rand(8, 8, dtype=torch.float32), group)
        return group.next_epoch()

    assert run_ranks(2, rank) == [1, 1]          # no call began: each rank's first epoch is still free
    with pytest.raises(RuntimeError, match="used by the ranks of tk.simulate_ranks"):
        all_reduce(rand(8, 8), group)


def test_the_operators_fake_implementations():
    """Shapes and dtypes for torch.compile and torch.export, without running anything."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    from tkpy.kernels import comm

    name = comm.name_of(SimulatedGroup(4))
    with FakeTensorMode():
        a, b = torch.empty(256, 64, dtype=BF16), torch.empty(64, 32, dtype=BF16)
        assert torch.ops.tkpy.all_gather_matmul(a, b, name).shape == (1024, 32)
        a2 = torch.empty(1024, 64, dtype=BF16)
        assert torch.ops.tkpy.matmul_reduce_scatter(a2, b, name).shape == (256, 32)
        assert torch.ops.tkpy.all_reduce(torch.empty(5, 8, dtype=FP16), name).dtype == FP16
        with pytest.raises(ValueError, match="must be a positive multiple of 512"):
            torch.ops.tkpy.matmul_reduce_scatter(a, b, name)
