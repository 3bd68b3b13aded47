"""One call on the GPU machine: every test (GPU ones included), then the benchmarks; a short table last.

    PYTHONPATH=. python3 benchmarks/gpu_check.py [--quick] [--variants] [pytest args...]

The tests run on 16 pytest-xdist workers where xdist is installed (pass -n yourself to choose), then compute-sanitizer over every public kernel (benchmarks/sanitize.py,
about 30 s plus its compiles). The benchmarks are
the main tables (GEMM, attention, split-K, decoding, norms at 16384 x 4096, ...), meant with the tests to fit one 10-minute device call
(402 s as a whole in session 11's first run: tests 142 s, benchmarks the rest); --variants adds the GEMM and
attention variant tables (run them in a call of their own); --quick runs the tests and the sanitizer only. Details go to $OUT (pytest log, junit XML, JSON of every
measurement) when OUT is set: pytest.log, gpu_check.json and the plots, the rest in details.zip (the device returns
8 files at most).
"""
from __future__ import annotations

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
XDIST_WORKERS = 16          # the H200 machine's CPU cores (the GPU tests share its one GPU)


def run_tests(extra: list[str]) -> dict:
    log = (OUT / "pytest.log") if OUT else Path(tempfile.gettempdir()) / "tkpy-pytest.log"
    cmd = [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "no:cacheprovider", str(ROOT / "tests")]
    if importlib.util.find_spec("xdist") and not any(a == "-n" or a.startswith("-n") for a in extra):
        cmd += ["-n", str(XDIST_WORKERS)]
    if OUT:
        cmd += ["--junitxml", str(OUT / "junit.xml")]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd + extra, cwd=ROOT, capture_output=True, text=True)
    log.write_text(proc.stdout + proc.stderr)
    tail = [l for l in proc.stdout.splitlines() if l.strip()][-25:]
    print("\n".join(tail))
    summary = tail[-1] if tail else ""
    return {"returncode": proc.returncode, "summary": summary, "seconds": time.perf_counter() - t0}


def bench_compile() -> dict:
    """First-call time: cold (empty disk cache) and warm (a new process, the cache filled) first calls of attention(),
    matmul(), softmax and a row kernel beside NVRTC's floor (benchmarks/bench_compile.py; one round here)."""
    from benchmarks import bench_compile as bc

    return bc.main(["--rounds", "1"])


def bench_launch() -> dict:
    """Host time per call: a 4-argument tkpy kernel (cache hit) beside the raw driver and torch's zero_()."""
    from benchmarks import bench_launch as bl

    bl.main()
    if OUT and (OUT / "launch.json").exists():
        return json.loads((OUT / "launch.json").read_text())["results"]
    return {}


def sanitize() -> dict:
    """compute-sanitizer's memcheck, racecheck and synccheck over every public kernel (benchmarks/sanitize.py)."""
    out = OUT or Path(tempfile.mkdtemp(prefix="tkpy-sanitize-"))
    proc = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "sanitize.py")], cwd=ROOT,
                          env=dict(os.environ, OUT=str(out)), capture_output=True, text=True)
    report = out / "sanitize.json"
    if not report.exists():
        return {"failed": (proc.stdout + proc.stderr)[-2000:]}
    return json.loads(report.read_text())


KEPT = ("pytest.log", "gpu_check.json", "attention.png", "gemm.png", "memory_bound.png")   # what stays beside details.zip


def bundle_details(out: Path) -> None:
    """The other files under `out` (each table's JSON, junit.xml, ...) moved into details.zip: the device returns
    at most 8 files, and in session 19 it left out pytest.log and gpu_check.json among 13."""
    import zipfile
    files = [f for f in sorted(out.iterdir()) if f.is_file() and f.name not in KEPT]
    with zipfile.ZipFile(out / "details.zip", "w", zipfile.ZIP_DEFLATED) as bundle:
        for f in files:
            bundle.write(f, f.name)
    for f in files:
        f.unlink()


def main() -> int:
    quick, variants = "--quick" in sys.argv, "--variants" in sys.argv
    extra = [a for a in sys.argv[1:] if a not in ("--quick", "--variants")]
    import torch

    from tkpy.runtime import gpu_available

    print(f"GPU: {torch.cuda.get_device_name() if torch.cuda.is_available() else 'none'}; "
          f"torch {torch.__version__}; hopper={gpu_available()}")
    report = {"tests": run_tests(extra)}
    if gpu_available():
        report["sanitize"] = sanitize()
    if not quick and gpu_available():
        report["compile"] = bench_compile()
        report["launch"] = bench_launch()
        from benchmarks import bench_attention, bench_gemm
        report["gemm"] = bench_gemm.main(variants=variants)
        report["gemm_repeats"] = bench_gemm.repeated([1024, 4096, 8192], 3)
        fp8 = subprocess.run([sys.executable, "-m", "tkpy.kernels", "matmul_fp8"], cwd=ROOT, capture_output=True, text=True)
        report["fp8"] = (fp8.stdout + fp8.stderr).strip().splitlines()
        report["attention"] = bench_attention.main(variants=variants)
        report["attention_dims"] = bench_attention.other_dims_table()
        report["attention_fp16"] = bench_attention.fp16_table()
        report["attention_split"] = bench_attention.split_table()
        report["attention_decode"] = bench_attention.decode_table()
        from benchmarks import bench_attention_bwd
        report["attention_bwd"] = bench_attention_bwd.main()
        from benchmarks import bench_memory_bound      # (16384 x 4096; the width sweep: run it on its own)
        report["memory_bound"] = bench_memory_bound.main(sweep=False)
        from benchmarks import bench_exp2, bench_smem
        report["smem"] = bench_smem.main()
        report["exp2"] = bench_exp2.main()
    if OUT:
        (OUT / "gpu_check.json").write_text(json.dumps(report, indent=2, default=str))
        bundle_details(OUT)

    print("\n==== summary ====")
    if report.get("compile"):
        from benchmarks import bench_compile as bc
        print("\n".join(bc.summary(report["compile"])))
    for name, r in report.get("launch", {}).items():
        if name in ("raw_ex_int", "prepared", "native_raw", "native_noop", "tkpy_call", "tkpy_python", "torch_zero"):
            print(f"launch  {name:20s} {r['median_us']:6.2f} us/call")
    for r in report.get("attention", []) + report.get("attention_dims", []) + report.get("attention_fp16", []):
        print(f"attention {r.get('dtype', 'bf16')} B{r['b']} H{r['h']} N{r['n']} D{r['d']}"
              f"{' causal' if r.get('causal') else ''}: "
              f"tkpy {r['tkpy']:.0f}, cuDNN {r['cudnn']:.0f}, "
              f"flash {r['flash']:.0f} TFLOP/s ({r['vs_cudnn']:.2f}x cuDNN, {r['vs_flash']:.2f}x flash)")
    for r in report.get("attention_split", []):
        print(f"attention split-K B{r['b']} H{r['h']}/{r['hkv']} N{r['n']} over {r['nk']} keys D{r['d']} "
              f"causal={r['causal']} {r['groups']}wg ({r['splits']} splits): {r['split']:.0f} TFLOP/s, "
              f"{r['split'] / r['peer']:.2f}x {r['peer_name']}, {r['split'] / r['tkpy']:.2f}x unsplit")
    for r in report.get("attention_decode", []):
        print(f"attention decoding B{r['b']} H{r['h']}/{r['hkv']} N{r['n']} over {r['nk']} keys D{r['d']} "
              f"causal={r['causal']}: "
              f"{r['tkpy']:.0f} TFLOP/s, {r['tkpy'] / r['peer']:.2f}x {r['peer_name']}, "
              f"{r['tkpy'] / r['unpacked']:.2f}x unpacked")
    for r in report.get("memory_bound", []):
        print(f"memory-bound {r['op']} {r['direction']} {r['rows']}x{r['width']}: tkpy {r['tkpy']:.0f} GB/s "
              f"({r['tkpy'] / r['copy']:.2f}x copy {r['copy']:.0f}, {r['tkpy'] / r.get('compile', float('nan')):.2f}x "
              f"torch.compile, {r['tkpy'] / r['eager']:.2f}x eager)")
    for r in report.get("gemm", []):
        print(f"gemm {r['m']}x{r['n']}x{r['k']} {r['layout']} {r.get('epilogue', '')}: tkpy {r['tkpy_tflops']:.0f}, "
              f"cuBLAS {r['cublas_tflops']:.0f} TFLOP/s ({r['ratio']:.2f}x)")
    for n, ratios in report.get("gemm_repeats", {}).items():
        print(f"gemm {n}^3 repeated: tkpy / cuBLAS median {statistics.median(ratios):.3f} "
              f"[{min(ratios):.3f}, {max(ratios):.3f}]")
    for line in report.get("fp8", []):
        print(f"fp8 {line.strip()}")
    for r in report.get("smem", []):
        if r["op"] == "ldmatrix":
            print(f"smem ldmatrix bf16 W={r['width']:<3} swizzle {r['swizzle']:>3}B: "
                  f"{r['bytes_per_clock_per_sm']:5.1f} B/clk/SM")
    exp2 = report.get("exp2", {})
    if exp2:
        print(f"exp2 per SM and clock: MUFU {exp2['mufu_f32']:.1f}, with 2/8 by the polynomial {exp2['poly_2of8']:.1f}, "
              f"3/8 {exp2['poly_3of8']:.1f}")
    for tool, r in report.get("sanitize", {}).items():
        print(f"sanitize {tool}: {r}" if tool == "failed" else
              f"sanitize {tool:9s} errors {r['errors']} over {r['cases_run']} cases (rc={r['returncode']})")
    print(f"tests: {report['tests']['summary']} (rc={report['tests']['returncode']})")   # last: the device returns
    return report["tests"]["returncode"]                                                   # the output's tail


if __name__ == "__main__":
    sys.exit(main())
