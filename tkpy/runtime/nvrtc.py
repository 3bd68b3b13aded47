"""Compile generated CUDA C++ to an sm_90a CUBIN with NVRTC (no GPU needed).

We always hand the driver a CUBIN, never PTX: a pip NVRTC newer than the
installed driver emits PTX with a newer ISA version, which the driver's JIT
rejects, while a CUBIN for a real arch loads on any driver of the same major
version. The PTX is still extracted, for inspection only.

The generated source is header-free (NVRTC ships no headers) and marks each
statement with a trailing ``// file.py:LINE  opname`` comment; compile errors
are mapped back to those markers so the user sees their own Python line.
"""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Callable

from . import background
from . import cache as _cache
from . import nvrtc_record
from .errors import CompileError, TkpyRuntimeError
from .resources import Resources, parse_ptxas_log

#: -Xptxas=-v: ptxas' report (registers, spills) in the log of the one run that compiles a kernel. --no-cache: NVRTC's
#: own cache of cubins (~/.nv/ComputeCache, NVRTC 12.9 and later) off: a cubin it reuses comes with no ptxas report,
#: and tkpy's disk cache keeps the cubin with its report instead.
BASE_OPTIONS: tuple[str, ...] = ("-std=c++17", "-lineinfo", "-Xptxas=-v", "--no-cache")


@dataclass(frozen=True)
class CompiledModule:
    """A compiled, loadable kernel image (host-side only; see driver.py)."""

    kernel_name: str
    cubin: bytes
    ptx: str
    log: str
    resources: Resources
    compile_seconds: float
    from_cache: bool
    key: str
    arch: str = "sm_90a"
    # the CUDA source, or what makes it (generated kernels' sources are made only where they are wanted)
    _source: str | Callable[[], str] = field(default="", repr=False)

    @property
    def source(self) -> str:
        """The CUDA source (for error and SASS mapping)."""
        if callable(self._source):
            object.__setattr__(self, "_source", self._source())
        return self._source

    def __repr__(self) -> str:  # the default repr would dump the cubin
        return (
            f"CompiledModule({self.kernel_name!r}, arch={self.arch}, cubin={len(self.cubin)} B, "
            f"key={self.key[:12]}, from_cache={self.from_cache}, {self.resources.summary()})"
        )


def _nvrtc():
    try:
        from cuda.bindings import nvrtc
    except ImportError as e:  # pragma: no cover - depends on the install
        raise TkpyRuntimeError(
            "tkpy needs NVRTC through cuda-bindings: pip install 'cuda-bindings>=13' "
            "'nvidia-cuda-nvrtc>=13'"
        ) from e
    return nvrtc


def _check(nvrtc, result: tuple, what: str):
    err = result[0]
    if err != nvrtc.nvrtcResult.NVRTC_SUCCESS:
        _, msg = nvrtc.nvrtcGetErrorString(err)
        raise TkpyRuntimeError(f"NVRTC {what} failed: {msg.decode(errors='replace')}")
    if len(result) == 1:
        return None
    return result[1] if len(result) == 2 else result[1:]


_versions: dict = {}        # "loaded": the library's version; "recorded": nvrtc_record's (or None), read once


def preload() -> None:
    """Load the NVRTC library on a daemon thread (once), so that a first compile does not wait for it (94 ms on the
    H200's host, RESULTS.md run 289; the load releases the GIL). Errors are left for the first compile to raise."""
    global _preloading
    with _preload_lock:
        if _preloading is not None or "loaded" in _versions:
            return
        _preloading = threading.Thread(target=_load_quietly, name="tkpy-nvrtc-load", daemon=True)
    _preloading.start()


def _load_quietly() -> None:
    try:
        loaded_version()
    except Exception:   # noqa: BLE001 - raised again, with its fix, by the first compile's loaded_version()
        pass


_preloading: threading.Thread | None = None
_preload_lock = threading.Lock()


def loaded_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC library, loading it (once; the version then recorded: nvrtc_record)."""
    version = _versions.get("loaded")
    if version is None:
        nvrtc = _nvrtc()
        try:
            res = nvrtc.nvrtcVersion()
        except Exception as e:  # library not found by cuda-pathfinder
            raise TkpyRuntimeError(
                f"could not load the NVRTC library ({e}); pip install 'nvidia-cuda-nvrtc>=13'"
            ) from e
        major, minor = _check(nvrtc, res, "nvrtcVersion")
        version = _versions["loaded"] = (int(major), int(minor))
        if _versions.get("recorded") != version:      # (a record read that holds: not written again)
            nvrtc_record.record(version)
    return version


def nvrtc_version() -> tuple[int, int]:
    """(major, minor) of the NVRTC that compiles here: the library's own answer once it is loaded; before that, the
    version a process of this environment recorded when it loaded the same library file (nvrtc_record: a warm disk
    cache's first call loads no NVRTC); else it is loaded now."""
    if "loaded" in _versions:
        return _versions["loaded"]
    if "recorded" not in _versions:
        _versions["recorded"] = nvrtc_record.recorded()
    return _versions["recorded"] or loaded_version()


# ---------------------------------------------------------------------------
# error reporting
# ---------------------------------------------------------------------------

_DIAG_RE = re.compile(r"^(?P<file>[^\s()]+)\((?P<line>\d+)\): (?P<kind>(?:catastrophic )?error|warning)\b:?\s*(?P<msg>.*)$")
_MARKER_RE = re.compile(r"//\s*(?:\[\w+\]\s+)?(?P<loc>[^\s:]+\.py:\d+)(?:\s+(?P<op>\S[^\n]*?))?\s*$")


def _instantiated_at(log_lines: list[str], start: int) -> int:
    """The kernel's line whose instantiation of a template led to the error reported just before `start` (the last
    "at line N" of its "detected during ..." notes: the outermost, in the kernel), or 0."""
    found = 0
    for raw in log_lines[start:]:
        if _DIAG_RE.match(raw.strip()):
            break
        for m in _INSTANTIATED_RE.finditer(raw):
            found = int(m.group(1))
    return found


def find_python_origin(source_lines: list[str], line_no: int) -> tuple[str, str] | None:
    """Nearest ``// file.py:LINE  op`` marker on or above 1-based ``line_no``.

    Returns ``(file.py:LINE, op)`` or None.
    """
    for i in range(min(line_no, len(source_lines)) - 1, -1, -1):
        m = _MARKER_RE.search(source_lines[i])
        if m:
            return m.group("loc"), (m.group("op") or "").strip()
    return None


_INSTANTIATED_RE = re.compile(r"\bat line (\d+)")


def format_compile_error(source: str, log: str, kernel_name: str, arch: str) -> str:
    lines = source.splitlines()
    log_lines = log.splitlines()
    diags = []
    for i, raw in enumerate(log_lines):
        m = _DIAG_RE.match(raw.strip())
        if not m or m.group("kind") == "warning":
            continue
        n = int(m.group("line"))
        text = [f"{m.group('kind')}: {m.group('msg')}"]
        if 1 <= n <= len(lines):
            text.append(f"  generated {m.group('file')}:{n}: {lines[n - 1].strip()}")
        origin = find_python_origin(lines, n) or find_python_origin(lines, _instantiated_at(log_lines, i + 1))
        if origin is not None:
            loc, op = origin
            text.append(f"  from {loc}" + (f"  ({op})" if op else ""))
        diags.append("\n".join(text))
    head = f"NVRTC failed to compile tkpy kernel '{kernel_name}' for {arch}"
    body = "\n\n".join(diags) if diags else "(no error lines could be parsed; see log)"
    return f"{head}:\n\n{body}\n\n--- NVRTC log ---\n{log.rstrip()}"


# ---------------------------------------------------------------------------
# compilation
# ---------------------------------------------------------------------------

_memo: dict[str, CompiledModule] = {}
_memo_lock = threading.Lock()


def _entry_present(ptx: str, kernel_name: str) -> bool:
    return re.search(r"\.entry\s+" + re.escape(kernel_name) + r"\s*\(", ptx) is not None


def _run_nvrtc(source: str, kernel_name: str, opts: list[str], arch: str) -> tuple[bytes, str, str, float]:
    nvrtc = _nvrtc()
    t0 = time.perf_counter()
    prog = _check(
        nvrtc,
        nvrtc.nvrtcCreateProgram(source.encode(), f"{kernel_name}.cu".encode(), 0, [], []),
        "nvrtcCreateProgram",
    )
    try:
        bopts = [o.encode() for o in opts]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(bopts), bopts)
        n = _check(nvrtc, nvrtc.nvrtcGetProgramLogSize(prog), "nvrtcGetProgramLogSize")
        buf = bytearray(n)
        _check(nvrtc, nvrtc.nvrtcGetProgramLog(prog, buf), "nvrtcGetProgramLog")
        log = bytes(buf).rstrip(b"\x00").decode(errors="replace")
        if status != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            if status == nvrtc.nvrtcResult.NVRTC_ERROR_COMPILATION:
                raise CompileError(format_compile_error(source, log, kernel_name, arch), log=log, source=source)
            _, msg = nvrtc.nvrtcGetErrorString(status)
            raise CompileError(
                f"NVRTC failed for tkpy kernel '{kernel_name}' ({msg.decode()}); options {opts}\n{log}",
                log=log,
                source=source,
            )
        n = _check(nvrtc, nvrtc.nvrtcGetCUBINSize(prog), "nvrtcGetCUBINSize")
        cubin_buf = bytearray(n)
        _check(nvrtc, nvrtc.nvrtcGetCUBIN(prog, cubin_buf), "nvrtcGetCUBIN")
        n = _check(nvrtc, nvrtc.nvrtcGetPTXSize(prog), "nvrtcGetPTXSize")
        ptx_buf = bytearray(n)
        _check(nvrtc, nvrtc.nvrtcGetPTX(prog, ptx_buf), "nvrtcGetPTX")
        ptx = bytes(ptx_buf).rstrip(b"\x00").decode(errors="replace")
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
    return bytes(cubin_buf), ptx, log, time.perf_counter() - t0


def compile_cuda(
    source: str | Callable[[], str],
    kernel_name: str,
    *,
    arch: str = "sm_90a",
    options: tuple[str, ...] = (),
    identity: str | None = None,
) -> CompiledModule:
    """Compile ``source`` (containing ``extern "C" __global__ void kernel_name``).

    Looks in the in-process memo, then the disk cache, then runs NVRTC once with
    ``-arch=<arch>`` and BASE_OPTIONS plus ``options``. The cache's key is over ``identity``, a string that
    determines the source, where one is given (tkpy's kernels: KernelCode.identity), else over the source;
    with an identity, ``source`` may be a function that makes it, called only if NVRTC has to run (or the
    module's source is asked for).
    Raises :class:`CompileError` on failure (message maps errors back to the
    ``// file.py:LINE`` markers of the generated source).
    """
    if not arch.startswith("sm_"):
        raise ValueError(f"arch must be a real architecture like 'sm_90a' (we load CUBIN, never PTX); got {arch!r}")
    if identity is None:
        if not isinstance(source, str):
            raise TypeError("compile_cuda: a source made on demand needs its identity= (what determines it)")
        identity = source
    options = tuple(options)
    opts = [f"-arch={arch}", *BASE_OPTIONS, *(o for o in options if o not in BASE_OPTIONS)]
    use_memo = _cache.cache_enabled()
    version = nvrtc_version()
    key = _cache.cache_key(identity, kernel_name, tuple(opts), version, arch)

    mod = cached_module(key, kernel_name, source, arch)
    if mod is None and loaded_version() != version:    # a stale record of the version: the library says
        key = _cache.cache_key(identity, kernel_name, tuple(opts), loaded_version(), arch)
        mod = cached_module(key, kernel_name, source, arch)
    if mod is not None:
        return mod
    if background.waits_refused():
        raise background.CompilePending(kernel_name)
    with _cache.entry_lock(key):  # one compile per key across processes
        mod = _from_disk(key, source, kernel_name, arch)  # another process may have just written it
        if mod is None:
            mod = _compile(source if isinstance(source, str) else source(), kernel_name, opts, arch, key)
            _cache.store(key, kernel_name=kernel_name, cubin=mod.cubin, ptx=mod.ptx, log=mod.log,
                         compile_seconds=mod.compile_seconds)
    if use_memo:
        with _memo_lock:
            _memo[key] = replace(mod, from_cache=True)
    return mod


def cached_module(key: str, kernel_name: str, source: Callable[[], str], arch: str = "sm_90a") -> CompiledModule | None:
    """The module compile_cuda stored under cache key `key` (from the in-process memo, else the disk cache), or
    None: compile_cuda's lookup, and what a specialization record (frontend/spec_records.py) names, found without
    the code that determines the key. `source` makes the module's source if it is asked for."""
    if not _cache.cache_enabled():
        return None
    hit = _memo.get(key)
    if hit is not None:
        return hit if hit.kernel_name == kernel_name else None
    mod = _from_disk(key, source, kernel_name, arch)
    if mod is not None:
        with _memo_lock:
            _memo[key] = mod
    return mod


def _from_disk(key: str, source, kernel_name: str, arch: str) -> CompiledModule | None:
    entry = _cache.load(key)
    if entry is None or entry["kernel_name"] != kernel_name:
        return None
    return CompiledModule(
        kernel_name=kernel_name,
        cubin=entry["cubin"],
        ptx=entry["ptx"],
        log=entry["log"],
        resources=parse_ptxas_log(entry["log"], kernel_name),
        compile_seconds=entry["compile_seconds"],
        from_cache=True,
        key=key,
        arch=arch,
        _source=source,
    )


def _compile(source: str, kernel_name: str, opts: list[str], arch: str, key: str) -> CompiledModule:
    cubin, ptx, log, secs = _run_nvrtc(source, kernel_name, opts, arch)
    if not _entry_present(ptx, kernel_name):
        entries = re.findall(r"\.entry\s+([A-Za-z_$][\w$]*)\s*\(", ptx)
        raise CompileError(
            f"compiled module has no kernel named '{kernel_name}' (entries: {entries}); "
            f"declare it as extern \"C\" __global__ so its name is not mangled",
            log=log,
            source=source,
        )
    return CompiledModule(
        kernel_name=kernel_name,
        cubin=cubin,
        ptx=ptx,
        log=log,
        resources=parse_ptxas_log(log, kernel_name),
        compile_seconds=secs,
        from_cache=False,
        key=key,
        arch=arch,
        _source=source,
    )


def clear_memo() -> None:
    """Forget in-process compiled modules (the disk cache is untouched)."""
    with _memo_lock:
        _memo.clear()


__all__ = ["CompiledModule", "cached_module", "compile_cuda", "loaded_version", "nvrtc_version", "find_python_origin",
           "clear_memo", "BASE_OPTIONS"]
