"""Row softmax, y = softmax(x) over each row of an (R, D) bf16 matrix: the first tkpy kernel to read.

What it teaches: a warp-level `@tk.kernel`; a register tile (`tk.rt`) and the vectors its row reductions make
(`tk.col_vec`: one value per row); loads and stores that convert bf16 <-> fp32 on the way; ThunderKittens'
destination-first vocabulary (`row_max`, `sub_row`, `exp`, `row_sum`, `div_row`); and a launch,
`kernel[grid](*args)`, which traces, compiles (NVRTC, cached) and runs on torch's current stream.

Each block is 4 warps, each warp takes 16 whole rows in one fp32 register tile: R must be a multiple of 64 and D a
multiple of 16 up to 256 (a ValueError otherwise). kernels/row_softmax.py is the production kernel (any shape,
bounds-checked edges, a backward).

    python examples/softmax.py                    # Hopper GPU: 524288 x 128 against torch.softmax, and timed
    TKPY_INTERPRET=1 python examples/softmax.py   # tkpy's CPU interpreter, 128 x 64 (also without a GPU)
"""
import os
import statistics
import sys

import torch

import tkpy as tk
from tkpy import bf16, f32
from tkpy.runtime import gpu_available

WARPS = 4                  # warps per block, each on 16 rows


@tk.kernel(warps=WARPS)
def softmax_rows(x: tk.gl[bf16, "R", "C"], y: tk.gl[bf16, "R", "C"], D: tk.constexpr):
    row = tk.block_idx.x * WARPS + tk.warp_id()   # this warp's 16-row tile (coordinates count tiles)
    t = tk.rt(f32, 16, D)                          # 16 rows x D columns of fp32, spread over the warp's lanes
    m, s = tk.col_vec(t), tk.col_vec(t)            # one value per row: the max, then the sum
    tk.load(t, x, (row, 0))                        # bf16 -> fp32
    tk.row_max(m, t)
    tk.sub_row(t, t, m)                            # x - max: exp cannot overflow
    tk.exp(t, t)
    tk.row_sum(s, t)
    tk.div_row(t, t, s)
    tk.store(y, t, (row, 0))                       # fp32 -> bf16


def softmax(x: torch.Tensor) -> torch.Tensor:
    """torch.softmax(x, dim=-1) of a contiguous (R, D) bf16 tensor, R a multiple of 64, D of 16 up to 256."""
    if x.dtype != torch.bfloat16 or x.dim() != 2 or not x.is_contiguous():
        raise ValueError(f"softmax takes a contiguous 2-D bf16 tensor, got {x.dtype} of shape {tuple(x.shape)}")
    rows, d = x.shape
    if not rows or rows % (16 * WARPS) or d % 16 or not 16 <= d <= 256:
        raise ValueError(f"softmax needs rows a positive multiple of {16 * WARPS} and columns a multiple of 16 up to "
                         f"256 (one 16-row tile per warp, a row in its registers); got {rows} x {d}")
    y = torch.empty_like(x)
    softmax_rows[(rows // (16 * WARPS),)](x, y, d)
    return y


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


def main() -> None:
    gpu = gpu_available() and not tk.interpret_requested()
    if not gpu:
        os.environ["TKPY_INTERPRET"] = "1"        # every launch runs on tkpy's CPU interpreter
    rows, d = (524288, 128) if gpu else (128, 64)
    x = (3 * torch.randn(rows, d, device="cuda" if gpu else "cpu")).to(torch.bfloat16)
    # bf16 output: its rounding is up to 2^-8 relative; 2^-7 leaves room for the fp32 exp and sum.
    check(f"softmax {rows} x {d} bf16 ({'GPU' if gpu else 'interpreter'})", softmax(x),
          torch.softmax(x.double(), dim=-1), atol=1e-6, rtol=2 ** -7)
    if gpu:
        gigabytes = 2 * x.numel() * x.element_size() / 1e9      # read x, write y
        for name, fn in (("tkpy softmax", lambda: softmax(x)), ("torch.softmax", lambda: torch.softmax(x, -1))):
            us = median_us(fn)
            print(f"  {name:14} {us:8.1f} us  {gigabytes / us * 1e6:6.0f} GB/s")


if __name__ == "__main__":
    main()
