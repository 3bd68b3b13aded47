"""Device correctness on GPUs (issue 36): kernels launch on the device their tensors are on, whatever device the
calling thread has current, and leave the thread's current device and context as they were.

One GPU: a fresh thread (no current context) launches through both launchers and is left without one. Two GPUs
(skipped with fewer): a user kernel and every operator of tkpy.kernels on cuda:1 from a thread whose current device
is cuda:0 give bit for bit what they give on cuda:0 (the same kernels, deterministic), outputs on cuda:1; threads
current on one device launch on the other's tensors at once; tensors on two GPUs are refused before any GPU work;
tk.autotune times on its tensors' device. The CPU side of the same: tests/test_devices.py."""
from __future__ import annotations

import pytest
import torch

import gpu_util
import tkpy as tk
from autotune_kernels import CONFIGS, CountingTimer, grid, tuned_twice
from gpu_util import on_gpu, on_gpus
from test_devices import axpy_kernel
from test_threads import in_threads
from tkpy.runtime import driver, native

LAUNCHERS = ["python", "native"]


def use_launcher(monkeypatch, which: str) -> None:
    if which == "native" and native.load() is None:
        pytest.skip("the native launcher could not be built here")
    monkeypatch.setenv(native.ENV, "1" if which == "native" else "0")
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)


def operand(rows: int, device, strided: bool) -> torch.Tensor:
    t = gpu_util.rand(rows, 32 if strided else 16, dtype=torch.float32, device=device)
    return t[:, :16] if strided else t


@pytest.mark.parametrize("which", LAUNCHERS)
@on_gpu
def test_gpu_a_fresh_thread_is_left_as_it_was(monkeypatch, which):
    """A thread with no current context launches (its device's primary context pushed for the launch) and has none
    after; the result is right."""
    use_launcher(monkeypatch, which)
    k = axpy_kernel()
    x, y = operand(64, "cuda:0", False), torch.zeros(64, 16, device="cuda:0")
    k[(4,)](x, y, 1.0)                               # compiled and loaded on the main thread
    seen = []

    def work():
        seen.append(driver.current_context())
        k[(4,)](x, y, 1.0)
        seen.append(driver.current_context())
        k[(4,)](x, y, 1.0)
        seen.append(driver.current_context())
        torch.cuda.synchronize(0)

    gpu_util.in_fresh_thread(work)
    assert seen == [0, 0, 0], seen
    torch.testing.assert_close(y, 3 * x, rtol=0, atol=0)


@pytest.mark.parametrize("which", LAUNCHERS)
@pytest.mark.parametrize("strided", [False, True], ids=["packed", "strided"])
@on_gpus(2)
def test_gpu_a_kernel_runs_on_its_tensors_device(monkeypatch, which, strided):
    use_launcher(monkeypatch, which)
    k = axpy_kernel()
    torch.cuda.set_device(0)
    for device in ("cuda:1", "cuda:0", "cuda:1"):
        x = operand(128, device, strided)
        y = gpu_util.rand(128, 16, dtype=torch.float32, device=device)
        expected = y.double() + 3 * 0.5 * x.double()
        for _ in range(3):                          # the slow path, then the fast one
            k[(8,)](x, y, 0.5)
        assert torch.cuda.current_device() == 0 and y.device == torch.device(device)
        torch.testing.assert_close(y.double(), expected, rtol=1e-6, atol=1e-6)
    assert k.uses_native_launch == (which == "native" and not strided)


@pytest.mark.parametrize("which", LAUNCHERS)
@on_gpus(2)
def test_gpu_threads_launch_on_the_other_devices_tensors(monkeypatch, which):
    """Four threads, two current on cuda:0 launching on cuda:1's tensors and two the other way round, 200 launches
    each at once: each tensor gets exactly its own thread's launches."""
    use_launcher(monkeypatch, which)
    k = axpy_kernel()
    xs = [torch.ones(64, 16, device=f"cuda:{1 - i % 2}") for i in range(4)]
    ys = [torch.zeros(64, 16, device=x.device) for x in xs]
    for x in xs[:2]:
        k[(4,)](x, torch.zeros_like(x), 1.0)        # compiled and loaded on both devices first

    def work(i):
        torch.cuda.set_device(i % 2)
        for _ in range(200):
            k[(4,)](xs[i], ys[i], float(i + 1))
        assert torch.cuda.current_device() == i % 2
        torch.cuda.synchronize(xs[i].device)

    in_threads(4, work)
    for i, y in enumerate(ys):
        assert torch.equal(y, torch.full_like(y, 200.0 * (i + 1))), f"thread {i}"


def _operator_cases():
    """name -> (inputs on the CPU, the call, the positions of the inputs that take a gradient)."""
    import tkpy.kernels as K

    bf, f8 = torch.bfloat16, torch.float8_e4m3fn
    r = lambda *s, dtype=bf: torch.randn(*s, dtype=torch.float64).to(dtype)      # noqa: E731
    cos_sin = torch.randn(64, 32).cos(), torch.randn(64, 32).sin()
    return {
        "matmul": ((r(256, 192), r(384, 192)), lambda a, w: K.matmul(a, w.T, activation="gelu"), (0, 1)),
        "matmul_fp8": ((r(128, 128, dtype=f8), r(256, 128, dtype=f8), torch.tensor([0.5]), torch.tensor([2.0])),
                       lambda a, w, sa, sb: K.matmul_fp8(a, w.T, sa, sb), ()),
        "attention": ((r(1, 4, 128, 64), r(1, 2, 128, 64), r(1, 2, 128, 64)),
                      lambda q, k, v: K.attention(q, k, v, causal=True, deterministic=True), (0, 1, 2)),
        "softmax": ((r(256, 128),), K.softmax, (0,)),
        "rms_norm": ((r(64, 512), r(512), r(64, 512)), lambda x, w, res: K.rms_norm(x, (512,), w, residual=res),
                     (0, 1, 2)),
        "layer_norm": ((r(64, 512), r(512), r(512)), lambda x, w, b: K.layer_norm(x, (512,), w, b), (0, 1, 2)),
        "swiglu": ((r(64, 256), r(64, 256)), K.swiglu, (0, 1)),
        "rotary": ((r(2, 64, 4, 64), r(2, 64, 2, 64), *cos_sin), lambda q, k, c, s: K.rotary(q, k, c, s), (0, 1)),
    }


def _run(device: str, inputs, call, grad_positions):
    """The call's outputs and its inputs' gradients (from a fixed output gradient), on `device`, moved to the CPU."""
    xs = [x.to(device).requires_grad_(i in grad_positions) for i, x in enumerate(inputs)]
    out = call(*xs)
    outs = list(out) if isinstance(out, tuple) else [out]
    assert all(o.device == torch.device(device) for o in outs)
    leaves = [x for x in xs if x.requires_grad]
    grads = []
    if leaves:
        weights = [torch.randn(o.shape, generator=torch.Generator().manual_seed(i)).to(device, o.dtype)
                   for i, o in enumerate(outs)]
        grads = torch.autograd.grad(outs, leaves, weights)
    torch.cuda.synchronize(device)
    return [t.detach().cpu() for t in outs + list(grads)]


@pytest.mark.parametrize("name", sorted(_operator_cases()))
@on_gpus(2)
def test_gpu_operators_run_on_their_tensors_device(monkeypatch, name):
    """Each operator on cuda:1, called from a thread current on cuda:0, gives what it gives on cuda:0, bit for bit
    (outputs and gradients), with its outputs on cuda:1 and cuda:0 still current."""
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    inputs, call, grad_positions = _operator_cases()[name]
    torch.cuda.set_device(0)
    on0 = _run("cuda:0", inputs, call, grad_positions)
    on1 = _run("cuda:1", inputs, call, grad_positions)
    assert torch.cuda.current_device() == 0
    for i, (a, b) in enumerate(zip(on0, on1)):
        assert torch.equal(a, b), f"{name}: result {i} differs between cuda:0 and cuda:1"


@on_gpus(2)
def test_gpu_tensors_on_two_gpus_are_refused_before_any_work(monkeypatch):
    import tkpy.kernels as K

    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    x, y = torch.ones(64, 16, device="cuda:0"), torch.zeros(64, 16, device="cuda:1")
    with pytest.raises(tk.ArgumentError, match=r"x on cuda:0, y on cuda:1"):
        axpy_kernel()[(4,)](x, y, 1.0)
    a, b, out = (torch.ones(128, 128, device=d, dtype=torch.bfloat16) for d in ("cuda:0", "cuda:1", "cuda:1"))
    with pytest.raises(ValueError, match="cuda:0.*cuda:1"):
        K.matmul(a, b)
    with pytest.raises(ValueError, match="cuda:0.*cuda:1"):
        K.matmul(a, a, out=out)
    torch.cuda.synchronize(1)
    assert torch.equal(y, torch.zeros_like(y)) and torch.equal(out, torch.ones_like(out))


@on_gpus(2)
def test_gpu_autotune_times_on_its_tensors_device(monkeypatch):
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    monkeypatch.setenv("TKPY_AUTOTUNE", "force")
    torch.cuda.set_device(0)
    timer = CountingTimer()
    twice = tuned_twice(timer, cache=False)
    x = torch.randn(64, 64, device="cuda:1")
    y = torch.zeros_like(x)
    twice[grid](x, y)
    assert timer.calls == len(CONFIGS) and torch.cuda.current_device() == 0
    torch.testing.assert_close(y, 2 * x, rtol=0, atol=0)
