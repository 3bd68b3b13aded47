"""The examples' kernels beside the production kernels and torch, in the same run: examples/attention.py against
attention() (tkpy.kernels) and SDPA's cuDNN backend at B16 H16 N4096, D64 and D128, causal and not; the softmax,
layernorm and GEMM examples against torch at their GPU sizes.

TFLOP/s (attention, GEMM) or GB/s (softmax, layernorm: bytes read and written; interleaved_tflops of bytes x 1e3) from
the median of ROUNDS rounds,
each timing every function once by CUDA-graph replays (benchmarks/timing.py), in balanced orders.

    PYTHONPATH=. python3 benchmarks/bench_examples.py [ROUNDS]   ($OUT/examples.json when OUT is set)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "examples"))

from benchmarks.bench_attention import interleaved_tflops  # noqa: E402

ATTENTION_CASES = [(16, 16, 4096, d, causal) for d in (128, 64) for causal in (False, True)]
ROUNDS = 5


def attention_rows(rounds: int) -> list[dict]:
    import attention as example
    import tkpy.kernels as kernels
    from torch.nn.attention import SDPBackend, sdpa_kernel

    rows = []
    for b, h, n, d, causal in ATTENTION_CASES:
        q, k, v = (torch.randn(b, h, n, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                return torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=causal)
        fns = {"example": lambda: example.attention(q, k, v, causal),
               "attention()": lambda: kernels.attention(q, k, v, causal=causal), "cuDNN": cudnn}
        flops = 4 * b * h * n * n * d / (2 if causal else 1)
        tflops = interleaved_tflops(fns, rounds, flops)
        rows.append(dict(case=f"B{b} H{h} N{n} D{d}", causal=causal, **tflops,
                         example_vs_attention=tflops["example"] / tflops["attention()"],
                         example_vs_cudnn=tflops["example"] / tflops["cuDNN"]))
    return rows


def memory_rows(rounds: int) -> list[dict]:
    import gemm
    import layernorm
    import softmax

    x = torch.randn(524288, 128, device="cuda", dtype=torch.bfloat16)
    rows = [dict(case="softmax 524288 x 128", unit="GB/s", **interleaved_tflops(
        {"example": lambda: softmax.softmax(x), "torch": lambda: torch.softmax(x, dim=-1)}, rounds,
        2 * x.numel() * 2 * 1e3))]
    x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
    w, bias = torch.randn(4096, device="cuda", dtype=torch.bfloat16), torch.randn(4096, device="cuda",
                                                                                 dtype=torch.bfloat16)
    rows.append(dict(case="layernorm 16384 x 4096", unit="GB/s", **interleaved_tflops(
        {"example": lambda: layernorm.layernorm(x, w, bias),
         "torch": lambda: torch.nn.functional.layer_norm(x, (4096,), w, bias)}, rounds, 2 * x.numel() * 2 * 1e3)))
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    rows.append(dict(case="gemm 4096^3", unit="TFLOP/s", **interleaved_tflops(
        {"example": lambda: gemm.matmul(a, b), "torch": lambda: torch.matmul(a, b)}, rounds, 2 * 4096 ** 3)))
    for row in rows:
        row["example_vs_torch"] = row["example"] / row["torch"]
    return rows


def main(rounds: int = ROUNDS) -> dict:
    report = {"attention": attention_rows(rounds), "others": memory_rows(rounds)}
    print("| case | causal | example TFLOP/s | attention() | cuDNN | example / attention() | example / cuDNN |")
    print("|---|---|---|---|---|---|---|")
    for r in report["attention"]:
        print(f"| {r['case']} | {'yes' if r['causal'] else 'no'} | {r['example']:.0f} | {r['attention()']:.0f} | "
              f"{r['cuDNN']:.0f} | **{r['example_vs_attention']:.3f}** | {r['example_vs_cudnn']:.3f} |")
    print("\n| case | unit | example | torch | example / torch |\n|---|---|---|---|---|")
    for r in report["others"]:
        print(f"| {r['case']} | {r['unit']} | {r['example']:.0f} | {r['torch']:.0f} | {r['example_vs_torch']:.3f} |")
    if os.environ.get("OUT"):
        (Path(os.environ["OUT"]) / "examples.json").write_text(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else ROUNDS)
