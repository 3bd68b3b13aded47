"""Kernels and a stand-in timer for the autotuning tests (tests/test_autotune.py on the CPU, test_autotune_gpu.py),
importable by the subprocesses they start (run as a script: tune `twice` once and print what happened)."""
from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import torch

import tkpy as tk
from tkpy import f32

CONFIGS = [tk.Config(W=16, warps=1), tk.Config(W=32, warps=1), tk.Config(W=16, warps=2), tk.Config(W=32, warps=2)]


def grid(meta):
    """The grid of `twice` on a 64 x 64 tensor: a block a warp's 16 rows per warp, a column of blocks per W."""
    return 64 // (16 * meta["warps"]), 64 // meta["W"]


class FakeTimer:
    """What tk.autotune's `timer` is: says a GPU is there, and "times" the i-th configuration it is handed as
    ms[i] (running the launch once, on the interpreter, unless run=False); `calls` counts them."""

    def __init__(self, ms=(3.0, 1.0, 2.0, 4.0), run: bool = True, pause_s: float = 0.0):
        self.ms, self.run, self.pause_s = list(ms), run, pause_s
        self.calls = 0
        self._lock = threading.Lock()

    def unavailable(self):
        return None

    def device(self, tensors):
        return "Fake GPU", 4

    def __call__(self, fn) -> float:
        if self.run:
            fn()
        time.sleep(self.pause_s)
        with self._lock:
            self.calls += 1
            return self.ms[(self.calls - 1) % len(self.ms)]


class CountingTimer:
    """The real GPU timer, counting the configurations it times (the GPU tests)."""

    def __init__(self):
        self.timer, self.calls = tk.tune.GpuTimer(), 0

    def unavailable(self):
        return self.timer.unavailable()

    def device(self, tensors):
        return self.timer.device(tensors)

    def __call__(self, fn) -> float:
        self.calls += 1
        return self.timer(fn)


def tuned_twice(timer, configs=CONFIGS, **options):
    """y = 2 x over 16 x W tiles, one warp a tile: tuned over W and warps by (R, C)."""
    @tk.autotune(configs=configs, key=["R", "C"], timer=timer, **options)
    @tk.kernel(warps=1)
    def twice(x: tk.gl[f32, "R", "C"], y: tk.gl[f32, "R", "C"], W: tk.constexpr):
        t = tk.rt(f32, 16, W)
        row = tk.block_idx.x * tk.num_warps() + tk.warp_id()
        tk.load(t, x, (row, tk.block_idx.y))
        tk.add(t, t, t)
        tk.store(y, t, (row, tk.block_idx.y))
    return twice


def main(device: str) -> None:
    """Tune `twice` once on 64 x 64 tensors and print the timings made, the configuration run and the result's
    error."""
    timer = FakeTimer() if device == "cpu" else CountingTimer()
    twice = tuned_twice(timer)
    x = torch.randn(64, 64, device=device)
    y = torch.zeros_like(x)
    twice[grid](x, y)
    print(f"timed={timer.calls} best={twice.best_config!r} error={(y - 2 * x).abs().max().item()}")


def run_in_a_process(device: str, env: dict) -> subprocess.CompletedProcess:
    """main(device) in a new Python process with `env` added to this one's; it must succeed."""
    here = Path(__file__).resolve().parent
    done = subprocess.run([sys.executable, str(here / "autotune_kernels.py"), device], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": f"{here.parent}{os.pathsep}{here}", **env})
    assert done.returncode == 0, done.stderr
    return done


if __name__ == "__main__":
    main(sys.argv[1])
