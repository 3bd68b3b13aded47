"""The tuning key of a call: what tk.autotune's `key` names, read from the call's arguments."""
from __future__ import annotations

from ..errors import ArgumentError


def key_reader(names: list[str], params: list, supplied: set, what: str, loc):
    """A function of a call's arguments (name -> value) giving its key: for each of `names`, a parameter's value (a
    tensor's: its shape) or a dynamic dim's size, then the dtype of every tensor (as Triton's key). An ArgumentError
    at `loc` (the decorator's line) for a name that is neither, or that the configurations set (`supplied`)."""
    by_name = {p.name: p for p in params}
    dims = {}
    for p in params:
        if p.kind == "gl":
            for axis, d in enumerate(p.gl.shown):
                if isinstance(d, str):
                    dims.setdefault(d, (p.name, axis))
    readers = []
    for name in names:
        if name in supplied:
            raise ArgumentError(f"tk.autotune: key {name!r} is set by the configurations, not by a call", loc)
        if name in by_name:
            readers.append(_shape(name) if by_name[name].kind == "gl" else _value(name))
        elif name in dims:
            readers.append(_dim(*dims[name]))
        else:
            raise ArgumentError(f"tk.autotune: key {name!r} is neither a parameter of {what} ("
                                f"{', '.join(n for n in by_name if n not in supplied)}) nor one of its dims "
                                f"({', '.join(dims) or 'none'})", loc)
    tensors = [p.name for p in params if p.kind == "gl"]

    def key(named: dict) -> tuple:
        return tuple(r(named) for r in readers) + tuple(str(named[t].dtype) for t in tensors)
    return key


def _value(name):
    return lambda named: named[name]


def _shape(name):
    return lambda named: tuple(named[name].shape)


def _dim(name, axis):
    return lambda named: named[name].shape[axis]
