"""Host-side cost per kernel launch (microseconds per call).

Measures, for a trivial 4-argument kernel, the host time of:
  raw_ex_int      cuda-bindings cuLaunchKernelEx, prebuilt config, pre-packed void** (int address)
  raw_ex_tuple    cuLaunchKernelEx with cuda-bindings' (values, types) tuple params (for reference)
  launcher        tkpy Launcher.__call__ with a pre-packed ParamBuffer
  launcher_full   torch stream lookup + ParamBuffer.pack + Launcher call (what generated code does)
  launch_fn       tkpy.runtime.launch() free function (+ pack + stream lookup)
  prepared        Launcher.prepare(...)() alone: cuLaunchKernelEx bound once, after a check that the kernel's
                  device's context is current (cuCtxGetCurrent; the launcher paths make the same check)
  legacy_prepared the same with cuLaunchKernel (no launch-config struct; no clusters)
  prepared_full   stream lookup + dict lookup of the prepared launch by stream + pack + call + check
  pack            ParamBuffer.pack alone
  stream          torch current raw stream lookup alone
  torch_zero      torch x.zero_() on a small tensor (a reference torch op)
  tkpy_call       a whole tkpy kernel call, kernel[grid](x, y, n, s): checks, key lookup, pack, launch
                  (through the native launcher when it builds: meta["tkpy_call_native"])
  tkpy_python     the same with TKPY_NATIVE_LAUNCH=0: the generated Python launcher
  native_raw      cuLaunchKernelEx called from tkpy's C extension, pre-packed params, given stream
  native_noop     tkpy_call's native launcher with a driver function that does nothing: tkpy's own
                  host cost per call (key, pointers, pack, stream), without the driver
And whole calls of the torch-facing kernels at a cache hit (small shapes; each allocates its output), next to
torch's equivalents in the same rounds:
  gemm_kernel     the GEMM kernel's launch alone, kernel[grid](a, b, c) (three TMA maps)
  matmul          tkpy.kernels.matmul(a, b), eager inference: the direct path (op_support.direct_call_ok)
  matmul_op       torch.ops.tkpy.matmul(a, b): through the op dispatcher (autograd key included)
  torch_matmul    torch.matmul(a, b) (cuBLAS)
  attention       tkpy.kernels.attention(q, k, v) (direct), attention_op through the dispatcher
  torch_sdpa      torch.nn.functional.scaled_dot_product_attention(q, k, v)

Each figure is the median over batches (40 x 500 calls after warm-up) of the
batch's mean per-call time; the paths are interleaved (one batch of each per
round) so host drift affects them alike; the GPU is synchronized between
batches, outside the timed region, so a full launch queue never blocks the host
inside a batch.

Usage: python benchmarks/bench_launch.py   (writes $OUT/launch.json if OUT is set)
"""

from __future__ import annotations

import ctypes
import functools
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


def bench_tkpy_call(native_launch: bool = True):
    """One complete tkpy kernel call (argument checks, specialization lookup, pack, launch) of a
    4-argument kernel that does no work, on small CUDA tensors, already compiled and warm; through
    the native launcher, or with TKPY_NATIVE_LAUNCH=0 the Python one. Returns (call, kernel)."""
    import torch

    import tkpy as tk
    from tkpy.runtime import native

    @tk.kernel(warps=1)
    def noop4(x: tk.gl[tk.f32, "N", 16], y: tk.gl[tk.f32, "N", 16], n: int, s: float):
        with tk.if_(n < 0):                     # never true: measures the launch only
            t = tk.rt(tk.f32, 16, 16)
            tk.load(t, x, (0, 0))
            tk.mul(t, t, s)
            tk.store(y, t, (0, 0))

    x = torch.randn(64, 16, device="cuda")
    y = torch.empty_like(x)
    saved = os.environ.get(native.ENV)
    os.environ[native.ENV] = "1" if native_launch else "0"
    try:
        noop4[(1,)](x, y, 1, 0.5)           # the first launch starts the native launcher's load (a build, the
        if native_launch:                   # first time on a machine) and switches to it when it is loaded
            native.wait()
    finally:
        if saved is None:
            del os.environ[native.ENV]
        else:
            os.environ[native.ENV] = saved
    launch = noop4[(1,)]
    launch(x, y, 1, 0.5)
    torch.cuda.synchronize()
    return (lambda: launch(x, y, 1, 0.5)), noop4


def native_noop_call(kernel) -> Callable[[], None] | None:
    """`kernel`'s native launch path with cuLaunchKernelEx replaced by a function that does nothing."""
    import torch

    from tkpy.runtime import ParamBuffer, native

    module = native.load()
    if module is None or not kernel.uses_native_launch:
        return None
    (key, _), = kernel._fast.items()
    (compiled,) = kernel._compiled.values()
    params, _, stream_of, device, _, launcher, maps = compiled.ready(torch.cuda.current_device()).entry
    entry = native.entry(compiled.lowered.slots, kernel.specs, launcher, ParamBuffer(params.kinds), maps, device,
                         stream_of, launch_address=module.NOOP_LAUNCH)
    noop = module.Launcher(native.spec_kinds(module, kernel.specs), {key: entry}, kernel._slow_launch)
    x = torch.randn(64, 16, device="cuda")
    y = torch.empty_like(x)
    call = functools.partial(noop, (1, 1, 1))
    return lambda: call(x, y, 1, 0.5)


def op_paths(sync) -> dict:
    """The torch-facing kernels' whole calls, through the eager fast path and through the dispatcher, and
    torch's own calls, on small bf16 CUDA tensors (128 x 128 x 128; attention (1, 1, 128, 64)), already
    compiled."""
    import torch

    from tkpy.kernels import attention, matmul

    a, b = (torch.randn(128, 128, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    q, k, v = (torch.randn(1, 1, 128, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    op, att = torch.ops.tkpy.matmul.default, torch.ops.tkpy.attention.default
    sdpa = torch.nn.functional.scaled_dot_product_attention
    matmul(a, b)
    from tkpy.kernels import gemm
    (plan,) = [call.launch for key, call in gemm._CALLS.items() if key[0] == a.shape and key[9] is None]
    c = torch.empty(128, 128, device="cuda", dtype=torch.bfloat16)
    kernel, grid = plan.template.kernel, plan.template.grid(a, b, c)
    calls = {"gemm_kernel": lambda: kernel[grid](a, b, c),
             "matmul": lambda: matmul(a, b), "matmul_op": lambda: op(a, b), "torch_matmul": lambda: torch.matmul(a, b),
             "attention": lambda: attention(q, k, v), "attention_op": lambda: att(q, k, v),
             "torch_sdpa": lambda: sdpa(q, k, v)}
    for call in calls.values():
        call()
    return {name: (call, sync) for name, call in calls.items()}


def _time_interleaved(paths: dict) -> dict[str, dict[str, float]]:
    """Time every path in rounds, one batch of each per round, so that drifts of the host (clocks,
    other tenants) hit all paths alike; per path, the median of its batch means."""
    for step, sync in paths.values():
        for _ in range(WARMUP):
            step()
        sync()
    means: dict[str, list[float]] = {name: [] for name in paths}
    rng = range(BATCH)
    for _ in range(BATCHES):
        for name, (step, sync) in paths.items():
            t0 = time.perf_counter_ns()
            for _ in rng:
                step()
            t1 = time.perf_counter_ns()
            sync()
            means[name].append((t1 - t0) / BATCH / 1000.0)
    return {name: {"median_us": statistics.median(m), "min_us": min(m), "max_us": max(m)}
            for name, m in means.items()}


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
    from tkpy.runtime.launching import make_launch_config

    dev = torch.cuda.current_device()
    a = torch.zeros(128, device="cuda")
    b = torch.zeros(128, device="cuda")
    mod = compile_cuda(KERNEL, "noop4")
    lk = load_kernel(mod, dev)
    fn = lk.function
    grid, block = (1, 1, 1), (32, 1, 1)
    sync = torch.cuda.synchronize
    stream = current_stream_handle(dev)
    paths: dict[str, tuple[Callable[[], None], Callable[[], None]]] = {}

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

    paths["raw_ex_int"] = (raw_int, sync)

    tup = (
        (a.data_ptr(), b.data_ptr(), 128, 2.0),
        (ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_float),
    )

    def raw_tuple() -> None:
        ex(cfg, fn, tup, 0)

    paths["raw_ex_tuple"] = (raw_tuple, sync)

    # (b) tkpy paths
    pb = ParamBuffer(["ptr", "ptr", "i32", "f32"])
    pb.pack(a.data_ptr(), b.data_ptr(), 128, 2.0)
    lr = lk.launcher(block)

    def launcher() -> None:
        lr(grid, stream, pb)

    paths["launcher"] = (launcher, sync)

    get_stream = stream_getter()
    pack = pb.pack
    pa, pbp = a.data_ptr(), b.data_ptr()

    def launcher_full() -> None:
        pack(pa, pbp, 128, 2.0)
        lr(grid, get_stream(dev), pb)

    paths["launcher_full"] = (launcher_full, sync)

    def launch_fn() -> None:
        pack(pa, pbp, 128, 2.0)
        launch(lk, grid, block, 0, get_stream(dev), pb)

    paths["launch_fn"] = (launch_fn, sync)

    go = lr.prepare(grid, stream, pb)

    def prepared() -> None:
        go()

    paths["prepared"] = (prepared, sync)

    from tkpy.runtime.driver import cu_stream

    legacy = functools.partial(drv.cuLaunchKernel, fn, *grid, *block, 0, cu_stream(stream), addr, 0)
    paths["legacy_prepared"] = (legacy, sync)

    by_stream = {stream: go}

    def prepared_full() -> None:
        g = by_stream[get_stream(dev)]
        pack(pa, pbp, 128, 2.0)
        if g()[0]:
            raise RuntimeError("launch failed")

    paths["prepared_full"] = (prepared_full, sync)

    def pack_only() -> None:
        pack(pa, pbp, 128, 2.0)

    paths["pack"] = (pack_only, lambda: None)

    def stream_only() -> None:
        get_stream(dev)

    paths["stream"] = (stream_only, lambda: None)

    # (c) torch reference
    z = torch.zeros(16, device="cuda")

    def torch_zero() -> None:
        z.zero_()

    paths["torch_zero"] = (torch_zero, sync)

    from tkpy.runtime import native

    tkpy_call, kernel = bench_tkpy_call(native_launch=True)
    paths["tkpy_call"] = (tkpy_call, sync)
    paths["tkpy_python"] = (bench_tkpy_call(native_launch=False)[0], sync)
    module = native.load()
    if module is not None and kernel.uses_native_launch:
        entry = native.entry([], [], lr, pb, (), dev, get_stream)     # pb as packed above; no slots to pack
        prepacked = functools.partial(entry.launch_prepacked, grid, stream)
        paths["native_raw"] = (prepacked, sync)
        paths["native_noop"] = (native_noop_call(kernel), lambda: None)
    paths.update(op_paths(sync))
    results = _time_interleaved(paths)

    sync()
    meta = {
        "device": torch.cuda.get_device_name(dev),
        "torch": torch.__version__,
        "python": sys.version.split()[0],
        "calls_per_batch": BATCH,
        "batches": BATCHES,
        "tkpy_call_native": kernel.uses_native_launch,
    }
    try:
        import cuda.bindings

        meta["cuda_bindings"] = cuda.bindings.__version__
    except Exception:
        pass
    print(f"# launch host overhead on {meta['device']} (torch {meta['torch']}, py {meta['python']}); "
          f"tkpy_call through the {'native' if meta['tkpy_call_native'] else 'Python'} launcher")
    print(f"{'path':<16}{'median us':>11}{'min us':>9}{'max us':>9}")
    for k, v in results.items():
        print(f"{k:<16}{v['median_us']:>11.2f}{v['min_us']:>9.2f}{v['max_us']:>9.2f}")
    out = os.environ.get("OUT")
    if out:
        Path(out).mkdir(parents=True, exist_ok=True)
        (Path(out) / "launch.json").write_text(json.dumps({"meta": meta, "results": results}, indent=2))
        print(f"wrote {Path(out) / 'launch.json'}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
