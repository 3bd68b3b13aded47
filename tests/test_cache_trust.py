"""The cache runs only what tkpy wrote (issue 30): private directories, owner/mode checks and an HMAC on
every cubin and on the native launcher, one compile per key across processes, malformed metadata as a
miss, and nothing left behind with TKPY_CACHE=0. CPU only; the planting tests need root and `nobody`."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
import torch

import tkpy as tk
from tkpy import f32
from tkpy.runtime import cache, clear_memo, compile_cuda, disasm, find_nvdisasm, native, nvrtc

from test_native_launch import native_build_problem

REPO = Path(__file__).resolve().parents[1]
ADD1 = 'extern "C" __global__ void add1(float* x){{ x[0] += 1.f; }}  // {}\n'
ADD2 = 'extern "C" __global__ void add1(float* x){{ x[0] += 2.f; }}  // {}\n'   # same name, other code


def _src(template: str) -> str:
    return template.format(time.perf_counter_ns())   # a fresh cache key


def _nobody():
    if os.geteuid() != 0:
        pytest.skip("planting files as another user needs root")
    try:
        return pwd.getpwnam("nobody")
    except KeyError:
        pytest.skip("no user nobody")


def _has_nobody() -> bool:
    try:
        pwd.getpwnam("nobody")
        return True
    except KeyError:
        return False


def _ids() -> tuple[int, int]:
    pw = _nobody()
    return pw.pw_uid, pw.pw_gid


def _as_nobody(path: Path, data: bytes) -> None:
    """Write `path` (and its missing directories) as user nobody, as an attacker on the machine would."""
    pw = _nobody()

    def drop():
        os.setgroups([])
        os.setgid(pw.pw_gid)
        os.setuid(pw.pw_uid)

    subprocess.run(["/bin/sh", "-c", 'mkdir -p "$(dirname "$1")" && cat > "$1"', "sh", str(path)],
                   input=data, preexec_fn=drop, check=True)
    assert path.stat().st_uid == pw.pw_uid


def _mode(p: Path) -> int:
    return stat.S_IMODE(p.stat().st_mode)


@pytest.fixture(autouse=True)
def _isolated(tmp_path, monkeypatch):
    """A fresh cache, and a fresh home so that a refused directory falls back inside the test."""
    monkeypatch.setenv("TKPY_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.delenv("TKPY_CACHE", raising=False)
    clear_memo()
    yield
    clear_memo()


@pytest.fixture
def shared(monkeypatch):
    """A shared mode-1777 directory that user nobody can reach, used as TKPY_CACHE_DIR."""
    base = Path(tempfile.mkdtemp(prefix="tkpy-shared-"))
    os.chmod(base, 0o755)
    d = base / "shared"
    d.mkdir()
    os.chmod(d, 0o1777)
    monkeypatch.setenv("TKPY_CACHE_DIR", str(d))
    yield d
    shutil.rmtree(base)


def _run(code: str, env: dict) -> subprocess.CompletedProcess:
    full = {k: v for k, v in os.environ.items() if k not in ("TKPY_CACHE", "TKPY_CACHE_DIR")}
    full.update(env)
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=REPO, env=full, capture_output=True,
                          text=True, timeout=300, check=True)


# --------------------------------------------------------------------------- directories and key


def test_created_dirs_are_private_and_the_key_is_0600(tmp_path):
    m = compile_cuda(_src(ADD1), "add1")
    root = tmp_path / "cache"
    assert cache.root() == root and _mode(root) == 0o700
    paths = cache.entry_paths(m.key)
    assert paths["cubin"].parent.parent == root and _mode(paths["cubin"].parent) == 0o700
    assert _mode(root / cache.KEY_FILE) == 0o600 and len((root / cache.KEY_FILE).read_bytes()) == 32
    assert all(_mode(p) & 0o077 == 0 for p in paths.values())


def test_key_is_made_once_and_a_loose_one_replaced(tmp_path):
    root = cache.root()
    key = cache.secret_key(root)
    cache._keys.clear()                      # as a new process would
    assert cache.secret_key(root) == key
    os.chmod(root / cache.KEY_FILE, 0o644)   # readable by others: no longer a secret
    cache._keys.clear()
    assert cache.secret_key(root) != key and _mode(root / cache.KEY_FILE) == 0o600


def test_sticky_shared_dir_gets_a_private_subdirectory(tmp_path, monkeypatch):
    d = tmp_path / "sticky"
    d.mkdir()
    os.chmod(d, 0o1777)
    monkeypatch.setenv("TKPY_CACHE_DIR", str(d))
    m = compile_cuda(_src(ADD1), "add1")
    sub = d / f"tkpy-{os.getuid()}"
    assert cache.root() == sub and _mode(sub) == 0o700 and sub in cache.entry_paths(m.key)["cubin"].parents


@pytest.mark.parametrize("how", ["group-writable", "world-writable parent", "owned by nobody"])
def test_unsafe_dir_is_refused_with_a_warning(tmp_path, monkeypatch, caplog, how):
    d = tmp_path / "unsafe"
    if how == "group-writable":
        d.mkdir()
        os.chmod(d, 0o775)
    elif how == "world-writable parent":
        d.parent.joinpath("open").mkdir()
        os.chmod(d.parent / "open", 0o777)    # no sticky bit: anyone can rename our directory away
        d = d.parent / "open" / "cache"
    else:
        pw = _nobody()
        d.mkdir()
        os.chown(d, pw.pw_uid, pw.pw_gid)
    monkeypatch.setenv("TKPY_CACHE_DIR", str(d))
    with caplog.at_level(logging.WARNING, logger="tkpy.cache"):
        m = compile_cuda(_src(ADD1), "add1")
    assert f"not using the cache directory {d}" in caplog.text
    fallback = tmp_path / "home" / ".cache" / "tkpy"
    assert cache.root() == fallback and fallback in cache.entry_paths(m.key)["cubin"].parents
    assert not any(d.rglob("*.cubin"))


# --------------------------------------------------------------------------- cubins


def _plant_entry(root: Path, key: str, cubin: bytes, write) -> None:
    """An entry for `key` holding `cubin`, with the pre-issue-30 sha256 metadata and a made-up MAC."""
    meta = {"format": cache.CACHE_FORMAT_VERSION, "kernel_name": "add1", "log": "", "compile_seconds": 0.1,
            "cubin_sha256": hashlib.sha256(cubin).hexdigest(), "cubin_size": len(cubin),
            "mac": "0" * 64}
    d = root / key[:2]
    write(d / f"{key}.cubin", cubin)
    write(d / f"{key}.ptx", b"")
    write(d / f"{key}.json", json.dumps(meta).encode())


def _key_of(src: str) -> str:
    from tkpy.runtime.nvrtc import BASE_OPTIONS, nvrtc_version

    return cache.cache_key(src, "add1", ("-arch=sm_90a", *BASE_OPTIONS), nvrtc_version(), "sm_90a")


def test_cubin_planted_by_another_user_is_never_loaded(shared):
    pw = _nobody()
    src = _src(ADD1)
    evil = compile_cuda(_src(ADD2), "add1").cubin      # another kernel's cubin
    key = _key_of(src)
    private = shared / f"tkpy-{os.getuid()}"
    shutil.rmtree(private)                             # nobody gets there first and squats our subdirectory
    for where in (shared, private):
        _plant_entry(where, key, evil, _as_nobody)
    assert private.stat().st_uid == pw.pw_uid
    clear_memo()
    m = compile_cuda(src, "add1")
    assert not m.from_cache and m.cubin != evil and "0f3F800000" in m.ptx   # tkpy's own x += 1.f
    assert Path(os.environ["HOME"]) in cache.entry_paths(m.key)["cubin"].parents


def test_foreign_owner_or_wrong_mac_in_our_own_dir_is_a_miss(tmp_path):
    src, other = _src(ADD1), _src(ADD2)
    m1, m2 = compile_cuda(src, "add1"), compile_cuda(other, "add1")
    p1, p2 = cache.entry_paths(m1.key), cache.entry_paths(m2.key)

    # ours and valid in itself, but another key's cubin: the MAC binds the entry to its key
    shutil.copy(p2["cubin"], p1["cubin"])
    shutil.copy(p2["meta"], p1["meta"])
    shutil.copy(p2["ptx"], p1["ptx"])
    clear_memo()
    m = compile_cuda(src, "add1")
    assert not m.from_cache and m.cubin != m2.cubin

    # a wrong MAC, everything else right (the old sha256 scheme would have loaded it)
    _plant_entry(tmp_path / "cache", m1.key, m2.cubin, lambda p, b: p.write_bytes(b))
    clear_memo()
    assert not compile_cuda(src, "add1").from_cache

    # a valid entry that is not ours (the owner check), or that others can write
    clear_memo()
    assert compile_cuda(src, "add1").from_cache
    changes = [lambda p: os.chmod(p, 0o666)]
    if os.geteuid() == 0 and _has_nobody():
        changes.append(lambda p: os.chown(p, *_ids()))
    for change in changes:
        change(p1["cubin"])
        clear_memo()
        m = compile_cuda(src, "add1")
        assert not m.from_cache
        st = p1["cubin"].stat()
        assert st.st_uid == os.getuid() and st.st_mode & 0o022 == 0      # rewritten as ours
        clear_memo()
        assert compile_cuda(src, "add1").from_cache


@pytest.mark.parametrize("meta", [b"[1, 2]", b"null", b"7", b'"x"', b"{", b"\xff\xfe", b"{}",
                                  "log", "compile_seconds", "kernel_name", "mac"])
def test_malformed_metadata_is_a_miss(meta):
    src = _src(ADD1)
    m1 = compile_cuda(src, "add1")
    path = cache.entry_paths(m1.key)["meta"]
    if isinstance(meta, str):                 # a valid entry with one field null (e.g. "log": null)
        d = json.loads(path.read_bytes())
        d[meta] = None
        meta = json.dumps(d).encode()
    path.write_bytes(meta)
    assert cache.load(m1.key) is None
    clear_memo()
    m2 = compile_cuda(src, "add1")
    assert not m2.from_cache and m2.resources.found
    clear_memo()
    assert compile_cuda(src, "add1").from_cache      # rewritten


# --------------------------------------------------------------------------- what is made from a cubin: its SASS


def _row_copy():
    @tk.kernel(warps=1)
    def row_copy(x: tk.gl[f32, "R", 16], y: tk.gl[f32, "R", 16]):
        t = tk.rt(f32, 16, 16)
        tk.load(t, x, (tk.block_idx.x, 0))
        tk.store(y, t, (tk.block_idx.x, 0))
    return row_copy


@pytest.fixture
def counted(monkeypatch):
    """Counts of NVRTC runs and nvdisasm runs."""
    if find_nvdisasm() is None:
        pytest.skip("no nvdisasm (pip install nvidia-cuda-nvdisasm)")
    calls = Counter()
    run_nvrtc, disassemble = nvrtc._run_nvrtc, disasm.sass

    def nvrtc_counted(*args):
        calls["nvrtc"] += 1
        return run_nvrtc(*args)

    def disasm_counted(*args, **kwargs):
        calls["nvdisasm"] += 1
        return disassemble(*args, **kwargs)
    monkeypatch.setattr(nvrtc, "_run_nvrtc", nvrtc_counted)
    monkeypatch.setattr(disasm, "sass", disasm_counted)
    return calls


def test_sass_ptx_and_resources_are_made_once(counted):
    """k.sass / k.ptx / k.resources compile (NVRTC) and disassemble (nvdisasm) once: later calls, and those of a
    new kernel object once the in-process memo is gone (as in a new process), read what was kept."""
    x = torch.zeros(32, 16)
    k = _row_copy()
    first = (k.sass(x, x), k.ptx(x, x), k.resources(x, x))
    assert "LDG" in first[0] and ".entry row_copy" in first[1] and first[2].found
    compiles = counted["nvrtc"]                      # 1 (2 where ptxas' report had to be made anew)
    assert compiles >= 1 and counted["nvdisasm"] == 1
    assert (k.sass(x, x), k.ptx(x, x), k.resources(x, x)) == first
    clear_memo()
    again = _row_copy()
    assert (again.sass(x, x), again.ptx(x, x), again.resources(x, x)) == first
    assert counted == Counter(nvrtc=compiles, nvdisasm=1)


def test_sass_not_written_by_tkpy_is_remade(counted):
    """A kept SASS whose MAC does not match (edited), that others can write, or that another user owns, is a miss:
    disassembled anew and rewritten as ours."""
    m = compile_cuda(_src(ADD1), "add1")
    text = disasm.module_sass(m)
    path = cache.root() / m.key[:2] / f"{m.key}.sass.json"
    assert _mode(path) & 0o077 == 0 and counted["nvdisasm"] == 1
    def edit():
        kept = json.loads(path.read_bytes())
        path.write_text(json.dumps({**kept, "text": kept["text"].replace("FADD", "FMUL") + " "}))
    changes = [edit, lambda: os.chmod(path, 0o666)]
    if os.geteuid() == 0 and _has_nobody():
        changes.append(lambda: os.chown(path, *_ids()))
    for n, change in enumerate(changes, start=2):
        change()
        assert cache.load_text(m.key, "sass") is None
        assert disasm.module_sass(m) == text and counted["nvdisasm"] == n
        assert path.stat().st_uid == os.getuid() and cache.load_text(m.key, "sass") == text


# --------------------------------------------------------------------------- concurrency, TKPY_CACHE=0

WORKER = """
    import json, os, sys, time
    from pathlib import Path
    import tkpy.runtime.nvrtc as nvrtc
    run = nvrtc._run_nvrtc
    def counted(*a, **k):
        with open(os.environ["COUNTER"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        return run(*a, **k)
    nvrtc._run_nvrtc = counted
    Path(os.environ["READY"] + str(os.getpid())).touch()
    while not os.path.exists(os.environ["GO"]):
        time.sleep(0.005)
    m = nvrtc.compile_cuda(os.environ["SRC"], "add1")
    print(json.dumps({"from_cache": m.from_cache, "cubin": m.cubin.hex()}))
"""


def test_four_processes_compile_once(tmp_path):
    env = {"TKPY_CACHE_DIR": str(tmp_path / "fresh"), "SRC": _src(ADD1), "COUNTER": str(tmp_path / "count"),
           "READY": str(tmp_path / "ready-"), "GO": str(tmp_path / "go")}
    full = {**os.environ, **env}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(WORKER)], cwd=REPO, env=full,
                              stdout=subprocess.PIPE, text=True) for _ in range(4)]
    deadline = time.monotonic() + 120
    while len(list(tmp_path.glob("ready-*"))) < 4 and time.monotonic() < deadline:
        time.sleep(0.01)
    (tmp_path / "go").touch()                     # all four start compiling at once
    results = [json.loads(p.communicate(timeout=300)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    assert sorted(r["from_cache"] for r in results) == [False, True, True, True]
    assert len(set((tmp_path / "count").read_text().split())) == 1      # NVRTC ran in one process
    assert len({r["cubin"] for r in results}) == 1


def test_cache_disabled_leaves_nothing_behind(tmp_path):
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    _run("""
        from tkpy.runtime import compile_cuda, native
        compile_cuda('extern "C" __global__ void k(int* x){ x[0] = 1; }\\n', "k")
        native.load()
    """, {"TKPY_CACHE": "0", "TMPDIR": str(tmp), "TKPY_CACHE_DIR": str(tmp_path / "cache")})
    assert list(tmp.iterdir()) == []
    home = tmp_path / "home"         # (on a GPU machine the CUDA driver or torch may make their own files there)
    assert not (tmp_path / "cache").exists() and not [p for p in home.rglob("*") if "tkpy" in p.name]


# --------------------------------------------------------------------------- the native launcher

CONSTRUCTOR = """#include <stdio.h>
__attribute__((constructor)) static void planted(void) { fclose(fopen(MARKER, "w")); }
"""
LOAD = """
    from tkpy.runtime import native
    m = native.load()
    print(m.__file__ if m is not None and hasattr(m, "Launcher") else "NONE")
"""


@pytest.fixture
def planted_so(tmp_path):
    """A shared library whose constructor creates tmp_path/MARKER, and the name tkpy imports it under."""
    problem = native_build_problem()
    if problem:
        pytest.skip(f"cannot build the native launcher: {problem}")
    c = tmp_path / "planted.c"
    c.write_text(CONSTRUCTOR)
    so = tmp_path / "planted.so"
    subprocess.run(native.compiler() + ["-shared", "-fPIC", f'-DMARKER="{tmp_path / "MARKER"}"', str(c), "-o",
                                        str(so)], check=True)
    name = native.build(tmp_path / "probe").name
    return so.read_bytes(), name


def _load_in_subprocess() -> str:
    """native.load() in a fresh process (a constructor runs at dlopen; the parent's module is memoized)."""
    out = _run(LOAD, {"TKPY_CACHE_DIR": os.environ["TKPY_CACHE_DIR"], "HOME": os.environ["HOME"]})
    return out.stdout.strip()


def test_native_so_planted_by_another_user_never_runs(shared, tmp_path, planted_so):
    data, name = planted_so
    private = shared / f"tkpy-{os.getuid()}"
    shutil.rmtree(private, ignore_errors=True)
    _as_nobody(shared / "native" / name, data)                  # where tkpy looked before issue 30
    _as_nobody(private / "native" / name, data)                 # squatting our private subdirectory
    _as_nobody(private / "native" / (name + ".mac"), b"0" * 64)
    loaded = _load_in_subprocess()
    assert not (tmp_path / "MARKER").exists()
    assert loaded != "NONE" and Path(loaded).parent == tmp_path / "home" / ".cache" / "tkpy" / "native"


@pytest.mark.parametrize("case", ["root, wrong MAC", "nobody, valid MAC", "group-writable, valid MAC",
                                  "root, valid MAC (control)"])
def test_native_so_in_our_dir_runs_only_if_verified(tmp_path, planted_so, case):
    data, name = planted_so
    d = cache.private_dir(tmp_path / "cache" / "native")
    path = d / name
    path.write_bytes(data)
    os.chmod(path, 0o700)
    tag = b"0" * 64 if case.startswith("root, wrong") else native._mac(cache.secret_key(d), path, data)
    (d / (name + ".mac")).write_bytes(tag)
    if case.startswith("nobody"):
        os.chown(path, *_ids())
    elif case.startswith("group"):
        os.chmod(path, 0o770)
    loaded = _load_in_subprocess()
    assert loaded == str(path)                                   # it works, from a rebuilt file
    if case.endswith("(control)"):                               # the plant is where tkpy looks: it ran
        assert (tmp_path / "MARKER").exists()
        return
    assert not (tmp_path / "MARKER").exists()
    st = path.stat()
    assert st.st_uid == os.getuid() and st.st_mode & 0o022 == 0 and path.read_bytes() != data
