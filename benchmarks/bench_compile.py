"""First-call time (issue 35): a kernel's first call in a new process, with an empty disk cache (cold) and with the
cache the cold call filled (warm), beside the floor, NVRTC compiling a one-line header-free kernel.

    PYTHONPATH=. python benchmarks/bench_compile.py [--rounds 3] [--cases attention,matmul,softmax,row,floor,prelude]

Each measurement runs in a process of its own (`--child CASE`), which imports torch and tkpy.kernels (timed apart),
makes the inputs and then times the first call alone:
  attention   tkpy.kernels.attention(q, k, v), bf16 (16, 16, 4096, 128)
  matmul      tkpy.kernels.matmul(a, b), bf16 4096 x 4096 x 4096
  softmax     tkpy.kernels.softmax(x), bf16 8192 x 128
  row         a trivial row kernel: y = x + 1 over a 16 x 128 fp32 tile a warp
  floor       NVRTC alone on a one-line kernel with tkpy's options (the library loaded before)
  prelude     NVRTC alone on the row kernel's source with the whole prelude instead of the helpers it uses
  quick       the quick first-call kernels' speed (below)
On a cold cache attention() and matmul() run a quick kernel first while the tuned one compiles in the background
(tk.QuickFirstCall): the table says when the tuned kernels were ready and what compiled in the background.
On a Hopper GPU the call is the whole first call (trace, lowering, compile or disk-cache lookup, module load, launch,
a synchronize). Without one, its compile-only part: the kernels' launch paths under compile_only() on meta tensors,
as `python -m tkpy.warmup` runs them (no module load, no launch). The table gives, cold and warm, the first call's
wall time (and its process CPU time, which a busy machine inflates less), NVRTC's runs and seconds, and of the rest
the trace (with the IR passes), the lowering (the kernel's C++), the choice of its prelude helpers (cold: "prel.")
and the compile stage (NVRTC, or the lookup: of the specialization's record and its module, or of the module by the
lowered code);
on the GPU also when the native launcher was ready (built once per machine, in the background of the first call).
The case `quick` (GPU only) is no first call: it times the quick first-call kernels of attention and matmul against
the tuned kernels they stand in for (GPU time, medians of CUDA-graph replays, in pairs).
Medians over the rounds; `--events` adds each case's stages in order (start, length, thread) in its median rounds.
Writes $OUT/compile.json where OUT is set.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = Path(os.environ["OUT"]) if os.environ.get("OUT") else None
CASES = ("attention", "matmul", "softmax", "row", "floor", "prelude", "quick")
NVRTC_ONLY = ("floor", "prelude")       # cases that time NVRTC alone (no first call, no warm run)
NO_FIRST_CALL = NVRTC_ONLY + ("quick",)
FLOOR = 'extern "C" __global__ void floor_kernel(float* x) { x[threadIdx.x] += 1.0f; }\n'
ROWS = 8192


def row_kernel():
    """The trivial row kernel: each warp adds 1 to a 16 x 128 fp32 tile."""
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
        kernel = row_kernel()
        x = torch.randn(ROWS, 128, device=device) if gpu else torch.empty(ROWS, 128, device=device)
        y = torch.empty_like(x)
        return lambda: kernel[(ROWS // 64,)](x, y)
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
    """Seconds spent in each stage of tkpy's first call, the NVRTC runs, and every stage's (thread, start, seconds)
    from `start` on (the stages' functions wrapped; the disk cache's and the records' stores, the module loads and
    the background compile's start too, as events only)."""

    def __init__(self):
        import tkpy.runtime as runtime
        from tkpy.codegen import emit
        from tkpy.frontend import kernel, spec_records
        from tkpy.runtime import background, cache, nvrtc, records

        self.seconds = {"trace": 0.0, "lower": 0.0, "compile": 0.0, "nvrtc": 0.0, "prelude": 0.0}
        self.nvrtc_runs = []
        self.events = []
        self.start = None               # set when the first call starts: events before it are not kept
        self._wrap(kernel.Kernel, "_traced", "trace")
        self._wrap(kernel.Traced, "lower", "lower")
        self._wrap(kernel.Lowered, "compile", "compile")
        self._wrap(spec_records, "find", "compile", "record lookup")    # a specialization record's and its module's
        self._wrap(emit.KernelCode, "source", "prelude")  # the source NVRTC compiles: the prelude helpers chosen
        for module, name in ((runtime, "load_kernel"), (cache, "store"), (records, "store"), (background, "start")):
            self._wrap(module, name, None, f"{module.__name__.rsplit('.', 1)[-1]}.{name}")
        run = nvrtc._run_nvrtc

        def counted(source, name, opts, arch):
            began = time.perf_counter()
            out = run(source, name, opts, arch)
            self._event(f"nvrtc {name}", began)
            background = threading.current_thread() is not threading.main_thread()
            self.nvrtc_runs.append({"kernel": name, "seconds": out[3], "source_bytes": len(source),
                                    "background": background})
            if not background:
                self.seconds["nvrtc"] += out[3]
            return out
        nvrtc._run_nvrtc = counted

    def _wrap(self, cls, name: str, stage: str | None, label: str | None = None) -> None:
        method = getattr(cls, name)

        def timed(*args, **kwargs):
            start = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                if stage and threading.current_thread() is threading.main_thread():    # (not the background's)
                    self.seconds[stage] += time.perf_counter() - start
                self._event(label or stage or name, start)
        setattr(cls, name, timed)

    def _event(self, what: str, began: float) -> None:
        if self.start is not None and began >= self.start:
            self.events.append((what, threading.current_thread().name[:24], round(1e3 * (began - self.start), 1),
                                round(1e3 * (time.perf_counter() - began), 1)))


def _nvrtc_alone(case: str) -> dict:
    """NVRTC on the floor's one-liner, or on the row kernel's source with the whole prelude and with its own."""
    import torch

    from tkpy.runtime import nvrtc

    nvrtc.loaded_version()              # the library loaded, as it is when a kernel compiles
    opts = ["-arch=sm_90a", *nvrtc.BASE_OPTIONS]
    if case == "floor":
        sources = {"floor_kernel": FLOOR}
    else:
        x = torch.empty(ROWS, 128)
        lowered = row_kernel().trace(x, x).lower()
        sources = {"row_plus_one (whole prelude)": lowered.code.source("full"), "row_plus_one": lowered.source}
    runs = []
    for label, source in sources.items():
        start = time.process_time()
        seconds = nvrtc._run_nvrtc(source, label.split()[0], opts, "sm_90a")[3]
        runs.append({"kernel": label, "seconds": seconds, "cpu_s": time.process_time() - start,
                     "source_bytes": len(source)})
    return {"first_s": runs[0]["seconds"], "first_cpu_s": runs[0]["cpu_s"], "nvrtc_s": runs[0]["seconds"],
            "nvrtc_runs": runs}


def _quick_speeds() -> dict:
    """{op: (quick kernel ms, tuned kernel ms)} at attention's and matmul's shapes above: the kernels a cold first call
    runs while the tuned ones compile (attention_forward's QUICK_FIRST_CALL plan, gemm's QUICK_BLOCK_N tiles)."""
    import torch

    from benchmarks.timing import paired_ms
    from tkpy.kernels import attention_forward, gemm
    from tkpy.kernels.gemm_policy import QUICK_BLOCK_N

    bf16 = torch.bfloat16
    q, k, v = (torch.randn(16, 16, 4096, 128, device="cuda", dtype=bf16) for _ in range(3))
    o = torch.empty_like(q)
    plan = attention_forward._ForwardPlan(("bench_compile",), q, k, False, False)
    quick, tuned = (plan._choose(q, k, v, o, None, None, options) for options in (plan.quick_options, {}))
    speeds = {"attention": paired_ms(lambda: quick.launch(q, k, v, o, None, plan.default_scale),
                                     lambda: tuned.launch(q, k, v, o, None, plan.default_scale))}
    a, b = (torch.randn(4096, 4096, device="cuda", dtype=bf16) for _ in range(2))
    c = torch.empty_like(a)
    quick, tuned = (gemm._plan(a, b, c, (), bf16, False, None, None, None, block_n, None, False)
                    for block_n in (QUICK_BLOCK_N, None))
    for launch in (quick, tuned):
        launch.compile(a, b, c, ())
    speeds["matmul"] = paired_ms(lambda: quick(a, b, c, ()), lambda: tuned(a, b, c, ()))
    return speeds


def child(case: str) -> dict:
    """One measurement in this (new) process: the first call of `case`."""
    start = time.perf_counter()
    import torch

    torch_s = time.perf_counter() - start
    import tkpy as tk
    import tkpy.kernels  # noqa: F401
    from tkpy.runtime import gpu_available

    imported = time.perf_counter() - start
    gpu = gpu_available()
    if case in NVRTC_ONLY:
        return {"case": case, "gpu": gpu, "import_s": imported, "import_tkpy_s": imported - torch_s,
                **_nvrtc_alone(case)}
    if case == "quick":
        return {"case": case, "gpu": gpu, "import_s": imported, "import_tkpy_s": imported - torch_s,
                "speeds": _quick_speeds() if gpu else {}}
    stages = _Stages()
    call = _first_call(case, gpu)
    if gpu:
        torch.cuda.synchronize()
    from tkpy.frontend.kernel import compile_only

    start, cpu = time.perf_counter(), time.process_time()
    stages.start = start
    if gpu:
        call()
        torch.cuda.synchronize()
    else:
        with compile_only():
            call()
    first_s, first_cpu_s = time.perf_counter() - start, time.process_time() - cpu
    tk.wait_for_compiles()                      # the tuned kernels a quick first call left compiling
    out = {"case": case, "gpu": gpu, "import_s": imported, "import_tkpy_s": imported - torch_s,
           "first_s": first_s, "first_cpu_s": first_cpu_s,
           "nvrtc_s": stages.seconds["nvrtc"], "tuned_ready_s": time.perf_counter() - start,
           "nvrtc_runs": [r for r in stages.nvrtc_runs if not r["background"]],
           "background_runs": [r for r in stages.nvrtc_runs if r["background"]],
           **{f"{k}_s": v for k, v in stages.seconds.items() if k != "nvrtc"},
           "events": [e for e in stages.events if e[2] <= 1e3 * first_s]}
    if gpu:
        from tkpy.runtime import native

        out["native_loaded_in_first_call"] = native.wait(0) is not None
        start = time.perf_counter()
        out["native_loaded"] = native.wait() is not None
        out["native_ready_after_s"] = time.perf_counter() - start
    return out


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
                if case not in NO_FIRST_CALL:
                    results[case]["warm"].append(measure(case, cache_dir))
    return results


def _median(rows: list[dict], key: str) -> float:
    return statistics.median(r.get(key, 0.0) for r in rows) if rows else float("nan")


def _middle(rows: list[dict]) -> dict:
    """The round of median first-call time (its kernels and NVRTC runs are listed)."""
    return sorted(rows, key=lambda r: r["first_s"])[len(rows) // 2]


def table(results: dict) -> str:
    rows = [r for c in results.values() for r in c["cold"]]
    gpu = any(r["gpu"] for r in rows)
    what = "whole first call on the GPU" if gpu else "compile-only part of the first call (no GPU: no module load, no launch)"
    lines = [f"{what}; medians of {len(next(iter(results.values()))['cold'])} round(s); load {os.getloadavg()[0]:.1f}",
             f"{'':<10} {'cold first call (s)':-^48} | {'warm first call, new process (ms)':-^44} |",
             f"{'case':<10} {'wall':>6} {'cpu':>6} {'NVRTC':>10} {'trace':>6} {'lower':>6} {'prel.':>6} {'other':>6} | "
             f"{'wall':>7} "
             f"{'cpu':>6} {'trace':>6} {'lower':>6} {'lookup':>6} {'other':>6} | NVRTC runs (s, source KB)"]
    for case, r in results.items():
        if case == "quick":
            continue
        cold, warm = r["cold"], r["warm"]
        med = {k: _median(cold, f"{k}_s") for k in ("first", "first_cpu", "nvrtc", "trace", "lower", "compile",
                                                    "prelude")}
        runs = _middle(cold)["nvrtc_runs"] if cold else []
        other = med["first"] - med["nvrtc"] - med["trace"] - med["lower"] - med["prelude"]
        row = (f"{case:<10} {med['first']:6.3f} {med['first_cpu']:6.3f} {len(runs):>2}x{med['nvrtc']:6.3f}s "
               f"{med['trace']:6.3f} {med['lower']:6.3f} {med['prelude']:6.3f} {other:6.3f} | ")
        if warm:
            w = {k: 1e3 * _median(warm, f"{k}_s") for k in ("first", "first_cpu", "trace", "lower", "compile")}
            row += (f"{w['first']:7.1f} {w['first_cpu']:6.1f} {w['trace']:6.1f} {w['lower']:6.1f} {w['compile']:6.1f} "
                    f"{w['first'] - w['trace'] - w['lower'] - w['compile']:6.1f} | ")
        else:
            row += f"{'':>7} {'':>6} {'':>6} {'':>6} {'':>6} {'':>6} | "
        lines.append(row + ", ".join(f"{x['kernel']} ({x['seconds']:.3f}, {x['source_bytes'] / 1024:.0f})"
                                     for x in runs))
    for case, r in results.items():
        if r["cold"] and "native_loaded" in r["cold"][0]:
            lines.append(f"  {case}: native launcher loaded by the end of the cold first call in "
                         f"{sum(x['native_loaded_in_first_call'] for x in r['cold'])} of {len(r['cold'])} rounds, "
                         f"{1e3 * _median(r['cold'], 'native_ready_after_s'):.0f} ms after it otherwise")
    for case, r in results.items():
        background = _middle(r["cold"])["background_runs"] if r["cold"] and "background_runs" in r["cold"][0] else []
        if background:
            lines.append(f"  {case}: quick first call; the tuned kernels ready {_median(r['cold'], 'tuned_ready_s'):.3f}"
                         " s after its start (background NVRTC: " + ", ".join(f"{x['kernel']} {x['seconds']:.3f} s"
                                                                               for x in background) + ")")
    for op in results.get("quick", {"cold": [{}]})["cold"][0].get("speeds", {}):
        quick, tuned = (statistics.median(x["speeds"][op][i] for x in results["quick"]["cold"]) for i in (0, 1))
        lines.append(f"  {op}: the quick first-call kernel {quick:.3f} ms, the tuned one {tuned:.3f} ms: "
                     f"{tuned / quick:.2f}x its speed")
    lines.append(f"imports before the first call (torch, tkpy.kernels): {_median(rows, 'import_s'):.2f} s, of which "
                 f"tkpy.kernels (after torch) {1e3 * _median(rows, 'import_tkpy_s'):.0f} ms")
    return "\n".join(lines)


def timelines(results: dict) -> str:
    """Each case's stages in its median cold and warm rounds, in order: start and length (ms from the call's start),
    on which thread (`--events`)."""
    lines = []
    for case, r in results.items():
        for which in ("cold", "warm"):
            if r[which] and r[which][0].get("events"):
                lines.append(f"{case}, {which} (ms from the call's start: stage, thread, start, length):")
                lines += [f"  {what:<40} {thread:<24} {at:8.1f} {length:8.1f}"
                          for what, thread, at, length in sorted(_middle(r[which])["events"], key=lambda e: e[2])]
    return "\n".join(lines)


def summary(results: dict) -> list[str]:
    """One line per case (gpu_check's summary)."""
    out = []
    for case, r in results.items():
        if case == "quick":
            out += [f"quick {op:<10} {tuned / quick:.2f}x the tuned kernel's speed"
                    for op, (quick, tuned) in r["cold"][0].get("speeds", {}).items()]
            continue
        line = f"first call {case:<10} cold {_median(r['cold'], 'first_s'):6.3f} s (NVRTC {_median(r['cold'], 'nvrtc_s'):.3f} s)"
        if r["warm"]:
            line += f", warm {1e3 * _median(r['warm'], 'first_s'):6.1f} ms"
        out.append(line)
    return out


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cases", default=",".join(CASES))
    parser.add_argument("--events", action="store_true", help="also each case's stages in order (timelines)")
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
    if args.events:
        print(timelines(results))
    if OUT:
        (OUT / "compile.json").write_text(json.dumps(results, indent=1))
    return results


if __name__ == "__main__":
    main()
