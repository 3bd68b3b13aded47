"""The SM clock and board power while tkpy's attention kernel and SDPA's cuDNN and flash kernels run sustained.

The H200 holds its board power at its limit (700 W) by lowering the SM clock: a kernel that keeps more of the chip
busy draws more power and may run at a lower clock than a slower one, so a speed ratio measured back to back is
also a ratio of clocks. This runs each kernel for SECONDS as CUDA-graph replays (benchmarks/timing.py's graphs)
while a thread reads the SM clock and the power through NVML (nvidia-ml-py) every SAMPLE_S, and prints per
kernel its TFLOP/s, the median clock and power over the run's second half, and its work per clock (TFLOP/s per
GHz), with the ratios of both to flash's; ROUNDS rounds in balanced orders, medians over them.

    PYTHONPATH=. python3 benchmarks/power_clock.py [B H N D causal(0/1) ...]   (default: CASES)
                  ($OUT/power_clock.json when OUT is set)
"""
from __future__ import annotations

import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

CASES = [(16, 16, 4096, 64, 0), (16, 16, 4096, 64, 1), (4, 16, 16384, 64, 0), (4, 16, 16384, 64, 1),
         (16, 16, 1024, 128, 0), (16, 16, 4096, 128, 0)]
KERNELS = ("tkpy", "cudnn", "flash")
SECONDS = 1.5               # each kernel's sustained run
SAMPLE_S = 0.01             # NVML readings this far apart
ROUNDS = 3


class Sampler:
    """NVML readings of the SM clock (MHz) and the board power (W) on a thread, from start() to stop()."""

    def __init__(self, device: int):
        import pynvml
        pynvml.nvmlInit()
        self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(device)
        self.readings, self.running = [], False

    def start(self) -> None:
        self.readings, self.running = [], True
        self.thread = threading.Thread(target=self._run)
        self.thread.start()

    def _run(self) -> None:
        while self.running:
            clock = self.nvml.nvmlDeviceGetClockInfo(self.handle, self.nvml.NVML_CLOCK_SM)
            watts = self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000
            self.readings.append((clock, watts))
            time.sleep(SAMPLE_S)

    def stop(self) -> tuple[float, float]:
        """The median clock (MHz) and power (W) over the second half of the readings (past the ramp)."""
        self.running = False
        self.thread.join()
        steady = self.readings[len(self.readings) // 2:]
        return statistics.median(c for c, _ in steady), statistics.median(w for _, w in steady)


def sustained(fn, sampler: Sampler) -> tuple[float, float, float]:
    """(milliseconds per call, MHz, W) of `fn` replayed back to back for SECONDS."""
    import torch

    from benchmarks.timing import graph_of
    graph, calls, replay_ms = graph_of(fn, target_ms=20.0)
    replays = max(2, round(SECONDS * 1000 / replay_ms))
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    sampler.start()
    start.record()
    for _ in range(replays):
        graph.replay()
    end.record()
    torch.cuda.synchronize()
    mhz, watts = sampler.stop()
    return start.elapsed_time(end) / (replays * calls), mhz, watts


def case_row(b: int, h: int, n: int, d: int, causal: int, sampler: Sampler) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from benchmarks.timing import balanced_orders
    from tkpy.kernels import attention
    q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))

    def sdpa(backend):
        def call():
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, is_causal=bool(causal))
        return call
    fns = {"tkpy": lambda: attention(q, k, v, causal=bool(causal)), "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION),
           "flash": sdpa(SDPBackend.FLASH_ATTENTION)}
    flops = 4 * b * h * n * n * d / (2 if causal else 1)
    runs = {name: [] for name in KERNELS}
    orders = balanced_orders(len(KERNELS))
    for r in range(ROUNDS):
        for i in orders[r % len(orders)]:
            ms, mhz, watts = sustained(fns[KERNELS[i]], sampler)
            runs[KERNELS[i]].append((flops / ms / 1e9, mhz, watts))
    row = {"b": b, "h": h, "n": n, "d": d, "causal": bool(causal)}
    for name, values in runs.items():
        tflops, mhz, watts = (statistics.median(x) for x in zip(*values))
        row[name] = {"tflops": tflops, "mhz": mhz, "watts": watts, "per_ghz": tflops / (mhz / 1000)}
    return row


def table(rows: list[dict]) -> str:
    lines = ["B H N D causal | kernel | TFLOP/s | SM MHz | W | TFLOP/s per GHz | vs flash | per clock vs flash",
             "--- | --- | --- | --- | --- | --- | --- | ---"]
    for row in rows:
        flash = row["flash"]
        for name in KERNELS:
            r = row[name]
            lines.append(f"{row['b']} {row['h']} {row['n']} {row['d']} {'yes' if row['causal'] else 'no'} | {name} | "
                         f"{r['tflops']:.0f} | {r['mhz']:.0f} | {r['watts']:.0f} | {r['per_ghz']:.0f} | "
                         f"{r['tflops'] / flash['tflops']:.2f} | {r['per_ghz'] / flash['per_ghz']:.2f}")
    return "\n".join(lines)


def main(argv: list[str]) -> None:
    import torch
    cases = [tuple(int(x) for x in argv[i:i + 5]) for i in range(0, len(argv), 5)] if argv else CASES
    sampler = Sampler(torch.cuda.current_device())
    rows = []
    for case in cases:
        rows.append(case_row(*case, sampler))
        print("\n".join(table(rows[-1:]).splitlines()[2:]), flush=True)
    print(table(rows))
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "power_clock.json").write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
