"""The C++ prelude: header-free device helpers, of which a generated kernel carries those it uses.

NVRTC ships no headers, so storage types, conversions and PTX wrappers are written here, one module per area,
each a list of helpers (prelude/helpers.py: one top-level declaration of C++ each, written in paragraphs). A
kernel's source starts with the helpers its code needs (`prelude_for`), which is also what NVRTC compiles: the
whole prelude takes it several times longer to read. `k.source(..., prelude="full")` shows the whole prelude
instead.
"""
from __future__ import annotations

import functools
import hashlib
import os

from . import fp8, hopper, math, peer, rotary, scalar, warp, warp_extra, warp_ops
from .helpers import Pool

# in order: a module's helpers may use those of the modules before it
HELPERS = (*warp.HELPERS, *warp_ops.HELPERS, *warp_extra.HELPERS, *rotary.HELPERS, *hopper.HELPERS, *peer.HELPERS,
           *scalar.HELPERS, *fp8.HELPERS, *math.HELPERS)
PRELUDE = Pool(list(HELPERS)).text()    # every helper (wgmma wrappers are per kernel): for hand-written kernels


@functools.lru_cache(maxsize=64)
def _pool(wgmma_variants: frozenset, tma5: bool) -> Pool:
    return Pool([*HELPERS, *hopper.wgmma_helpers(wgmma_variants), *(hopper.TMA5_HELPERS if tma5 else ())])


def prelude_for(code: str, wgmma_variants: set, tma5: bool = False, full: bool = False) -> str:
    """The prelude of a kernel whose code (the kernel and what debug mode or the timeline put beside it) is `code`:
    the helpers it uses, or with `full` every helper, with the wgmma wrappers of its `wgmma_variants` (hopper.py)
    and, when it moves tiles of a 5-d tensor by TMA (`tma5`), the 5-d copies."""
    pool = _pool(frozenset(wgmma_variants), tma5)
    if full:
        return pool.text()
    return pool.text(pool.needed(pool.references(code)))


@functools.cache
def fingerprint() -> str:
    """sha256 (hex) of what prelude_for's result depends on besides its arguments: the C++ of every helper (PRELUDE,
    which also holds what modules of tkpy.tiles write into it) and this package's source files (the wgmma and 5-d
    TMA helpers' generators, the choice of helpers), in name order. Read once per process (about 0.4 ms; os.listdir,
    not pathlib's glob, which took as long again)."""
    h = hashlib.sha256(PRELUDE.encode())
    folder = os.path.dirname(os.path.abspath(__file__))
    for name in sorted(n for n in os.listdir(folder) if n.endswith(".py")):
        with open(os.path.join(folder, name), "rb") as f:
            h.update(name.encode() + b"\0" + f.read())
    return h.hexdigest()
