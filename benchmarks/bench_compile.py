"""First-call time (issue 35): a kernel's first call in a new process, with an empty disk cache (cold) and with the
cache the cold call filled (warm), beside the floor, NVRTC compiling a one-line header-free kernel.

    PYTHONPATH=. python benchmarks/bench_compile.py [--rounds 3] [--cases attention,matmul,softmax,row,floor]

Each measurement runs in a process of its own (`--child CASE`), which imports torch and tkpy.kernels (timed apart),
makes the inputs and then times the first call alone:
  attention   tkpy.kernels.attention(q, k, v), bf16 (16, 16, 4096, 128)
  matmul      tkpy.kernels.matmul(a, b), bf16 4096 x 4096 x 4096
  softmax     tkpy.kernels.softmax(x), bf16 8192 x 128
  row         a trivial row kernel, y = x + 1 over a 16 x 128 fp32 tile a warp (ROW below)
  floor       NVRTC alone on a one-line kernel, with tkpy's options (its library already loaded)
On a Hopper GPU the call is the whole first call (trace, source, compile or cache lookup, module load, launch, and a
synchronize). Without one, the compile-only part: the kernels' launch paths under compile_only() on meta tensors, as
`python -m tkpy.warmup` runs them (no module load, no launch). Per call the table gives the NVRTC runs and their
seconds and, of the rest, the trace, the lowering (source generation) and the compile stage (NVRTC or the disk cache's
lookup); on the GPU, `native` says whether the first call already went through the native launcher and how long the
launcher took to get ready (it is built once per machine, in the background of the first call). Medians over the
rounds. Writes $OUT/compile.json where OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
CASES = ("attention", "matmul", "softmax", "row", "floor")
FLOOR = 'extern "C" __global__ void floor_kernel(float* x) { x[threadIdx.x] += 1.0f; }\n'


def _row_kernel():
    import tkpy as tk

    @tk.kernel(warps=4)
    def row_plus_one(x: tk.gl[tk.f32, "R", 128], y: tk.gl[tk.f32, "R", 128]):
        t = tk.rt(tk.f32, 16, 128)
        row = tk.block_idx.x * 4 + tk.warp_id()
        tk.load(t, x, (row, 0))
        tk.add(t, t, 1.0)
        tk.store(y, t, (row, 0))
    return row_plus_one


def _first_call(case: str, gpu: bool):
    """The call to time (a function of no arguments) for `case`, its inputs made."""
    import torch

    import tkpy.kernels as kernels
    from tkpy.kernels.warmup import OPS

    device = "cuda" if gpu else "meta"
    bf16 = torch.bfloat16
    if case == "row":
        kernel = _row_kernel()
        x = torch.randn(8192, 128, device=device) if gpu else torch.empty(8192, 128, device=device)
        y = torch.empty_like(x)
        return lambda: kernel[(8192 // 64,)](x, y)
    dims = {"attention": (16, 16, 4096, 128), "matmul": (4096, 4096, 4096), "softmax": (8192, 128)}[case]
    if not gpu:     # the launch path behind the operator, as python -m tkpy.warmup runs it
        return lambda: OPS[case].run(dims, {}, lambda shape, dtype: torch.empty(shape, dtype=dtype, device=device))
    if case == "attention":
        q, k, v = (torch.randn(dims, device=device, dtype=bf16) for _ in range(3))
        return lambda: kernels.attention(q, k, v)
    if case == "matmul":
        m, n, kk = dims
        a, b = torch.randn(m, kk, device=device, dtype=bf16), torch.randn(kk, n, device=device, dtype=bf16)
        return lambda: kernels.matmul(a, b)
    x = torch.randn(dims, device=device, dtype=bf16)
    return lambda: kernels.softmax(x)


class _Stages:
    """Seconds spent in each stage of tkpy's first call, and the NVRTC runs (wrapping the stages' functions)."""

    def __init__(self):
        from tkpy.frontend import kernel
        from tkpy.runtime import nvrtc

        self.seconds = {"trace": 0.0, "lower": 0.0, "compile": 0.0, "nvrtc": 0.0}
        self.nvrtc_runs = []
        self._wrap(kernel.Kernel, "trace", "trace")
        self._wrap(kernel.Traced, "lower", "lower")
        self._wrap(kernel.Lowered, "compile", "compile")
        run = nvrtc._run_nvrtc

        def counted(source, name, opts, arch):
            out = run(source, name, opts, arch)
            self.nvrtc_runs.append({"kernel": name, "seconds": out[3], "source_bytes": len(source)})
            self.seconds["nvrtc"] += out[3]
            return out
        nvrtc._run_nvrtc = counted

    def _wrap(self, cls, name: str, stage: str) -> None:
        method = getattr(cls, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                self.seconds[stage] += time.perf_counter() - start
        setattr(cls, name, timed)


def child(case: str) -> dict:
    """One measurement in this (new) process: the first call of `case`."""
    start = time.perf_counter()
    import torch

    import tkpy.kernels  # noqa: F401
    from tkpy.runtime import gpu_available, nvrtc

    imported = time.perf_counter() - start
    gpu = gpu_available()
    if case == "floor":
        nvrtc.loaded_version()          # the library loaded, as it is for a kernel's compile
        start = time.perf_counter()
        _, _, _, seconds = nvrtc._run_nvrtc(FLOOR, "floor_kernel", ["-arch=sm_90a", *nvrtc.BASE_OPTIONS], "sm_90a")
        return {"case": case, "gpu": gpu, "import_s": imported, "first_s": time.perf_counter() - start,
                "nvrtc_s": seconds, "nvrtc_runs": [{"kernel": "floor_kernel", "seconds": seconds,
                                                   "source_bytes": len(FLOOR)}]}
    stages = _Stages()
    call = _first_call(case, gpu)
    if gpu:
        torch.cuda.synchronize()
    from tkpy.frontend.kernel import compile_only
    start = time.perf_counter()
    if gpu:
        call()
        torch.cuda.synchronize()
    else:
        with compile_only():
            call()
    first = time.perf_counter() - start
    out = {"case": case, "gpu": gpu, "import_s": imported, "first_s": first, "nvrtc_s": stages.seconds["nvrtc"],
           "nvrtc_runs": stages.nvrtc_runs, **{f"{k}_s": v for k, v in stages.seconds.items() if k != "nvrtc"}}
    if gpu:
        out.update(_native_state(call))
    return out


def _native_state(call) -> dict:
    """Whether the first call's kernels went through the native launcher, and when it was ready after the call."""
    from tkpy.runtime import native

    start = time.perf_counter()
    ready = native.wait() is not None
    return {"native_ready_after_s": time.perf_counter() - start, "native_built": ready}


def measure(case: str, cache_dir: str) -> dict:
    env = {**os.environ, "TKPY_CACHE_DIR": cache_dir, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT))}
    done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "--child", case], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"bench_compile --child {case} failed:\n{done.stdout}\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def run(cases=CASES, rounds: int = 3) -> dict:
    """{case: {"cold": [...], "warm": [...]}}: per round, a cold first call into an empty cache directory, then a
    warm one (a new process) from the cache it filled."""
    results = {case: {"cold": [], "warm": []} for case in cases}
    for _ in range(rounds):
        for case in cases:
            with tempfile.TemporaryDirectory(prefix="tkpy-bench-compile-") as cache_dir:
                results[case]["cold"].append(measure(case, cache_dir))
                if case != "floor":
                    results[case]["warm"].append(measure(case, cache_dir))
    return results


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows) if rows else float("nan")


def table(results: dict) -> str:
    gpu = any(r["gpu"] for c in results.values() for r in c["cold"])
    head = ("first call on the GPU (whole call)" if gpu else "first call, compile-only part (no GPU: no module load,"
            " no launch)")
    lines = [f"{head}; medians of {len(next(iter(results.values()))['cold'])} rounds, load {os.getloadavg()[0]:.1f}",
             f"{'case':<10} {'cold s':>7} {'NVRTC':>11} {'trace':>6} {'lower':>6} {'rest':>6} | {'warm ms':>8} "
             f"{'trace':>6} {'lower':>6} {'cache':>6} {'rest':>6} | kernels compiled (NVRTC s each)"]
    for case, r in results.items():
        cold, warm = r["cold"], r["warm"]
        runs = cold[len(cold) // 2]["nvrtc_runs"] if cold else []
        first, nv = _median(cold, "first_s"), _median(cold, "nvrtc_s")
        rest = first - nv - _median(cold, "trace_s") - _median(cold, "lower_s")
        cold_cols = (f"{first:7.3f} {len(runs):>2}x {nv:6.3f}s {_median(cold, 'trace_s'):6.3f} "
                     f"{_median(cold, 'lower_s'):6.3f} {rest:6.3f}")
        if warm:
            w = {k: 1e3 * _median(warm, f"{k}_s") for k in ("first", "trace", "lower", "compile")}
            warm_cols = (f"{w['first']:8.1f} {w['trace']:6.1f} {w['lower']:6.1f} {w['compile']:6.1f} "
                         f"{w['first'] - w['trace'] - w['lower'] - w['compile']:6.1f}")
        else:
            warm_cols = f"{'':>8} {'':>6} {'':>6} {'':>6} {'':>6}"
        kernels = ", ".join(f"{x['kernel']} ({x['seconds']:.3f}, {x['source_bytes'] // 1024} KB)" for x in runs)
        lines.append(f"{case:<10} {cold_cols} | {warm_cols} | {kernels}")
    if gpu:
        for case, r in results.items():
            if r["cold"] and "native_built" in r["cold"][0]:
                lines.append(f"  {case}: native launcher ready {1e3 * _median(r['cold'], 'native_ready_after_s'):.0f} ms "
                             f"after the cold call, {1e3 * _median(r['warm'], 'native_ready_after_s'):.0f} ms after "
                             f"the warm one")
    lines.append(f"imports (torch, tkpy.kernels): {_median([x for c in results.values() for x in c['cold']], 'import_s'):.3f} s"
                 " (not in the first call)")
    return "\n".join(lines)


def main(argv=None, rounds: int = 3) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--child", choices=CASES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child)))
        return {}
    cases = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = sorted(set(cases) - set(CASES))
    if unknown:
        parser.error(f"unknown cases {unknown}; the cases are {', '.join(CASES)}")
    results = run(cases, args.rounds)
    print(table(results))
    if OUT:
        (OUT / "compile.json").write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
