"""Host-side cost per kernel launch (microseconds per call).

Measures, for a trivial 4-argument kernel, the host time of:
  raw_ex_int      cuda-bindings cuLaunchKernelEx, prebuilt config, pre-packed void** (int address)
  raw_ex_tuple    cuLaunchKernelEx with cuda-bindings' (values, types) tuple params (for reference)
  launcher        tkpy Launcher.__call__ with a pre-packed ParamBuffer
  launcher_full   torch stream lookup + ParamBuffer.pack + Launcher call (what generated code does)
  launch_fn       tkpy.runtime.launch() free function (+ pack + stream lookup)
  prepared        Launcher.prepare(...)() alone: a functools.partial of cuLaunchKernelEx
  prepared_full   stream lookup + dict lookup of the prepared launch by stream + pack + call + check
  pack            ParamBuffer.pack alone
  stream          torch current raw stream lookup alone
  torch_zero      torch x.zero_() on a small tensor (a reference torch op)
  tkpy_call       bench_tkpy_call(), once the lead fills it in

Each figure is the median over batches (40 x 500 calls after warm-up) of the
batch's mean per-call time; the GPU is synchronized between batches, outside
the timed region, so a full launch queue never blocks the host inside a batch.

Usage: python benchmarks/bench_launch.py   (writes $OUT/launch.json if OUT is set)
"""

from __future__ import annotations

import ctypes
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BATCHES = 40
BATCH = 500
WARMUP = 2000

KERNEL = r"""
extern "C" __global__ void noop4(float* a, const float* b, int n, float s) {
  if (n < 0) a[threadIdx.x] = b[threadIdx.x] * s;  // never true: measures launch only
}
"""


def bench_tkpy_call() -> Callable[[], None] | None:
    """Hook for the lead: return a zero-argument callable that performs one
    complete tkpy kernel call (argument checks, specialization lookup, pack,
    launch) on small CUDA tensors, or None while that is not available yet.

    Deliberately imports nothing from tkpy's unfinished modules. Example once
    they exist::

        import torch, tkpy
        x = torch.zeros(128, device="cuda"); y = torch.zeros(128, device="cuda")
        k = tkpy.kernel(my_kernel_fn)
        k(x, y)                 # compile + warm
        return lambda: k(x, y)
    """
    return None


def _time_per_call_us(step: Callable[[], None], sync: Callable[[], None]) -> dict[str, float]:
    for _ in range(WARMUP):
        step()
    sync()
    means = []
    rng = range(BATCH)
    for _ in range(BATCHES):
        t0 = time.perf_counter_ns()
        for _ in rng:
            step()
        t1 = time.perf_counter_ns()
        sync()
        means.append((t1 - t0) / BATCH / 1000.0)
    return {"median_us": statistics.median(means), "min_us": min(means), "max_us": max(means)}


def main() -> int:
    from tkpy.runtime import gpu_available

    if not gpu_available():
        print("bench_launch: no Hopper GPU visible (torch.cuda / cuda-bindings); nothing to measure.")
        return 0

    import torch
    from cuda.bindings import driver as drv

    from tkpy.runtime import (
        ParamBuffer,
        compile_cuda,
        current_stream_handle,
        launch,
        load_kernel,
        stream_getter,
    )
    from tkpy.runtime.driver import make_launch_config

    dev = torch.cuda.current_device()
    a = torch.zeros(128, device="cuda")
    b = torch.zeros(128, device="cuda")
    mod = compile_cuda(KERNEL, "noop4")
    lk = load_kernel(mod, dev)
    fn = lk.function
    grid, block = (1, 1, 1), (32, 1, 1)
    sync = torch.cuda.synchronize
    stream = current_stream_handle(dev)
    results: dict[str, dict[str, float]] = {}

    # (a) raw cuda-bindings, pre-packed void** passed as an int
    vals = (ctypes.c_uint64(a.data_ptr()), ctypes.c_uint64(b.data_ptr()), ctypes.c_int32(128), ctypes.c_float(2.0))
    ptrs = (ctypes.c_void_p * 4)(*[ctypes.addressof(v) for v in vals])
    addr = ctypes.addressof(ptrs)
    cfg = make_launch_config(grid, block, 0, stream)
    ex = drv.cuLaunchKernelEx

    def raw_int() -> None:
        ex(cfg, fn, addr, 0)

    # ~1 s of launches first: the first timings of a fresh process/machine
    # ran ~30% slow (clock ramp-up, lazy driver work) in our runs.
    t_end = time.perf_counter() + 1.0
    while time.perf_counter() < t_end:
        for _ in range(BATCH):
            raw_int()
        sync()

    results["raw_ex_int"] = _time_per_call_us(raw_int, sync)

    tup = (
        (a.data_ptr(), b.data_ptr(), 128, 2.0),
        (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float),
    )

    def raw_tuple() -> None:
        ex(cfg, fn, tup, 0)

    results["raw_ex_tuple"] = _time_per_call_us(raw_tuple, sync)

    # (b) tkpy paths
    pb = ParamBuffer(["ptr", "ptr", "i32", "f32"])
    pb.pack(a.data_ptr(), b.data_ptr(), 128, 2.0)
    lr = lk.launcher(block)

    def launcher() -> None:
        lr(grid, stream, pb)

    results["launcher"] = _time_per_call_us(launcher, sync)

    get_stream = stream_getter()
    pack = pb.pack
    pa, pbp = a.data_ptr(), b.data_ptr()

    def launcher_full() -> None:
        pack(pa, pbp, 128, 2.0)
        lr(grid, get_stream(dev), pb)

    results["launcher_full"] = _time_per_call_us(launcher_full, sync)

    def launch_fn() -> None:
        pack(pa, pbp, 128, 2.0)
        launch(lk, grid, block, 0, get_stream(dev), pb)

    results["launch_fn"] = _time_per_call_us(launch_fn, sync)

    go = lr.prepare(grid, stream, pb)

    def prepared() -> None:
        go()

    results["prepared"] = _time_per_call_us(prepared, sync)

    by_stream = {stream: go}

    def prepared_full() -> None:
        g = by_stream[get_stream(dev)]
        pack(pa, pbp, 128, 2.0)
        if g()[0]:
            raise RuntimeError("launch failed")

    results["prepared_full"] = _time_per_call_us(prepared_full, sync)

    def pack_only() -> None:
        pack(pa, pbp, 128, 2.0)

    results["pack"] = _time_per_call_us(pack_only, lambda: None)

    def stream_only() -> None:
        get_stream(dev)

    results["stream"] = _time_per_call_us(stream_only, lambda: None)

    # (c) torch reference
    z = torch.zeros(16, device="cuda")

    def torch_zero() -> None:
        z.zero_()

    results["torch_zero"] = _time_per_call_us(torch_zero, sync)

    call = bench_tkpy_call()
    if call is not None:
        results["tkpy_call"] = _time_per_call_us(call, sync)

    sync()
    meta = {
        "device": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "calls_per_batch": BATCH,
        "batches": BATCHES,
    }
    try:
        import cuda.bindings

        meta["cuda_bindings"] = cuda.bindings.__version__
    except Exception:
        pass
    print(f"# launch host overhead on {meta['device']} (torch {meta['torch']}, py {meta['python']})")
    print(f"{'path':<16}{'median us':>11}{'min us':>9}{'max us':>9}")
    for k, v in results.items():
        print(f"{k:<16}{v['median_us']:>11.2f}{v['min_us']:>9.2f}{v['max_us']:>9.2f}")
    if "tkpy_call" not in results:
        print("tkpy_call       (bench_tkpy_call() not filled in yet)")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "launch.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
        print(f"wrote {Path(out) / 'launch.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
