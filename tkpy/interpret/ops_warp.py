"""CPU semantics of the warp-level ops (the counterpart of codegen/ops_warp.py).

Register tiles are logical rows x cols float32 arrays: no op here depends on
which lane holds which element, so the fragment layouts (row/col) change
nothing on the CPU. Every map computes in fp32 and rounds to the destination
dtype, as the prelude's `to_float` / `from_float` do.
"""
from __future__ import annotations

import functools

import numpy as np

from ..ir.core import Var
from ..tiles.types import RT
from .bounds import read_global, write_global
from .memory import part
from .numerics import BINARY, REDUCE, UNARY, decode, encode, to_f32
from .ops_warp_extra import mapped
from .registry import lookup, semantics
from .sync import Barrier

_SCOPE_THREADS = {"warp": 32, "warpgroup": 128}   # as codegen's SCOPE_THREADS; "block": all threads


def _elements(warp, tile, scope: str = "warp"):
    """The elements of shared `tile` this warp moves: all of them, or its share of a cooperative copy."""
    if scope == "block":
        threads, slot = warp.block.program.ir.threads, warp.index
    else:
        threads, slot = _SCOPE_THREADS[scope], (warp.index % 4 if scope == "warpgroup" else 0)
    return part(tile.root, tile.row, tile.col, tile.type, threads, slot)


def _shape(var: Var) -> tuple:
    t = var.type
    return (t.rows, t.cols) if isinstance(t, RT) else (t.length,)


@semantics("load_rt_gl", "load_rv_gl", attrs=("fill",))
def load_rt_gl(warp, op):
    dst, src, coord = op.args
    g = warp.global_tensor(src)
    raw = read_global(warp, op, g, coord, dst.type, f"load into `{dst.name}` from `{src.name}`")
    warp.write(dst, decode(g.dtype, raw).reshape(_shape(dst)))


@semantics("store_gl_rt", "store_gl_rv", attrs=("masked",))
def store_gl_rt(warp, op):
    dst, src, coord = op.args
    g = warp.global_tensor(dst)
    what = f"store of `{src.name}` into `{dst.name}`"
    write_global(warp, op, g, coord, src.type, encode(g.dtype, warp.read(src)), what)


@semantics("store_add_gl_rt", attrs=("masked",))
def store_add_gl_rt(warp, op):
    """red.global.add.f32 on every element (inside the tensor, masked): read, add in fp32, write back, subnormal
    inputs and results flushed to zero as the GPU's reductions into global memory do. (A warp's op runs whole
    between two of the interpreter's switches: each element's add is atomic.)"""
    dst, src, coord = op.args
    g = warp.global_tensor(dst)
    what = f"store_add of `{src.name}` into `{dst.name}`"
    old = decode(g.dtype, read_global(warp, op, g, coord, src.type, what)).reshape(_shape(src))
    write_global(warp, op, g, coord, src.type, encode(g.dtype, _flushed(_flushed(old) + _flushed(warp.read(src)))),
                 what)


def _flushed(x: np.ndarray) -> np.ndarray:
    """fp32 values with the subnormal ones set to zero of their sign."""
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


@semantics("load_rt_st", "load_rv_sv", attrs=("private",))
def load_rt_st(warp, op):
    dst, src = op.args
    tile = warp.shared_tile(src)
    raw = warp.block.shared.read(tile, _elements(warp, tile), f"load into `{dst.name}`", op.loc)
    if op.attrs.get("private"):                      # (the GPU's order of the lanes', prelude load_private)
        raw = raw.reshape(-1)[_private_order(tile.type.length)]
    warp.write(dst, decode(tile.type.dtype, raw).reshape(_shape(dst)))


@semantics("store_st_rt", "store_sv_rv", attrs=("private",))
def store_st_rt(warp, op):
    dst, src = op.args
    tile = warp.shared_tile(dst)
    values = encode(tile.type.dtype, warp.read(src))
    if op.attrs.get("private"):
        values = _placed_private(values)
    warp.block.shared.write(tile, values, _elements(warp, tile))


@semantics("map_private", attrs=("fn",))
def map_private(warp, op):
    """tk.map(sums, fn, sums, *vectors, private=True): the shared vector's values, in their private order, the
    function's first argument, its result written back in that order."""
    dst, *vectors = op.args
    tile = warp.shared_tile(dst)
    raw = warp.block.shared.read(tile, _elements(warp, tile), f"map of `{dst.name}`", op.loc).reshape(-1)
    values = [decode(tile.type.dtype, raw)[_private_order(tile.type.length)]] + [warp.read(v) for v in vectors]
    out = mapped(warp, op, values, (tile.type.length,), tile.type)
    warp.block.shared.write(tile, encode(tile.type.dtype, _placed_private(out)), _elements(warp, tile))


def _placed_private(values: np.ndarray) -> np.ndarray:
    """A vector's values as a private store places them (_private_order)."""
    placed = np.empty_like(values)
    placed[_private_order(len(values))] = values
    return placed


@functools.cache
def _private_order(length: int) -> np.ndarray:
    """Where a private store puts each value of an fp32 contig vector of `length` (element c * 256 + 8 l + k of
    lane l's chunk c): 16-byte word (2 c + k // 4) * 32 + l, its value k % 4 (prelude store_private)."""
    e = np.arange(length)
    c, lane, k = e // 256, e % 256 // 8, e % 8
    return ((2 * c + k // 4) * 32 + lane) * 4 + k % 4


@semantics("load_st_gl", "load_sv_gl", "load_async", attrs=("scope", "fill", "masked"))
def load_st_gl(warp, op):
    """Shared tiles and vectors from global memory. cp.async (load_async) lands at once here: a valid
    execution of a kernel that waits for it (masked: zero past the edges, as its zero-fill does)."""
    dst, src, coord = op.args
    tile = warp.shared_tile(dst)
    g = warp.global_tensor(src)
    box = read_global(warp, op, g, coord, tile.type, f"load into `{tile.name}` from `{src.name}`")
    mine = _elements(warp, tile, op.attrs["scope"])
    warp.block.shared.write(tile, box[mine.rows, mine.cols], mine)


@semantics("store_gl_st", "store_gl_sv", attrs=("scope", "masked"))
def store_gl_st(warp, op):
    dst, src, coord = op.args
    tile = warp.shared_tile(src)
    g = warp.global_tensor(dst)
    what = f"store of `{tile.name}` into `{dst.name}`"
    mine = _elements(warp, tile, op.attrs["scope"])
    write_global(warp, op, g, coord, tile.type, warp.block.shared.read(tile, mine, what, op.loc), what,
                 mine.rows, mine.cols)


@semantics("fill")
def fill(warp, op):
    dst, value = op.args
    warp.write(dst, np.full(_shape(dst), to_f32(warp.value(value)), np.float32))


@semantics("unary", attrs=("fn",))
def unary(warp, op):
    dst, src = op.args
    warp.write(dst, lookup(UNARY, op.attrs["fn"], op)(warp.read(src)))


@semantics("binary", attrs=("fn",))
def binary(warp, op):
    dst, a, b = op.args
    other = warp.read(b) if isinstance(b, Var) else np.float32(to_f32(warp.value(b)))
    warp.write(dst, lookup(BINARY, op.attrs["fn"], op)(warp.read(a), other))


@semantics("reduce", attrs=("fn", "axis"))
def reduce(warp, op):
    dst, src, *accum = op.args
    fn = lookup(REDUCE, op.attrs["fn"], op)
    v = fn.reduce(warp.read(src), axis=1 if op.attrs["axis"] == "row" else 0)
    warp.write(dst, fn(v, warp.read(accum[0])) if accum else v)


@semantics("broadcast", attrs=("fn", "axis", "skip_ones"))
def broadcast(warp, op):
    """(skip_ones: an in-place multiplication skipped when every factor is 1 changes nothing: computed as is.)"""
    dst, src, vec = op.args
    v = warp.read(vec)
    fn = lookup(BINARY, op.attrs["fn"], op)
    warp.write(dst, fn(warp.read(src), v[:, None] if op.attrs["axis"] == "row" else v[None, :]))


@semantics("mma", attrs=("trans_a", "trans_b"))
def mma(warp, op):
    """d = a @ b + c (a, b transposed when `trans_a`, `trans_b`): the bf16/fp16 inputs are exact in fp32,
    products and sums are fp32 (sgemm)."""
    d, a, b, c = op.args
    a, b = warp.read(a), warp.read(b)
    a, b = (a.T if op.attrs["trans_a"] else a), (b.T if op.attrs["trans_b"] else b)
    warp.write(d, np.matmul(a, b) + warp.read(c))


@semantics("sync", attrs=("scope",))
def sync(warp, op):
    """__syncthreads: every warp of the block, from the same line. __syncwarp orders nothing on the CPU,
    where a warp runs as one unit."""
    if op.attrs["scope"] != "block":
        return None
    warps = warp.block.program.ir.warps
    return warp.block.sync_object("syncthreads", lambda: Barrier("__syncthreads", warps, one_site=True)).arrive(warp)


@semantics("mark", attrs=("label",))
def mark(warp, op):
    """A timeline mark records cycles on the GPU only (tkpy/runtime/timeline.py)."""
    return None
