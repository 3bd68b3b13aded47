"""The interpreter's warp order (TKPY_INTERPRET_ORDER: forward, reverse, random:SEED): a race between warps that
only a barrier should order gives results that depend on it, and correct kernels give the same results in
every order. No GPU needed."""
from __future__ import annotations

import functools

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.interpret import ORDER_ENV_VAR

import gpu_util
import test_attention_cpu as attention_cpu

rand = functools.partial(gpu_util.rand, device="cpu")
ORDERS = ["forward", "reverse", "random:1", "random:2"]


@tk.kernel(warps=2, name="last_writer")
def last_writer(out: tk.gl[f32, 16, 16]):
    """Both warps store their index into one shared tile with no barrier between the stores: a race."""
    tile = tk.st(f32, 16, 16)
    mine = tk.rt(f32, 16, 16)
    tk.fill(mine, tk.warp_id())
    tk.store(tile, mine)
    tk.sync()
    with tk.if_(tk.warp_id() == 0):
        tk.load(mine, tile)
        tk.store(out, mine, (0, 0))


def test_a_race_between_warps_depends_on_the_order(monkeypatch):
    """The last writer wins: warp 1 in the forward order (warp 0 runs first up to the barrier), warp 0 in reverse."""
    winners = {}
    for order in ("forward", "reverse"):
        monkeypatch.setenv(ORDER_ENV_VAR, order)
        out = torch.full((16, 16), float("nan"))
        last_writer.interpret[(1,)](out)
        winners[order] = set(out.flatten().tolist())
    assert winners == {"forward": {1.0}, "reverse": {0.0}}


def test_an_unknown_order_is_an_error(monkeypatch):
    monkeypatch.setenv(ORDER_ENV_VAR, "sideways")
    with pytest.raises(ValueError, match="warp order must be 'forward', 'reverse' or 'random:SEED'"):
        last_writer.interpret[(1,)](torch.zeros(16, 16))


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("options", [dict(q_preload=True), dict(q_registers=False),
                                     dict(consumer_warpgroups=3, split_kv=True)],
                         ids=["q_preload", "q_shared", "3wg_splitkv"])
def test_attention_is_the_same_in_every_order(monkeypatch, order, options):
    """The attention kernel's turns, stage rings and query-tile reuse hold in every warp order: bottom-right causal
    with tasks of no steps among the others (where q_preload's first draft raced), several tasks per block, GQA."""
    monkeypatch.setenv(ORDER_ENV_VAR, order)
    d = 64 if options.get("consumer_warpgroups") == 3 else 128
    n, nk = 460, 200
    q, k, v = rand(1, 2, n, d, dtype=torch.bfloat16), rand(1, 1, nk, d, dtype=torch.bfloat16), \
        rand(1, 1, nk, d, dtype=torch.bfloat16)
    o, lse = attention_cpu.interpret(q, k, v, "bottom_right", 0.1, 2, **options)
    attention_cpu.check(o, lse, *attention_cpu.reference(q, k, v, "bottom_right", scale=0.1), n)


@pytest.mark.parametrize("order", ORDERS)
def test_cluster_pairs_are_the_same_in_every_order(monkeypatch, order):
    """cluster=2: the two blocks' multicast loads into each other's stages and their cluster-wide releases hold in
    every warp order (GQA, a partial key tile, two tasks per cluster)."""
    monkeypatch.setenv(ORDER_ENV_VAR, order)
    q = rand(1, 2, 512, 128, dtype=torch.bfloat16)
    k, v = rand(1, 1, 200, 128, dtype=torch.bfloat16), rand(1, 1, 200, 128, dtype=torch.bfloat16)
    o, lse = attention_cpu.interpret(q, k, v, False, 0.1, 2, "_cluster2", cluster=2)
    attention_cpu.check(o, lse, *attention_cpu.reference(q, k, v, False, scale=0.1), 512)


@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("options", [dict(), dict(consumer_warpgroups=3, split_kv=True)], ids=["d128", "3wg_splitkv"])
def test_causal_cluster_pairs_are_the_same_in_every_order(monkeypatch, order, options):
    """cluster=2, causal: a block skipping the stages of its peer's extra key tiles (both rings with split_kv) and
    the blocks taking the upper tile in turns hold in every warp order (bottom-right, tasks of no steps, GQA)."""
    monkeypatch.setenv(ORDER_ENV_VAR, order)
    d = 64 if options else 128
    n, nk = 700, 450
    q = rand(1, 2, n, d, dtype=torch.bfloat16)
    k, v = rand(1, 1, nk, d, dtype=torch.bfloat16), rand(1, 1, nk, d, dtype=torch.bfloat16)
    o, lse = attention_cpu.interpret(q, k, v, "bottom_right", 0.1, 2, "_cluster2", cluster=2, **options)
    attention_cpu.check(o, lse, *attention_cpu.reference(q, k, v, "bottom_right", scale=0.1), n)


@pytest.mark.parametrize("order", ORDERS)
def test_split_k_is_the_same_in_every_order(monkeypatch, order):
    """Split-K: the splits' direct stores, the query tile's reuse with no O staged in it, and the merge, in every
    warp order (causal bottom-right with rows that see no key, GQA, several tasks per block)."""
    monkeypatch.setenv(ORDER_ENV_VAR, order)
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    q = rand(1, 2, 460, 128, dtype=torch.bfloat16)
    k, v = rand(1, 1, 700, 128, dtype=torch.bfloat16), rand(1, 1, 700, 128, dtype=torch.bfloat16)
    o, lse = attention_cpu.launch_split(q, k, v, "bottom_right", 3)
    attention_cpu.check(o, lse, *attention_cpu.reference(q, k, v, "bottom_right", scale=0.1), 460)
