"""Code generators of the warp-level ops: memory, maps, reductions, broadcasts, mma.sync, barriers."""
from __future__ import annotations

from ..ir.expr import Expr
from .emit import WARP_BARRIER, emits, float_operand, gl_view, operand, scope_threads, tile_coord


def bounded(op, name: str) -> tuple[str, str]:
    """The prelude function of a global-memory copy and its extra arguments: `name`, or its
    bounds-checked `name_masked` (loads pass their fill value)."""
    if "fill" in op.attrs:
        return f"{name}_masked", f", {float_operand(op.attrs['fill'])}"
    return (f"{name}_masked", "") if op.attrs.get("masked") else (name, "")


@emits("load_rt_gl", "load_rv_gl")
def emit_load_rt_gl(em, op):
    dst, src, coord = op.args
    fn, extra = bounded(op, "load")
    yield f"tk::{fn}({dst.name}, {gl_view(src, coord)}, {tile_coord(dst, coord, False)}{extra});"


@emits("store_gl_rt", "store_gl_rv")
def emit_store_gl_rt(em, op):
    dst, src, coord = op.args
    fn, extra = bounded(op, "store")
    yield f"tk::{fn}({gl_view(dst, coord)}, {src.name}, {tile_coord(src, coord, False)}{extra});"


@emits("store_add_gl_rt")
def emit_store_add_gl_rt(em, op):
    dst, src, coord = op.args
    fn, _ = bounded(op, "store_add")
    yield f"tk::{fn}({gl_view(dst, coord)}, {src.name}, {tile_coord(src, coord, False)});"


@emits("load_rt_st", "load_rv_sv")
def emit_load_rt_st(em, op):
    dst, src = op.args
    yield f"tk::load{'_private' if op.attrs.get('private') else ''}({dst.name}, {operand(src)});"


@emits("store_st_rt", "store_sv_rv")
def emit_store_st_rt(em, op):
    dst, src = op.args
    yield f"tk::store{'_private' if op.attrs.get('private') else ''}({operand(dst)}, {src.name});"


@emits("load_st_gl", "load_sv_gl")
def emit_load_st_gl(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    fn, extra = bounded(op, "load")
    yield f"tk::{fn}<{n}>({operand(dst)}, {gl_view(src, coord)}, {tile_coord(dst, coord, False)}{extra}, {t});"


@emits("store_gl_st", "store_gl_sv")
def emit_store_gl_st(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    fn, extra = bounded(op, "store")
    yield f"tk::{fn}<{n}>({gl_view(dst, coord)}, {operand(src)}, {tile_coord(src, coord, False)}{extra}, {t});"


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
    skip = f"if (tk::any_not_one({vec.name})) " if op.attrs.get("skip_ones") else ""   # every factor 1: nothing to do
    yield f"{skip}tk::{op.attrs['fn']}_{op.attrs['axis']}({dst.name}, {src.name}, {vec.name});"


@emits("mma")
def emit_mma(em, op):
    d, a, b, c = op.args
    name = "mma_A" + ("t" if op.attrs["trans_a"] else "") + "B" + ("t" if op.attrs["trans_b"] else "")
    yield f"tk::{name}({d.name}, {a.name}, {b.name}, {c.name});"


@emits("sync")
def emit_sync(em, op):
    if em.debug is not None and op.attrs["scope"] == "block":   # debug mode (codegen/debug.py): an mbarrier, bounded
        yield f"tk::debug::meet(&tkpy_debug_block, {em.debug.site(op).index}, 0);"
        return
    yield "__syncthreads();" if op.attrs["scope"] == "block" else WARP_BARRIER


@emits("mark")
def emit_mark(em, op):
    """Only with the timeline on (the emitter skips marks otherwise): tkpy/runtime/timeline.py."""
    yield f'TKPY_MARK({em.mark_ids[op.attrs["label"]]});  // "{op.attrs["label"]}"'
