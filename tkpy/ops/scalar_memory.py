"""One value between a runtime scalar and memory: an element of a global tensor or of a shared vector.

    r = tk.var(0.0, "rstd"); tk.load(r, rstd, (row,), fill=0.0)     # every lane reads the element
    tk.store(rstd, r, (row,), masked=True)                          # lane 0 of the warp writes it
    tk.store(partials, s, tk.warp_id())                             # a shared vector's element
    tk.cluster.store(partials, s, index, rank)                      # ... in another block of the cluster

Global coordinates are element indices right-aligned to (batch, depth, row, col), as tk.atomic_add's; a shared
vector takes one index. The scalar is a float `tk.var` (a load's destination) or any scalar expression (a store's
value): what a row's statistics are (a norm's mean and rstd, a softmax's max and sum), read and written once per
row. Values convert to and from the tensor's dtype as tile copies do. An int `tk.var` loads an element of an int32
or int64 tensor (a cross-entropy's target class, a token id), and an int value stores into one:

    t = tk.var(0, "target"); tk.load(t, target, (row,), fill=-1)   # int64 saturated to int32's range
    tk.store(ticket, 0, (0,))                                       # an int32 counter back to 0
"""
from __future__ import annotations

from ..frontend.control import Mutable
from ..ir.core import GlobalVar, SharedRef
from ..ir.expr import Expr
from ..tiles.dtypes import INT_DTYPES, f32, i32
from ..tiles.types import SV
from ._checks import describe, emit, fail, operand, scalar


def is_scalar_value(x) -> bool:
    """Whether `x` is what a scalar store writes: a runtime scalar or a Python number."""
    return isinstance(x, Expr) or (isinstance(x, (int, float)) and not isinstance(x, bool))


def load_scalar(dst: Mutable, src, coord, fill=None, masked=None):
    """dst = the element of `src` (a global tensor at element coordinates, or a shared vector at an index). An int
    tk.var takes an element of an int32 or int64 global tensor (an int64 one saturated to int32's range, so that a
    value past it stays out of any index's bounds); a float one the element of a float tensor or shared vector."""
    if isinstance(src, GlobalVar) and src.type.dtype in INT_DTYPES:
        if dst.dtype != i32:
            fail(f"scalar load from `{src.name}`, an {src.type.dtype.torch_name} tensor: load it into an int "
                 f"tk.var (tk.var(0, name)), not the {dst.dtype} `{dst.name}`")
        coords = element_coord(coord, src, "scalar load")
        if masked or fill is not None:
            value = scalar(0 if fill is None else fill, "scalar load fill value")
            if value.dtype != i32:
                fail(f"scalar load from `{src.name}`: an integer tensor's fill value must be an int, got {value.dtype}")
            return emit("load_scalar_gl", dst, src, *coords, fill=value)
        return emit("load_scalar_gl", dst, src, *coords)
    if dst.dtype != f32:
        fail(f"load into a scalar: `{dst.name}` is a {dst.dtype} variable; scalar loads of float tensors and shared "
             "vectors take a float tk.var (tk.var(0.0, name)); an int one, elements of int32 and int64 tensors")
    src = operand(src, "scalar load source")
    if isinstance(src, GlobalVar):
        coords = element_coord(coord, src, "scalar load")
        if masked or fill is not None:
            return emit("load_scalar_gl", dst, src, *coords, fill=scalar(0.0 if fill is None else fill,
                                                                     "scalar load fill value"))
        return emit("load_scalar_gl", dst, src, *coords)
    if fill is not None or masked:
        fail("scalar load from a shared vector: fill and masked are for global tensors (a shared index is checked "
             "by the interpreter and by debug mode)")
    return emit("load_scalar_sv", dst, _shared_vector(src, "scalar load"), _index(coord, "scalar load"))


def store_scalar(dst, value, coord, masked=None):
    """The element of `dst` (a global tensor at element coordinates, or a shared vector at an index) = value,
    written by lane 0 of the calling warp. An int32 or int64 global tensor takes an int value (a counter reset to 0,
    a token id)."""
    value = scalar(value, "scalar store value")
    if isinstance(dst, GlobalVar) and dst.type.dtype in INT_DTYPES:
        if value.dtype != i32:
            fail(f"scalar store into `{dst.name}`, an {dst.type.dtype.torch_name} tensor: the value must be an int, "
                 f"got {value.dtype}")
        coords = element_coord(coord, dst, "scalar store")
        return emit("store_gl_scalar", dst, *coords, value, **({"masked": True} if masked else {}))
    dst = operand(dst, "scalar store destination")
    if isinstance(dst, GlobalVar):
        coords = element_coord(coord, dst, "scalar store")
        return emit("store_gl_scalar", dst, *coords, value, **({"masked": True} if masked else {}))
    if masked:
        fail("scalar store into a shared vector: masked is for global tensors")
    return emit("store_sv_scalar", _shared_vector(dst, "scalar store"), _index(coord, "scalar store"), value)


def store_scalar_remote(dst, value, index, rank=None, sem=None):
    """`tk.cluster.store`: element `index` of the f32 shared vector `dst` in the block of cluster rank `rank` (None:
    in every block of the cluster) = value, written by the calling warp (lane 0; for every block, lane r to block
    r), through distributed shared memory (st.shared::cluster). Without `sem` a cluster barrier (tk.cluster.sync(),
    whose arrival releases and whose wait acquires) makes it visible to the other block's warps; with a semaphore
    `sem` the store is asynchronous (st.async) and its 4 bytes complete on that semaphore of the target block, whose
    warps read it once a tk.wait on it returns (the phase's expect counting every such store's bytes), no barrier
    or fence needed: how a row's partial sums cross a cluster (tk.cluster.sum)."""
    from .sync_async import semaphore_ref

    value = scalar(value, "cluster.store value")
    target = _shared_vector(operand(dst, "cluster.store destination"), "cluster.store")
    if target.type.dtype != f32:
        fail(f"cluster.store writes f32 shared vectors, got {describe(target)}")
    index = _index(index, "cluster.store")
    extra = () if rank is None else (_index(rank, "cluster.store rank"),)
    extra += () if sem is None else (semaphore_ref(sem, "cluster.store"),)
    every = {"every_rank": True} if rank is None else {}
    return emit("store_sv_scalar_remote", target, index, value, *extra, **every)


def _shared_vector(x, what: str) -> SharedRef:
    if not (isinstance(x, SharedRef) and isinstance(x.type, SV)):
        fail(f"{what}: expected a global tensor or a shared vector (tk.sv), got {describe(x)}")
    return x


def _index(x, what: str) -> Expr:
    if isinstance(x, (tuple, list)):
        if len(x) != 1:
            fail(f"{what}: a shared vector takes one index, got {len(x)} coordinates")
        x = x[0]
    e = scalar(x, f"{what} index")
    if e.dtype != i32:
        fail(f"{what}: the index must be an integer, got {e.dtype}")
    return e


def element_coord(coord, g: GlobalVar, what: str) -> tuple:
    """(batch, depth, row, col) element indices from 1 to 4 right-aligned coordinates."""
    if g.type.rank == 5:
        fail(f"{what}: global tensors of up to 4 dims, got {describe(g)}")
    coord = coord if isinstance(coord, (tuple, list)) else (coord,)
    if not 1 <= len(coord) <= 4:
        fail(f"{what}: coordinates take 1 to 4 element indices (batch, depth, row, col), got {len(coord)}")
    exprs = [scalar(c, f"{what} coordinate") for c in coord]
    if any(e.dtype != i32 for e in exprs):
        fail(f"{what}: coordinates must be integers")
    return (*(scalar(0, what),) * (4 - len(exprs)), *exprs)


def is_scalar_destination(x) -> bool:
    """Whether a load's destination is a runtime scalar variable (tk.var) rather than a tile or vector."""
    return isinstance(x, Mutable)
