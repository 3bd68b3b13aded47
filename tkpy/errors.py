"""User-facing errors. Every error about a kernel names the user's Python file and line."""
from __future__ import annotations

import linecache


class TkpyError(Exception):
    """Base class of all tkpy errors."""


class TraceError(TkpyError):
    """A kernel is wrong at trace time: shape, dtype, layout, scope or protocol."""

    def __init__(self, message: str, loc=None):
        self.loc = loc
        self.bare_message = message
        super().__init__(with_location(message, loc))


class TraceAttributeError(TraceError, AttributeError):
    """A traced value asked for an attribute it does not have (`t.sum()` of a tile): a TraceError that says what
    to use instead, and an AttributeError, so that hasattr() and getattr(x, name, default) still answer."""


class ArgumentError(TkpyError, TypeError):
    """A kernel was called with an argument it cannot take (checked before any GPU work); `loc` is the call's
    Python line."""

    def __init__(self, message: str, loc=None):
        self.loc = loc
        self.bare_message = message
        super().__init__(with_location(message, loc))


class UnsupportedError(TkpyError, NotImplementedError):
    """A feature that tkpy does not implement (yet)."""

    def __init__(self, message: str, loc=None):
        self.loc = loc
        super().__init__(with_location(message, loc))


class InterpretError(TkpyError):
    """The CPU interpreter caught a kernel misbehaving at run time (an out-of-bounds access, a read of
    memory nothing wrote, a tile used before it arrived); `loc` is the op's Python line."""

    def __init__(self, message: str, loc=None):
        self.loc = loc
        self.bare_message = message
        super().__init__(with_location(message, loc))


class DeadlockError(InterpretError):
    """The CPU interpreter found warps waiting on barriers that can never complete; the message names
    each barrier, its phase and the blocked warps with their Python lines."""


def with_location(message: str, loc) -> str:
    """`file:line: message` and the line's source, for an error about the user's line `loc` (a tkpy.ir Loc)."""
    if loc is None:
        return message
    text = f"{loc}: {message}"
    line = linecache.getline(loc.file, loc.line).rstrip()
    if line:
        text += f"\n    {loc.line} | {line.strip()}"
    return text
