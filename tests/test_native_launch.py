"""CPU tests of the native launch path (tkpy/runtime/native.py, native_launch.c).

The extension is built with this machine's C compiler (skipped, with the reason, where there is
none). The driver is replaced by a ctypes callback that records what cuLaunchKernelEx would get, so
the whole per-call path (key, pointers, packing, stream, launch configuration, errors) runs here and
is compared with the generated Python launcher, whose cuda-bindings call is replaced the same way.
"""
from __future__ import annotations

import ctypes
import logging
import struct
import sysconfig
import threading

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.codegen.abi import Slot
from tkpy.frontend import fastpath
from tkpy.runtime import DriverError, Launcher, ParamBuffer, native
from tkpy.runtime.launching import make_launch_config


def native_build_problem() -> str | None:
    """Why the native launcher cannot be built here (no C compiler or no Python headers), or None."""
    try:
        native.compiler()
        native.python_include()
    except native.NativeBuildError as e:
        return str(e)
    return None


_PROBLEM = native_build_problem()
pytestmark = pytest.mark.skipif(_PROBLEM is not None, reason=f"cannot build the native launcher: {_PROBLEM}")


@pytest.fixture(scope="module")
def mod():
    m = native.load()
    assert m is not None, "the extension did not build or import (see the tkpy.native debug log)"
    return m


@tk.kernel(warps=1)
def noop5(x: tk.gl[f32, "N", 16], y: tk.gl[f32, "N", 16], n: int, s: float, c: tk.constexpr):
    with tk.if_(n < 0):                     # never true
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (0, 0))
        tk.mul(t, t, s)
        tk.store(y, t, (0, 0))


def _args(rows=64, n=5, s=0.5, c=1):
    return (torch.randn(rows, 16), torch.randn(rows, 16), n, s, c)


def _encoder(tag: int):
    """A stand-in TMA encoder: 128 bytes that depend on the tensor's pointer and shape."""
    def encode(t):
        return struct.pack("<QQQ", tag, t.data_ptr(), t.shape[0]).ljust(128, b"\x7f")
    return encode


def _slot_sets():
    """The kernel's own slots, and a synthetic list with tensor maps and every slot source."""
    real = noop5.trace(*_args()).lower().slots
    synthetic = [Slot("x_ptr", "", "ptr", ("ptr", 0)), Slot("N", "", "i32", ("dim", "N")),
                 Slot("x_tma", "", "blob128", ("tmap", 0, None)), Slot("s", "", "f32", ("scalar", 3)),
                 Slot("y_ptr", "", "ptr", ("ptr", 1)), Slot("y_tma", "", "blob128", ("tmap", 1, None)),
                 Slot("n", "", "i32", ("scalar", 2))]
    return {"kernel": (real, ()), "tmaps": (synthetic, (_encoder(1), _encoder(2)))}


# ---------------------------------------------------------------------------- fake driver

_LAUNCH = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.POINTER(ctypes.c_void_p),
                           ctypes.c_void_p)
_CONFIG = struct.Struct("<7I4xQQI4x")       # CUlaunchConfig: grid, block, smem, stream, attrs, numAttrs


class FakeDriver:
    """cuLaunchKernelEx as a C function pointer: records (grid, block, smem, stream, cluster, dependent launch,
    function, parameter block) per launch and returns `result`."""

    def __init__(self, size: int, nslots: int, result: int = 0):
        self.size, self.nslots, self.result = size, nslots, result
        self.calls: list = []
        self.raw_configs: list = []
        self.callback = _LAUNCH(self._launch)
        self.address = ctypes.cast(self.callback, ctypes.c_void_p).value

    def _launch(self, cfg, fn, params, extra):
        raw = ctypes.string_at(cfg, _CONFIG.size)
        *dims, smem, stream, attrs, nattrs = _CONFIG.unpack(raw)
        cluster, dependent = None, False
        attr_raw = ctypes.string_at(attrs, 72 * nattrs) if nattrs else b""
        for i in range(nattrs):
            kind = struct.unpack_from("<I", attr_raw, 72 * i)[0]
            if kind == 4:                                           # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
                cluster = struct.unpack_from("<3I", attr_raw, 72 * i + 8)
            else:                                                   # ..._PROGRAMMATIC_STREAM_SERIALIZATION
                assert kind == 6 and struct.unpack_from("<i", attr_raw, 72 * i + 8)[0] == 1
                dependent = True
        block = ctypes.string_at(params[0], self.size) if self.nslots else b""
        self.raw_configs.append((raw, attr_raw))
        self.calls.append(("launch", tuple(dims[:3]), tuple(dims[3:]), smem, stream, cluster, dependent, fn, block,
                           [params[i] - params[0] for i in range(self.nslots)]))
        return self.result


class Setup:
    """One kernel's two launchers (Python and native) over the same slots, each with its own cache
    holding one specialization for `args`, and the same fake driver behind both."""

    def __init__(self, mod, slots, tensor_maps, args, *, cluster=(1, 1, 1), smem=1024, result=0, dependent=False):
        specs = noop5.specs
        self.specs = specs
        self.slow_calls: list = []
        self.streams: list = []
        kinds = [s.kind for s in slots]

        def stream_of(device):
            self.streams.append(device)
            return 0x5000 + device

        # Python launcher: fastpath.build over a stand-in kernel, cuda-bindings' launch replaced
        self.py_params = ParamBuffer(kinds)             # the layout
        self.py_buffers = fastpath.ThreadBuffers(kinds)  # what the launches pack
        self.py_launcher = Launcher(0xF00, (32, 1, 1), smem, cluster, dependent_launch=dependent)
        self.py_calls: list = []

        def py_launch(cfg, fn, address, extra):
            block = bytes(self.py_buffers.mine[0]._mv)
            attrs = {int(a.id): a.value for a in cfg.attrs[:cfg.numAttrs]}
            cl = attrs[4].clusterDim if 4 in attrs else None
            self.py_calls.append(("launch", (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ),
                                  (cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ), cfg.sharedMemBytes,
                                  int(cfg.hStream), (cl.x, cl.y, cl.z) if cl else None,
                                  6 in attrs and attrs[6].programmaticStreamSerializationAllowed == 1, fn, block,
                                  [o for o in self.py_params.offsets]))
            return (result,)

        self.py_launcher._launch = py_launch
        py_kernel = _StubKernel(specs, self._slow)
        _, self.py = fastpath.build(py_kernel, slots)

        key = fastpath.cache_key(specs, args)
        self.py_fast = py_kernel._fast
        py_kernel._fast[key] = (self.py_params, self.py_buffers, stream_of, 0, self.py_launcher.handle_error,
                                self.py_launcher, tensor_maps)

        # native launcher
        self.params = ParamBuffer(kinds)
        self.launcher = Launcher(0xF00, (32, 1, 1), smem, cluster, dependent_launch=dependent)
        self.driver = FakeDriver(self.params.size, len(kinds), result)
        self.fast: dict = {}
        self.native = mod.Launcher(native.spec_kinds(mod, specs), self.fast, self._slow)
        self.fast[key] = native.entry(slots, specs, self.launcher, self.params, tensor_maps, 0, stream_of,
                                      launch_address=self.driver.address)

    def _slow(self, grid, args):
        self.slow_calls.append(("slow", grid, args))

    def outcome(self, which, grid, args):
        """What one call did: a launch record, a slow-path call, or the exception it raised."""
        calls = self.py_calls if which == "python" else self.driver.calls
        before, slow_before = len(calls), len(self.slow_calls)
        try:
            result = (self.py if which == "python" else self.native)(grid, *args)
        except Exception as e:                       # noqa: BLE001 - compared between the paths
            return ("raised", type(e), str(e).split("\n")[0])
        assert result is None
        done = calls[before:] + self.slow_calls[slow_before:]
        assert len(done) == 1, done
        return done[0]


class _StubKernel:
    name = "noop5"

    def __init__(self, specs, slow):
        self.specs = specs
        self._fast: dict = {}
        self._slow_launch = slow


# ---------------------------------------------------------------------------- tests


def test_builds_once_and_imports(mod, tmp_path):
    assert {"Launcher", "Entry", "KINDS", "SOURCES", "NOOP_LAUNCH"} <= set(dir(mod))
    path = native.build(tmp_path)
    mtime = path.stat().st_mtime_ns
    assert native.build(tmp_path) == path and path.stat().st_mtime_ns == mtime      # cached, not rebuilt
    assert path.name.startswith(native.MODULE_NAME) and path.name.endswith(sysconfig.get_config_var("EXT_SUFFIX"))
    cc = native.compiler()
    assert native.build_key(b"a", cc) != native.build_key(b"b", cc)


def _struct_outcome(pb, values):
    """None where the Python launcher hands the call to the slow path's checks (struct.error, or an OverflowError: a
    float past the 32-bit range), as the native launcher does by returning None."""
    try:
        pb.pack(*values)
    except (struct.error, OverflowError):
        return None
    except Exception as e:                           # noqa: BLE001
        return type(e)
    return bytes(pb._mv)


def _native_outcome(entry, values):
    try:
        return entry.pack_values(tuple(values))
    except Exception as e:                           # noqa: BLE001
        return type(e)


class _Index:
    def __index__(self):
        return 42


@pytest.mark.parametrize("kinds", [["ptr", "i32", "f32", "i64", "u32", "f64", "blob128", "u64"],
                                   ["i32", "blob128", "f32", "ptr"], ["f32"], []])
def test_pack_values_byte_identical_to_param_buffer(mod, kinds):
    pb = ParamBuffer(kinds)
    lr = Launcher(0, (32, 1, 1))
    slots = [Slot(f"v{i}", "", k, ("scalar", 0)) for i, k in enumerate(kinds)]
    entry = native.entry(slots, noop5.specs, lr, pb, (), 0, None, launch_address=0, failed=print)
    assert entry.size == pb.size
    samples = {
        "ptr": [0, 16, 2**64 - 1, 2**64, -1, 1.0, "x", _Index(), True],
        "u64": [0, 2**63, 2**64 - 1, 2**64, -5],
        "i64": [0, -2**63, 2**63 - 1, 2**63, -2**63 - 1, 7.5],
        "i32": [0, -7, 2**31 - 1, -2**31, 2**31, -2**31 - 1, True, 3.0, None, _Index()],
        "u32": [0, 2**32 - 1, 2**32, -1],
        "f32": [0.5, -1e-45, 3.4e38, 3.5e38, 1e300, float("inf"), float("nan"), 7, 10**400, "x",
                torch.tensor(2.5)],
        "f64": [1.5, 1e300, float("-inf"), 10**400, 3],
        "blob128": [bytes(range(128)), b"short", b"x" * 200, bytearray(b"\x11" * 128), "str", None],
    }
    first = [samples[k][0] for k in kinds]
    for i, k in enumerate(kinds):
        for v in samples[k]:
            values = list(first)
            values[i] = v
            want, got = _struct_outcome(pb, values), _native_outcome(entry, values)
            assert want == got, (k, v, want, got)


@pytest.mark.parametrize("which", ["kernel", "tmaps"])
@pytest.mark.parametrize("cluster,dependent", [((1, 1, 1), False), ((2, 1, 1), True), (None, False), (None, True)])
def test_native_and_python_launchers_agree(mod, which, cluster, dependent):
    slots, maps = _slot_sets()[which]
    args = _args()
    st = Setup(mod, slots, maps, args, cluster=cluster, dependent=dependent)
    x, y, n, s, c = args
    misaligned = torch.empty(64 * 16 + 1)[1:].view(64, 16)
    strided = torch.empty(64, 32)[:, :16]
    cases = [
        args,                                   # the cached specialization
        (x.clone(), y.clone(), -3, 2.0, c),     # new pointers and values, same key
        (x, y, 2**31 - 1, -0.0, c),
        (x, y, 2**31, s, c),                    # does not fit the i32: slow (struct.error there)
        (x, y, n, 1e300, c),                    # OverflowError in both
        (x, y, n, 10**400, c),                  # struct.error: slow
        (x.double(), y, n, s, c),               # another dtype: a miss
        (torch.randn(32, 16), y, n, s, c),      # another shape: a miss
        (strided, y, n, s, c),                  # not contiguous: a miss
        (misaligned, y, n, s, c),               # misaligned pointer: slow
        (x, [1, 2], n, s, c),                   # not a tensor: slow
        (x, y, n, s, [1]),                      # unhashable constexpr: slow
        (x, y, n, s, 2),                        # another constexpr: a miss
        (x, y, 5.0, s, c),                      # a float where the int was: a miss (the type is keyed)
        (x, y, n, s),                           # too few arguments
    ]
    for grid in [(4, 1, 1), (2, 3, 4)]:
        for case in cases:
            py, nat = st.outcome("python", grid, case), st.outcome("native", grid, case)
            if case is cases[-1] and py[0] == "raised":      # Python: a TypeError from the generated def
                assert nat[0] == "slow" and issubclass(py[1], TypeError)
                continue
            assert py == nat, (case[2:], py, nat)
    assert st.driver.calls, "nothing was launched"
    key = fastpath.cache_key(st.specs, args)
    assert st.native.key(args) == key and hash(st.native.key(args)) == hash(key)
    assert st.native.key((x, [1], n, s, c)) is None


def test_native_launcher_caches_tensor_maps_by_pointer_and_shape(mod):
    """A tensor map is encoded once per (pointer, shape) of a slot, within the slot's 4 latest; the entry is shared
    by every shape of the specialization's dynamic dims, so one pointer with another shape is another map."""
    encoded: list = []

    def counting(tag):
        encode = _encoder(tag)
        return lambda t: encoded.append((tag, t.data_ptr(), t.shape[0])) or encode(t)

    slots, _ = _slot_sets()["tmaps"]
    args = _args()
    st = Setup(mod, slots, (counting(1), counting(2)), args)
    x, y, n, s, c = args
    key, other_shape = (fastpath.cache_key(st.specs, a) for a in (args, (x[:32], y[:32], n, s, c)))
    st.fast[other_shape], st.py_fast[other_shape] = st.fast[key], st.py_fast[key]     # one entry, two shapes

    def launch(case):
        before = len(encoded)
        assert st.outcome("native", (1, 1, 1), case) == st.outcome("python", (1, 1, 1), case)
        native_encodes = encoded[before:len(encoded) - 2]       # (the Python launcher encodes each call: 2)
        return native_encodes

    assert len(launch(args)) == 2 and launch(args) == []                       # encoded once, then cached
    assert launch((x[:32], y[:32], n, s, c)) == [(1, x.data_ptr(), 32), (2, y.data_ptr(), 32)]
    others = [(torch.randn(64, 16), torch.randn(64, 16), n, s, c) for _ in range(5)]
    assert all(len(launch(case)) == 2 for case in others)                     # 5 new pointers: the oldest goes
    assert [len(launch(case)) for case in others[1:]] == [0, 0, 0, 0]
    assert len(launch(args)) == 2                                              # evicted


def test_config_abi_matches_cuda_bindings(mod):
    pytest.importorskip("cuda.bindings.driver")
    slots, maps = _slot_sets()["kernel"]
    args = _args()
    st = Setup(mod, slots, maps, args, cluster=(2, 1, 1), smem=65536, dependent=True)
    st.native((6, 2, 1), *args)
    raw, attrs = st.driver.raw_configs[-1]
    ref = make_launch_config((6, 2, 1), (32, 1, 1), 65536, 0x5000, (2, 1, 1), dependent_launch=True)
    ref_raw = ctypes.string_at(ref.getPtr(), 56)
    assert raw[:40] == ref_raw[:40] and raw[48:52] == ref_raw[48:52]      # all but the attrs pointer
    for i in range(2):              # the cluster's dimensions, then the dependent launch's int
        ref_attr = ctypes.string_at(ref.attrs[i].getPtr(), 72)
        attr = attrs[72 * i:72 * (i + 1)]
        assert attr[:4] == ref_attr[:4] and attr[8:20] == ref_attr[8:20]


def test_failed_launch_reports_with_the_packed_values(mod):
    slots, maps = _slot_sets()["kernel"]
    args = _args()
    st = Setup(mod, slots, maps, args, result=1)           # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(DriverError, match=r"cuLaunchKernelEx\(grid=\(3, 1, 1\), block=\(32, 1, 1\)"):
        st.native((3, 1, 1), *args)
    # the retry after a missing context (handle_error) launches from the address `failed` gets: the call's own
    # packed block (not a buffer shared between threads)
    seen = []

    def failed(err, grid, stream, address):
        base = ctypes.c_void_p.from_address(address).value
        seen.append((err, grid, stream, ctypes.string_at(base, st.params.size)))

    fast: dict = {}
    launcher = mod.Launcher(native.spec_kinds(mod, st.specs), fast, st._slow)
    fast[fastpath.cache_key(st.specs, args)] = native.entry(
        slots, st.specs, st.launcher, st.params, maps, 0, lambda d: 0x77, launch_address=st.driver.address,
        failed=failed)
    assert launcher((3, 1, 1), *args) is None
    assert seen == [(1, (3, 1, 1), 0x77, st.driver.calls[-1][8])]


def test_concurrent_calls_keep_their_own_values(mod):
    """The block is packed on the C stack and the GIL is released only around the driver call: calls
    from several threads never see each other's values."""
    slots, maps = _slot_sets()["kernel"]
    args = _args()
    st = Setup(mod, slots, maps, args)
    errors = []

    def worker(k):
        try:
            for i in range(200):
                st.native((1, 1, 1), args[0], args[1], k * 1000 + i, float(k), args[4])
        except Exception as e:                       # noqa: BLE001
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    n_offset = st.params.offsets[[s.source for s in slots].index(("scalar", 2))]
    s_offset = st.params.offsets[[s.source for s in slots].index(("scalar", 3))]
    assert len(st.driver.calls) == 800
    for call in st.driver.calls:
        n = struct.unpack_from("<i", call[8], n_offset)[0]
        assert struct.unpack_from("<f", call[8], s_offset)[0] == float(n // 1000)


def test_noop_launch_runs_the_whole_path(mod):
    slots, maps = _slot_sets()["kernel"]
    args = _args()
    params = ParamBuffer([s.kind for s in slots])
    fast: dict = {}
    launcher = mod.Launcher(native.spec_kinds(mod, noop5.specs), fast, lambda grid, a: pytest.fail("slow path"))
    fast[fastpath.cache_key(noop5.specs, args)] = native.entry(
        slots, noop5.specs, Launcher(0, (32, 1, 1)), params, maps, 0, abs, launch_address=mod.NOOP_LAUNCH)
    for _ in range(1000):
        launcher((1, 1, 1), *args)


def test_disabled_by_environment(monkeypatch, caplog):
    """TKPY_NATIVE_LAUNCH=0: no background load starts and no kernel is switched to the native launcher."""
    monkeypatch.setenv(native.ENV, "0")
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_thread", None)
    native._logged.clear()
    calls = []

    class Kernel:
        def switch(self):
            calls.append(self)
    kernel = Kernel()
    with caplog.at_level(logging.DEBUG, logger="tkpy.native"):
        native.on_load(kernel.switch)
    assert "TKPY_NATIVE_LAUNCH=0" in caplog.text and not native.enabled()
    assert native._thread is None and calls == [] and native.wait() is None


def test_no_compiler_falls_back(monkeypatch, caplog, tmp_path):
    real = sysconfig.get_config_var
    monkeypatch.setattr(sysconfig, "get_config_var", lambda name: "/nonexistent/tkpy-cc" if name == "CC" else real(name))
    monkeypatch.setattr(native, "_tried", False)
    monkeypatch.setattr(native, "_module", None)
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path))
    native._logged.clear()
    with caplog.at_level(logging.DEBUG, logger="tkpy.native"):
        assert native.load() is None
        assert native.launcher(noop5, {}) is None
    assert "no C compiler found" in caplog.text
    with pytest.raises(native.NativeBuildError):
        native.build(tmp_path)


def test_latest_hit_shortcut_never_widens_the_key(mod):
    """The launcher checks its latest hit before the dict: alternating specializations, equal but
    distinct constexprs and look-alike unhashable ones must behave exactly as a dict lookup."""
    slots, maps = _slot_sets()["kernel"]
    specs = noop5.specs
    big = 10**6
    a64, a32 = _args(64, c=big), _args(32, c=big)
    params = {k: ParamBuffer([s.kind for s in slots]) for k in (64, 32)}
    driver = FakeDriver(params[64].size, len(slots))
    fast: dict = {}
    slow = []
    launcher = mod.Launcher(native.spec_kinds(mod, specs), fast, lambda grid, a: slow.append(a))
    for rows, args in ((64, a64), (32, a32)):
        fast[fastpath.cache_key(specs, args)] = native.entry(slots, specs, Launcher(rows, (32, 1, 1)), params[rows],
                                                             maps, 0, abs, launch_address=driver.address)
    n_offset = params[64].offsets[[s.source for s in slots].index(("dim", "N"))]
    for i in range(6):
        rows, args = (64, a64) if i % 2 else (32, a32)
        launcher((1, 1, 1), *args[:4], int(str(big)))        # an equal constexpr, another int object
        call = driver.calls[-1]
        assert call[7] == rows and struct.unpack_from("<i", call[8], n_offset)[0] == rows
    launcher((1, 1, 1), *a32[:4], frozenset({1}))            # a miss, through the dict
    launcher((1, 1, 1), *a32[:4], {1})                       # unhashable: slow, like the Python launcher
    assert len(slow) == 2 and len(driver.calls) == 6


def test_launch_prepacked_launches_the_param_buffer_as_is(mod):
    pb = ParamBuffer(["ptr", "i32", "f32"])
    pb.pack(0xABC0, 7, 0.5)
    driver = FakeDriver(pb.size, len(pb))
    entry = native.entry([], [], Launcher(0xF00, (64, 1, 1), 128), pb, (), 0, None, launch_address=driver.address)
    assert entry.launch_prepacked((3, 2, 1), 0x99) is None
    assert driver.calls == [("launch", (3, 2, 1), (64, 1, 1), 128, 0x99, None, False, 0xF00, bytes(pb._mv),
                             list(pb.offsets))]


# ---------------------------------------------------------------------------- the kernel's device's context

_GET_CTX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_void_p))
_PUSH_CTX = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)


class FakeContexts:
    """The calling thread's context stack as the driver keeps it, with cuCtxGetCurrent, cuCtxPushCurrent and
    cuCtxPopCurrent as C function pointers (`api`) and as the Python calls tkpy.runtime.launching makes
    (`current_context`, `pushed_context`); `log` records each call and each launch with the context current then."""

    def __init__(self, current: int):
        self.stack = [current] if current else []
        self.log: list = []
        self._c = (_GET_CTX(self._get), _PUSH_CTX(self._push), _GET_CTX(self._pop))
        self.api = tuple(ctypes.cast(f, ctypes.c_void_p).value for f in self._c)
        self.launch = _LAUNCH(lambda cfg, fn, params, extra: self.log.append(("launch", self.current())) or 0)
        self.launch_address = ctypes.cast(self.launch, ctypes.c_void_p).value

    def current(self) -> int:
        return self.stack[-1] if self.stack else 0

    def _get(self, out):
        self.log.append("get")
        out[0] = self.current() or None
        return 0

    def _push(self, ctx):
        self.log.append(("push", ctx))
        self.stack.append(ctx)
        return 0

    def _pop(self, out):
        self.log.append("pop")
        out[0] = self.stack.pop()
        return 0

    def current_context(self) -> int:                     # launching.current_context
        self.log.append("get")
        return self.current()

    def pushed_context(self, device: int):                 # launching.pushed_context, for device 1's context 0xB
        import contextlib

        @contextlib.contextmanager
        def pushed():
            self._push(0xB)
            try:
                yield
            finally:
                self.log.append("pop")
                self.stack.pop()
        return pushed()


DEVICE1 = 0xB       # the primary context of the kernel's device (1) in these tests
SWITCHED = ["get", ("push", DEVICE1), ("launch", DEVICE1), "pop"]


@pytest.mark.parametrize("current, expected", [(DEVICE1, ["get", ("launch", DEVICE1)]), (0xA, SWITCHED),
                                               (0, SWITCHED)], ids=["its-own", "another-device", "none"])
def test_native_launches_under_the_kernels_context(mod, current, expected):
    """An entry launches under its device's primary context: as it is where that is current, else pushed around the
    launch and popped (the thread's current device is another, or a fresh thread has none), the thread left as it
    was."""
    slots, maps = _slot_sets()["kernel"]
    args = _args()
    contexts = FakeContexts(current)
    lr = Launcher(0xF00, (32, 1, 1), kernel=_Device1(), context=DEVICE1)
    fast: dict = {}
    launcher = mod.Launcher(native.spec_kinds(mod, noop5.specs), fast, lambda grid, a: pytest.fail("slow path"))
    fast[fastpath.cache_key(noop5.specs, args)] = native.entry(
        slots, noop5.specs, lr, ParamBuffer([s.kind for s in slots]), maps, 1, lambda d: 0,
        launch_address=contexts.launch_address, context_api=contexts.api)
    launcher((1, 1, 1), *args)
    assert contexts.log == expected and contexts.current() == current


@pytest.mark.parametrize("how", ["call", "prepared"])
@pytest.mark.parametrize("current, expected", [(DEVICE1, ["get", ("launch", DEVICE1)]), (0xA, SWITCHED),
                                               (0, SWITCHED)], ids=["its-own", "another-device", "none"])
def test_python_launches_under_the_kernels_context(monkeypatch, how, current, expected):
    """The same for launching.Launcher: a call and a prepared launch (the generated Python launcher's)."""
    from tkpy.runtime import launching

    contexts = FakeContexts(current)
    monkeypatch.setattr(launching, "current_context", contexts.current_context)
    monkeypatch.setattr(launching, "pushed_context", contexts.pushed_context)
    lr = Launcher(0xF00, (32, 1, 1), kernel=_Device1(), context=DEVICE1)
    lr._launch = lambda cfg, fn, address, extra: contexts.log.append(("launch", contexts.current())) or (0,)
    pb = ParamBuffer(["u64"])
    if how == "call":
        lr((1, 1, 1), 0, pb)
    else:
        assert lr.prepare((1, 1, 1), 0, pb)() == (0,)
    assert contexts.log == expected and contexts.current() == current


def test_a_context_needs_its_device_and_the_drivers_calls(mod):
    with pytest.raises(ValueError, match="needs its LoadedKernel"):
        Launcher(0xF00, (32, 1, 1), context=DEVICE1)
    slots, maps = _slot_sets()["kernel"]
    with pytest.raises(ValueError, match="needs context_api"):
        mod.Entry(launch=mod.NOOP_LAUNCH, function=0xF00, block=(32, 1, 1), smem=0, cluster=None,
                  dependent_launch=False, layout=(), size=8, spec_kinds=native.spec_kinds(mod, noop5.specs),
                  tensor_maps=(), device=1, stream_of=abs, failed=print, params=None, params_address=0,
                  context=DEVICE1)


class _Device1:
    """What a Launcher reads of its LoadedKernel: the device (1) whose context it pushes."""
    device_index, kernel_name = 1, "noop5"
