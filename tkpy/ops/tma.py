"""TMA: bulk tensor copies between global tensors and shared tiles (`tk.tma.*`).

Each op is issued once per calling warp (by its lane 0). A load completes its
bytes on a semaphore (announce them first with `tk.tma.expect`); stores are
grouped with `store_commit_group` and waited on with `store_async_wait`.
Out-of-bounds parts of a box are zero-filled on load and skipped on store, so
tensor sizes need not be multiples of the tile.
"""
from __future__ import annotations

from ..ir.core import GlobalVar, SharedRef, Var
from ..ir.expr import as_expr
from ..tiles.dtypes import FP8_DTYPES
from ..tiles.types import ST, SV
from ..frontend.context import current
from ..ir.expr import Const
from ._checks import describe, emit, fail, operand, scalar, tile_coord
from .sync_async import semaphore_ref

MAX_BOX = 256  # elements per box dimension


def _shared_tile(x, what: str, vectors: bool = False) -> SharedRef:
    """`x` as a shared tile a TMA box can move (with `vectors`, a shared vector too: a box of one row)."""
    x = operand(x, what)
    kinds = (ST, SV) if vectors else ST
    if not (isinstance(x, SharedRef) and isinstance(x.type, kinds)):
        fail(f"{what}: expected a shared tile (st){' or vector (sv)' if vectors else ''}, got {describe(x)}")
    t = x.type
    if t.rows > MAX_BOX or t.panel_cols > MAX_BOX:
        fail(f"{what}: a TMA box is at most {MAX_BOX} rows and {MAX_BOX} columns per swizzle panel; {t} is too big")
    return x


def _global(x, tile: SharedRef, what: str) -> GlobalVar:
    if not isinstance(x, GlobalVar):
        fail(f"{what}: expected a global tensor (gl), got {describe(x)}")
    if x.type.dtype != tile.type.dtype:
        fail(f"{what}: TMA does not convert; {describe(x)} vs {describe(tile)}")
    return x


def load_async(dst, src, coord, sem, *, multicast=None):
    """Start copying the tile of `src` at `coord` (in units of dst's shape) into shared tile `dst`;
    its bytes complete on semaphore `sem`. With `multicast` (a bit mask of cluster ranks) the tile
    lands in `dst` of every block named, completing on each one's `sem`. `dst` may be a shared vector
    (sv): `coord` then names it as tk.load does a register vector's (its last index in vector lengths
    along the tensor's last dim), e.g. a row of per-query statistics that a step's tiles need."""
    d = _shared_tile(dst, "tma.load_async destination", vectors=True)
    g = _global(src, d, "tma.load_async source")
    args = [d, g, tile_coord(coord, "tma.load_async", g), semaphore_ref(sem, "tma.load_async")]
    if multicast is not None:
        if current().cluster is None:
            fail("tma.load_async: multicast needs a kernel launched in clusters (@tk.kernel(cluster=...))")
        mask = scalar(multicast, "multicast mask")
        if isinstance(mask, Const) and not 0 < mask.value < 1 << 16:
            fail(f"tma.load_async: the multicast mask is a 16-bit set of cluster ranks, got {mask.value}")
        args.append(mask)
    return emit("tma_load", *args)


def store_async(dst, src, coord):
    """Start copying shared tile `src` to `dst` at `coord`. Make earlier ordinary writes of `src`
    visible first (tk.fence_proxy_async() after them, then a barrier)."""
    s = _shared_tile(src, "tma.store_async source")
    g = _global(dst, s, "tma.store_async destination")
    return emit("tma_store", g, s, tile_coord(coord, "tma.store_async", g), add=False)


def store_add_async(dst, src, coord):
    """Like store_async, but adds into `dst` (an atomic reduction done by the TMA unit)."""
    s = _shared_tile(src, "tma.store_add_async source")
    g = _global(dst, s, "tma.store_add_async destination")
    if s.type.dtype in FP8_DTYPES:
        fail(f"tma.store_add_async: TMA reductions do not add fp8 ({describe(s)}); add in f32/bf16/fp16 tiles")
    return emit("tma_store", g, s, tile_coord(coord, "tma.store_add_async", g), add=True)


def prefetch(tile, src, coord):
    """Warm L2 with the tile of `src` at `coord` that a load into `tile` would read."""
    t = _shared_tile(tile, "tma.prefetch tile")
    g = _global(src, t, "tma.prefetch source")
    return emit("tma_prefetch", t, g, tile_coord(coord, "tma.prefetch", g))


def store_commit_group():
    """Close the group of stores issued so far (by this warp)."""
    return emit("tma_store_commit")


def store_async_wait(pending: int = 0, *, read_only: bool = False):
    """Wait until at most `pending` committed store groups are in flight; with read_only=True only
    until their shared-memory sources may be overwritten."""
    if not isinstance(pending, int) or pending < 0:
        fail(f"store_async_wait: pending must be a non-negative int, got {pending!r}")
    return emit("tma_store_wait", pending=pending, read_only=read_only)


def expect(sem, *tiles):
    """Announce on `sem` the bytes that TMA loads of `tiles` (shared tiles or vectors, or arrays of them)
    will deliver; counts as one arrival."""
    total = 0
    tiles = [x for t in tiles for x in (t.tiles() if hasattr(t, "tiles") else [t])]   # a template stage
    for t in tiles:
        if isinstance(t, Var) and isinstance(t.type, (ST, SV)):
            total += t.type.nbytes * t.count
        else:
            total += _shared_tile(t, "tma.expect", vectors=True).type.nbytes
    if not tiles:
        fail("tma.expect needs at least one shared tile")
    return emit("sem_expect", semaphore_ref(sem, "tma.expect"), as_expr(total))
