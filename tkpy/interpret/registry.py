"""Op name -> CPU semantics, filled by the interpret.ops_* modules (as codegen's `emits` fills OP_EMITTERS).

A semantics function takes `(warp, op)`: the executing warp (`machine.Warp`:
its registers, scalar environment, block and shared memory) and the IR `Op`.
It does the op's whole effect for that warp and returns None, or a `sync.Wait`
when the warp must block (a barrier); the scheduler resumes the warp once the
wait is ready and reports a deadlock if it never is.
"""
from __future__ import annotations

from ..errors import UnsupportedError

SEMANTICS: dict = {}   # op name -> (function, the op attributes it understands)


def semantics(*names, attrs: tuple = ()):
    """Register a function as the CPU semantics of the IR ops `names`, which understands the op
    attributes `attrs` (an op carrying any other attribute is refused rather than misread)."""
    def register(fn):
        for name in names:
            if name in SEMANTICS:
                raise ValueError(f"two interpreter semantics for op {name!r}")
            SEMANTICS[name] = (fn, frozenset(attrs))
        return fn
    return register


def semantics_of(op):
    """The semantics of `op`, or a NotImplementedError naming it (and any attribute they do not handle)
    and its Python line."""
    entry = SEMANTICS.get(op.name)
    if entry is None:
        raise UnsupportedError(f"the CPU interpreter has no semantics for op `{op.name}` yet; add them with "
                               "@semantics in a tkpy/interpret/ops_*.py module", op.loc)
    fn, known = entry
    if not op.attrs.keys() <= known:
        extra = ", ".join(f"{k}={op.attrs[k]!r}" for k in op.attrs if k not in known)
        raise UnsupportedError(f"the CPU interpreter's semantics of op `{op.name}` do not handle {extra} yet",
                               op.loc)
    return fn


def lookup(table: dict, key: str, op):
    """`table[key]` for an op's function attribute (its `fn`), or a NotImplementedError naming it."""
    value = table.get(key)
    if value is None:
        raise UnsupportedError(f"the CPU interpreter has no `{key}` for op `{op.name}` yet", op.loc)
    return value
