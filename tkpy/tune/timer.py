"""How tk.autotune times a configuration: `GpuTimer`, or any object with the same three methods (a test's fake)."""
from __future__ import annotations

import contextlib

from ..interpret import interpret_requested
from ..runtime import gpu_available, sm_count
from ..runtime.timing import median_ms

BUDGET_MS = 100        # replays of one configuration last about this long


class GpuTimer:
    """Times on the tensors' CUDA device: the median of CUDA-graph replays (tkpy.runtime.timing, as the benchmarks
    time), each configuration warmed up first."""

    def unavailable(self) -> str | None:
        """Why nothing can be timed here (then tk.autotune runs the first configuration), or None."""
        if interpret_requested():
            return "TKPY_INTERPRET=1 runs kernels on the CPU interpreter"
        if not gpu_available():
            return "no Hopper GPU"
        return None

    def device(self, tensors: list) -> tuple[str, int]:
        """(name, SM count) of the GPU the tensors are on (the current one without tensors)."""
        import torch

        index = cuda_index(tensors)
        index = torch.cuda.current_device() if index is None else index
        return torch.cuda.get_device_name(index), sm_count(index)

    def __call__(self, fn) -> float:
        """Milliseconds per call of `fn` (a launch)."""
        import torch

        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("tk.autotune cannot time configurations inside a CUDA graph capture: make the first "
                               "call (which tunes, or reads the cached winner) before capturing")
        return median_ms(fn, BUDGET_MS)


def cuda_index(tensors) -> int | None:
    """The device index of the first CUDA tensor in `tensors`, None where there is none."""
    return next((t.get_device() for t in tensors if t.is_cuda), None)


@contextlib.contextmanager
def on_device_of(tensors):
    """The block with torch's current device set to the tensors' (as it is where none is a CUDA tensor): the timing's
    CUDA graph, side stream and events are the current device's, while a kernel launches on its tensors' device's
    current stream, so the two must be one device (tensors on cuda:1 timed from a thread on cuda:0)."""
    index = cuda_index(tensors)
    if index is None:
        yield
        return
    import torch

    with torch.cuda.device(index):
        yield
