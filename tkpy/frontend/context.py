"""The trace context: where tile ops record their IR while a kernel function runs."""
from __future__ import annotations

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

    def __init__(self, kernel_name: str, warps: int, cluster=None):
        self.kernel_name = kernel_name
        self.warps = warps
        self.cluster = cluster
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


# Code inside tkpy's folder that counts as user code: the block templates (the statements they generate point at
# the template's lines) and, installed, tkpy.kernels (kernels written in tkpy, as a user writes them).
_USER_DIRS = tuple(_TKPY_DIR + name + os.sep for name in ("templates", "kernels"))


def user_frame():
    """The innermost frame outside the tkpy package (the user's code), or None."""
    frame = sys._getframe(1)
    while frame is not None and frame.f_code.co_filename.startswith(_TKPY_DIR) \
            and not frame.f_code.co_filename.startswith(_USER_DIRS):
        frame = frame.f_back
    return frame


def user_loc() -> Loc:
    """File and line of the innermost caller outside the tkpy package."""
    frame = user_frame()
    if frame is None:
        return Loc("<unknown>", 0)
    return Loc(frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name)
