"""The kernel's parameter list: shared by the code generator (C++ signature) and the launcher (packing).

Order: one pointer per global tensor; one int per distinct dynamic dim; three
64-bit strides (batch, depth, rows; in elements) per strided global tensor;
then the scalar parameters in declaration order.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..ir.core import GlobalVar, KernelIR, ScalarParam
from ..tiles.dtypes import DType, f32


def element_ctype(dtype: DType) -> str:
    """C++ element type: built-in float, or the prelude's 16-bit storage types."""
    return dtype.ctype if dtype.ctype == "float" else f"tk::{dtype.ctype}"


@dataclass(frozen=True)
class Slot:
    cname: str      # C++ parameter name
    ctype: str      # C++ parameter type
    kind: str       # 'ptr' | 'i32' | 'i64' | 'f32'
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
            for axis, label in enumerate(("batch", "depth", "row")):
                slots.append(Slot(f"{g.name}_{label}_stride", "long long", "i64",
                                  ("stride", arg_index[g.name], axis)))
    for p in kernel.params:
        if isinstance(p, ScalarParam):
            kind = "f32" if p.sym.dtype == f32 else "i32"
            slots.append(Slot(p.name, "float" if kind == "f32" else "int", kind, ("scalar", arg_index[p.name])))
    return slots
