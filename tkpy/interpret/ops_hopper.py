"""CPU semantics of the Hopper and cluster ops (the counterpart of codegen/ops_hopper.py): semaphores,
TMA, proxy fences, named barriers, setmaxnreg and cluster barriers; wgmma is in ops_wgmma.py.

Each op runs once per calling warp, as the prelude issues it from lane 0. The
asynchronous engines are modelled as far as a kernel can observe them:
- TMA loads write their box at once, zero past the tensor's edges on every axis
  (coordinates out of range are not errors: the hardware fills them); the bytes
  stay in flight until the semaphore phase they complete on has completed and a
  warp has waited on it (mbarrier.py). Stores write the part inside the tensor
  when issued.
- A TMA store's source may not be overwritten until a store wait covers it.
- TMA stores (and wgmma) read shared memory through the async proxy: what a warp's
  ordinary stores wrote must be fenced by that warp (tk.fence_proxy_async()) first.
"""
from __future__ import annotations

import itertools

import numpy as np

from ..errors import InterpretError
from ..ir.protocol import MAX_NAMED_BARRIER, REGISTER_FILE
from .mbarrier import Semaphore, Transfer
from .memory import whole
from .numerics import RAW, decode, encode, to_f32, wrap_int32
from .registry import semantics
from .sync import Barrier, Wait


# -- semaphores ---------------------------------------------------------------------------------------
def _mbarrier(block, where) -> Semaphore:
    return block.sync_object(("semaphore", where.base), lambda: Semaphore(where.name, block.name))


def semaphore_of(warp, ref, block=None) -> Semaphore:
    """Semaphore `ref` of `block` (by default the warp's own), which must be initialised."""
    block = block or warp.block
    sem = _mbarrier(block, warp.shared_tile(ref))
    if sem.count is None:
        hint = "" if block is warp.block else ": synchronise the cluster (tk.cluster.sync()) after initialising"
        raise InterpretError(f"semaphore `{sem.name}` of {block.name} is used before tk.init_semaphore{hint}",
                             warp.loc)
    return sem


def _peer(warp, rank: int):
    """The block of cluster rank `rank`."""
    cluster = warp.block.cluster
    if not 0 <= rank < len(cluster):
        raise InterpretError(f"cluster rank {rank} is out of range: the cluster has {len(cluster)} blocks", warp.loc)
    return cluster[rank]


@semantics("sem_init", attrs=("arrivals",))
def sem_init(warp, op):
    _mbarrier(warp.block, warp.shared_tile(op.args[0])).init(op.attrs["arrivals"])


@semantics("sem_arrive", attrs=("count",))
def sem_arrive(warp, op):
    semaphore_of(warp, op.args[0]).arrive(op.attrs["count"], op.loc)


@semantics("sem_arrive_remote", attrs=("count", "scope"))
def sem_arrive_remote(warp, op):
    """(The release's scope makes no difference here: the interpreter's memory is sequentially consistent.)"""
    sem, rank = op.args
    semaphore_of(warp, sem, _peer(warp, warp.value(rank))).arrive(op.attrs["count"], op.loc)


@semantics("sem_expect")
def sem_expect(warp, op):
    sem, nbytes = op.args
    n = warp.value(nbytes)
    if n < 0:
        raise InterpretError(f"expect of {n} bytes: a byte count cannot be negative", op.loc)
    semaphore_of(warp, sem).expect(n, warp, op.loc)


@semantics("sem_wait")
def sem_wait(warp, op):
    sem, phase = op.args
    parity = warp.value(phase)
    if parity not in (0, 1):
        raise InterpretError(f"tk.wait takes a phase parity, 0 or 1 (e.g. k // stages % 2); got {parity}", op.loc)
    return semaphore_of(warp, sem).wait(parity)


# -- TMA ----------------------------------------------------------------------------------------------
def _inside(warp, g, coord, t):
    """The part of the box of tile type `t` at `coord` (in units of `t`) that lies inside global tensor `g`:
    (a view of it, the rows and columns of the box it covers), or None."""
    *lead, r, c = (warp.value(x) for x in coord)   # lead: (batch, depth), or (outer, batch, depth) when 5-d
    r, c = r * t.rows, c * t.cols
    *sizes, nr, nc = g.raw.shape
    r0, r1, c0, c1 = max(r, 0), min(r + t.rows, nr), max(c, 0), min(c + t.cols, nc)
    if not (all(0 <= i < n for i, n in zip(lead, sizes)) and r0 < r1 and c0 < c1):
        return None
    return g.raw[(*lead, slice(r0, r1), slice(c0, c1))], slice(r0 - r, r1 - r), slice(c0 - c, c1 - c)


def _destinations(warp, mask) -> list:
    """The blocks a load lands in: the warp's own, or those of the multicast mask's cluster ranks."""
    if not mask:
        return [warp.block]
    bits = warp.value(mask[0])
    cluster = warp.block.cluster
    if not 0 < bits < 1 << len(cluster):
        raise InterpretError(f"TMA multicast mask {bits:#b} must name some of the cluster's {len(cluster)} ranks "
                             f"(bits 0..{len(cluster) - 1})", warp.loc)
    return [b for rank, b in enumerate(cluster) if bits >> rank & 1]


@semantics("tma_load")
def tma_load(warp, op):
    """The tile lands, at the same shared offset, in each destination block, completing its bytes on that
    block's semaphore."""
    dst, src, coord, sem, *mask = op.args
    tile = warp.shared_tile(dst)
    t = tile.type
    raw = np.zeros((t.rows, t.cols), RAW[t.dtype.nbytes])
    inside = _inside(warp, warp.global_tensor(src), coord, t)
    if inside is not None:
        box, rows, cols = inside
        raw[rows, cols] = box
    for block in _destinations(warp, mask):
        target = semaphore_of(warp, sem, block)
        phase = target.deliver(t.nbytes, warp, op.loc)
        block.shared.write_async(tile, raw, whole(tile), Transfer(target, phase, op.loc, tile.name))


class _Store:
    """A TMA store whose source may still be read, named for error messages (SharedMemory.hold)."""

    def __init__(self, op, warp):
        self.text = (f"the TMA store at {op.loc.short} (warp {warp.index}, until tk.tma.store_commit_group() and "
                     "tk.tma.store_async_wait())")

    def __str__(self) -> str:
        return self.text


class _Stores:
    """A warp's TMA stores that may still read their source: not yet committed, and committed groups."""

    def __init__(self):
        self.open: list = []
        self.committed: list = []


@semantics("tma_store", attrs=("add",))
def tma_store(warp, op):
    """The part of the tile that falls inside the tensor is written (or, with add, added in fp32 and rounded
    to the tensor's dtype) at once; the tile stays held until a store wait covers the store's group."""
    dst, src, coord = op.args
    tile = warp.shared_tile(src)
    g = warp.global_tensor(dst)
    what = f"TMA store of `{tile.name}` into `{dst.name}`"
    raw = warp.block.shared.read(tile, whole(tile), what, op.loc, async_proxy=True)
    store = _Store(op, warp)
    warp.block.shared.hold(tile, whole(tile), store)
    warp.block.sync_object(("tma stores", warp.index), _Stores).open.append(store)
    inside = _inside(warp, g, coord, tile.type)
    if inside is None:
        return
    box, rows, cols = inside
    values = raw[rows, cols]
    box[...] = encode(g.dtype, decode(g.dtype, box) + decode(g.dtype, values)) if op.attrs["add"] else values


@semantics("tma_store_commit")
def tma_store_commit(warp, op):
    stores = warp.block.sync_object(("tma stores", warp.index), _Stores)
    stores.committed.append(stores.open)
    stores.open = []


@semantics("tma_store_wait", attrs=("pending", "read_only"))
def tma_store_wait(warp, op):
    """cp.async.bulk.wait_group(.read) N: the sources of all but the newest N committed groups are free."""
    stores = warp.block.sync_object(("tma stores", warp.index), _Stores)
    done = stores.committed[:max(0, len(stores.committed) - op.attrs["pending"])]
    del stores.committed[:len(done)]
    for group in done:
        for store in group:
            warp.block.shared.release(store)


@semantics("tma_prefetch")
def tma_prefetch(warp, op):
    """An L2 prefetch changes no values."""
    return None


# -- fences, barriers, registers, clusters ------------------------------------------------------------
@semantics("fence_proxy_async")
def fence_proxy_async(warp, op):
    warp.block.shared.fence(warp.index)


@semantics("named_sync", attrs=("threads",))
def named_sync(warp, op):
    """bar.sync id, threads: completes when threads / 32 warps have arrived (every arrival of a phase must
    give the same count)."""
    return _named_barrier(warp, op).arrive(warp)


@semantics("named_arrive", attrs=("threads",))
def named_arrive(warp, op):
    """bar.arrive id, threads: counts this warp towards the barrier's phase and goes on."""
    _named_barrier(warp, op).arrive(warp)


@semantics("warpgroup_any_greater", attrs=("threads",))
def warpgroup_any_greater(warp, op):
    """bar.red.or on named barrier `barrier`: each warp's predicate (some element of its vector above the
    threshold; NaN is not), ORed over the warps of the phase into every warp's result variable."""
    result, vec, threshold, _ = op.args
    mine = bool(np.any(warp.read(vec) > np.float32(to_f32(warp.value(threshold)))))
    return _named_barrier(warp, op).arrive(warp, vote=(mine, result.name))


@semantics("warpgroup_any", attrs=("threads",))
def warpgroup_any(warp, op):
    """bar.red.or of a scalar predicate over the warps of the phase, into every warp's result variable."""
    result, condition, _ = op.args
    return _named_barrier(warp, op).arrive(warp, vote=(bool(warp.value(condition)), result.name))


@semantics("threadfence")
def threadfence(warp, op):
    """The interpreter's global memory is seen by every warp as soon as written: nothing to order."""
    return None


@semantics("atomic_add")
def atomic_add(warp, op):
    """atom.add on one int32 element, once for the warp; the warp's result variable gets the old value."""
    result, dst, *coord, value = op.args
    g = warp.global_tensor(dst)
    cell = g.box(tuple(warp.value(c) for c in coord), 1, 1, f"atomic_add on `{dst.name}`", op.loc)
    ints = cell.view(np.int32)
    old = int(ints[0, 0])
    ints[0, 0] = wrap_int32(old + int(warp.value(value)))
    warp.env[result.name] = old


def _named_barrier(warp, op) -> Barrier:
    """The named barrier the op's last argument names (an id the warp computes, for runtime ids), this phase."""
    bid = warp.value(op.args[-1])
    if not isinstance(bid, int) or not 1 <= bid <= MAX_NAMED_BARRIER:
        raise InterpretError(f"named barrier id {bid!r} is not in 1..{MAX_NAMED_BARRIER}", op.loc)
    warps = op.attrs["threads"] // 32
    barrier = warp.block.sync_object(("named barrier", bid),
                                     lambda: Barrier(f"named barrier {bid}", warps, one_site=False))
    if barrier.arrived and barrier.expected != warps:
        raise InterpretError(f"named barrier {bid} is given {32 * warps} threads here, but {32 * barrier.expected} "
                             f"by the warps already waiting on it ({barrier.arrived[0][1].short})", op.loc)
    if any(w == warp.index for w, _ in barrier.arrived):
        first = next(loc for w, loc in barrier.arrived if w == warp.index)
        raise InterpretError(f"warp {warp.index} arrives twice on named barrier {bid} in one phase (first at "
                             f"{first.short}): the barrier would complete without the warps it is meant to wait "
                             "for", op.loc)
    barrier.expected = warps
    return barrier


@semantics("cluster_sync")
def cluster_sync(warp, op):
    """barrier.cluster.arrive + wait: every warp of every block of the cluster."""
    cluster = warp.block.cluster
    warps = len(cluster) * warp.block.program.ir.warps
    barrier = cluster[0].sync_object("cluster barrier", lambda: Barrier("the cluster barrier", warps,
                                                                        one_site=False, across_blocks=True))
    return barrier.arrive(warp)


class _RegisterFile:
    """setmaxnreg's accounting of a block's registers per thread, per warp. Each warp starts with an equal
    share of the register file (the interpreter does not know the compiled count; a kernel launched with
    `__launch_bounds__(threads, 1)` may use up to that share); `.dec` returns registers to the pool and
    `.inc` takes them, waiting until the block fits in the file, as the hardware waits."""

    def __init__(self, warps: int, blocks_per_sm: int = 1):
        self.file = REGISTER_FILE // blocks_per_sm          # (blocks_per_sm blocks share the SM's file)
        self.per_thread = [self.file // (32 * warps) // 8 * 8] * warps

    def held(self) -> int:
        return 32 * sum(self.per_thread)


class _RegisterWait(Wait):
    def __init__(self, registers: _RegisterFile, warp: int, n: int):
        self.registers, self.warp, self.n = registers, warp, n

    def ready(self) -> bool:
        regs = self.registers
        if regs.held() + 32 * (self.n - regs.per_thread[self.warp]) > regs.file:
            return False
        regs.per_thread[self.warp] = self.n
        return True

    def describe(self) -> str:
        runs = [list(run) for _, run in itertools.groupby(enumerate(self.registers.per_thread), lambda wn: wn[1])]
        held = ", ".join((f"warps {r[0][0]}-{r[-1][0]}" if len(r) > 1 else f"warp {r[0][0]}") + f" at {r[0][1]}"
                         for r in runs)
        return (f"setmaxnreg.inc to {self.n} registers per thread: the block's warps hold {self.registers.held()} "
                f"of the {self.registers.file} registers ({held} per thread), and no warp releases any")


@semantics("setmaxnreg", attrs=("registers", "increase"))
def setmaxnreg(warp, op):
    ir = warp.block.program.ir
    regs = warp.block.sync_object("registers", lambda: _RegisterFile(ir.warps, ir.blocks_per_sm))
    n, now, increase = op.attrs["registers"], regs.per_thread[warp.index], op.attrs["increase"]
    if (n < now) if increase else (n > now):
        raise InterpretError(f"setmaxnreg.{'inc' if increase else 'dec'} to {n} registers per thread, but the warp "
                             f"has {now}: an inc may not lower the count, nor a dec raise it", op.loc)
    if not increase:
        regs.per_thread[warp.index] = n
        return None
    return _RegisterWait(regs, warp.index, n)
