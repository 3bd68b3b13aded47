"""tkpy attention forward against SDPA's cuDNN and flash backends in the same run (bf16).

    PYTHONPATH=. python3 benchmarks/bench_attention.py     (writes $OUT/attention.json when OUT is set)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks.bench_gemm import median_ms  # noqa: E402

CASES = [(16, 16, 4096, 128), (16, 16, 4096, 64), (4, 16, 16384, 128), (16, 16, 1024, 128)]


def main() -> list[dict]:
    import torch
    from torch.nn.attention import SDPBackend, sdpa_kernel

    from kernels.attention import attention
    rows = []
    for b, h, n, d in CASES:
        q, k, v = (torch.randn(b, h, n, d, dtype=torch.bfloat16, device="cuda") for _ in range(3))
        flops = 4 * b * h * n * n * d
        row = {"b": b, "h": h, "n": n, "d": d, "tkpy": flops / median_ms(lambda: attention(q, k, v), 20) / 1e9}
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            with sdpa_kernel(backend):
                fn = lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v)  # noqa: E731
                row[name] = flops / median_ms(fn, 20) / 1e9
        rows.append(row)
    print(f"{'B H N D':>18} {'tkpy':>6} {'cuDNN':>6} {'flash':>6} {'vs cuDNN':>9} {'vs flash':>9}  (TFLOP/s, non-causal)")
    for r in rows:
        print(f"{r['b']:>3} {r['h']:>3} {r['n']:>6} {r['d']:>4} {r['tkpy']:>6.0f} {r['cudnn']:>6.0f} {r['flash']:>6.0f} "
              f"{r['tkpy'] / r['cudnn']:>9.2f} {r['tkpy'] / r['flash']:>9.2f}")
    if os.environ.get("OUT"):
        Path(os.environ["OUT"], "attention.json").write_text(json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
