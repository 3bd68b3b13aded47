"""Code generators of the rest of the warp-level vocabulary: layout swaps, transposes, masks, generic
maps, vector broadcasts and cp.async loads (prelude: prelude/warp_extra.py). Vector copies share the
tile copies' generators (ops_warp.py): a vector lies along one row."""
from __future__ import annotations

from ..ir.expr import render
from ..tiles.types import RT, RV
from .emit import emits, float_operand, gl_view, operand, scope_threads, tile_coord

CPP_INFIX = {"add": "+", "sub": "-", "mul": "*"}  # division goes through op_div (__fdividef), as tk::div


@emits("swap_layout", "transpose", "swap_pairs", "broadcast_row", "broadcast_col")
def emit_named(em, op):
    """Ops whose prelude function has the op's name and takes its register operands as they are."""
    yield f"tk::{op.name}({', '.join(a.name for a in op.args)});"


@emits("rotate_half")
def emit_rotate_half(em, op):
    dst, src = op.args
    yield f"tk::rotate_half<{_rotary_args(op, op.attrs['rotary_dim'])}>({dst.name}, {src.name});"


@emits("load_rotary_table")
def emit_load_rotary_table(em, op):
    dst, table, b, d, row, fill = op.args
    at = f"{table.name}.at({render(b)}, {render(d)}, {render(row)}, 0)"
    yield f"tk::load_rotary_table<{_rotary_args(op, 2 * table.type.dims[3])}>({dst.name}, {at}, {float_operand(fill)});"


def _rotary_args(op, rotary_dim: int) -> str:
    return f"{rotary_dim}, {op.attrs['head_dim']}, {'true' if op.attrs['interleaved'] else 'false'}"


@emits("mask")
def emit_mask(em, op):
    dst, src, *index, val = op.args
    args = [dst.name, src.name, *(render(i) for i in index), float_operand(val)]
    yield f"tk::{op.attrs['kind']}({', '.join(args)});"


@emits("map")
def emit_map(em, op):
    """One inlined lambda; a function that depends on the element's number (tk.exp2(x, emulated=...)) takes
    it first and goes through tk::map_indexed."""
    dst, *srcs = op.args
    fn = op.attrs["fn"]
    body = fn.render(lambda i: f"x{i}", float_operand, _map_call, CPP_INFIX)
    capture = "[=]" if fn.scalars() else "[]"
    params = ", ".join(["int e"] * fn.uses_element() + [f"float x{i}" for i in range(len(srcs))])
    entry = "map_indexed" if fn.uses_element() else "map"
    yield (f"tk::{entry}({dst.name}, {capture}({params}) {{ return {body}; }}, "
           f"{', '.join(map_source(dst, s) for s in srcs)});")


@emits("map_private")
def emit_map_private(em, op):
    """tk.map(sums, fn, sums, ..., private=True): the lambda over a private shared vector and the vectors."""
    dst, *vectors = op.args
    fn = op.attrs["fn"]
    body = fn.render(lambda i: f"x{i}", float_operand, _map_call, CPP_INFIX)
    params = ", ".join(f"float x{i}" for i in range(len(vectors) + 1))
    yield (f"tk::map_private({operand(dst)}, {'[=]' if fn.scalars() else '[]'}({params}) {{ return {body}; }}"
           + "".join(f", {v.name}" for v in vectors) + ");")


def _map_call(name: str, texts: list[str]) -> str:
    if name == "exp2_emulated":          # (x, elements of 8 emulated)
        return f"tk::exp2_emulated<{texts[1]}>(e, {texts[0]})"
    if name == "powi":                   # (x, the integer exponent)
        return f"tk::powi<{texts[1]}>({texts[0]})"
    return f"tk::op_{name}{{}}({', '.join(texts)})"


def map_source(dst, src) -> str:
    """A tk::map operand: a vector operand of a tile map is wrapped to say its broadcast (per_row / per_col)."""
    if isinstance(dst.type, RT) and isinstance(src.type, RV):
        return f"tk::per_{dst.type.broadcast_axis(src.type)}({src.name})"
    return src.name


@emits("load_async")
def emit_load_async(em, op):
    dst, src, coord = op.args
    n, t = scope_threads(em, op.attrs["scope"])
    masked = "true" if op.attrs.get("masked") else "false"
    yield f"tk::load_async<{masked}, {n}>({operand(dst)}, {gl_view(src, coord)}, {tile_coord(dst, coord, False)}, {t});"


@emits("load_async_wait")
def emit_load_async_wait(em, op):
    yield f"tk::load_async_wait<{op.attrs['pending']}>();"
