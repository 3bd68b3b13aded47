"""Op name -> CPU semantics, filled by the interpret.ops_* modules (as codegen's `emits` fills OP_EMITTERS).

A semantics function takes `(warp, op)`: the executing warp (`machine.Warp`:
its registers, scalar environment, block and shared memory) and the IR `Op`.
It does the op's whole effect for that warp and returns None, or a `sync.Wait`
when the warp must block (a barrier); the scheduler resumes the warp once the
wait is ready and reports a deadlock if it never is.
"""
from __future__ import annotations

from ..errors import UnsupportedError

SEMANTICS: dict = {}


def semantics(*names):
    """Register a function as the CPU semantics of the IR ops `names`."""
    def register(fn):
        for name in names:
            if name in SEMANTICS:
                raise ValueError(f"two interpreter semantics for op {name!r}")
            SEMANTICS[name] = fn
        return fn
    return register


def semantics_of(op):
    """The semantics of `op`, or a NotImplementedError naming it and its Python line."""
    fn = SEMANTICS.get(op.name)
    if fn is None:
        raise UnsupportedError(f"the CPU interpreter has no semantics for op `{op.name}` yet; add them with "
                               "@semantics in a tkpy/interpret/ops_*.py module", op.loc)
    return fn
