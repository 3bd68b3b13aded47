"""Loading modules onto a device and launching their kernels there.

Launch-path design (host overhead budget of a tkpy call is ~5 us):

* :class:`~tkpy.runtime.params.ParamBuffer` owns, per kernel specialization, one contiguous
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

import functools
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from .driver import (CUDA_ERROR_INVALID_CONTEXT, _driver, _resolve_device, check, compute_capability, cu_stream,
                     current_context, device_context, driver_error, pushed_context, max_shared_per_block_optin)
from .errors import DriverError
from .params import ParamBuffer

if TYPE_CHECKING:  # pragma: no cover
    from .nvrtc import CompiledModule


# ---------------------------------------------------------------------------
# module loading
# ---------------------------------------------------------------------------


@dataclass(eq=False)  # identity hash: usable as a dict key
class LoadedKernel:
    """A kernel loaded into one device's primary context (cached per device); `context` is that context's handle,
    under which its launches run (Launcher)."""

    kernel_name: str
    device_index: int
    function: Any  # CUfunction
    module: Any  # CUmodule; kept referenced so the function stays valid
    num_regs: int
    static_smem: int
    max_threads_per_block: int
    context: int = 0  # the device's primary context (a handle)
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
        return Launcher(self.function, block, dynamic_smem, cluster, kernel=self, dependent_launch=dependent_launch,
                        context=self.context)


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
    with device_context(dev) as ctx:
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
            context=int(ctx),
            function=fn,
            module=mod,
            num_regs=attr(fa.CU_FUNC_ATTRIBUTE_NUM_REGS),
            static_smem=attr(fa.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
            max_threads_per_block=attr(fa.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
        )



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

    `context` (a handle; LoadedKernel.launcher passes its device's primary context): every launch runs under it,
    whichever context the calling thread has current, so that the function, the stream (0, the legacy default
    stream, is the current context's) and the arguments all belong to the kernel's device. Where the thread's
    current context is another (a thread whose current device is not the tensors') or none (a fresh thread), the
    launch pushes the device's primary context for the call and pops it after; otherwise it costs one
    cuCtxGetCurrent. 0: launch under whatever context is current (a bare CUfunction).
    """

    __slots__ = ("function", "block", "dynamic_smem", "cluster", "dependent_launch", "kernel", "context", "_configs",
                 "_launch", "_max_configs")

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
        context: int = 0,
    ) -> None:
        self.function = function
        self.block = _dim3(block, "block")
        self.dynamic_smem = int(dynamic_smem)
        self.cluster = None if cluster is None else _dim3(cluster, "cluster")
        self.dependent_launch = bool(dependent_launch)
        self.kernel = kernel
        if context and kernel is None:
            raise ValueError("a Launcher bound to a context needs its LoadedKernel (kernel=...): the device to push")
        self.context = int(context)
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
        err = self._run(cfg, params.address)
        if err:
            self.handle_error(err, grid, stream_handle, params.address)

    def launch_address(self, grid: tuple[int, int, int], stream_handle: int, params_address: int) -> None:
        """Same as calling, with a raw ``void**`` address instead of a ParamBuffer."""
        try:
            cfg = self._configs[grid, stream_handle]
        except KeyError:
            cfg = self.config(grid, stream_handle)
        err = self._run(cfg, params_address)
        if err:
            self.handle_error(err, grid, stream_handle, params_address)

    def _run(self, cfg: Any, params_address: int) -> Any:
        """cuLaunchKernelEx under the launcher's context (see the class): its CUresult."""
        if not self.context or current_context() == self.context:
            return self._launch(cfg, self.function, params_address, 0)[0]
        with pushed_context(self.kernel.device_index):
            return self._launch(cfg, self.function, params_address, 0)[0]

    def prepare(self, grid: tuple[int, int, int], stream_handle: int, params: ParamBuffer | int) -> Callable[[], tuple]:
        """A zero-argument callable doing just ``cuLaunchKernelEx`` for a fixed
        (grid, stream, param buffer): the cheapest launch cuda-bindings allows
        (with a context, one cuCtxGetCurrent before it: the class says why).

        It returns the raw result tuple and does NOT check it::

            go = launcher.prepare(grid, stream, pb)   # once per (specialization, stream)
            pb.pack(...)                              # per call
            err = go()[0]
            if err:
                launcher.handle_error(err, grid, stream, pb.address)
        """
        address = params if isinstance(params, int) else params.address
        go = functools.partial(self._launch, self.config(grid, stream_handle), self.function, address, 0)
        if not self.context:
            return go
        context, device = self.context, self.kernel.device_index

        def on_device() -> tuple:
            if current_context() == context:
                return go()
            with pushed_context(device):
                return go()
        return on_device

    def handle_error(self, err: Any, grid: Any, stream_handle: int, params_address: int) -> None:
        """Deal with a failed launch: if the calling thread had no current
        context (a fresh Python thread), or another device's, retry once under
        the kernel's device's primary context (pushed for the launch); otherwise raise
        :class:`DriverError` with the launch configuration in the message."""
        if int(err) == CUDA_ERROR_INVALID_CONTEXT and self.kernel is not None:
            with pushed_context(self.kernel.device_index):
                err = self._launch(self.config(grid, stream_handle), self.function, params_address, 0)[0]
            if not err:
                return
        raise driver_error(
            err,
            f"cuLaunchKernelEx(grid={grid}, block={self.block}, dynamic_smem={self.dynamic_smem}, "
            f"cluster={self.cluster}, dependent_launch={self.dependent_launch}, stream=0x{int(stream_handle):x})"
            + (f" for '{self.kernel.kernel_name}'" if self.kernel is not None else ""),
        )



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
    "LoadedKernel",
    "Launcher",
    "launch",
    "load_function",
    "load_kernel",
    "make_launch_config",
]
