"""The CPU interpreter: runs a kernel's traced IR at tile granularity with numpy, no GPU needed.

    kernel.interpret[grid](*args)        # explicit; CPU tensors (others are copied over and back)
    TKPY_INTERPRET=1 python ...          # every kernel[grid](*args) launch runs here instead
    TKPY_INTERPRET_ORDER=reverse ...     # the warps' turns in another order (forward, reverse, random:SEED)

Every block of the grid runs, one after another; inside a block each warp is a
coroutine that switches only at barriers (machine.py), so deadlocks are found
and reported instead of hanging. Tiles keep their dtype (values rounded as the
GPU rounds, numerics.py); shared memory is a byte array with the GPU's
swizzled layout and written-state tracking; global tensors are bounds-checked
(memory.py). Errors name the op's Python line.

Op semantics live in per-area modules registered with `@semantics("op")`
(registry.py), like the code generator's emitters.
"""
from . import ops_hopper, ops_peer, ops_scalar, ops_warp, ops_warp_extra, ops_wgmma  # noqa: F401 - register the op semantics
from .launch import ENV_VAR, ORDER_ENV_VAR, Interpreted, interpret_requested
from .registry import SEMANTICS, semantics

__all__ = ["ENV_VAR", "ORDER_ENV_VAR", "Interpreted", "interpret_requested", "SEMANTICS", "semantics"]
