"""Exceptions and warnings raised by the tkpy runtime layer."""

from __future__ import annotations

try:  # share the package-wide base class when it exists
    from ..errors import TkpyError as _TkpyBase
except ImportError:  # pragma: no cover - runtime used standalone
    _TkpyBase = Exception  # type: ignore[misc,assignment]


class TkpyRuntimeError(_TkpyBase, RuntimeError):  # type: ignore[misc,valid-type]
    """Base class of every error raised by ``tkpy.runtime`` (a ``tkpy.errors.TkpyError``)."""


class CompileError(TkpyRuntimeError):
    """NVRTC rejected the generated CUDA source.

    ``log`` is NVRTC's raw log; ``source`` the generated source it compiled.
    The message itself already points each error at its generated line and at
    the user's Python line (the ``// file.py:LINE`` markers codegen emits).
    """

    def __init__(self, message: str, *, log: str = "", source: str = "") -> None:
        super().__init__(message)
        self.log = log
        self.source = source


class DriverError(TkpyRuntimeError):
    """A CUDA driver API call failed.

    ``code`` is the integer ``CUresult`` (``None`` for failures detected by
    tkpy itself, e.g. "kernel needs more shared memory than the device has"),
    ``name`` its symbolic name such as ``CUDA_ERROR_INVALID_VALUE``.
    """

    def __init__(self, message: str, *, code: int | None = None, name: str = "") -> None:
        super().__init__(message)
        self.code = code
        self.name = name


class GpuTimeoutError(TkpyRuntimeError):
    """Debug mode (``TKPY_DEBUG=1`` or ``tk.kernel(debug=True)``, tkpy/runtime/debug.py): a wait on the GPU timed
    out, so the kernel stopped itself (``__trap()``), or a debug launch did not finish in time. The message names
    the wait (its Python line and op), the block, the warp, the barrier and the phase, as the interpreter's
    :class:`tkpy.DeadlockError` does; ``loc`` is the wait's Python location, ``site`` its tkpy/codegen/debug.py
    Site (None when the kernel ran past the host's limit). The CUDA context cannot be used again."""

    def __init__(self, message: str, *, kernel: str = "", block=None, warp=None, loc=None, site=None, index=None,
                 phase=None, waited_s=None) -> None:
        super().__init__(message)
        self.kernel, self.block, self.warp, self.loc, self.site = kernel, block, warp, loc, site
        self.index, self.phase, self.waited_s = index, phase, waited_s


class GpuBoundsError(TkpyRuntimeError):
    """Debug mode (tkpy/runtime/debug.py): a memory access failed its bounds check on the GPU, so the kernel stopped
    itself (``__trap()``) before making it. The message names the access (its Python line and op), the block, the
    warp, the axis and the range against its bound; the same facts are attributes."""

    def __init__(self, message: str, *, kernel: str = "", block=None, warp=None, loc=None, check=None, axis=None,
                 first=None, last=None, limit=None) -> None:
        super().__init__(message)
        self.kernel, self.block, self.warp, self.loc, self.check = kernel, block, warp, loc, check
        self.axis, self.first, self.last, self.limit = axis, first, last, limit


class NoGPUError(TkpyRuntimeError):
    """No usable (Hopper, sm_90+) GPU is visible to this process."""


class SpillWarning(UserWarning):
    """ptxas spilled registers to local memory for a tkpy kernel."""


__all__ = ["TkpyRuntimeError", "CompileError", "DriverError", "GpuBoundsError", "GpuTimeoutError", "NoGPUError",
           "SpillWarning"]
