"""tkpy's GEMM (kernels/gemm.py: the LCSF template, split-K for few tiles) against cuBLAS (torch.matmul)
in the same run.

Shapes: squares 1024..16384 (A @ B, both row-major); LLM-like projections, M tokens in {128, 2048,
16384} against 8192x8192 and 28672x8192 weights, both as x @ W.T (the nn.Linear layout, W (N, K)) and
x @ W with W (K, N); one fused epilogue case against torch's unfused addmm + gelu. bf16 in and out,
fp32 accumulation. The epilogue case compares with cuBLASLt's fused GELU epilogue
(torch._addmm_activation) where torch has it, else with addmm + gelu. Each row also gives the tile
width tkpy runs (BN) and the relative difference between tkpy's and cuBLAS's outputs.

Times are GPU time per call from CUDA-graph replays (benchmarks/timing.py): each measurement replays a
graph of back-to-back calls, so short kernels (1024^3: about 7 us) are timed without the host's launch
work, for tkpy and cuBLAS alike. Inputs are not rotated: every call reads the same tensors. Each case is
timed tkpy, cuBLAS, cuBLAS, tkpy (the one timed second gains up to ~8% at 8192^3; this order cancels it).

Variant tables follow (--no-variants skips them): the epilogue variants, split-K, and the tile widths
(64, 128 and 256 forced, side by side with cuBLAS and what matmul picks). BN: the tile width matmul runs
(it splits K only when asked).

    PYTHONPATH=. python3 benchmarks/bench_gemm.py [--quick] [--no-variants]
        tables on stdout; $OUT/gemm.json and $OUT/gemm.png when OUT is set, else ./gemm.png.
        --quick: only the main table's shapes of fewer than 4096^3 multiply-adds, and the tile-width table
    PYTHONPATH=. python3 benchmarks/bench_gemm.py --repeat N [SIZE ...]
        only squares (default 1024 4096 8192), each measured N times (rounds interleaved over the sizes):
        the median ratio and its spread, for the goals the run-to-run noise (~5%) blurs.
"""
from __future__ import annotations

import json
import os
import sys
from pathlib import Path
import tkpy.kernels as tkpy_kernels

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

SQUARES = [1024, 2048, 4096, 8192, 16384]
TOKENS = [128, 2048, 16384]
WEIGHTS = [(8192, 8192), (28672, 8192)]          # (N, K): (out features, in features)
QUICK_MACS = 4096 ** 3                            # --quick: the main table's cases below this many multiply-adds


def cases(quick: bool = False) -> list[dict]:
    out = [dict(kind="square", m=s, n=s, k=s, layout="nn") for s in SQUARES]
    out += [dict(kind="llm", m=m, n=n, k=k, layout=layout) for m in TOKENS for n, k in WEIGHTS
            for layout in ("nt", "nn")]
    out.append(dict(kind="epilogue", m=4096, n=4096, k=4096, layout="nt", epilogue="bias+gelu"))
    return [c for c in out if c["m"] * c["n"] * c["k"] < QUICK_MACS] if quick else out


def tile_width(m: int, n: int, a) -> int:
    """The tile width matmul runs for this shape by default (unsplit: it splits K only when asked)."""
    from tkpy.kernels.gemm_policy import block_n_for
    from tkpy.templates import multiprocessors
    return block_n_for(m, n, multiprocessors(a))


def measure(case: dict) -> dict:
    """One case, tkpy and cuBLAS timed in pairs (timing.paired_ms: the 8192^3 ratio was 0.96-1.00 with tkpy
    timed first and 1.05-1.08 with cuBLAS first, RESULTS.md run 61)."""
    import torch

    from benchmarks.timing import paired_ms
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
            tkpy_kernels.matmul(a, b, out=c, bias=bias, activation="gelu", scale=0.05)

        def theirs():
            if fused:
                got["ref"] = fused(bias, a, b, alpha=0.05, use_gelu=True)
            else:
                got["ref"] = torch.nn.functional.gelu(torch.addmm(bias, a, b, alpha=0.05), approximate="tanh")
    else:
        def ours():
            tkpy_kernels.matmul(a, b, out=c)

        def theirs():
            torch.matmul(a, b, out=ref)
    ours(), theirs()
    torch.cuda.synchronize()
    expected = got.get("ref", ref)
    diff = ((c.float() - expected.float()).norm() / expected.float().norm()).item()
    flops = 2 * m * n * k
    t_ours, t_theirs = paired_ms(ours, theirs)
    block_n = tile_width(m, n, a)
    row = dict(case, tkpy_tflops=flops / t_ours / 1e9, cublas_tflops=flops / t_theirs / 1e9, rel_diff=diff,
               block_n=block_n, splits=1, tile=str(block_n), tkpy_us=t_ours * 1e3, cublas_us=t_theirs * 1e3)
    row["ratio"] = row["tkpy_tflops"] / row["cublas_tflops"]
    row["lcf_tflops"] = row["tkpy_tflops"]            # the name earlier runs used
    return row


def label(r: dict) -> str:
    return f"{r['m']}x{r['n']}x{r['k']} {r['layout']}" + (f" {r['epilogue']}" if r.get("epilogue") else "")


def plot(rows: list[dict], path: Path) -> None:
    from benchmarks.plotting import pyplot
    plt = pyplot("plot")
    if plt is None:
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
# stages, a whole 128 x 256 tile of output stages);
# split-K with its split count and tile width forced, ordered (deterministic) or atomic, against no split;
# tile widths: 128 x 64, 128 x 128 and 128 x 256 tiles forced (matmul's block_n), and what matmul picks.
EPILOGUE_VARIANTS = {"tma": dict(), "tma 3+4": dict(stages=3, output_stages=4)}
EPILOGUE_SHAPES = [(2048, 2048, 2048, "nn"), (4096, 4096, 4096, "nn"), (8192, 8192, 8192, "nn"), (2048, 8192, 8192, "nt")]
SPLIT_VARIANTS = {"no split": dict(), "S2 n128": dict(split_k=2, block_n=128),
                  "S4 n256": dict(split_k=4, block_n=256), "S4 n256 atomic": dict(split_k=4, block_n=256,
                                                                                   deterministic=False),
                  "S8 n256": dict(split_k=8, block_n=256)}
SPLIT_SHAPES = [(128, 8192, 8192, "nt"), (1, 4096, 4096, "nt"), (1024, 1024, 1024, "nn"), (256, 4096, 8192, "nt")]
TILE_VARIANTS = {"n64": dict(block_n=64), "n128": dict(block_n=128), "n256": dict(block_n=256)}
TILE_SHAPES = [(1024, 1024, 1024, "nn"), (2048, 2048, 2048, "nn"), (128, 8192, 8192, "nt"), (128, 8192, 8192, "nn"),
               (256, 4096, 8192, "nt"), (4096, 4096, 4096, "nn"),
               (1024, 3072, 4096, "nn")]    # 96 tiles of 256 (73% of the SMs) or 384 of 64 (97% over 3 waves)


def variant_tables(quick: bool = False) -> dict:
    """The tile-width table (matmul with block_n forced), and unless `quick` the epilogue variants (through
    the templates directly) and the split-K variants (through matmul); TFLOP/s from GPU time per call."""
    import torch

    import tkpy as tk
    from tkpy.kernels.gemm_config import MatmulConfig
    from tkpy.kernels.gemm_kernel import matmul_template

    def through_matmul(options):
        return lambda a, w, b, c: tkpy_kernels.matmul(a, b, out=c, **options)

    def through_template(options):
        return lambda a, w, b, c: matmul_template(MatmulConfig(tk.bf16, tk.bf16, w is not b, **options))(a, w, c)

    cublas = {"cuBLAS": lambda a, w, b, c: torch.matmul(a, b, out=c)}
    tables = {"tile widths": (TILE_SHAPES, {n: through_matmul(o) for n, o in TILE_VARIANTS.items()} | cublas)}
    if not quick:
        tables["epilogue variants"] = (EPILOGUE_SHAPES, {n: through_template(o) for n, o in EPILOGUE_VARIANTS.items()})
        tables["split-K variants"] = (SPLIT_SHAPES, {n: through_matmul(o) for n, o in SPLIT_VARIANTS.items()} | cublas)
    return {title: variant_table(title, shapes, variants) for title, (shapes, variants) in tables.items()}


def variant_table(title: str, shapes: list, variants: dict) -> list[dict]:
    """TFLOP/s of each variant (a function of a, w as stored, b as matmul takes it, c) on each shape, printed
    row by row; with what matmul picks by default (tile_width). A variant that does not apply to a shape
    (a ValueError) shows as nan."""
    import torch

    from benchmarks.timing import median_ms
    print(f"\ntkpy {title} (TFLOP/s, GPU time per call; BN: the tile width matmul picks)")
    print(f"{'M x N x K layout':>24} " + " ".join(f"{name:>{max(8, len(name))}}" for name in variants) + f" {'BN':>6}")
    rows = []
    for m, n, k, layout in shapes:
        a = torch.randn(m, k, dtype=torch.bfloat16, device="cuda")
        w = torch.randn(n, k, dtype=torch.bfloat16, device="cuda") if layout == "nt" else \
            torch.randn(k, n, dtype=torch.bfloat16, device="cuda")
        b = w.T if layout == "nt" else w
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        block_n = tile_width(m, n, a)
        row = dict(m=m, n=n, k=k, layout=layout, block_n=block_n, tile=str(block_n))
        for name, run in variants.items():
            try:
                row[name] = 2 * m * n * k / median_ms(lambda: run(a, w, b, c)) / 1e9
            except ValueError as e:
                print(f"  {name} on {m}x{n}x{k}: {e}")
                row[name] = float("nan")
        rows.append(row)
        shape = f"{m}x{n}x{k} {layout}"
        print(f"{shape:>24} " + " ".join(f"{row[name]:>{max(8, len(name))}.0f}" for name in variants)
              + f" {row['tile']:>6}", flush=True)
    return rows


def repeated(sizes: list[int], rounds: int) -> dict:
    """Each square measured `rounds` times, the sizes interleaved round by round; per size the median
    tkpy / cuBLAS ratio with its lowest and highest."""
    import statistics
    ratios = {n: [] for n in sizes}
    for _ in range(rounds):
        for n in sizes:
            ratios[n].append(measure(dict(kind="square", m=n, n=n, k=n, layout="nn"))["ratio"])
    print(f"{'N^3':>8} {'median':>7} {'lowest':>7} {'highest':>8}  (tkpy / cuBLAS over {rounds} interleaved rounds)")
    for n, r in ratios.items():
        print(f"{n:>8} {statistics.median(r):>7.3f} {min(r):>7.3f} {max(r):>8.3f}   rounds: "
              + " ".join(f"{x:.3f}" for x in r))
    return {str(n): r for n, r in ratios.items()}


def main(quick: bool = False, variants: bool = True) -> list[dict]:
    """The main table (with `quick`, only its cases below QUICK_MACS), then the variant tables (with `quick`,
    only the tile widths); returns the main table's rows."""
    rows = []
    print(f"{'M x N x K layout':>34} {'tkpy':>6} {'cuBLAS':>7} {'ratio':>6} {'BN':>6} {'tkpy us':>8} {'cuBLAS us':>9} "
          f"{'rel diff':>9}  (TFLOP/s, GPU time per call; BN: tkpy's tile width)")
    for case in cases(quick):
        r = measure(case)
        rows.append(r)
        print(f"{label(r):>34} {r['tkpy_tflops']:>6.0f} {r['cublas_tflops']:>7.0f} {r['ratio']:>6.2f} {r['tile']:>6} "
              f"{r['tkpy_us']:>8.1f} {r['cublas_us']:>9.1f} {r['rel_diff']:>9.1e}", flush=True)
    tables = variant_tables(quick) if variants else {}
    out = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
    if out:
        (out / "gemm.json").write_text(json.dumps(dict(cases=rows, variants=tables), indent=2))
    plot(rows, (out or Path(".")) / "gemm.png")
    return rows


if __name__ == "__main__":
    if "--repeat" in sys.argv:
        at = sys.argv.index("--repeat")
        repeated([int(x) for x in sys.argv[at + 2:]] or [1024, 4096, 8192], int(sys.argv[at + 1]))
    else:
        main(quick="--quick" in sys.argv, variants="--no-variants" not in sys.argv)
