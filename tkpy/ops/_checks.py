"""Operand normalisation and the trace-time checks shared by all ops."""
from __future__ import annotations

from ..errors import TraceError
from ..frontend.context import current, user_frame, user_loc
from ..ir.core import GlobalVar, Op, PglVar, SharedRef, Var
from ..ir.expr import Expr, as_expr
from ..tiles.dtypes import FP8_DTYPES, INT_DTYPES, f32
from ..tiles.types import GL, RT, RV, ST, SV


def fail(message: str):
    raise TraceError(message, user_loc())


def describe(x) -> str:
    if isinstance(x, (Var, SharedRef, GlobalVar)):
        return f"{user_name(x)}: {x.type}"
    if isinstance(x, Expr):
        return f"scalar {x.dtype}"
    if isinstance(x, PglVar):
        return (f"{x.name}: a tk.pgl of {x.world} GPUs' {x.type} (pick a rank's gl: {x.name}[p], or {x.name}.local, "
                "this rank's)")
    if type(x).__module__.split(".")[0] in ("torch", "numpy") and hasattr(x, "shape"):
        return (f"a host {type(x).__name__} of shape {tuple(x.shape)} (a tensor inside a kernel is the host's: pass it "
                "as a kernel argument, a tk.gl parameter, and tk.load it into a tile)")
    if isinstance(x, Op):       # what a destination-first op returned, passed on as if it were its result
        return (f"the {x.name} op that a tk function returned (destination-first ops write their first argument: "
                "pass that tile, or use the value form, e.g. tk.exp(t))")
    return f"{type(x).__name__} {x!r}"


def user_name(x) -> str:
    """The name the user's code binds `x` to (tiles are named after tracing; errors happen during it)."""
    frame = user_frame()
    if frame is not None:
        target = x.var if isinstance(x, SharedRef) and x.index is None else x
        for name, value in frame.f_locals.items():
            if value is target and not name.startswith("_"):
                return name
    return getattr(x, "name", "")


def operand(x, what: str):
    """A tile/vector/global operand: Var (register), SharedRef (shared) or GlobalVar."""
    if isinstance(x, Var):
        if x.is_shared:
            if x.count != 1:
                fail(f"{what}: `{x.name}` is an array of {x.count} shared tiles; index it, e.g. {x.name}[i]")
            return SharedRef(x, None)
        return x
    if isinstance(x, GlobalVar) and x.type.dtype in INT_DTYPES:
        fail(f"{what}: `{user_name(x)}` is an {x.type.dtype.torch_name} global tensor, which only scalars take "
             "(an int tk.var loads an element, an int stores into one, tk.atomic_add adds to an int32 one); tiles and "
             "vectors copy bf16, fp16, f32 and fp8 tensors")
    if isinstance(x, (SharedRef, GlobalVar)):
        return x
    fail(f"{what}: expected a tile, vector or global tensor, got {describe(x)}")


def kind(x) -> type:
    return type(x.type)


def register_tile(x, what: str) -> Var:
    x = operand(x, what)
    if not isinstance(x.type, RT):
        fail(f"{what}: expected a register tile (rt), got {describe(x)}")
    return x


def register_vector(x, what: str) -> Var:
    x = operand(x, what)
    if not isinstance(x.type, RV):
        fail(f"{what}: expected a register vector (rv), got {describe(x)}")
    return x


def register_operand(x, what: str) -> Var:
    x = operand(x, what)
    if not isinstance(x.type, (RT, RV)):
        fail(f"{what}: expected a register tile or vector, got {describe(x)}")
    return x


def scalar(x, what: str) -> Expr:
    try:
        return as_expr(x)
    except TraceError:
        fail(f"{what}: expected a scalar, got {describe(x)}")


def same_shape(a, b, what: str) -> None:
    ta, tb = a.type, b.type
    if isinstance(ta, (RT, ST)) and isinstance(tb, (RT, ST)):
        if (ta.rows, ta.cols) != (tb.rows, tb.cols):
            fail(f"{what}: shapes differ: {describe(a)} vs {describe(b)}")
    elif isinstance(ta, (RV, SV)) and isinstance(tb, (RV, SV)):
        if ta.length != tb.length:
            fail(f"{what}: lengths differ: {describe(a)} vs {describe(b)}")
    else:
        fail(f"{what}: {describe(a)} and {describe(b)} are not the same kind of operand")


def same_layout(a, b, what: str) -> None:
    if a.type.layout != b.type.layout:
        fail(f"{what}: layouts differ: {describe(a)} vs {describe(b)}; convert one with tk.swap_layout")


def compatible(dst, src, what: str) -> None:
    same_shape(dst, src, what)
    same_layout(dst, src, what)


def tile_coord(coord, what: str, g=None) -> tuple:
    """Coordinates in tile units, right-aligned to (batch, depth, row, col): 4 entries, or 5 (outer
    first) when `g` is a 5-d global tensor."""
    if coord is None:
        coord = (0, 0)
    if not isinstance(coord, (tuple, list)):
        coord = (coord,)
    n = 5 if g is not None and g.type.rank == 5 else 4
    if len(coord) == 5 and n == 4:
        fail(f"{what}: 5 coordinates need a 5-d global tensor; {describe(g) if g is not None else 'this one'} "
             "has at most 4 dims")
    if not 1 <= len(coord) <= n:
        fail(f"{what}: coordinates take 1 to {n} entries ({'outer, ' if n == 5 else ''}batch, depth, row, col), "
             f"got {len(coord)}")
    exprs = tuple(scalar(c, what) for c in coord)
    for c in exprs:
        if c.dtype == f32:
            fail(f"{what}: coordinates must be integers, got a float")
    return (as_expr(0),) * (n - len(exprs)) + exprs


ASYNC_MMA_OPS = ("wgmma", "wgmma_wait")
# The ops that take fp8 register tiles: copies to and from global and shared memory, maps (tk.copy
# converts), fills, masks, reductions / broadcasts with f32/bf16/fp16 vectors, and wgmma's A (checked
# there). Everything else (layout swaps and transposes, which move 16-bit elements; warp mma.sync) is
# refused, naming the op.
FP8_REGISTER_OPS = frozenset({"load_rt_gl", "store_gl_rt", "load_rt_st", "store_st_rt", "unary", "binary", "map",
                              "fill", "mask", "reduce", "broadcast", "wgmma"})


def _check_fp8_registers(name: str, args) -> None:
    if name in FP8_REGISTER_OPS:
        return
    for a in args:
        if isinstance(a, Var) and not a.is_shared and getattr(a.type, "dtype", None) in FP8_DTYPES:
            fail(f"{name} does not support fp8 register tiles ({describe(a)}); fp8 register tiles can be loaded, "
                 "stored, converted (tk.copy), mapped and reduced; convert to bf16/fp16/f32 first (tk.copy)")


def storage(tile):
    """The Var whose storage `tile` is: itself, or for a subtile view the tile it is a window of."""
    while isinstance(tile, Var) and tile.view is not None:
        tile = tile.view.base
    return tile.var if isinstance(tile, SharedRef) else tile


def emit(name: str, *args, **attrs) -> Op:
    ctx = current()
    _check_fp8_registers(name, args)
    if ctx.pending_wgmma and name not in ASYNC_MMA_OPS:
        for a in args:
            if isinstance(a, Var) and a in ctx.pending_wgmma:
                fail(f"{name} uses `{user_name(a)}` while a warpgroup MMA into it (at "
                     f"{ctx.pending_wgmma[a].short}) may still be running; call tk.warpgroup.mma_async_wait() first")
    # Every op's first argument is what it writes: a register tile that a running wgmma reads as its A must
    # keep its values until the wgmma is done (the tensor cores read registers asynchronously).
    if ctx.pending_wgmma_reads and name not in ASYNC_MMA_OPS and args and isinstance(args[0], Var):
        loc = ctx.pending_wgmma_reads.get(storage(args[0]))
        if loc is not None:
            fail(f"{name} writes `{user_name(args[0])}` while a warpgroup MMA reading it as its A (at {loc.short}) "
                 f"may still be running; call tk.warpgroup.mma_async_wait() first")
    op = Op(name, tuple(args), user_loc(), attrs)
    ctx.emit(op)
    return op


TILE_KINDS = (RT, RV, ST, SV, GL)
