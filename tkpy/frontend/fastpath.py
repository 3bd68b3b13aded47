"""The per-call launch path, generated as Python source specialised to one kernel's parameter list.

A cache hit costs: reading each tensor's dtype/shape/contiguity/device (the key),
one dict lookup, the data pointers (with the 16-byte alignment check), one
struct.pack into this thread's pre-built parameter buffer and cuLaunchKernelEx. Anything
unusual (first call, new shapes, bad arguments, strided views) falls back to
the slow path, which checks everything and explains errors. Strided
(non-contiguous) tensors always take the slow path: their strides are not in
the key, so each call re-checks them (about 10 us more per call).

When a C compiler is at hand, tkpy.runtime.native does the same steps in C (native_launch.c) and
this Python launcher is the fallback (TKPY_NATIVE_LAUNCH=0, no compiler); the two must agree.
"""
from __future__ import annotations

import struct
import threading

from ..codegen.abi import dim_position
from .signature import ALIGNMENT

_TEMPLATE = '''
def launch(grid, {params}):
    try:
{shapes}
        ready = cache_get(({key},))
    except (AttributeError, TypeError):   # not a tensor where one belongs, an unhashable constexpr:
        ready = None                        # the slow path explains
    if ready is None:
        return slow(grid, ({params},))
{ptrs}
    if ({any_ptr}) % {alignment}:
        return slow(grid, ({params},))
    _, buffers, stream_of, device, failed, launcher, tensor_maps = ready
    params, prepared = buffers.mine
    try:
        params.pack({values})
    except (struct_error, OverflowError):     # a scalar that does not fit: the slow path explains
        return slow(grid, ({params},))
    stream = stream_of(device)
    go = prepared.get((grid, stream))
    if go is None:
        go = ready_prepare(launcher, prepared, params, grid, stream)
    err = go()[0]
    if err:
        failed(err, grid, stream, params.address)
'''


class ThreadBuffers(threading.local):
    """`mine`: this thread's (ParamBuffer, prepared launches) for one specialization. A launch packs the buffer
    and then calls the driver, which copies it; a thread switch in between must not let another thread repack
    it (a launch with the other thread's arguments), so each thread packs its own (made on its first launch;
    ~0.05 us a call against a shared one). `prepared` maps (grid, stream) to a launch bound to that buffer."""

    def __init__(self, kinds):
        from ..runtime import ParamBuffer

        self.mine = (ParamBuffer(kinds), {})


def cache_key(specs, args) -> tuple:
    """The key the generated launcher computes, computed the slow way (must agree with _TEMPLATE)."""
    key = []
    for s, a in zip(specs, args):
        if s.kind == "gl":
            key += [a.dtype, a.shape, a.is_contiguous(), a.get_device()]
        elif s.kind == "constexpr":
            key.append(a)
        else:
            key.append(type(a))
    return tuple(key)


def build(kernel, slots) -> tuple[str, callable]:
    """Python source of the fast launcher and the function itself (closure over `kernel`'s caches)."""
    specs = kernel.specs
    names = [f"a{i}_{s.name}" for i, s in enumerate(specs)]
    shapes, key_parts = [], []
    for name, s in zip(names, specs):
        if s.kind == "gl":
            shapes.append(f"        {name}_shape = {name}.shape")
            key_parts.append(f"{name}.dtype, {name}_shape, {name}.is_contiguous(), {name}.get_device()")
        elif s.kind == "constexpr":
            key_parts.append(name)
        else:
            key_parts.append(f"type({name})")
    ptr_names, values = [], []
    maps_used = 0
    for slot in slots:
        src = slot.source
        if src[0] == "ptr":
            ptr_names.append(f"p{src[1]}")
            values.append(f"p{src[1]}")
        elif src[0] == "dim":
            i, axis = dim_position(specs, src[1])
            values.append(f"{names[i]}_shape[{axis}]")
        elif src[0] == "stride":
            raise AssertionError("the fast launcher serves packed tensors only; strided ones take the slow path")
        elif src[0] == "tmap":
            values.append(f"tensor_maps[{maps_used}]({names[src[1]]})")
            maps_used += 1
        else:
            values.append(names[src[1]])
    ptrs = "\n".join(f"    p{i} = {names[i]}.data_ptr()" for i, s in enumerate(specs) if s.kind == "gl")
    source = _TEMPLATE.format(
        params=", ".join(names), shapes="\n".join(shapes) or "        pass", key=", ".join(key_parts) or "",
        ptrs=ptrs, any_ptr=" | ".join(ptr_names) or "0", alignment=ALIGNMENT, values=", ".join(values))
    namespace = {"cache_get": kernel._fast.get, "slow": kernel._slow_launch, "struct_error": struct.error,
                 "ready_prepare": prepare_launch}
    exec(compile(source, f"<tkpy launcher of {kernel.name}>", "exec"), namespace)
    return source, namespace["launch"]


def slot_values(slots, specs, args, tensor_maps) -> tuple:
    """Parameter values for the slots, computed the slow way (for the strided path)."""
    values = []
    maps = iter(tensor_maps)
    for slot in slots:
        src = slot.source
        if src[0] == "ptr":
            values.append(args[src[1]].data_ptr())
        elif src[0] == "dim":
            i, axis = dim_position(specs, src[1])
            values.append(args[i].shape[axis])
        elif src[0] == "stride":
            i, axis = src[1], src[2]
            tdim = axis - (4 - specs[i].gl.rank)
            values.append(args[i].stride(tdim) if tdim >= 0 else 0)
        elif src[0] == "tmap":
            values.append(next(maps)(args[src[1]]))
        else:
            values.append(args[src[1]])
    return tuple(values)


def prepare_launch(launcher, prepared, params, grid, stream):
    """The launch for one (grid, stream): cuLaunchKernelEx with its config built once."""
    go = launcher.prepare(grid, stream, params)
    if len(prepared) > 1024:  # bounded: many distinct grids must not leak
        prepared.clear()
    prepared[(grid, stream)] = go
    return go
