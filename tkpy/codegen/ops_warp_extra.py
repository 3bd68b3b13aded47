"""Code generators of the rest of the warp-level vocabulary: layout swaps, transposes, masks, generic
maps, vector broadcasts and copies, and cp.async loads (prelude: prelude/warp_extra.py)."""
from __future__ import annotations

from ..ir.expr import render
from .emit import emits, float_operand, operand, scope_threads, tile_coord
from .ops_warp import bounded

CPP_INFIX = {"add": "+", "sub": "-", "mul": "*"}  # division goes through op_div (__fdividef), as tk::div


def vector_coord(vec, coord) -> str:
    """Element coordinates (b, d, row, col) of a vector at a coordinate in units of its length along a row."""
    b, d, r, c = coord
    return ", ".join(render(x) for x in (b, d, r, c * vec.type.length))


@emits("swap_layout", "transpose")
def emit_layout(em, op):
    dst, src = op.args
    yield f"tk::{op.name}({dst.name}, {src.name});"


@emits("mask")
def emit_mask(em, op):
    dst, src, *index, val = op.args
    args = [dst.name, src.name, *(render(i) for i in index), float_operand(val)]
    yield f"tk::{op.attrs['kind']}({', '.join(args)});"


@emits("map")
def emit_map(em, op):
    dst, *srcs = op.args
    fn = op.attrs["fn"]
    body = fn.render(lambda i: f"x{i}", float_operand,
                     lambda name, texts: f"tk::op_{name}{{}}({', '.join(texts)})", CPP_INFIX)
    capture = "[=]" if fn.scalars() else "[]"
    params = ", ".join(f"float x{i}" for i in range(len(srcs)))
    yield f"tk::map({dst.name}, {capture}({params}) {{ return {body}; }}, {', '.join(s.name for s in srcs)});"


@emits("broadcast_row", "broadcast_col")
def emit_broadcast_vector(em, op):
    dst, vec = op.args
    yield f"tk::{op.name}({dst.name}, {vec.name});"


@emits("load_rv_gl")
def emit_load_rv_gl(em, op):
    dst, src, coord = op.args
    fn, extra = bounded(op, "load")
    yield f"tk::{fn}({dst.name}, {src.name}, {vector_coord(dst, coord)}{extra});"


@emits("store_gl_rv")
def emit_store_gl_rv(em, op):
    dst, src, coord = op.args
    fn, extra = bounded(op, "store")
    yield f"tk::{fn}({dst.name}, {src.name}, {vector_coord(src, coord)}{extra});"


@emits("load_rv_sv", "store_sv_rv")
def emit_rv_sv(em, op):
    dst, src = op.args
    yield f"tk::{op.name.split('_')[0]}({operand(dst)}, {operand(src)});"


@emits("load_sv_gl")
def emit_load_sv_gl(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    fn, extra = bounded(op, "load")
    yield f"tk::{fn}<{n}>({operand(dst)}, {src.name}, {vector_coord(dst, coord)}{extra}, {t});"


@emits("store_gl_sv")
def emit_store_gl_sv(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    fn, extra = bounded(op, "store")
    yield f"tk::{fn}<{n}>({dst.name}, {operand(src)}, {vector_coord(src, coord)}{extra}, {t});"


@emits("load_async")
def emit_load_async(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    masked = "true" if op.attrs.get("masked") else "false"
    yield f"tk::load_async<{masked}, {n}>({operand(dst)}, {src.name}, {tile_coord(dst, coord)}, {t});"


@emits("load_async_wait")
def emit_load_async_wait(em, op):
    yield f"tk::load_async_wait<{op.attrs['pending']}>();"
