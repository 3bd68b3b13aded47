"""Peer memory in the DSL (issue 36): tk.pgl parameters and tk.PGL arguments, tk.signal / tk.wait_signal, their C++,
their trace-time checks, and the interpreter running kernels over several simulated GPUs (tk.simulate_ranks).
The same kernels on GPUs: tests/test_gpu_pgl.py."""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32, i32

W, BLOCKS, N = 2, 4, 64


READY, DONE = 0, 1


def exchange_kernel(world: int):
    """An all-gather, block by block: each block waits until every rank has read its rows of the previous call (DONE),
    stores its 16 rows of `src` into this rank's `x`, signals every rank that they are there (READY), then waits for
    every rank's same rows, copies them into out[p] and tells that rank it has read them."""
    @tk.kernel(warps=1)
    def exchange(src: tk.gl[f32, "N", 16], x: tk.pgl[tk.gl[f32, "N", 16], world],
                 flags: tk.pgl[tk.gl[i32, 2, world, "B"], world], out: tk.gl[f32, world, "N", 16], epoch: int):
        b = tk.block_idx.x
        t = tk.rt(f32, 16, 16)
        tk.load(t, src, (b, 0))
        for p in range(x.world):
            tk.wait_signal(flags.local, (DONE, p, b), epoch - 1)
        tk.store(x.local, t, (b, 0))
        for p in range(x.world):
            tk.signal(flags[p], (READY, x.rank, b), epoch)
        for p in range(x.world):
            tk.wait_signal(flags.local, (READY, p, b), epoch)
            tk.load(t, x[p], (b, 0))
            tk.store(out, t, (p, b, 0))
            tk.signal(flags[p], (DONE, x.rank, b), epoch)
    return exchange


class Group:
    """What `world` simulated ranks share: each one's x and flags (CPU tensors), and each one's input and output."""

    def __init__(self, world: int):
        self.world = world
        self.x = [torch.zeros(N, 16) for _ in range(world)]
        self.flags = [torch.zeros(2, world, BLOCKS, dtype=torch.int32) for _ in range(world)]
        self.src = [torch.randn(N, 16) for _ in range(world)]
        self.out = [torch.full((world, N, 16), float("nan")) for _ in range(world)]
        self.sent: dict = {}            # (rank, epoch) -> its src in that call
        self.got: dict = {}             # (rank, epoch) -> its out after that call

    def args(self, rank: int, epoch: int):
        return (self.src[rank], tk.PGL(self.x, rank), tk.PGL(self.flags, rank), self.out[rank], epoch)


@pytest.mark.parametrize("world", [2, 4])
def test_ranks_exchange_through_peer_memory_and_signals(world):
    """Every rank ends each call with every rank's rows of that call, over several calls (the flags only grow: an
    epoch a call). Without the DONE wait a rank would overwrite its rows while another still reads the last call's:
    the interpreter's ranks run as freely as GPUs do (a thread each), and this test then sees rows of the next call
    (9 of 30 calls did in a trial of the kernel without it)."""
    k, g = exchange_kernel(world), Group(world)

    def rank(r):
        for epoch in (1, 2, 3):
            g.src[r].normal_()          # new data each call
            g.sent[r, epoch] = g.src[r].clone()
            k.interpret[(BLOCKS,)](*g.args(r, epoch))
            g.got[r, epoch] = g.out[r].clone()
        return r

    assert tk.simulate_ranks(world, rank) == list(range(world))
    for (r, epoch), got in g.got.items():
        assert all(torch.equal(got[p], g.sent[p, epoch]) for p in range(world)), (r, epoch)
    assert all(torch.equal(f, torch.full_like(f, 3)) for f in g.flags)


def test_a_rank_that_never_signals_is_a_deadlock_naming_every_rank():
    k, g = exchange_kernel(W), Group(W)

    def rank(r):
        if r == 0:
            k.interpret[(BLOCKS,)](*g.args(r, 1))

    with pytest.raises(tk.DeadlockError) as e:
        tk.simulate_ranks(W, rank)
    message = str(e.value)
    assert "every rank still running waits for a signal" in message and "rank 0:" in message
    assert "`flags_0`, which holds 0: waiting for it to reach 1" in message and "test_pgl.py:" in message


def test_a_wait_for_another_gpu_outside_simulate_ranks_says_how_to_run_it():
    k, g = exchange_kernel(W), Group(W)
    with pytest.raises(tk.DeadlockError, match="run the ranks together with tk.simulate_ranks"):
        k.interpret[(BLOCKS,)](*g.args(0, 1))


def test_a_rank_that_raises_is_reported_and_frees_the_others():
    def rank(r):
        if r == 1:
            raise ValueError("rank 1 broke")
        return r

    with pytest.raises(ValueError, match="rank 1 broke"):
        tk.simulate_ranks(3, rank)
    assert tk.simulated_rank() is None


@tk.kernel(warps=1)
def handoff(data: tk.gl[f32, 16, 16], flags: tk.gl[i32, 1], out: tk.gl[f32, "N", 16]):
    """Block 0 waits for block 1's signal before it reads what block 1 wrote: within one GPU, across blocks."""
    t = tk.rt(f32, 16, 16)
    with tk.if_(tk.block_idx.x == 1):
        tk.load(t, out, (1, 0))
        tk.mul(t, t, 3.0)
        tk.store(data, t, (0, 0))
        tk.signal(flags, (0,), 1, op="add")
    with tk.else_():
        tk.wait_signal(flags, (0,), 1)
        tk.load(t, data, (0, 0))
        tk.store(out, t, (0, 0))


def test_a_block_waits_for_a_later_blocks_signal():
    """A grid that waits for signals runs all its blocks at once (a resident persistent grid): block 0, which the
    interpreter would otherwise run to its end before starting block 1, waits for block 1."""
    out = torch.randn(32, 16)
    data, flags = torch.zeros(16, 16), torch.zeros(1, dtype=torch.int32)
    second = out[16:].clone()
    handoff.interpret[(2,)](data, flags, out)
    assert torch.equal(out[:16], 3 * second) and flags.item() == 1


def tma_gather_kernel(world: int):
    """TMA loads of every peer's tile (after its signal), TMA stores of them into this rank's output."""
    @tk.kernel(warps=1)
    def tma_gather(x: tk.pgl[tk.gl[bf16, "N", 64], world], flags: tk.pgl[tk.gl[i32, world], world],
                   out: tk.gl[bf16, world, "N", 64], epoch: int):
        tile = tk.st(bf16, 16, 64)
        sem = tk.semaphore()
        tk.init_semaphore(sem, 1)
        for p in range(x.world):
            tk.signal(flags[p], (x.rank,), epoch)
        for p in range(x.world):
            tk.wait_signal(flags.local, (p,), epoch)
            tk.tma.expect(sem, tile)
            tk.tma.load_async(tile, x[p], (tk.block_idx.x, 0), sem)
            tk.wait(sem, p % 2)
            tk.tma.store_async(out, tile, (p, tk.block_idx.x, 0))
            tk.tma.store_commit_group()
            tk.tma.store_async_wait(0)
    return tma_gather


def test_tma_loads_from_peers():
    k = tma_gather_kernel(W)
    xs = [torch.randn(32, 64).to(torch.bfloat16) for _ in range(W)]
    flags = [torch.zeros(W, dtype=torch.int32) for _ in range(W)]
    outs = [torch.full((W, 32, 64), float("nan")).to(torch.bfloat16) for _ in range(W)]

    def rank(r):
        k.interpret[(2,)](tk.PGL(xs, r), tk.PGL(flags, r), outs[r], 5)

    tk.simulate_ranks(W, rank)
    assert all(torch.equal(outs[r][p], xs[p]) for r in range(W) for p in range(W))


def test_the_cpp_of_peers_and_signals_compiles():
    """Each rank's gl is a parameter of its own (its pointer, its tensor maps); a signal is one release by lane 0,
    a wait every lane's acquire loads; the kernel compiles for sm_90a, with the waits bounded in debug mode."""
    g = Group(W)
    k = exchange_kernel(W)
    source = k.source(*g.args(1, 1))
    assert "x_0_ptr" in source and "x_1_ptr" in source and "tk::store(x_1, t" in source
    assert "if (laneid == 0) tk::signal_set(flags_0.at(0, 0, 1, block_x), epoch);" in source
    assert "tk::wait_signal(flags_1.at(0, 0, 0, block_x), epoch);" in source
    assert "st.release.sys.global.s32" in source and "ld.acquire.sys.global.s32" in source
    assert k.compile(*g.args(1, 1)).resources.found
    debug = k.variant(debug=True)
    assert "tk::debug::wait_signal(" in debug.source(*g.args(0, 1))
    assert debug.compile(*g.args(0, 1)).resources.found
    tma = tma_gather_kernel(W)
    xs = [torch.zeros(32, 64, dtype=torch.bfloat16) for _ in range(W)]
    args = (tk.PGL(xs, 0), tk.PGL([torch.zeros(W, dtype=torch.int32)] * W, 0), torch.zeros(W, 32, 64,
                                                                                       dtype=torch.bfloat16), 1)
    tma_source = tma.source(*args)
    assert "x_0_tma_16x64_sw128" in tma_source and "x_1_tma_16x64_sw128" in tma_source
    assert tma.compile(*args).resources.found


def test_a_signal_must_follow_its_tma_stores_full_wait():
    @tk.kernel(warps=1)
    def early(x: tk.gl[bf16, 16, 64], flags: tk.gl[i32, 1]):
        tile = tk.st(bf16, 16, 64)
        tk.tma.store_async(x, tile, (0, 0))
        tk.tma.store_commit_group()
        tk.tma.store_async_wait(0, read_only=True)          # the tile may be reused, but the data is not yet there
        tk.signal(flags, (0,), 1)

    with pytest.raises(tk.TraceError, match="tk.signal after a TMA store that may still be in flight") as e:
        early.trace(torch.zeros(16, 64, dtype=torch.bfloat16), torch.zeros(1, dtype=torch.int32))
    assert e.value.loc.line == early.fn.__code__.co_firstlineno + 6


def test_pgl_misuse_is_explained():
    k, g = exchange_kernel(W), Group(W)
    src, x, flags, out, epoch = g.args(0, 1)
    with pytest.raises(tk.ArgumentError, match="`x` is a tk.pgl of 2 GPUs: pass a tk.PGL of 2 tensors"):
        k.interpret[(1,)](src, g.x[0], flags, out, epoch)
    with pytest.raises(tk.ArgumentError, match="`x` is a tk.pgl of 2 GPUs, got a tk.PGL of 3"):
        k.interpret[(1,)](src, tk.PGL(g.x + [g.x[0]], 0), flags, out, epoch)
    with pytest.raises(tk.ArgumentError, match=r"rank 0's is \(4, 16\) .*, rank 1's \(8, 16\)"):
        tk.PGL([torch.zeros(4, 16), torch.zeros(8, 16)], 0)
    with pytest.raises(tk.ArgumentError, match="rank must be an int in 0..1"):
        tk.PGL(g.x, 2)
    with pytest.raises(ValueError, match="a pgl spans 1 to 8 GPUs"):
        tk.pgl[tk.gl[f32, 16], 9]
    with pytest.raises(TypeError, match=r"tk.pgl\[tk.gl\[dtype, dims...\], world\]"):
        tk.pgl[f32, 16]


@tk.kernel(warps=1)
def runtime_peer(x: tk.pgl[tk.gl[bf16, 32, 64], 3], y: tk.gl[bf16, 32, 64], p: int):
    """Rows of rank p's tensor, p a runtime int: plain loads and TMA loads of the gl picked while the kernel runs."""
    t = tk.rt(f32, 16, 64)
    tk.load(t, x[p], (0, 0))
    tk.store(y, t, (0, 0))
    tile = tk.st(bf16, 16, 64)
    sem = tk.semaphore()
    tk.init_semaphore(sem, 1)
    tk.tma.expect(sem, tile)
    tk.tma.load_async(tile, x[p], (1, 0), sem)
    tk.wait(sem, 0)
    tk.tma.store_async(y, tile, (1, 0))
    tk.tma.store_commit_group()
    tk.tma.store_async_wait(0)


def test_a_pgl_picks_a_rank_at_run_time():
    xs = [torch.randn(32, 64).to(torch.bfloat16) for _ in range(3)]
    for p in range(3):
        y = torch.full((32, 64), float("nan")).to(torch.bfloat16)
        runtime_peer.interpret[(1,)](tk.PGL(xs, 0), y, p)
        assert torch.equal(y, xs[p])
    source = runtime_peer.source(tk.PGL(xs, 0), y, 1)
    assert "tk::load(t, tk::peer(p, x_0, x_1, x_2), 0, 0, 0, 0);" in source
    assert ("&tk::peer(p, x_0_tma_16x64_sw128, x_1_tma_16x64_sw128, x_2_tma_16x64_sw128)" in source
            and "const __grid_constant__ tk::CUtensorMap x_2_tma_16x64_sw128" in source)
    assert "load %t, @x[p], (0, 0, 0, 0)" in runtime_peer.ir(tk.PGL(xs, 0), y, 1)
    assert runtime_peer.compile(tk.PGL(xs, 0), y, 1).resources.found
    with pytest.raises(tk.InterpretError, match="rank 3 is out of range for a pgl of 3 GPUs"):
        runtime_peer.interpret[(1,)](tk.PGL(xs, 0), y, 3)


def test_a_pgl_is_not_a_gl():
    @tk.kernel(warps=1)
    def whole(x: tk.pgl[tk.gl[f32, 16, 16], 2], y: tk.gl[f32, 16, 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (0, 0))
        tk.store(y, t, (0, 0))

    @tk.kernel(warps=1)
    def by_float(x: tk.pgl[tk.gl[f32, 16, 16], 2], y: tk.gl[f32, 16, 16], s: float):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x[s], (0, 0))

    xs = [torch.zeros(16, 16), torch.zeros(16, 16)]
    with pytest.raises(tk.TraceError, match=r"x: a tk.pgl of 2 GPUs' .* \(pick a rank's gl: x\[p\], or x.local"):
        whole.trace(tk.PGL(xs, 0), xs[0])
    with pytest.raises(tk.TraceError, match="a rank is an integer, got a f32 scalar"):
        by_float.trace(tk.PGL(xs, 0), xs[0], 1.0)


def test_a_parameter_may_not_take_a_pgls_names():
    with pytest.raises(tk.TraceError, match="`x_1` clashes with a name the pgl parameter `x` takes"):
        @tk.kernel(warps=1)
        def clash(x: tk.pgl[tk.gl[f32, 16, 16], 2], x_1: tk.gl[f32, 16, 16]):
            pass
