"""The native launch path: a cache hit of ``kernel[grid](*args)`` as one C call.

``native_launch.c`` is a small CPython extension (plain C API; no CUDA or torch headers) that does
what the generated Python launcher (:mod:`tkpy.frontend.fastpath`) does: the key check, the data
pointers, the packing, torch's current stream and ``cuLaunchKernelEx``, which it calls through the
driver's function pointer (``cuGetProcAddress``). It is compiled once per machine with the C compiler
Python was built with (sysconfig's ``CC``) and cached in ``<tkpy cache dir>/native/``, keyed by the
source, the Python version and the platform: by ``python -m tkpy.warmup``, else on a background thread
that the process's first GPU launch starts once it is made (:func:`on_load`; before it, the thread would
take the GIL from that call's trace and lowering), while launches go through the Python launcher; each
kernel switches to the native one when it is loaded. It is
imported only from a private directory, only if the file is ours and its HMAC (``<name>.mac``, see
:mod:`tkpy.runtime.cache`) matches, and from the very descriptor that was checked; with no disk cache
it is built in a temporary directory removed at exit.

``TKPY_NATIVE_LAUNCH=0``, or no compiler, no ``Python.h`` or a failed build, leaves the Python
launcher in charge, with no other change; the reason is logged once at debug level (logger
``tkpy.native``).
"""
from __future__ import annotations

import hashlib
import hmac
import importlib.machinery
import importlib.util
import logging
import os
import shlex
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import threading
import weakref
from pathlib import Path
from typing import Any, Optional

from ..codegen.abi import dim_position
from . import cache

ENV = "TKPY_NATIVE_LAUNCH"
MODULE_NAME = "tkpy_native_launch"
SOURCE = Path(__file__).with_name("native_launch.c")

#: ParamBuffer kinds -> the extension's slot kinds ("ptr" is a u64)
_KIND_ALIASES = {"ptr": "u64"}
_SPEC_KINDS = {"gl": "SPEC_GL", "constexpr": "SPEC_CONSTEXPR"}   # anything else is a runtime scalar

log = logging.getLogger("tkpy.native")

_lock = threading.Lock()          # held while building and importing (load)
_module: Any = None
_tried = False                    # load() has run: _module is the extension, or None where it cannot be had
_thread: Optional[threading.Thread] = None     # the background load (on_load begins it)
_waiting: list = []               # weak methods to call once the background load has the extension (on_load)
_waiting_lock = threading.Lock()  # guards _thread and _waiting; never held while building
_launch_address: Optional[int] = None
_context_api: Optional[tuple] = None
_logged: set = set()
_temp: Optional[tempfile.TemporaryDirectory] = None   # the build directory when there is no disk cache


class NativeBuildError(RuntimeError):
    """The extension could not be built (no compiler, no Python headers, a compiler error)."""


def enabled() -> bool:
    """False when ``TKPY_NATIVE_LAUNCH`` is 0/false/no/off."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")


def _unavailable(why: str) -> None:
    if why not in _logged:
        _logged.add(why)
        log.debug("tkpy: native launch path unavailable, using the Python launcher: %s", why)


# ---------------------------------------------------------------------------
# building and loading
# ---------------------------------------------------------------------------


def compiler() -> list[str]:
    """The C compiler command (sysconfig's CC, else cc); NativeBuildError if it is not installed."""
    cmd = shlex.split(sysconfig.get_config_var("CC") or "cc")
    if not cmd or shutil.which(cmd[0]) is None:
        raise NativeBuildError(f"no C compiler found ({' '.join(cmd) or 'CC unset'})")
    return cmd


def python_include() -> Path:
    include = Path(sysconfig.get_paths()["include"])
    if not (include / "Python.h").is_file():
        raise NativeBuildError(f"Python.h not found in {include} (install the Python development headers)")
    return include


def build_key(source: bytes, cc: list[str]) -> str:
    """sha256 over what determines the binary: source, compiler, Python version and ABI, platform."""
    h = hashlib.sha256()
    for part in (source, " ".join(cc).encode(), sys.version.encode(), sys.implementation.cache_tag.encode(),
                 sysconfig.get_platform().encode(), (sysconfig.get_config_var("EXT_SUFFIX") or "").encode()):
        h.update(len(part).to_bytes(8, "little"))
        h.update(part)
    return h.hexdigest()


def _temp_dir() -> Path:
    """A private directory of this process, removed at exit (TemporaryDirectory's finalizer)."""
    global _temp
    if _temp is None:
        _temp = tempfile.TemporaryDirectory(prefix="tkpy-native-")
    return Path(_temp.name)


def _mac(key: bytes, path: Path, data: bytes) -> bytes:
    return cache.mac(key, b"tkpy-native", path.name.encode(), data).encode()


def _open_verified(path: Path, key: bytes) -> Optional[int]:
    """A descriptor of the build at `path` if the file is ours, writable by no one else, and its bytes
    (read from that descriptor) match the MAC beside it; None otherwise."""
    fd = cache.open_owned(path)
    if fd is None:
        return None
    with os.fdopen(os.dup(fd), "rb") as f:
        data = f.read()
    tag = cache.read_owned(path.with_name(path.name + ".mac"))
    if tag is None or not hmac.compare_digest(tag, _mac(key, path, data)):
        os.close(fd)
        return None
    return fd


def _compile(cc: list[str], include: Path, path: Path, key: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    cmd = cc + ["-O2", "-shared", "-fPIC", "-std=c11", "-Wall", f"-I{include}", str(SOURCE), "-o", tmp]
    if sys.platform == "darwin":
        cmd += ["-undefined", "dynamic_lookup"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            raise NativeBuildError(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr.strip()}")
        os.chmod(tmp, 0o700)    # the linker's mode follows the umask: never group-writable
        with open(tmp, "rb") as f:
            data = f.read()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        cache.atomic_write(path.with_name(path.name + ".mac"), _mac(key, path, data))
    except (OSError, subprocess.SubprocessError) as e:
        raise NativeBuildError(f"could not run the C compiler: {e}") from e
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build(directory: Optional[Path] = None, *, force: bool = False) -> Path:
    """Compile the extension into a private directory (``<cache>/native``, or a temporary one where
    there is no disk cache) unless a verified build is there; return the shared library's path."""
    cc = compiler()
    include = python_include()
    source = SOURCE.read_bytes()
    if directory is None:
        r = cache.root()
        directory = r / "native" if r is not None else _temp_dir()
    directory = cache.private_dir(directory)
    suffix = sysconfig.get_config_var("EXT_SUFFIX") or ".so"
    path = directory / f"{MODULE_NAME}-{build_key(source, cc)[:24]}{suffix}"
    key = cache.secret_key(directory)

    def ok() -> bool:
        fd = _open_verified(path, key)
        if fd is not None:
            os.close(fd)
        return fd is not None

    if force or not ok():
        with cache.file_lock(path.with_name(path.name + ".lock")):   # one build across processes
            if force or not ok():
                _compile(cc, include, path, key)
    return path


def _import(path: Path) -> Any:
    """Import the build at `path` from the descriptor just verified (/proc/self/fd/N), so a file put
    at that path after the check is never what runs; without /proc, from a private copy of its bytes."""
    fd = _open_verified(path, cache.secret_key(path.parent))
    if fd is None:
        raise ImportError(f"{path} is not a verified tkpy build")
    where = f"/proc/self/fd/{fd}"
    if not os.path.exists(where):
        copy, where = tempfile.mkstemp(dir=_temp_dir(), suffix=path.name)
        with os.fdopen(os.dup(fd), "rb") as src, os.fdopen(copy, "wb") as dst:
            src.seek(0)
            shutil.copyfileobj(src, dst)
    loader = importlib.machinery.ExtensionFileLoader(MODULE_NAME, where)
    spec = importlib.util.spec_from_file_location(MODULE_NAME, where, loader=loader)
    module = importlib.util.module_from_spec(spec)
    # a failed import leaves its descriptor open: glibc keeps a library whose init failed loaded under
    # its name, so a retry through a reused /proc/self/fd/N would get that stale library back
    spec.loader.exec_module(module)
    os.close(fd)
    module.__file__ = str(path)
    return module


def load() -> Any:
    """The extension module, built (once per machine) and imported on first use, waiting for that; None where it
    cannot be (see the log)."""
    global _module, _tried
    if _tried:
        return _module
    with _lock:
        if not _tried:
            try:
                _module = _build_and_import()
            except (NativeBuildError, ImportError, OSError) as e:
                _unavailable(str(e))
            _tried = True
    return _module


def _proc_address(name: str) -> Optional[int]:
    """The driver's entry point `name` (cuGetProcAddress, CUDA 12.0 semantics; the legacy default stream
    unless cuda-bindings is set to per-thread default streams), or None (logged). Needs a driver."""
    from .driver import _driver, _init_driver

    try:
        _init_driver()
        d = _driver()
        per_thread = os.environ.get("CUDA_PYTHON_CUDA_PER_THREAD_DEFAULT_STREAM", "0") not in ("", "0")
        flags = (d.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_PER_THREAD_DEFAULT_STREAM if per_thread
                 else d.CUdriverProcAddress_flags.CU_GET_PROC_ADDRESS_LEGACY_STREAM)
        err, address, _status = d.cuGetProcAddress(name.encode(), 12000, flags)
        if err != 0 or not address:
            _unavailable(f"cuGetProcAddress({name}) returned {err}, address {address}")
            return None
        return int(address)
    except Exception as e:   # an old driver or bindings: the Python path still works
        _unavailable(f"cuGetProcAddress({name}) failed: {e}")
        return None


def _build_and_import() -> Any:
    try:
        path = build()
    except OSError:         # an unusable cache directory: build in a temporary one
        path = build(_temp_dir())
    try:
        return _import(path)
    except ImportError:     # an unloadable cached build: rebuild it once
        return _import(build(path.parent, force=True))


def _start_locked() -> None:
    """The background load (:func:`load`: built once per machine, then imported), begun unless it has been. The
    thread is not a daemon: a process that exits meanwhile waits for the build to finish, so that the next one
    finds it."""
    global _thread
    if _thread is None:
        _thread = threading.Thread(target=_load_in_background, name="tkpy-native-launcher")
        _thread.start()


def _load_in_background() -> None:
    module = load()
    with _waiting_lock:
        waiting = list(_waiting)
        _waiting.clear()
    if module is not None:
        for ref in waiting:
            _call(ref)


def _call(ref: weakref.WeakMethod) -> None:
    method = ref()
    if method is None:      # its kernel is gone
        return
    try:
        method()
    except Exception:       # noqa: BLE001 - that kernel keeps the Python launcher, which works
        log.exception("tkpy: switching %r to the native launcher failed", method)


def on_load(method) -> None:
    """Call the bound `method()` once the extension is loaded: now, on this thread, if it is; else from the
    background thread that loads it (begun here, if none has), when it has the extension. Never where it cannot be
    had, nor under TKPY_NATIVE_LAUNCH=0 (logged). The method is held weakly: a kernel that is gone is not kept alive
    for it."""
    if not enabled():
        _unavailable(f"{ENV}=0")
        return
    ref = weakref.WeakMethod(method)
    if not _tried:
        with _waiting_lock:
            if not _tried:
                _waiting.append(ref)
                _start_locked()
                return
    if _module is not None:
        _call(ref)


def wait(timeout: Optional[float] = None) -> Any:
    """Wait for the background load (:func:`on_load` begins it), if one runs, and the switches it makes; the
    extension module, or None where it is not loaded (yet, after `timeout` seconds)."""
    thread = _thread
    if thread is not None:
        thread.join(timeout)
    return _module if _tried else None


def driver_launch_address() -> Optional[int]:
    """Address of the driver's ``cuLaunchKernelEx``, or None (then the Python launcher serves)."""
    global _launch_address
    if _launch_address is None:
        _launch_address = _proc_address("cuLaunchKernelEx")
    return _launch_address


def driver_context_api() -> Optional[tuple]:
    """Addresses of the driver's (cuCtxGetCurrent, cuCtxPushCurrent, cuCtxPopCurrent), with which an entry launches
    under its device's context (native_launch.c), or None (then the Python launcher serves)."""
    global _context_api
    if _context_api is None:
        api = tuple(_proc_address(name) for name in ("cuCtxGetCurrent", "cuCtxPushCurrent", "cuCtxPopCurrent"))
        _context_api = api if None not in api else None
    return _context_api


# ---------------------------------------------------------------------------
# what the kernel layer builds
# ---------------------------------------------------------------------------


def spec_kinds(module: Any, specs) -> bytes:
    """One byte per kernel argument: tensor, constexpr or runtime scalar."""
    return bytes(getattr(module, _SPEC_KINDS.get(s.kind, "SPEC_SCALAR")) for s in specs)


def launcher(kernel, fast: dict) -> Any:
    """A native launcher for `kernel` over its cache `fast` (key -> :func:`entry`), sharing its slow path, or None
    when the extension (:func:`load`) or the driver's launch function is unavailable."""
    module = load()
    if module is None or driver_launch_address() is None or driver_context_api() is None:
        return None
    return module.Launcher(spec_kinds(module, kernel.specs), fast, kernel._slow_launch)


def layout(module: Any, slots, specs, params) -> tuple:
    """The extension's layout of a kernel's parameter slots: (kind, offset, source, arg, index) each.

    The offsets are the ParamBuffer's, so both paths share one layout computation."""
    out = []
    maps = 0
    for slot, kind, offset in zip(slots, params.kinds, params.offsets):
        src = slot.source
        if src[0] == "dim":
            arg, index = dim_position(specs, src[1])
        elif src[0] == "tmap":
            arg, index = src[1], maps
            maps += 1
        elif src[0] in ("ptr", "scalar"):
            arg, index = src[1], 0
        else:
            raise ValueError(f"the native launcher serves packed tensors only, not a {src[0]!r} slot")
        out.append((module.KINDS[_KIND_ALIASES.get(kind, kind)], offset, module.SOURCES[src[0]], arg, index))
    return tuple(out)


def entry(slots, specs, launcher, params, tensor_maps: tuple, device: int, stream_of,
          *, launch_address: Optional[int] = None, context_api: Optional[tuple] = None, failed=None) -> Any:
    """The native entry of one specialization on one device (what ``kernel._fast`` maps its key to).

    `launcher` is the launching.Launcher (function, block, shared memory, cluster, the context its launches run
    under; its handle_error deals with failed launches), `params` a ParamBuffer of the layout
    (``launch_prepacked`` launches it as is). `launch_address` and `context_api` stand in for the driver's
    (driver_launch_address, driver_context_api) where given (tests, benchmarks).
    ``failed(err, grid, stream, params_address)`` gets a failed launch's own packed block (on the calling
    thread's C stack, valid during the call): a retry from a buffer shared between threads could launch
    with another thread's arguments.
    """
    module = load()
    if failed is None:
        def failed(err, grid, stream, params_address):
            launcher.handle_error(_cu_result(err), grid, stream, params_address)
    function = launcher.function
    return module.Entry(
        launch=launch_address if launch_address is not None else driver_launch_address(),
        function=int(function) if function is not None else 0,
        block=tuple(launcher.block), smem=launcher.dynamic_smem,
        cluster=tuple(launcher.cluster) if launcher.cluster is not None else None,
        dependent_launch=launcher.dependent_launch,
        layout=layout(module, slots, specs, params), size=params.size, spec_kinds=spec_kinds(module, specs),
        tensor_maps=tuple(tensor_maps), device=device, stream_of=stream_of, failed=failed, params=params,
        params_address=params.address, context=launcher.context,
        context_api=(context_api or driver_context_api()) if launcher.context else None)


def _cu_result(err: int) -> Any:
    from .driver import _driver

    try:
        return _driver().CUresult(err)
    except Exception:   # a code this cuda-bindings does not know: report the number
        return err


__all__ = ["ENV", "NativeBuildError", "build", "driver_context_api", "driver_launch_address", "enabled", "entry",
           "launcher", "load", "on_load", "wait"]
