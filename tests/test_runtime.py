"""CPU-only tests of tkpy.runtime: NVRTC, cache, resources, SASS, ParamBuffer."""

from __future__ import annotations

import ctypes
import struct
import sys
import time
import warnings

import pytest

from tkpy.runtime import (
    CompileError,
    ParamBuffer,
    Resources,
    SpillWarning,
    cache,
    clear_memo,
    compile_cuda,
    nvrtc_version,
    parse_ptxas_log,
    sass,
    warn_on_spills,
)
from tkpy.runtime.disasm import find_nvdisasm

ADD1 = 'extern "C" __global__ void add1(float* x, int n){int i=blockIdx.x*blockDim.x+threadIdx.x; if(i<n) x[i]+=1.f;}\n'

WGMMA_FENCE = r"""
extern "C" __global__ void fence_kernel(float* x) {
  asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");  // attn.py:7  fence
  x[threadIdx.x] = 1.f;  // attn.py:8  store
}
"""


@pytest.fixture(autouse=True)
def _isolated_cache(tmp_path, monkeypatch):
    """Every test gets its own empty disk cache and in-process memo."""
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("TKPY_CACHE", raising=False)
    clear_memo()
    yield
    clear_memo()


def _unique(src: str) -> str:
    # a distinct comment makes a distinct cache key without changing the code
    return src + f"// nonce {time.perf_counter_ns()}\n"


# --------------------------------------------------------------------------- nvrtc


def test_nvrtc_version():
    major, minor = nvrtc_version()
    assert major >= 12 and minor >= 0


def test_compile_add1_sm90a():
    m = compile_cuda(ADD1, "add1")
    assert m.cubin[:4] == b"\x7fELF"
    assert ".target sm_90a" in m.ptx and ".entry add1(" in m.ptx
    assert not m.from_cache
    assert m.compile_seconds > 0
    assert m.resources.found and m.resources.registers > 0
    assert m.resources.spill_stores == 0 and not m.resources.spills
    assert "add1" in m.log  # ptxas -v report present
    assert len(m.key) == 64
    assert "add1" in repr(m) and "\\x" not in repr(m)


def test_compile_rejects_virtual_arch():
    with pytest.raises(ValueError):
        compile_cuda(ADD1, "add1", arch="compute_90a")


def test_missing_extern_c_kernel_is_reported():
    with pytest.raises(CompileError, match='extern "C"'):
        compile_cuda("__global__ void mangled(int* x){ x[0]=1; }\n", "mangled")


def test_compile_error_points_at_python_line():
    src = (
        'extern "C" __global__ void bad(float* x) {\n'
        "  float t0 = x[0];  // softmax.py:10  load\n"
        "  tk::row_max(m0, t0);  // softmax.py:12  row_max\n"
        "  x[0] = t0;  // softmax.py:13  store\n"
        "}\n"
    )
    with pytest.raises(CompileError) as ei:
        compile_cuda(src, "bad")
    msg = str(ei.value)
    assert "bad.cu:3" in msg
    assert "tk::row_max(m0, t0);" in msg  # the offending generated line
    assert "from softmax.py:12" in msg and "(row_max)" in msg
    assert "--- NVRTC log ---" in msg
    assert ei.value.log and ei.value.source == src


def test_compile_error_uses_nearest_marker_above():
    src = (
        'extern "C" __global__ void bad2(float* x) {\n'
        "  // mlp.py:40  gelu\n"
        "  float y = x[0];\n"
        "  y = undefined_fn(y);\n"
        "  x[0] = y;\n"
        "}\n"
    )
    with pytest.raises(CompileError) as ei:
        compile_cuda(src, "bad2")
    msg = str(ei.value)
    assert "bad2.cu:4" in msg and "undefined_fn" in msg
    assert "from mlp.py:40" in msg


def test_wgmma_inline_ptx_compiles_for_sm90a():
    m = compile_cuda(WGMMA_FENCE, "fence_kernel")
    assert "wgmma.fence.sync.aligned" in m.ptx
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    text = sass(m.cubin)
    assert "WARPGROUP" in text  # wgmma.fence -> WARPGROUP.ARRIVE


# --------------------------------------------------------------------------- cache


def test_disk_cache_roundtrip(tmp_path, monkeypatch):
    d = tmp_path / "mycache"
    monkeypatch.setenv("TKPY_CACHE_DIR", str(d))
    src = _unique(ADD1)
    m1 = compile_cuda(src, "add1")
    assert not m1.from_cache
    paths = cache.entry_paths(m1.key)
    assert all(p.is_file() and d in p.parents for p in paths.values())

    clear_memo()  # force the disk path
    t0 = time.perf_counter()
    m2 = compile_cuda(src, "add1")
    dt = time.perf_counter() - t0
    assert m2.from_cache
    assert dt < 0.05  # target is <= 5 ms; generous for loaded CI machines
    assert (m2.cubin, m2.ptx, m2.log, m2.key) == (m1.cubin, m1.ptx, m1.log, m1.key)
    assert m2.resources == m1.resources
    assert m2.compile_seconds == pytest.approx(m1.compile_seconds)

    # in-process memo hit: also from_cache and fast
    t0 = time.perf_counter()
    m3 = compile_cuda(src, "add1")
    assert m3.from_cache and time.perf_counter() - t0 < 0.005


def test_cache_key_depends_on_inputs():
    v = nvrtc_version()
    k = cache.cache_key(ADD1, "add1", ("-arch=sm_90a",), v, "sm_90a")
    assert k == cache.cache_key(ADD1, "add1", ("-arch=sm_90a",), v, "sm_90a")
    assert k != cache.cache_key(ADD1 + " ", "add1", ("-arch=sm_90a",), v, "sm_90a")
    assert k != cache.cache_key(ADD1, "add1", ("-arch=sm_90a", "-G"), v, "sm_90a")
    assert k != cache.cache_key(ADD1, "add1", ("-arch=sm_90a",), (v[0], v[1] + 1), "sm_90a")
    assert k != cache.cache_key(ADD1, "add1", ("-arch=sm_90a",), v, "sm_100a")
    assert k != cache.cache_key(ADD1, "add2", ("-arch=sm_90a",), v, "sm_90a")


def test_options_change_the_key():
    a = compile_cuda(ADD1, "add1")
    b = compile_cuda(ADD1, "add1", options=("-DFOO=1",))
    assert a.key != b.key


def test_cache_disabled(tmp_path, monkeypatch):
    monkeypatch.setenv("TKPY_CACHE", "0")
    src = _unique(ADD1)
    m1 = compile_cuda(src, "add1")
    m2 = compile_cuda(src, "add1")
    assert not m1.from_cache and not m2.from_cache
    assert not cache.entry_paths(m1.key)["meta"].exists()


def test_corrupt_cache_entry_is_a_miss(tmp_path):
    src = _unique(ADD1)
    m1 = compile_cuda(src, "add1")
    cache.entry_paths(m1.key)["cubin"].write_bytes(b"garbage")
    clear_memo()
    m2 = compile_cuda(src, "add1")
    # compiled again (the same code; the bytes may differ: a recompile that NVRTC served from the CUDA compute
    # cache is redone with a one-off global, see nvrtc.compile_cuda)
    assert not m2.from_cache and m2.cubin[:4] == b"\x7fELF" and m2.resources == m1.resources
    clear_memo()
    m3 = compile_cuda(src, "add1")
    assert m3.from_cache and m3.cubin == m2.cubin  # rewritten


def test_unwritable_cache_dir_does_not_fail(tmp_path, monkeypatch):
    f = tmp_path / "a_file"
    f.write_text("x")
    monkeypatch.setenv("TKPY_CACHE_DIR", str(f / "sub"))  # parent is a file
    m = compile_cuda(_unique(ADD1), "add1")
    assert m.cubin[:4] == b"\x7fELF"


# --------------------------------------------------------------------------- resources

PTXAS_LOG = """ptxas info    : 0 bytes gmem
ptxas info    : Compiling entry function 'spill' for 'sm_90a'
ptxas info    : Function properties for spill
ptxas         .     2336 bytes stack frame, 3156 bytes spill stores, 3492 bytes spill loads
ptxas info    : Used 32 registers, used 0 barriers, 2336 bytes cumulative stack size
ptxas info    : Compile time = 365.117 ms
ptxas info    : Compiling entry function 'sm' for 'sm_90a'
ptxas info    : Function properties for sm
ptxas         .     0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads
ptxas info    : Used 10 registers, used 1 barriers, 1024 bytes smem, 360 bytes cmem[0]
ptxas info    : Compile time = 1.430 ms
"""


def test_parse_ptxas_log_per_kernel():
    s = parse_ptxas_log(PTXAS_LOG, "spill")
    assert (s.registers, s.spill_stores, s.spill_loads, s.stack_frame, s.shared_static, s.barriers) == (
        32, 3156, 3492, 2336, 0, 0,
    )
    assert s.spills and "SPILLS" in s.summary()
    m = parse_ptxas_log(PTXAS_LOG, "sm")
    assert (m.registers, m.shared_static, m.barriers, m.spills) == (10, 1024, 1, False)
    assert "no spills" in m.summary() and "\n" not in m.summary()
    missing = parse_ptxas_log(PTXAS_LOG, "nope")
    assert not missing.found and missing.registers == 0


def test_static_smem_and_barriers_from_real_compile():
    src = (
        'extern "C" __global__ void smk(float* x){ __shared__ float s[256]; s[threadIdx.x]=x[threadIdx.x];'
        " __syncthreads(); x[threadIdx.x]=s[255-threadIdx.x]; }\n"
    )
    r = compile_cuda(src, "smk").resources
    assert r.shared_static == 1024 and r.barriers >= 1


def test_warn_on_spills():
    with pytest.warns(SpillWarning, match="3156 bytes spill stores"):
        assert warn_on_spills(parse_ptxas_log(PTXAS_LOG, "spill"), "spill")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_on_spills(Resources(registers=10, found=True), "ok")
    assert issubclass(SpillWarning, UserWarning)


# --------------------------------------------------------------------------- sass


def test_sass_add1():
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    m = compile_cuda(ADD1, "add1")
    text = sass(m.cubin)
    assert "add1" in text and "FADD" in text and "EXIT" in text


def test_sass_annotated_with_python_lines():
    if find_nvdisasm() is None:
        pytest.skip("nvdisasm not installed")
    m = compile_cuda(WGMMA_FENCE, "fence_kernel")
    text = sass(m.cubin, source=m.source)
    assert "<- attn.py:" in text


# --------------------------------------------------------------------------- ParamBuffer


def _read_slot(pb: ParamBuffer, i: int, ctype):
    ptrs = (ctypes.c_void_p * len(pb)).from_address(pb.address)
    return ctype.from_address(ptrs[i]).value


def test_param_buffer_pack_and_read_back():
    pb = ParamBuffer(["ptr", "i32", "f32", "i64", "ptr"])
    pb.pack(0xDEADBEEF000, -7, 1.5, 1 << 40, 0x1234)
    assert _read_slot(pb, 0, ctypes.c_uint64) == 0xDEADBEEF000
    assert _read_slot(pb, 1, ctypes.c_int32) == -7
    assert _read_slot(pb, 2, ctypes.c_float) == 1.5
    assert _read_slot(pb, 3, ctypes.c_int64) == 1 << 40
    assert _read_slot(pb, 4, ctypes.c_uint64) == 0x1234
    # natural alignment of every slot
    for i, k in enumerate(pb.kinds):
        assert pb.slot_address(i) % (8 if k in ("ptr", "i64") else 4) == 0
    # reuse: the addresses must not move, values update in place
    slot_addrs = [pb.slot_address(i) for i in range(len(pb))]
    pb.pack(1, 2, 3.0, 4, 5)
    assert [pb.slot_address(i) for i in range(len(pb))] == slot_addrs
    assert pb.values() == (1, 2, 3.0, 4, 5)
    assert _read_slot(pb, 4, ctypes.c_uint64) == 5


def test_param_buffer_setters():
    pb = ParamBuffer(["ptr", "i32", "f32", "u32", "f64"])
    pb.set_ptr(0, 0xABC)
    pb.set_i32(1, -3)
    pb.set_f32(2, 0.25)
    pb.set_u32(3, 0xFFFFFFFF)
    pb.set_f64(4, 2.5)
    assert pb.values() == (0xABC, -3, 0.25, 0xFFFFFFFF, 2.5)
    assert _read_slot(pb, 3, ctypes.c_uint32) == 0xFFFFFFFF
    assert _read_slot(pb, 4, ctypes.c_double) == 2.5
    with pytest.raises(struct.error):
        pb.set_i32(1, 1 << 40)


def test_param_buffer_blob128_alignment_and_copy():
    pb = ParamBuffer(["ptr", "blob128", "i32"])
    assert pb.slot_address(1) % 64 == 0 and pb.offsets[1] == 64
    blob = bytes(range(128))
    pb.pack(7, blob, 9)
    ptrs = (ctypes.c_void_p * 3).from_address(pb.address)
    assert ctypes.string_at(ptrs[1], 128) == blob
    assert _read_slot(pb, 2, ctypes.c_int32) == 9
    pb.set_blob(1, bytearray(b"\x11" * 128))
    assert ctypes.string_at(pb.slot_address(1), 128) == b"\x11" * 128

    class FakeTensorMap:  # like cuda-bindings CUtensorMap: exposes getPtr()
        def __init__(self):
            self.buf = (ctypes.c_ubyte * 128)(*([0x5A] * 128))

        def getPtr(self):
            return ctypes.addressof(self.buf)

    pb.set_blob(1, FakeTensorMap())
    assert ctypes.string_at(pb.slot_address(1), 128) == b"\x5a" * 128
    with pytest.raises(ValueError):
        pb.set_blob(1, b"short")
    with pytest.raises(TypeError):
        pb.set_blob(0, blob)


def test_param_buffer_rejects_unknown_kind():
    with pytest.raises(ValueError, match="unknown parameter kind"):
        ParamBuffer(["ptr", "float4"])


def test_param_buffer_empty():
    pb = ParamBuffer([])
    pb.pack()
    assert len(pb) == 0 and pb.address != 0


def test_param_buffer_pack_is_cheap():
    pb = ParamBuffer(["ptr", "ptr", "i32", "i32"])
    pack = pb.pack
    n = 20000
    t0 = time.perf_counter_ns()
    for _ in range(n):
        pack(0x1000, 0x2000, 5, 6)
    per = (time.perf_counter_ns() - t0) / n
    assert per < 2000, f"{per:.0f} ns per pack"  # ~0.2 us expected


# --------------------------------------------------------------------------- driver (host parts)


def test_launch_config_is_host_only():
    pytest.importorskip("cuda.bindings.driver")
    from tkpy.runtime import make_launch_config

    cfg = make_launch_config((4, 2, 1), (128, 1, 1), 65536, 0x1234, cluster=(2, 1, 1))
    assert (cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ) == (4, 2, 1)
    assert (cfg.blockDimX, cfg.sharedMemBytes, int(cfg.hStream)) == (128, 65536, 0x1234)
    assert cfg.numAttrs == 1
    cd = cfg.attrs[0].value.clusterDim
    assert (cd.x, cd.y, cd.z) == (2, 1, 1)
    assert make_launch_config((4, 1, 1), (32, 1, 1), 0, 0).numAttrs == 0
    dependent = make_launch_config((4, 1, 1), (32, 1, 1), 0, 0, cluster=(2, 1, 1), dependent_launch=True)
    assert dependent.numAttrs == 2 and dependent.attrs[1].value.programmaticStreamSerializationAllowed == 1
    assert int(dependent.attrs[1].id) == 6          # CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
    with pytest.raises(ValueError, match="divisible"):
        make_launch_config((3, 1, 1), (32, 1, 1), 0, 0, cluster=(2, 1, 1))


def test_launcher_caches_configs_and_reports_errors():
    pytest.importorskip("cuda.bindings.driver")
    from tkpy.runtime import DriverError, Launcher

    calls = []

    def fake_launch(cfg, fn, address, extra):
        calls.append((cfg, fn, address, extra))
        return (fail[0],)

    fail = [0]
    lr = Launcher("fn", (128, 1, 1), 1024, cluster=(2, 1, 1))
    lr._launch = fake_launch
    pb = ParamBuffer(["ptr", "i32"])
    lr((4, 1, 1), 0x10, pb)
    lr((4, 1, 1), 0x10, pb)
    lr((8, 1, 1), 0x10, pb)
    lr.launch_address((8, 1, 1), 0x20, 1234)
    assert len(lr._configs) == 3
    assert calls[0][0] is calls[1][0] and calls[0][0] is not calls[2][0]
    assert calls[0][1:] == ("fn", pb.address, 0) and calls[3][2] == 1234
    cfg = calls[2][0]
    assert (cfg.gridDimX, cfg.blockDimX, cfg.sharedMemBytes, int(cfg.hStream), cfg.numAttrs) == (8, 128, 1024, 0x10, 1)
    go = lr.prepare((4, 1, 1), 0x10, pb)
    assert go() == (0,) and calls[-1][0] is calls[0][0]
    fail[0] = 1  # CUDA_ERROR_INVALID_VALUE
    with pytest.raises(DriverError, match=r"cuLaunchKernelEx\(grid=\(4, 1, 1\), block=\(128, 1, 1\)") as ei:
        lr((4, 1, 1), 0x10, pb)
    assert ei.value.code == 1


def test_import_needs_no_gpu():
    """Importing tkpy.runtime imports no torch and, where there is no NVIDIA driver, leaves tkpy's driver handle
    untouched (where there is one it comes with tkpy: driver.NVIDIA_CONTROL_DEVICE), once import's threads (the NVRTC
    preload, the tree digest) are done: cuda.bindings.nvrtc, which the preload imports, brings the driver's bindings
    module along, but nothing calls into the driver."""
    import subprocess

    code = (
        "import os, sys, threading, tkpy.runtime; from tkpy.runtime import driver; "
        "[t.join() for t in threading.enumerate() if t.name in ('tkpy-nvrtc-load', 'tkpy-tree-digest')]; "
        "assert driver._drv is None or os.path.exists(driver.NVIDIA_CONTROL_DEVICE); "
        "assert 'torch' not in sys.modules; "
        "print('ok')"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=_repo_root())
    assert r.returncode == 0 and "ok" in r.stdout, r.stderr


def _repo_root() -> str:
    from pathlib import Path

    return str(Path(__file__).resolve().parents[1])


def test_gpu_available_is_bool():
    from tkpy.runtime import gpu_available

    assert isinstance(gpu_available(), bool)


SPILLER = """
extern "C" __global__ void __launch_bounds__(1024, 2) spiller(float* x, float* y) {  // 32 registers: too few
  float a[64];
  float v = x[threadIdx.x];
  #pragma unroll
  for (int i = 0; i < 64; i++) { v = v * 1.0001f + float(i); a[i] = v; y[threadIdx.x + 256 * i] = v; }
  float r = 0.f;
  #pragma unroll
  for (int i = 0; i < 64; i++) r += a[63 - i] * a[(i * 7 + 5) % 64];
  x[threadIdx.x] = r;
}
"""


def _counting_nvrtc(monkeypatch) -> list:
    """The options of every NVRTC run from here on (nvrtcCompileProgram, as cuda.bindings is called)."""
    from cuda.bindings import nvrtc as bindings

    runs = []
    real = bindings.nvrtcCompileProgram

    def counted(prog, n, opts):
        runs.append([o.decode() for o in opts])
        return real(prog, n, opts)
    monkeypatch.setattr(bindings, "nvrtcCompileProgram", counted)
    return runs


def test_a_cold_compile_is_one_nvrtc_run_with_its_ptxas_report(tmp_path, monkeypatch):
    """One NVRTC run per kernel gives the cubin and ptxas' report, also for a source NVRTC has compiled before (its
    own cache, which returns no report, is off: NVRTC 13.0 on the H200 kept cubins in ~/.nv/ComputeCache): here
    compiled into two empty disk caches, one run each, the report in both."""
    runs = _counting_nvrtc(monkeypatch)
    src = _unique(SPILLER)
    first = compile_cuda(src, "spiller")
    clear_memo()
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path / "another cache"))
    again = compile_cuda(src, "spiller")
    assert len(runs) == 2 and all("--no-cache" in opts and "-Xptxas=-v" in opts for opts in runs)
    assert not first.from_cache and not again.from_cache
    for m in (first, again):
        r = m.resources
        assert r.found and 0 < r.registers <= 32, r
        assert r.spill_stores > 0 and r.spill_loads > 0 and r.stack_frame > 0 and r.spills, r
    assert first.resources == again.resources


def test_resources_come_from_the_disk_cache_without_nvrtc(monkeypatch):
    """k.resources(...) of a kernel in the disk cache: the report kept with its cubin, no NVRTC run."""
    src = _unique(SPILLER)
    cold = compile_cuda(src, "spiller")
    clear_memo()
    runs = _counting_nvrtc(monkeypatch)
    warm = compile_cuda(src, "spiller")
    assert warm.from_cache and runs == [] and warm.resources == cold.resources and warm.resources.spills
