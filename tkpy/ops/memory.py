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
from ..tiles.types import RT, ST
from ._checks import describe, emit, fail, operand, same_shape, tile_coord

SCOPES = {"warp": 1, "warpgroup": 4, "block": None}  # warps taking part (None: all)


def load(dst, src, coord=None, *, scope: str = "warp"):
    """Load `dst` from `src`: rt <- gl, rt <- st, st <- gl (dtype converted into register tiles)."""
    dst, src = operand(dst, "load destination"), operand(src, "load source")
    d, s = dst.type, src.type
    if isinstance(d, RT) and isinstance(src, GlobalVar):
        return emit("load_rt_gl", dst, src, _register_coord(coord, scope, "load"))
    if isinstance(d, RT) and isinstance(src, SharedRef) and isinstance(s, ST):
        _register_scope(scope, "load")
        _no_coord(coord, "load from a shared tile")
        same_shape(dst, src, "load")
        return emit("load_rt_st", dst, src)
    if isinstance(d, ST) and isinstance(src, GlobalVar):
        _same_dtype(dst, src, "load")
        return emit("load_st_gl", dst, src, tile_coord(coord, "load"), scope=_scope(scope))
    raise UnsupportedError(f"load into {describe(dst)} from {describe(src)} is not supported", user_loc())


def store(dst, src, coord=None, *, scope: str = "warp"):
    """Store `src` into `dst`: gl <- rt, st <- rt, gl <- st (dtype converted out of register tiles)."""
    dst, src = operand(dst, "store destination"), operand(src, "store source")
    d, s = dst.type, src.type
    if isinstance(dst, GlobalVar) and isinstance(s, RT):
        return emit("store_gl_rt", dst, src, _register_coord(coord, scope, "store"))
    if isinstance(dst, SharedRef) and isinstance(d, ST) and isinstance(s, RT):
        _register_scope(scope, "store")
        _no_coord(coord, "store into a shared tile")
        same_shape(dst, src, "store")
        return emit("store_st_rt", dst, src)
    if isinstance(dst, GlobalVar) and isinstance(s, ST):
        _same_dtype(dst, src, "store")
        return emit("store_gl_st", dst, src, tile_coord(coord, "store"), scope=_scope(scope))
    raise UnsupportedError(f"store into {describe(dst)} from {describe(src)} is not supported", user_loc())


def _scope(scope: str) -> str:
    if scope not in SCOPES:
        fail(f"scope must be one of {tuple(SCOPES)}, got {scope!r}")
    return scope


def _register_coord(coord, scope: str, what: str) -> tuple:
    """Coordinates of a warp's register tile. At warpgroup scope the coordinate names a tile 4 times
    as tall (the warpgroup's, as wgmma accumulators are laid out) and each warp takes its quarter."""
    b, d, r, c = tile_coord(coord, what)
    if _scope(scope) == "warpgroup":
        return b, d, r * 4 + WARP_ID % 4, c
    _register_scope(scope, what)
    return b, d, r, c


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


class Scope:
    """`tk.warpgroup` / `tk.block`: the same memory ops done cooperatively by more warps."""

    def __init__(self, name: str):
        self.name = name

    def load(self, dst, src, coord=None):
        return load(dst, src, coord, scope=self.name)

    def store(self, dst, src, coord=None):
        return store(dst, src, coord, scope=self.name)
