"""tk.atomic_add, tk.threadfence and tk.warpgroup.any: counters between blocks and the "last block merges"
hand-off (each block writes its part, fences, counts itself in; the block that counts last reads every part
and resets the counter for the next launch), written out and as tk.last_block (also a tree of them over groups of
blocks, each merge spread over the whole block), in the CPU interpreter, the C++ and on the GPU where there is
one."""
from __future__ import annotations

import re

import pytest
import torch

import tkpy as tk
from tests.gpu_util import on_gpu, poisoned, rand
from tkpy import f32, i32


@tk.kernel(warps=2)
def count(counter: tk.gl[i32, 4], seen: tk.gl[f32, "G", 32, 16]):
    """Every warp of every block counts itself in on counter[2]; row (warp) of block b's 16 x 16 tile of `seen`
    gets the count before it."""
    old = tk.atomic_add(counter, 2, 1)
    t = tk.rt(f32, 16, 16)
    tk.fill(t, old)
    tk.store(seen, t, (tk.block_idx.x, tk.warp_id(), 0))


def test_counting_in_the_interpreter():
    counter = torch.tensor([5, 6, 0, 7], dtype=torch.int32)
    seen = torch.full((3, 32, 16), float("nan"))
    count.interpret[(3,)](counter, seen)
    assert counter.tolist() == [5, 6, 6, 7]
    assert sorted(seen[:, ::16, 0].flatten().tolist()) == list(range(6))
    assert torch.equal(seen, seen[:, ::16, :1].repeat_interleave(16, 1).expand(3, 32, 16))


@tk.kernel(warps=1)
def last_block_sums(parts: tk.gl[f32, "G", 16, 16], counter: tk.gl[i32, 1], total: tk.gl[f32, 16, 16],
                    x: tk.gl[f32, "G", 16, 16]):
    """Block b writes parts[b] = 2 x[b]; the last block to count itself in writes total = sum of parts and
    takes the counter back to 0."""
    t = tk.rt(f32, 16, 16)
    tk.load(t, x, (tk.block_idx.x, 0, 0))
    tk.mul(t, t, 2.0)
    tk.store(parts, t, (tk.block_idx.x, 0, 0))
    tk.threadfence()                                    # this block's part before its count
    blocks = tk.grid_dim.x
    old = tk.atomic_add(counter, 0, 1)
    with tk.if_(old == blocks - 1):                     # every other part is written and fenced
        tk.threadfence()
        acc, part = tk.rt(f32, 16, 16), tk.rt(f32, 16, 16)
        tk.zero(acc)
        for b in tk.range(blocks):
            tk.load(part, parts, (b, 0, 0))
            tk.add(acc, acc, part)
        tk.store(total, acc)
        tk.atomic_add(counter, 0, -blocks)


def run_last_block(device: str, blocks: int, launches: int, launch):
    counter = torch.zeros(1, dtype=torch.int32, device=device)
    for _ in range(launches):
        x = rand(blocks, 16, 16, dtype=torch.float32, device=device)
        parts, total = poisoned(blocks, 16, 16, dtype=torch.float32, device=device), \
            poisoned(16, 16, dtype=torch.float32, device=device)
        launch(parts, counter, total, x)
        expected = torch.zeros(16, 16)
        for part in 2 * x.cpu():                # the kernel's order of fp32 additions: equal to the bit
            expected += part
        assert torch.equal(total.cpu(), expected)
        assert counter.item() == 0


def test_last_block_merges_in_the_interpreter():
    run_last_block("cpu", 5, 2, lambda *args: last_block_sums.interpret[(5,)](*args))


@tk.kernel(warps=4)
def block_totals(x: tk.gl[f32, "G", 4, 256], parts: tk.gl[f32, "G"], ticket: tk.gl[i32, 1], total: tk.gl[f32, 2]):
    """tk.last_block: each warp's sum of its row of block b's x, over the block (tk.block.sum) into parts[b]; the
    last block writes the sum of the parts in block order and the grid's size."""
    v = tk.rv(f32, 256, "contig")
    tk.load(v, x, (tk.block_idx.x, tk.warp_id(), 0))
    part = tk.block.sum(v)
    with tk.if_(tk.warp_id() == 0):
        tk.store(parts, part, (tk.block_idx.x,))
    with tk.last_block(ticket):
        acc = tk.var(0.0, "acc")
        for b in tk.range(tk.grid_dim.x):
            p = tk.var(0.0, "p")
            tk.load(p, parts, (b,))
            acc += p
        tk.store(total, acc, (0,))
        tk.store(total, tk.grid_dim.x * 1.0 + 0.5, (1,))


def run_block_totals(device: str, blocks: int, launches: int, launch):
    """`launches` launches on one ticket (zero at first): each total is the parts' sum in block order, to the bit,
    written once (by the last block), and the ticket is back at 0 after each."""
    ticket = torch.zeros(1, dtype=torch.int32, device=device)
    for _ in range(launches):
        x = rand(blocks, 4, 256, dtype=torch.float32, device=device)
        parts, total = poisoned(blocks, dtype=torch.float32, device=device), poisoned(2, dtype=torch.float32,
                                                                                      device=device)
        launch(x, parts, ticket, total)
        expected = torch.zeros((), dtype=torch.float32)
        for part in parts.cpu():
            expected += part
        torch.testing.assert_close(parts.cpu().double(), x.cpu().double().sum((1, 2)), rtol=1e-5, atol=1e-4)
        assert total[0].item() == expected.item() and total[1].item() == blocks + 0.5
        assert ticket.item() == 0


def test_last_block_context_in_the_interpreter():
    run_block_totals("cpu", 6, 2, lambda *args: block_totals.interpret[(6,)](*args))
    src = block_totals.source(torch.zeros(3, 4, 256), torch.zeros(3), torch.zeros(1, dtype=torch.int32),
                              torch.zeros(2))
    assert src.count("tk::threadfence();") == 2 and "tk::store_scalar_int(ticket, 0, 0, 0, 0, 0);" in src
    assert len(re.findall(r"test_atomic.py:\d+  with tk.last_block\(ticket\):", src)) == 4 and "contextlib" not in src


@tk.kernel(warps=4)
def group_totals(x: tk.gl[f32, "G", 4, 256], parts: tk.gl[f32, "P", 256], sums: tk.gl[f32, "N", 256],
                 tickets: tk.gl[i32, "T"], total: tk.gl[f32, 5, 256], size: int):
    """A tree of hand-offs, each merge spread over the whole block: warp w of block b writes parts[4 b + w] = 2 x[b,
    w]; the last block of each group of `size` blocks (ticket 1 + group) adds its group's parts, warp w those of
    slot w, in block order, into sums[4 group + w]; the last of those (ticket 0) adds the groups' in order into total[w]
    and, over a block barrier, total[4] = the sum of the four."""
    v = tk.rv(f32, 256, "contig")
    tk.load(v, x, (tk.block_idx.x, tk.warp_id(), 0))
    tk.mul(v, v, 2.0)
    tk.store(parts, v, (tk.block_idx.x * 4 + tk.warp_id(), 0))
    group = tk.let(tk.block_idx.x // size, "group")
    groups = tk.let(tk.cdiv(tk.grid_dim.x, size), "groups")
    acc, part = tk.rv(f32, 256, "contig"), tk.rv(f32, 256, "contig")
    with tk.last_block(tickets, 1 + group, arrivals=tk.call("min", size, tk.grid_dim.x - group * size),
                       whole_block=True):
        tk.zero(acc)
        for b in tk.range(group * size, tk.call("min", group * size + size, tk.grid_dim.x)):
            tk.load(part, parts, (b * 4 + tk.warp_id(), 0))
            tk.add(acc, acc, part)
        tk.store(sums, acc, (group * 4 + tk.warp_id(), 0))
        with tk.last_block(tickets, 0, arrivals=groups, whole_block=True):
            tk.zero(acc)
            for g in tk.range(groups):
                tk.load(part, sums, (g * 4 + tk.warp_id(), 0))
                tk.add(acc, acc, part)
            tk.store(total, acc, (tk.warp_id(), 0))
            slots = tk.sv(f32, 256, count=4)
            tk.store(slots[tk.warp_id()], acc)
            tk.sync()
            with tk.if_(tk.warp_id() == 0):
                for w in range(1, 4):
                    tk.load(part, slots[w])
                    tk.add(acc, acc, part)
                tk.store(total, acc, (4, 0))


def run_group_totals(device: str, blocks: int, size: int, launches: int, launch):
    """`launches` launches on one set of tickets (zero at first): each total is the groups' sums, each the sum of its
    blocks' parts in block order, to the bit, written once, and every ticket back at 0 after each."""
    groups = -(-blocks // size)
    tickets = torch.zeros(groups + 1, dtype=torch.int32, device=device)
    for _ in range(launches):
        x = rand(blocks, 4, 256, dtype=torch.float32, device=device)
        parts, sums = (poisoned(n, 256, dtype=torch.float32, device=device) for n in (blocks * 4, groups * 4))
        total = poisoned(5, 256, dtype=torch.float32, device=device)
        launch(x, parts, sums, tickets, total, size)
        expected = torch.zeros(4, 256)
        for g in range(groups):
            group = torch.zeros(4, 256)
            for part in 2 * x.cpu()[g * size:(g + 1) * size]:
                group += part
            expected += group
        assert torch.equal(total.cpu()[:4], expected)
        assert torch.equal(total.cpu()[4], expected[0] + expected[1] + expected[2] + expected[3])
        assert not tickets.any()


@pytest.mark.parametrize("blocks,size", [(7, 3), (6, 6), (5, 1)])
def test_a_tree_of_whole_block_hand_offs_in_the_interpreter(blocks, size):
    run_group_totals("cpu", blocks, size, 2, lambda *args: group_totals.interpret[(blocks,)](*args))


def test_whole_block_hand_offs_in_the_cpp():
    """Each whole-block hand-off: warp 0 counts in and says the verdict through shared memory, a second block
    barrier, every warp fences before the body."""
    args = (torch.zeros(3, 4, 256), torch.zeros(12, 256), torch.zeros(4, 256), torch.zeros(3, dtype=torch.int32),
            torch.zeros(5, 256), 2)
    src = group_totals.source(*args)
    assert src.count("tk::warp_atomic_add(tickets.at(") == 2 and src.count("tk::threadfence();") == 4
    assert src.count("__syncthreads();") == 5, src          # 2 a hand-off, 1 in the body
    assert group_totals.trace(*args).lower().compile() is not None


def test_last_block_checks_its_arrivals():
    @tk.kernel(warps=1)
    def float_arrivals(ticket: tk.gl[i32, 4]):
        with tk.last_block(ticket, arrivals=1.5):
            pass
    with pytest.raises(tk.TraceError, match="last_block: arrivals is a number of blocks, an int"):
        float_arrivals.source(torch.zeros(4, dtype=torch.int32))


def test_last_block_takes_an_int32_ticket():
    @tk.kernel(warps=1)
    def float_ticket(ticket: tk.gl[f32, 4]):
        with tk.last_block(ticket):
            pass
    with pytest.raises(tk.TraceError, match="last_block: the ticket is an int32 global tensor"):
        float_ticket.source(torch.zeros(4))


@tk.kernel(warps=8)
def vote_any(flags: tk.gl[f32, 1, 128, 16], chosen: int):
    """Each warpgroup votes whether warp `chosen` is among its warps; every warp writes the verdict."""
    yes = tk.warpgroup.any(tk.warp_id() == chosen, 1 + tk.warpgroup.id())
    t = tk.rt(f32, 16, 16)
    tk.fill(t, 0.0)
    with tk.if_(yes):
        tk.fill(t, 1.0)
    tk.store(flags, t, (0, tk.warp_id(), 0))


@pytest.mark.parametrize("chosen", [1, 6, 9])
def test_warpgroup_any_in_the_interpreter(chosen):
    flags = torch.full((1, 128, 16), float("nan"))
    vote_any.interpret[(1,)](flags, chosen)
    verdicts = flags[0, ::16, 0].tolist()
    assert verdicts == [float(chosen // 4 == w // 4) for w in range(8)]


def test_the_cpp():
    counter, seen = torch.zeros(4, dtype=torch.int32), torch.zeros(3, 32, 16)
    src = count.source(counter, seen)
    assert "old = tk::warp_atomic_add(counter.at(0, 0, 0, 2), 1);" in src
    src = last_block_sums.source(torch.zeros(3, 16, 16), torch.zeros(1, dtype=torch.int32), torch.zeros(16, 16),
                                 torch.zeros(3, 16, 16))
    assert src.count("tk::threadfence();") == 2 and "atom.acq_rel.gpu.global.add.s32" in src
    assert "tk::named_any(warpid == chosen, 1 + warpid / 4, 128);" in vote_any.source(torch.zeros(1, 128, 16), 3)
    for k, args in ((count, (counter, seen)), (vote_any, (torch.zeros(1, 128, 16), 3))):
        assert k.trace(*args).lower().compile() is not None


def test_bad_atomics_are_refused():
    @tk.kernel(warps=1)
    def on_floats(x: tk.gl[f32, 16, 16]):
        tk.atomic_add(x, (0, 0), 1)

    @tk.kernel(warps=1)
    def float_value(c: tk.gl[i32, 4]):
        tk.atomic_add(c, 0, 1.5)

    @tk.kernel(warps=1)
    def five_coords(c: tk.gl[i32, 4]):
        tk.atomic_add(c, (0, 0, 0, 0, 0), 1)
    with pytest.raises(tk.TraceError, match="atomic_add adds to int32 global tensors"):
        on_floats.source(torch.zeros(16, 16))
    with pytest.raises(tk.TraceError, match="must be integers"):
        float_value.source(torch.zeros(4, dtype=torch.int32))
    with pytest.raises(tk.TraceError, match="coordinates take 1 to 4 entries"):
        five_coords.source(torch.zeros(4, dtype=torch.int32))


def test_int32_tensors_are_for_scalars_and_atomics_only():
    @tk.kernel(warps=1)
    def copies_ints(c: tk.gl[i32, 16, 16], y: tk.gl[f32, 16, 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, c)
        tk.store(y, t)
    with pytest.raises(tk.TraceError, match=r"`c` is an int32 global tensor, which only scalars take \(an int tk.var "
                       "loads an element, an int stores into one, tk.atomic_add adds to an int32 one\\)"):
        copies_ints.source(torch.zeros(16, 16, dtype=torch.int32), torch.zeros(16, 16))


def test_an_atomic_past_the_tensor_is_reported():
    @tk.kernel(warps=1)
    def past_the_end(counter: tk.gl[i32, "C"]):
        tk.atomic_add(counter, 2, 1)
    with pytest.raises(tk.InterpretError, match="out-of-bounds access of `counter`"):
        past_the_end.interpret[(1,)](torch.zeros(2, dtype=torch.int32))


@on_gpu
def test_counting_on_the_gpu():
    counter = torch.tensor([5, 6, 0, 7], dtype=torch.int32, device="cuda")
    seen = poisoned(300, 32, 16, dtype=torch.float32)
    count[(300,)](counter, seen)
    torch.cuda.synchronize()
    assert counter.tolist() == [5, 6, 600, 7]
    assert sorted(seen[:, ::16, 0].flatten().int().tolist()) == list(range(600))


@on_gpu
def test_last_block_merges_on_the_gpu():
    """264 blocks (two an SM) over 20 launches: the total is right and the counter back at 0 after each."""
    run_last_block("cuda", 264, 20, lambda *args: last_block_sums[(264,)](*args))


@on_gpu
def test_last_block_context_on_the_gpu():
    """tk.last_block over 264 and 1000 blocks (more than run at once), 20 launches each on one ticket."""
    for blocks in (264, 1000):
        run_block_totals("cuda", blocks, 20, lambda *args: block_totals[(blocks,)](*args))


@on_gpu
@pytest.mark.parametrize("blocks,size", [(264, 16), (1000, 7), (132, 132)])
def test_a_tree_of_whole_block_hand_offs_on_the_gpu(blocks, size):
    """Groups of blocks (the last one ragged), more blocks than run at once, 20 launches on one set of tickets."""
    run_group_totals("cuda", blocks, size, 20, lambda *args: group_totals[(blocks,)](*args))


@on_gpu
@pytest.mark.parametrize("chosen", [2, 7])
def test_warpgroup_any_on_the_gpu(chosen):
    flags = poisoned(1, 128, 16, dtype=torch.float32)
    vote_any[(1,)](flags, chosen)
    torch.cuda.synchronize()
    assert flags[0, ::16, 0].tolist() == [float(chosen // 4 == w // 4) for w in range(8)]
