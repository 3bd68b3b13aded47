"""Code generators of the runtime-scalar ops (prelude: prelude/scalar.py): vector reductions, single elements of
global tensors and shared vectors, distributed shared memory stores, a group's partial results."""
from __future__ import annotations

import math

from ..ir.core import SharedRef
from ..ir.expr import render
from ..tiles.dtypes import INT_DTYPES, i32
from .emit import emits, float_operand, operand

IDENTITY = {"sum": "0.0f", "max": "-INFINITY", "min": "INFINITY"}


@emits("vec_reduce")
def emit_vec_reduce(em, op):
    dst, v = op.args
    yield f"{dst.name} = tk::vec_{op.attrs['fn']}({v.name});"


@emits("segment_reduce")
def emit_segment_reduce(em, op):
    dst, src = op.args
    yield f"tk::segment_reduce<{op.attrs['size']}>({dst.name}, {src.name}, tk::op_{op.attrs['fn']}{{}});"


def _coords(coord) -> str:
    return ", ".join(render(c) for c in coord)


@emits("load_scalar_gl")
def emit_load_scalar_gl(em, op):
    dst, g, *coord = op.args
    fn = "load_scalar_int" if dst.dtype == i32 else "load_scalar"      # (an int tk.var: an int tensor's element)
    if "fill" in op.attrs:
        fill = render(op.attrs["fill"]) if dst.dtype == i32 else float_operand(op.attrs["fill"])
        yield f"{dst.name} = tk::{fn}_masked({g.name}, {_coords(coord)}, {fill});"
    else:
        yield f"{dst.name} = tk::{fn}({g.name}, {_coords(coord)});"


@emits("store_gl_scalar")
def emit_store_gl_scalar(em, op):
    g, *coord, value = op.args
    integer = g.type.dtype in INT_DTYPES                 # (an int into an int32 or int64 tensor)
    fn = ("store_scalar_int" if integer else "store_scalar") + ("_masked" if op.attrs.get("masked") else "")
    yield f"tk::{fn}({g.name}, {_coords(coord)}, {render(value) if integer else float_operand(value)});"


@emits("load_scalar_sv")
def emit_load_scalar_sv(em, op):
    dst, s, index = op.args
    yield f"{dst.name} = tk::load_scalar({operand(s)}, {render(index)});"


@emits("store_sv_scalar")
def emit_store_sv_scalar(em, op):
    s, index, value = op.args
    yield f"tk::store_scalar({operand(s)}, {render(index)}, {float_operand(value)});"


@emits("store_sv_scalar_remote")
def emit_store_sv_scalar_remote(em, op):
    s, index, value, *extra = op.args
    sem = next((operand(a) for a in extra if isinstance(a, SharedRef)), None)
    args = f"{operand(s)}, {render(index)}, {float_operand(value)}"
    asynchronous = ("_async", f", {sem}") if sem is not None else ("", "")
    if op.attrs.get("every_rank"):
        yield f"tk::store_scalar_every_rank{asynchronous[0]}<{math.prod(em.k.cluster)}>({args}{asynchronous[1]});"
    else:
        yield f"tk::store_scalar_remote{asynchronous[0]}({args}, {render(extra[0])}{asynchronous[1]});"


@emits("reduce_slots")
def emit_reduce_slots(em, op):
    dst, s, first = op.args
    a = op.attrs
    yield (f"{dst.name} = tk::reduce_slots<tk::op_{a['fn']}, {a['count']}, {a['group']}, {a['stride']}, "
           f"{a['rank_stride']}>({operand(s)}, {render(first)}, tk::op_{a['fn']}{{}}, {IDENTITY[a['fn']]});")


@emits("merge_softmax_slots", "merge_variance_slots")
def emit_merge_slots(em, op):
    first_out, second_out, s, first = op.args
    a = op.attrs
    yield (f"tk::{op.name}<{a['count']}, {a['group']}, {a['stride']}, {a['rank_stride']}>({operand(s)}, "
           f"{render(first)}, {first_out.name}, {second_out.name});")
