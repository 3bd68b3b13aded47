"""The IR's text form: what `kernel.ir(...)` shows."""
from __future__ import annotations

import re

from .core import Assign, Decl, For, GlobalVar, If, KernelIR, Let, Op, PeerRef, ScalarParam, SharedRef, Var
from .expr import BinOp, Expr, render


def operand_text(a) -> str:
    if isinstance(a, Var):
        return f"%{a.name}"
    if isinstance(a, SharedRef):
        return f"%{a.name}" + (f"[{render(a.index)}]" if a.index is not None else "")
    if isinstance(a, PeerRef):
        return repr(a)
    if isinstance(a, GlobalVar):
        return f"@{a.name}"
    if isinstance(a, Expr):
        return render(a)
    if isinstance(a, tuple):
        return "(" + ", ".join(operand_text(x) for x in a) + ")"
    return repr(a)


def op_title(op: Op) -> str:
    """The op as a user would name it: row_max, sub_row, exp, load, ..."""
    a = dict(op.attrs)
    if op.name == "reduce":
        return f"{a.pop('axis')}_{a.pop('fn')}"
    if op.name == "broadcast":
        return f"{a.pop('fn')}_{a.pop('axis')}"
    if op.name in ("unary", "binary"):
        return a.pop("fn")
    if op.name == "mask":
        return a.pop("kind")
    copy = re.fullmatch(r"(load|store)_(rt|rv|st|sv|gl)_(rt|rv|st|sv|gl)", op.name)   # load_rt_gl -> load
    title = copy.group(1) if copy else op.name
    return title + "".join(f"[{k}={render(v) if isinstance(v, Expr) else v}]" for k, v in a.items())


def assignment_text(s: Assign) -> str:
    """`x += 1` for an update of x by an operator, else `x = value` (no semicolon; valid C++ with one)."""
    v = s.value
    if isinstance(v, BinOp) and v.a is s.target and v.op in ("+", "-", "*", "/", "%"):
        return f"{s.target.name} {v.op}= {render(v.b)}"
    return f"{s.target.name} = {render(v)}"


def print_ir(kernel: KernelIR) -> str:
    params = []
    for p in kernel.params:
        if isinstance(p, GlobalVar):
            params.append(f"@{p.name}: {p.type}" + ("" if p.contiguous else " strided"))
        elif isinstance(p, ScalarParam):
            params.append(f"{p.name}: {p.sym.dtype}")
    lines = [f"kernel {kernel.name}({', '.join(params)}) warps={kernel.warps}"
             + (f" shared={kernel.shared_bytes}B" if kernel.shared_bytes else "")]
    if kernel.constexprs:
        lines.append("  constexpr " + ", ".join(f"{k}={v!r}" for k, v in kernel.constexprs.items()))
    _block(kernel.body, lines, 1, kernel)
    return "\n".join(lines)


def _block(stmts, lines, depth, kernel) -> None:
    pad = "  " * depth
    for s in stmts:
        if isinstance(s, Decl):
            extra = f" x{s.var.count}" if s.var.count > 1 else ""
            off = kernel.shared_offsets.get(s.var)
            at = f" @smem+{off}" if off is not None else ""
            if s.var.view is not None:
                v = s.var.view
                at = f" subtile of {operand_text(v.base)} at ({render(v.row)}, {render(v.col)})"
            _line(lines, f"{pad}%{s.var.name} = {s.var.type}{extra}{at}", s.loc)
        elif isinstance(s, Let):
            _line(lines, f"{pad}{'var ' if s.mutable else ''}{s.sym.name} = {render(s.value)}", s.loc)
        elif isinstance(s, Assign):
            _line(lines, f"{pad}{assignment_text(s)}", s.loc)
        elif isinstance(s, Op):
            _line(lines, f"{pad}{op_title(s)} " + ", ".join(operand_text(a) for a in s.args), s.loc)
        elif isinstance(s, For):
            _line(lines, f"{pad}for {s.var.name} in range({render(s.start)}, {render(s.stop)}, {render(s.step)}):",
                  s.loc)
            _block(s.body, lines, depth + 1, kernel)
        elif isinstance(s, If):
            _line(lines, f"{pad}if {render(s.cond)}:", s.loc)
            _block(s.then, lines, depth + 1, kernel)
            if s.orelse:
                lines.append(f"{pad}else:")
                _block(s.orelse, lines, depth + 1, kernel)


def _line(lines, text, loc) -> None:
    lines.append(f"{text:<60s} # {loc.short}")
