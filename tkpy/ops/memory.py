"""Moving tiles between global, shared and register memory.

Coordinates are in units of the tile being moved (ThunderKittens' convention):
loading a 16x64 tile at (r, c) reads rows 16r..16r+15, cols 64c..64c+63.
Register tiles move per warp; shared<->global copies are done by a *scope*
(one warp by default, or `tk.warpgroup` / `tk.block` cooperatively).
"""
from __future__ import annotations

from ..errors import UnsupportedError
from ..frontend.context import user_loc
from ..frontend.control import WARP_ID
from ..ir.core import GlobalVar, SharedRef, Var
from ..tiles.dtypes import f32
from ..tiles.types import RT, RV, ST, SV
from ._checks import describe, emit, fail, operand, same_shape, scalar, tile_coord
from .scalar_memory import is_scalar_destination, is_scalar_value, load_scalar, store_scalar
from .vector_reduce import group_reduce, merge_softmax, merge_variance

SCOPES = {"warp": 1, "warpgroup": 4, "block": None}  # warps taking part (None: all)


def load(dst, src, coord=None, *, scope: str = "warp", masked=None, fill=None, private: bool = False):
    """Load `dst` from `src`: rt <- gl, rt <- st, st <- gl, rv <- gl, rv <- sv, sv <- gl, scalar <- gl / sv
    (dtype converted into registers). Loads from a global tensor are bounds-checked with `masked=True` or a `fill`
    value (elements past the tensor's last row or column read as `fill`, default 0), and
    automatically when a static dim is not a multiple of the tile. A float tk.var destination loads one element
    (tkpy/ops/scalar_memory.py). `private=True` (an fp32 contig rv <- an fp32 sv): what tk.store(sv, rv,
    private=True) wrote, each lane its own values in an order of the lanes' (bank-conflict-free 16-byte accesses):
    a warp's scratch in shared memory, for values its registers cannot hold between uses."""
    if private:
        return _private("load", dst, src, coord)
    if is_scalar_destination(dst):
        return load_scalar(dst, src, coord, fill, masked)
    dst, src = operand(dst, "load destination"), operand(src, "load source")
    d, s = dst.type, src.type
    if isinstance(d, RT) and isinstance(src, GlobalVar):
        return emit("load_rt_gl", dst, src, _register_coord(coord, scope, "load", src),
                    **_bounds(dst, src, masked, fill, "load"))
    if isinstance(d, RV) and isinstance(src, GlobalVar):
        _register_scope(scope, "load")
        return emit("load_rv_gl", dst, src, tile_coord(coord, "load", src), **_bounds(dst, src, masked, fill, "load"))
    if (isinstance(d, RT) and isinstance(s, ST)) or (isinstance(d, RV) and isinstance(s, SV)):
        _no_coord(coord, "load from shared memory")
        src = _warp_quarter(src, dst, scope, "load")
        same_shape(dst, src, "load")
        return emit(f"load_{_kind(d)}_{_kind(s)}", dst, src)
    if isinstance(d, (ST, SV)) and isinstance(src, GlobalVar):
        _same_dtype(dst, src, "load")
        return emit(f"load_{_kind(d)}_gl", dst, src, tile_coord(coord, "load", src), scope=_scope(scope),
                    **_bounds(dst, src, masked, fill, "load"))
    raise UnsupportedError(f"load into {describe(dst)} from {describe(src)} is not supported", user_loc())


def store(dst, src, coord=None, *, scope: str = "warp", masked=None, private: bool = False):
    """Store `src` into `dst`: gl <- rt, st <- rt, gl <- st, gl <- rv, sv <- rv, gl <- sv, gl / sv <- scalar
    (dtype converted out of registers). Stores into a global tensor skip the elements past its last row or column
    with `masked=True`, and automatically when a static dim is not a multiple of the tile. A scalar `src` (a
    runtime scalar or a number) stores one element (tkpy/ops/scalar_memory.py). `private=True` (an fp32 sv <- an
    fp32 contig rv): lane-private, for tk.load(..., private=True) by the same warp only (see tk.load)."""
    if private:
        return _private("store", dst, src, coord)
    if is_scalar_value(src):
        return store_scalar(dst, src, coord, masked)
    dst, src = operand(dst, "store destination"), operand(src, "store source")
    d, s = dst.type, src.type
    if isinstance(dst, GlobalVar) and isinstance(s, RT):
        return emit("store_gl_rt", dst, src, _register_coord(coord, scope, "store", dst),
                    **_bounds(src, dst, masked, None, "store"))
    if isinstance(dst, GlobalVar) and isinstance(s, RV):
        _register_scope(scope, "store")
        return emit("store_gl_rv", dst, src, tile_coord(coord, "store", dst), **_bounds(src, dst, masked, None, "store"))
    if (isinstance(d, ST) and isinstance(s, RT)) or (isinstance(d, SV) and isinstance(s, RV)):
        _no_coord(coord, "store into shared memory")
        dst = _warp_quarter(dst, src, scope, "store")
        same_shape(dst, src, "store")
        return emit(f"store_{_kind(d)}_{_kind(s)}", dst, src)
    if isinstance(dst, GlobalVar) and isinstance(s, (ST, SV)):
        _same_dtype(dst, src, "store")
        return emit(f"store_gl_{_kind(s)}", dst, src, tile_coord(coord, "store", dst), scope=_scope(scope),
                    **_bounds(src, dst, masked, None, "store"))
    raise UnsupportedError(f"store into {describe(dst)} from {describe(src)} is not supported", user_loc())


def store_add(dst, src, coord=None, *, scope: str = "warp", masked=None):
    """Add the fp32 register tile `src` into the fp32 global tensor `dst`, element by element, straight from the
    registers: `red.global.add` reductions (no shared memory, no TMA), one `red.global.add.v2.f32` per register
    pair where the layout makes the pair adjacent in a row (the row layout; the col layout's pairs lie in a column:
    two scalar reds). Each element's add is atomic (adds from other warps and blocks may land in any order);
    red.global.add.f32 flushes subnormal inputs and results to zero. Coordinates and bounds as tk.store's
    (`masked=True`: elements past the tensor's last row or column are not added); `tk.warpgroup.store_add` takes
    a warpgroup's tile (a coordinate in units of a tile 4 times as tall, each warp adding its 16-row quarter)."""
    dst, src = operand(dst, "store_add destination"), operand(src, "store_add source")
    if not (isinstance(dst, GlobalVar) and isinstance(src, Var) and isinstance(src.type, RT)):
        fail(f"store_add adds a register tile into a global tensor (tk.store_add(gl, rt, coord)); got "
             f"{describe(dst)} <- {describe(src)}")
    for what, x in (("destination", dst), ("source", src)):
        if x.type.dtype != f32:
            fix = ("declare it tk.gl[tk.f32, ...] (an fp32 workspace, converted after the adds)" if x is dst else
                   f"tk.copy it into a tk.rt(tk.f32, {src.type.rows}, {src.type.cols}) first")
            fail(f"store_add adds fp32 into fp32: its {what} {describe(x)} is {x.type.dtype}; {fix}")
    return emit("store_add_gl_rt", dst, src, _register_coord(coord, scope, "store_add", dst),
                **_bounds(src, dst, masked, None, "store_add"))


def _private(what: str, dst, src, coord):
    """tk.load / tk.store with private=True: a warp's fp32 contig vector to or from an fp32 shared vector of its
    length, lane-private (prelude: load_private, store_private)."""
    dst, src = operand(dst, f"{what} destination"), operand(src, f"{what} source")
    shared, regs = (dst, src) if what == "store" else (src, dst)
    if not (isinstance(regs.type, RV) and isinstance(shared.type, SV)):
        fail(f"private=True moves a register vector to or from a shared one (tk.{what}(sv, rv) / tk.load(rv, sv)); "
             f"got {describe(dst)} <- {describe(src)}")
    if regs.type.layout != "contig" or regs.type.dtype != f32 or shared.type.dtype != f32:
        fail(f"private=True takes fp32 vectors of the contig layout (tk.rv(tk.f32, n, \"contig\"), tk.sv(tk.f32, n)); "
             f"got {describe(regs)} and {describe(shared)}")
    _no_coord(coord, f"private {what}")
    same_shape(regs, shared, what)
    return emit("store_sv_rv" if what == "store" else "load_rv_sv", dst, src, private=True)


def _scope(scope: str) -> str:
    if scope not in SCOPES:
        fail(f"scope must be one of {tuple(SCOPES)}, got {scope!r}")
    return scope


def _register_coord(coord, scope: str, what: str, g=None) -> tuple:
    """Coordinates of a warp's register tile. At warpgroup scope the coordinate names a tile 4 times
    as tall (the warpgroup's, as wgmma accumulators are laid out) and each warp takes its quarter."""
    *outer, b, d, r, c = tile_coord(coord, what, g)
    if _scope(scope) == "warpgroup":
        return (*outer, b, d, r * 4 + WARP_ID % 4, c)
    _register_scope(scope, what)
    return (*outer, b, d, r, c)


def _warp_quarter(shared, regs, scope: str, what: str):
    """The shared tile a warp's register tile moves to or from: at warpgroup scope the shared tile is the
    warpgroup's, 4 times as tall, and each warp takes its 16-row-aligned quarter (as wgmma accumulators are
    laid out); at warp scope the tile itself."""
    if _scope(scope) != "warpgroup" or not isinstance(regs.type, RT):
        _register_scope(scope, what)
        return shared
    rows = regs.type.rows
    if shared.type.rows != 4 * rows or shared.type.cols != regs.type.cols:
        fail(f"warpgroup {what}: the shared tile is the warpgroup's, 4 x {rows} rows by {regs.type.cols}; got "
             f"{describe(shared)} for {describe(regs)}")
    from .views import subtile
    return operand(subtile(shared, rows, regs.type.cols, (WARP_ID % 4, 0)), f"warpgroup {what}")


def _register_scope(scope: str, what: str) -> None:
    if _scope(scope) != "warp":
        raise UnsupportedError(f"{what} of a register tile at {scope} scope is not supported yet "
                               "(register tiles are per warp)", user_loc())


def _no_coord(coord, what: str) -> None:
    if coord is not None:
        fail(f"{what} takes no coordinates (the shapes must match)")


def _same_dtype(a, b, what: str) -> None:
    if a.type.dtype != b.type.dtype:
        fail(f"{what}: shared<->global copies do not convert; {describe(a)} vs {describe(b)}")


def _bounds(tile, g: GlobalVar, masked, fill, what: str) -> dict:
    """The attributes of a bounds-checked copy between `tile` and `g` ({} for an unchecked one): loads
    carry their `fill` value, stores `masked=True`. Checking is on when asked for (masked=True or a
    fill value) or when a static dim of `g` is not a multiple of the tile (a partial tile is certain)."""
    t = tile.type     # a vector lies along one row
    ragged = [f"{dim} {axis}" for dim, n, axis in zip(g.type.dims[2:], (t.rows, t.cols), ("rows", "cols"))
              if isinstance(dim, int) and dim % n]
    if masked is False and (ragged or fill is not None):
        fail(f"{what}: masked=False, but " + (f"{describe(g)} has {' and '.join(ragged)}, not a multiple of "
             f"{describe(tile)}" if ragged else "a fill value was given"))
    if not (masked or ragged or fill is not None):
        return {}
    if what.startswith("store"):
        return {"masked": True}
    return {"fill": scalar(0.0 if fill is None else fill, f"{what} fill value")}


def _kind(t) -> str:
    """rt, rv, st or sv: how op names spell a tile or vector type."""
    return type(t).__name__.lower()


def load_async(dst, src, coord=None, *, scope: str = "warp", masked=None):
    """Start copying a shared tile (or a shared vector, along a row: coordinates (row, col in vector lengths))
    from a global tensor with cp.async, bypassing registers; the calling threads commit their copies as one group.
    `tk.load_async_wait(n)` waits for all but the last n groups; then synchronise (tk.warp_sync() for a warp's
    copy, tk.sync() for a block-scope one) before reading it. Bounds-checked like tk.load (elements outside the
    tensor read as 0)."""
    dst, src = operand(dst, "load_async destination"), operand(src, "load_async source")
    if not (isinstance(dst, SharedRef) and isinstance(dst.type, (ST, SV)) and isinstance(src, GlobalVar)):
        fail(f"load_async copies a global tensor into a shared tile or vector; got {describe(dst)} <- "
             f"{describe(src)}")
    _same_dtype(dst, src, "load_async")
    checked = {"masked": True} if _bounds(dst, src, masked, None, "load_async") else {}
    return emit("load_async", dst, src, tile_coord(coord, "load_async", src), scope=_scope(scope), **checked)


def load_async_wait(pending: int = 0):
    """Wait until at most `pending` of this thread's load_async groups are still in flight."""
    if not isinstance(pending, int) or pending < 0:
        fail(f"load_async_wait: pending must be a non-negative int, got {pending!r}")
    return emit("load_async_wait", pending=pending)


class Scope:
    """`tk.warpgroup` / `tk.block`: the same memory ops done cooperatively by more warps; `tk.block.sum` and
    friends reduce register vectors over groups of the block's warps (tkpy/ops/vector_reduce.py)."""

    def __init__(self, name: str):
        self.name = name

    def sum(self, *vectors, warps: int | None = None, name: str = "sum"):
        """The sum of every element of each vector over a group of `warps` consecutive warps (default: the whole
        block): a float runtime scalar per vector, the same in every warp of the group (a float scalar given instead
        of a vector is its warp's partial, summed as it is). Every warp of the group calls it (a barrier meets them:
        the group's named barrier 1 + warp // warps, or __syncthreads)."""
        return group_reduce("sum", vectors, self._reducing(), warps, name)

    def amax(self, *vectors, warps: int | None = None, name: str = "max"):
        """The largest element of each vector over a group of warps (see sum)."""
        return group_reduce("max", vectors, self._reducing(), warps, name)

    def amin(self, *vectors, warps: int | None = None, name: str = "min"):
        """The smallest element of each vector over a group of warps (see sum)."""
        return group_reduce("min", vectors, self._reducing(), warps, name)

    def merge_softmax(self, m, s, *sums, warps: int | None = None, name: str = "softmax"):
        """The softmax statistics of a row split over a group of `warps` consecutive warps (default: the block), from
        each warp's `m` (the max of its piece: -inf for a piece of -inf or masked elements only, whose `s` is 0) and
        `s` (its sum of exp(x - m)): (M, S), the row's max and the sum over the row of exp(x - M), the same in every
        warp of the group, over one barrier (a max and then a sum would take two). Each warp then scales its
        exp(x - m) by exp(m - M) / S for the softmax. Up to two more float scalars a warp (`sums`) are summed over
        the group in the same barrier, returned after (M, S)."""
        return merge_softmax(m, s, self._reducing(), warps, name, sums)

    def merge_variance(self, total, centered, count, *, warps: int | None = None, name: str = "moments"):
        """The mean and the sum of squared deviations from it of a row split over a group of `warps` consecutive
        warps (default: the block), from each warp's sum `total` of its piece, the sum `centered` of its squared
        deviations from its own mean, and its element count `count`: (mean, M2), the same in every warp of the
        group, over one barrier (the mean and then the centred sum would take two; a layer norm's variance is M2 /
        n). Chan's merge: no cancellation where the mean is large."""
        return merge_variance(total, centered, count, self._reducing(), warps, name)

    def _reducing(self) -> str:
        if self.name != "block":
            fail(f"tk.{self.name} has no vector reductions; tk.block.sum(v, warps=4) reduces over groups of 4 warps")
        return self.name

    def load(self, dst, src, coord=None, **bounds):
        return load(dst, src, coord, scope=self.name, **bounds)

    def store(self, dst, src, coord=None, **bounds):
        return store(dst, src, coord, scope=self.name, **bounds)

    def store_add(self, dst, src, coord=None, **bounds):
        return store_add(dst, src, coord, scope=self.name, **bounds)

    def load_async(self, dst, src, coord=None, **bounds):
        return load_async(dst, src, coord, scope=self.name, **bounds)
