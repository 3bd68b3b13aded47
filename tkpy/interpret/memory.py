"""The interpreter's memories: global tensors (bounds-checked) and a block's shared bytes (swizzled, tracked).

Global memory is the caller's torch CPU tensors themselves, seen as raw-bit
numpy views with their own strides, so a kernel reads and writes them in place.
Shared memory is one byte array per block laid out exactly as on the GPU:
each tile at its planned offset (`KernelIR.shared_offsets`) and each element at
the swizzled address of `tkpy.tiles` (`ST.byte_offset`, the function the
prelude's `st::offset` is generated from); a subtile is a window of its root
tile's elements, so it keeps the root's address function as `tk::subtile` does.
Every 2-byte unit records whether anything wrote it, so a read of never-written
shared memory is reported.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import InterpretError
from ..tiles.types import ST
from .numerics import RAW

_WRITTEN = {2: np.uint8(1), 4: np.uint16(0x0101)}  # state word of an element whose 2-byte units are all written
_AXES = ("batch", "depth", "row", "col")


@dataclass(frozen=True)
class SharedTile:
    """Where a shared tile, or a subtile window of one, lives: its root tile's byte offset and type (the
    address function), and the window's origin (in root elements) and type."""

    base: int
    root: object          # ST (or the type of another shared variable: sv, semaphore)
    row: int
    col: int
    type: object
    name: str


@dataclass(frozen=True, eq=False)
class Part:
    """Elements of a tile window: their (row, col) in the window and byte offsets from the root tile."""

    rows: np.ndarray
    cols: np.ndarray
    offsets: np.ndarray


@functools.cache
def part(root: ST, row: int, col: int, window: ST, threads: int = 32, slot: int = 0) -> Part:
    """The elements of `window` (at `row`, `col` of `root`) that warp `slot` of `threads` cooperating threads
    moves: all of them for one warp (a 2-d Part); else as the prelude's copy loop splits the window,
    16-byte chunks in row-major order, chunk `i` to thread `i % threads`, so to warp `(i % threads) // 32`."""
    if threads == 32:
        rows, cols = np.indices((window.rows, window.cols))
    else:
        per_chunk = 16 // window.dtype.nbytes
        chunks_per_row = window.cols // per_chunk
        chunk = np.arange(window.rows * chunks_per_row)
        chunk = chunk[(chunk % threads) // 32 == slot]
        rows = np.repeat(chunk // chunks_per_row, per_chunk)
        cols = (((chunk % chunks_per_row) * per_chunk)[:, None] + np.arange(per_chunk)).reshape(-1)
    return Part(rows, cols, root.byte_offset(row + rows, col + cols))


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

    def box(self, start: tuple, rows: int, cols: int, what: str, loc) -> np.ndarray:
        """The rows x cols box at element coordinates `start` (b, d, r, c), bounds-checked: a numpy view,
        so writing into it writes the tensor."""
        b, d, r, c = start
        for axis, (lo, n, size) in enumerate(zip(start, (1, 1, rows, cols), self.raw.shape)):
            if lo < 0 or lo + n > size:
                raise InterpretError(
                    f"{what}: out-of-bounds access of `{self.name}` (shape {self.shape}): the {rows}x{cols} tile "
                    f"at element (batch {b}, depth {d}, row {r}, col {c}) needs {_AXES[axis]} {lo}..{lo + n - 1}, "
                    f"but that axis has {size}", loc)
        return self.raw[b, d, r:r + rows, c:c + cols]


class SharedMemory:
    """One block's dynamic shared memory: raw bytes plus a written flag per 2-byte unit."""

    def __init__(self, nbytes: int):
        nbytes = -(-nbytes // 16) * 16
        self.bytes = np.zeros(nbytes, np.uint8)
        self.words = {2: self.bytes.view(np.uint16), 4: self.bytes.view(np.uint32)}
        units = np.zeros(nbytes // 2, np.uint8)
        self.state = {2: units, 4: units.view(np.uint16)}   # indexed per element of 2 or 4 bytes

    def write(self, tile: SharedTile, raw: np.ndarray, elements: Part) -> None:
        """Store raw element bits into `elements` of the tile."""
        n = tile.type.dtype.nbytes
        idx = (tile.base + elements.offsets) // n
        self.words[n][idx] = raw
        self.state[n][idx] = _WRITTEN[n]

    def read(self, tile: SharedTile, elements: Part, what: str, loc) -> np.ndarray:
        """Raw element bits of `elements` of the tile; a never-written element is an error."""
        n = tile.type.dtype.nbytes
        idx = (tile.base + elements.offsets) // n
        unwritten = self.state[n][idx] != _WRITTEN[n]
        if unwritten.any():
            first = tuple(np.argwhere(unwritten)[0])
            r, c = int(elements.rows[first]), int(elements.cols[first])
            raise InterpretError(
                f"{what} reads shared memory that nothing has written in this block: {int(unwritten.sum())} "
                f"elements of `{tile.name}` ({tile.type}), the first at (row {r}, col {c})", loc)
        return self.words[n][idx]
