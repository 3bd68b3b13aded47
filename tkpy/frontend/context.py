"""The trace context: where tile ops record their IR while a kernel function runs."""
from __future__ import annotations

import contextlib
import os
import sys
import threading
from collections import defaultdict
from typing import Optional

from ..errors import TraceError
from ..ir.core import Decl, Loc, Var

_TKPY_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__))) + os.sep


class TraceContext:
    """Collects the statements of one kernel trace. At most one is active per thread (`activate`)."""

    def __init__(self, kernel_name: str, warps: int, cluster=None, entry=None):
        self.kernel_name = kernel_name
        self.warps = warps
        self.cluster = cluster
        self.entry = entry            # the code object of the function traced (user_loc looks no further out)
        self.template = ""            # a block template tracing its kernel: its name and the user's class's Loc
        self.template_loc: Optional[Loc] = None
        self.users_method: Optional[Loc] = None    # as_users: whose statements the template's own code makes now
        self.blocks: list[list] = [[]]
        self.open_loops: list = []
        self._counters: dict[str, int] = defaultdict(int)
        self.last_if = None  # the If an `else_` may attach to
        self.pending_wgmma: dict = {}  # accumulator Var -> Loc of its latest unwaited wgmma
        self.pending_wgmma_reads: dict = {}  # register A tile (its storage) -> Loc of an unwaited wgmma reading it
        self.wgmma_groups: list = []   # (accumulator, Loc, register A's storage or None) of the unwaited wgmmas,
        #                                oldest first (a group each)
        self.reductions: dict = {}     # scope -> (scratch vector, parity) of tk.block.sum and friends (ops/vector_reduce)

    @property
    def body(self) -> list:
        return self.blocks[0]

    def emit(self, stmt) -> None:
        self.blocks[-1].append(stmt)
        self.last_if = None

    def push_block(self, open_loop=None) -> list:
        block: list = []
        self.blocks.append(block)
        self.open_loops.append(open_loop)
        return block

    def pop_block(self) -> list:
        self.open_loops.pop()
        return self.blocks.pop()

    def finish(self) -> list:
        """The kernel body, once tracing returned; a loop left open means `break`/`return` inside it."""
        for loc in self.open_loops:
            if loc is not None:
                raise TraceError("`break` and `return` cannot leave a tk.range loop (it runs on the GPU)", loc)
        return self.blocks[0]

    def fresh_name(self, prefix: str) -> str:
        n = self._counters[prefix]
        self._counters[prefix] += 1
        return f"{prefix}{n}"

    def declare(self, type_, prefix: str, count: int = 1) -> Var:
        loc = user_loc()
        var = Var(self.fresh_name(prefix), type_, loc, count)
        self.emit(Decl(var, loc))
        return var


class _Active(threading.local):
    """The trace context being recorded, per thread: threads trace kernels at once (each its own), while a
    kernel traced from inside another's trace on the same thread is still caught."""
    ctx: Optional[TraceContext] = None


_active = _Active()


def current() -> TraceContext:
    ctx = _active.ctx
    if ctx is None:
        raise TraceError("tile ops can only be used inside a @tk.kernel function while it is traced "
                         "(call the kernel, or kernel.trace(...))", user_loc())
    return ctx


class activate:
    """`with activate(ctx):` makes ctx this thread's active trace context."""

    def __init__(self, ctx: TraceContext):
        self.ctx = ctx

    def __enter__(self):
        if _active.ctx is not None:
            raise TraceError("kernels cannot be traced from inside another kernel's trace")
        _active.ctx = self.ctx
        return self.ctx

    def __exit__(self, *exc):
        _active.ctx = None
        return False


# Code inside tkpy's folder that counts as user code: the block templates (user_frame: the names of their
# variables) and, installed, tkpy.kernels (kernels written in tkpy, as a user writes them).
_TEMPLATES_DIR, _KERNELS_DIR = (_TKPY_DIR + name + os.sep for name in ("templates", "kernels"))
_CONTEXTLIB = contextlib.__file__           # (a tkpy op made with @contextmanager, e.g. tk.last_block, runs in it)
_USER_DIRS = (_TEMPLATES_DIR, _KERNELS_DIR)


def user_frame():
    """The innermost frame outside the tkpy package (the user's code), or None."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_TKPY_DIR) \
            and not frame.f_code.co_filename.startswith(_USER_DIRS):
        frame = frame.f_back
    return frame


def user_loc() -> Loc:
    """File and line of the statement being made: of the innermost caller outside the tkpy package and contextlib
    (the kernel, a method of a template's class and the template library parts it calls, tkpy.kernels installed);
    or, for a statement a block template's own code makes (no user code between it and the traced function), of the
    innermost template line, marked with the template's name."""
    ctx = _active.ctx
    entry = ctx.entry if ctx is not None else None
    frame, template = sys._getframe(1), None
    while frame is not None:
        file = frame.f_code.co_filename
        if (not file.startswith(_TKPY_DIR) or file.startswith(_KERNELS_DIR)) and file != _CONTEXTLIB:
            return Loc(file, frame.f_lineno, frame.f_code.co_name)
        if template is None and file.startswith(_TEMPLATES_DIR):
            template = frame
        if frame.f_code is entry:
            break
        frame = frame.f_back
    if template is None:
        return Loc("<unknown>", 0)
    if ctx is not None and ctx.users_method is not None:
        return ctx.users_method
    return Loc(template.f_code.co_filename, template.f_lineno, template.f_code.co_name,
               (ctx.template if ctx is not None else "") or "template")


class as_users:
    """`with as_users(user.tasks):` the statements a block template's own code makes in the block are the user's
    method's (the lets of the values it returned): their Loc is the method's first line, not the template's."""

    def __init__(self, method):
        code = getattr(method, "__code__", None)
        self.loc = None if code is None else Loc(code.co_filename, code.co_firstlineno, code.co_name)

    def __enter__(self):
        ctx = current()
        self.previous, ctx.users_method = ctx.users_method, self.loc or ctx.users_method

    def __exit__(self, *exc):
        current().users_method = self.previous
        return False
