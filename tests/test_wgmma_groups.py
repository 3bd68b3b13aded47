"""mma_async_wait(n) retires all but the newest n warpgroup MMAs (one commit group each, completing in order):
the tracer lets the retired accumulators be read and fences exactly those in the C++; the interpreter agrees.
No GPU needed."""
from __future__ import annotations

import functools

import pytest
import torch

import tkpy as tk
from tkpy import bf16, f32

import gpu_util
from gpu_util import rel_err

rand = functools.partial(gpu_util.rand, device="cpu")


def two_products(read_second_early: bool):
    @tk.kernel(warps=4, name=f"two_products_{int(read_second_early)}")
    def kern(a: tk.gl[bf16, 64, 64], b: tk.gl[bf16, 64, 64], c: tk.gl[f32, 64, 64], d: tk.gl[f32, 64, 64]):
        """c = a b^T, d = a b, the second issued after the first; c is stored after wait(1), d after wait(0)."""
        sa, sb = tk.st(bf16, 64, 64), tk.st(bf16, 64, 64)
        first, second = tk.rt(f32, 16, 64), tk.rt(f32, 16, 64)
        tk.warpgroup.load(sa, a, (0, 0))
        tk.warpgroup.load(sb, b, (0, 0))
        tk.fence_proxy_async()
        tk.sync()
        tk.warpgroup.mm_ABt(first, sa, sb)
        tk.warpgroup.mm_AB(second, sa, sb)
        tk.warpgroup.mma_async_wait(1)           # `first` is done, `second` may still run
        tk.warpgroup.store(c, first, (0, 0))
        if read_second_early:
            tk.warpgroup.store(d, second, (0, 0))
        tk.warpgroup.mma_async_wait()
        tk.warpgroup.store(d, second, (0, 0))
    return kern


def test_wait_one_retires_the_older_product():
    a, b = rand(64, 64, dtype=torch.bfloat16), rand(64, 64, dtype=torch.bfloat16)
    c, d = torch.full((64, 64), float("nan")), torch.full((64, 64), float("nan"))
    kern = two_products(False)
    kern.interpret[(1,)](a, b, c, d)
    assert rel_err(c, a.double() @ b.double().T) < 1e-2 and rel_err(d, a.double() @ b.double()) < 1e-2
    src = kern.source(a, b, c, d)
    wait1 = src.index("tk::wgmma_wait<1>();")
    after = src[wait1:src.index("tk::wgmma_wait<0>();")]
    assert "tk::register_fence(first);" in after and "register_fence(second)" not in after
    assert kern.trace(a, b, c, d).lower().compile() is not None


def test_reading_the_newer_product_after_wait_one_is_an_error():
    a = torch.zeros(64, 64, dtype=torch.bfloat16)
    with pytest.raises(tk.TraceError, match="`second` while a warpgroup MMA into it"):
        two_products(True).source(a, a, torch.zeros(64, 64), torch.zeros(64, 64))


def test_serialized_wgmma_notes_count_as_ptxas_warnings():
    from tkpy.runtime import parse_ptxas_log
    log = ("ptxas info    : (C7514) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
           "non wgmma instructions reading accumulator registers of  a wgmma between start and end of the pipeline "
           "stage in the function 'k' in line 0\nptxas info    : Used 168 registers\n")
    assert any("serialized" in w for w in parse_ptxas_log(log, "k").warnings)


def register_a_product(write: str):
    """d = A b with A from registers; then `write` names what the kernel writes before waiting for the product:
    "none", "a" (the A tile itself), "a_window" (a window of it), "other" (another tile), or "a_after_wait"."""
    @tk.kernel(warps=4, name=f"register_a_{write}")
    def kern(a: tk.gl[bf16, 64, 64], b: tk.gl[bf16, 64, 64], d: tk.gl[f32, 64, 64]):
        sb = tk.st(bf16, 64, 64)
        ra, other = tk.rt(bf16, 16, 64), tk.rt(bf16, 16, 64)
        acc = tk.rt(f32, 16, 64)
        tk.warpgroup.load(ra, a, (0, 0))
        tk.warpgroup.load(sb, b, (0, 0))
        tk.fence_proxy_async()
        tk.sync()
        tk.warpgroup.mm_AB(acc, ra, sb)
        tk.copy(other, ra)                       # reading A meanwhile is fine
        if write == "a":
            tk.zero(ra)
        elif write == "a_window":
            tk.zero(ra.subtile(16, 16, (0, 1)))
        elif write == "other":
            tk.zero(other)
        tk.warpgroup.mma_async_wait()
        if write == "a_after_wait":
            tk.zero(ra)
        tk.warpgroup.store(d, acc, (0, 0))
    return kern


@pytest.mark.parametrize("write", ["a", "a_window"])
def test_writing_a_register_a_while_its_product_runs_is_an_error(write):
    """The tensor cores read a register A asynchronously: writing it (or a window of it) before the wait is refused
    at the writing line."""
    a = torch.zeros(64, 64, dtype=torch.bfloat16)
    with pytest.raises(tk.TraceError, match=r"test_wgmma_groups.py:\d+: fill writes `.*` while a warpgroup MMA reading "
                                            r"it as its A"):
        register_a_product(write).source(a, a, torch.zeros(64, 64))


@pytest.mark.parametrize("write", ["none", "other", "a_after_wait"])
def test_register_a_may_be_read_meanwhile_and_written_after_the_wait(write):
    a, b = rand(64, 64, dtype=torch.bfloat16), rand(64, 64, dtype=torch.bfloat16)
    d = torch.full((64, 64), float("nan"))
    register_a_product(write).interpret[(1,)](a, b, d)
    assert rel_err(d, a.double() @ b.double()) < 1e-2
