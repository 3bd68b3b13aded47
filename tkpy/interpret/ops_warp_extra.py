"""CPU semantics of the rest of the warp-level vocabulary (the counterpart of codegen/ops_warp_extra.py):
layout swaps and transposes, masks, generic maps and vector broadcasts. As in ops_warp.py, tiles
are logical arrays, so a layout swap is a copy; the vector and shared-vector copies share the
tile copies' semantics there."""
from __future__ import annotations

import numpy as np

from ..tiles.exp2_emulation import emulated_mask, exp2_poly
from ..tiles.layouts import tile_element_numbers, vector_element_numbers
from ..tiles.types import RT, RV
from .numerics import BINARY, UNARY, decode, to_f32
from .registry import lookup, semantics

# Which elements each mask keeps, by row r, column c and its index operands i (ops/masks.py).
_KEEP = {
    "make_causal": lambda r, c: c <= r, "make_causal_t": lambda r, c: c >= r,
    "tril": lambda r, c, i: c <= r + i, "triu": lambda r, c, i: c >= r + i,
    "tril_periodic": lambda r, c, first, period, i: c <= (first + r) % period + i,
    "right_fill": lambda r, c, i: c < i, "left_fill": lambda r, c, i: c >= i, "index_fill": lambda r, c, i: c != i,
    "lower_fill": lambda r, c, i: r < i, "upper_fill": lambda r, c, i: r >= i,
}


@semantics("swap_layout")
def swap_layout(warp, op):
    dst, src = op.args
    warp.write(dst, warp.read(src))


@semantics("transpose")
def transpose(warp, op):
    dst, src = op.args
    warp.write(dst, warp.read(src).T)


@semantics("swap_pairs")
def swap_pairs(warp, op):
    dst, src = op.args
    x = warp.read(src)
    warp.write(dst, x.reshape(*x.shape[:-1], -1, 2)[..., ::-1].reshape(x.shape))


@semantics("rotate_half", attrs=("rotary_dim", "head_dim", "interleaved"))
def rotate_half(warp, op):
    """Per head (the last axis in heads of head_dim, a last one cut short padded with 0): cat(-x[r/2:r], x[:r/2])
    (interleaved: (-x[2i+1], x[2i])), 0 past rotary_dim."""
    dst, src = op.args
    r, d = op.attrs["rotary_dim"], op.attrs["head_dim"]
    x = warp.read(src)
    n = x.shape[-1]
    cut = -n % d                                    # a head the end cuts short: its missing elements 0
    heads = np.pad(x, [(0, 0)] * (x.ndim - 1) + [(0, cut)]).reshape(*x.shape[:-1], -1, d)
    out = np.zeros_like(heads)
    if op.attrs["interleaved"]:
        out[..., 0:r:2], out[..., 1:r:2] = -heads[..., 1:r:2], heads[..., 0:r:2]
    else:
        out[..., :r // 2], out[..., r // 2:r] = -heads[..., r // 2:r], heads[..., :r // 2]
    warp.write(dst, out.reshape(*x.shape[:-1], n + cut)[..., :n])


@semantics("load_rotary_table", attrs=("head_dim", "interleaved"))
def load_rotary_table(warp, op):
    """Head column j of each head of dst: angle j % (r/2) of the table's row (interleaved: j // 2), fill past r."""
    dst, table, b, d, row, fill = op.args
    g = warp.block.globals[table]
    angles = table.type.dims[3]
    box = g.box((warp.value(b), warp.value(d), warp.value(row), 0), 1, angles,
                f"load_rotary_table into `{dst.name}` from `{table.name}`", warp.loc)
    t = decode(g.dtype, box.copy()).reshape(-1)
    j = np.arange(op.attrs["head_dim"])
    picked = t[np.minimum(j // 2 if op.attrs["interleaved"] else j % angles, angles - 1)]
    head = np.where(j < 2 * angles, picked, np.float32(to_f32(warp.value(fill))))
    warp.write(dst, np.resize(head, dst.type.length))


@semantics("mask", attrs=("kind",))
def mask(warp, op):
    dst, src, *index, val = op.args
    x = warp.read(src)
    r, c = np.indices(x.shape) if x.ndim == 2 else (0, np.arange(x.shape[0]))   # (a vector: one row)
    keep = lookup(_KEEP, op.attrs["kind"], op)(r, c, *(warp.value(i) for i in index))
    warp.write(dst, np.where(keep, x, np.float32(to_f32(warp.value(val)))))


@semantics("map", attrs=("fn",))
def map_(warp, op):
    """The map expression evaluated on fp32 arrays, one numpy call per node, as the lambda computes. A
    vector source of a tile map is broadcast along rows (one value per row) or columns. exp2_emulated
    computes the elements the GPU gives the software exp2 (by their lane-own numbers) as it does; a node's param
(powi's exponent) follows its arguments."""
    dst, *srcs = op.args
    shape = (dst.type.rows, dst.type.cols) if isinstance(dst.type, RT) else (dst.type.length,)
    warp.write(dst, mapped(warp, op, [_map_source(warp, dst, s) for s in srcs], shape, dst.type))


def mapped(warp, op, values: list, shape: tuple, dst_type) -> np.ndarray:
    """The map expression op.attrs["fn"] of the fp32 arrays `values` (its arguments), of `shape`."""
    def evaluate(e):
        if e.fn == "arg":
            return values[e.args[0]]
        if e.fn == "scalar":
            return np.float32(to_f32(warp.value(e.args[0])))
        if e.fn == "exp2_emulated":
            x = np.broadcast_to(evaluate(e.args[0]), shape)
            return np.where(emulated_mask(element_numbers(dst_type), e.param), exp2_poly(x), UNARY["exp2"](x))
        table = UNARY if len(e.args) == 1 else BINARY
        return lookup(table, e.fn, op)(*(evaluate(a) for a in e.args), *(() if e.param is None else (e.param,)))

    with np.errstate(all="ignore"):         # inf and NaN propagate as on the GPU
        return np.broadcast_to(evaluate(op.attrs["fn"]), shape)


def element_numbers(t):
    """Each element's number in its lane's own numbering (tkpy/tiles/layouts.py)."""
    if isinstance(t, RT):
        return tile_element_numbers(t.layout, t.rows, t.cols)
    return vector_element_numbers(t.layout, t.length)


def _map_source(warp, dst, src):
    v = warp.read(src)
    if isinstance(dst.type, RT) and isinstance(src.type, RV):
        return v[:, None] if dst.type.broadcast_axis(src.type) == "row" else v[None, :]
    return v


@semantics("broadcast_row", "broadcast_col")
def broadcast_vector(warp, op):
    dst, vec = op.args
    v = warp.read(vec)
    shape = (dst.type.rows, dst.type.cols)
    warp.write(dst, np.broadcast_to(v[:, None] if op.name == "broadcast_row" else v[None, :], shape))


@semantics("load_async_wait", attrs=("pending",))
def load_async_wait(warp, op):
    """Nothing to wait for: the interpreter's cp.async copies land when issued (ops_warp.load_st_gl)."""
    return None
