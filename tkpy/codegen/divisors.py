"""Divisions in loops by values fixed for the whole kernel, as `tk::divisor`s made once.

A persistent kernel turns its task index into tile coordinates in every iteration (`index // per_section`,
`col // H`, `(index - block_x) // grid_x`): generic int divisions by runtime values, ~20 dependent
instructions each, three of them on the MUFU's pipe that the softmax keeps busy, ~600 cycles a task switch in
the attention kernels over few keys (RESULTS.md run 224). The divisor of such a division is the same for the
whole kernel: made once at the top (the prelude's tk::divisor), each division is a multiply-high, an add and a
shift. Only the C++ changes: the IR, its printer and the interpreter keep the plain division.

A value is fixed for the kernel when it is built from scalar parameters, tensor dimensions, the grid's builtins
and the body's top-level constants (`Let`s outside every loop and branch) made of those. A division becomes one
by a divisor when its divisor is such a value (not a constant: the compiler has those), its dividend is not
(the compiler hoists a division of two fixed values itself) and it is evaluated in a loop.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..ir.core import Assign, Decl, For, GlobalVar, If, KernelIR, Let, Op, SharedRef
from ..ir.expr import BinOp, Const, Expr, free_symbols, nodes, render
from ..ir.passes import BUILTIN_SYMS, expressions
from ..tiles.dtypes import i32


@dataclass
class Divisors:
    """The kernel's divisors: `names` maps each division's node id to its divisor's name (for render, through
    ir.expr.DIVISOR_NAMES); `declarations[i]` are those made after top-level statement i (-1: before the first)."""

    names: dict = field(default_factory=dict)
    declarations: dict = field(default_factory=dict)

    def declared_after(self, position: int) -> list[str]:
        return self.declarations.get(position, [])


def plan(kernel: KernelIR) -> Divisors:
    """The divisors of `kernel`'s divisions in loops by fixed values (one per distinct divisor expression), named
    after the divisor where it is a symbol (`H_divisor`), divisor_0, divisor_1, ... otherwise."""
    fixed = {p.sym.name for p in kernel.params if hasattr(p, "sym")} | set(BUILTIN_SYMS)
    fixed |= {d for p in kernel.params if isinstance(p, GlobalVar) for d in p.type.dynamic_dims}
    made_at = {}                         # top-level constant -> its statement's position
    for position, s in enumerate(kernel.body):
        if isinstance(s, Let) and not s.mutable and _made_of(s.value, fixed):
            fixed.add(s.sym.name)
            made_at[s.sym.name] = position
    divisors = Divisors()
    by_text: dict[str, str] = {}         # a divisor's C++ expression -> its name (one divisor per value)
    unnamed = 0
    for division in _divisions(kernel.body, fixed, in_loop=False):
        text = render(division.b)
        name = by_text.get(text)
        if name is None:
            symbol = getattr(division.b, "name", None)
            name = by_text[text] = f"{symbol}_divisor" if symbol else f"divisor_{unnamed}"
            unnamed += symbol is None
            after = max((made_at.get(sym.name, -1) for sym in free_symbols(division.b)), default=-1)
            divisors.declarations.setdefault(after, []).append(
                f"const tk::divisor {name}({text});  // divides in the loops below by a multiply-high and a shift")
        divisors.names[id(division)] = name
    return divisors


def _made_of(e: Expr, fixed: set) -> bool:
    return all(sym.name in fixed for sym in free_symbols(e))


def _divisions(body, fixed: set, in_loop: bool):
    """The int divisions (and remainders) that `body`'s statements evaluate in a loop, at any depth, by a fixed
    value that is not a constant, of a dividend that is not fixed."""
    for s in body:
        if in_loop:
            for e in expressions(s):
                yield from (node for node in nodes(e) if isinstance(node, BinOp) and node.op in ("/", "%")
                            and node.dtype == i32 and not isinstance(node.b, Const)
                            and _made_of(node.b, fixed) and not _made_of(node.a, fixed))
        if isinstance(s, For):
            yield from _divisions(s.body, fixed, in_loop=True)
        elif isinstance(s, If):
            yield from _divisions(s.then, fixed, in_loop)
            yield from _divisions(s.orelse, fixed, in_loop)
