"""CPU semantics of the runtime-scalar ops (the counterpart of codegen/ops_scalar.py): a vector reduced to a scalar,
single elements of global tensors and shared vectors (another block's too), and the combination of a group's partial
results that tk.block.sum / tk.cluster.sum read back. A scalar is the warp's: its value goes into the warp's
environment under the variable's name, as the C++ local of every lane holds it."""
from __future__ import annotations

import numpy as np

from ..errors import InterpretError
from ..ir.core import SharedRef
from ..tiles.dtypes import INT_DTYPES, i32
from ..tiles.math_approx import LOG2E, exp2_ftz
from .mbarrier import Transfer
from .memory import Part
from .ops_hopper import semaphore_of
from .numerics import REDUCE, decode, encode, to_f32, wrap_int32
from .registry import lookup, semantics

SIGNED = {4: np.int32, 8: np.int64}      # an integer tensor's element, by its bytes


@semantics("vec_reduce", attrs=("fn",))
def vec_reduce(warp, op):
    dst, v = op.args
    warp.env[dst.name] = to_f32(lookup(REDUCE, op.attrs["fn"], op).reduce(warp.read(v), dtype=np.float32))


@semantics("segment_reduce", attrs=("fn", "size"))
def segment_reduce(warp, op):
    """Each segment of `size` consecutive elements reduced, into each of its elements."""
    dst, src = op.args
    x = np.asarray(warp.read(src), dtype=np.float32)
    segments = x.reshape(*x.shape[:-1], -1, op.attrs["size"])
    reduced = lookup(REDUCE, op.attrs["fn"], op).reduce(segments, axis=-1, dtype=np.float32)
    warp.write(dst, np.broadcast_to(reduced[..., None], segments.shape).reshape(x.shape))


def _element(warp, g, coord, what: str, op, masked: bool):
    """The (1, 1) box of element `coord` of global tensor `g`, or None where a masked access falls outside its
    rows or columns (as the prelude's in_bounds)."""
    *lead, r, c = (warp.value(x) for x in coord)
    rows, cols = g.raw.shape[-2:]
    if masked and not (0 <= r < rows and 0 <= c < cols):
        return None
    return g.box((*lead, r, c), 1, 1, what, warp.loc)


@semantics("load_scalar_gl", attrs=("fill",))
def load_scalar_gl(warp, op):
    dst, src, *coord = op.args
    g = warp.global_tensor(src)
    box = _element(warp, g, coord, f"scalar load from `{src.name}`", op, "fill" in op.attrs)
    if dst.dtype == i32:                    # an int32 or int64 element, saturated to int32's range as on the GPU
        value = warp.value(op.attrs["fill"]) if box is None else int(box.view(SIGNED[g.dtype.nbytes])[0, 0])
        warp.env[dst.name] = min(max(value, -2**31), 2**31 - 1)
        return
    value = warp.value(op.attrs["fill"]) if box is None else decode(g.dtype, box.copy()).item()
    warp.env[dst.name] = to_f32(value)


@semantics("store_gl_scalar", attrs=("masked",))
def store_gl_scalar(warp, op):
    dst, *coord, value = op.args
    g = warp.global_tensor(dst)
    box = _element(warp, g, coord, f"scalar store into `{dst.name}`", op, bool(op.attrs.get("masked")))
    if box is None:
        return
    if g.dtype in INT_DTYPES:               # an int (the 32-bit int it is) into an int32 or int64 tensor
        box.view(SIGNED[g.dtype.nbytes])[...] = wrap_int32(warp.value(value))
    else:
        box[...] = encode(g.dtype, np.float32(to_f32(warp.value(value))))


def _slot(warp, ref, index: int, what: str):
    """(the shared tile of shared vector `ref`, the Part of its element `index`), bounds-checked."""
    tile = warp.shared_tile(ref)
    if not 0 <= index < tile.type.length:
        raise InterpretError(f"{what}: index {index} is outside `{tile.name}` ({tile.type})", warp.loc)
    n = tile.type.dtype.nbytes
    return tile, Part(np.zeros(1, np.int64), np.array([index]), np.array([index * n]))


@semantics("load_scalar_sv")
def load_scalar_sv(warp, op):
    dst, ref, index = op.args
    what = f"scalar load from `{ref.name}`"
    tile, element = _slot(warp, ref, warp.value(index), what)
    raw = warp.block.shared.read(tile, element, what, op.loc)
    warp.env[dst.name] = to_f32(decode(tile.type.dtype, raw).item())


@semantics("store_sv_scalar")
def store_sv_scalar(warp, op):
    ref, index, value = op.args
    tile, element = _slot(warp, ref, warp.value(index), f"scalar store into `{ref.name}`")
    warp.block.shared.write(tile, encode(tile.type.dtype, np.float32(to_f32(warp.value(value))))[None], element)


class RemoteStore(Transfer):
    """The 4 bytes an asynchronous cluster store (st.async) wrote into a block: they land, as a TMA load's do, once
    the phase they completed on has completed and a warp of that block has waited on it."""

    def describe(self) -> str:
        sem = self.sem
        state = (f"which has not completed ({sem.progress()})" if sem.completed <= self.phase
                 else "which has completed, but no warp has waited on it (tk.wait)")
        return (f"the cluster store into `{self.tile}` at {self.loc.short} completes on semaphore `{sem.name}` in its "
                f"phase {self.phase}, {state}")


@semantics("store_sv_scalar_remote", attrs=("every_rank",))
def store_sv_scalar_remote(warp, op):
    """st.shared::cluster: the element lands in the shared memory of the block of that rank (of every block). With a
    semaphore (st.async) its bytes complete on that block's semaphore and are in flight until it is waited on."""
    ref, index, value, *extra = op.args
    sem = next((a for a in extra if isinstance(a, SharedRef)), None)
    rank = next((a for a in extra if not isinstance(a, SharedRef)), None)
    cluster = warp.block.cluster
    ranks = range(len(cluster)) if op.attrs.get("every_rank") else [warp.value(rank)]
    tile, element = _slot(warp, ref, warp.value(index), f"cluster.store into `{ref.name}`")
    raw = encode(tile.type.dtype, np.float32(to_f32(warp.value(value))))[None]
    for r in ranks:
        if not 0 <= r < len(cluster):
            raise InterpretError(f"cluster.store into `{ref.name}` of rank {r}: the cluster has {len(cluster)} "
                                 "blocks", warp.loc)
        if sem is None:
            cluster[r].shared.write(tile, raw, element)
            continue
        target = semaphore_of(warp, sem, cluster[r])
        phase = target.deliver(4, warp, op.loc)
        cluster[r].shared.write_async(tile, raw, element, RemoteStore(target, phase, op.loc, tile.name))


@semantics("reduce_slots", attrs=("fn", "count", "group", "stride", "rank_stride"))
def reduce_slots(warp, op):
    """The group's `count` partial results (see the prelude's reduce_slots for where each lies), combined in fp32."""
    dst, ref, first = op.args
    fn = lookup(REDUCE, op.attrs["fn"], op)
    warp.env[dst.name] = to_f32(fn.reduce(_partials(warp, op, ref, first, 0), dtype=np.float32))


@semantics("merge_softmax_slots", attrs=("count", "group", "stride", "rank_stride"))
def merge_softmax_slots(warp, op):
    """The group's (max, sum of exponentials) pairs merged: the max of the maxima, and each sum rescaled to it (by
    exp2 on the GPU's ex2.approx.ftz: a term whose max is the top one is its sum itself) and added, in fp32."""
    top, total, ref, first = op.args
    m, s = _partials(warp, op, ref, first, 0), _partials(warp, op, ref, first, 1)
    best = np.fmax.reduce(m, dtype=np.float32)
    with np.errstate(invalid="ignore"):
        terms = np.where(m == best, s, s * exp2_ftz((m - best) * np.float32(LOG2E)))
    warp.env[top.name], warp.env[total.name] = to_f32(best), to_f32(np.add.reduce(terms, dtype=np.float32))


@semantics("merge_variance_slots", attrs=("count", "group", "stride", "rank_stride"))
def merge_variance_slots(warp, op):
    """The group's (sum, centred sum of squares, count) triples merged (Chan's): the mean of the sums over the counts,
    and each centred sum plus d^2 / count (d = sum - count * mean; 0 for a count of 0), added, in fp32."""
    mean, m2, ref, first = op.args
    t, q, n = (_partials(warp, op, ref, first, k) for k in range(3))
    mu = np.float32(np.add.reduce(t, dtype=np.float32) / np.add.reduce(n, dtype=np.float32))
    d = (t - n * mu).astype(np.float32)
    with np.errstate(invalid="ignore", divide="ignore"):
        terms = np.where(n > 0, q + d * d / n, np.float32(0.0)).astype(np.float32)
    warp.env[mean.name], warp.env[m2.name] = to_f32(mu), to_f32(np.add.reduce(terms, dtype=np.float32))


def _partials(warp, op, ref, first, offset: int) -> np.ndarray:
    """The group's `count` partial results at `offset` past each slot (see the prelude's reduce_slots for where each
    lies), as fp32."""
    a = op.attrs
    start = warp.value(first) + offset
    indices = [start + (j // a["group"]) * a["rank_stride"] + (j % a["group"]) * a["stride"] for j in range(a["count"])]
    what = f"the reduction's read of `{ref.name}`"
    values = []
    for i in indices:
        tile, element = _slot(warp, ref, i, what)
        values.append(decode(tile.type.dtype, warp.block.shared.read(tile, element, what, op.loc)).item())
    return np.array(values, np.float32)