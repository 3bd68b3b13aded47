"""Kernel parameter blocks: the kinds of slot a kernel takes and the reusable, pre-packed block handed to
cuLaunchKernelEx as ``kernelParams`` (no GPU needed to build or fill one)."""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Sequence
from typing import Any



#: kind -> (struct format, size, alignment)
PARAM_KINDS: dict[str, tuple[str, int, int]] = {
    "ptr": ("Q", 8, 8),
    "u64": ("Q", 8, 8),
    "i64": ("q", 8, 8),
    "i32": ("i", 4, 4),
    "u32": ("I", 4, 4),
    "f32": ("f", 4, 4),
    "f64": ("d", 8, 8),
    "blob128": ("128s", 128, 64),  # e.g. __grid_constant__ const CUtensorMap
}


class ParamBuffer:
    """Pre-allocated, reusable kernel argument block + ``void*[]`` array.

    Built once per kernel specialization from slot kinds (see
    :data:`PARAM_KINDS`). Fill it with ``pack(*values)`` (all slots at once,
    one ``struct.pack_into``, ~0.2 us for 4 slots; returns None) or the
    per-slot setters, then pass :attr:`address` as ``kernelParams``. No
    allocation happens after construction.

    Values must match the kernel's C parameter list in order and type; for a
    ``blob128`` slot pass exactly 128 bytes (or use :meth:`set_blob`, which
    also takes a cuda-bindings ``CUtensorMap`` or anything with ``getPtr()``).
    """

    __slots__ = (
        "kinds",
        "offsets",
        "size",
        "address",
        "_storage",
        "_mv",
        "_base",
        "_anchor",
        "_ptrs",
        "_struct",
        "_slot_structs",
        "pack",
    )

    def __init__(self, kinds: Sequence[str]) -> None:
        self.kinds: tuple[str, ...] = tuple(kinds)
        fmt = ["<"]
        offsets: list[int] = []
        off = 0
        for k in self.kinds:
            try:
                code, size, align = PARAM_KINDS[k]
            except KeyError:
                raise ValueError(f"unknown parameter kind {k!r}; expected one of {sorted(PARAM_KINDS)}") from None
            pad = (-off) % align
            if pad:
                fmt.append(f"{pad}x")
            off += pad
            offsets.append(off)
            fmt.append(code)
            off += size
        self.offsets: tuple[int, ...] = tuple(offsets)
        self.size: int = max(off, 8)
        # 64 bytes of slack so the block can start on a 64-byte boundary
        # (CUtensorMap must be 64-byte aligned).
        self._storage = bytearray(self.size + 64)
        self._anchor = ctypes.c_char.from_buffer(self._storage)  # also pins the bytearray
        raw = ctypes.addressof(self._anchor)
        shift = (-raw) % 64
        self._base: int = raw + shift
        self._mv = memoryview(self._storage)[shift : shift + self.size]
        n = len(self.kinds)
        self._ptrs = (ctypes.c_void_p * max(n, 1))(*[self._base + o for o in offsets])
        self.address: int = ctypes.addressof(self._ptrs)
        self._struct = struct.Struct("".join(fmt))
        self._slot_structs = tuple(struct.Struct("<" + PARAM_KINDS[k][0]) for k in self.kinds)
        # ``pack(*values)``: all slots in one struct.pack_into; a partial rather
        # than a method/closure because that saves a Python frame (~0.3 us).
        self.pack = functools.partial(self._struct.pack_into, self._mv, 0)

    def __len__(self) -> int:
        return len(self.kinds)

    def __repr__(self) -> str:
        return f"ParamBuffer({list(self.kinds)}, address=0x{self.address:x})"

    # per-slot setters ---------------------------------------------------
    def set(self, i: int, value: Any) -> None:
        self._slot_structs[i].pack_into(self._mv, self.offsets[i], value)

    set_ptr = set_i32 = set_u32 = set_i64 = set_u64 = set_f32 = set_f64 = set

    def set_blob(self, i: int, value: Any) -> None:
        """Copy a 128-byte blob (bytes-like, or an object with ``getPtr()``
        such as cuda-bindings' ``CUtensorMap``) into slot ``i``."""
        if self.kinds[i] != "blob128":
            raise TypeError(f"slot {i} is {self.kinds[i]!r}, not 'blob128'")
        get_ptr = getattr(value, "getPtr", None)
        if get_ptr is not None:
            ctypes.memmove(self._base + self.offsets[i], int(get_ptr()), 128)
            return
        b = memoryview(value).cast("B")
        if b.nbytes != 128:
            raise ValueError(f"blob128 slot needs exactly 128 bytes, got {b.nbytes}")
        self._mv[self.offsets[i] : self.offsets[i] + 128] = b

    # inspection ----------------------------------------------------------
    def slot_address(self, i: int) -> int:
        """Device-visible host address of slot ``i`` (what ``void*[i]`` holds)."""
        return self._base + self.offsets[i]

    def get(self, i: int) -> Any:
        return self._slot_structs[i].unpack_from(self._mv, self.offsets[i])[0]

    def values(self) -> tuple[Any, ...]:
        return self._struct.unpack_from(self._mv, 0)



__all__ = ["PARAM_KINDS", "ParamBuffer"]
