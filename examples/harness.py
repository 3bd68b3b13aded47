"""What the examples share besides their kernels: where they run, the check against float64 torch, the timing.

Not an example itself: `python examples/NAME.py` imports it from beside the script.
"""
import os
import statistics
import sys

import torch

import tkpy as tk


def device() -> str:
    """"cuda" on a Hopper GPU (unless TKPY_INTERPRET is set); otherwise "cpu", with TKPY_INTERPRET=1 set so that
    every launch runs on tkpy's CPU interpreter."""
    if tk.gpu_available() and not tk.interpret_requested():
        return "cuda"
    os.environ["TKPY_INTERPRET"] = "1"
    return "cpu"


def check(what: str, out: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> None:
    """Every element within atol + rtol * |ref| of the float64 reference, or exit 1 saying where it is not."""
    err = (out.double() - ref).abs()
    bad = err > atol + rtol * ref.abs()
    if bad.any():
        i = tuple(int(v) for v in torch.nonzero(bad)[0])
        sys.exit(f"{what}: WRONG: {int(bad.sum())} of {out.numel()} elements off by more than {atol:.2g} + "
                 f"{rtol:.2g} * |ref|; e.g. at {i}: got {out[i].item():.6g}, expected {ref[i].item():.6g}")
    print(f"{what}: OK (every element within {atol:.2g} + {rtol:.2g} * |ref| of float64 torch; "
          f"largest error {err.max():.2e})")


def report_speed(what: str, flops: float, fns: dict) -> None:
    """Each of `fns` (name -> function) timed (median_us), printed with its TFLOP/s for `flops` per call."""
    for name, fn in fns.items():
        us = median_us(fn)
        print(f"  {what}: {name:14} {us:8.1f} us  {flops / us / 1e6:6.0f} TFLOP/s")


def median_us(fn, runs: int = 100) -> float:
    """Median microseconds of `runs` calls, each between CUDA events, after a warm-up."""
    for _ in range(10):
        fn()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(runs)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return 1e3 * statistics.median(start.elapsed_time(end) for start, end in events)
