"""Row layernorm, y = (x - mean) / sqrt(var + eps) * weight + bias over each row of an (R, D) bf16 matrix.

What it teaches, beyond examples/softmax.py: a runtime loop (`tk.range`) over a row too wide for the registers,
reductions that accumulate into a vector across its steps (`tk.row_sum(s, t, s)`), a `tk.map` of vectors, and
both broadcasts: per row (`sub_row`, `mul_row`: the row's statistics) and per column (`mul_col`, `add_col`:
the weight and bias, `tk.row_vec`s loaded from 1-D tensors).

Each block is 4 warps, each warp takes 16 rows in steps of 128 columns: one pass sums x and x^2 (the variance is
E[x^2] - mean^2, in fp32), a second reads x again and writes y. That is the simple way (Triton's tutorial
layernorm makes three passes); a faster kernel keeps the rows on chip and reads x once. R must be a multiple of 64
and D a multiple of 128 (a ValueError otherwise).

    python examples/layernorm.py                    # Hopper GPU: 16384 x 4096 against F.layer_norm, and timed
    TKPY_INTERPRET=1 python examples/layernorm.py   # tkpy's CPU interpreter, 128 x 512 (also without a GPU)
"""
import torch
import torch.nn.functional as F

import tkpy as tk
from harness import check, device, median_us
from tkpy import bf16, f32

WARPS, STEP = 4, 128      # warps per block, each on 16 rows; columns per step


@tk.kernel(warps=WARPS)
def layernorm_rows(x: tk.gl[bf16, "R", "D"], weight: tk.gl[bf16, "D"], bias: tk.gl[bf16, "D"],
                   y: tk.gl[bf16, "R", "D"], eps: float):
    row = tk.block_idx.x * WARPS + tk.warp_id()   # this warp's 16-row tile
    t = tk.rt(f32, 16, STEP)                       # 16 rows x 128 columns of x at a time
    mean, squares, rstd = tk.col_vec(t), tk.col_vec(t), tk.col_vec(t)   # one value per row
    w, b = tk.row_vec(t), tk.row_vec(t)            # one value per column
    tk.zero(mean)
    tk.zero(squares)
    for k in tk.range(x.cols // STEP):             # pass 1: each row's sums of x and x^2
        tk.load(t, x, (row, k))
        tk.row_sum(mean, t, mean)                  # mean += row sums of t
        tk.mul(t, t, t)
        tk.row_sum(squares, t, squares)
    tk.div(mean, mean, x.cols)
    # rstd = 1 / sqrt(E[x^2] - mean^2 + eps), as exp2(-log2(v) / 2): tkpy has no rsqrt yet
    tk.map(rstd, lambda sq, m: tk.exp2(-0.5 * tk.log2(sq / x.cols - m * m + eps)), squares, mean)
    for k in tk.range(x.cols // STEP):             # pass 2: normalize, scale, shift
        tk.load(t, x, (row, k))
        tk.load(w, weight, (k,))                   # vector coordinates count vectors: columns 128k..
        tk.load(b, bias, (k,))
        tk.sub_row(t, t, mean)
        tk.mul_row(t, t, rstd)
        tk.mul_col(t, t, w)
        tk.add_col(t, t, b)
        tk.store(y, t, (row, k))


def layernorm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float = 1e-5) -> torch.Tensor:
    """F.layer_norm(x, (D,), weight, bias, eps) of a contiguous (R, D) bf16 tensor, R a multiple of 64, D of 128."""
    if x.dim() != 2 or not x.is_contiguous() or any(t.dtype != torch.bfloat16 for t in (x, weight, bias)):
        raise ValueError("layernorm takes a contiguous 2-D bf16 x and bf16 weight and bias")
    rows, d = x.shape
    if not rows * d or rows % (16 * WARPS) or d % STEP or weight.shape != (d,) or bias.shape != (d,):
        raise ValueError(f"layernorm needs rows a positive multiple of {16 * WARPS}, columns of {STEP} and weight "
                         f"and bias of shape ({d},); got x {rows} x {d}, weight {tuple(weight.shape)}, "
                         f"bias {tuple(bias.shape)}")
    y = torch.empty_like(x)
    layernorm_rows[(rows // (16 * WARPS),)](x, weight, bias, y, eps)
    return y



def main() -> None:
    where = device()                     # "cuda", or "cpu": tkpy's CPU interpreter runs every launch
    gpu = where == "cuda"
    rows, d = (16384, 4096) if gpu else (128, 512)
    x = (2 * torch.randn(rows, d, device=where) + 0.5).to(torch.bfloat16)
    weight, bias = (torch.randn(d, device=where).to(torch.bfloat16) for _ in range(2))
    ref = F.layer_norm(x.double(), (d,), weight.double(), bias.double(), 1e-5)
    # bf16 output: its rounding is up to 2^-8 relative; 2^-7 and atol leave room for the fp32 statistics.
    check(f"layernorm {rows} x {d} bf16 ({'GPU' if gpu else 'interpreter'})", layernorm(x, weight, bias), ref,
          atol=1e-3, rtol=2 ** -7)
    if gpu:
        gigabytes = 2 * x.numel() * x.element_size() / 1e9      # read x, write y
        for name, fn in (("tkpy layernorm", lambda: layernorm(x, weight, bias)),
                         ("F.layer_norm", lambda: F.layer_norm(x, (d,), weight, bias, 1e-5))):
            us = median_us(fn)
            print(f"  {name:14} {us:8.1f} us  {gigabytes / us * 1e6:6.0f} GB/s")


if __name__ == "__main__":
    main()
