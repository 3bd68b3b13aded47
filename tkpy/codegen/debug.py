"""Debug mode's plan of a kernel (tkpy/runtime/debug.py): which of its waits are bounded, how, and what each one
(a "site", numbered in the order of the IR) is called in messages; and which of its memory accesses are
bounds-checked (a "check" each, numbered likewise).

The emitter asks the plan for each wait's site and writes the bounded form (prelude/debug.py's helpers), and writes
each op's checks before it; the host rebuilds the same plan from the same IR to turn a record's site or check
number back into the Python line, the op and the barrier or the access. Nothing here runs for a normal build.

Checked: the tile of every copy between a global tensor and registers or shared memory (tk.load, tk.store,
tk.load_async; all of it inside the tensor, or for a masked copy its first element at non-negative coordinates
inside the batch and depth), the element of tk.atomic_add, tk.signal and tk.wait_signal (whose waits are bounded
too), the table row of tk.load_rotary_table, every run-time index into an array of shared tiles or
semaphores, and the window of a shared subtile at run-time coordinates. Not checked: TMA copies, whose tensor maps
make the hardware clip them (out-of-bounds elements read as zero, writes are dropped), and register tiles, which
are indexed at trace time.
"""
from __future__ import annotations

import linecache
from dataclasses import dataclass, field
from typing import Optional

from ..ir.core import GLOBAL_TILE_OPS, Decl, For, GlobalVar, If, KernelIR, Loc, Op, SharedRef, Var
from ..ir.expr import BinOp, Const, Sym, as_expr, render
from ..tiles.types import ST, SV

WARPS_PER_WARPGROUP = 4
NAMED_BARRIERS = 16          # bar.sync ids 0..15; debug mode gives each an mbarrier
NAMED_OPS = {"named_sync": 0, "named_arrive": 0, "warpgroup_any": 2, "warpgroup_any_greater": 3}  # -> id's arg


def quoted(loc: Loc, text: str) -> str:
    """`file.py:LINE `text`` (the Python line of a wait or access, as messages show it), or the location alone."""
    return f"{loc.short} `{text}`" if text else loc.short


@dataclass(frozen=True)
class Site:
    """One bounded wait of the kernel: site `index` of its plan."""

    index: int
    kind: str                 # semaphore | block barrier | named barrier | warpgroup vote | cluster barrier | wgmma
                              # | signal
    op: Op
    text: str                 # the Python line of the op
    barrier: str              # the C++ name of what it waits on (`full`, `tkpy_debug_named`, ...)
    indexed: bool = False     # the barrier is an element of an array, whose index the device reports
    warps: int = 0            # warps that must arrive (barriers)
    branches: tuple = ()      # the tk.if_ lines around it, outermost first

    @property
    def loc(self) -> Loc:
        return self.op.loc

    @property
    def source(self) -> str:
        return quoted(self.loc, self.text)

    def describe(self, block, index: int, phase: int) -> str:
        """The barrier and what the warp waited for (as the interpreter's deadlock reports word it)."""
        b = f"block ({block[0]}, {block[1]}, {block[2]})"
        if self.kind == "semaphore":
            name = f"{self.barrier}[{index}]" if self.indexed else self.barrier
            return f"semaphore `{name}` of {b}, waiting for its phase with parity {phase} to complete"
        if self.kind == "block barrier":
            return f"__syncthreads (tk.sync()): waiting for all {self.warps} warps of {b} to arrive"
        if self.kind == "named barrier":
            return f"named barrier {index}: waiting for {self.warps} warps to arrive"
        if self.kind == "warpgroup vote":
            return (f"named barrier {index} (a warpgroup vote): waiting for the {self.warps} warps of the warpgroup "
                    f"to arrive")
        if self.kind == "cluster barrier":
            return (f"the cluster barrier (this warp's tk.cluster.sync() number {index}, counting from 0): waiting "
                    f"for all {self.warps} warps of the cluster to arrive")
        if self.kind == "signal":
            return (f"the signal flag `{self.barrier}`: waiting for it to reach {phase}, it held {index} (tk.signal "
                    f"by another GPU or block)")
        return (f"the warpgroup MMA (warpgroup {index}): every warp of the warpgroup must issue it, but some of its "
                f"warps have not within the timeout")

    def c_format(self, kernel: str) -> str:
        """The printf format of this site's timeout line (a C string literal's contents). Its arguments are
        block x, y, z, warp, index, phase, milliseconds; "%.0d" swallows an argument that is 0 and means nothing."""
        what = {
            "semaphore": (f"semaphore {self.barrier}[%d], phase parity %d" if self.indexed
                          else f"semaphore {self.barrier}%.0d, phase parity %d"),
            "block barrier": f"tk.sync() of all {self.warps} warps%.0d%.0d",
            "named barrier": f"named barrier %d of {self.warps} warps%.0d",
            "warpgroup vote": f"named barrier %d of a warpgroup vote%.0d",
            "cluster barrier": f"cluster barrier, this warp's sync number %d%.0d",
            "wgmma": f"the other warps of warpgroup %d issuing this wgmma%.0d",
            "signal": f"signal flag {self.barrier} holding %d, waiting for %d",
        }[self.kind]
        text = _c_text(self.source)
        return (f"tkpy debug: kernel {_c_text(kernel)}, block (%u, %u, %u), warp %u: wait timed out at {text} "
                f"on {what} after %u ms\\n")


@dataclass(frozen=True)
class Unbounded:
    """A wait that debug mode leaves to the hardware, and why."""

    op: Op
    text: str
    why: str

    @property
    def source(self) -> str:
        return quoted(self.op.loc, self.text)


AXES = ("batch", "depth", "row", "column", "outer", "array")   # a check's `which`, as the device reports it
ARRAY = AXES.index("array")   # `which` of a check's first array index (ARRAY + i for its i-th array)


@dataclass(frozen=True)
class Check:
    """The bounds checks debug mode puts before one op or shared subtile (check `index` of its plan): `lines` is
    their C++ (each calls tk::debug::out_of_bounds with this index where it fails), `what` the access in words."""

    index: int
    stmt: object              # the Op or Decl
    text: str                 # its Python line
    what: str                 # e.g. "the 16 x 64 tile of `x`" ("" for array indices only)
    lines: tuple
    arrays: tuple = ()        # (name, count) of the arrays indexed at run time: check `which` 5 + i is arrays[i]
    branches: tuple = ()

    @property
    def loc(self) -> Loc:
        return self.stmt.loc

    @property
    def source(self) -> str:
        return quoted(self.loc, self.text)

    def describe(self, which: int, first: int, last: int, limit: int) -> str:
        """What went out of bounds: the axis (or the array index) and the range against its limit."""
        if which >= ARRAY and which - ARRAY < len(self.arrays):
            name, count = self.arrays[which - ARRAY]
            return f"index {first} into `{name}`, an array of {count}, outside [0, {limit})"
        axis = AXES[which] if 0 <= which < len(AXES) else "unknown"
        span = f"index {first}" if first == last else f"indices {first}..{last}"
        return f"{self.what}: {axis} {span}, outside [0, {limit})"

    def c_format(self, kernel: str) -> str:
        """The printf format of this check's failure line; its arguments are block x, y, z, warp, the axis (a
        string of AXES), first, last, limit."""
        return (f"tkpy debug: kernel {_c_text(kernel)}, block (%u, %u, %u), warp %u: out-of-bounds access at "
                f"{_c_text(self.source)}, {_c_text(self.what)}: %s %lld..%lld, outside [0, %lld)\\n")


@dataclass
class Plan:
    """The debug plan of one kernel."""

    ir: KernelIR
    sites: list = field(default_factory=list)
    unbounded: list = field(default_factory=list)
    named: Optional[dict] = None     # barrier id -> warps for the named barriers made mbarriers; None: hardware
    named_default: int = 1           # the count of ids not in `named` (run-time ids: their one count)
    block_barrier: bool = False      # tk.sync() occurs
    warpgroups: int = 0              # wgmma occurs: one rendezvous mbarrier per warpgroup
    cluster_barrier: bool = False    # tk.cluster.sync() occurs
    uses_named_mbarriers: bool = False  # named-barrier ops occur and are mbarriers (`named` is not None)
    checks: list = field(default_factory=list)
    _by_op: dict = field(default_factory=dict)
    _checks_by_stmt: dict = field(default_factory=dict)

    def site(self, op: Op) -> Site:
        return self._by_op[id(op)]

    def checks_of(self, stmt) -> list[str]:
        """The C++ of the bounds checks before `stmt` (none for most)."""
        check = self._checks_by_stmt.get(id(stmt))
        return list(check.lines) if check is not None else []

    def has_site(self, op: Op) -> bool:
        return id(op) in self._by_op

    @property
    def cluster_blocks(self) -> int:
        c = self.ir.cluster or (1, 1, 1)
        return c[0] * c[1] * c[2]


def plan_for(ir: KernelIR) -> Plan:
    """The plan of `ir` (deterministic: the emitter and the host build the same one)."""
    plan = Plan(ir)
    ops = list(_ops_with_branches(ir.body))
    named_ops = [op for op, _ in ops if op.name in NAMED_OPS]
    plan.named, plan.named_default, reason = _named_counts(named_ops, ir.warps)
    plan.uses_named_mbarriers = bool(named_ops) and plan.named is not None
    for stmt, branches in _statements_with_branches(ir.body):
        access = _access_checks(stmt, len(plan.checks))
        if access is not None:
            what, lines, arrays = access
            text = linecache.getline(stmt.loc.file, stmt.loc.line).strip()
            check = Check(len(plan.checks), stmt, text, what, tuple(lines), arrays, branches)
            plan.checks.append(check)
            plan._checks_by_stmt[id(stmt)] = check
    for op, branches in ops:
        text = linecache.getline(op.loc.file, op.loc.line).strip()
        site = None
        if op.name == "sem_wait":
            sem = op.args[0]
            indexed = isinstance(sem, SharedRef) and sem.index is not None
            site = Site(len(plan.sites), "semaphore", op, text, sem.name, indexed, branches=branches)
        elif op.name == "sync" and op.attrs.get("scope") == "block":
            plan.block_barrier = True
            site = Site(len(plan.sites), "block barrier", op, text, "tkpy_debug_block", warps=ir.warps,
                        branches=branches)
        elif op.name in NAMED_OPS:
            if op.name == "named_arrive":         # an arrival does not wait
                pass
            elif plan.named is None:
                plan.unbounded.append(Unbounded(op, text, reason))
            else:
                kind = "named barrier" if op.name == "named_sync" else "warpgroup vote"
                site = Site(len(plan.sites), kind, op, text, "tkpy_debug_named", True, op.attrs["threads"] // 32,
                            branches=branches)
        elif op.name == "cluster_sync":
            plan.cluster_barrier = True
            site = Site(len(plan.sites), "cluster barrier", op, text, "tkpy_debug_cluster", True,
                        plan.cluster_blocks * ir.warps, branches=branches)
        elif op.name == "wgmma":
            plan.warpgroups = max(1, ir.warps // WARPS_PER_WARPGROUP)
            site = Site(len(plan.sites), "wgmma", op, text, "tkpy_debug_warpgroups", True, WARPS_PER_WARPGROUP,
                        branches=branches)
        elif op.name == "wait_signal":
            site = Site(len(plan.sites), "signal", op, text, op.args[0].name, branches=branches)
        elif op.name == "setmaxnreg" and op.attrs.get("increase"):
            plan.unbounded.append(Unbounded(op, text, "setmaxnreg.inc blocks in hardware until the registers it asks "
                                                      "for are free (no try form)"))
        if site is not None:
            plan.sites.append(site)
            plan._by_op[id(op)] = site
    return plan


def _ops_with_branches(stmts, branches=()):
    """(op, the locations of the tk.if_ branches around it) for every op, in the order the emitter visits them."""
    for s, b in _statements_with_branches(stmts, branches):
        if isinstance(s, Op):
            yield s, b


def _statements_with_branches(stmts, branches=()):
    """(op or declaration, the tk.if_ branches around it), in the order the emitter visits them."""
    for s in stmts:
        if isinstance(s, (Op, Decl)):
            yield s, branches
        elif isinstance(s, For):
            yield from _statements_with_branches(s.body, branches)
        elif isinstance(s, If):
            yield from _statements_with_branches(s.then, branches + (s.loc,))
            yield from _statements_with_branches(s.orelse, branches + (s.loc,))


def _access_checks(stmt, index: int) -> Optional[tuple[str, list[str], tuple]]:
    """(the access in words, the C++ of its checks, the arrays they index) for a statement that debug mode
    bounds-checks, else None."""
    if isinstance(stmt, Decl):
        return _view_checks(stmt.var, index)
    lines, what = [], ""
    if stmt.name in GLOBAL_TILE_OPS:
        first, second, coord = stmt.args[:3]
        g, tile = (first, second) if isinstance(first, GlobalVar) else (second, first)
        masked = "fill" in stmt.attrs or bool(stmt.attrs.get("masked"))
        *outer, b, d, r, c = coord
        t = tile.type
        lines.append(f"tk::debug::check_tile({g.name}, {render(b)}, {render(d)}, {render(r * t.rows)}, "
                     f"{render(c * t.cols)}, {t.rows}, {t.cols}, {'true' if masked else 'false'}, {index});")
        lines += [_index_check(render(o), render(as_expr(g.type.outer)), index, 4) for o in outer]
        what = f"the {t.rows} x {t.cols} tile of `{g.name}`" + (" (masked)" if masked else "")
    elif stmt.name == "load_rotary_table":
        g, b, d, r = stmt.args[1:5]
        angles = g.type.dims[3]
        lines.append(f"tk::debug::check_tile({g.name}, {render(b)}, {render(d)}, {render(r)}, 0, 1, {angles}, false, "
                     f"{index});")
        what = f"the row of {angles} angles of `{g.name}`"
    elif stmt.name in ("atomic_add", "signal", "wait_signal"):
        g, (b, d, r, c) = (stmt.args[1], stmt.args[2:6]) if stmt.name == "atomic_add" else (stmt.args[0], stmt.args[1:5])
        lines.append(f"tk::debug::check_element({g.name}, {render(b)}, {render(d)}, {render(r)}, {render(c)}, "
                     f"{index});")
        what = f"the element of `{g.name}`"
    elements = list(_unique_elements(stmt.args))
    lines += [_index_check(render(a.index), str(a.var.count), index, ARRAY + i) for i, a in enumerate(elements)]
    return (what, lines, tuple((a.var.name, a.var.count) for a in elements)) if lines else None


def _unique_elements(args):
    """The elements at run-time indices of arrays of shared tiles or semaphores among an op's arguments, each
    (index, array) once."""
    seen = set()
    for a in _shared_elements(args):
        key = (render(a.index), a.var.name)
        if key not in seen:
            seen.add(key)
            yield a


def _view_checks(v: Var, index: int) -> Optional[tuple[str, list[str], tuple]]:
    """A shared subtile at run-time coordinates: its window inside the tile it views (and that tile's array index)."""
    if v.view is None or not isinstance(v.type, (ST, SV)):
        return None
    base, t = v.view.base, v.type
    arrays = ((base.var.name, base.var.count),) if _runtime_element(base) else ()
    lines = [_index_check(render(base.index), str(base.var.count), index, ARRAY)] if arrays else []
    for which, coord, size, whole in ((2, v.view.row, t.rows, base.type.rows), (3, v.view.col, t.cols, base.type.cols)):
        if not isinstance(coord, Const):
            lines.append(_index_check(render(coord), str(whole // size), index, which))
    what = f"the {t.rows} x {t.cols} window of `{base.name}` ({base.type.rows} x {base.type.cols}), in units of windows"
    return (what, lines, arrays) if lines else None


def _shared_elements(args):
    """The elements at run-time indices of arrays of shared tiles or semaphores among an op's arguments."""
    for a in args:
        if isinstance(a, (tuple, list)):
            yield from _shared_elements(a)
        elif _runtime_element(a):
            yield a


def _runtime_element(x) -> bool:
    return isinstance(x, SharedRef) and x.index is not None and not isinstance(x.index, Const) and x.var.count > 1


def _index_check(value: str, limit: str, index: int, which: int) -> str:
    return f"tk::debug::check_index({value}, {limit}, {index}, {which});"


def _named_counts(ops, warps: int) -> tuple[Optional[dict], int, str]:
    """(barrier id -> warps, 1, "") when every named barrier can be an mbarrier (whose count is fixed at its init):
    each id that an op may name always with one warp count. A run-time id may name the ids of its range
    (`_id_range`: e.g. `4 + warpid / 4` in a 12-warp kernel names 4..6; an id of unknown range any of 0..15).
    Otherwise (None, 1, why): the kernel's named barriers stay in hardware."""
    counts: dict = {}
    for op in ops:
        bid, n = op.args[NAMED_OPS[op.name]], op.attrs["threads"] // 32
        lo, hi = _id_range(bid, warps) or (0, NAMED_BARRIERS - 1)
        for i in range(max(lo, 0), min(hi, NAMED_BARRIERS - 1) + 1):
            if counts.setdefault(i, n) != n:
                what = f"named barrier {i} is" if isinstance(bid, Const) else f"named barrier {i} may be"
                return None, 1, (f"{what} used with {counts[i]} and {n} warps, so debug mode keeps the kernel's named "
                                 f"barriers in hardware (an mbarrier's count is fixed; bar.sync has no try form)")
    return counts, 1, ""


def _id_range(e, warps: int) -> Optional[tuple[int, int]]:
    """The values a barrier id expression can take, from constants and the warp index; None where unknown."""
    if isinstance(e, Const):
        return int(e.value), int(e.value)
    if isinstance(e, Sym):
        return (0, warps - 1) if e.name == "warpid" else None
    if isinstance(e, BinOp) and e.op in "+-*/%":
        a, b = _id_range(e.a, warps), _id_range(e.b, warps)
        if a is None or b is None or a[0] < 0 or b[0] < 0:
            return None
        if e.op == "+":
            return a[0] + b[0], a[1] + b[1]
        if e.op == "-":
            return a[0] - b[1], a[1] - b[0]
        if e.op == "*":
            return a[0] * b[0], a[1] * b[1]
        if b[0] == 0:
            return None
        if e.op == "/":
            return a[0] // b[1], a[1] // b[0]
        return 0, min(a[1], b[1] - 1)
    return None


def _c_text(text: str) -> str:
    """`text` inside a C string literal that is a printf format: escaped, % doubled, ASCII only."""
    out = []
    for ch in text:
        if ch in '\\"':
            out.append("\\" + ch)
        elif ch == "%":
            out.append("%%")
        elif ch == "?":
            out.append("\\?")          # no trigraphs
        elif " " <= ch <= "~":
            out.append(ch)
        else:
            out.append("?")
    return "".join(out)


def semaphore_index(op: Op) -> str:
    """C++ of the index of a wait's semaphore in its array (0 for a single semaphore)."""
    sem = op.args[0]
    return render(sem.index) if isinstance(sem, SharedRef) and sem.index is not None else "0"
