"""The CUDA driver as tkpy uses it: its lazy import and error checking, availability, each device's primary
context, device attributes, streams, and the debug mode's calls. Loading and launching are in
:mod:`tkpy.runtime.launching`, parameter blocks in :mod:`tkpy.runtime.params`.

``cuda.bindings.driver`` is imported with this module where the machine has an NVIDIA driver
(:data:`NVIDIA_CONTROL_DEVICE`), else on first use; torch's CUDA state is touched lazily. Importing this
module (and tkpy) never needs a GPU or even libcuda.
"""

from __future__ import annotations

import ctypes
import os
import threading
from contextlib import contextmanager
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Iterator

from .errors import DriverError, NoGPUError

if TYPE_CHECKING:  # pragma: no cover
    from .launching import LoadedKernel

#: Dynamic shared memory above this needs the per-function opt-in attribute.
DEFAULT_SMEM_LIMIT = 48 * 1024

CUDA_ERROR_INVALID_CONTEXT = 201    # a call that needs a current context made without one

# ---------------------------------------------------------------------------
# lazy driver import, error checking
# ---------------------------------------------------------------------------

_drv: Any = None
_init_lock = threading.RLock()
_initialized = False


def _driver() -> Any:
    """``cuda.bindings.driver``, imported on first use."""
    global _drv
    if _drv is None:
        try:
            from cuda.bindings import driver
        except ImportError as e:  # pragma: no cover - depends on the install
            raise NoGPUError("cuda-bindings is not installed: pip install 'cuda-bindings>=13'") from e
        _drv = driver
    return _drv


#: The NVIDIA driver's control device. Where there is one, the driver bindings are imported with tkpy (their extension
#: module and its ~130 enum types: 20 ms of a warm first call under cProfile on the H200 host) rather than in the
#: process's first launch; on a machine without one (CPU-only CI) importing tkpy does no more than before.
NVIDIA_CONTROL_DEVICE = "/dev/nvidiactl"


def _import_where_a_gpu_is() -> None:
    if os.path.exists(NVIDIA_CONTROL_DEVICE):
        try:
            _driver()
        except Exception:   # noqa: BLE001 - no bindings, a broken install: their first use says what is wrong
            pass


def _error_text(err: Any) -> tuple[str, str]:
    d = _driver()
    try:
        rc, name = d.cuGetErrorName(err)
        name_s = name.decode() if rc == 0 and name else str(err)
        rc, msg = d.cuGetErrorString(err)
        msg_s = msg.decode() if rc == 0 and msg else ""
    except Exception:  # error while reporting an error: keep the original visible
        name_s, msg_s = str(err), ""
    return name_s, msg_s


def driver_error(err: Any, what: str = "") -> DriverError:
    """Build a :class:`DriverError` for a failed ``CUresult``."""
    name, msg = _error_text(err)
    prefix = f"{what}: " if what else ""
    return DriverError(f"{prefix}{name} ({int(err)}): {msg}", code=int(err), name=name)


def check(result: tuple, what: str = "") -> Any:
    """Unwrap a cuda-bindings result tuple ``(CUresult, *values)``.

    Raises :class:`DriverError` (with cuGetErrorName/cuGetErrorString) on
    failure; returns None, the single value, or the tuple of values.
    """
    err = result[0]
    if err != 0:
        raise driver_error(err, what)
    n = len(result)
    if n == 1:
        return None
    return result[1] if n == 2 else result[1:]


_import_where_a_gpu_is()


def _init_driver() -> None:
    global _initialized
    if _initialized:
        return
    with _init_lock:
        if _initialized:
            return
        d = _driver()
        try:
            res = d.cuInit(0)
        except Exception as e:  # libcuda.so missing: cuda-pathfinder raises
            raise NoGPUError(f"the CUDA driver library could not be loaded ({e})") from e
        check(res, "cuInit")
        _initialized = True


# ---------------------------------------------------------------------------
# availability
# ---------------------------------------------------------------------------


@lru_cache(maxsize=1)
def gpu_available() -> bool:
    """True when torch sees a CUDA device of compute capability >= 9.0 and
    cuda-bindings' driver module imports (tkpy targets Hopper: sm_90a)."""
    try:
        import torch

        if not torch.cuda.is_available():
            return False
        if torch.cuda.get_device_capability(torch.cuda.current_device()) < (9, 0):
            return False
        from cuda.bindings import driver  # noqa: F401
    except Exception:
        return False
    return True


def require_gpu() -> None:
    """Raise :class:`NoGPUError` explaining what is missing, if anything."""
    if gpu_available():
        return
    try:
        import torch
    except ImportError:
        raise NoGPUError("tkpy needs PyTorch with CUDA support; torch is not installed") from None
    if not torch.cuda.is_available():
        raise NoGPUError(
            "tkpy needs an NVIDIA Hopper GPU (sm_90), but torch.cuda.is_available() is False "
            f"(torch {torch.__version__}, built for CUDA {torch.version.cuda})"
        )
    cap = torch.cuda.get_device_capability(torch.cuda.current_device())
    if cap < (9, 0):
        raise NoGPUError(
            f"tkpy kernels use Hopper-only instructions (wgmma, TMA) and need compute capability "
            f"9.0; the current device {torch.cuda.get_device_name()} is {cap[0]}.{cap[1]}"
        )
    raise NoGPUError("cuda-bindings' driver module could not be imported: pip install 'cuda-bindings>=13'")


def _resolve_device(device_index: int | None) -> int:
    if device_index is not None:
        return int(device_index)
    import torch

    return torch.cuda.current_device()


# ---------------------------------------------------------------------------
# contexts (torch uses each device's primary context)
# ---------------------------------------------------------------------------

_primary_ctx: dict[int, Any] = {}
_devices: dict[int, Any] = {}


def _device(device_index: int) -> Any:
    dev = _devices.get(device_index)
    if dev is None:
        _init_driver()
        dev = check(_driver().cuDeviceGet(device_index), f"cuDeviceGet({device_index})")
        _devices[device_index] = dev
    return dev


def primary_context(device_index: int) -> Any:
    """The device's primary context (the one torch uses), retained once.

    Initializes torch's CUDA state first so torch and tkpy agree on it.
    """
    ctx = _primary_ctx.get(device_index)
    if ctx is None:
        with _init_lock:
            ctx = _primary_ctx.get(device_index)
            if ctx is None:
                try:
                    import torch

                    torch.cuda.init()
                except ImportError:  # pragma: no cover - torch is a dependency
                    pass
                ctx = check(_driver().cuDevicePrimaryCtxRetain(_device(device_index)), "cuDevicePrimaryCtxRetain")
                _primary_ctx[device_index] = ctx
    return ctx


def current_context() -> int:
    """The handle of the calling thread's current context, 0 where it has none (a fresh thread). The
    launch paths compare it with their device's primary context (launching.Launcher, native_launch.c)."""
    cur = check(_driver().cuCtxGetCurrent(), "cuCtxGetCurrent")
    return 0 if cur is None else int(cur)


@contextmanager
def device_context(device_index: int) -> Iterator[Any]:
    """Run a block with ``device_index``'s primary context current.

    If another context is current it is pushed over and restored afterwards;
    if none is, the primary context is made current and left so (as torch
    would)."""
    d = _driver()
    ctx = primary_context(device_index)
    cur = check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if cur is not None and int(cur) == int(ctx):
        yield ctx
        return
    if cur is None or int(cur) == 0:
        check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
        yield ctx
        return
    check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield ctx
    finally:
        check(d.cuCtxPopCurrent(), "cuCtxPopCurrent")


@contextmanager
def pushed_context(device_index: int) -> Iterator[Any]:
    """Run a block (a launch) with ``device_index``'s primary context pushed over whatever the thread has current,
    none included, and popped after: the thread is left as it was, as native_launch.c leaves it."""
    d = _driver()
    ctx = primary_context(device_index)
    check(d.cuCtxPushCurrent(ctx), "cuCtxPushCurrent")
    try:
        yield ctx
    finally:
        check(d.cuCtxPopCurrent(), "cuCtxPopCurrent")


CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704
_peer_access: set = set()


def enable_peer_access(device_index: int, peer_index: int) -> None:
    """Let kernels on `device_index` read and write `peer_index`'s memory (cuCtxEnablePeerAccess from the device's
    primary context to the peer's), once per pair; already enabled (by torch, say) is fine."""
    if (device_index, peer_index) in _peer_access:
        return
    with _init_lock:
        if (device_index, peer_index) in _peer_access:
            return
        peer = primary_context(peer_index)
        with device_context(device_index):
            err = _driver().cuCtxEnablePeerAccess(peer, 0)[0]
        if int(err) not in (0, CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED):
            raise driver_error(err, f"cuCtxEnablePeerAccess(cuda:{device_index} -> cuda:{peer_index}): can these "
                                    "GPUs reach each other (nvidia-smi topo -m)?")
        _peer_access.add((device_index, peer_index))


# ---------------------------------------------------------------------------
# device attributes
# ---------------------------------------------------------------------------


@lru_cache(maxsize=None)
def device_attribute(name: str, device_index: int) -> int:
    """``cuDeviceGetAttribute(CU_DEVICE_ATTRIBUTE_<name>)``, cached."""
    d = _driver()
    attr = getattr(d.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name.upper()}")
    return int(check(d.cuDeviceGetAttribute(attr, _device(device_index)), f"cuDeviceGetAttribute({name})"))


def sm_count(device_index: int) -> int:
    return device_attribute("MULTIPROCESSOR_COUNT", device_index)


def max_shared_per_block_optin(device_index: int) -> int:
    """Largest shared memory per block (static + dynamic) after opt-in, bytes
    (227 KiB = 232448 on H100/H200)."""
    return device_attribute("MAX_SHARED_MEMORY_PER_BLOCK_OPTIN", device_index)


def compute_capability(device_index: int) -> tuple[int, int]:
    return (
        device_attribute("COMPUTE_CAPABILITY_MAJOR", device_index),
        device_attribute("COMPUTE_CAPABILITY_MINOR", device_index),
    )


# ---------------------------------------------------------------------------
# streams
# ---------------------------------------------------------------------------

_stream_getter: Any = None


def stream_getter() -> Any:
    """The fastest callable ``device_index -> raw cudaStream_t int`` for torch's
    current stream (bind it once in hot code instead of calling
    :func:`current_stream_handle`)."""
    global _stream_getter
    if _stream_getter is None:
        import torch

        fast = getattr(torch._C, "_cuda_getCurrentRawStream", None)
        if fast is not None:
            _stream_getter = fast
        else:  # pragma: no cover - older/newer torch without the private hook
            _stream_getter = lambda idx: torch.cuda.current_stream(idx).cuda_stream  # noqa: E731
    return _stream_getter


def current_stream_handle(device_index: int) -> int:
    """Raw handle of torch's current stream on ``device_index`` (0 = legacy default)."""
    return stream_getter()(device_index)


_streams: dict[int, Any] = {}


def cu_stream(handle: int) -> Any:
    """A cached ``CUstream`` wrapper for a raw stream handle."""
    s = _streams.get(handle)
    if s is None:
        s = _driver().CUstream(handle)
        _streams[handle] = s
    return s


# ---------------------------------------------------------------------------
# debug mode (runtime/debug.py): mapped host memory, module globals, a bounded synchronize
# ---------------------------------------------------------------------------

_CUDA_ERROR_NOT_READY = 600


def host_mapped_alloc(size: int, device_index: int) -> tuple[int, int]:
    """``size`` bytes of pinned host memory mapped into the device's address space (cuMemHostAlloc with
    DEVICEMAP | PORTABLE): (host address, device address). The host can read it after a kernel broke the
    context (a trap), when device memory no longer can be. Never freed (a few bytes per debug module)."""
    d = _driver()
    with device_context(device_index):
        flags = d.CU_MEMHOSTALLOC_DEVICEMAP | d.CU_MEMHOSTALLOC_PORTABLE
        host = check(d.cuMemHostAlloc(int(size), flags), "cuMemHostAlloc(DEVICEMAP)")
        device = check(d.cuMemHostGetDevicePointer(host, 0), "cuMemHostGetDevicePointer")
    return int(host), int(device)


def set_module_pointer(loaded: "LoadedKernel", symbol: str, value: int) -> None:
    """Write the 64-bit ``value`` into the __device__ pointer ``symbol`` of a loaded module (cuModuleGetGlobal)."""
    d = _driver()
    with device_context(loaded.device_index):
        ptr, size = check(d.cuModuleGetGlobal(loaded.module, symbol.encode()), f"cuModuleGetGlobal({symbol!r})")
        if int(size) != 8:
            raise DriverError(f"__device__ {symbol} of '{loaded.kernel_name}' is {int(size)} bytes, not a pointer")
        word = ctypes.c_uint64(int(value))
        check(d.cuMemcpyHtoD(ptr, ctypes.addressof(word), 8), f"cuMemcpyHtoD({symbol})")


def stream_is_capturing(stream_handle: int, device_index: int) -> bool:
    """Whether the stream is being captured into a CUDA graph (then it cannot be synchronized)."""
    d = _driver()
    with device_context(device_index):
        status = check(d.cuStreamIsCapturing(cu_stream(int(stream_handle))), "cuStreamIsCapturing")
    return int(status) != int(d.CUstreamCaptureStatus.CU_STREAM_CAPTURE_STATUS_NONE)


def synchronize_stream(stream_handle: int, timeout_s: float, device_index: int) -> bool:
    """Wait for the stream's work: True once it has finished, False if it is still running after ``timeout_s``
    seconds (0: wait for ever, cuStreamSynchronize). A failed kernel raises :class:`DriverError`."""
    d = _driver()
    stream = cu_stream(int(stream_handle))
    with device_context(device_index):
        if not timeout_s:
            check(d.cuStreamSynchronize(stream), "cuStreamSynchronize")
            return True
        import time

        deadline = time.monotonic() + timeout_s
        pause = 1e-5
        while True:
            err = d.cuStreamQuery(stream)[0]
            if int(err) == 0:
                return True
            if int(err) != _CUDA_ERROR_NOT_READY:
                d.cuStreamSynchronize(stream)   # (fails at once too; but it, unlike a query, flushes device printf)
                raise driver_error(err, "cuStreamQuery (after a debug-mode launch)")
            if time.monotonic() > deadline:
                return False
            time.sleep(pause)
            pause = min(pause * 2, 1e-3)




__all__ = [
    "CUDA_ERROR_INVALID_CONTEXT",
    "DEFAULT_SMEM_LIMIT",
    "check",
    "compute_capability",
    "cu_stream",
    "current_context",
    "pushed_context",
    "current_stream_handle",
    "device_attribute",
    "device_context",
    "driver_error",
    "enable_peer_access",
    "gpu_available",
    "host_mapped_alloc",
    "max_shared_per_block_optin",
    "primary_context",
    "require_gpu",
    "set_module_pointer",
    "sm_count",
    "stream_getter",
    "stream_is_capturing",
    "synchronize_stream",
]
