"""Running a kernel function on symbolic values to record its IR."""
from __future__ import annotations

import keyword
import sys

from ..errors import TraceError
from ..runtime import timeline
from ..runtime.dependent_launch import enabled as dependent_launch_enabled
from ..ir.core import GlobalVar, KernelIR, Loc, PglVar, ScalarParam, Var
from ..ir.expr import Sym
from .context import TraceContext, activate
from .signature import SCALAR_DTYPES, ParamSpec

_RESERVED = set(keyword.kwlist) | {
    "int", "float", "double", "char", "short", "long", "unsigned", "signed", "void", "bool", "auto", "const",
    "struct", "class", "namespace", "template", "typename", "tk", "warpid", "laneid", "threadIdx", "blockIdx",
    "block_x", "block_y", "block_z", "grid_x", "grid_y", "grid_z", "cluster_rank",
    "blockDim", "gridDim", "smem", "min", "max", "register", "volatile", "static", "extern", "default",
    "switch", "case", "do", "goto", "new", "delete", "this", "union", "enum", "sizeof", "half", "bf16",
}


def trace_kernel(fn, name: str, warps: int, specs: list[ParamSpec], contiguous: tuple,
                 constexprs: dict, cluster=None, blocks_per_sm: int | None = None,
                 fast_division: bool = False, dependent_launch: bool = True) -> KernelIR:
    """Trace `fn` once with symbolic parameters; `contiguous[i]` says whether gl parameter i is packed. A pgl's specs
    (signature.pgl_specs: its gls, then its rank) become one argument, a PglVar. `blocks_per_sm` None: one block an
    SM, not stated in the launch bounds. `dependent_launch` False: no programmatic dependent launch whatever the
    environment says."""
    ctx = TraceContext(name, warps, cluster, fn.__code__)
    args, params, gl_index, members = [], [], 0, []
    for spec in specs:
        if spec.kind == "gl":
            g = GlobalVar(spec.name, spec.gl, contiguous[gl_index])
            gl_index += 1
            params.append(g)
            if spec.member is None:
                args.append(g)
            else:
                members.append(g)   # a pgl's gl: the function gets the pgl, after its last gl (its rank's spec)
        elif spec.member is not None:
            args.append(PglVar(spec.member[0], members, constexprs[spec.name]))
            members = []
        elif spec.kind in SCALAR_DTYPES:
            sym = Sym(spec.name, SCALAR_DTYPES[spec.kind])
            args.append(sym)
            params.append(ScalarParam(spec.name, sym))
        else:
            args.append(constexprs[spec.name])
    code = fn.__code__
    with activate(ctx):
        user_locals = _call_capturing_locals(fn, args, code)
        body = ctx.finish()
    _name_variables(body, user_locals, {s.name for s in specs})
    loc = ctx.template_loc or Loc(code.co_filename, code.co_firstlineno, fn.__name__)   # a template's: its user's class
    return KernelIR(name, params, body, warps, loc, dict(constexprs), cluster=cluster,
                    blocks_per_sm=blocks_per_sm or 1, blocks_per_sm_stated=blocks_per_sm is not None,
                    dependent_launch=dependent_launch and dependent_launch_enabled(), timeline=timeline.enabled(),
                    fast_division=fast_division)


def _call_capturing_locals(fn, args, code) -> dict:
    """Call fn(*args) and return its local variables at return, for naming tiles after them. A profile function
    catches fn's frame as it starts and removes itself there (the trace's own calls run without it: a profile
    function on every call and return took half a GEMM's trace); the finished frame keeps its locals."""
    frames = []
    previous = sys.getprofile()

    def catch(frame, event, arg):
        if event == "call" and frame.f_code is code:
            frames.append(frame)
            sys.setprofile(previous)

    sys.setprofile(catch)
    try:
        result = fn(*args)
    finally:
        sys.setprofile(previous)
    frame = frames[0] if frames else None
    if result is not None:
        loc = Loc(code.co_filename, frame.f_lineno if frame is not None else code.co_firstlineno, fn.__name__)
        raise TraceError(f"kernel {fn.__name__} must not return a value (write results with tk.store)", loc)
    return dict(frame.f_locals) if frame is not None else {}


def _name_variables(body, user_locals: dict, taken: set) -> None:
    """Give tiles and loop counters the Python names the user bound them to, where unambiguous."""
    from ..ir.core import For, walk

    names_of: dict[int, str] = {}
    for local_name, value in user_locals.items():
        if isinstance(value, (Var, Sym)) and not local_name.startswith("_"):
            names_of.setdefault(id(value), local_name)
    used = set(taken)
    for stmt in walk(body):
        obj = stmt.var if hasattr(stmt, "var") else None
        if obj is None:
            continue
        wanted = names_of.get(id(obj))
        if wanted is None or wanted in _RESERVED:
            wanted = obj.name
        if wanted in _RESERVED:         # a name given directly (tk.rt(name=...), a template's buffer `do`)
            wanted += "_"
        final = wanted
        n = 1
        while final in used:
            final = f"{wanted}_{n}"
            n += 1
        used.add(final)
        object.__setattr__(obj, "name", final)   # Syms are frozen; tile Vars are not
