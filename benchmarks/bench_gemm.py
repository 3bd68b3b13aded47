"""tkpy GEMMs against cuBLAS (torch.matmul) in the same run: the LCF-template GEMM (kernels/gemm.py)
and the hand-written warp-specialized one (kernels/gemm_ws.py).

    PYTHONPATH=. python3 benchmarks/bench_gemm.py     (writes $OUT/gemm.json when OUT is set)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SIZES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 8192, 8192)]


def median_ms(fn, reps: int = 50) -> float:
    """Median of `reps` timed calls (CUDA events) after warm-up, rotating nothing: inputs stay in HBM
    (each operand is larger than L2 at these sizes)."""
    import torch
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    times.sort()
    return times[len(times) // 2]


def main() -> list[dict]:
    import torch

    from kernels import gemm, gemm_ws
    rows = []
    for m, n, k in SIZES:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        b = torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        flops = 2 * m * n * k
        t_lcf = median_ms(lambda: gemm.matmul(a, b, out=c))
        t_cluster = median_ms(lambda: gemm.matmul(a, b, out=c, cluster=2))
        t_ws = median_ms(lambda: gemm_ws.matmul(a, b, out=c))
        t_cublas = median_ms(lambda: torch.matmul(a, b, out=c))
        rows.append({"m": m, "n": n, "k": k, "lcf_tflops": flops / t_lcf / 1e9, "ws_tflops": flops / t_ws / 1e9,
                     "lcf_cluster2_tflops": flops / t_cluster / 1e9,
                     "cublas_tflops": flops / t_cublas / 1e9})
    print(f"{'M x N x K':>20} {'LCF':>6} {'LCF-cl2':>8} {'hand-WS':>8} {'cuBLAS':>8} {'LCF/cuBLAS':>11}")
    for r in rows:
        print(f"{r['m']:>6}x{r['n']}x{r['k']:<6} {r['lcf_tflops']:>6.0f} {r['lcf_cluster2_tflops']:>8.0f} "
              f"{r['ws_tflops']:>8.0f} {r['cublas_tflops']:>8.0f} {r['lcf_tflops'] / r['cublas_tflops']:>11.2f}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "gemm.json").write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
