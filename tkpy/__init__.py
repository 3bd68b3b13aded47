"""tkpy: a Python tile DSL for NVIDIA Hopper GPUs in the spirit of ThunderKittens.

    import tkpy as tk
    from tkpy import bf16, f32

    @tk.kernel(warps=4)
    def k(x: tk.gl[bf16, "R", 64], y: tk.gl[bf16, "R", 64]): ...

See README.md for the tour.
"""
from .tiles.dtypes import (bf16, fp16, f32, fp32, half, float16, bfloat16, float32, fp8e4m3, fp8e5m2, i32, int32, i64,
                           int64)
from .tiles.types import RT, RV, ST, SV, GL
from .errors import TkpyError, TraceError, ArgumentError, UnsupportedError, InterpretError, DeadlockError
from .runtime.errors import GpuBoundsError, GpuTimeoutError, SpillWarning
from .runtime import gpu_available
from .frontend.kernel import kernel, Kernel
from .frontend.quick_first_call import QuickFirstCall, wait_for_compiles
from .runtime.background import CompilePending
from .frontend.signature import gl, pgl, constexpr, broadcast_dim, tma_layout, tma_ready, ALIGNMENT, FLT_MAX
from .frontend.pgl import PGL
from .tiles.math_approx import LOG2E
from .ir.expr import call, cdiv
from .interpret.launch import interpret_requested
from .interpret.ranks import simulate_ranks, simulated_rank
from .frontend.control import range, if_, else_, let, var, assign, block_idx, grid_dim, warp_id, lane_id, num_warps
from .ops import *  # noqa: F401,F403 - the op namespace is the public API
from .ops import warpgroup, block
from . import templates
from .templates import lcf, lcsf
from . import tune
from .tune import AutotuneWarning, Config, autotune
from ._source_tree import expose_kernels, tree_digest as _tree_digest
from ._version import __version__

expose_kernels(__path__[0])    # `tkpy.kernels` from a checkout's kernels/ (an install carries it)
if not interpret_requested():
    import threading as _threading

    from .runtime.nvrtc import preload as _preload_nvrtc
    _preload_nvrtc()           # the NVRTC library loaded on a thread, ahead of the first compile
    _threading.Thread(target=_tree_digest, name="tkpy-tree-digest", daemon=True).start()   # (spec_records' keys)


def __getattr__(name: str):
    """`tk.zeros` and other names tkpy does not have: say what tkpy calls it (a torch name) or what is close."""
    from .ops.foreign import missing_name

    if name.startswith("__"):
        raise AttributeError(f"module 'tkpy' has no attribute '{name}'")
    raise AttributeError(missing_name(name, globals()))
