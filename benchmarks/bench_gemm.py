"""tkpy's GEMM (kernels/gemm.py: the LCSF template, split-K for few tiles) against cuBLAS (torch.matmul)
in the same run.

Shapes: squares 1024..16384 (A @ B, both row-major); LLM-like projections, M tokens in {128, 2048,
16384} against 8192x8192 and 28672x8192 weights, both as x @ W.T (the nn.Linear layout, W (N, K)) and
x @ W with W (K, N); one fused epilogue case against torch's unfused addmm + gelu. bf16 in and out,
fp32 accumulation. The epilogue case compares with cuBLASLt's fused GELU epilogue
(torch._addmm_activation) where torch has it, else with addmm + gelu. Each row also gives the relative difference between tkpy's and cuBLAS's outputs.

    PYTHONPATH=. python3 benchmarks/bench_gemm.py     (tables on stdout; $OUT/gemm.json and $OUT/gemm.png
                                                        when OUT is set, else ./gemm.png; --no-variants
                                                        skips the variant tables)
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SQUARES = [1024, 2048, 4096, 8192, 16384]
TOKENS = [128, 2048, 16384]
WEIGHTS = [(8192, 8192), (28672, 8192)]          # (N, K): (out features, in features)
TARGET_MS = 400                                  # timed time per measurement (bounds the run at ~1-2 min)


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


def queued_median_ms(fn, reps: int = 50) -> float:
    """Median GPU time of `reps` back-to-back calls, each between its own pair of CUDA events and with no
    synchronisation in between, so each call's host-side launch work overlaps the previous call's kernel
    (as in a model's forward pass) instead of being timed when the kernel is short."""
    import torch
    for _ in range(5):
        fn()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    times = sorted(start.elapsed_time(end) for start, end in events)
    return times[len(times) // 2]


def cases() -> list[dict]:
    out = [dict(kind="square", m=s, n=s, k=s, layout="nn") for s in SQUARES]
    out += [dict(kind="llm", m=m, n=n, k=k, layout=layout) for m in TOKENS for n, k in WEIGHTS
            for layout in ("nt", "nn")]
    out.append(dict(kind="epilogue", m=4096, n=4096, k=4096, layout="nt", epilogue="bias+gelu"))
    return out


def measure(case: dict) -> dict:
    import torch

    from kernels import gemm
    m, n, k, layout = case["m"], case["n"], case["k"], case["layout"]
    a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
    w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") if layout == "nt" else \
        torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
    b = w.T if layout == "nt" else w
    c, ref = (torch.empty(m, n, dtype=torch.bfloat16, device="cuda") for _ in range(2))
    got = {}
    if case.get("epilogue"):                # gelu(0.05 a @ b + bias): fused by cuBLASLt where torch offers it
        bias = torch.randn(n, dtype=torch.bfloat16, device="cuda")
        fused = getattr(torch, "_addmm_activation", None)
        case = dict(case, reference="cuBLASLt fused epilogue" if fused else "torch addmm + gelu")

        def ours():
            gemm.matmul(a, b, out=c, bias=bias, activation="gelu", scale=0.05)

        def theirs():
            if fused:
                got["ref"] = fused(bias, a, b, alpha=0.05, use_gelu=True)
            else:
                got["ref"] = torch.nn.functional.gelu(torch.addmm(bias, a, b, alpha=0.05), approximate="tanh")
    else:
        def ours():
            gemm.matmul(a, b, out=c)

        def theirs():
            torch.matmul(a, b, out=ref)
    ours(), theirs()
    torch.cuda.synchronize()
    expected = got.get("ref", ref)
    diff = ((c.float() - expected.float()).norm() / expected.float().norm()).item()
    flops = 2 * m * n * k
    estimate = flops / 600e12 * 1e3                  # ms at ~600 TFLOP/s
    reps = max(10, min(50, int(TARGET_MS / max(estimate, 1e-3))))
    t_ours, t_theirs = queued_median_ms(ours, reps), queued_median_ms(theirs, reps)
    row = dict(case, tkpy_tflops=flops / t_ours / 1e9, cublas_tflops=flops / t_theirs / 1e9, rel_diff=diff,
               block_n=gemm._block_n(m, n, torch.empty(0, device="cuda")))
    row["ratio"] = row["tkpy_tflops"] / row["cublas_tflops"]
    row["lcf_tflops"] = row["tkpy_tflops"]            # the name earlier runs used
    return row


def label(r: dict) -> str:
    return f"{r['m']}x{r['n']}x{r['k']} {r['layout']}" + (f" {r['epilogue']}" if r.get("epilogue") else "")


def plot(rows: list[dict], path: Path) -> None:
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no plot")
        return
    squares = [r for r in rows if r["kind"] == "square"]
    others = [r for r in rows if r["kind"] != "square"]
    fig, (left, right) = plt.subplots(1, 2, figsize=(15, 5.5), gridspec_kw=dict(width_ratios=[1, 2]))
    sizes = [r["m"] for r in squares]
    left.plot(sizes, [r["tkpy_tflops"] for r in squares], "o-", label="tkpy")
    left.plot(sizes, [r["cublas_tflops"] for r in squares], "s--", label="cuBLAS (torch.matmul)")
    left.set_xscale("log", base=2)
    left.set_xticks(sizes, [str(s) for s in sizes])
    left.set(title="square bf16 GEMM, N x N x N", xlabel="N", ylabel="TFLOP/s", ylim=(0, None))
    left.legend()
    x = range(len(others))
    right.bar([i - 0.2 for i in x], [r["tkpy_tflops"] for r in others], 0.4, label="tkpy")
    right.bar([i + 0.2 for i in x], [r["cublas_tflops"] for r in others], 0.4, label="cuBLAS / torch")
    for i, r in zip(x, others):
        right.text(i, max(r["tkpy_tflops"], r["cublas_tflops"]), f"{r['ratio']:.2f}x", ha="center", va="bottom",
                   fontsize=7)
    right.set_xticks(list(x), [label(r).replace(" ", "\n", 1) for r in others], fontsize=7, rotation=45)
    right.set(title="LLM-like shapes (M tokens x N out x K in; nt: x @ W.T) and a fused epilogue, bf16; "
                    "labels: tkpy / cuBLAS", ylabel="TFLOP/s")
    right.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"plot: {path}")


# Variants of the kernel, timed side by side on shapes where they matter (TFLOP/s):
# epilogues: "tma" (the default: LCSF, 4 input + 2 output stages of 128 x 64 pieces), "tma 3+4" (3 input
# stages, a whole 128 x 256 tile of output stages), "registers" (LCF, masked stores from the registers);
# split-K with its split count and tile width forced, ordered (deterministic) or atomic.
EPILOGUE_VARIANTS = {"tma": dict(), "tma 3+4": dict(stages=3, output_stages=4), "registers": dict(epilogue="registers")}
EPILOGUE_SHAPES = [(2048, 2048, 2048, "nn"), (4096, 4096, 4096, "nn"), (8192, 8192, 8192, "nn"), (2048, 8192, 8192, "nt")]
SPLIT_VARIANTS = {"auto": dict(), "no split": dict(split_k=1), "S2 n128": dict(split_k=2, block_n=128),
                  "S4 n256": dict(split_k=4, block_n=256), "S4 n256 atomic": dict(split_k=4, block_n=256,
                                                                                   deterministic=False),
                  "S8 n256": dict(split_k=8, block_n=256)}
SPLIT_SHAPES = [(128, 8192, 8192, "nt"), (1, 4096, 4096, "nt"), (1024, 1024, 1024, "nn"), (256, 4096, 8192, "nt")]


def variant_tables() -> dict:
    """Epilogue variants through the templates directly, split-K variants through matmul (GPU time per call)."""
    import torch

    import tkpy as tk
    from kernels import gemm

    def operands(m, n, k, layout):
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") if layout == "nt" else \
            torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        return a, w

    epilogues = []
    for m, n, k, layout in EPILOGUE_SHAPES:
        a, w = operands(m, n, k, layout)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        row = dict(m=m, n=n, k=k, layout=layout)
        for name, options in EPILOGUE_VARIANTS.items():
            template = gemm.matmul_template(tk.bf16, tk.bf16, layout == "nt", **options)
            row[name] = 2 * m * n * k / median_ms(lambda: template(a, w, c)) / 1e9
        epilogues.append(row)
    splits = []
    for m, n, k, layout in SPLIT_SHAPES:
        a, w = operands(m, n, k, layout)
        b = w.T if layout == "nt" else w
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        row = dict(m=m, n=n, k=k, layout=layout)
        for name, options in SPLIT_VARIANTS.items():
            row[name] = 2 * m * n * k / median_ms(lambda: gemm.matmul(a, b, out=c, **options)) / 1e9
        row["cuBLAS"] = 2 * m * n * k / median_ms(lambda: torch.matmul(a, b, out=c)) / 1e9
        splits.append(row)
    for title, rows, names in (("epilogue variants", epilogues, list(EPILOGUE_VARIANTS)),
                               ("split-K variants", splits, list(SPLIT_VARIANTS) + ["cuBLAS"])):
        print(f"\ntkpy {title} (TFLOP/s, GPU time per call)")
        print(f"{'M x N x K layout':>24} " + " ".join(f"{name:>15}" for name in names))
        for r in rows:
            print(f"{r['m']:>6}x{r['n']}x{r['k']} {r['layout']:>3} " + " ".join(f"{r[x]:>15.0f}" for x in names),
                  flush=True)
    return dict(epilogues=epilogues, splits=splits)


def main() -> list[dict]:
    rows = []
    print(f"{'M x N x K layout':>34} {'tkpy':>6} {'cuBLAS':>7} {'ratio':>6} {'BN':>4} {'rel diff':>9}")
    for case in cases():
        r = measure(case)
        rows.append(r)
        print(f"{label(r):>34} {r['tkpy_tflops']:>6.0f} {r['cublas_tflops']:>7.0f} {r['ratio']:>6.2f} "
              f"{r['block_n']:>4} {r['rel_diff']:>9.1e}", flush=True)
    variants = variant_tables() if "--no-variants" not in sys.argv else {}
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    if out:
        (out / "gemm.json").write_text(json.dumps(dict(cases=rows, variants=variants), indent=2))
    plot(rows, (out or Path(".")) / "gemm.png")
    return rows


if __name__ == "__main__":
    main()
