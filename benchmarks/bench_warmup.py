"""How much compiling on a pool of threads saves: `python -m tkpy.warmup`'s specs compiled into a fresh cache
directory with 1 thread and with N, alternately, a few rounds, each in a new process (NVRTC releases the GIL, so
threads compile at once; the host's other load counts, so the medians are what to read).

    PYTHONPATH=. python benchmarks/bench_warmup.py [--threads 1,2] [--rounds 3] [SPEC ...]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile

SPECS = ["matmul:4096x4096x4096", "matmul:1024x1024x1024", "softmax:4096x128", "softmax:4096x64",
         "attention:16x16x4096x64", "attention:4x16x1024x128:causal"]


def seconds(specs: list[str], threads: int) -> tuple[float, float]:
    """(wall seconds, NVRTC seconds summed over the kernels) of one warm-up into a new cache directory."""
    with tempfile.TemporaryDirectory() as cache:
        done = subprocess.run([sys.executable, "-m", "tkpy.warmup", *specs, "--threads", str(threads)],
                              capture_output=True, text=True, check=True, env={**os.environ, "TKPY_CACHE_DIR": cache})
    wall, nvrtc = re.search(r"in ([\d.]+) s, \d+ compiled \(NVRTC ([\d.]+) s\)", done.stdout).groups()
    return float(wall), float(nvrtc)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("specs", nargs="*", default=SPECS)
    parser.add_argument("--threads", default=f"1,{os.cpu_count()}")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    counts = [int(t) for t in args.threads.split(",")]
    runs = {t: [] for t in counts}
    for _ in range(args.rounds):
        for t in counts:
            runs[t].append(seconds(args.specs, t))
    base = statistics.median(w for w, _ in runs[counts[0]])
    print(f"{len(args.specs)} specs, {args.rounds} rounds, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    for t in counts:
        wall = statistics.median(w for w, _ in runs[t])
        nvrtc = statistics.median(n for _, n in runs[t])
        print(f"  {t:>3} threads: {wall:6.2f} s wall (NVRTC {nvrtc:6.2f} s summed), {base / wall:4.2f}x")


if __name__ == "__main__":
    main()
