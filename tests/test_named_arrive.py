"""tk.named_arrive (bar.arrive): two warps taking turns through a pair of named barriers, in the C++ and the
CPU interpreter (and on the GPU where there is one), with the barrier ids as ints or computed at run time; a warp
arriving twice in one phase, and ids out of range, are reported."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tests.gpu_util import on_gpu, poisoned
from tkpy import f32


@tk.kernel(warps=2)
def take_turns(y: tk.gl[f32, 16, 16], rounds: int):
    """x = 0; `rounds` times: warp 0 sets x = 2x + 1, then warp 1 sets x = 3x; y = x. Warp 1 hands warp 0 the
    first turn on barrier 1; each warp hands the other its turn after its update; warp 0 takes back the last
    hand-off after the loop, so every phase of both barriers completes."""
    s = tk.st(f32, 16, 16)
    t = tk.rt(f32, 16, 16)
    with tk.if_(tk.warp_id() == 0):
        tk.zero(t)
        tk.store(s, t)
    with tk.else_():
        tk.named_arrive(1, 2)                 # warp 0 goes first
    tk.sync()
    for i in tk.range(rounds):
        with tk.if_(tk.warp_id() == 0):
            tk.named_sync(1, 2)
            tk.load(t, s)
            tk.map(t, lambda x: x * 2.0 + 1.0, t)
            tk.store(s, t)
            tk.named_arrive(2, 2)
        with tk.else_():
            tk.named_sync(2, 2)
            tk.load(t, s)
            tk.mul(t, t, 3.0)
            tk.store(s, t)
            tk.named_arrive(1, 2)
    with tk.if_(tk.warp_id() == 0):
        tk.named_sync(1, 2)
        tk.load(t, s)
        tk.store(y, t, (0, 0))


def test_turns_in_the_interpreter():
    y = torch.full((16, 16), float("nan"))
    take_turns.interpret[(1,)](y, 4)
    x = 0.0
    for _ in range(4):
        x = 3 * (2 * x + 1)
    assert torch.equal(y, torch.full((16, 16), x))


@tk.kernel(warps=2)
def double_arrival(y: tk.gl[f32, 16, 16]):
    with tk.if_(tk.warp_id() == 1):
        tk.named_arrive(1, 2)
        tk.named_arrive(1, 2)
    tk.sync()
    with tk.if_(tk.warp_id() == 0):
        tk.named_sync(1, 2)


def test_a_second_arrival_in_one_phase_is_reported():
    """Warp 1's second arrival would complete barrier 1 without warp 0, which it is meant to wait for."""
    with pytest.raises(tk.InterpretError, match="warp 1 arrives twice on named barrier 1 in one phase"):
        double_arrival.interpret[(1,)](torch.zeros(16, 16))


def test_named_arrive_emits_bar_arrive_and_compiles():
    y = torch.empty(16, 16)
    src = take_turns.source(y, 2)
    assert "tk::named_arrive(1, 64);" in src and "tk::named_sync(2, 64);" in src
    assert 'bar.arrive %0, %1;' in src
    assert take_turns.trace(y, 2).lower().compile() is not None


@tk.kernel(warps=2)
def take_turns_by_id(y: tk.gl[f32, 16, 16], rounds: int, first: int):
    """take_turns without a branch per barrier: warp w waits for its turn on barrier first + w and hands the
    other its turn on first + (w + 1) % 2, both ids computed at run time."""
    s = tk.st(f32, 16, 16)
    t = tk.rt(f32, 16, 16)
    me = tk.warp_id()
    with tk.if_(me == 0):
        tk.zero(t)
        tk.store(s, t)
    with tk.else_():
        tk.named_arrive(first, 2)
    tk.sync()
    for i in tk.range(rounds):
        tk.named_sync(first + me, 2)
        tk.load(t, s)
        with tk.if_(me == 0):
            tk.map(t, lambda x: x * 2.0 + 1.0, t)
        with tk.else_():
            tk.mul(t, t, 3.0)
        tk.store(s, t)
        tk.named_arrive(first + (me + 1) % 2, 2)
    with tk.if_(me == 0):
        tk.named_sync(first, 2)
        tk.load(t, s)
        tk.store(y, t, (0, 0))


def expected_turns(rounds: int) -> torch.Tensor:
    x = 0.0
    for _ in range(rounds):
        x = 3 * (2 * x + 1)
    return torch.full((16, 16), x)


def test_runtime_barrier_ids_in_the_interpreter_and_the_cpp():
    y = torch.full((16, 16), float("nan"))
    take_turns_by_id.interpret[(1,)](y, 5, 3)
    assert torch.equal(y, expected_turns(5))
    src = take_turns_by_id.source(y, 5, 3)
    assert "tk::named_sync(first + warpid, 64);" in src and "tk::named_arrive(first + (warpid + 1) % 2, 64);" in src
    assert take_turns_by_id.trace(y, 5, 3).lower().compile() is not None


def test_a_runtime_barrier_id_out_of_range_is_reported():
    with pytest.raises(tk.InterpretError, match="named barrier id 16 is not in 1..15"):
        take_turns_by_id.interpret[(1,)](torch.zeros(16, 16), 1, 15)


@pytest.mark.parametrize("bad", [0, 16, 1.0, True])
def test_bad_barrier_ids_are_refused_when_traced(bad):
    @tk.kernel(warps=2)
    def sync_on(y: tk.gl[f32, 16, 16]):
        tk.named_sync(bad, 2)
    with pytest.raises(tk.TraceError, match="named_sync: barrier id must be an int in 1..15"):
        sync_on.source(torch.zeros(16, 16))


@on_gpu
def test_runtime_barrier_ids_on_the_gpu():
    y = poisoned(16, 16, dtype=torch.float32)
    take_turns_by_id[(1,)](y, 5, 3)
    torch.cuda.synchronize()
    assert torch.equal(y.cpu(), expected_turns(5))
