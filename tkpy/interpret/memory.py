"""The interpreter's memories: global tensors (bounds-checked) and a block's shared bytes (swizzled, tracked).

Global memory is the caller's torch CPU tensors themselves, seen as raw-bit
numpy views with their own strides, so a kernel reads and writes them in place.
Shared memory is one byte array per block laid out exactly as on the GPU:
each tile at its planned offset (`KernelIR.shared_offsets`) and each element at
the swizzled address of `tkpy.tiles` (`ST.byte_offset`, the function the
prelude's `st::offset` is generated from); a subtile is a window of its root
tile's elements, so it keeps the root's address function as `tk::subtile` does.
Every 2-byte unit records its state (fp8 elements share one: their tiles' rows are whole 16-byte chunks), so that a read of shared memory that nothing
wrote, or that a TMA load is still writing, is reported, and so is an async-proxy read
(TMA store, wgmma) of ordinary stores that no proxy fence made visible to it.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from ..errors import InterpretError
from ..ir.expr import cdiv
from ..tiles.types import ST
from .numerics import RAW

# The state of a 2-byte unit of shared memory. GENERIC + w: warp w's ordinary stores wrote it and the warp
# has not fenced them for the async proxy since (generic reads may see them; TMA and wgmma may not).
UNWRITTEN, IN_FLIGHT, VISIBLE, GENERIC = 0, 1, 2, 3
_SPREAD = {1: 1, 2: 1, 4: 0x0101}   # a unit's state times this sets every unit of an element of this many bytes
_SPREAD_32 = {1: 1, 2: 1, 4: (1 << 32) + 1}   # the same for 32-bit values per unit
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


def whole(tile: SharedTile) -> Part:
    """Every element of a shared tile (window), as one warp moves them."""
    return part(tile.root, tile.row, tile.col, tile.type)


def _slot(n: int, byte: np.ndarray) -> np.ndarray:
    """Where the state of elements of `n` bytes at these byte addresses is kept in `_state[n]` / `_transfer[n]`:
    per element for 2 and 4 bytes, per 2-byte unit (shared by a pair) for fp8."""
    return byte >> 1 if n == 1 else byte // n


class GlobalTensor:
    """A gl parameter: raw bits of the caller's tensor as a 4-d (batch, depth, rows, cols) numpy view, or
    5-d (outer, batch, depth, rows, cols) for a 5-d tensor."""

    def __init__(self, name: str, tensor, dtype):
        import torch

        t = tensor.detach()
        while t.dim() < 4:
            t = t.unsqueeze(0)
        self.name = name
        self.dtype = dtype
        self.shape = tuple(tensor.shape)
        word = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[dtype.nbytes]
        self.raw = t.view(word).numpy().view(RAW[dtype.nbytes])

    def box(self, start: tuple, rows: int, cols: int, what: str, loc) -> np.ndarray:
        """The rows x cols box at element coordinates `start` (b, d, r, c), bounds-checked: a numpy view,
        so writing into it writes the tensor."""
        *lead, r, c = start
        axes = (("outer",) if len(start) == 5 else ()) + _AXES
        for axis, (lo, n, size) in enumerate(zip(start, (1,) * len(lead) + (rows, cols), self.raw.shape)):
            if lo < 0 or lo + n > size:
                at = ", ".join(f"{a} {v}" for a, v in zip(("outer", "batch", "depth")[-len(lead):], lead))
                raise InterpretError(
                    f"{what}: out-of-bounds access of `{self.name}` (shape {self.shape}): the {rows}x{cols} tile "
                    f"at element ({at}, row {r}, col {c}) needs {axes[axis]} {lo}..{lo + n - 1}, "
                    f"but that axis has {size}", loc)
        return self.raw[(*lead, slice(r, r + rows), slice(c, c + cols))]


class SharedMemory:
    """One block's dynamic shared memory: raw bytes, the state of each 2-byte unit (above) and, for units
    a TMA load wrote, which of `transfers` it was (an object with `landed()` and `describe()`). Units that
    an asynchronous op (wgmma, TMA store) may still be reading are held (`hold`) until it completes
    (`release`): writing them meanwhile is an error.

    `writer` is the warp whose ops run now (the scheduler sets it when it resumes a warp): ordinary
    stores are attributed to it, for the proxy-fence check.
    """

    def __init__(self, nbytes: int):
        nbytes = cdiv(nbytes, 16) * 16
        self.bytes = np.zeros(nbytes, np.uint8)
        self.words = {1: self.bytes, 2: self.bytes.view(np.uint16), 4: self.bytes.view(np.uint32)}
        self.units = np.zeros(nbytes // 2, np.uint8)
        self._state = {1: self.units, 2: self.units, 4: self.units.view(np.uint16)}   # indexed by _slot
        self.unit_transfers = np.zeros(nbytes // 2, np.int32)
        self._transfer = {1: self.unit_transfers, 2: self.unit_transfers, 4: self.unit_transfers.view(np.int64)}
        self.transfers: list = []
        self.reading = np.zeros(nbytes // 2, np.int16)   # asynchronous reads in flight, per unit
        self.readers: list = []                          # (who, units) of those reads
        self.writer = 0

    def write(self, tile: SharedTile, raw: np.ndarray, elements: Part) -> None:
        """Ordinary stores (the generic proxy) of raw element bits into `elements` of the tile."""
        self._store(tile, raw, elements, GENERIC + self.writer)

    def write_async(self, tile: SharedTile, raw: np.ndarray, elements: Part, transfer) -> None:
        """A TMA load's raw element bits: in flight until `transfer.landed()`."""
        n = tile.type.dtype.nbytes
        self._store(tile, raw, elements, IN_FLIGHT)
        self._transfer[n][_slot(n, tile.base + elements.offsets)] = len(self.transfers) * _SPREAD_32[n]
        self.transfers.append(transfer)

    def hold(self, tile: SharedTile, elements: Part, who) -> None:
        """An asynchronous op `who` (its str names it in errors) starts reading `elements` of the tile."""
        units = self._units(tile, elements)
        self.reading[units] += 1
        self.readers.append((who, units))

    def release(self, who) -> None:
        """The asynchronous op `who` (the object given to `hold`) has finished reading."""
        for reader, units in self.readers:
            if reader is who:
                self.reading[units] -= 1
        self.readers = [(reader, units) for reader, units in self.readers if reader is not who]

    def fence(self, warp: int) -> None:
        """fence.proxy.async by `warp`: its ordinary stores become visible to TMA and wgmma."""
        self.units[self.units == GENERIC + warp] = VISIBLE

    def read(self, tile: SharedTile, elements: Part, what: str, loc, *, async_proxy: bool = False) -> np.ndarray:
        """Raw element bits of `elements` of the tile. An error if any was never written or is still in flight;
        for an `async_proxy` reader (TMA store, wgmma), also if ordinary stores wrote it without a proxy fence."""
        n = tile.type.dtype.nbytes
        idx = (tile.base + elements.offsets) // n
        units = (tile.base + elements.offsets) >> 1     # each element's first unit stands for it
        state = self.units[units]
        if (state != VISIBLE if async_proxy else state < VISIBLE).any():
            self._check(tile, elements, idx, units, state, what, loc, async_proxy)
        return self.words[n][idx]

    def _store(self, tile: SharedTile, raw: np.ndarray, elements: Part, state: int) -> None:
        if self.readers:
            units = self._units(tile, elements)
            if self.reading[units].any():
                who = next(who for who, held in self.readers if np.isin(units, held).any())
                # no line here: the scheduler adds the writing op's
                raise InterpretError(f"a write into `{tile.name}` overwrites shared memory that {who} may still be "
                                     "reading")
        n = tile.type.dtype.nbytes
        idx = (tile.base + elements.offsets) // n
        self.words[n][idx] = raw
        self._state[n][_slot(n, tile.base + elements.offsets)] = state * _SPREAD[n]

    @staticmethod
    def _units(tile: SharedTile, elements: Part) -> np.ndarray:
        """Every 2-byte unit of `elements` of the tile."""
        first = (tile.base + elements.offsets.reshape(-1)) >> 1
        n = tile.type.dtype.nbytes
        return first if n == 2 else np.unique(first) if n == 1 else np.concatenate([first, first + 1])

    def _check(self, tile, elements, idx, units, state, what: str, loc, async_proxy: bool) -> None:
        """The slow path of `read`: mark the in-flight elements whose TMA load has landed visible, then report
        what is still wrong."""
        n = tile.type.dtype.nbytes
        flying = state == IN_FLIGHT
        transfers = self.unit_transfers[units]
        for t in np.unique(transfers[flying]):
            if self.transfers[t].landed():
                landed = flying & (transfers == t)
                self._state[n][_slot(n, tile.base + elements.offsets)[landed]] = VISIBLE * _SPREAD[n]
                state = np.where(landed, VISIBLE, state)

        def fail(bad, problem: str, detail: str = ""):
            first = tuple(np.argwhere(bad)[0])
            r, c = int(elements.rows[first]), int(elements.cols[first])
            raise InterpretError(f"{what} reads {problem}: {int(bad.sum())} elements of `{tile.name}` ({tile.type}), "
                                 f"the first at (row {r}, col {c}){detail}", loc)

        if (state == UNWRITTEN).any():
            fail(state == UNWRITTEN, "shared memory that nothing has written in this block")
        if (state == IN_FLIGHT).any():
            pending = self.transfers[transfers[state == IN_FLIGHT][0]]
            fail(state == IN_FLIGHT, "shared memory before its TMA load arrived", f"; {pending.describe()}")
        if async_proxy and (state >= GENERIC).any():
            warp = int(state[state >= GENERIC][0]) - GENERIC
            fail(state == GENERIC + warp, f"through the async proxy (TMA, wgmma) what warp {warp}'s ordinary "
                 "stores wrote, with no tk.fence_proxy_async() by that warp since")
