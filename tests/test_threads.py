"""Thread safety (issue 30): tracing, compiling and the caches may be entered from many threads at once, and
launches never share mutable argument buffers between threads.

The CPU tests run the launch path against a fake GPU: the driver's launch is replaced by a function that reads
the parameter block it is handed (the Python launcher's cuda-bindings call, and for the native launcher a ctypes
callback at the address of cuLaunchKernelEx) and records the calling thread with the packed pointers, which
must be that thread's own tensors'. A switch interval of 1 us makes the GIL change hands often enough that
each race shows up within a few thousand launches. The GPU variants (skipped without one) do the same on the
real driver."""
from __future__ import annotations

import ctypes
import sys
import threading

import pytest
import torch

import gpu_util
import tkpy as tk
import tkpy.runtime as runtime
from gpu_util import attention_reference, rel_err
from tkpy import f32
from tkpy.frontend import context, kernel as kernel_module, spec_records
import contextlib

from tkpy.runtime import driver, launching, native

CUDA_ERROR_INVALID_CONTEXT = 201


@pytest.fixture(autouse=True)
def switch_often():
    previous = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(previous)


def in_threads(n: int, work) -> list:
    """work(i) on n threads started together; their results in order; the first exception raised here."""
    start = threading.Barrier(n)
    results, errors = [None] * n, []

    def run(i):
        try:
            start.wait()
            results[i] = work(i)
        except BaseException as e:      # noqa: BLE001 - re-raised below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if errors:
        raise errors[0]
    return results


def add_kernel():
    """A fresh kernel (its own caches): y += v over one 16 x 16 tile."""
    @tk.kernel(warps=1, name="thread_add")
    def add(y: tk.gl[f32, "N", 16], v: float):
        t = tk.rt(f32, 16, 16)
        tk.load(t, y, (0, 0))
        tk.add(t, t, v)
        tk.store(y, t, (0, 0))
    return add


def tensor(strided: bool, device="cpu") -> torch.Tensor:
    return torch.zeros(16, 32, device=device)[:, :16] if strided else torch.zeros(16, 16, device=device)


# ---------------------------------------------------------------------------- tracing and caches


def test_trace_context_is_per_thread():
    """Another thread's trace in progress is not a nested trace; a nested one on the same thread still is."""
    entered, release = threading.Event(), threading.Event()

    def hold():
        with context.activate(context.TraceContext("a", 1)):
            entered.set()
            release.wait(10)

    other = threading.Thread(target=hold)
    other.start()
    try:
        assert entered.wait(10)
        mine = context.TraceContext("b", 1)
        with context.activate(mine):
            assert context.current() is mine
            with pytest.raises(tk.TraceError, match="inside another kernel's trace"):
                with context.activate(context.TraceContext("c", 1)):
                    pass
    finally:
        release.set()
        other.join()
    with pytest.raises(tk.TraceError, match="only be used inside"):
        context.current()


def _clear_attention_caches():
    from tkpy.kernels import attention_forward as att

    att._FORWARD_PLANS.clear()
    for obj in vars(att).values():          # _attention and the other kernel factories
        if hasattr(obj, "cache_clear"):
            obj.cache_clear()


def _first_attention_calls(device: str, n: int, seq: int):
    from tkpy.kernels import attention

    _clear_attention_caches()
    gen = torch.Generator().manual_seed(30)
    inputs = [[torch.randn(1, 2, seq, 64, generator=gen).to(torch.bfloat16).to(device) for _ in range(3)]
              for _ in range(n)]
    outputs = in_threads(n, lambda i: attention(*inputs[i]))
    if device == "cuda":
        torch.cuda.synchronize()
    for (q, k, v), o in zip(inputs, outputs):
        assert rel_err(o, attention_reference(q, k, v)[0]) < 1e-2


def test_first_attention_calls_from_16_threads(monkeypatch):
    """16 threads make the first attention() call of the process at once (interpreted): every one traces or
    waits for the trace, none sees another's trace as its own."""
    monkeypatch.setenv("TKPY_INTERPRET", "1")
    _first_attention_calls("cpu", 16, 64)


def test_source_traces_and_compiles_once_per_specialization(monkeypatch):
    """(The specialization records off: an earlier run's would leave nothing to compile.)"""
    monkeypatch.setattr(spec_records, "find", lambda *a: None)
    traces, compiles = [], []
    trace, compile_cuda = kernel_module.trace_kernel, runtime.compile_cuda
    monkeypatch.setattr(kernel_module, "trace_kernel", lambda *a, **k: traces.append(a[1]) or trace(*a, **k))
    monkeypatch.setattr(runtime, "compile_cuda", lambda *a, **k: compiles.append(a[1]) or compile_cuda(*a, **k))
    k = add_kernel()
    sources = in_threads(8, lambda i: k.source(tensor(False), 1.0))
    assert len(set(sources)) == 1 and len(traces) == 1 and len(compiles) == 1
    # a strided tensor is another specialization; a packed one of another shape is not
    in_threads(8, lambda i: k.source(tensor(True) if i % 2 else torch.zeros(32, 16), 1.0))
    assert len(traces) == 2 and len(compiles) == 2 and len(k._compiled) == 2


def test_a_slow_specialization_does_not_hold_up_others():
    """Each key has its own lock: a thread waiting inside one key's make() leaves the others free."""
    k = add_kernel()
    cache: dict = {}
    started, release = threading.Event(), threading.Event()

    def slow():
        started.set()
        assert release.wait(10)
        return "slow"

    other = threading.Thread(target=lambda: k._once(cache, "a", slow))
    other.start()
    try:
        assert started.wait(10)
        assert k._once(cache, "b", lambda: "fast") == "fast"     # would wait on the other thread under one lock
    finally:
        release.set()
        other.join()
    assert cache == {"a": "slow", "b": "fast"}


# ---------------------------------------------------------------------------- launches against a fake GPU


class FakeGPU:
    """The launch path's GPU parts replaced: loading, streams, tensor checks and the driver's launch, which records
    (thread, packed pointer values) and fails with CUDA_ERROR_INVALID_CONTEXT where `fail_first` says (each launch
    is then retried once, as on a thread without a current context)."""

    def __init__(self, monkeypatch, fail_first=False):
        self.records: list = []
        self.paths: list = []     # "python" or "native": which launcher made each recorded launch
        self.ptr_slots: list = []
        self.fail_first = fail_first
        self._toggle = threading.local()
        check = kernel_module.check_tensor
        monkeypatch.setattr(kernel_module, "check_tensor", lambda spec, t, need_cuda: check(spec, t, need_cuda=False))
        monkeypatch.setattr(runtime, "require_gpu", lambda: None)
        monkeypatch.setattr(runtime, "load_kernel", lambda module, device=None, smem=0: self)
        monkeypatch.setattr(runtime, "stream_getter", lambda: (lambda device: 0x5000))
        monkeypatch.setattr(launching, "device_context", lambda device: contextlib.nullcontext())
        monkeypatch.setattr(launching, "pushed_context", lambda device: contextlib.nullcontext())
        self.device_index, self.kernel_name = -1, "fake"
        self._callback = ctypes.CFUNCTYPE(ctypes.c_int, *[ctypes.c_void_p] * 4)(self._native_launch)
        monkeypatch.setattr(native, "driver_launch_address",
                            lambda: ctypes.cast(self._callback, ctypes.c_void_p).value)
        monkeypatch.setattr(native, "driver_context_api", lambda: (1, 2, 3))   # (unused: the fake has no context)

    def launcher(self, block, smem=0, cluster=None, dependent_launch=False):      # LoadedKernel.launcher
        lr = launching.Launcher(0xF00, block, smem, cluster, kernel=self, dependent_launch=dependent_launch)
        lr._launch = self._python_launch
        return lr

    def _values(self, address: int) -> tuple:
        slot = [ctypes.c_void_p.from_address(address + 8 * i).value for i in self.ptr_slots]
        return tuple(ctypes.c_uint64.from_address(p).value for p in slot)

    def _python_launch(self, config, function, address, extra):
        if self.fail_first:       # every other call, per thread: the first try of each launch
            self._toggle.failed = failed = not getattr(self._toggle, "failed", False)
            if failed:
                return (CUDA_ERROR_INVALID_CONTEXT,)
        self.records.append((threading.get_ident(), self._values(address)))
        self.paths.append("python")
        return (0,)

    def _native_launch(self, config, function, params, extra):
        if self.fail_first:       # the retry goes through the Python Launcher (_python_launch)
            self._toggle.failed = True
            return CUDA_ERROR_INVALID_CONTEXT
        self.records.append((threading.get_ident(), self._values(params)))
        self.paths.append("native")
        return 0

    def watch(self, k, *args):
        """Record the pointer slots of `k`'s specialization for `args`."""
        self.ptr_slots[:] = [i for i, s in enumerate(k.trace(*args).lower().slots) if s.source[0] == "ptr"]

    def check_own(self, mine: dict, launches: int):
        """Every launch ran with its own thread's pointers."""
        assert len(self.records) == launches
        foreign = [(ident, values) for ident, values in self.records if values != mine[ident]]
        assert not foreign, f"{len(foreign)} of {launches} launches ran with another thread's arguments"


LAUNCHERS = ["python", "native"]


def _use_launcher(monkeypatch, which: str):
    pytest.importorskip("cuda.bindings.driver")         # the launch configurations are cuda-bindings structs
    if which == "native" and native.load() is None:
        pytest.skip("the native launcher could not be built here")
    monkeypatch.setenv(native.ENV, "1" if which == "native" else "0")
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)


def _race(fake: FakeGPU, k, strided: bool, threads: int, launches: int, warm: bool):
    ys = [tensor(strided) for _ in range(threads)]
    fake.watch(k, ys[0], 1.0)
    if warm:
        k[(1,)](tensor(strided), 0.0)
        fake.records.clear()
    mine = {}

    def work(i):
        mine[threading.get_ident()] = (ys[i].data_ptr(),)
        launch = k[(1,)]
        for j in range(launches):
            launch(ys[i], float(j))

    in_threads(threads, work)
    fake.check_own(mine, threads * launches)


@pytest.mark.parametrize("which", LAUNCHERS)
@pytest.mark.parametrize("strided", [False, True], ids=["packed", "strided"])
def test_launches_pack_their_own_arguments(monkeypatch, which, strided):
    _use_launcher(monkeypatch, which)
    fake = FakeGPU(monkeypatch)
    k = add_kernel()
    _race(fake, k, strided, 4, 2000, warm=True)
    assert k.uses_native_launch == (which == "native" and not strided)


@pytest.mark.parametrize("which", LAUNCHERS)
def test_first_launches_from_8_threads(monkeypatch, which):
    """The first launches race to make the fast path and add its key: one trace, no 'rejected cached key' (the
    specialization records off: an earlier run's would leave nothing to trace)."""
    _use_launcher(monkeypatch, which)
    monkeypatch.setattr(spec_records, "find", lambda *a: None)
    traces = []
    trace = kernel_module.trace_kernel
    monkeypatch.setattr(kernel_module, "trace_kernel", lambda *a, **k: traces.append(a[1]) or trace(*a, **k))
    fake = FakeGPU(monkeypatch)
    k = add_kernel()
    _race(fake, k, False, 8, 50, warm=False)
    assert len(traces) == 2       # one for the launches, one for FakeGPU.watch's trace
    assert len(k._fast) == 1 and k.uses_native_launch == (which == "native")


@pytest.mark.parametrize("which", LAUNCHERS)
def test_retry_after_a_missing_context_launches_its_own_arguments(monkeypatch, which):
    """Every launch fails once as on a fresh thread and is retried (launching.Launcher.handle_error) from the address
    its launcher passes: the native one its own block on the C stack, the Python one this thread's buffer."""
    _use_launcher(monkeypatch, which)
    fake = FakeGPU(monkeypatch, fail_first=True)
    _race(fake, add_kernel(), False, 4, 2000, warm=True)


# ---------------------------------------------------------------------------- the native launcher built meanwhile


@pytest.fixture
def held_build(monkeypatch):
    """The native launcher as on a machine that has never built it, its build (about 0.4 s of C compiler on the
    H200) held until `release` is set: native's state reset, its load then returning the real extension."""
    _use_launcher(monkeypatch, "native")
    module = native.load()
    release, started = threading.Event(), threading.Event()

    def build_and_import():
        started.set()
        assert release.wait(60), "the test never released the build"
        return module
    for name, value in (("_tried", False), ("_module", None), ("_thread", None), ("_waiting", [])):
        monkeypatch.setattr(native, name, value)
    monkeypatch.setattr(native, "_build_and_import", build_and_import)
    yield release, started
    release.set()
    native.wait(60)


def test_first_launches_do_not_wait_for_the_native_launcher(monkeypatch, held_build):
    """A process's first launch starts the native launcher's build in the background and launches through the
    Python launcher meanwhile; once it is built the kernel switches to it."""
    release, started = held_build
    fake = FakeGPU(monkeypatch)
    k = add_kernel()
    y = tensor(False)
    fake.watch(k, y, 1.0)
    k[(1,)](y, 1.0)
    k[(1,)](y, 2.0)
    assert started.wait(10) and native._tried is False        # the build is still under way
    assert fake.paths == ["python", "python"] and not k.uses_native_launch
    release.set()
    assert native.wait(60) is not None and k.uses_native_launch
    k[(1,)](y, 3.0)
    assert fake.paths == ["python", "python", "native"]
    assert [values for _, values in fake.records] == [(y.data_ptr(),)] * 3


def test_the_native_launchers_load_starts_after_the_first_launch(monkeypatch, held_build):
    """The background load begins once the process's first launch is made, not before its trace, lowering and cache
    lookup: its Python (sysconfig, the build's checks, the import) would take the GIL from that first call."""
    release, started = held_build
    fake = FakeGPU(monkeypatch)
    launches_at_start = []
    start = native._start_locked
    monkeypatch.setattr(native, "_start_locked", lambda: launches_at_start.append(len(fake.records)) or start())
    k = add_kernel()
    y = tensor(False)
    fake.watch(k, y, 1.0)
    k[(1,)](y, 1.0)
    assert started.wait(10) and launches_at_start == [1] and fake.paths == ["python"]
    release.set()
    assert native.wait(60) is not None and k.uses_native_launch


def test_the_switch_to_native_while_threads_launch(monkeypatch, held_build):
    """4 threads launch a kernel (each on its own tensor, kernel[grid] each time) while the build finishes and the
    kernel switches: every launch packs its own thread's arguments, and after the switch all go the native way."""
    release, _ = held_build
    fake = FakeGPU(monkeypatch)
    k = add_kernel()
    ys = [tensor(False) for _ in range(4)]
    fake.watch(k, ys[0], 1.0)
    k[(1,)](tensor(False), 0.0)
    fake.records.clear()
    fake.paths.clear()
    mine, launches = {}, 1500

    def work(i):
        mine[threading.get_ident()] = (ys[i].data_ptr(),)
        for j in range(launches):
            if i == 0 and j == launches // 3:
                release.set()
            k[(1,)](ys[i], float(j))

    in_threads(4, work)
    native.wait(60)
    fake.check_own(mine, 4 * launches)
    assert k.uses_native_launch and fake.paths[0] == "python"
    in_threads(4, work)
    assert fake.paths[-4 * launches:] == ["native"] * (4 * launches)


def test_a_kernel_gone_before_the_build_is_not_kept(monkeypatch, held_build):
    """native holds the kernels waiting for the build weakly."""
    import gc
    import weakref

    release, _ = held_build
    FakeGPU(monkeypatch)
    k = add_kernel()
    k[(1,)](tensor(False), 1.0)
    gone = weakref.ref(k)
    del k
    gc.collect()
    assert gone() is None
    release.set()
    assert native.wait(60) is not None


# ---------------------------------------------------------------------------- the same on a GPU


@pytest.mark.parametrize("which", LAUNCHERS)
@pytest.mark.parametrize("strided", [False, True], ids=["packed", "strided"])
@gpu_util.on_gpu
def test_gpu_launches_from_threads_add_to_their_own_tensor(monkeypatch, which, strided):
    """Each of 8 threads adds its number to its own tensor 200 times (tensors made on the main thread, so each
    thread's first launch also fails for want of a context and is retried); a launch that ran with another
    thread's arguments would leave one tensor short and another over."""
    if which == "native" and native.load() is None:
        pytest.skip("the native launcher could not be built here")
    monkeypatch.setenv(native.ENV, "1" if which == "native" else "0")
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    k = add_kernel()
    threads, launches = 8, 200
    ys = [tensor(strided, "cuda") for _ in range(threads)]
    k[(1,)](tensor(strided, "cuda"), 1.0)          # compiled before the threads start
    torch.cuda.synchronize()

    def work(i):
        launch = k[(1,)]
        for _ in range(launches):
            launch(ys[i], float(i + 1))
        torch.cuda.synchronize()

    in_threads(threads, work)
    for i, y in enumerate(ys):
        assert torch.equal(y, torch.full_like(y, (i + 1) * launches)), f"thread {i}"
    assert k.uses_native_launch == (which == "native" and not strided)


@gpu_util.on_gpu
def test_gpu_first_attention_calls_from_16_threads(monkeypatch):
    monkeypatch.delenv("TKPY_INTERPRET", raising=False)
    _first_attention_calls("cuda", 16, 128)


@gpu_util.on_gpu
def test_gpu_tensor_maps_made_on_a_thread_without_a_context():
    """A fresh thread has no current CUDA context: both ways of making a tensor map (encode, and retargeting a
    cached map of the same geometry) set the primary one first (retarget did not: INVALID_CONTEXT, run 252)."""
    from tkpy.runtime.tensor_map import TensorMapEncoder
    from tkpy.tiles.types import ST

    encoder = TensorMapEncoder(ST(tk.bf16, 64, 64), torch.cuda.current_device())
    a, b, c = (torch.randn(128, 64, device="cuda").to(torch.bfloat16) for _ in range(3))
    maps = in_threads(1, lambda i: encoder(a))
    maps += in_threads(1, lambda i: driver._driver().cuCtxGetCurrent()[1])          # a fresh thread: no context
    maps += in_threads(1, lambda i: encoder(b)) + in_threads(1, lambda i: encoder(c))  # retargets
    assert int(maps[1]) == 0 and len({maps[0], maps[2], maps[3]}) == 3 and len(encoder._by_geometry) == 1


def test_tensor_map_calls_retry_once_with_the_primary_context(monkeypatch):
    """The driver's tensor-map calls run one at a time under their device's context (device_context), and one that
    reports INVALID_CONTEXT is retried once after the primary context is made current (seen on the H200 from 16
    fresh threads at once); other errors raise."""
    from tkpy.runtime import tensor_map

    calls: list = []

    class FakeDriver:
        def cuCtxSetCurrent(self, ctx):
            calls.append(("set", ctx))
            return (0,)

    @contextlib.contextmanager
    def device_context(device):
        calls.append(("enter", device))
        try:
            yield
        finally:
            calls.append(("exit", device))

    monkeypatch.setattr(tensor_map, "_driver", lambda: FakeDriver())
    monkeypatch.setattr(tensor_map, "device_context", device_context)
    monkeypatch.setattr(tensor_map, "primary_context", lambda device: f"primary{device}")
    results = iter([(CUDA_ERROR_INVALID_CONTEXT,), (0, "map")])
    assert tensor_map._in_context(3, lambda: next(results), "encode") == "map"
    assert calls == [("enter", 3), ("set", "primary3"), ("exit", 3)]
    results = iter([(CUDA_ERROR_INVALID_CONTEXT,), (CUDA_ERROR_INVALID_CONTEXT,)])
    with pytest.raises(runtime.DriverError, match="encode"):
        tensor_map._in_context(3, lambda: next(results), "encode")
    calls.clear()
    with pytest.raises(runtime.DriverError):
        tensor_map._in_context(0, lambda: (1,), "encode")                      # not a context error: no retry
    assert calls == [("enter", 0), ("exit", 0)]
