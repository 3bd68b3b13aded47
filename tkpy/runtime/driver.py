"""Everything that needs a GPU: module loading, parameter packing, launching.

``cuda.bindings.driver`` and torch's CUDA state are touched lazily, so
importing this module (and tkpy) never needs a GPU or even libcuda.

Launch-path design (host overhead budget of a tkpy call is ~5 us):

* :class:`ParamBuffer` owns, per kernel specialization, one contiguous
  64-byte-aligned argument block plus the ``void*[]`` array pointing into it.
  Its ``address`` (a plain ``int``) is handed to ``cuLaunchKernelEx`` as
  ``kernelParams``: cuda-bindings treats an ``int`` as an already built
  ``void**`` and passes it straight through, whereas its ``(values, types)``
  tuple form allocates and converts every argument on each call (~1 us more).
  The driver copies the arguments at launch time (also when a stream is being
  captured into a CUDA graph), so the buffer can be refilled right after the
  launch call returns. It is NOT thread-safe: use one buffer per thread.
* :class:`Launcher` binds (function, block, dynamic smem, cluster) and keeps
  one ready ``CUlaunchConfig`` per (grid, raw stream handle), so a call is a
  single dict lookup plus the ``cuLaunchKernelEx`` call. ``CUstream``
  wrappers are cached per raw handle (building one per call costs ~1.5 us).
"""

from __future__ import annotations

import ctypes
import functools
import struct
import threading
from collections.abc import Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, Callable, Iterator

from .errors import DriverError, NoGPUError

if TYPE_CHECKING:  # pragma: no cover
    from .nvrtc import CompiledModule

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


def ensure_context(device_index: int) -> Any:
    """Make the device's primary context current on this thread if the thread
    has no current context (a fresh Python thread has none until a torch CUDA
    call); an existing current context is left alone. Returns the primary ctx."""
    d = _driver()
    ctx = primary_context(device_index)
    cur = check(d.cuCtxGetCurrent(), "cuCtxGetCurrent")
    if cur is None or int(cur) == 0:
        check(d.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


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
# module loading
# ---------------------------------------------------------------------------


@dataclass(eq=False)  # identity hash: usable as a dict key
class LoadedKernel:
    """A kernel loaded into one device's primary context (cached per device)."""

    kernel_name: str
    device_index: int
    function: Any  # CUfunction
    module: Any  # CUmodule; kept referenced so the function stays valid
    num_regs: int
    static_smem: int
    max_threads_per_block: int
    dynamic_smem_configured: int = 0  # current MAX_DYNAMIC_SHARED_SIZE_BYTES opt-in
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def ensure_dynamic_smem(self, dynamic_smem: int) -> None:
        """Opt the function in to ``dynamic_smem`` bytes (no-op if already)."""
        if dynamic_smem <= self.dynamic_smem_configured or dynamic_smem <= 0:
            return
        with self._lock:
            if dynamic_smem <= self.dynamic_smem_configured:
                return
            limit = max_shared_per_block_optin(self.device_index)
            if self.static_smem + dynamic_smem > limit:
                raise DriverError(
                    f"kernel '{self.kernel_name}' needs {self.static_smem} B static + {dynamic_smem} B "
                    f"dynamic = {self.static_smem + dynamic_smem} B shared memory per block, but device "
                    f"{self.device_index} allows at most {limit} B ({limit // 1024} KiB); "
                    f"use smaller tiles or fewer pipeline stages"
                )
            d = _driver()
            with device_context(self.device_index):
                check(
                    d.cuFuncSetAttribute(
                        self.function,
                        d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                        int(dynamic_smem),
                    ),
                    f"cuFuncSetAttribute(MAX_DYNAMIC_SHARED_SIZE_BYTES={dynamic_smem}) for '{self.kernel_name}'",
                )
            self.dynamic_smem_configured = int(dynamic_smem)

    def max_active_clusters(self, block: Sequence[int], dynamic_smem: int, cluster: Sequence[int]) -> int:
        """How many clusters of `cluster` blocks of `block` threads and `dynamic_smem` bytes the device runs at
        once (cuOccupancyMaxActiveClusters; a cluster's blocks share a GPC, so it may be fewer than SMs / cluster
        size): a persistent grid of more clusters runs the rest in a second wave."""
        self.ensure_dynamic_smem(dynamic_smem)
        size = _dim3(cluster, "cluster")
        config = make_launch_config(size, block, dynamic_smem, 0, size)
        with device_context(self.device_index):
            fits = check(_driver().cuOccupancyMaxActiveClusters(self.function, config),
                         f"cuOccupancyMaxActiveClusters for '{self.kernel_name}' (cluster {size})")
        return int(fits)

    def max_active_blocks(self, threads: int, dynamic_smem: int) -> int:
        """How many blocks of `threads` threads and `dynamic_smem` bytes an SM runs at once
        (cuOccupancyMaxActiveBlocksPerMultiprocessor: registers, shared memory and the launch bounds)."""
        self.ensure_dynamic_smem(dynamic_smem)
        with device_context(self.device_index):
            fits = check(_driver().cuOccupancyMaxActiveBlocksPerMultiprocessor(self.function, threads, dynamic_smem),
                         f"cuOccupancyMaxActiveBlocksPerMultiprocessor for '{self.kernel_name}'")
        return int(fits)

    def launcher(
        self,
        block: tuple[int, int, int],
        dynamic_smem: int = 0,
        cluster: tuple[int, int, int] | None = None,
        dependent_launch: bool = False,
    ) -> "Launcher":
        self.ensure_dynamic_smem(dynamic_smem)
        return Launcher(self.function, block, dynamic_smem, cluster, kernel=self, dependent_launch=dependent_launch)


_loaded: dict[tuple[str, int], LoadedKernel] = {}
_load_lock = threading.Lock()


def load_kernel(module: "CompiledModule", device_index: int | None = None, dynamic_smem: int = 0) -> LoadedKernel:
    """Load ``module`` on ``device_index`` (default: torch's current device),
    once per (module.key, device); opt in to ``dynamic_smem`` if needed."""
    dev = _resolve_device(device_index)
    lk = _loaded.get((module.key, dev))
    if lk is None:
        with _load_lock:
            lk = _loaded.get((module.key, dev))
            if lk is None:
                lk = _load(module, dev)
                _loaded[(module.key, dev)] = lk
    if dynamic_smem > lk.dynamic_smem_configured:
        lk.ensure_dynamic_smem(dynamic_smem)
    return lk


def load_function(module: "CompiledModule", device_index: int | None = None, dynamic_smem: int = 0) -> Any:
    """Like :func:`load_kernel` but returns just the ``CUfunction``."""
    return load_kernel(module, device_index, dynamic_smem).function


def _load(module: "CompiledModule", dev: int) -> LoadedKernel:
    d = _driver()
    with device_context(dev):
        res = d.cuModuleLoadData(module.cubin)
        if res[0] != 0:
            err = driver_error(res[0], f"cuModuleLoadData for kernel '{module.kernel_name}'")
            try:
                cc = compute_capability(dev)
                err.args = (f"{err.args[0]} [cubin built for {module.arch}; device {dev} is sm_{cc[0]}{cc[1]}]",)
            except Exception:
                pass
            raise err
        mod = res[1]
        fn = check(
            d.cuModuleGetFunction(mod, module.kernel_name.encode()),
            f"cuModuleGetFunction('{module.kernel_name}')",
        )
        fa = d.CUfunction_attribute

        def attr(a: Any) -> int:
            return int(check(d.cuFuncGetAttribute(a, fn), f"cuFuncGetAttribute({a})"))

        return LoadedKernel(
            kernel_name=module.kernel_name,
            device_index=dev,
            function=fn,
            module=mod,
            num_regs=attr(fa.CU_FUNC_ATTRIBUTE_NUM_REGS),
            static_smem=attr(fa.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            max_threads_per_block=attr(fa.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        )


# ---------------------------------------------------------------------------
# kernel parameters
# ---------------------------------------------------------------------------

#: kind -> (struct format, size, alignment)
PARAM_KINDS: dict[str, tuple[str, int, int]] = {
    "ptr": ("Q", 8, 8),
    "u64": ("Q", 8, 8),
    "i64": ("q", 8, 8),
    "i32": ("i", 4, 4),
    "u32": ("I", 4, 4),
    "f32": ("f", 4, 4),
    "f64": ("d", 8, 8),
    "blob128": ("128s", 128, 64),  # e.g. __grid_constant__ const CUtensorMap
}


class ParamBuffer:
    """Pre-allocated, reusable kernel argument block + ``void*[]`` array.

    Built once per kernel specialization from slot kinds (see
    :data:`PARAM_KINDS`). Fill it with ``pack(*values)`` (all slots at once,
    one ``struct.pack_into``, ~0.2 us for 4 slots; returns None) or the
    per-slot setters, then pass :attr:`address` as ``kernelParams``. No
    allocation happens after construction.

    Values must match the kernel's C parameter list in order and type; for a
    ``blob128`` slot pass exactly 128 bytes (or use :meth:`set_blob`, which
    also takes a cuda-bindings ``CUtensorMap`` or anything with ``getPtr()``).
    """

    __slots__ = (
        "kinds",
        "offsets",
        "size",
        "address",
        "_storage",
        "_mv",
        "_base",
        "_anchor",
        "_ptrs",
        "_struct",
        "_slot_structs",
        "pack",
    )

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds: tuple[str, ...] = tuple(kinds)
        fmt = ["<"]
        offsets: list[int] = []
        off = 0
        for k in self.kinds:
            try:
                code, size, align = PARAM_KINDS[k]
            except KeyError:
                raise ValueError(f"unknown parameter kind {k!r}; expected one of {sorted(PARAM_KINDS)}") from None
            pad = (-off) % align
            if pad:
                fmt.append(f"{pad}x")
            off += pad
            offsets.append(off)
            fmt.append(code)
            off += size
        self.offsets: tuple[int, ...] = tuple(offsets)
        self.size: int = max(off, 8)
        # 64 bytes of slack so the block can start on a 64-byte boundary
        # (CUtensorMap must be 64-byte aligned).
        self._storage = bytearray(self.size + 64)
        self._anchor = ctypes.c_char.from_buffer(self._storage)  # also pins the bytearray
        raw = ctypes.addressof(self._anchor)
        shift = (-raw) % 64
        self._base: int = raw + shift
        self._mv = memoryview(self._storage)[shift : shift + self.size]
        n = len(self.kinds)
        self._ptrs = (ctypes.c_void_p * max(n, 1))(*[self._base + o for o in offsets])
        self.address: int = ctypes.addressof(self._ptrs)
        self._struct = struct.Struct("".join(fmt))
        self._slot_structs = tuple(struct.Struct("<" + PARAM_KINDS[k][0]) for k in self.kinds)
        # ``pack(*values)``: all slots in one struct.pack_into; a partial rather
        # than a method/closure because that saves a Python frame (~0.3 us).
        self.pack = functools.partial(self._struct.pack_into, self._mv, 0)

    def __len__(self) -> int:
        return len(self.kinds)

    def __repr__(self) -> str:
        return f"ParamBuffer({list(self.kinds)}, address=0x{self.address:x})"

    # per-slot setters ---------------------------------------------------
    def set(self, i: int, value: Any) -> None:
        self._slot_structs[i].pack_into(self._mv, self.offsets[i], value)

    set_ptr = set_i32 = set_u32 = set_i64 = set_u64 = set_f32 = set_f64 = set

    def set_blob(self, i: int, value: Any) -> None:
        """Copy a 128-byte blob (bytes-like, or an object with ``getPtr()``
        such as cuda-bindings' ``CUtensorMap``) into slot ``i``."""
        if self.kinds[i] != "blob128":
            raise TypeError(f"slot {i} is {self.kinds[i]!r}, not 'blob128'")
        get_ptr = getattr(value, "getPtr", None)
        if get_ptr is not None:
            ctypes.memmove(self._base + self.offsets[i], int(get_ptr()), 128)
            return
        b = memoryview(value).cast("B")
        if b.nbytes != 128:
            raise ValueError(f"blob128 slot needs exactly 128 bytes, got {b.nbytes}")
        self._mv[self.offsets[i] : self.offsets[i] + 128] = b

    # inspection ----------------------------------------------------------
    def slot_address(self, i: int) -> int:
        """Device-visible host address of slot ``i`` (what ``void*[i]`` holds)."""
        return self._base + self.offsets[i]

    def get(self, i: int) -> Any:
        return self._slot_structs[i].unpack_from(self._mv, self.offsets[i])[0]

    def values(self) -> tuple[Any, ...]:
        return self._struct.unpack_from(self._mv, 0)


# ---------------------------------------------------------------------------
# launching
# ---------------------------------------------------------------------------


def _dim3(v: Sequence[int] | int, what: str) -> tuple[int, int, int]:
    if isinstance(v, int):
        return (v, 1, 1)
    t = tuple(int(x) for x in v)
    if not 1 <= len(t) <= 3 or any(x < 1 for x in t):
        raise ValueError(f"{what} must be 1 to 3 positive ints, got {v!r}")
    return t + (1,) * (3 - len(t))  # type: ignore[return-value]


def make_launch_config(
    grid: Sequence[int],
    block: Sequence[int],
    dynamic_smem: int,
    stream_handle: int,
    cluster: Sequence[int] | None = None,
    dependent_launch: bool = False,
) -> Any:
    """Build a ``CUlaunchConfig`` (pure host struct; no GPU needed). `dependent_launch`: the programmatic
    stream serialization attribute (the kernel may start before the previous one on the stream ends; its
    code must wait for it, runtime/dependent_launch.py)."""
    d = _driver()
    g = _dim3(grid, "grid")
    b = _dim3(block, "block")
    cfg = d.CUlaunchConfig()
    cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = g
    cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = b
    cfg.sharedMemBytes = int(dynamic_smem)
    cfg.hStream = cu_stream(int(stream_handle))
    attrs = []
    if cluster is not None:
        c = _dim3(cluster, "cluster")
        for gi, ci, axis in zip(g, c, "xyz"):
            if gi % ci:
                raise ValueError(f"grid {g} is not divisible by cluster {c} along {axis}")
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = c
        attrs.append(attr)
    if dependent_launch:
        attr = d.CUlaunchAttribute()
        attr.id = d.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        attrs.append(attr)
    cfg.attrs = attrs  # the binding copies the structs into its own array
    cfg.numAttrs = len(attrs)
    return cfg


class Launcher:
    """Launches one function with fixed (block, dynamic smem, cluster).

    ``launcher(grid, stream_handle, params)`` costs one dict lookup (ready
    ``CUlaunchConfig`` per (grid, stream)) plus ``cuLaunchKernelEx``. Grids
    and streams should be hashable tuples/ints; keep ``grid`` a 3-tuple of ints.
    """

    __slots__ = ("function", "block", "dynamic_smem", "cluster", "dependent_launch", "kernel", "_configs", "_launch",
                 "_max_configs")

    def __init__(
        self,
        function: Any,
        block: tuple[int, int, int],
        dynamic_smem: int = 0,
        cluster: tuple[int, int, int] | None = None,
        *,
        kernel: LoadedKernel | None = None,
        max_configs: int = 4096,
        dependent_launch: bool = False,
    ) -> None:
        self.function = function
        self.block = _dim3(block, "block")
        self.dynamic_smem = int(dynamic_smem)
        self.cluster = None if cluster is None else _dim3(cluster, "cluster")
        self.dependent_launch = bool(dependent_launch)
        self.kernel = kernel
        self._configs: dict[tuple[Any, int], Any] = {}
        self._launch = _driver().cuLaunchKernelEx
        self._max_configs = max_configs

    def config(self, grid: tuple[int, int, int], stream_handle: int) -> Any:
        cfg = self._configs.get((grid, stream_handle))
        if cfg is None:
            cfg = make_launch_config(grid, self.block, self.dynamic_smem, stream_handle, self.cluster,
                                     self.dependent_launch)
            if len(self._configs) >= self._max_configs:
                self._configs.clear()  # bounded: dynamic grids must not leak
            self._configs[(grid, stream_handle)] = cfg
        return cfg

    def __call__(self, grid: tuple[int, int, int], stream_handle: int, params: ParamBuffer) -> None:
        try:  # subscript, not .get(): one method call less on the hot path
            cfg = self._configs[grid, stream_handle]
        except KeyError:
            cfg = self.config(grid, stream_handle)
        err = self._launch(cfg, self.function, params.address, 0)[0]
        if err:
            self.handle_error(err, grid, stream_handle, params.address)

    def launch_address(self, grid: tuple[int, int, int], stream_handle: int, params_address: int) -> None:
        """Same as calling, with a raw ``void**`` address instead of a ParamBuffer."""
        try:
            cfg = self._configs[grid, stream_handle]
        except KeyError:
            cfg = self.config(grid, stream_handle)
        err = self._launch(cfg, self.function, params_address, 0)[0]
        if err:
            self.handle_error(err, grid, stream_handle, params_address)

    def prepare(self, grid: tuple[int, int, int], stream_handle: int, params: ParamBuffer | int) -> Callable[[], tuple]:
        """A zero-argument callable doing just ``cuLaunchKernelEx`` for a fixed
        (grid, stream, param buffer): the cheapest launch cuda-bindings allows.

        It returns the raw result tuple and does NOT check it::

            go = launcher.prepare(grid, stream, pb)   # once per (specialization, stream)
            pb.pack(...)                              # per call
            err = go()[0]
            if err:
                launcher.handle_error(err, grid, stream, pb.address)
        """
        address = params if isinstance(params, int) else params.address
        return functools.partial(self._launch, self.config(grid, stream_handle), self.function, address, 0)

    def handle_error(self, err: Any, grid: Any, stream_handle: int, params_address: int) -> None:
        """Deal with a failed launch: if the calling thread had no current
        context (a fresh Python thread), make the primary one current and
        retry once; otherwise raise :class:`DriverError` with the launch
        configuration in the message."""
        if int(err) == CUDA_ERROR_INVALID_CONTEXT and self.kernel is not None:
            ensure_context(self.kernel.device_index)
            err = self._launch(self.config(grid, stream_handle), self.function, params_address, 0)[0]
            if not err:
                return
        raise driver_error(
            err,
            f"cuLaunchKernelEx(grid={grid}, block={self.block}, dynamic_smem={self.dynamic_smem}, "
            f"cluster={self.cluster}, dependent_launch={self.dependent_launch}, stream=0x{int(stream_handle):x})"
            + (f" for '{self.kernel.kernel_name}'" if self.kernel is not None else ""),
        )


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


def set_module_pointer(loaded: LoadedKernel, symbol: str, value: int) -> None:
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


_launchers: dict[tuple[Any, ...], Launcher] = {}


def launch(
    function: Any,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    dynamic_smem: int,
    stream_handle: int,
    params: ParamBuffer,
    cluster: tuple[int, int, int] | None = None,
) -> None:
    """Convenience one-shot launch (one extra dict lookup vs. a held :class:`Launcher`).

    ``function`` is a ``CUfunction`` or a :class:`LoadedKernel`; with a
    LoadedKernel the dynamic-smem opt-in is applied automatically. Prefer
    keeping a :class:`Launcher` per specialization in hot code.
    """
    key = (function, block, dynamic_smem, cluster)
    lr = _launchers.get(key)
    if lr is None:
        if isinstance(function, LoadedKernel):
            lr = function.launcher(block, dynamic_smem, cluster)
        else:
            lr = Launcher(function, block, dynamic_smem, cluster)
        _launchers[key] = lr
    lr(grid, stream_handle, params)


__all__ = [
    "DEFAULT_SMEM_LIMIT",
    "PARAM_KINDS",
    "LoadedKernel",
    "Launcher",
    "ParamBuffer",
    "check",
    "compute_capability",
    "cu_stream",
    "current_stream_handle",
    "device_attribute",
    "device_context",
    "driver_error",
    "host_mapped_alloc",
    "ensure_context",
    "gpu_available",
    "launch",
    "load_function",
    "load_kernel",
    "make_launch_config",
    "max_shared_per_block_optin",
    "primary_context",
    "require_gpu",
    "set_module_pointer",
    "sm_count",
    "stream_getter",
    "stream_is_capturing",
    "synchronize_stream",
]
