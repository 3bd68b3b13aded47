"""A kernel's first call with a warm disk cache (issue 35): the cache keys a kernel by its code's identity, so a hit
in a new process makes no source (no prelude helpers chosen) and, with the NVRTC version recorded by an earlier load,
loads no NVRTC; what keys it (the prelude too) and the record's checks. CPU only (the compile stage)."""
from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tkpy as tk
from tkpy import f32
from tkpy.codegen import emit, generate, prelude
from tkpy.runtime import cache, clear_memo, compile_cuda, native, nvrtc, nvrtc_record

from gpu_util import on_gpu
from test_runtime import _isolated_cache  # noqa: F401 - autouse: each test its own empty disk cache and memo

ROOT = Path(__file__).resolve().parents[1]


def _kernel(scale: float):
    @tk.kernel(warps=1, name="first_call_scale")
    def k(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.mul(t, t, scale)
        tk.store(y, t, (tk.block_idx.x, 0))
    return k


def _args():
    x = torch.empty(64, 16)
    return x, x


WARM = """
import json, sys
import torch
sys.path.insert(0, {tests!r})
from test_first_call import _kernel, _args
from tkpy.codegen import emit, generate, prelude
from tkpy.codegen import emit
def libnvrtc_mapped():
    return any("libnvrtc" in line for line in open("/proc/self/maps"))
libnvrtc_before = libnvrtc_mapped()     # (a CUDA build of torch maps it itself)
chosen = []
real = emit.prelude_for
emit.prelude_for = lambda *a, **k: chosen.append(1) or real(*a, **k)
compiled = _kernel({scale}).compile(*_args())
after_compile = dict(chosen=len(chosen), nvrtc_module="cuda.bindings.nvrtc" in sys.modules,
                     libnvrtc=libnvrtc_mapped(), libnvrtc_before=libnvrtc_before)
source = compiled.lowered.source
print(json.dumps(dict(after_compile, from_cache=compiled.module.from_cache, key=compiled.module.key, source=source,
                      chosen_for_source=len(chosen))))
"""


def _in_a_new_process(scale: float, cache_dir: Path) -> dict:
    code = WARM.format(tests=str(ROOT / "tests"), scale=scale)
    # TKPY_INTERPRET=1: `import tkpy` does not load NVRTC ahead on a thread (nvrtc.preload), so what the compile
    # stage loads itself shows (k.compile compiles whatever TKPY_INTERPRET says)
    env = {**os.environ, "TKPY_CACHE_DIR": str(cache_dir), "PYTHONPATH": str(ROOT), "TKPY_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_warm_first_call_makes_no_source_and_loads_no_nvrtc(tmp_path):
    """Process 1 compiles (NVRTC loaded, its version recorded); process 2 finds the cubin by the code's identity:
    no prelude helpers chosen, cuda.bindings' NVRTC module not imported and libnvrtc not mapped (unless torch mapped
    it before: a CUDA build of torch does); the source is still
    there when asked for, the same text."""
    cold = _in_a_new_process(2.0, tmp_path / "cache")
    warm = _in_a_new_process(2.0, tmp_path / "cache")
    assert not cold["from_cache"] and cold["chosen"] == 1 and cold["libnvrtc"]
    assert warm["from_cache"] and warm["key"] == cold["key"]
    assert warm["chosen"] == 0 and not warm["nvrtc_module"], warm
    assert not warm["libnvrtc"] or warm["libnvrtc_before"], warm     # not mapped by tkpy (torch's CUDA build may)
    assert warm["source"] == cold["source"] and warm["chosen_for_source"] == 1


def test_the_identity_is_what_determines_the_source():
    """Other code, other wgmma variants, the 5-d copies or another prelude: another identity (and key); the same
    kernel traced twice: the same. The source made from a KernelCode is generate()'s."""
    lowered = _kernel(2.0).trace(*_args()).lower()
    code = lowered.code
    assert _kernel(2.0).trace(*_args()).lower().code.identity == code.identity
    assert _kernel(3.0).trace(*_args()).lower().code.identity != code.identity
    variants = type(code)(code.code, frozenset({(64, "bf16", False)}), False)
    tma5 = type(code)(code.code, code.wgmma_variants, True)
    assert len({code.identity, variants.identity, tma5.identity}) == 3
    assert variants.source("full") != code.source("full")           # the variants' wgmma wrappers are in its pool
    assert lowered.source == code.source() == generate(lowered.traced.ir, lowered.slots)


def test_a_changed_prelude_is_a_miss(monkeypatch):
    """The prelude's fingerprint (its helpers' C++ and its package's code) is in the identity: a change recompiles.
    (A changed prelude is a changed file of tkpy's, which keys the specialization records too.)"""
    from tkpy.frontend import spec_records

    first = _kernel(2.0).compile(*_args()).module
    clear_memo()
    monkeypatch.setattr(emit, "prelude_fingerprint", lambda: "another prelude")
    monkeypatch.setattr(spec_records, "tree_digest", lambda: "another tkpy")
    again = _kernel(2.0).compile(*_args()).module
    assert not first.from_cache and not again.from_cache and again.key != first.key


def test_the_prelude_fingerprint_covers_its_package(monkeypatch, tmp_path):
    """sha256 of every helper's C++ and of the package's files in name order: the same from a copy of the files; a
    file changed or added changes it."""
    text = prelude.fingerprint()
    assert len(text) == 64 and prelude.fingerprint() is text        # once per process
    files = sorted(Path(prelude.__file__).parent.glob("*.py"))
    assert {"cpp.py", "helpers.py", "hopper.py", "__init__.py"} <= {f.name for f in files}
    for f in files:
        shutil.copy(f, tmp_path / f.name)
    monkeypatch.setattr(prelude, "__file__", str(tmp_path / "__init__.py"))
    again = prelude.fingerprint.__wrapped__         # (uncached)
    assert again() == text
    (tmp_path / "hopper.py").write_bytes((tmp_path / "hopper.py").read_bytes() + b"\n")
    changed = again()
    (tmp_path / "more.py").write_text("")
    assert len({text, changed, again()}) == 3


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet="ab_1 .:(é\n", max_size=40), st.text(alphabet="ab_1é", min_size=1, max_size=3))
def test_the_emitters_word_search_is_res(text, word):
    r"""emit.has_word (str.find: the lowering's search for the tensors and builtins a kernel's code names) says what
    re.search(rf"\b{word}\b", text) says."""
    assert emit.has_word(text, word) == (re.search(rf"\b{word}\b", text) is not None)


IMPORT = """
import json, os
real = os.path.exists
os.path.exists = lambda path: {present} if path == "/dev/nvidiactl" else real(path)
import tkpy.runtime.driver as driver
print(json.dumps(driver._drv is not None))
"""


@pytest.mark.parametrize("present", [True, False], ids=["nvidia-driver", "cpu-only"])
def test_the_driver_bindings_are_imported_with_tkpy_where_the_machine_has_an_nvidia_driver(present):
    """Where /dev/nvidiactl exists, importing tkpy imports cuda.bindings' driver module (not the first launch);
    elsewhere it is left to the first use."""
    pytest.importorskip("cuda.bindings.driver")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", IMPORT.format(present=present)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) is present


WARM_GPU = """
import json, sys, threading, torch
import tkpy.kernels as kernels
from tkpy.runtime import native
gen = torch.Generator(device="cuda").manual_seed({seed})
a, b = (torch.randn(512, 512, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(2))
torch.cuda.synchronize()
from tkpy.runtime import nvrtc
if nvrtc._preloading is not None:     # (import's NVRTC load on a thread: its imports are not the call's)
    nvrtc._preloading.join()
before = set(sys.modules)
c = kernels.matmul(a, b)
torch.cuda.synchronize()
imported = sorted(set(sys.modules) - before)
native.wait(120)
err = ((c.double() - a.double() @ b.double()).norm() / (a.double() @ b.double()).norm()).item()
print(json.dumps(dict(imported=imported, err=err)))
"""


@on_gpu
def test_gpu_a_warm_first_call_imports_nothing_of_tkpy_or_the_driver(tmp_path):
    """A new process's first matmul() on a warm disk cache imports no module of tkpy, nor cuda-bindings' driver or
    NVRTC module (each would cost its import in the call, its compile too where Python writes no bytecode:
    tensor_map, native and the driver bindings are imported with tkpy), and computes the product (float64
    reference, fresh inputs in each process)."""
    env = {**os.environ, "TKPY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    runs = []
    for seed in (1, 2):             # cold (fills the cache), then warm
        done = subprocess.run([sys.executable, "-c", WARM_GPU.format(seed=seed)], cwd=ROOT, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert all(r["err"] < 1e-2 for r in runs), runs
    bindings = ("cuda.bindings.driver", "cuda.bindings.nvrtc")
    # The native launcher's extension is imported by the load thread that the first launch begins (native.on_load),
    # which may run before the snapshot: it is not the call's import (runs 308 and 331 under 16 pytest workers).
    late = [m for m in runs[1]["imported"]
            if (m.startswith("tkpy") and m != native.MODULE_NAME) or m in bindings]
    assert late == [], runs[1]["imported"]


WARM_ATTENTION_GPU = """
import json, sys, torch
sys.path.insert(0, {tests!r})
import tkpy.kernels as kernels
from tkpy.frontend import kernel as kernel_module
from gpu_util import attention_reference, rel_err
traced = []
trace = kernel_module.trace_kernel
kernel_module.trace_kernel = lambda *a, **k: traced.append(a[1]) or trace(*a, **k)
gen = torch.Generator(device="cuda").manual_seed({seed})
q, k, v = (torch.randn(1, 4, 4096, 128, device="cuda", generator=gen).to(torch.bfloat16) for _ in range(3))
o = kernels.attention(q, k, v)
torch.cuda.synchronize()
print(json.dumps(dict(traced=traced, err=rel_err(o, attention_reference(q, k, v)[0]))))
"""


@on_gpu
def test_gpu_a_warm_first_attention_call_traces_nothing(tmp_path):
    """attention()'s D128 kernels fall back from options that spill under this NVRTC to the next (first_clean): a
    new process on the warm cache takes the kernel the cold one chose (tk.tune.first_clean's verdict) from its
    specialization record, tracing nothing, and both compute attention (float64 reference, fresh inputs in each
    process)."""
    env = {**os.environ, "TKPY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT)}
    runs = []
    for seed in (1, 2):             # cold (fills the cache), then warm
        code = WARM_ATTENTION_GPU.format(tests=str(ROOT / "tests"), seed=seed)
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr
        runs.append(json.loads(done.stdout.strip().splitlines()[-1]))
    assert all(r["err"] < 1e-2 for r in runs), runs
    cold, warm = (r["traced"] for r in runs)
    assert any(name.startswith("attention_fwd") for name in cold) and warm == [], (cold, warm)


# --------------------------------------------------------------------------- the NVRTC version's record


@pytest.fixture
def versions(monkeypatch):
    """nvrtc's versions as in a new process (nothing loaded or read yet) and no record; the real one, loaded here."""
    real = nvrtc.loaded_version()
    shutil.rmtree(cache.root() / nvrtc_record.KIND, ignore_errors=True)    # (the first load of this process's)
    monkeypatch.setattr(nvrtc, "_versions", {})
    return real


def test_loading_nvrtc_records_its_version_and_a_new_process_reads_it(versions):
    assert nvrtc_record.recorded() is None
    assert nvrtc.loaded_version() == versions              # loads (here: asks the loaded library) and records
    assert nvrtc_record.recorded() == versions
    nvrtc._versions.clear()                                 # a new process
    assert nvrtc.nvrtc_version() == versions and "loaded" not in nvrtc._versions


@pytest.mark.parametrize("change", ["library file", "site-packages", "CUDA_HOME", "record"])
def test_the_record_is_a_miss_where_what_chose_the_library_changed(versions, monkeypatch, tmp_path, change):
    nvrtc.loaded_version()
    stamp = nvrtc_record._stamp
    if change == "library file":        # the library replaced (pip upgraded it): another size or time
        monkeypatch.setattr(nvrtc_record, "_stamp", lambda path: [0, 0, 0, 0] if "libnvrtc" in path else stamp(path))
    elif change == "site-packages":     # a package installed or removed
        monkeypatch.setattr(nvrtc_record.site, "getsitepackages", lambda: [str(tmp_path)])
    elif change == "CUDA_HOME":
        monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    else:                               # the record's file changed by hand: its MAC no longer matches
        path = next((tmp_path / "cache" / nvrtc_record.KIND).rglob("*.json"))
        record = json.loads(path.read_text())
        record["payload"]["version"] = [99, 0]
        path.write_text(json.dumps(record))
    assert nvrtc_record.recorded() is None


def test_no_record_without_a_disk_cache(versions, monkeypatch):
    monkeypatch.setenv("TKPY_CACHE", "0")
    nvrtc.loaded_version()
    assert nvrtc_record.recorded() is None and cache.root() is None


def test_a_stale_recorded_version_keys_the_compile_by_the_librarys(versions, monkeypatch):
    """A record that names another version than the library's (it cannot pass its checks, but say it did): a miss
    under it loads NVRTC, whose version then keys the entry."""
    nvrtc._versions["recorded"] = (versions[0] - 1, 0)
    src = 'extern "C" __global__ void stale(float* x) { x[0] = 2.f; }  // test_first_call\n'
    m = compile_cuda(src, "stale")
    opts = ("-arch=sm_90a", *nvrtc.BASE_OPTIONS)
    assert m.key == cache.cache_key(src, "stale", opts, versions, "sm_90a") and not m.from_cache
    assert nvrtc.nvrtc_version() == versions


def test_a_source_made_on_demand_needs_an_identity():
    with pytest.raises(TypeError, match="identity"):
        compile_cuda(lambda: "", "k")
