"""Specialization records (frontend/spec_records.py, issue 35): a process compiles, or launches, what an earlier one
compiled without tracing or lowering it; what keys a record (frontend/digest.py: the kernel's function and what it
reaches, tkpy's files) and what happens to one that is stale or whose module is gone. CPU only (the compile stage)."""
from __future__ import annotations

import hashlib
import json
import linecache
import os
import subprocess
import sys
import threading
import types
import warnings
from pathlib import Path

import pytest
import torch

import tkpy as tk
from tkpy import _source_tree, f32
from tkpy.frontend import digest, kernel as kernel_module, spec_records
from tkpy.runtime import clear_memo, records

from debug_golden_kernels import cluster_multicast, producer_consumer
from test_runtime import _isolated_cache  # noqa: F401 - autouse: each test its own empty disk cache and memo

ROOT = Path(__file__).resolve().parents[1]
SCALE = 2.0          # a global the kernels below read (test_a_global_the_code_names_is_in_the_digest changes it)


def _scaling(scale: float, warps: int = 1):
    @tk.kernel(warps=warps, name="records_scale")
    def k(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16], extra: tk.constexpr):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.mul(t, t, scale * SCALE + extra)
        tk.store(y, t, (tk.block_idx.x, 0))
    return k


def _args(extra=0.0):
    x = torch.empty(64, 16)
    return x, x, extra


@pytest.fixture
def traces(monkeypatch):
    """The number of traces the kernels run (kernel.trace_kernel counted)."""
    made = []
    real = kernel_module.trace_kernel
    monkeypatch.setattr(kernel_module, "trace_kernel", lambda *a, **k: made.append(1) or real(*a, **k))
    return made


def _new_process():
    """What a new process has of the kernels compiled so far: only the disk cache (a new kernel object, no memo)."""
    clear_memo()


def test_a_new_kernel_finds_the_record_and_traces_only_when_asked_for_its_code(traces):
    """The second kernel object (a new process's) compiles from the record: no trace, the same module; its IR and source
    are made when asked for, the same as the first's."""
    first = _scaling(2.0).compile(*_args())
    assert len(traces) == 1 and not first.module.from_cache
    _new_process()
    k = _scaling(2.0)
    again = k.compile(*_args())
    assert len(traces) == 1 and again.module.from_cache and again.module.key == first.module.key
    assert again.facts == first.facts
    assert k.source(*_args()) == first.lowered.source and len(traces) == 2
    assert again.lowered.code.identity == first.lowered.code.identity
    assert again.module.source == first.lowered.source and len(traces) == 2     # (the module's: the same Lowered)


@pytest.mark.parametrize("factory", [producer_consumer, cluster_multicast])
def test_a_record_keeps_what_launches_need(factory, traces):
    """TMA tensor maps (their shared tiles), clusters, shared memory, threads and the parameter slots come back from
    the record as the IR gives them."""
    kernel, args = factory()
    first = kernel.compile(*args)
    _new_process()
    kernel, args = factory()
    again = kernel.compile(*args)
    assert len(traces) == 1
    assert again.facts == first.facts
    assert any(s.source[0] == "tmap" for s in again.facts.slots)


def test_a_new_process_compiles_from_the_record(tmp_path):
    """Two processes on one disk cache: the first traces and compiles, the second neither traces nor lowers."""
    code = f"""
import json, sys
sys.path.insert(0, {str(ROOT / 'tests')!r})
from tkpy.frontend import kernel
traced = []
real = kernel.trace_kernel
kernel.trace_kernel = lambda *a, **k: traced.append(1) or real(*a, **k)
from test_spec_records import _scaling, _args
compiled = _scaling(2.0).compile(*_args())
print(json.dumps(dict(traced=len(traced), key=compiled.module.key, from_cache=compiled.module.from_cache)))
"""
    env = {**os.environ, "TKPY_CACHE_DIR": str(tmp_path / "cache"), "PYTHONPATH": str(ROOT), "TKPY_INTERPRET": "1"}

    def run() -> dict:
        done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout.strip().splitlines()[-1])

    cold, warm = run(), run()
    assert cold["traced"] == 1 and not cold["from_cache"]
    assert warm["traced"] == 0 and warm["from_cache"] and warm["key"] == cold["key"]


def test_what_the_trace_reads_is_in_the_key(monkeypatch):
    """A closure value, an option, a constexpr, the tensors' contiguity, a global the code names, tkpy's files or the
    dependent-launch switch changed: another record key; the same kernel made again: the same."""
    k = _scaling(2.0)
    key = k._bind(_args(), need_cuda=False)[0]
    base = spec_records.record_key(k, key)
    assert base is not None and spec_records.record_key(_scaling(2.0), key) == base
    strided = torch.empty(64, 32)[:, :16]
    others = [spec_records.record_key(_scaling(3.0), key),
              spec_records.record_key(_scaling(2.0, warps=2), key),
              spec_records.record_key(k, k._bind(_args(1.0), need_cuda=False)[0]),
              spec_records.record_key(k, k._bind((strided, strided, 0.0), need_cuda=False)[0])]
    monkeypatch.setattr(sys.modules[__name__], "SCALE", 4.0)
    others.append(spec_records.record_key(_scaling(2.0), key))
    monkeypatch.undo()
    monkeypatch.setattr(spec_records, "tree_digest", lambda: "another tkpy")
    others.append(spec_records.record_key(k, key))
    monkeypatch.undo()
    monkeypatch.setenv("TKPY_DEPENDENT_LAUNCH", "0")
    others.append(spec_records.record_key(k, key))
    assert None not in others and len({base, *others}) == len(others) + 1


def test_debug_and_timeline_builds_keep_no_record(monkeypatch):
    """Their launches read the IR (the debug record's sites, the timeline's labels)."""
    k = _scaling(2.0)
    debug = tk.kernel(warps=1, debug=True)(k.fn)
    assert spec_records.record_key(debug, debug._bind(_args(), need_cuda=False)[0]) is None
    monkeypatch.setenv("TKPY_TIMELINE", "1")
    assert spec_records.record_key(k, k._bind(_args(), need_cuda=False)[0]) is None


def test_an_undigestable_kernel_is_traced_each_time(traces):
    """A kernel closing over a value the digest cannot vouch for (a tensor, a lock) has no digest and no record: each
    new process traces it, as before records."""
    weights, lock = torch.ones(3), threading.Lock()

    def make():
        @tk.kernel(warps=1, name="records_undigestable")
        def k(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
            t = tk.rt(f32, 16, 16)
            tk.load(t, x, (tk.block_idx.x, 0))
            tk.mul(t, t, float(weights[0]) + (lock is None))
            tk.store(y, t, (tk.block_idx.x, 0))
        return k

    assert make().digest is None
    make().compile(*_args()[:2])
    _new_process()
    assert make().compile(*_args()[:2]).module.from_cache
    assert len(traces) == 2


def test_a_stale_record_warns_drops_and_traces_next_time(traces):
    """A record whose identity is not the code's (its key missed something): the source asked for warns, the record
    is dropped, and the next process traces again."""
    k = _scaling(2.0)
    key = k._bind(_args(), need_cuda=False)[0]
    k.compile(*_args())
    rkey = spec_records.record_key(k, key)
    payload = records.load(spec_records.KIND, rkey)
    records.store(spec_records.KIND, rkey, {**payload, "identity": "tkpy-kernel-code:something else"})
    _new_process()
    k = _scaling(2.0)
    assert k.compile(*_args()).module.from_cache and len(traces) == 1
    with pytest.warns(RuntimeWarning, match="specialization record of records_scale"):
        k.source(*_args())
    assert records.load(spec_records.KIND, rkey) is None
    _new_process()
    _scaling(2.0).compile(*_args())
    assert len(traces) == 3


def test_a_record_whose_module_is_gone_compiles_again(traces):
    """The record names a module no longer in the disk cache: the kernel is traced and compiled (not an error)."""
    first = _scaling(2.0).compile(*_args()).module
    for path in Path(os.environ["TKPY_CACHE_DIR"]).rglob(f"{first.key}.*"):
        path.unlink()
    _new_process()
    again = _scaling(2.0).compile(*_args()).module
    assert len(traces) == 2 and not again.from_cache and again.key == first.key


@pytest.mark.parametrize("switch", ["TKPY_CACHE", "TKPY_SPEC_RECORDS"])
def test_without_a_cache_or_with_records_off_every_process_traces(monkeypatch, traces, switch):
    monkeypatch.setenv(switch, "0")
    _scaling(2.0).compile(*_args())
    _new_process()
    _scaling(2.0).compile(*_args())
    assert len(traces) == 2


def test_a_kernel_that_reads_the_environment_has_it_in_its_digest(monkeypatch):
    """A user's kernel whose code names os.environ or os.getenv (a switch read while it traces): the environment is
    in its digest; one that does not name them is not keyed by it."""
    def make():
        @tk.kernel(warps=1, name="records_environment")
        def k(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
            t = tk.rt(f32, 16, 16)
            tk.load(t, x, (tk.block_idx.x, 0))
            tk.mul(t, t, float(os.environ.get("RECORDS_TEST_SCALE", "1")))
            tk.store(y, t, (tk.block_idx.x, 0))
        return k
    monkeypatch.setenv("RECORDS_TEST_SCALE", "1")
    before, plain = make().digest, _scaling(2.0).digest
    monkeypatch.setenv("RECORDS_TEST_SCALE", "3")
    assert make().digest != before and _scaling(2.0).digest == plain


def test_threads_share_one_record_lookup(traces):
    """Threads compiling one specialization of a new kernel object at once: one module, no trace."""
    first = _scaling(2.0).compile(*_args()).module
    _new_process()
    k = _scaling(2.0)
    keys, errors = [], []

    def compile_it():
        try:
            keys.append(k.compile(*_args()).module.key)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=compile_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and keys == [first.key] * 8 and len(traces) == 1


# --------------------------------------------------------------------------- the digest

def _digest(value):
    return digest.value_digest(value)


def test_a_kernel_that_reads_the_gpu_has_it_in_its_digest(monkeypatch):
    """A user's code that names what reads the GPU (an SM count baked in while it traces) has the current GPU in its
    digest; other kernels do not."""
    def sms():
        return torch.cuda.get_device_properties(0).multi_processor_count

    gpus = iter([("H200", 132), ("H100 PCIe", 114)])
    name, count = next(gpus)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(
        name=name, multi_processor_count=count, major=9, minor=0))
    first, plain = _digest(sms), _digest(_scaling(2.0))
    name, count = next(gpus)
    assert _digest(sms) != first and _digest(_scaling(2.0)) == plain


def test_the_digest_reads_values_by_content():
    """Equal values, equal digests; a changed closure cell, default, module attribute the code names, set member or
    dataclass field: another. Cycles end."""
    config = types.ModuleType("records_config")       # a user's module of settings: its attributes the code names
    config.BLOCK, config.sub = 64, types.ModuleType("records_config.sub")
    config.sub.WIDTH, config.sub.records_config = 8, config

    def reads(n=1):
        return config.BLOCK + config.sub.WIDTH + n + len({1, 2})
    before = _digest(reads)
    config.BLOCK = 128
    changed = _digest(reads)
    config.sub.WIDTH = 16
    deeper = _digest(reads)
    reads.__defaults__ = (2,)
    assert len({before, changed, deeper, _digest(reads)}) == 4

    def closing(v):
        return lambda: v
    assert _digest(closing((1, "a"))) == _digest(closing((1, "a"))) != _digest(closing((1, "b")))
    assert _digest({3, 1, 2}) == _digest({2, 3, 1}) != _digest({1, 2})
    assert _digest(_scaling(2.0)) == _digest(_scaling(2.0)) != _digest(_scaling(2.5))
    loop = []
    loop.append(loop)
    assert _digest(loop) is not None


def test_a_notebook_cells_text_is_in_the_digest():
    """Code from a file not on disk (a notebook's cell: its lines in linecache) is digested by its text, comments
    included (they reach the generated source's line comments)."""
    name = "<records-cell>"

    def digest_of(text: str) -> str:
        linecache.cache[name] = (len(text), None, text.splitlines(True), name)
        scope = {}
        exec(compile(text, name, "exec"), scope)
        return _digest(scope["f"])
    try:
        assert digest_of("def f():\n    return 1  # one\n") != digest_of("def f():\n    return 1  # two\n")
    finally:
        linecache.cache.pop(name, None)


def test_the_digest_refuses_what_it_cannot_vouch_for():
    assert _digest(torch.ones(2)) is None
    assert _digest(threading.Lock()) is None
    assert _digest(list(range(digest.MAX_VALUES + 1))) is not None      # ints are not counted values
    assert _digest([[i] for i in range(digest.MAX_VALUES + 1)]) is None


def test_the_tree_digest_follows_files(tmp_path):
    """A file's size or modification time changed, or a file added: another digest; __pycache__ is not read."""
    (tmp_path / "a.py").write_text("x = 1\n")
    (tmp_path / "__pycache__").mkdir()

    def tree() -> str:
        h = hashlib.sha256()
        _source_tree._add_files(h, tmp_path, "t/")
        return h.hexdigest()
    first = tree()
    (tmp_path / "__pycache__" / "a.pyc").write_bytes(b"0")
    assert tree() == first
    os.utime(tmp_path / "a.py", ns=(1, 1))
    touched = tree()
    (tmp_path / "b.py").write_text("")
    assert len({first, touched, tree()}) == 3
    assert len(_source_tree.tree_digest()) == 64


def test_the_kernels_of_tkpy_have_digests():
    """The templates' kernels (attention, GEMM) and the row kernels are digestable: their warm first calls skip the
    trace."""
    from tkpy.kernels.attention_config import AttentionConfig
    from tkpy.kernels.attention_kernel import _attention
    from tkpy.kernels.gemm_config import MatmulConfig
    from tkpy.kernels.gemm_kernel import matmul_template

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        made = [_attention(AttentionConfig(d=128)).kernel, _attention(AttentionConfig(d=64, causal=True)).kernel,
                matmul_template(MatmulConfig()).kernel]
    assert all(k.digest is not None for k in made) and len({k.digest for k in made}) == 3
