"""Code generators of the warp-level ops: memory, maps, reductions, broadcasts, mma.sync, barriers."""
from __future__ import annotations

from ..ir.expr import Expr
from .emit import emits, float_operand, operand, scope_threads, tile_coord


@emits("load_rt_gl")
def emit_load_rt_gl(em, op):
    dst, src, coord = op.args
    yield f"tk::load({dst.name}, {src.name}, {tile_coord(dst, coord)});"


@emits("store_gl_rt")
def emit_store_gl_rt(em, op):
    dst, src, coord = op.args
    yield f"tk::store({dst.name}, {src.name}, {tile_coord(src, coord)});"


@emits("load_rt_st")
def emit_load_rt_st(em, op):
    dst, src = op.args
    yield f"tk::load({dst.name}, {operand(src)});"


@emits("store_st_rt")
def emit_store_st_rt(em, op):
    dst, src = op.args
    yield f"tk::store({operand(dst)}, {src.name});"


@emits("load_st_gl")
def emit_load_st_gl(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    yield f"tk::load<{n}>({operand(dst)}, {src.name}, {tile_coord(dst, coord)}, {t});"


@emits("store_gl_st")
def emit_store_gl_st(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    yield f"tk::store<{n}>({dst.name}, {operand(src)}, {tile_coord(src, coord)}, {t});"


@emits("fill")
def emit_fill(em, op):
    dst, value = op.args
    yield f"tk::fill({dst.name}, {float_operand(value)});"


@emits("unary")
def emit_unary(em, op):
    dst, src = op.args
    yield f"tk::{op.attrs['fn']}({dst.name}, {src.name});"


@emits("binary")
def emit_binary(em, op):
    dst, a, b = op.args
    b_text = float_operand(b) if isinstance(b, Expr) else b.name
    yield f"tk::{op.attrs['fn']}({dst.name}, {a.name}, {b_text});"


@emits("reduce")
def emit_reduce(em, op):
    yield f"tk::{op.attrs['axis']}_{op.attrs['fn']}({', '.join(a.name for a in op.args)});"


@emits("broadcast")
def emit_broadcast(em, op):
    dst, src, vec = op.args
    yield f"tk::{op.attrs['fn']}_{op.attrs['axis']}({dst.name}, {src.name}, {vec.name});"


@emits("mma")
def emit_mma(em, op):
    d, a, b, c = op.args
    yield f"tk::mma_AB({d.name}, {a.name}, {b.name}, {c.name});"


@emits("sync")
def emit_sync(em, op):
    yield "__syncthreads();" if op.attrs["scope"] == "block" else "__syncwarp();"
