"""The interpreter's memories: global tensors (bounds-checked) and a block's shared bytes (swizzled, tracked).

Global memory is the caller's torch CPU tensors themselves, seen as raw-bit
numpy views with their own strides, so a kernel reads and writes them in place.
Shared memory is one byte array per block laid out exactly as on the GPU:
each tile at its planned offset (`KernelIR.shared_offsets`) and each element at
the swizzled address of `tkpy.tiles` (`ST.byte_offset`, the function the
prelude's `st::offset` is generated from). Every 2-byte unit records whether
anything wrote it, so a read of never-written shared memory is reported.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Optional

import numpy as np

from ..errors import InterpretError
from ..tiles.types import ST
from .numerics import RAW

_WRITTEN = {2: np.uint8(1), 4: np.uint16(0x0101)}  # state word of an element whose 2-byte units are all written
_AXES = ("batch", "depth", "row", "col")


@dataclass(frozen=True, eq=False)
class Part:
    """Some elements of a tile: their (row, col) index arrays and byte offsets inside the tile."""

    rows: np.ndarray
    cols: np.ndarray
    offsets: np.ndarray


@functools.cache
def whole(tile: ST) -> Part:
    rows, cols = np.indices((tile.rows, tile.cols))
    return Part(rows, cols, tile.byte_offset(rows, cols))


@functools.cache
def copy_share(tile: ST, threads: int, slot: int) -> Optional[Part]:
    """The elements that warp `slot` of `threads` cooperating threads copies between shared and global
    memory, or None for all of them. As the prelude's copy loop does: 16-byte chunks in row-major order,
    chunk `i` to thread `i % threads`, so to warp `(i % threads) // 32`."""
    if threads == 32:
        return None
    per_chunk = 16 // tile.dtype.nbytes
    chunks_per_row = tile.cols // per_chunk
    chunk = np.arange(tile.rows * chunks_per_row)
    chunk = chunk[(chunk % threads) // 32 == slot]
    rows = np.repeat(chunk // chunks_per_row, per_chunk)
    cols = ((chunk % chunks_per_row) * per_chunk)[:, None] + np.arange(per_chunk)
    cols = cols.reshape(-1)
    return Part(rows, cols, tile.byte_offset(rows, cols))


class GlobalTensor:
    """A gl parameter: raw bits of the caller's tensor as a 4-d (batch, depth, rows, cols) numpy view."""

    def __init__(self, name: str, tensor, dtype):
        import torch

        t = tensor.detach()
        while t.dim() < 4:
            t = t.unsqueeze(0)
        self.name = name
        self.dtype = dtype
        self.shape = tuple(tensor.shape)
        self.raw = t.view({2: torch.int16, 4: torch.int32}[dtype.nbytes]).numpy().view(RAW[dtype.nbytes])

    def box(self, start: tuple, rows: int, cols: int, what: str, loc) -> tuple:
        """numpy index of the rows x cols box at element coordinates `start` (b, d, r, c), bounds-checked."""
        b, d, r, c = start
        for axis, (lo, n, size) in enumerate(zip(start, (1, 1, rows, cols), self.raw.shape)):
            if lo < 0 or lo + n > size:
                raise InterpretError(
                    f"{what}: out-of-bounds access of `{self.name}` (shape {self.shape}): the {rows}x{cols} tile "
                    f"at element (batch {b}, depth {d}, row {r}, col {c}) needs {_AXES[axis]} {lo}..{lo + n - 1}, "
                    f"but that axis has {size}", loc)
        return b, d, slice(r, r + rows), slice(c, c + cols)


class SharedMemory:
    """One block's dynamic shared memory: raw bytes plus a written flag per 2-byte unit."""

    def __init__(self, nbytes: int):
        nbytes = -(-nbytes // 16) * 16
        self.bytes = np.zeros(nbytes, np.uint8)
        self.words = {2: self.bytes.view(np.uint16), 4: self.bytes.view(np.uint32)}
        units = np.zeros(nbytes // 2, np.uint8)
        self.state = {2: units, 4: units.view(np.uint16)}   # indexed per element of 2 or 4 bytes

    def write(self, base: int, tile: ST, raw: np.ndarray, part: Optional[Part] = None) -> None:
        """Store raw element bits into (`part` of) the tile at byte offset `base`."""
        n = tile.dtype.nbytes
        idx = (base + (part or whole(tile)).offsets) // n
        self.words[n][idx] = raw
        self.state[n][idx] = _WRITTEN[n]

    def read(self, base: int, tile: ST, what: str, loc, part: Optional[Part] = None) -> np.ndarray:
        """Raw element bits of (`part` of) the tile at byte offset `base`; a never-written element is an error."""
        n = tile.dtype.nbytes
        part = part or whole(tile)
        idx = (base + part.offsets) // n
        unwritten = self.state[n][idx] != _WRITTEN[n]
        if unwritten.any():
            first = tuple(np.argwhere(unwritten)[0])
            r, c = int(part.rows[first]), int(part.cols[first])
            raise InterpretError(
                f"{what} reads shared memory that nothing has written in this block: {int(unwritten.sum())} "
                f"elements of the {tile} at byte {base}, the first at (row {r}, col {c})", loc)
        return self.words[n][idx]
