"""Static checks of the asynchronous protocol (TMA, semaphores, wgmma, setmaxnreg) at trace time.

They catch, on the user's line, the mistakes that otherwise hang or corrupt a
kernel silently: an expect that does not match the bytes its loads deliver, a
load or wait on a semaphore nobody initialises or arrives on, a TMA store of a
tile written by ordinary stores without a proxy fence, and register
reallocations that do not fit the register file.
"""
from __future__ import annotations

from ..errors import TraceError
from .core import For, If, KernelIR, Op, SharedRef, walk
from .evaluate import compile_expr
from .expr import Expr, free_symbols, render

REGISTER_FILE = 65536        # 32-bit registers per SM (and per block with one block per SM)
MAX_NAMED_BARRIER = 15       # named barriers 0..15 per block (bar.sync); 0 is tk.sync()'s
GENERIC_SHARED_WRITES = ("store_st_rt", "load_st_gl")


def check(kernel: KernelIR) -> None:
    ops = [s for s in walk(kernel.body) if isinstance(s, Op)]
    _semaphores_are_initialised_and_signalled(ops)
    _arrivals_match_the_init(kernel, ops)
    _expects_match_their_loads(kernel.body)
    _tma_stores_are_fenced(kernel.body, set())
    _signals_follow_their_stores(kernel.body, False)
    _register_reallocation_fits(kernel, ops)


def _sem_of(op: Op):
    """The semaphore an op uses, as a SharedRef, or None."""
    for a in op.args:
        if isinstance(a, SharedRef) and type(a.type).__name__ == "Semaphore":
            return a
    return None


def _semaphores_are_initialised_and_signalled(ops) -> None:
    inits = {_sem_of(o).var for o in ops if o.name == "sem_init"}
    signals = {_sem_of(o).var for o in ops if o.name in ("sem_arrive", "sem_arrive_remote", "sem_expect", "tma_load")}
    for o in ops:
        sem = _sem_of(o)
        if sem is None or o.name == "sem_init":
            continue
        if sem.var not in inits:
            raise TraceError(f"{o.name.replace('sem_', '')} uses semaphore `{sem.var.name}`, which is never "
                             "initialised (tk.init_semaphore)", o.loc)
        if o.name == "sem_wait" and sem.var not in signals:
            raise TraceError(f"wait on semaphore `{sem.var.name}`, which nothing ever arrives on, expects "
                             "bytes on or loads into: this wait can never finish", o.loc)
        if o.name == "tma_load" and not any(p.name == "sem_expect" and _sem_of(p).var is sem.var for p in ops):
            raise TraceError(f"TMA load completes bytes on semaphore `{sem.var.name}`, but no tk.tma.expect "
                             "announces them: the phase would complete before the data arrives", o.loc)


def _arrivals_match_the_init(kernel: KernelIR, ops) -> None:
    """Per phase, the warps that arrive (an expect is one arrival) must add up to the init count.

    Which warps run an op is known when every enclosing branch depends only on the warp id; ops
    under other branches, and semaphores that other blocks arrive on, are left to the interpreter.
    """
    init_counts: dict = {}
    for o in ops:
        if o.name == "sem_init":
            init_counts.setdefault(_sem_of(o).var, set()).add(o.attrs["arrivals"])
    remote = {_sem_of(o).var for o in ops if o.name == "sem_arrive_remote"}
    arrivals: dict = {}       # (var, index text) -> [count, first op, per-site counts]
    unknown: set = set(remote)

    for o, warps, known in _ops_by_warps(kernel.body, frozenset(range(kernel.warps))):
        if o.name not in ("sem_arrive", "sem_expect"):
            continue
        sem = _sem_of(o)
        if not known:
            unknown.add(sem.var)
            continue
        elements = _elements_by_warp(sem, warps)
        if elements is None:
            unknown.add(sem.var)
            continue
        for element, those in elements.items():
            n = len(those) * o.attrs.get("count", 1)
            entry = arrivals.setdefault((sem.var, element), [0, o, []])
            entry[0] += n
            entry[2].append(n)
    for (var, _), (count, first, sites) in arrivals.items():
        inits = init_counts.get(var)
        if var in unknown or not inits or len(inits) != 1:
            continue
        (expected,) = inits
        # Either the sites share a phase, or each completes one (a semaphore arrived on again in sequence,
        # e.g. a ring of one stage used twice per iteration).
        if count != expected and any(n != expected for n in sites):
            raise TraceError(f"semaphore `{var.name}` is initialised for {expected} arrivals per phase, but "
                             f"{count} warp-level arrivals reach it (arrive and expect are issued once per "
                             "calling warp)", first.loc)


def _values_by_warp(e: Expr, warps: frozenset):
    """{warp: value of `e` in that warp} for the warps of `warps`, or None if `e` depends on more than the
    warp id."""
    fn = compile_expr(e)
    try:
        return {w: fn({"warpid": w}) for w in warps}
    except Exception:   # another symbol (loop counter, block index, parameter): unknown statically
        return None


def _warps_taking(cond: Expr, warps: frozenset):
    """The warps of `warps` for which `cond` holds, or None if it depends on more than the warp id."""
    values = _values_by_warp(cond, warps)
    return None if values is None else frozenset(w for w, taken in values.items() if taken)


def _elements_by_warp(sem: SharedRef, warps: frozenset):
    """{element: the warps of `warps` that use it} for a semaphore operand, or None when that is not known
    statically. An index that depends only on the warp id is evaluated per warp (so `sem[tk.warpgroup.id()]`
    from the first warp of each warpgroup is one arrival on each element); one that depends on the warp id and
    more (a loop counter, a variable) is not known; any other names the same element in every warp."""
    if sem.index is None:
        return {None: warps} if warps else {}
    values = _values_by_warp(sem.index, warps)
    if values is None:
        if "warpid" in {s.name for s in free_symbols(sem.index)}:
            return None
        return {render(sem.index): warps} if warps else {}
    elements: dict = {}
    for w, value in values.items():
        elements.setdefault(str(value), set()).add(w)
    return elements


def _same_ref(a: SharedRef, b: SharedRef) -> bool:
    if a.var is not b.var:
        return False
    if a.index is None or b.index is None:
        return a.index is b.index
    return render(a.index) == render(b.index)


def _expects_match_their_loads(stmts) -> None:
    """Within one block, the loads after an expect (until the next expect on that semaphore) must
    deliver exactly the expected bytes."""
    for i, s in enumerate(stmts):
        if isinstance(s, For):
            _expects_match_their_loads(s.body)
        elif isinstance(s, If):
            _expects_match_their_loads(s.then)
            _expects_match_their_loads(s.orelse)
        elif isinstance(s, Op) and s.name == "sem_expect":
            sem, nbytes = s.args
            if not hasattr(nbytes, "value"):
                continue                      # a runtime byte count: checked by the interpreter
            loads = []
            for later in (op for op in walk(stmts[i + 1:]) if isinstance(op, Op)):
                if later.name == "sem_expect" and _same_ref(_sem_of(later), sem):
                    break
                if later.name == "tma_load" and _same_ref(_sem_of(later), sem):
                    loads.append(later)
            delivered = sum(l.args[0].type.nbytes for l in loads)
            multicast = any(len(l.args) == 5 for l in loads)    # other blocks deliver bytes here too
            if loads and delivered != nbytes.value and not multicast:
                lines = ", ".join(f"{l.loc.short} ({l.args[0].type.nbytes} B)" for l in loads)
                raise TraceError(f"tma.expect announces {nbytes.value} bytes on `{sem.var.name}` but the loads "
                                 f"that complete on it deliver {delivered}: {lines}", s.loc)


def _tma_stores_are_fenced(stmts, dirty: set) -> set:
    """Shared tiles written by ordinary stores must pass tk.fence_proxy_async() before a TMA store reads them."""
    for s in stmts:
        if isinstance(s, For):
            dirty = _tma_stores_are_fenced(s.body, dirty)
        elif isinstance(s, If):
            dirty = _tma_stores_are_fenced(s.then, set(dirty)) | _tma_stores_are_fenced(s.orelse, set(dirty))
        elif isinstance(s, Op):
            if s.name in GENERIC_SHARED_WRITES:
                dirty = dirty | {_shared_root(s.args[0])}
            elif s.name == "fence_proxy_async":
                dirty = set()
            elif s.name == "tma_store" and _shared_root(s.args[1]) in dirty:
                raise TraceError(f"TMA store of `{_shared_root(s.args[1]).name}`, which ordinary stores wrote: call "
                                 "tk.fence_proxy_async() after writing it (and a barrier if other warps wrote it)",
                                 s.loc)
    return dirty


def _signals_follow_their_stores(stmts, pending: bool) -> bool:
    """A tk.signal releases the warp's earlier writes, but a TMA store still in flight is not yet written: one issued
    before the signal (loops taken twice) must be waited for in full (store_async_wait(0), not read_only) first, or
    the peer that acquires the signal may read the old data. Returns whether one is pending after `stmts`. A branch
    leaves a store pending only where both its sides do: its stores may be another warp's (a role's), whose own
    signal, inside the branch, is checked there."""
    for s in stmts:
        if isinstance(s, For):
            once = _signals_follow_their_stores(s.body, pending)
            pending = pending or _signals_follow_their_stores(s.body, once)
        elif isinstance(s, If):
            pending = _signals_follow_their_stores(s.then, pending) & _signals_follow_their_stores(s.orelse, pending)
        elif isinstance(s, Op):
            if s.name == "tma_store":
                pending = True
            elif s.name == "tma_store_wait" and s.attrs["pending"] == 0 and not s.attrs["read_only"]:
                pending = False
            elif s.name == "signal" and pending:
                raise TraceError("tk.signal after a TMA store that may still be in flight: the signal's release does "
                                 "not cover it, so whoever acquires the signal may read the old data; commit and wait "
                                 "for the stores in full first (tk.tma.store_commit_group(); "
                                 "tk.tma.store_async_wait(0))", s.loc)
    return pending


def _shared_root(a):
    """The declared shared tile (array) an operand lives in: a SharedRef's, or a subtile's viewed tile's."""
    while True:
        if isinstance(a, SharedRef):
            a = a.var
        elif getattr(a, "view", None) is not None:
            a = a.view.base
        else:
            return a


def _register_reallocation_fits(kernel: KernelIR, ops) -> None:
    realloc = [o for o in ops if o.name == "setmaxnreg"]
    if realloc and kernel.warps % 4:
        raise TraceError(f"setmaxnreg needs whole warpgroups: the kernel has {kernel.warps} warps, not a "
                         "multiple of 4", realloc[0].loc)
    if kernel.warps % 4:
        _wgmma_runs_in_whole_warpgroups(kernel)
    if not realloc:
        return
    producers = [o.attrs["registers"] for o in realloc if not o.attrs["increase"]]
    consumers = [o.attrs["registers"] for o in realloc if o.attrs["increase"]]
    groups = kernel.warps // 4
    if producers and consumers:
        need = 128 * (max(producers) + max(consumers) * (groups - 1))
        if need > REGISTER_FILE:
            raise TraceError(f"one producer warpgroup at {max(producers)} and {groups - 1} consumer warpgroups at "
                             f"{max(consumers)} registers need {need} registers; an SM has {REGISTER_FILE}",
                             realloc[0].loc)


def _wgmma_runs_in_whole_warpgroups(kernel: KernelIR) -> None:
    """In a kernel whose last warpgroup is partial (e.g. a template's producer of fewer than 4 warps), the
    warps that may run a wgmma (as far as warp-id branches tell) must all be in whole warpgroups."""
    whole = kernel.warps // 4 * 4
    for o, warps, _ in _ops_by_warps(kernel.body, frozenset(range(kernel.warps))):
        if o.name == "wgmma" and any(w >= whole for w in warps):
            raise TraceError(f"warpgroup ops need whole warpgroups: warps {whole}..{kernel.warps - 1} of this "
                             f"{kernel.warps}-warp kernel are a partial warpgroup and may reach this wgmma", o.loc)


def _ops_by_warps(stmts, warps: frozenset, known: bool = True):
    """Each op with the warps that may run it, and whether every enclosing branch depends only on the warp
    id (else those are the warps that reach the undecided branch)."""
    for s in stmts:
        if isinstance(s, For):
            yield from _ops_by_warps(s.body, warps, known)
        elif isinstance(s, If):
            taken = _warps_taking(s.cond, warps)
            if taken is None:
                yield from _ops_by_warps(s.then, warps, False)
                yield from _ops_by_warps(s.orelse, warps, False)
            else:
                yield from _ops_by_warps(s.then, taken, known)
                yield from _ops_by_warps(s.orelse, warps - taken, known)
        elif isinstance(s, Op):
            yield s, warps, known
