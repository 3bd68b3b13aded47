"""Row softmax, y = softmax(x) over each row of an (R, D) bf16 matrix: the first tkpy kernel to read.

What it teaches: a warp-level `@tk.kernel`; a register tile (`tk.rt`) and the vectors its row reductions make
(`tk.col_vec`: one value per row); loads and stores that convert bf16 <-> fp32 on the way; ThunderKittens'
destination-first vocabulary (`row_max`, `sub_row`, `exp`, `row_sum`, `div_row`); and a launch,
`kernel[grid](*args)`, which traces, compiles (NVRTC, cached) and runs on torch's current stream.

Each block is 4 warps, each warp takes 16 whole rows in one fp32 register tile: R must be a multiple of 64 and D a
multiple of 16 up to 256 (a ValueError otherwise). tkpy.kernels.softmax is the production op (kernels/softmax_op.py:
any shape, rows up to 262144 wide, bf16/fp16/fp32, a backward).

    python examples/softmax.py                    # Hopper GPU: 524288 x 128 against torch.softmax, and timed
    TKPY_INTERPRET=1 python examples/softmax.py   # tkpy's CPU interpreter, 128 x 64 (also without a GPU)
"""
import torch

import tkpy as tk
from harness import check, device, median_us
from tkpy import bf16, f32

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



def main() -> None:
    where = device()                     # "cuda", or "cpu": tkpy's CPU interpreter runs every launch
    gpu = where == "cuda"
    rows, d = (524288, 128) if gpu else (128, 64)
    x = (3 * torch.randn(rows, d, device=where)).to(torch.bfloat16)
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
