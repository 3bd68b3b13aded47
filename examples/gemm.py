"""C = A @ B in bf16 with fp32 accumulation on tkpy's load-compute-finish (LCF) block template.

What it teaches: a Hopper kernel as ThunderKittens writes one (its bf16_h100 GEMM), the layout plus four
methods, with the pipeline left to the template. `tk.lcf` makes one producer warpgroup that streams A's and B's
64-wide K slices into a ring of 4 shared-memory stages with TMA (`load`), two consumer warpgroups that multiply
each stage with wgmma into fp32 registers (`compute`), and a persistent grid, one block per SM, over the output
tiles in an L2-friendly order. The template owns the stages' semaphores and phases, the warp roles and their
register split; `Matmul.kernel.source(a, b, c)` shows the CUDA it generates.

Each task is a 128 x 256 tile of C: consumer warpgroup i owns its rows 64i..64i+63, each of its warps a 16-row
slice of the accumulator, and writes them straight from the registers (`finish`). M must be a multiple of 128,
N of 256 and K of 64 (a ValueError otherwise). kernels/gemm.py is the production GEMM (any shape, tile widths
chosen per shape, an epilogue through shared memory that overlaps the next tile, fused bias and activations).

    python examples/gemm.py                    # Hopper GPU: 4096^3 against torch.matmul (cuBLAS), and timed
    TKPY_INTERPRET=1 python examples/gemm.py   # tkpy's CPU interpreter, 256 x 512 x 384 (also without a GPU)
"""
import torch

import tkpy as tk
from harness import check, device, report_speed
from tkpy import bf16, f32
from tkpy.templates import shared

BM, BN, BK = 128, 256, 64      # C's tile per task, and the K step


@tk.lcf(consumer_warpgroups=2, stages=4, persistent=True)
class Matmul:
    A: tk.gl[bf16, "M", "K"]   # the kernel's tensors (global layouts)
    B: tk.gl[bf16, "K", "N"]
    C: tk.gl[bf16, "M", "N"]
    inputs = dict(a=shared(bf16, BM // 2, BK, count=2), b=shared(bf16, BK, BN))   # one stage: A's halves, B

    def tasks(self, g):                      # the grid of output tiles
        return g.C.rows // BM, g.C.cols // BN

    def iters(self, g):                      # K steps per tile
        return g.A.cols // BK

    def load(self, g, task, inp, k, arrived):    # producer: step k's slices into a free stage
        tk.tma.expect(arrived, inp)              # `arrived` completes when all of the stage's bytes have landed
        for i in range(2):
            tk.tma.load_async(inp.a[i], g.A, (task.row * 2 + i, k), arrived)   # coordinates count tiles
        tk.tma.load_async(inp.b, g.B, (k, task.col), arrived)

    def setup(self, st):                     # consumers: each warp's 16 x 256 fp32 slice of the tile
        st.acc = tk.rt(f32, 16, BN)

    def start(self, st, task):
        tk.zero(st.acc)

    def compute(self, st, inp, k):           # acc += A_half @ B on the tensor cores, from shared memory
        tk.warpgroup.mma_AB(st.acc, inp.a[tk.warpgroup.id()], inp.b)

    def finish(self, g, st, task):           # fp32 -> bf16, each warp its 16 rows
        tk.warpgroup.store(g.C, st.acc, (task.row * 2 + tk.warpgroup.id(), task.col))


def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a @ b of contiguous bf16 (M, K) and (K, N) tensors, M a multiple of 128, N of 256, K of 64."""
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"matmul expects a (M, K) @ b (K, N); got {tuple(a.shape)} @ {tuple(b.shape)}")
    if a.dtype != torch.bfloat16 or b.dtype != torch.bfloat16 or not (a.is_contiguous() and b.is_contiguous()):
        raise ValueError(f"matmul takes contiguous bf16 tensors, got {a.dtype} and {b.dtype}")
    (m, k), n = a.shape, b.shape[1]
    if not m * n * k or m % BM or n % BN or k % BK:
        raise ValueError(f"matmul needs M a positive multiple of {BM}, N of {BN} and K of {BK} (whole tiles); "
                         f"got M={m} N={n} K={k}")
    c = torch.empty(m, n, dtype=torch.bfloat16, device=a.device)
    Matmul(a, b, c)                          # launches Matmul.kernel on its persistent grid
    return c



def main() -> None:
    where = device()                     # "cuda", or "cpu": tkpy's CPU interpreter runs every launch
    gpu = where == "cuda"
    m, n, k = (4096, 4096, 4096) if gpu else (256, 512, 384)
    a, b = (torch.randn(shape, device=where).to(torch.bfloat16) for shape in ((m, k), (k, n)))
    # bf16 output: its rounding is up to 2^-8 relative; atol covers fp32 sums of K products near zero.
    check(f"matmul {m} x {n} x {k} bf16 ({'GPU' if gpu else 'interpreter'})", matmul(a, b),
          a.double() @ b.double(), atol=1e-3 * k ** 0.5, rtol=2 ** -7)
    if gpu:
        report_speed(f"{m} x {n} x {k}", 2 * m * n * k,
                     {"tkpy matmul": lambda: matmul(a, b), "torch.matmul": lambda: torch.matmul(a, b)})


if __name__ == "__main__":
    main()
