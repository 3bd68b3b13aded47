"""The global boxes that tile and vector copies touch. An access past the tensor is an error, except
in a bounds-checked copy (an op with a `fill` attribute for loads, `masked` for stores), where
elements past the tensor's last row or column read as the fill value (zero for a masked
cp.async) and are not written, as the prelude's load_masked / store_masked do."""
from __future__ import annotations

import numpy as np

from .numerics import RAW, encode, to_f32


def _start(warp, g, coord, t) -> tuple:
    """Element coordinates of a copy of tile or vector type `t` (a vector: one row) and how many of its
    rows and columns lie inside the tensor."""
    rows, cols = t.rows, t.cols
    *lead, r, c = (warp.value(x) for x in coord)   # lead: (batch, depth), or (outer, batch, depth) when 5-d
    start = (*lead, r * rows, c * cols)
    inside = tuple(max(0, min(n, size - lo)) for lo, n, size in zip(start[-2:], (rows, cols), g.raw.shape[-2:]))
    return start, inside


def read_global(warp, op, g, coord, t, what: str) -> np.ndarray:
    """Raw bits of the (rows, cols) box of a copy of `t` at `coord` (in units of `t`)."""
    rows, cols = t.rows, t.cols
    start, (n_r, n_c) = _start(warp, g, coord, t)
    if "fill" not in op.attrs and not op.attrs.get("masked"):
        return g.box(start, rows, cols, what, warp.loc)
    value = to_f32(warp.value(op.attrs["fill"])) if "fill" in op.attrs else 0.0   # cp.async zero-fills
    fill = encode(g.dtype, np.float32(value))
    raw = np.full((rows, cols), fill, RAW[g.dtype.nbytes])
    if n_r and n_c:
        raw[:n_r, :n_c] = g.box(start, n_r, n_c, what, warp.loc)
    return raw


def write_global(warp, op, g, coord, t, raw, what: str, rows=None, cols=None) -> None:
    """Store raw bits into the box of a copy of `t` at `coord`: all of it, or the elements (rows, cols) of it."""
    if rows is None:
        rows, cols = np.indices((t.rows, t.cols))
        raw = np.reshape(raw, rows.shape)
    start, (n_r, n_c) = _start(warp, g, coord, t)
    if not op.attrs.get("masked"):
        g.box(start, t.rows, t.cols, what, warp.loc)[rows, cols] = raw
        return
    keep = (rows < n_r) & (cols < n_c)
    if n_r and n_c:
        g.box(start, n_r, n_c, what, warp.loc)[rows[keep], cols[keep]] = raw[keep]
