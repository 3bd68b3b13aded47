"""IR nodes: tile variables, global parameters, statements and the kernel.

The IR is a list of statements per block with structured control flow. Tile
variables are mutable (ops are destination-first, as in ThunderKittens);
scalars are immutable expression trees (see expr.py). Every statement records
the user's file:line.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Optional, Union

from ..tiles.types import GL, RT, RV, ST, SV, Semaphore
from .expr import Expr, Sym


@dataclass(frozen=True)
class Loc:
    file: str
    line: int
    function: str = ""

    @property
    def short(self) -> str:
        return f"{self.file.rsplit('/', 1)[-1]}:{self.line}"

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(eq=False)
class Var:
    """A tile or vector variable: register (rt/rv, one per warp) or shared (st/sv, one per block, or `count`)."""

    name: str
    type: Union[RT, RV, ST, SV, Semaphore]
    loc: Loc
    count: int = 1  # shared tiles only: an array of `count` tiles

    def __getitem__(self, index) -> "SharedRef":
        """Element `index` (an int or runtime scalar) of an array of shared tiles."""
        from ..errors import TraceError
        from .expr import as_expr

        if not self.is_shared or self.count == 1:
            raise TraceError(f"`{self.name}` ({self.type}) is not an array of shared tiles; only "
                             "tk.st(..., count=n) can be indexed")
        i = as_expr(index)
        if hasattr(i, "value") and not 0 <= i.value < self.count:
            raise TraceError(f"index {i.value} out of range for `{self.name}`, an array of {self.count} tiles")
        return SharedRef(self, i)

    @property
    def is_shared(self) -> bool:
        return isinstance(self.type, (ST, SV, Semaphore))

    def __repr__(self) -> str:
        return f"%{self.name}"


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


@dataclass(eq=False)
class GlobalVar:
    """A global-tensor kernel parameter."""

    name: str
    type: GL
    contiguous: bool = True

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
        from ..tiles.dtypes import i32
        d = self.type.dims[axis]
        return d if isinstance(d, int) else Sym(d, i32)  # dims sharing a name are one runtime value


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
class Op:
    """A tile operation. `args` are operands, destination first; `attrs` are static settings."""

    name: str
    args: tuple
    loc: Loc
    attrs: dict = field(default_factory=dict)


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


Stmt = Union[Decl, Op, For, If]


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
