"""The CPU interpreter on the Hopper and cluster ops: the GPU tests' TMA, wgmma and multicast kernels and
the GEMMs and attention of kernels/ against torch, and kernels that break the asynchronous protocol (a
missing arrive, wrong expect bytes, a tile read before its load arrived or with no proxy fence, an
accumulator read before its wgmma wait, an early stage release, register, barrier and wgmma deadlocks).
No GPU needed."""
from __future__ import annotations

import functools
import math
import time

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32

import gpu_util
from gpu_util import TORCH, rel_err
from test_gpu_hopper import (TMA_TILES, TMA_VECTORS, WGMMA_SHAPES, WINDOW_CASES, multicast_kernel, run_wgmma_on_windows,
                             tma_5d_kernel, tma_edge_kernel, tma_roundtrip_kernel, tma_vector_kernel, wgmma_kernel)
from test_trace_codegen import line_of
from tkpy.kernels import attention_forward, gemm_kernel, gemm_ws

rand = functools.partial(gpu_util.rand, device="cpu")
poisoned = functools.partial(gpu_util.poisoned, device="cpu")
FORMS = {"AB": (False, True), "ABt": (False, False), "AtB": (True, True), "AtBt": (True, False)}


# -- the GPU tests' kernels ---------------------------------------------------------------------------
@pytest.mark.parametrize("dt,rows,cols,swizzle", TMA_TILES)
def test_tma_roundtrip(dt, rows, cols, swizzle):
    x = rand(3 * rows, 2 * cols, dtype=TORCH[dt])
    y, z = poisoned(*x.shape, dtype=TORCH[dt]), poisoned(*x.shape, dtype=TORCH[dt])
    tma_roundtrip_kernel(dt, rows, cols, swizzle).interpret[(2, 3)](x, y, z)
    assert torch.equal(z, x) and torch.equal(y, x)


def test_tma_zero_fills_partial_tiles_clips_stores_and_adds():
    x = rand(100, 72, dtype=torch.bfloat16)
    z = poisoned(100, 72, dtype=torch.bfloat16)
    base = rand(100, 72, dtype=torch.bfloat16)
    acc = base.clone()
    tma_edge_kernel().interpret[(2, 2)](x, z, acc)
    assert torch.equal(z, x)
    assert torch.equal(acc, (base.float() + x.float()).bfloat16())    # fp32 sum, rounded once


@pytest.mark.parametrize("dt,length", TMA_VECTORS)
def test_tma_loads_shared_vectors(dt, length):
    x = rand(2, 3, 2 * length + 8, dtype=TORCH[dt])
    y = poisoned(2, 3, 3 * length, dtype=TORCH[dt])
    tma_vector_kernel(dt, length).interpret[(3, 6)](x, y)
    assert torch.equal(y, torch.cat([x, torch.zeros(2, 3, length - 8, dtype=x.dtype)], -1))


@pytest.mark.parametrize("strided", [False, True])
def test_tma_and_plain_copies_on_a_5d_tensor(strided):
    big = rand(4, 3, 2, 128, 128, dtype=torch.bfloat16)
    x = big[::2] if strided else big[:2].contiguous()
    outs = [poisoned(*x.shape, dtype=torch.bfloat16) for _ in range(3)]
    tma_5d_kernel().interpret[(2, 2, 12)](x, *outs)
    for out in outs:
        assert torch.equal(out, x)


@tk.kernel(warps=1)
def shifted_copy(x: tk.gl[bf16, 64, 64], y: tk.gl[bf16, "R", 64]):
    """Block i TMA-loads the tile of x at row tile i - 1 (before, inside, past the tensor) into row tile i of y."""
    s = tk.st(bf16, 64, 64)
    sem = tk.semaphore()
    t = tk.rt(bf16, 64, 64)
    tk.init_semaphore(sem, 1)
    tk.tma.expect(sem, s)
    tk.tma.load_async(s, x, (tk.block_idx.x - 1, 0), sem)
    tk.wait(sem, 0)
    tk.load(t, s)
    tk.store(y, t, (tk.block_idx.x, 0))


def test_tma_boxes_outside_the_tensor_read_as_zeros_as_on_the_gpu():
    """Not an error: the hardware zero-fills every element outside the tensor, negative coordinates too."""
    x = rand(64, 64, dtype=torch.bfloat16)
    y = poisoned(3 * 64, 64, dtype=torch.bfloat16)
    shifted_copy.interpret[(3,)](x, y)
    assert torch.equal(y, torch.cat([torch.zeros_like(x), x, torch.zeros_like(x)]))


@pytest.mark.parametrize("form,a_regs", [(f, r) for f in FORMS for r in (False, True) if not (r and f.startswith("At"))])
@pytest.mark.parametrize("dt,n,k", WGMMA_SHAPES)
def test_wgmma(dt, n, k, form, a_regs):
    trans_a, trans_b = FORMS[form]
    a = rand(3, *((k, 64) if trans_a else (64, k)), dtype=TORCH[dt])
    b = rand(3, *((k, n) if trans_b else (n, k)), dtype=TORCH[dt])
    c = rand(3, 64, n, dtype=torch.float32)
    d = poisoned(3, 64, n, dtype=torch.float32)
    wgmma_kernel(dt, n, k, form, a_regs).interpret[(3,)](a, b, c, d)
    am = a.double().transpose(1, 2) if trans_a else a.double()
    bm = b.double() if trans_b else b.double().transpose(1, 2)
    assert rel_err(d, am @ bm + c.double()) < 1e-5


@pytest.mark.parametrize("form,a_regs", WINDOW_CASES)
@pytest.mark.parametrize("dt,n,k", WGMMA_SHAPES)
def test_wgmma_on_windows(dt, n, k, form, a_regs):
    """One wgmma op per 16 rows of K on windows of the operands; the window kernels compile for sm_90a too."""
    kernel = wgmma_kernel(dt, n, k, form, a_regs, windows=True)
    _, args = run_wgmma_on_windows(dt, n, k, form, a_regs, device="cpu", launch=kernel.interpret)
    assert kernel.resources(*args).spill_stores == 0


def test_cluster_multicast_remote_arrive_and_rank():
    x = rand(3 * 64, 64, dtype=torch.bfloat16)
    y = poisoned(6 * 64, 64, dtype=torch.bfloat16)
    ranks = poisoned(6 * 16, 16, dtype=torch.float32)
    multicast_kernel().interpret[(6,)](x, y, ranks)
    assert torch.equal(y.view(3, 2, 64, 64), x.view(3, 1, 64, 64).expand(-1, 2, -1, -1))
    assert torch.equal(ranks.view(6, -1)[:, 0], torch.tensor([0.0, 1.0] * 3))


# -- the GEMMs of kernels/ ----------------------------------------------------------------------------
@pytest.mark.parametrize("m,n,k", [(128, 256, 64), (256, 256, 320)])
def test_warp_specialized_gemm(m, n, k):
    a, b = rand(m, k, dtype=torch.bfloat16), rand(k, n, dtype=torch.bfloat16)
    c = poisoned(m, n, dtype=torch.bfloat16)
    gemm_ws.gemm_ws.interpret[(n // 256, m // 128)](a, b, c)
    assert rel_err(c, a.double() @ b.double()) < 1e-2


def test_a_512_cubed_warp_specialized_gemm_interprets_in_under_10_s():
    a, b = rand(512, 512, dtype=torch.bfloat16), rand(512, 512, dtype=torch.bfloat16)
    c = poisoned(512, 512, dtype=torch.bfloat16)
    start = time.perf_counter()
    gemm_ws.gemm_ws.interpret[(2, 4)](a, b, c)
    seconds = time.perf_counter() - start
    assert rel_err(c, a.double() @ b.double()) < 1e-2
    assert seconds < 10, f"the 512^3 warp-specialized GEMM took {seconds:.1f} s in the interpreter"


def test_env_var_runs_the_gemm_on_the_cpu(monkeypatch):
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    a, b = rand(128, 128, dtype=torch.bfloat16), rand(128, 256, dtype=torch.bfloat16)
    assert rel_err(gemm_ws.matmul(a, b), a.double() @ b.double()) < 1e-2


def test_template_gemm_persistent():
    """Fewer persistent blocks than tiles."""
    a, b = rand(512, 192, dtype=torch.bfloat16), rand(192, 512, dtype=torch.bfloat16)
    c = poisoned(512, 512, dtype=torch.bfloat16)
    gemm_kernel.Matmul.kernel.interpret[(3,)](a, b, c)
    assert rel_err(c, a.double() @ b.double()) < 1e-2


@pytest.mark.parametrize("d", [64, 128])
def test_attention_forward_of_512_tokens_interprets_in_under_10_s(d):
    """Two query tiles per head over three persistent blocks: named barriers, P from registers, GQA off."""
    q, k, v = (rand(1, 2, 512, d, dtype=torch.bfloat16) for _ in range(3))
    o, lse = poisoned(1, 2, 512, d, dtype=torch.bfloat16), poisoned(1, 2, 512, dtype=torch.float32)
    start = time.perf_counter()
    kernel = attention_forward._attention(attention_forward.AttentionConfig(d)).kernel
    kernel.interpret[(3,)](q, k, v, o, lse, attention_forward.LOG2E / math.sqrt(d))
    seconds = time.perf_counter() - start
    scores = q.double() @ k.double().transpose(-1, -2) / math.sqrt(d)
    assert rel_err(o, torch.softmax(scores, -1) @ v.double()) < 1e-2
    assert rel_err(lse, torch.logsumexp(scores, -1)) < 1e-3
    assert seconds < 10, f"the attention forward took {seconds:.1f} s in the interpreter"


# -- broken protocols ---------------------------------------------------------------------------------
@tk.kernel(warps=2)
def ring(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, "R", 64], nbytes: int, skip: int):
    """Warp 0 streams x through a 2-stage ring with TMA, two 32-row halves per step announced as `nbytes`;
    warp 1 copies each step to y and releases its stage, except at step `skip`."""
    s = tk.st(bf16, 32, 64, count=4)              # stage i: s[2i], s[2i + 1]
    full, empty = tk.semaphore(2), tk.semaphore(2)
    t = tk.rt(bf16, 32, 64)
    with tk.if_(tk.warp_id() == 0):
        for i in range(2):
            tk.init_semaphore(full[i], 1)
            tk.init_semaphore(empty[i], 1)
    tk.sync()
    steps = x.rows // 64
    with tk.if_(tk.warp_id() == 0):
        for k in tk.range(steps):
            with tk.if_(k >= 2):
                tk.wait(empty[k % 2], (k // 2 + 1) % 2)
            tk.expect_bytes(full[k % 2], nbytes)
            for h in range(2):
                tk.tma.load_async(s[k % 2 * 2 + h], x, (k * 2 + h, 0), full[k % 2])
    with tk.else_():
        for k in tk.range(steps):
            tk.wait(full[k % 2], k // 2 % 2)
            for h in range(2):
                tk.load(t, s[k % 2 * 2 + h])
                tk.store(y, t, (k * 2 + h, 0))
            with tk.if_(k != skip):
                tk.arrive(empty[k % 2])


def run_ring(nbytes=8192, skip=-1):
    x = rand(5 * 64, 64, dtype=torch.bfloat16)
    y = poisoned(*x.shape, dtype=torch.bfloat16)
    ring.interpret[(1,)](x, y, nbytes, skip)
    return x, y


def test_the_ring_works_with_the_right_protocol():
    x, y = run_ring()
    assert torch.equal(y, x)


def test_a_missing_arrive_is_a_deadlock_naming_the_semaphores_phases_and_lines():
    with pytest.raises(tk.DeadlockError) as e:
        run_ring(skip=0)
    text = str(e.value)
    wait_empty, wait_full = line_of(ring.fn, "tk.wait(empty"), line_of(ring.fn, "tk.wait(full")
    assert f"warp 0 waits at test_interpret_hopper.py:{wait_empty} `tk.wait(empty[k % 2]" in text
    assert ("on semaphore `empty[0]` of block (0, 0, 0), waiting for its phase 0 (parity 0) to complete: "
            "0 of 1 arrivals") in text
    assert f"warp 1 waits at test_interpret_hopper.py:{wait_full}" in text
    assert "semaphore `full[0]` of block (0, 0, 0), waiting for its phase 1 (parity 1) to complete" in text


def test_expecting_more_bytes_than_the_loads_deliver_is_a_deadlock_with_the_byte_counts():
    with pytest.raises(tk.DeadlockError, match=r"semaphore `full\[0\]` of block \(0, 0, 0\), waiting for its "
                                               r"phase 0 \(parity 0\) to complete: 1 of 1 arrivals, "
                                               r"8192 of 9000 expected bytes"):
        run_ring(nbytes=9000)


@pytest.mark.parametrize("nbytes,match", [
    (4096, r"TMA delivered 4096 bytes to a semaphore whose phase already completed: `full\[0\]` phase 0, "
           r"the expect at test_interpret_hopper.py:\d+ announced 4096 bytes"),
    (6000, r"TMA delivered 4096 bytes to semaphore `full\[0\]`, whose phase 0 awaited only 1904 more: the phase "
           r"completes early and the other 2192 bytes arrive on a phase that already completed")])
def test_expecting_fewer_bytes_than_the_loads_deliver_names_the_load(nbytes, match):
    with pytest.raises(tk.InterpretError, match=match) as e:
        run_ring(nbytes=nbytes)
    assert e.value.loc.line == line_of(ring.fn, "tk.tma.load_async(s[")


@tk.kernel(warps=1)
def no_wait(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, "R", 64]):
    s = tk.st(bf16, 64, 64)
    sem = tk.semaphore()
    t = tk.rt(bf16, 64, 64)
    tk.init_semaphore(sem, 1)
    tk.tma.expect(sem, s)
    tk.tma.load_async(s, x, (0, 0), sem)
    tk.load(t, s)                            # forgot tk.wait(sem, 0)
    tk.store(y, t, (0, 0))


def test_a_tile_read_before_its_load_arrived_names_the_op_and_the_semaphore():
    x = rand(64, 64, dtype=torch.bfloat16)
    with pytest.raises(tk.InterpretError, match=r"load into `t` reads shared memory before its TMA load arrived: "
                                                r"4096 elements of `s` .* the first at \(row 0, col 0\); the TMA "
                                                r"load into `s` at test_interpret_hopper.py:\d+ completes on "
                                                r"semaphore `sem` in its phase 0, which has completed, but no "
                                                r"warp has waited on it") as e:
        no_wait.interpret[(1,)](x, poisoned(64, 64, dtype=torch.bfloat16))
    assert e.value.loc.line == line_of(no_wait.fn, "tk.load(t, s)")


@tk.kernel(warps=4)
def staged_a(a: tk.gl[bf16, 64, 64], b: tk.gl[bf16, 64, 64], c: tk.gl[f32, 64, 64], fenced: tk.constexpr):
    """A goes through registers into shared memory (ordinary stores) before a wgmma reads it."""
    sa, sb = tk.st(bf16, 64, 64), tk.st(bf16, 64, 64)
    ra, acc = tk.rt(bf16, 16, 64), tk.rt(f32, 16, 64)
    tk.warpgroup.load(ra, a, (0, 0))
    tk.store(sa.subtile(16, 64, (tk.warp_id(), 0)), ra)
    tk.block.load(sb, b, (0, 0))
    with tk.if_(tk.warp_id() < fenced):
        tk.fence_proxy_async()
    tk.sync()
    tk.warpgroup.mm_AB(acc, sa, sb)
    tk.warpgroup.mma_async_wait()
    tk.warpgroup.store(c, acc, (0, 0))


@pytest.mark.parametrize("fenced", [4, 3])
def test_wgmma_reads_of_ordinary_stores_need_a_proxy_fence_by_each_writer(fenced):
    a, b = rand(64, 64, dtype=torch.bfloat16), rand(64, 64, dtype=torch.bfloat16)
    c = poisoned(64, 64, dtype=torch.float32)
    if fenced == 4:
        staged_a.interpret[(1,)](a, b, c, fenced)
        assert rel_err(c, a.double() @ b.double()) < 1e-5
        return
    with pytest.raises(tk.InterpretError, match=r"reads through the async proxy \(TMA, wgmma\) what warp 3's ordinary "
                                                r"stores wrote, with no tk.fence_proxy_async\(\) by that warp since: "
                                                r"1024 elements of `sa` .* first at \(row 48, col 0\)"):
        staged_a.interpret[(1,)](a, b, c, fenced)


@tk.kernel(warps=4)
def accumulate_in_a_loop(a: tk.gl[bf16, 64, 64], b: tk.gl[bf16, 64, 64], c: tk.gl[f32, 64, 64],
                         wait_each_step: tk.constexpr):
    sa, sb = tk.st(bf16, 64, 64), tk.st(bf16, 64, 64)
    acc = tk.rt(f32, 16, 64)
    tk.block.load(sa, a, (0, 0))
    tk.block.load(sb, b, (0, 0))
    tk.fence_proxy_async()
    tk.sync()
    tk.zero(acc)
    for _ in tk.range(2):
        tk.mul(acc, acc, 0.5)               # needs the previous step's MMA to have finished
        tk.warpgroup.mma_AB(acc, sa, sb)
        if wait_each_step:
            tk.warpgroup.mma_async_wait()
    tk.warpgroup.mma_async_wait()
    tk.warpgroup.store(c, acc, (0, 0))


def test_an_accumulator_read_in_a_loop_before_its_wgmma_wait_is_reported():
    a, b = rand(64, 64, dtype=torch.bfloat16), rand(64, 64, dtype=torch.bfloat16)
    c = poisoned(64, 64, dtype=torch.float32)
    accumulate_in_a_loop.interpret[(1,)](a, b, c, True)
    assert rel_err(c, 1.5 * (a.double() @ b.double())) < 1e-5
    mma_line = line_of(accumulate_in_a_loop.fn, "mma_AB(acc")
    with pytest.raises(tk.InterpretError, match=rf"`acc` is read while the warpgroup MMA at "
                                                rf"test_interpret_hopper.py:{mma_line} \(warpgroup 0\) may still be writing it: call "
                                                r"tk.warpgroup.mma_async_wait\(\) first \(in block \(0, 0, 0\), warp 3\)") as e:
        accumulate_in_a_loop.interpret[(1,)](a, b, c, False)
    assert e.value.loc.line == line_of(accumulate_in_a_loop.fn, "tk.mul(acc")


@tk.kernel(warps=8)
def early_release(a: tk.gl[bf16, 64, "K"], b: tk.gl[bf16, "K", 64], c: tk.gl[f32, 64, 64]):
    """Warp 4 streams K slices of A and B through one stage for warpgroup 0, which keeps one MMA in flight
    but then releases the stage that MMA reads, not the previous one."""
    sa, sb = tk.st(bf16, 64, 64), tk.st(bf16, 64, 64)
    full, empty = tk.semaphore(), tk.semaphore()
    acc = tk.rt(f32, 16, 64)
    with tk.if_(tk.warp_id() == 0):
        tk.init_semaphore(full, 1)
        tk.init_semaphore(empty, 4)
    tk.sync()
    with tk.if_(tk.warp_id() == 4):
        for k in tk.range(a.cols // 64):
            with tk.if_(k > 0):
                tk.wait(empty, (k - 1) % 2)
            tk.tma.expect(full, sa, sb)
            tk.tma.load_async(sa, a, (0, k), full)
            tk.tma.load_async(sb, b, (k, 0), full)
    with tk.if_(tk.warp_id() < 4):
        tk.zero(acc)
        for k in tk.range(a.cols // 64):
            tk.wait(full, k % 2)
            tk.warpgroup.mma_AB(acc, sa, sb)
            tk.warpgroup.mma_async_wait(1)
            tk.arrive(empty)
        tk.warpgroup.mma_async_wait()
        tk.warpgroup.store(c, acc, (0, 0))


def test_releasing_a_stage_that_a_wgmma_in_flight_reads_is_reported():
    a, b = rand(64, 128, dtype=torch.bfloat16), rand(128, 64, dtype=torch.bfloat16)
    mma_line = line_of(early_release.fn, "mma_AB(acc")
    with pytest.raises(tk.InterpretError, match=rf"a write into `sa` overwrites shared memory that the warpgroup MMA "
                                                rf"at test_interpret_hopper.py:{mma_line} \(warpgroup 0\) may still be reading") as e:
        early_release.interpret[(1,)](a, b, poisoned(64, 64, dtype=torch.float32))
    assert e.value.loc.line == line_of(early_release.fn, "tk.tma.load_async(sa")


@tk.kernel(warps=12)
def greedy_consumers(x: tk.gl[f32, 16, 16]):
    with tk.if_(tk.warpgroup_id() > 0):
        tk.consumer_registers(232)           # the producer warpgroup never releases any


@tk.kernel(warps=8)
def half_barrier(x: tk.gl[f32, 16, 16]):
    with tk.if_(tk.warp_id() < 4):
        tk.named_sync(1, 8)                  # only 4 of the 8 warps come


@tk.kernel(warps=4)
def half_warpgroup_mma(x: tk.gl[f32, 16, 16]):
    s = tk.st(bf16, 64, 64)
    acc = tk.rt(f32, 16, 64)
    ones = tk.rt(bf16, 16, 64)
    tk.one(ones)
    tk.store(s.subtile(16, 64, (tk.warp_id(), 0)), ones)
    tk.fence_proxy_async()
    tk.sync()
    with tk.if_(tk.warp_id() < 2):
        tk.warpgroup.mm_AB(acc, s, s)        # a warpgroup collective that half the warpgroup issues
        tk.warpgroup.mma_async_wait()


@pytest.mark.parametrize("kern,match", [
    (greedy_consumers, r"setmaxnreg.inc to 232 registers per thread: the block's warps hold 64512 of the 65536 "
                       r"registers \(warps 0-11 at 168 per thread\)"),
    (half_barrier, r"named barrier 1 \(phase 0\): 4 of 8 warps arrived \(warps 0, 1, 2, 3\)"),
    (half_warpgroup_mma, r"the warpgroup MMA at test_interpret_hopper.py:\d+ \(warpgroup 0\): every warp of the "
                         r"warpgroup must issue it, but warps 2, 3 have not")])
def test_register_barrier_and_wgmma_deadlocks(kern, match):
    with pytest.raises(tk.DeadlockError, match=match):
        kern.interpret[(1,)](torch.zeros(16, 16))


@tk.kernel(warps=1, cluster=2)
def eager_multicast(x: tk.gl[bf16, 64, 64]):
    s = tk.st(bf16, 64, 64)
    sem = tk.semaphore()
    tk.init_semaphore(sem, 1)                # no tk.cluster.sync() after it
    tk.tma.expect(sem, s)
    with tk.if_(tk.cluster.rank() == 0):
        tk.tma.load_async(s, x, (0, 0), sem, multicast=0b11)
    tk.wait(sem, 0)
    tk.cluster.sync()


@tk.kernel(warps=1)
def misused_semaphore(x: tk.gl[bf16, 64, 64], extra: int, parity: int):
    sem = tk.semaphore()
    tk.init_semaphore(sem, 1)
    tk.expect_bytes(sem, 64)                 # the phase's one arrival: it now awaits only bytes
    with tk.if_(extra == 1):
        tk.arrive(sem)
    tk.wait(sem, parity)


@tk.kernel(warps=4)
def split_warpgroup_mma(x: tk.gl[bf16, 64, 64]):
    s = tk.st(bf16, 64, 64, count=2)
    acc = tk.rt(f32, 16, 64)
    for i in range(2):
        tk.block.load(s[i], x, (0, 0))
    tk.fence_proxy_async()
    tk.sync()
    tk.warpgroup.mm_AB(acc, s[tk.warp_id() // 2], s[0])     # warps 2 and 3 name another A tile
    tk.warpgroup.mma_async_wait()


@pytest.mark.parametrize("kern,args,match", [
    (eager_multicast, (), r"semaphore `sem` of block \(1, 0, 0\) is used before tk.init_semaphore: synchronise "
                          r"the cluster"),
    (misused_semaphore, (1, 0), r"1 arrival\(s\) on semaphore `sem`, whose phase 0 awaits only 0 more of its 1"),
    (misused_semaphore, (0, 2), r"tk.wait takes a phase parity, 0 or 1"),
    (split_warpgroup_mma, (), r"the warps of warpgroup 0 disagree on their warpgroup MMA number 0: warp 3 issued "
                              r"the one at test_interpret_hopper.py:\d+ on s\[1\] and s\[0\], warp 0 the one at "
                              r"test_interpret_hopper.py:\d+ on s\[0\] and s\[0\]")])
def test_other_misuse_is_reported(kern, args, match):
    with pytest.raises(tk.InterpretError, match=match):
        kern.interpret[(2,) if kern is eager_multicast else (1,)](torch.zeros(64, 64).bfloat16(), *args)


def test_template_kernels_run_under_TKPY_INTERPRET(monkeypatch):
    """The torch-facing template functions pick a grid without asking a GPU for its SM count."""
    from tkpy.kernels import attention
    from tkpy.kernels import matmul
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    a, b = rand(256, 128, dtype=torch.bfloat16), rand(128, 256, dtype=torch.bfloat16)
    assert rel_err(matmul(a, b), a.double() @ b.double()) < 1e-2
    q, k, v = (rand(1, 2, 128, 64, dtype=torch.bfloat16) for _ in range(3))
    s = q.double() @ k.double().transpose(-1, -2) / 8
    assert rel_err(attention(q, k, v), torch.softmax(s, -1) @ v.double()) < 1e-2
