"""tk.named_arrive (bar.arrive): two warps taking turns through a pair of named barriers, in the C++ and the
CPU interpreter; a warp arriving twice in one phase is reported. No GPU needed."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
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
