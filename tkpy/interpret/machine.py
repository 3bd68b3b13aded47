"""Executing a kernel's IR: blocks one after another, each block's warps as coroutines.

Each warp runs the kernel body as a Python generator (`execute`) over its own
registers and scalar environment (`warpid` is its index). It runs without
interruption until an op returns a `Wait` that is not ready (a barrier); then
the block's scheduler (`run_block`) runs the other warps, round-robin, and
resumes a warp once its wait is ready. When no warp can move, the block is
deadlocked: the report names every blocked warp's barrier, phase, Python line
and the branches (roles) it is in, and which warps have already finished.
"""
from __future__ import annotations

import itertools
import linecache

import numpy as np

from ..errors import DeadlockError, InterpretError, UnsupportedError
from ..ir.core import Decl, For, If, KernelIR, Op, SharedRef, Var
from ..tiles.types import RT, RV
from .memory import SharedMemory
from .numerics import round_to
from .registry import semantics_of
from .scalars import LaneDependent, ScalarCache, ScalarFault


class Program:
    """A traced kernel ready to interpret: its IR and its compiled scalar expressions."""

    def __init__(self, ir: KernelIR):
        self.ir = ir
        self.scalars = ScalarCache()


class Block:
    """One thread block: its index, its shared memory and its synchronisation objects."""

    def __init__(self, program: Program, env: dict, global_tensors: dict):
        self.program = program
        self.env = env                  # block_x.., grid_x.., parameters and dims
        self.globals = global_tensors   # GlobalVar -> memory.GlobalTensor
        self.shared = SharedMemory(program.ir.shared_bytes)
        self._sync_objects: dict = {}

    def sync_object(self, key, make):
        """The block's barrier / semaphore for `key`, made with `make()` on first use."""
        obj = self._sync_objects.get(key)
        if obj is None:
            obj = self._sync_objects[key] = make()
        return obj

    def shared_tile(self, warp: "Warp", ref: SharedRef) -> tuple[int, str]:
        """Byte offset of a shared tile (an array element: its index checked) and its name for messages."""
        var = ref.var
        base = self.program.ir.shared_offsets[var]
        if ref.index is None:
            return base, var.name
        i = warp.value(ref.index)
        if not 0 <= i < var.count:
            raise InterpretError(f"shared tile index {i} is out of range for `{var.name}`, "
                                 f"an array of {var.count}", warp.loc)
        return base + i * var.type.nbytes, f"{var.name}[{i}]"


class Warp:
    """One warp's state: registers (Var -> float32 array, None until written), scalars, current line."""

    __slots__ = ("block", "index", "env", "regs", "loc", "roles", "_scalars")

    def __init__(self, block: Block, index: int):
        self.block = block
        self.index = index
        self.env = dict(block.env, warpid=index)
        self.regs: dict = {}
        self.loc = block.program.ir.loc
        self.roles: list = []           # locs of the runtime branches this warp is inside
        self._scalars = block.program.scalars

    def value(self, e):
        """The value of a scalar expression for this warp."""
        try:
            return self._scalars.get(e)(self.env)
        except ScalarFault as fault:
            raise InterpretError(str(fault), self.loc) from None
        except LaneDependent as why:
            raise UnsupportedError(str(why), self.loc) from None

    def read(self, var: Var) -> np.ndarray:
        values = self.regs.get(var)
        if values is None:
            raise InterpretError(f"`{var.name}` ({var.type}) is read before anything wrote it "
                                 f"(declared at {var.loc.short})", self.loc)
        return values

    def write(self, var: Var, values) -> None:
        """Set a register tile or vector, rounding to its dtype."""
        self.regs[var] = round_to(var.type.dtype, values)


def execute(warp: Warp, stmts):
    """Run statements for one warp; yields each Wait that blocks it."""
    for s in stmts:
        warp.loc = s.loc
        if isinstance(s, Op):
            wait = semantics_of(s)(warp, s)
            if wait is not None and not wait.ready():
                yield wait
        elif isinstance(s, Decl):
            if isinstance(s.var.type, (RT, RV)):
                warp.regs[s.var] = None    # a fresh C++ variable: uninitialised
        elif isinstance(s, For):
            start, stop, step = (warp.value(e) for e in (s.start, s.stop, s.step))
            if step <= 0 and start < stop:
                raise InterpretError(f"tk.range({start}, {stop}, {step}) never ends: its step must be positive",
                                     s.loc)
            name = s.var.name
            for i in range(start, stop, step):
                warp.env[name] = i
                yield from execute(warp, s.body)
        elif isinstance(s, If):
            branch = s.then if warp.value(s.cond) else s.orelse
            if branch:
                warp.roles.append(s.loc)
                yield from execute(warp, branch)
                warp.roles.pop()
        else:
            raise TypeError(f"tkpy internal error: not a statement: {s!r}")


def run_block(block: Block) -> None:
    """Run every warp of the block to its end, switching at barriers; raise DeadlockError if they stall."""
    warps = [Warp(block, w) for w in range(block.program.ir.warps)]
    running = {w: execute(w, block.program.ir.body) for w in warps}
    waits = dict.fromkeys(warps)
    finished: list = []
    while running:
        moved = False
        for w in list(running):
            if waits[w] is not None and not waits[w].ready():
                continue
            moved = True
            try:
                waits[w] = next(running[w])
            except StopIteration:
                del running[w]
                finished.append(w)
            except InterpretError as e:
                raise type(e)(f"{e.bare_message} (in {_block_name(block)}, warp {w.index})", e.loc) from None
        if not moved:
            raise DeadlockError(_deadlock_report(block, [(w, waits[w]) for w in running], finished))


def run_grid(program: Program, grid: tuple, env: dict, global_tensors: dict) -> None:
    """Run every block of the grid, x fastest (blocks are independent, so the order is immaterial)."""
    gx, gy, gz = grid
    env = dict(env, grid_x=gx, grid_y=gy, grid_z=gz)
    with np.errstate(all="ignore"):     # inf/nan arithmetic is the kernel's business, as on the GPU
        for z, y, x in itertools.product(range(gz), range(gy), range(gx)):
            run_block(Block(program, dict(env, block_x=x, block_y=y, block_z=z), global_tensors))


def _deadlock_report(block: Block, blocked: list, finished: list) -> str:
    lines = [f"deadlock in {_block_name(block)} of kernel {block.program.ir.name}: no warp can make progress"]
    for w, wait in blocked:
        roles = "".join(f", inside the branch at {_source(loc)}" for loc in w.roles)
        lines.append(f"  warp {w.index} waits at {_source(w.loc)}{roles}\n    on {wait.describe()}")
    if finished:
        lines.append(f"  warps {', '.join(str(w.index) for w in sorted(finished, key=lambda w: w.index))} "
                     "have finished the kernel and will never arrive")
    return "\n".join(lines)


def _block_name(block: Block) -> str:
    e = block.env
    return f"block ({e['block_x']}, {e['block_y']}, {e['block_z']})"


def _source(loc) -> str:
    text = linecache.getline(loc.file, loc.line).strip()
    return f"{loc.short} `{text}`" if text else loc.short
