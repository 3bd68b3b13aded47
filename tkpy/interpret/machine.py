"""Executing a kernel's IR: clusters of blocks one after another, their warps as coroutines.

Each warp runs the kernel body as a Python generator (`execute`) over its own
registers and scalar environment (`warpid` is its index). It runs without
interruption until an op returns a `Wait` that is not ready (a barrier); then
the scheduler (`run_together`) runs the other warps, round-robin (warp 0 first, or
in another order: `sweeps`), and resumes a warp once its wait is ready. The warps of all blocks of a cluster are
scheduled together (one block per cluster without `cluster=`), so barriers
between blocks can be modelled; blocks of different clusters are independent
and run one after another. When no warp can move, the cluster is deadlocked:
the report names every blocked warp's barrier, phase, Python line and the
branches (roles) it is in, and which warps have already finished.

A kernel that waits for signals (tk.wait_signal) may wait for another block of its grid: its blocks all run
together, as a persistent grid's resident blocks do. Such a wait may also be for another GPU (a simulated rank,
ranks.py): when no warp can move but some wait for a signal, the rank stalls until a signal is given anywhere, and
only when every rank is stalled is it a deadlock.
"""
from __future__ import annotations

import itertools
import linecache

import numpy as np

from ..errors import DeadlockError, InterpretError, UnsupportedError
from ..ir.core import Assign, Decl, For, If, KernelIR, Let, Op, PeerRef, SharedRef, Var, walk
from ..ir.evaluate import LaneDependent, ScalarCache, ScalarFault
from ..tiles.types import RT, RV
from .memory import SharedMemory, SharedTile
from . import ranks
from .numerics import round_to
from .registry import semantics_of


class Program:
    """A traced kernel ready to interpret: its IR, its compiled scalar expressions, its shared tiles."""

    def __init__(self, ir: KernelIR):
        self.ir = ir
        self.scalars = ScalarCache()
        self._shared: dict = {}
        self.waits_for_signals = any(isinstance(s, Op) and s.name == "wait_signal" for s in walk(ir.body))

    def shared_tile(self, var: Var, index) -> SharedTile:
        """Shared variable `var` (element `index` of an array of them, or None)."""
        key = (var, index)
        tile = self._shared.get(key)
        if tile is None:
            base = self.ir.shared_offsets[var] + (index or 0) * var.type.nbytes
            name = var.name if index is None else f"{var.name}[{index}]"
            tile = self._shared[key] = SharedTile(base, var.type, 0, 0, var.type, name)
        return tile


class Block:
    """One thread block: its index (in `env`), its shared memory and its synchronisation objects.
    `cluster` lists the blocks of its cluster (itself included), for ops between blocks."""

    def __init__(self, program: Program, env: dict, global_tensors: dict):
        self.program = program
        self.env = env                  # block_x.., grid_x.., parameters and dims
        self.globals = global_tensors   # GlobalVar -> memory.GlobalTensor
        self.shared = SharedMemory(program.ir.shared_bytes)
        self.cluster: list = [self]
        self._sync_objects: dict = {}

    @property
    def name(self) -> str:
        e = self.env
        return f"block ({e['block_x']}, {e['block_y']}, {e['block_z']})"

    def sync_object(self, key, make):
        """The block's barrier / semaphore for `key`, made with `make()` on first use."""
        obj = self._sync_objects.get(key)
        if obj is None:
            obj = self._sync_objects[key] = make()
        return obj


class Warp:
    """One warp's state: registers (Var -> float32 array, None until written), scalars, subtile windows
    (register view -> row slice of its base, shared view -> SharedTile), and its current line.
    `async_regs` holds the register tiles an asynchronous op (wgmma) still uses: base Var -> a guard whose
    `why` says so and whose `blocks_reads` tells whether reads are off limits too (or only writes)."""

    __slots__ = ("block", "index", "env", "regs", "windows", "loc", "roles", "async_regs", "_scalars")

    def __init__(self, block: Block, index: int):
        self.block = block
        self.index = index
        self.env = dict(block.env, warpid=index)
        self.regs: dict = {}
        self.windows: dict = {}
        self.loc = block.program.ir.loc
        self.roles: list = []           # locs of the runtime branches this warp is inside
        self.async_regs: dict = {}
        self._scalars = block.program.scalars

    @property
    def name(self) -> str:
        return f"{self.block.name}, warp {self.index}"

    def value(self, e):
        """The value of a scalar expression for this warp."""
        try:
            return self._scalars.get(e)(self.env)
        except ScalarFault as fault:
            raise InterpretError(str(fault), self.loc) from None
        except LaneDependent as why:
            raise UnsupportedError(str(why), self.loc) from None

    def global_tensor(self, g):
        """The memory.GlobalTensor of a global operand (of a pgl's gl picked at run time, a PeerRef: the rank this warp
        computes)."""
        if isinstance(g, PeerRef):
            rank = self.value(g.index)
            if not 0 <= rank < len(g.members):
                raise InterpretError(f"`{g!r}`: rank {rank} is out of range for a pgl of {len(g.members)} GPUs",
                                     self.loc)
            g = g.members[rank]
        return self.block.globals[g]

    # -- register tiles and vectors ------------------------------------------------------------------
    def read(self, var: Var) -> np.ndarray:
        if self.async_regs:
            self._check_async(var, "read")
        values = self.regs.get(var) if var.view is None else self._peek(var)
        if values is None:
            raise InterpretError(f"`{var.name}` ({var.type}) is read before anything wrote it "
                                 f"(declared at {var.loc.short})", self.loc)
        return values

    def write(self, var: Var, values) -> None:
        """Set a register tile or vector, rounding to its dtype. Writing a subtile rewrites its window of the
        base tile; the rest of a base that nothing wrote reads as NaN."""
        if self.async_regs:
            self._check_async(var, "written")
        values = round_to(var.type.dtype, values)
        if var.view is None:
            self.regs[var] = values
            return
        base = var.view.base
        whole = self._peek(base)
        whole = np.full((base.type.rows, base.type.cols), np.nan, np.float32) if whole is None else whole.copy()
        whole[self.windows[var]] = values
        self.write(base, whole)

    def _check_async(self, var: Var, access: str) -> None:
        base = var
        while base.view is not None:
            base = base.view.base
        guard = self.async_regs.get(base)
        if guard is not None and (access == "written" or guard.blocks_reads):
            raise InterpretError(f"`{var.name}` is {access} while {guard.why}", self.loc)

    def _peek(self, var: Var):
        if var.view is None:
            return self.regs.get(var)
        whole = self._peek(var.view.base)
        return None if whole is None else whole[self.windows[var]]

    # -- shared tiles --------------------------------------------------------------------------------
    def shared_tile(self, ref: SharedRef) -> SharedTile:
        """Where a shared operand lives (an array element's index checked, a subtile's window resolved)."""
        var = ref.var
        if var.view is not None:
            return self.windows[var]
        if ref.index is None:
            return self.block.program.shared_tile(var, None)
        i = self.value(ref.index)
        if not 0 <= i < var.count:
            raise InterpretError(f"shared tile index {i} is out of range for `{var.name}`, "
                                 f"an array of {var.count}", self.loc)
        return self.block.program.shared_tile(var, i)

    def declare(self, var: Var) -> None:
        """A declaration: a fresh register variable is uninitialised; a subtile binds its window now."""
        view = var.view
        if view is None:
            if isinstance(var.type, (RT, RV)):
                self.regs[var] = None
            return
        t = var.type
        r, c = self.value(view.row) * t.rows, self.value(view.col) * t.cols
        if isinstance(t, RT):
            self.windows[var] = slice(r, r + t.rows), slice(c, c + t.cols)
            return
        parent = self.shared_tile(view.base if isinstance(view.base, SharedRef) else SharedRef(view.base))
        if not (0 <= r <= parent.type.rows - t.rows and 0 <= c <= parent.type.cols - t.cols):
            raise InterpretError(f"the {t.rows}x{t.cols} subtile at element ({r}, {c}) lies outside "
                                 f"`{parent.name}` ({parent.type})", self.loc)
        name = f"{parent.name}[{r}:{r + t.rows}, {c}:{c + t.cols}]"
        self.windows[var] = SharedTile(parent.base, parent.root, parent.row + r, parent.col + c, t, name)


def execute(warp: Warp, stmts):
    """Run statements for one warp; yields each Wait that blocks it."""
    for s in stmts:
        warp.loc = s.loc
        if isinstance(s, Op):
            wait = semantics_of(s)(warp, s)
            if wait is not None and not wait.ready():
                yield wait
        elif isinstance(s, Decl):
            warp.declare(s.var)
        elif isinstance(s, Let):
            warp.env[s.sym.name] = warp.value(s.value)
        elif isinstance(s, Assign):
            warp.env[s.target.name] = warp.value(s.value)
        elif isinstance(s, For):
            start, stop, step = (warp.value(e) for e in (s.start, s.stop, s.step))
            if step <= 0 and start < stop:
                raise InterpretError(f"tk.range({start}, {stop}, {step}) never ends: its step must be positive",
                                     s.loc)
            name, i = s.var.name, start
            while i < stop:             # the bounds are re-read per iteration, as in C++ (they may read a tk.var)
                warp.env[name] = i
                yield from execute(warp, s.body)
                warp.loc = s.loc
                i += step
                stop, step = warp.value(s.stop), warp.value(s.step)
        elif isinstance(s, If):
            branch = s.then if warp.value(s.cond) else s.orelse
            if branch:
                warp.roles.append(s.loc)
                yield from execute(warp, branch)
                warp.roles.pop()
        else:
            raise TypeError(f"tkpy internal error: not a statement: {s!r}")


def sweeps(order: str):
    """The order in which each sweep of the scheduler offers the running warps their turn: "forward" (warp 0
    first, the default), "reverse", or "random:SEED" (a new seeded shuffle every sweep). Races between warps
    that only a barrier should order show up as results or errors that depend on it."""
    if order == "forward":
        return lambda warps: warps
    if order == "reverse":
        return lambda warps: warps[::-1]
    if order.startswith("random:") and order[len("random:"):].lstrip("-").isdigit():
        rng = np.random.default_rng(int(order[len("random:"):]))
        return lambda warps: [warps[i] for i in rng.permutation(len(warps))]
    raise ValueError(f"interpreter warp order must be 'forward', 'reverse' or 'random:SEED', got {order!r}")


def run_together(blocks: list, order: str = "forward") -> None:
    """Run every warp of these blocks to its end, switching at barriers (offering the warps their turns in
    `order`, see sweeps); raise DeadlockError if they stall."""
    warps = [Warp(b, w) for b in blocks for w in range(b.program.ir.warps)]
    running = {w: execute(w, w.block.program.ir.body) for w in warps}
    waits = dict.fromkeys(warps)
    sweep = sweeps(order)
    world, rank = ranks.current()
    while running:
        seen = world.version if world is not None else 0     # (before the sweep: a signal during it is news)
        moved = False
        for w in sweep(list(running)):
            if waits[w] is not None and not waits[w].ready():
                continue
            moved = True
            w.block.shared.writer = w.index     # the ordinary stores until it yields are this warp's
            try:
                waits[w] = next(running[w])
            except StopIteration:
                del running[w]
            except InterpretError as e:
                raise type(e)(f"{e.bare_message} (in {w.name})", e.loc or w.loc) from None
        if not moved:
            report = _deadlock_report(blocks, [(w, waits[w]) for w in running], [w for w in warps if w not in running])
            signals = any(getattr(waits[w], "external", False) for w in running)
            if world is None or not signals:
                hint = ("\n  (a signal another GPU gives: run the ranks together with tk.simulate_ranks)" if signals
                        else "")
                raise DeadlockError(report + hint)
            world.stall(rank, seen, report)


def run_grid(program: Program, grid: tuple, env: dict, global_tensors: dict, order: str = "forward") -> None:
    """Run every block of the grid, cluster by cluster (clusters are independent: their order is immaterial)."""
    sweeps(order)                       # (a bad order is an error even with nothing to run)
    env = dict(env, grid_x=grid[0], grid_y=grid[1], grid_z=grid[2])
    cluster = program.ir.cluster or (1, 1, 1)
    with np.errstate(all="ignore"):     # inf/nan arithmetic is the kernel's business, as on the GPU
        grid_blocks = []
        for origin in itertools.product(*(range(0, g, c) for g, c in zip(reversed(grid), reversed(cluster)))):
            z0, y0, x0 = origin
            blocks = [Block(program, dict(env, block_x=x0 + x, block_y=y0 + y, block_z=z0 + z,
                                          cluster_rank=x + cluster[0] * (y + cluster[1] * z)), global_tensors)
                      for z, y, x in itertools.product(*(range(c) for c in reversed(cluster)))]
            for b in blocks:
                b.cluster = blocks
            if program.waits_for_signals:   # a block may wait for another's signal: all resident at once
                grid_blocks += blocks
            else:
                run_together(blocks, order)
        if grid_blocks:
            run_together(grid_blocks, order)


def _deadlock_report(blocks: list, blocked: list, finished: list) -> str:
    if len(blocks) == 1:
        where = blocks[0].name
    else:
        where = f"the cluster of {blocks[0].name}" if blocks[0].cluster is blocks else "the grid"
    lines = [f"deadlock in {where} of kernel {blocks[0].program.ir.name}: no warp can make progress"]
    for w, wait in blocked:
        who = f"warp {w.index}" if len(blocks) == 1 else w.name
        roles = "".join(f", inside the branch at {_source(loc)}" for loc in w.roles)
        lines.append(f"  {who} waits at {_source(w.loc)}{roles}\n    on {wait.describe()}")
    if finished:
        who = ", ".join(str(w.index) if len(blocks) == 1 else w.name for w in finished)
        lines.append(f"  warps {who} have finished the kernel and will never arrive")
    return "\n".join(lines)


def _source(loc) -> str:
    text = linecache.getline(loc.file, loc.line).strip()
    return f"{loc.short} `{text}`" if text else loc.short
