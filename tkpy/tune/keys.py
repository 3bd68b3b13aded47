"""The tuning key of a call: what tk.autotune's `key` names, read from the call's arguments by position.

The reader is generated Python, as the launch path is (tkpy/frontend/fastpath.py): a call reads each tensor's
shape once and builds one tuple (on the 2-core CPU machine a tuned call's dispatch, two dims and two tensors, took
1.7 us so against 2.3 us with a reader function per name).
"""
from __future__ import annotations

from ..errors import ArgumentError


def key_reader(names: list[str], params: list, call_names: list[str], what: str, loc):
    """A function of a call's arguments (in order, as `call_names`) giving its key in memory: for each of `names`, a
    parameter's value (a tensor's: its shape) or a dynamic dim's size; then every tensor's dtype (as Triton's key);
    last, the first tensor's device (None without tensors: the key on disk is the rest, the GPU named apart). An
    ArgumentError at `loc` (the decorator's line) for a name that is neither, or that the configurations set (a
    parameter not in `call_names`)."""
    position = {n: i for i, n in enumerate(call_names)}
    by_name = {p.name: p for p in params}
    tensors = [position[p.name] for p in params if p.kind == "gl" and p.name in position]
    dims = {}
    for p in params:
        if p.kind == "gl" and p.name in position:
            for axis, d in enumerate(p.gl.shown):
                if isinstance(d, str):
                    dims.setdefault(d, f"s{position[p.name]}[{axis}]")
    parts = []
    for name in names:
        if name in by_name and name not in position:
            raise ArgumentError(f"tk.autotune: key {name!r} is set by the configurations, not by a call", loc)
        if name in by_name:
            parts.append(f"tuple(s{position[name]})" if by_name[name].kind == "gl" else f"a[{position[name]}]")
        elif name in dims:
            parts.append(dims[name])
        else:
            raise ArgumentError(f"tk.autotune: key {name!r} is neither a parameter of {what} ("
                                f"{', '.join(call_names)}) nor one of its dims ({', '.join(dims) or 'none'})", loc)
    parts += [f"a[{i}].dtype" for i in tensors] + [f"a[{tensors[0]}].device" if tensors else "None"]
    shapes = "".join(f"    s{i} = a[{i}].shape\n" for i in tensors)
    scope: dict = {}
    exec(f"def key(a):\n{shapes}    return ({', '.join(parts)},)\n", scope)       # noqa: S102 - our own source
    return scope["key"]
