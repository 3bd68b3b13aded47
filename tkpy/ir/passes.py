"""Passes over the kernel IR: structural verification, shared-memory planning, register budgeting, the static dims
of global tensors copied whole."""
from __future__ import annotations

from ..errors import TraceError
from ..tiles.types import RT, RV, Semaphore
from .core import (GLOBAL_TILE_OPS, TMA_TILE_OPS, Assign, Decl, For, GlobalVar, If, KernelIR, Let, Op, PeerRef, SharedRef, Var,
                   walk)
from .expr import Const, Expr, Sym, cdiv, free_symbols

MAX_SHARED_BYTES = 227 * 1024      # per block on sm_90 (opt-in limit)
SM_SHARED_BYTES = 228 * 1024       # per SM on sm_90, of which each resident block reserves 1 KB for the system
RESERVED_SHARED_BYTES = 1024
ALIGNMENT_SLACK = 1024             # the kernel aligns its dynamic shared base up to 1024 bytes at run time
MAX_REGISTERS_PER_THREAD = 255
BUILTIN_SYMS = {"block_x", "block_y", "block_z", "grid_x", "grid_y", "grid_z", "warpid", "laneid", "cluster_rank"}


def shared_limit(blocks_per_sm: int = 1) -> int:
    """Bytes of shared memory a block may have when `blocks_per_sm` blocks must fit on an SM at once."""
    if blocks_per_sm == 1:
        return MAX_SHARED_BYTES
    return SM_SHARED_BYTES // blocks_per_sm - RESERVED_SHARED_BYTES


def verify(kernel: KernelIR) -> None:
    """Every variable and symbol is declared before use and used only in scope."""
    scalars = {p.sym.name for p in kernel.params if hasattr(p, "sym")}
    dims = {d for p in kernel.params if isinstance(p, GlobalVar) for d in p.type.dynamic_dims}
    _verify_block(kernel.body, set(), scalars | dims, set())


def _verify_block(stmts, tiles: set, syms: set, mutables: set) -> None:
    tiles, syms, mutables = set(tiles), set(syms), set(mutables)
    for s in stmts:
        if isinstance(s, Decl):
            tiles.add(s.var)
            if s.var.view is not None:
                _check_syms(s.var.view.row, syms, s)
                _check_syms(s.var.view.col, syms, s)
        elif isinstance(s, Let):
            _check_syms(s.value, syms, s)
            syms.add(s.sym.name)
            if s.mutable:
                mutables.add(s.sym.name)
        elif isinstance(s, Assign):
            if s.target.name not in mutables:
                raise TraceError(f"`{s.target.name}` is assigned outside the block its tk.var was declared in",
                                 s.loc)
            _check_syms(s.value, syms, s)
        elif isinstance(s, Op):
            for a in flat_operands(s.args):
                var = a.var if isinstance(a, SharedRef) else a
                if isinstance(var, Var) and var not in tiles:
                    raise TraceError(f"{s.name}: `{var.name}` is used outside the scope it was declared in "
                                     f"(declared at {var.loc.short}, inside a tk.range loop or tk.if_ branch that has "
                                     "ended); declare it before the loop or branch: a tile lives in the block it is "
                                     "declared in, and one declared outside a loop carries its values across "
                                     "iterations", s.loc)
                if isinstance(a, Expr):
                    _check_syms(a, syms, s)
                if isinstance(a, SharedRef) and a.index is not None:
                    _check_syms(a.index, syms, s)
                if isinstance(a, PeerRef):
                    _check_syms(a.index, syms, s)
        elif isinstance(s, For):
            for e in (s.start, s.stop, s.step):
                _check_syms(e, syms, s)
            _verify_block(s.body, tiles, syms | {s.var.name}, mutables)
        elif isinstance(s, If):
            _check_syms(s.cond, syms, s)
            _verify_block(s.then, tiles, syms, mutables)
            _verify_block(s.orelse, tiles, syms, mutables)


def flat_operands(args):
    for a in args:
        if isinstance(a, tuple):
            yield from flat_operands(a)
        else:
            yield a


def expressions(s) -> list:
    """The scalar expressions a statement evaluates itself (not those of the statements nested in it): its value,
    bounds or condition, a subtile's coordinates, an op's scalar operands, array indices and attributes (a fill
    value)."""
    if isinstance(s, (Let, Assign)):
        return [s.value]
    if isinstance(s, For):
        return [s.start, s.stop, s.step]
    if isinstance(s, If):
        return [s.cond]
    if isinstance(s, Decl):
        view = s.var.view
        return [] if view is None else [view.row, view.col]
    if isinstance(s, Op):
        return [x for a in flat_operands(s.args)
                for x in ([a.index] if isinstance(a, (SharedRef, PeerRef)) and a.index is not None
                          else [a] if isinstance(a, Expr) else [])] + \
            [a for a in s.attrs.values() if isinstance(a, Expr)]
    return []


def _check_syms(e: Expr, syms: set, stmt) -> None:
    for sym in free_symbols(e):
        if sym.name not in syms and sym.name not in BUILTIN_SYMS:
            raise TraceError(f"runtime value `{sym.name}` is used outside its loop", stmt.loc)


def plan_shared(kernel: KernelIR) -> None:
    """Give each shared tile a byte offset (aligned as its swizzle needs) and check the total: tiles and vectors in
    the order declared, then the semaphores, so that their 8-byte words do not leave up to 1016 bytes of padding
    before the next 1024-aligned tile each (2 KB of attention's backward at D128: its second dQ storer stage)."""
    offset = 0
    offsets = {}
    limit = shared_limit(kernel.blocks_per_sm)
    declared = [s for s in walk(kernel.body) if isinstance(s, Decl) and s.var.is_shared and s.var.view is None]
    in_order = [s for s in declared if not isinstance(s.var.type, Semaphore)] + \
        [s for s in declared if isinstance(s.var.type, Semaphore)]
    for s in in_order:
        if s.var.alias is not None:
            base, at = s.var.alias           # storage reused (e.g. a template's finish block over its stages)
            t = s.var.type
            start = offsets[base] + at
            if start % t.alignment or start + t.nbytes * s.var.count > offset:
                raise TraceError(f"`{s.var.name}` ({t}, x{s.var.count}) placed at byte {start} is misaligned or "
                                 f"reaches past the {offset} bytes declared before it", s.loc)
            offsets[s.var] = start
        else:
            t = s.var.type
            offset = cdiv(offset, t.alignment) * t.alignment
            offsets[s.var] = offset
            offset += t.nbytes * s.var.count
            if offset + ALIGNMENT_SLACK > limit:
                per_sm = "" if kernel.blocks_per_sm == 1 else f" with {kernel.blocks_per_sm} blocks an SM"
                raise TraceError(f"shared memory over-subscribed: `{s.var.name}` ({t}, x{s.var.count}) ends at "
                                 f"{offset} bytes; with the {ALIGNMENT_SLACK} bytes that align the base, more than "
                                 f"the {limit} a block can have{per_sm}", s.loc)
    kernel.shared_offsets = offsets
    kernel.shared_bytes = offset


def register_estimate(kernel: KernelIR) -> int:
    """32-bit registers per thread that the register tiles live at the busiest statement need (a lower
    bound). A tile is live from its declaration to its last use, or to the end of the outermost runtime
    loop that uses it without declaring it (the next iteration reads it again); so temporaries such as
    those of `a + b` cost registers only while they are in use."""
    return _register_peak(kernel)[0]


def _register_peak(kernel: KernelIR) -> tuple[int, list, object]:
    """(register_estimate's registers, the register tiles live then, the statement where they are)."""
    spans: dict = {}            # register Var -> [declared at, last live at] (statement positions)
    loops: list = []            # [start, end] positions of the runtime loops enclosing the walk
    statements: list = [None]   # statement at each position
    position = 0

    def use(var: Var, at: int) -> None:
        while var.view is not None and isinstance(var.view.base, Var):
            var = var.view.base                 # a subtile's registers are its base tile's
        span = spans.get(var)
        if span is None:
            return
        end = next((loop[1] for loop in loops if loop[0] > span[0]), at)
        span[1] = max(span[1], end, at)

    def visit(stmts) -> None:
        nonlocal position
        for s in stmts:
            position += 1
            statements.append(s)
            if isinstance(s, Decl):
                if not s.var.is_shared and s.var.view is None:
                    spans[s.var] = [position, position]
                elif s.var.view is not None and isinstance(s.var.view.base, Var):
                    use(s.var.view.base, position)
            elif isinstance(s, Op):
                for a in flat_operands(s.args):
                    if isinstance(a, Var):
                        use(a, position)
            elif isinstance(s, For):
                loop = [position, position + _count(s.body)]
                loops.append(loop)
                visit(s.body)
                loops.pop()
            elif isinstance(s, If):
                visit(s.then)
                visit(s.orelse)

    visit(kernel.body)
    live = [0] * (position + 2)
    for var, (first, last) in spans.items():
        live[first] += _regs(var)
        live[last + 1] -= _regs(var)
    peak = running = at = 0
    for i, delta in enumerate(live):
        running += delta
        if running > peak:
            peak, at = running, i
    tiles = [var for var, (first, last) in spans.items() if first <= at <= last and _regs(var)]
    return peak, tiles, statements[at] if at < len(statements) else None


def _count(stmts) -> int:
    return sum(1 for _ in walk(stmts))


def _regs(var: Var) -> int:
    if var.view is not None:
        return 0    # a subtile's registers are its base tile's
    t = var.type
    if isinstance(t, RT):
        return t.registers_per_lane
    if isinstance(t, RV):       # (16-bit values in packed pairs where a lane holds an even number a chunk)
        per = t.values_per_chunk
        return t.chunks * (per // 2 if t.dtype.nbytes == 2 and per % 2 == 0 else per * max(1, t.dtype.nbytes // 4))
    return 0


def check_registers(kernel: KernelIR) -> int:
    """The register estimate; more than a thread can have raises TraceError at the biggest live tile's line, naming
    the tiles live then and how to split the biggest."""
    need, tiles, where = _register_peak(kernel)
    if need <= MAX_REGISTERS_PER_THREAD:
        return need
    tiles.sort(key=_regs, reverse=True)
    biggest = tiles[0]
    listed = ", ".join(f"`{v.name}` {v.type} ({_regs(v)}, {v.loc.short})" for v in tiles[:6])
    listed += f" and {len(tiles) - 6} more" if len(tiles) > 6 else ""
    at = f" at {where.loc.short}" if getattr(where, "loc", None) is not None else ""
    raise TraceError(f"the register tiles live at once{at} need at least {need} registers per thread, more than "
                     f"the {MAX_REGISTERS_PER_THREAD} a thread can have: {listed}. {_split_advice(biggest, need)}; "
                     "bf16 tiles take half the registers of f32 ones, and data can wait in shared memory (tk.st)",
                     biggest.loc)


def _split_advice(var: Var, need: int) -> str:
    """How to split `var`, the biggest live tile, so that the peak fits: halve its columns (its rows, for a tile of
    16 columns) until it does."""
    t = var.type
    if not isinstance(t, RT):
        return f"Split `{var.name}` ({t}) into shorter vectors"
    axis, size, other = ("cols", t.cols, t.rows) if t.cols > 16 else ("rows", t.rows, t.cols)
    piece, pieces = size, 1
    while piece > 16 and piece % 2 == 0:
        piece, pieces = piece // 2, pieces * 2
        smaller = t.with_(**{axis: piece})
        if need - _regs(var) + smaller.registers_per_lane <= MAX_REGISTERS_PER_THREAD:
            break
    if pieces == 1:
        return f"`{var.name}` ({t}) alone is too many: keep part of it in shared memory"
    shape = f"{t.rows} x {piece}" if axis == "cols" else f"{piece} x {other}"
    coord = "(row, j)" if axis == "cols" else "(i, col)"
    return (f"Split the {'row' if axis == 'cols' else 'column'}: use tiles of {shape} and loop over "
            f"{'column' if axis == 'cols' else 'row'} pieces (for j in range({pieces}): tk.load(t, x, {coord}) ... "
            f"in units of the {shape} tile)")


def check_static_dims(kernel: KernelIR) -> None:
    """A global tensor's static columns that the kernel's tiles leave out from the first: an error. Where every copy
    of the tensor (a load, a store, a TMA) sits at a column tile known at trace time and they cover its columns
    from column 0 on but stop short of its static width (a tile of a constexpr D = 32 columns at column tile 0 of a
    tensor of 64), the rest would go unread or unwritten without a word. (Copies that start past column 0, or at
    run-time coordinates, choose their columns on purpose.)"""
    copies: dict = {}
    for s in walk(kernel.body):
        if isinstance(s, Op) and s.name in GLOBAL_TILE_OPS + TMA_TILE_OPS:
            first, second, coord = s.args[:3]
            g, tile = (first, second) if isinstance(first, GlobalVar) else (second, first)
            copies.setdefault(g, []).append((s, tile.type, coord[-1]))
    for g, uses in copies.items():
        size = g.type.dims[3]
        if not isinstance(size, int) or not all(isinstance(c, Const) for _, _, c in uses):
            continue
        covered = {col for _, t, c in uses for col in range(c.value * t.cols, (c.value + 1) * t.cols)}
        reach = next((i for i in range(size) if i not in covered), size)   # columns 0..reach-1 are covered
        if 0 < reach < size:
            raise TraceError(_uncovered(kernel, g, uses, size, reach), uses[0][0].loc)


def _uncovered(kernel, g: GlobalVar, uses, size: int, reach: int) -> str:
    op, t, _ = uses[0]
    n = t.cols
    verbs = {"read" if (u.name.startswith("load") or u.name in ("tma_load", "tma_prefetch")) else "written"
             for u, _, _ in uses}
    named = [name for name, value in kernel.constexprs.items() if value == n and not isinstance(value, bool)]
    width = f"{n} columns wide" + (f" ({named[0]} = {n})" if named else "")
    fix = f"pass {named[0]} = {size}" if named else f"make the tiles {size} columns wide"
    return (f"`{g.name}` ({g.type}) has {size} static columns, but the kernel's copies of it reach columns "
            f"0..{reach - 1} only (tiles {width} at column tiles known at trace time: "
            f"{_OP_NAMES.get(op.name, op.name)} at {op.loc.short}, ...): columns {reach}..{size - 1} are never "
            f"{' or '.join(sorted(verbs))}. To cover them, {fix}, or copy every piece (for j in range({-(-size // n)}):"
            f" ... (row, j), in units of the tile); if the width varies, declare it dynamic (a name, such as \"C\", "
            "in the tk.gl annotation)")


_OP_NAMES = {"load_async": "tk.load_async", "store_add_gl_rt": "tk.store_add", "tma_load": "tk.tma.load_async",
             "tma_store": "tk.tma.store_async", "tma_prefetch": "tk.tma.prefetch",
             **{name: "tk." + name.split("_")[0] for name in GLOBAL_TILE_OPS[:8]}}


def check_values_used(kernel: KernelIR) -> None:
    """A new tile or vector that an expression returned (tk.exp(t), t * 2, tk.row_max(t)) and nothing reads: an error
    saying that the value forms make new tiles, as a torch user's `torch.exp(t)` does, and naming the in-place form.
    (A destination-first op writes its first operand; an op reads the others.)"""
    written: dict = {}
    read: set = set()
    for s in walk(kernel.body):
        if isinstance(s, Decl) and s.var.view is not None and isinstance(s.var.view.base, Var):
            read.add(s.var.view.base)
        elif isinstance(s, Op) and s.args:
            first, *rest = s.args
            if isinstance(first, Var) and first.value:
                written.setdefault(first, s)
            read.update(a for a in flat_operands(rest) if isinstance(a, Var))
    for var, op in written.items():
        if var not in read:
            raise TraceError(f"the new {'tile' if isinstance(var.type, RT) else 'vector'} this expression returns is "
                             f"never used: value forms such as {_value_form(op)} make a new tile, as torch.exp(t) "
                             f"does; to update the operand itself, write the destination-first op, "
                             f"{_in_place(op)}, or use the result", var.loc)


def _value_form(op: Op) -> str:
    fn = op.attrs.get("fn")
    if op.name == "unary" and isinstance(fn, str):
        return f"tk.{fn}(t)"
    symbol = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(fn) if op.name in ("binary", "broadcast") else None
    return f"t {symbol} x" if symbol else "tk.exp(t) or t * 2"


def _in_place(op: Op) -> str:
    fn, sources = op.attrs.get("fn"), [a for a in op.args[1:] if isinstance(a, Var)]
    if op.name == "unary" and isinstance(fn, str) and sources:
        return f"tk.{fn}({sources[0].name}, {sources[0].name})"
    if op.name == "binary" and isinstance(fn, str) and sources:
        return f"tk.{fn}({sources[0].name}, {sources[0].name}, ...)"
    if op.name == "reduce":
        return f"tk.{op.attrs['axis']}_{op.attrs['fn']}(v, t) into a vector v"
    return "tk.map(t, lambda x: ..., t)"


def run_all(kernel: KernelIR) -> None:
    from . import protocol

    verify(kernel)
    plan_shared(kernel)
    check_registers(kernel)
    check_static_dims(kernel)
    check_values_used(kernel)
    protocol.check(kernel)
