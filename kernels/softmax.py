"""Row softmax: y = softmax(x, dim=-1) for a (rows, D) bf16 tensor, one 16-row tile per warp.

Run `python -m kernels.softmax` for a demo: on a Hopper GPU it launches and checks
against torch; without one it prints the generated CUDA and compiles it.
"""
from __future__ import annotations

import torch

import tkpy as tk
from kernels import forward_only
from tkpy import bf16, f32

WARPS = 4
ROWS_PER_WARP = 16


@tk.kernel(warps=WARPS)
def softmax_rows(x: tk.gl[bf16, "R", "C"], y: tk.gl[bf16, "R", "C"], D: tk.constexpr):
    row = tk.block_idx.x * WARPS + tk.warp_id()          # this warp's 16-row tile
    t = tk.rt(f32, ROWS_PER_WARP, D)                      # register tile, row layout
    m, s = tk.col_vec(t), tk.col_vec(t)                   # one value per row
    tk.load(t, x, (row, 0))                               # bf16 -> f32
    tk.row_max(m, t)
    tk.sub_row(t, t, m)
    tk.exp(t, t)
    tk.row_sum(s, t)
    tk.div_row(t, t, s)
    tk.store(y, t, (row, 0))                              # f32 -> bf16


def softmax(x: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    """Softmax over the last dim of a 2-D bf16 tensor whose rows are a multiple of 64 and dim of 16 (<= 256)."""
    if x.dim() != 2 or x.dtype != torch.bfloat16:
        raise ValueError(f"softmax expects a 2-D bf16 tensor, got {x.dim()}-D {x.dtype}")
    forward_only("softmax", x)
    rows, d = x.shape
    if rows % (WARPS * ROWS_PER_WARP) or d % 16 or not 16 <= d <= 256:
        raise ValueError(f"softmax needs rows % {WARPS * ROWS_PER_WARP} == 0 and dim a multiple of 16 up to 256; "
                         f"got {tuple(x.shape)}")
    y = torch.empty_like(x) if out is None else out
    softmax_rows[(rows // (WARPS * ROWS_PER_WARP),)](x, y, d)
    return y


def _demo() -> None:
    from tkpy.runtime import gpu_available

    if not gpu_available():
        x = torch.randn(1024, 64, dtype=torch.bfloat16)
        print(softmax_rows.source(x, x, 64))
        res = softmax_rows.resources(x, x, 64)
        print(f"// No Hopper GPU found: compiled the kernel above to an sm_90a cubin "
              f"({len(softmax_rows.trace(x, x, 64).lower().compile().cubin)} bytes; {res.summary()}), not launched.")
        return
    x = torch.randn(4096, 128, dtype=torch.bfloat16, device="cuda")
    y = softmax(x)
    ref = torch.softmax(x.double(), dim=-1)
    err = ((y.double() - ref).norm() / ref.norm()).item()
    print(f"softmax 4096x128 bf16 on {torch.cuda.get_device_name()}: relative error {err:.2e} "
          f"({'OK' if err < 1e-2 else 'FAILED'})")
    print(softmax_rows.source(x, y, 128).split("// ---- end of prelude ----")[1])


if __name__ == "__main__":
    _demo()
