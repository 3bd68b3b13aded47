"""The kernel's parameter list: shared by the code generator (C++ signature) and the launcher (packing).

Order: one pointer per global tensor; one int per distinct dynamic dim; three
64-bit strides (batch, depth, rows; in elements) per strided global tensor (a 5-d one
first has its outer stride, axis -1);
one TMA tensor map per (global tensor, shared tile shape) that TMA ops use;
then the scalar parameters in declaration order.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import GlobalVar, KernelIR, Op, PeerRef, ScalarParam, walk
from ..tiles.dtypes import DType, f32


def element_ctype(dtype: DType) -> str:
    """C++ element type: built-in float, int and long long, or the prelude's 16- and 8-bit storage types."""
    return dtype.ctype if dtype.ctype in ("float", "int", "long long") else f"tk::{dtype.ctype}"


@dataclass(frozen=True)
class Slot:
    cname: str      # C++ parameter name
    ctype: str      # C++ parameter type
    kind: str       # 'ptr' | 'i32' | 'i64' | 'f32' | 'blob128' (a tensor map)
    source: tuple   # ('ptr', arg_index) | ('dim', name) | ('stride', arg_index, axis) | ('scalar', arg_index)


def param_slots(kernel: KernelIR, arg_index: dict) -> list[Slot]:
    """`arg_index` maps a parameter name to its position in the Python call."""
    slots: list[Slot] = []
    gls = [p for p in kernel.params if isinstance(p, GlobalVar)]
    for g in gls:
        slots.append(Slot(f"{g.name}_ptr", f"{element_ctype(g.type.dtype)}* __restrict__", "ptr",
                          ("ptr", arg_index[g.name])))
    seen = []
    for g in gls:
        for d in g.type.dynamic_dims:
            if d not in seen:
                seen.append(d)
                slots.append(Slot(d, "int", "i32", ("dim", d)))
    for g in gls:
        if not g.contiguous:
            labels = (((-1, "outer"),) if g.type.rank == 5 else ()) + tuple(enumerate(("batch", "depth", "row")))
            for axis, label in labels:
                slots.append(Slot(f"{g.name}_{label}_stride", "long long", "i64",
                                  ("stride", arg_index[g.name], axis)))
    for g, st in tensor_maps(kernel):
        slots.append(Slot(tensor_map_name(g, st), "const __grid_constant__ tk::CUtensorMap", "blob128",
                          ("tmap", arg_index[g.name], st)))
    for p in kernel.params:
        if isinstance(p, ScalarParam):
            kind = "f32" if p.sym.dtype == f32 else "i32"
            slots.append(Slot(p.name, "float" if kind == "f32" else "int", kind, ("scalar", arg_index[p.name])))
    return slots


def dim_position(specs, name: str) -> tuple[int, int]:
    """Where a launch finds the value of the dynamic dim `name` (a ('dim', name) slot): (the position of the first
    global tensor argument that has it, its axis in that tensor's shape). `specs`: the kernel's parameters
    (tkpy.frontend.signature's ParamSpec: kind, and the shown dims of a global tensor's gl)."""
    for i, spec in enumerate(specs):
        if spec.kind == "gl":
            shown = spec.gl.shown
            if name in shown:
                return i, shown.index(name)
    raise KeyError(name)


TMA_OPS = ("tma_load", "tma_store", "tma_prefetch")


def tensor_maps(kernel: KernelIR) -> list:
    """(global tensor, shared tile type) pairs that need a tensor map, in order of first use (a pgl's gl picked at run
    time, a PeerRef: every one of its gls)."""
    seen: list = []
    for s in walk(kernel.body):
        if isinstance(s, Op) and s.name in TMA_OPS:
            tile, g = (s.args[0], s.args[1]) if s.name != "tma_store" else (s.args[1], s.args[0])
            for member in (g.members if isinstance(g, PeerRef) else (g,)):
                key = (member, tile.type)
                if key not in seen:
                    seen.append(key)
    return seen


def tensor_map_name(g: GlobalVar, st) -> str:
    """C++ name of the tensor map that moves `st`-shaped boxes of `g`: its box and swizzle (of a PeerRef: the pick of
    its gls' maps)."""
    if isinstance(g, PeerRef):
        return g.pick(tensor_map_name(m, st) for m in g.members)
    return f"{g.name}_tma_{st.rows}x{st.panel_cols}" + (f"_sw{st.swizzle}" if st.swizzle else "")
