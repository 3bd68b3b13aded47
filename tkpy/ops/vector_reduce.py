"""Reductions of whole register vectors to runtime scalars: over a warp, over groups of a block's warps, over a
cluster's blocks.

    s = tk.sum(v)                             # every element of this warp's vector, the same in each lane
    mean, sq = tk.block.sum(x, x2, warps=8)   # over each 8 consecutive warps' vectors (a row split among them)
    s = tk.cluster.sum(v, warps=16)           # over warps w % 16 ... of every block of the cluster
    top, total = tk.block.merge_softmax(m, s, warps=8)  # each warp's (max, sum of exp(x - max)) merged: the row's

A row too wide for one warp's registers is split among several warps (and, wider still, several blocks of a
cluster), each holding a piece of it in a vector; its statistics (a norm's sum of squares, a softmax's max) are
these reductions, and each warp of the group gets the same value, bit for bit, to normalize its own piece with.

How (the ops recorded, which the interpreter runs as they are): each warp reduces its vector (shuffles across the
lanes holding different values); lane 0 writes it into a slot of a shared scratch vector of the kernel's, in one of
two buffers taken in turns (so that a warp starting the next reduction never overwrites what a slower one still
reads); the group meets at a barrier (its named barrier 1 + warp // warps, or __syncthreads when the group is the
block); then each warp combines its group's slots in one fixed order (lane j reads slot j, a butterfly of
shuffles), so every warp computes the same bits. A cluster reduction sends each warp's partial into every block's
scratch with asynchronous stores (st.async) that complete on the receiving block's semaphore for that buffer, whose
phase warp 0 announces (expect) and every warp waits on: no cluster barrier and no GPU-wide fence a reduction, as
Quack's cluster reductions; the semaphores are initialised at the kernel's top, before one cluster barrier. Several
vectors reduce together over one barrier (up to MAX_VALUES); a float scalar among them is its warp's partial as it is
(`s, sx = tk.block.sum(e, tk.sum(x), warps=8)`: x's warp sum taken before x was overwritten, reduced over the group
in the same barrier as e). Every warp of a group must call the reduction (a barrier or a semaphore waits for them
all). merge_softmax exchanges two scalars a warp (its piece's max and sum of exponentials) the same way and merges
them in one fixed order: a butterfly max, then each lane's sum rescaled to it and a butterfly sum.
"""
from __future__ import annotations

import math

from dataclasses import dataclass

from ..frontend.context import current
from ..frontend.control import CLUSTER_RANK, WARP_ID, Mutable, assign, if_, var
from ..ir.core import SharedRef, Var
from ..ir.expr import Expr, as_expr
from ..ir.protocol import MAX_NAMED_BARRIER
from ..tiles.dtypes import f32
from ._checks import describe, emit, fail, operand, register_vector, scalar
from .declare import sv
from .scalar_memory import store_scalar_remote
from .sync import sync
from .sync_async import expect_bytes, init_semaphore, named_sync, semaphore, wait

FNS = {"sum": 0.0, "max": -math.inf, "min": math.inf}    # function -> its identity
MAX_VALUES = 4                                             # vectors reduced together over one barrier


def warp_reduce(fn: str, vectors: tuple, name: str):
    """The scalar `fn` of each vector's elements over this warp (one tuple entry each, or the scalar for one)."""
    out = [_reduced(fn, register_vector(v, f"{_public(fn)}"), name) for v in _vectors(vectors, fn)]
    return out[0] if len(out) == 1 else tuple(out)


def group_reduce(fn: str, vectors: tuple, scope: str, warps, name: str):
    """`fn` over the vectors of a group of warps: `warps` consecutive warps of the block (all by default) or, at
    cluster scope, those warps of every block of the cluster. One scalar per vector, the same in every warp of the
    group (see the module's docstring)."""
    ctx = current()
    what = f"tk.{scope}.{_public(fn)}"
    vectors = _vectors(vectors, f"{scope}.{_public(fn)}")
    group, blocks = _group_and_blocks(ctx, warps, what, scope)
    partials = [_partial(fn, v, what, name) for v in vectors]
    if group * blocks == 1:
        return partials[0] if len(partials) == 1 else tuple(partials)
    state, first = _exchange(ctx, scope, group, blocks, partials)
    out = []
    for k in range(len(partials)):
        total = var(0.0, name)
        emit("reduce_slots", total, state.scratch, first + k, fn=fn, **_slots(ctx, group, blocks))
        out.append(total)
    _next_buffer(state, scope)
    return out[0] if len(out) == 1 else tuple(out)


def merge_softmax(m, s, scope: str, warps, name: str, sums: tuple = ()):
    """The softmax statistics of a row split over a group of warps (as group_reduce's), from each warp's own: `m`
    the max of its piece and `s` the sum of exp(x - m) over it (runtime float scalars). Returns (the row's max M,
    the sum over the row of exp(x - M) = sum of s e^(m - M) over the warps), the same bits in every warp of the
    group, in one exchange (a barrier or a semaphore wait) where a max and then a sum would take two: the online
    softmax's merge, as FlashAttention's split rows and Quack's cluster softmax do it. `sums`: up to
    MAX_VALUES - 2 more float scalars a warp, summed over the group in the same exchange (returned after M and S)."""
    ctx = current()
    what = f"tk.{scope}.merge_softmax"
    if len(sums) > MAX_VALUES - 2:
        fail(f"{what}: at most {MAX_VALUES - 2} sums go along with the statistics, got {len(sums)}")
    partials = [scalar(m, f"{what}'s max"), scalar(s, f"{what}'s sum"),
                *(scalar(x, f"{what}'s other sum") for x in sums)]
    group, blocks = _group_and_blocks(ctx, warps, what, scope)
    if group * blocks == 1:
        return tuple(partials)
    state, first = _exchange(ctx, scope, group, blocks, partials)
    top, total = var(0.0, f"{name}_max"), var(0.0, f"{name}_sum")
    slots = _slots(ctx, group, blocks)
    emit("merge_softmax_slots", top, total, state.scratch, first, **slots)
    others = []
    for k in range(len(sums)):                        # (their slots beside the statistics', read after the same wait)
        others.append(var(0.0, f"{name}_sum{k + 1}"))
        emit("reduce_slots", others[-1], state.scratch, first + 2 + k, fn="sum", **slots)
    _next_buffer(state, scope)
    return (top, total, *others)


def merge_variance(total, centered, count, scope: str, warps, name: str):
    """The mean and the sum of squared deviations (M2) of a row split over a group of warps (as group_reduce's), from
    each warp's own: `total` the sum of its piece's elements, `centered` the sum of their squared deviations from
    its own mean total / count, `count` how many elements it holds (runtime float scalars). Returns (mean, M2), the
    same bits in every warp of the group, in one exchange where the mean and then the centred sum would take two:
    Chan's merge, M2 = sum of centered_j + d_j^2 / count_j with d_j = total_j - count_j mean, exact where the row's
    mean is far from 0 (E[x^2] - E[x]^2 cancels)."""
    ctx = current()
    what = f"tk.{scope}.merge_variance"
    partials = [scalar(total, f"{what}'s total"), scalar(centered, f"{what}'s centred sum"),
                scalar(count, f"{what}'s count")]
    group, blocks = _group_and_blocks(ctx, warps, what, scope)
    if group * blocks == 1:
        return partials[0] * (1.0 / partials[2]), partials[1]
    state, first = _exchange(ctx, scope, group, blocks, partials)
    mean, m2 = var(0.0, f"{name}_mean"), var(0.0, f"{name}_m2")
    emit("merge_variance_slots", mean, m2, state.scratch, first, **_slots(ctx, group, blocks))
    _next_buffer(state, scope)
    return mean, m2


def _group_and_blocks(ctx, warps, what: str, scope: str) -> tuple[int, int]:
    """(warps a group of the block, blocks the group spans), checked."""
    group = _group(ctx.warps, warps, what, scope)
    if scope == "cluster" and ctx.cluster is None:
        fail(f"{what} needs a kernel launched in clusters: @tk.kernel(..., cluster=(2, 1, 1))")
    return group, math.prod(ctx.cluster) if scope == "cluster" else 1


def _exchange(ctx, scope: str, group: int, blocks: int, partials: list):
    """Each warp's partials into the scratch (every block's, at cluster scope) and the group met: (the state, the
    scratch index of the group's first partial in this buffer)."""
    state = _state(ctx, scope, blocks)
    size = blocks * ctx.warps * MAX_VALUES                       # one buffer: a slot per value, warp and block
    if scope == "cluster":
        buffer, phase = state.count % 2, state.count // 2 % 2
        sem = state.arrived[buffer]
        with if_(WARP_ID == 0):
            expect_bytes(sem, blocks * ctx.warps * len(partials) * 4)      # what every block's warps send here
        slot = buffer * size + (CLUSTER_RANK * ctx.warps + WARP_ID) * MAX_VALUES
        for k, p in enumerate(partials):                  # (into every block's scratch, completing on its semaphore)
            store_scalar_remote(state.scratch, p, slot + k, None, sem)
        wait(sem, phase)
    else:
        buffer = state.count
        slot = buffer * size + WARP_ID * MAX_VALUES
        for k, p in enumerate(partials):
            emit("store_sv_scalar", state.scratch, slot + k, p)
        if group == ctx.warps:
            sync()
        else:
            named_sync(1 + WARP_ID // group, group)
    first = buffer * size + (0 if group == ctx.warps else (WARP_ID - WARP_ID % group) * MAX_VALUES)   # (1st warp's)
    return state, first


def _slots(ctx, group: int, blocks: int) -> dict:
    """Where the group's partials lie in a buffer (the attributes of reduce_slots and merge_softmax_slots)."""
    return dict(count=group * blocks, group=group, stride=MAX_VALUES, rank_stride=ctx.warps * MAX_VALUES)


def _next_buffer(state, scope: str) -> None:
    assign(state.count, 1 - state.count if scope == "block" else state.count + 1)


def _partial(fn: str, v, what: str, name: str):
    """This warp's part of a group reduction: its vector reduced, or a float scalar as it is (a value the warp has
    already reduced, e.g. from a vector since overwritten)."""
    if isinstance(v, Expr) or (isinstance(v, (int, float)) and not isinstance(v, bool)):
        e = as_expr(v)
        if e.dtype != f32:
            fail(f"{what}: a scalar partial must be a float, got {e.dtype} (tk.var(0.0, name) for a float)")
        return e
    return _reduced(fn, register_vector(v, what), f"{name}_warp")


def _reduced(fn: str, v: Var, name: str) -> Mutable:
    result = var(0.0, name)
    emit("vec_reduce", result, v, fn=fn)
    return result


def _vectors(vectors: tuple, what: str) -> tuple:
    if not vectors:
        fail(f"{what}: give the register vectors to reduce, e.g. tk.{what}(v)")
    if len(vectors) > MAX_VALUES:
        fail(f"{what}: at most {MAX_VALUES} vectors reduce together, got {len(vectors)}; split them into calls")
    return vectors


def _group(block_warps: int, warps, what: str, scope: str) -> int:
    if warps is None:
        return block_warps
    if not isinstance(warps, int) or isinstance(warps, bool) or warps < 1 or block_warps % warps:
        fail(f"{what}: warps must be a positive int dividing the block's {block_warps} warps, got {warps!r}")
    if scope == "block" and 1 < warps < block_warps and block_warps // warps > MAX_NAMED_BARRIER:
        fail(f"{what}: {block_warps // warps} groups of {warps} warps need as many named barriers; at most "
             f"{MAX_NAMED_BARRIER} (groups of more warps, or fewer warps a block)")
    return warps


@dataclass
class _State:
    """A kernel's reductions at one scope: the scratch vector of partial results (two buffers), the runtime count
    choosing the buffer (block: a parity; cluster: reductions so far, whose half gives the semaphore's phase), and
    the semaphores on which a cluster's partials arrive (one a buffer)."""

    scratch: SharedRef
    count: Mutable
    arrived: Var | None = None


def _state(ctx, scope: str, blocks: int) -> _State:
    """The reductions' state at `scope`, made on first use at the kernel's top: a cluster's semaphores are
    initialised there (by warp 0, one arrival a phase: its expect) and the cluster meets once before any block
    sends to another."""
    state = ctx.reductions.get(scope)
    if state is not None:
        return state
    ctx.push_block()
    scratch = operand(sv(f32, -(-2 * blocks * ctx.warps * MAX_VALUES // 16) * 16), "reduction scratch")
    scratch.var.name = f"{scope}_reduce_slots"
    count = var(0, f"{scope}_reductions" if scope == "cluster" else f"{scope}_reduce_parity")
    state = _State(scratch, count)
    if scope == "cluster":
        state.arrived = semaphore(2)
        state.arrived.name = "cluster_reduce_arrived"
        with if_(WARP_ID == 0):
            for i in range(2):
                init_semaphore(state.arrived[i], 1)
        emit("cluster_sync")
    ctx.body[0:0] = ctx.pop_block()
    ctx.reductions[scope] = state
    return state


def _public(fn: str) -> str:
    return "sum" if fn == "sum" else "a" + fn


def sum(*vectors, name: str = "sum"):  # noqa: A001 - tk.sum, as torch.sum
    """The sum of every element of each register vector over the calling warp: a float runtime scalar (a tk.var
    named `name`), the same in every lane; one per vector (a tuple) for several. Computed in fp32: each lane's own
    values, then shuffles across the lanes that hold different ones. tk.block.sum / tk.cluster.sum: over several
    warps' vectors."""
    return warp_reduce("sum", vectors, name)


def amax(*vectors, name: str = "max"):
    """The largest element of each register vector over the calling warp (see tk.sum; NaN is ignored, as fmaxf
    does)."""
    return warp_reduce("max", vectors, name)


def amin(*vectors, name: str = "min"):
    """The smallest element of each register vector over the calling warp (see tk.sum)."""
    return warp_reduce("min", vectors, name)


SEGMENTS = (8, 16, 32, 64, 128, 256)        # a contig vector's segment sizes: within a chunk, whole lanes each


def segment_sum(dst, src, size: int):
    """dst[i] = the sum of src's elements in i's segment of `size` consecutive ones, for contig vectors: rows
    narrower than a warp's 256-element chunk packed several to a vector (two rows of 128 a chunk), each reduced on
    its own, as tk.sum reduces a whole vector. fp32 math, dtype converted; dst may be src. `size`: a power of two
    from 8 to 256 (a lane's 8 values of a chunk lie in one segment, whose size / 8 lanes combine by xor shuffles)."""
    return _segment_reduce("sum", dst, src, size)


def segment_max(dst, src, size: int):
    """dst[i] = the largest of src's elements in i's segment of `size` consecutive ones (see tk.segment_sum; NaN is
    ignored, as fmaxf does)."""
    return _segment_reduce("max", dst, src, size)


def _segment_reduce(fn: str, dst, src, size):
    what = f"tk.segment_{fn}"
    d, s = register_vector(dst, f"{what} destination"), register_vector(src, f"{what} source")
    for v in (d, s):
        if v.type.layout != "contig":
            fail(f"{what}: {describe(v)} must be a contig vector (tk.rv(dtype, n, \"contig\")), whose lanes hold 8 "
                 "consecutive elements")
    if d.type.length != s.type.length:
        fail(f"{what}: {describe(d)} and {describe(s)} differ in length")
    if size not in SEGMENTS or isinstance(size, bool):
        fail(f"{what}: size must be one of {SEGMENTS} (segments of whole lanes within a 256-element chunk), got "
             f"{size!r}")
    return emit("segment_reduce", d, s, fn=fn, size=size)

