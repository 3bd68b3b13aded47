"""Shared <-> register copy throughput per shared-tile swizzle mode: are the swizzled layouts bank-conflict-free?

Each warp of a 4-warp block repeatedly copies its 16 x W band of a bf16 shared tile (W = 64 or 128)
to or from a register tile: ldmatrix (row layout), ldmatrix.trans (col layout), stmatrix and
stmatrix.trans. A 16-byte-per-lane ldmatrix phase reads 8 rows of 16 bytes; unswizzled, those
rows lie W * 2 bytes apart, a multiple of 128, so all 8 hit the same 4 banks (an 8-way conflict);
the 32/64/128-byte swizzles spread them over 2/4/8 bank groups. The table gives bytes moved per
clock per SM (the shared-memory peak is 128) and the speed-up over the unswizzled tile, from GPU time per
call in CUDA-graph replays (benchmarks/timing.py).

    PYTHONPATH=. python3 benchmarks/bench_smem.py     (writes $OUT/smem.json when OUT is set)
"""
from __future__ import annotations

import functools
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

WARPS, BLOCKS_PER_SM, ITERS = 4, 8, 4096
WIDTHS = (64, 128)
SWIZZLES = (0, 32, 64, 128)
OPS = {"ldmatrix": ("load", "row"), "ldmatrix.trans": ("load", "col"),
       "stmatrix": ("store", "row"), "stmatrix.trans": ("store", "col")}


@functools.cache
def copy_kernel(width: int, swizzle: int, op: str):
    """`ITERS` copies of each warp's 16 x width band between the shared tile and a register tile."""
    import tkpy as tk
    from tkpy import bf16

    direction, layout = OPS[op]

    @tk.kernel(warps=WARPS, name=f"smem_{direction}_{layout}_{width}_s{swizzle}")
    def k(x: tk.gl[bf16, 16 * WARPS, width], y: tk.gl[bf16, "R", width], n: int):
        s = tk.st(bf16, 16 * WARPS, width, swizzle=swizzle)
        t = tk.rt(bf16, 16, width, layout)
        kept = tk.rt(bf16, 16, width, layout)     # loads feed it, so the assembler cannot drop them
        band = s.subtile(16, width, (tk.warp_id(), 0))
        tk.block.load(s, x, (0, 0))
        tk.sync()
        tk.load(t, band)
        tk.copy(kept, t)
        for _ in tk.range(n):
            if direction == "load":
                tk.load(t, band)
                tk.max(kept, kept, t)
            else:
                tk.store(band, t)
        tk.store(y, kept, (tk.block_idx.x * WARPS + tk.warp_id(), 0))
    return k


def sm_clock_hz(device: int) -> float:
    from cuda.bindings import driver as drv
    err, khz = drv.cuDeviceGetAttribute(drv.CUdevice_attribute.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, device)
    return khz * 1e3 if err == drv.CUresult.CUDA_SUCCESS else float("nan")


def main() -> list[dict]:
    import torch

    from benchmarks.timing import median_ms
    from tkpy.runtime import gpu_available
    if not gpu_available():
        print("bench_smem: no Hopper GPU visible; nothing to measure.")
        return []
    dev = torch.cuda.current_device()
    sms = torch.cuda.get_device_properties(dev).multi_processor_count
    clock = sm_clock_hz(dev)
    blocks = sms * BLOCKS_PER_SM
    rows = []
    for width in WIDTHS:
        x = torch.randn(16 * WARPS, width, dtype=torch.bfloat16, device="cuda")
        y = torch.empty(blocks * WARPS * 16, width, dtype=torch.bfloat16, device="cuda")
        for op in OPS:
            for swizzle in SWIZZLES:
                kern = copy_kernel(width, swizzle, op)
                ms = median_ms(lambda: kern[(blocks,)](x, y, ITERS))
                moved = blocks * WARPS * ITERS * 16 * width * 2
                rows.append({"width": width, "op": op, "swizzle": swizzle, "ms": ms, "gb_per_s": moved / ms / 1e6,
                             "bytes_per_clock_per_sm": moved / (ms * 1e-3) / clock / sms})
    print(f"bf16 shared <-> register copies, bytes per clock per SM (peak 128; SM clock {clock / 1e6:.0f} MHz), "
          "and the speed-up over the unswizzled tile")
    print(f"{'W':>4} {'op':<16}" + "".join(f"{f'{s}B' if s else 'none':>16}" for s in SWIZZLES))
    for width in WIDTHS:
        for op in OPS:
            cells = {r["swizzle"]: r for r in rows if r["width"] == width and r["op"] == op}
            base = cells[0]["bytes_per_clock_per_sm"]
            line = "".join(f"{c['bytes_per_clock_per_sm']:>8.1f} ({c['bytes_per_clock_per_sm'] / base:4.1f}x)"
                           for c in (cells[s] for s in SWIZZLES))
            print(f"{width:>4} {op:<16}{line}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "smem.json").write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
