"""Runtime control flow and builtin indices.

Python `for ... in range(...)` and `if` on Python values unroll or select at
trace time; these are the runtime forms.
"""
from __future__ import annotations

from ..errors import TraceError
from ..ir.core import For, If
from ..ir.expr import BOOL, Expr, Sym, as_expr, binary
from ..tiles.dtypes import f32, i32
from .context import current, user_loc


class range:  # noqa: A001 - mirrors Python's range on purpose
    """`for i in tk.range(stop)` / `tk.range(start, stop, step=1)`: a loop that runs on the GPU.

    The body is traced once with `i` a runtime scalar. Tiles updated in the
    body carry their values across iterations (declare them before the loop).
    The C++ loop is not unrolled (`#pragma unroll 1`): unroll with Python's range.
    """

    def __init__(self, start, stop=None, step=1):
        if stop is None:
            start, stop = 0, start
        self.start, self.stop, self.step = as_expr(start), as_expr(stop), as_expr(step)
        for e in (self.start, self.stop, self.step):
            if e.dtype != i32:
                raise TraceError(f"tk.range bounds must be integers, got {e.dtype}", user_loc())
        self.loc = user_loc()

    def __iter__(self):
        self._state = 0
        return self

    def __next__(self):
        ctx = current()
        if self._state == 0:  # entering the body: trace it once with a symbolic counter
            self._state = 1
            self.var = Sym(ctx.fresh_name("i"), i32)
            ctx.push_block(open_loop=self.loc)
            return self.var
        if self._state == 1:  # the body ran to its end
            self._state = 2
            body = ctx.pop_block()
            ctx.emit(For(self.var, self.start, self.stop, self.step, body, self.loc))
        raise StopIteration


class if_:
    """`with tk.if_(cond):` a branch taken at run time; follow it with `with tk.else_():` for the other side."""

    def __init__(self, cond):
        cond = as_expr(cond)
        if cond.dtype != BOOL:
            raise TraceError(f"tk.if_ needs a comparison (a boolean), got a {cond.dtype} value", user_loc())
        self.cond = cond
        self.loc = user_loc()

    def __enter__(self):
        current().push_block()
        return self

    def __exit__(self, exc_type, *rest):
        ctx = current()
        body = ctx.pop_block()
        if exc_type is None:
            stmt = If(self.cond, body, [], self.loc)
            ctx.emit(stmt)
            ctx.last_if = stmt
        return False


class else_:
    """`with tk.else_():` right after a `with tk.if_(...):` block."""

    def __enter__(self):
        ctx = current()
        if ctx.last_if is None or ctx.last_if.orelse:
            raise TraceError("tk.else_() must directly follow a `with tk.if_(...)` block", user_loc())
        self.target = ctx.last_if
        ctx.push_block()
        return self

    def __exit__(self, exc_type, *rest):
        ctx = current()
        body = ctx.pop_block()
        if exc_type is None:
            self.target.orelse = body
            ctx.last_if = None
        return False


class _Dim3:
    def __init__(self, prefix: str):
        self.x, self.y, self.z = (Sym(f"{prefix}_{a}", i32) for a in "xyz")


block_idx = _Dim3("block")
grid_dim = _Dim3("grid")
WARP_ID = Sym("warpid", i32)
LANE_ID = Sym("laneid", i32)
CLUSTER_RANK = Sym("cluster_rank", i32)      # (tk.cluster.rank(): the block's rank in its cluster)
BUILTIN_SYMS = (WARP_ID, LANE_ID)


def warp_id() -> Expr:
    """Index of the calling warp in its block (0 .. warps-1)."""
    return WARP_ID


def lane_id() -> Expr:
    """Index of the calling thread in its warp (0 .. 31)."""
    return LANE_ID


def num_warps() -> int:
    """Warps per block of the kernel being traced (a Python int)."""
    return current().warps


def let(value, name: str = "v") -> Sym:
    """Bind a runtime scalar to a name: `s = tk.let(k % 4, "stage")` emits `const int stage = k % 4;`
    and later uses read `stage` instead of repeating the expression."""
    from ..ir.core import Let

    value = as_expr(value)
    if not name.isidentifier():
        raise TraceError(f"tk.let needs an identifier for a name, got {name!r}", user_loc())
    sym = Sym(name, value.dtype)       # made unique after tracing, with the other names
    current().emit(Let(sym, value, user_loc()))
    return sym


class Mutable(Sym):
    """A runtime scalar that can change (`tk.var`). Expressions that use it read its value where they
    run (use `tk.let` for a snapshot); `x += n`, `x -= n`, `x *= n`, `x //= n`, `x %= n` and
    `tk.assign(x, value)` give it a new value."""

    def _update(op: str, integer: bool = False):  # noqa: N805 - builds the in-place dunders below
        def update(self, other):
            assign(self, binary(op, self, other, integer=integer))
            return self
        update.__name__ = f"__i{op}__"
        return update

    __iadd__, __isub__, __imul__ = _update("+"), _update("-"), _update("*")
    __ifloordiv__, __imod__ = _update("/", True), _update("%", True)
    del _update


def var(value, name: str = "v") -> Mutable:
    """A mutable runtime scalar: `n = tk.var(0, "n")` emits `int n = 0;`, and `n += k` (or
    `tk.assign(n, value)`) emits `n += k;`. Declare it before the loop that updates it; it lives in
    the block it is declared in, with one copy per thread as a C++ local (each warp has its own)."""
    from ..ir.core import Let

    value = as_expr(value)
    if not name.isidentifier():
        raise TraceError(f"tk.var needs an identifier for a name, got {name!r}", user_loc())
    sym = Mutable(name, value.dtype)       # made unique after tracing, with the other names
    current().emit(Let(sym, value, user_loc(), mutable=True))
    return sym


def assign(target, value) -> None:
    """Give a mutable scalar (`tk.var`) a new value: `target = value;`."""
    from ..ir.core import Assign

    if not isinstance(target, Mutable):
        raise TraceError(f"tk.assign needs a mutable scalar made by tk.var, got {type(target).__name__}; "
                         "tk.let values, loop counters and parameters cannot change", user_loc())
    value = as_expr(value)
    if value.dtype != target.dtype and not (target.dtype == f32 and value.dtype == i32):
        raise TraceError(f"tk.assign: `{target.name}` is a {target.dtype} variable; the new value is a "
                         f"{value.dtype}", user_loc())
    current().emit(Assign(target, value, user_loc()))
