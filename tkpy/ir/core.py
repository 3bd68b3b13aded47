"""IR nodes: tile variables, global parameters, statements and the kernel.

The IR is a list of statements per block with structured control flow. Tile
variables are mutable (ops are destination-first, as in ThunderKittens);
scalars are immutable expression trees (see expr.py). Every statement records
the user's file:line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

from ..errors import TraceError
from ..tiles.dtypes import i32
from ..tiles.types import GL, RT, RV, ST, SV, Semaphore
from .expr import TILE_SYNTAX, Expr, Sym, Traced, as_expr, render, syntax as _syntax, tile_syntax  # noqa: F401


@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    function: str = ""
    template: str = ""   # the template whose own code this is ("lcf", "lcsf"), or "" (the user's code)

    @property
    def short(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(eq=False)
class Var(Traced):
    """A tile or vector variable: register (rt/rv, one per warp) or shared (st/sv, one per block, or `count`).
    Python's math, numpy and torch functions refuse it (Traced)."""

    name: str
    type: Union[RT, RV, ST, SV, Semaphore]
    loc: Loc
    count: int = 1  # shared tiles only: an array of `count` tiles
    view: Optional["View"] = None  # a subtile: a window of another tile's storage
    alias: Optional[tuple] = None  # shared: (earlier shared Var, byte offset): placed over its storage
    value: bool = False            # a new tile or vector that an expression returned (t * 2, tk.exp(t)), not declared

    def __getitem__(self, index) -> "SharedRef":
        """Element `index` (an int or runtime scalar) of an array of shared tiles; or, with slices,
        a subtile of a tile (`t[16:32]`, `s[0:32, 64:128]`). A shared tile of count 1 is an array of one, its own
        element 0 (so code written for `count=n` runs with n = 1; a runtime index must then be 0)."""
        if isinstance(index, (slice, tuple)) or not self.is_shared:
            return _syntax("slice")(self, index)
        i = as_expr(index)
        if hasattr(i, "value") and not 0 <= i.value < self.count:
            raise TraceError(f"index {i.value} out of range for `{self.name}`, an array of {self.count} tiles")
        return self if self.count == 1 else SharedRef(self, i)

    @property
    def is_shared(self) -> bool:
        return isinstance(self.type, (ST, SV, Semaphore))

    def subtile(self, rows: int, cols: int, coord=(0, 0)) -> "Var":
        """The rows x cols window at `coord` (in units of the window) of this tile: see tk.subtile."""
        return _syntax("subtile")(self, rows, cols, coord)

    def subvec(self, length: int, index=0) -> "Var":
        """The `length` elements at `index` (in units of the window) of this shared vector: see tk.subvec."""
        return _syntax("subvec")(self, length, index)

    def _operator(fn: str):  # noqa: N805 - builds the arithmetic dunders below
        def op(self, *other):
            return _syntax("operator")(fn, self, *other)
        op.__name__ = f"__{fn}__"
        return op

    __add__, __radd__ = _operator("add"), _operator("radd")
    __sub__, __rsub__ = _operator("sub"), _operator("rsub")
    __mul__, __rmul__ = _operator("mul"), _operator("rmul")
    __truediv__, __rtruediv__ = _operator("truediv"), _operator("rtruediv")
    __pow__, __rpow__ = _operator("pow"), _operator("rpow")
    __neg__, __abs__ = _operator("neg"), _operator("abs")
    del _operator
    __lt__ = __le__ = __gt__ = __ge__ = Traced._compare

    def __getattr__(self, name: str):
        """A missing attribute (`t.sum()`, `t.shape`): a TraceAttributeError saying what to use instead."""
        if name.startswith("_") or "type" not in self.__dict__:
            raise AttributeError(name)
        return self._attribute(name)

    def __repr__(self) -> str:
        return f"%{self.name}"


@dataclass(frozen=True)
class View:
    """Where a subtile lives: the window at coordinates (row, col), in units of the subtile's own
    shape, of `base` (a register tile, a shared tile or an element of a shared-tile array)."""

    base: Union[Var, "SharedRef"]
    row: Expr
    col: Expr


@dataclass(eq=False, frozen=True)
class SharedRef:
    """One element of a shared-tile array (or the tile itself when index is None)."""

    var: Var
    index: Optional[Expr] = None

    @property
    def type(self):
        return self.var.type

    @property
    def name(self) -> str:
        return self.var.name

    def subtile(self, rows: int, cols: int, coord=(0, 0)) -> Var:
        return _syntax("subtile")(self, rows, cols, coord)

    def subvec(self, length: int, index=0) -> Var:
        return _syntax("subvec")(self, length, index)

    def __getitem__(self, index) -> Var:
        return _syntax("slice")(self, index)


@dataclass(eq=False)
class GlobalVar(Traced):
    """A global-tensor kernel parameter (refused by Python's math, numpy and torch functions, as a Var is)."""

    name: str
    type: GL
    contiguous: bool = True

    @property
    def shape(self) -> tuple:
        """The dims as declared, as torch's shape: ints for static dims, runtime scalars for dynamic ones."""
        outer = self.type.outer
        dims = (outer if isinstance(outer, int) else Sym(outer, i32),) + tuple(self.dim(a) for a in range(4))
        return dims[5 - self.type.rank:]

    @property
    def batch(self): return self.dim(0)

    @property
    def depth(self): return self.dim(1)

    @property
    def rows(self): return self.dim(2)

    @property
    def cols(self): return self.dim(3)

    def dim(self, axis: int) -> Expr | int:
        """Size of axis 0..3 (batch, depth, rows, cols): an int if static, else its runtime symbol."""
        d = self.type.dims[axis]
        return d if isinstance(d, int) else Sym(d, i32)  # dims sharing a name are one runtime value


class PglVar:
    """A parallel global tensor parameter (tk.pgl) while tracing: one GlobalVar per rank of its group (`x[p]`, p a
    Python int: peers are picked at trace time) and the rank this kernel runs as (`x.rank`, an int: each rank's
    kernel is its own specialization). `x.local` is this rank's own tensor; `x.rows`, `x.cols`, ... its sizes, the
    same for every rank."""

    def __init__(self, name: str, members: tuple, rank: int):
        self.name, self.members, self.rank = name, tuple(members), rank
        self.world = len(self.members)

    def __getitem__(self, p) -> GlobalVar:
        if isinstance(p, Expr):
            if p.dtype != i32:
                raise TraceError(f"`{self.name}[...]`: a rank is an integer, got a {p.dtype} scalar")
            return PeerRef(self, p)
        if isinstance(p, bool) or not hasattr(p, "__index__"):
            raise TraceError(f"`{self.name}[{p!r}]`: a pgl's gls are picked by a rank, a Python int or a runtime "
                             "int scalar")
        i = p.__index__()
        if not 0 <= i < self.world:
            raise TraceError(f"`{self.name}[{i}]`: rank out of range for a pgl of {self.world} GPUs")
        return self.members[i]

    @property
    def local(self) -> GlobalVar:
        return self.members[self.rank]

    @property
    def type(self) -> GL:
        return self.local.type

    def __getattr__(self, name: str):
        if name in ("shape", "batch", "depth", "rows", "cols", "dim"):
            return getattr(self.members[self.rank], name)
        raise AttributeError(f"a pgl (`{self.name}`) has no attribute {name!r}: it has x[p] (rank p's gl), x.local, "
                             "x.rank, x.world and the sizes (x.rows, x.cols, ...)")

    def __repr__(self) -> str:
        return f"%{self.name}<pgl of {self.world}, rank {self.rank}>"


class PeerRef(GlobalVar):
    """`x[peer]` of a pgl `x` with a runtime `peer`: the gl of that rank, picked while the kernel runs among the pgl's
    gls (each a kernel parameter with its own pointer and tensor maps). Its C++ `name` is the pick,
    `tk::peer(peer, x_0, x_1, ...)`, so that ops take it wherever they take a gl."""

    def __init__(self, pgl: PglVar, index: Expr):
        self.pgl, self.index = pgl, index
        self.type = pgl.type
        self.contiguous = all(m.contiguous for m in pgl.members)

    @property
    def members(self) -> tuple:
        return self.pgl.members

    @property
    def name(self) -> str:
        return self.pick(m.name for m in self.members)

    def pick(self, names) -> str:
        """C++ picking, by this rank, one of the members' `names` (their gls, or their tensor maps of one tile)."""
        return f"tk::peer({render(self.index)}, {', '.join(names)})"

    def __repr__(self) -> str:
        return f"@{self.pgl.name}[{render(self.index)}]"


@dataclass(frozen=True)
class ScalarParam:
    name: str
    sym: Sym


Param = Union[GlobalVar, ScalarParam]
Operand = Union[Var, SharedRef, GlobalVar, Expr, tuple]


@dataclass(eq=False)
class Decl:
    var: Var
    loc: Loc


@dataclass(eq=False)
class Let:
    """`const int name = value;`: a named runtime scalar, for readable generated code. A mutable one
    (`tk.var`) is `int name = value;` and may be reassigned later by `Assign` statements."""

    sym: Sym
    value: Expr
    loc: Loc
    mutable: bool = False

    @property
    def var(self) -> Sym:   # the name the tracer may rename, like Decl.var and For.var
        return self.sym


@dataclass(eq=False)
class Assign:
    """`name = value;`: a new value for a mutable scalar (a `tk.var`). Expressions that use `target`
    read its value where they are evaluated, as the generated C++ does."""

    target: Sym
    value: Expr
    loc: Loc


@dataclass(eq=False)
class Op:
    """A tile operation. `args` are operands, destination first; `attrs` are static settings."""

    name: str
    args: tuple
    loc: Loc
    attrs: dict = field(default_factory=dict)


# The elementwise functions of `unary`, `binary` and `map` ops (attrs["fn"]), and those `reduce` and `broadcast`
# ops combine with: the front end records them, the code generator names them (tk::exp, tk::row_max, tk::sub_row)
# and the interpreter computes them.
UNARY_FNS = ("exp", "exp2", "log", "log2", "abs", "relu", "neg", "copy")
# The math functions (tk.sqrt .. tk.erf; tkpy/tiles/math_approx.py): unary like those above, with a prelude section
# of their own that a kernel's source holds only when it uses one; and the two that only map expressions have: pow
# (binary: tk.pow, x ** y) and powi (x ** n, the integer constant n the expression's param).
MATH_FNS = ("sqrt", "rsqrt", "sigmoid", "tanh", "tanh_approx", "log1p", "erf")
MAP_MATH_FNS = ("pow", "powi")
BINARY_FNS = ("add", "sub", "mul", "div", "max", "min")
# The copies between a tile (or vector) and a global tensor, whose first three operands are the tile, the tensor and
# the coordinate (in units of the tile), or the tensor, the tile and the coordinate: ordinary copies (the debug
# mode bounds-checks them) and TMA's (the hardware does).
GLOBAL_TILE_OPS = ("load_rt_gl", "load_rv_gl", "load_st_gl", "load_sv_gl", "store_gl_rt", "store_gl_rv",
                   "store_gl_st", "store_gl_sv", "load_async", "store_add_gl_rt")
TMA_TILE_OPS = ("tma_load", "tma_store", "tma_prefetch")
REDUCE_FNS = ("max", "min", "sum", "prod")
BROADCAST_FNS = ("add", "sub", "mul", "div")


@dataclass(eq=False)
class For:
    var: Sym
    start: Expr
    stop: Expr
    step: Expr
    body: list
    loc: Loc


@dataclass(eq=False)
class If:
    cond: Expr
    then: list
    orelse: list
    loc: Loc


Stmt = Union[Decl, Let, Assign, Op, For, If]


@dataclass(eq=False)
class KernelIR:
    name: str
    params: list
    body: list
    warps: int
    loc: Loc
    constexprs: dict = field(default_factory=dict)
    shared_offsets: dict = field(default_factory=dict)  # Var -> byte offset, filled by plan_shared
    shared_bytes: int = 0
    cluster: Optional[tuple] = None   # blocks per cluster (x, y, z), or None
    blocks_per_sm: int = 1            # blocks an SM must hold at once: __launch_bounds__'s minimum, a share of the
                                      # register file and of shared memory each (ir/passes.py shared_limit)
    blocks_per_sm_stated: bool = False   # __launch_bounds__ states its minimum of 1 too (else ptxas may cap the
                                         # registers for a second block)
    dependent_launch: bool = False    # programmatic dependent launch (runtime/dependent_launch.py)
    timeline: bool = False            # tk.mark records the cycle counter (runtime/timeline.py)
    fast_division: bool = False       # divisions in loops by kernel-fixed values through divisors (codegen/divisors.py)
    debug: Optional[Any] = None       # debug mode's settings (runtime/debug.py Settings): bounded waits; None: off

    @property
    def threads(self) -> int:
        return self.warps * 32


def walk(stmts):
    """Every statement in a body, depth first, including those inside loops and branches."""
    for s in stmts:
        yield s
        if isinstance(s, For):
            yield from walk(s.body)
        elif isinstance(s, If):
            yield from walk(s.then)
            yield from walk(s.orelse)
