"""GPU tests of the native launch path against the Python one (skipped cleanly without a Hopper GPU).

Each test makes fresh kernels: a kernel launches natively from its first launch where the native launcher is loaded
(the tests load it first), else from when the background thread its first launch started has it; never under
TKPY_NATIVE_LAUNCH=0 (tkpy/runtime/native.py).
"""
from __future__ import annotations

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.runtime import native

from gpu_util import in_fresh_thread, poisoned, rand, requires_gpu

pytestmark = requires_gpu
WARPS = 2


def make_scale(cluster=None):
    """y tile = x tile * s (tiles stacked along rows, one per warp); n must be >= 0 to store."""
    @tk.kernel(warps=WARPS, name="native_scale", cluster=cluster)
    def scale(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16], n: int, s: float):
        t = tk.rt(f32, 16, 16)
        tile = tk.block_idx.x * WARPS + tk.warp_id()
        tk.load(t, x, (tile, 0))
        tk.mul(t, t, s)
        with tk.if_(n >= 0):
            tk.store(y, t, (tile, 0))
    return scale


@pytest.fixture
def kernels(monkeypatch):
    """(native, python): the same kernel launched through each path."""
    if native.load() is None:
        pytest.skip("the native launcher could not be built here (see the tkpy.native debug log)")
    monkeypatch.delenv(native.ENV, raising=False)
    nat = make_scale()
    x = rand(WARPS * 16, 16, dtype=torch.float32)
    nat[(1,)](x, torch.empty_like(x), 0, 1.0)
    monkeypatch.setenv(native.ENV, "0")
    py = make_scale()
    py[(1,)](x, torch.empty_like(x), 0, 1.0)
    monkeypatch.delenv(native.ENV)
    assert nat.uses_native_launch and not py.uses_native_launch
    return nat, py


def test_native_and_python_paths_give_identical_results(kernels):
    nat, py = kernels
    for blocks, s in [(1, 2.0), (4, -0.5), (3, 3.0), (4, 1.25)]:
        x = rand(blocks * WARPS * 16, 16, dtype=torch.float32)
        outs = []
        for k in (nat, py):
            y = poisoned(*x.shape, dtype=torch.float32)
            for _ in range(3):                          # first call, then cache hits
                k[(blocks,)](x, y, 1, s)
            outs.append(y)
        torch.cuda.synchronize()
        assert torch.equal(outs[0], outs[1]) and torch.equal(outs[0], x * s)
    assert nat._fast.keys() == py._fast.keys()


def test_side_stream_and_cuda_graph(kernels):
    nat, _ = kernels
    x = rand(WARPS * 16 * 8, 16, dtype=torch.float32)
    y = poisoned(*x.shape, dtype=torch.float32)
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        nat[(8,)](x, y, 1, 2.0)
    side.synchronize()
    assert torch.equal(y, x * 2)
    y.fill_(float("nan"))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        nat[(8,)](x, y, 1, 3.0)
        nat[(8,)](y, y, 1, 0.5)                         # values are copied at capture: 3.0, then 0.5
    x2 = rand(*x.shape, dtype=torch.float32)
    x.copy_(x2)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(y, x2 * 3.0 * 0.5)


def test_bad_arguments_after_a_cache_hit_still_raise_or_retrace(kernels):
    for k in kernels:
        x = rand(WARPS * 16 * 2, 16, dtype=torch.float32)
        y = poisoned(*x.shape, dtype=torch.float32)
        k[(2,)](x, y, 1, 2.0)
        k[(2,)](x, y, 1, 2.0)                           # a hit
        with pytest.raises(tk.ArgumentError, match="dtype"):
            k[(2,)](x.half(), y, 1, 2.0)
        with pytest.raises(tk.ArgumentError, match="cpu"):
            k[(2,)](x.cpu(), y, 1, 2.0)
        with pytest.raises(tk.ArgumentError, match="dim 1 must be 16"):
            k[(2,)](torch.empty(32, 32, device="cuda"), y, 1, 2.0)
        with pytest.raises(tk.ArgumentError, match="aligned"):
            buf = rand(x.numel() + 1, dtype=torch.float32)
            k[(2,)](buf[1:].view_as(x), y, 1, 2.0)      # same key as the hit, 4 bytes off
        with pytest.raises(tk.ArgumentError, match="32-bit"):
            k[(2,)](x, y, 2**31, 2.0)
        with pytest.raises(tk.ArgumentError, match="must be an int"):
            k[(2,)](x, y, 1.0, 2.0)
        with pytest.raises(TypeError):                 # the native path's is an ArgumentError (a TypeError)
            k[(2,)](x, y, 1)
        x3 = rand(WARPS * 16 * 3, 16, dtype=torch.float32)     # another row count: a new key, same code
        y3 = poisoned(*x3.shape, dtype=torch.float32)
        k[(3,)](x3, y3, 1, -1.0)
        k[(2,)](x, y, 1, 4.0)
        torch.cuda.synchronize()
        assert torch.equal(y3, -x3) and torch.equal(y, x * 4.0)


def test_strided_views_take_the_slow_path(kernels):
    nat, _ = kernels
    base = rand(WARPS * 16 * 2, 48, dtype=torch.float32)
    x = base[:, 16:32]
    out = poisoned(WARPS * 16 * 2, 64, dtype=torch.float32)
    y = out[:, 32:48]
    for _ in range(2):
        nat[(2,)](x, y, 1, 2.0)
    torch.cuda.synchronize()
    assert torch.equal(y, x * 2.0)
    assert torch.isnan(out[:, :32]).all() and torch.isnan(out[:, 48:]).all()


def test_launch_from_fresh_thread(kernels):
    """A new thread has no current context: the launch fails, tkpy makes the primary context current
    and retries from the ParamBuffer, which the native path filled."""
    nat, _ = kernels
    x = rand(WARPS * 16 * 4, 16, dtype=torch.float32)
    y = poisoned(*x.shape, dtype=torch.float32)
    nat[(4,)](x, y, 1, 1.0)
    torch.cuda.synchronize()
    y.fill_(float("nan"))
    in_fresh_thread(lambda: nat[(4,)](x, y, 1, 5.0))
    torch.cuda.synchronize()
    assert torch.equal(y, x * 5.0)


def test_cluster_launch(monkeypatch):
    if native.load() is None:
        pytest.skip("the native launcher could not be built here")
    monkeypatch.delenv(native.ENV, raising=False)
    k = make_scale(cluster=(2, 1, 1))
    x = rand(WARPS * 16 * 4, 16, dtype=torch.float32)
    y = poisoned(*x.shape, dtype=torch.float32)
    for _ in range(2):
        k[(4,)](x, y, 1, 2.0)
    torch.cuda.synchronize()
    assert k.uses_native_launch and torch.equal(y, x * 2.0)


FIRST_ON_A_NEW_MACHINE = """
import json, sys, time, torch
sys.path.insert(0, "tests")
from test_native_launch_gpu import make_scale, WARPS
from tkpy.runtime import native
k = make_scale()
x = torch.randn(WARPS * 16 * 4, 16, device="cuda")
ys = [torch.full_like(x, float("nan")) for _ in range(3)]
k[(4,)](x, ys[0], 1, 2.0)                       # compiles, starts the launcher's build, launches the Python way
first_native = k.uses_native_launch
built = native.wait(120) is not None
k[(4,)](x, ys[1], 1, 3.0)                       # through the launcher the build switched to
k[(4,)](x, ys[2], 1, -1.0)
torch.cuda.synchronize()
print(json.dumps({"first_native": first_native, "built": built, "native": k.uses_native_launch,
                  "ok": [torch.equal(y, x * s) for y, s in zip(ys, (2.0, 3.0, -1.0))]}))
"""


def test_first_launch_on_a_machine_without_the_launcher(tmp_path):
    """A new process with an empty cache (no native launcher built): the first launch goes ahead on the Python
    launcher while the build runs in the background (entries made there, on a thread without a CUDA context); once
    built, the same kernel launches natively, with the right results on either path."""
    import json
    import os
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "TKPY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(root)}
    env.pop(native.ENV, None)
    done = subprocess.run([sys.executable, "-c", FIRST_ON_A_NEW_MACHINE], cwd=root, env=env, capture_output=True,
                          text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout.strip().splitlines()[-1])
    if not result["built"]:
        pytest.skip("the native launcher could not be built here")
    assert result["native"] and result["ok"] == [True, True, True], result
