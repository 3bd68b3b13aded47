"""What the row kernels share (the norms, kernels/norm_*.py; cross-entropy, kernels/cross_entropy_*.py): a row split
into pieces over the warps of a block and the blocks of a cluster, in their configs (RowSplit), in their bodies (which
piece and row a warp holds, the persistent loop over row groups, the reductions over a row's warps) and in their
launches (the persistent grid); and the elementwise kernels' (row, piece) tasks (kernels/glu_kernel.py, cross-entropy's
backward).

A row lies in registers, split into pieces: warp `w` of a block holds piece `rank * S + w % S` of row `step * G + w //
S` (S = warps_per_row warps a row, G = rows_per_block rows a block at a time, `rank` the block's in its cluster of C),
a contig vector of `piece` values (8 consecutive elements a lane per chunk of 256: one 16-byte load or store each).
The blocks (clusters) loop over the row groups, a persistent grid of as many as the GPU runs at once; a row's
statistics reduce over its warps with tk.block.sum / amax (tk.cluster.* when C > 1), one barrier (or semaphore wait)
a reduction.
"""
# (No `from __future__ import annotations`: the kernels' bodies call these while they are traced.)
from dataclasses import dataclass

import tkpy as tk

from .op_support import resident_blocks, resident_clusters

CHUNK = 256                                 # a contig vector's chunk: 8 elements a lane, one 16-byte copy
CLUSTERS = (1, 2, 4, 8)
MAX_WARPS = 32                              # 1024 threads a block
MAX_VALUES_PER_LANE = 64                    # a row's piece in one lane's registers, at most (fp32 values)
INTERPRETER_SMS = 2                         # the "SMs" the interpreter sizes grids for: a few blocks, each looping


@dataclass(frozen=True)
class Row:
    """A policy table row: `value`, the split it chooses (each policy says what its tuple holds), and why (a
    RESULTS.md run once timed on the GPU, or the fit that set it)."""

    value: tuple
    evidence: str


@dataclass(frozen=True, kw_only=True)
class RowSplit:
    """How a row kernel's blocks take the rows (a config's fields, after what it computes; `width` is the
    config's): each row split over `warps_per_row` warps of a block and `cluster` blocks of a cluster, each warp
    holding a piece of `piece` elements (width / (warps_per_row * cluster) rounded up to 256); a block holds
    `rows_per_block` rows at a time and loops over the rows (a persistent grid of `blocks_per_sm` blocks an SM, the
    launch bounds' minimum)."""

    warps_per_row: int = 1
    rows_per_block: int = 4
    cluster: int = 1
    blocks_per_sm: int = 1

    def check_split(self, fail) -> None:
        """fail(reason) where the split cannot run (each config calls it from its __post_init__)."""
        if self.cluster not in CLUSTERS:
            fail(f"cluster must be one of {CLUSTERS}, got {self.cluster!r}")
        for option in ("warps_per_row", "rows_per_block", "blocks_per_sm"):
            value = getattr(self, option)
            if not isinstance(value, int) or value < 1:
                fail(f"{option} must be a positive int, got {value!r}")
        if self.warps > MAX_WARPS:
            fail(f"{self.warps_per_row} warps a row x {self.rows_per_block} rows is {self.warps} warps, more than "
                 f"{MAX_WARPS} a block")
        if self.warps_per_row > 1 and self.rows_per_block > 15:
            fail("rows of several warps take a named barrier each: at most 15 rows a block")
        if self.piece // 32 > MAX_VALUES_PER_LANE:
            fail(f"a piece of {self.piece} elements is {self.piece // 32} values a lane, more than "
                 f"{MAX_VALUES_PER_LANE}: more warps a row or a larger cluster")

    @property
    def warps(self) -> int:
        return self.warps_per_row * self.rows_per_block

    @property
    def pieces(self) -> int:
        """The pieces a row is split into: one a warp of each block of the cluster."""
        return self.warps_per_row * self.cluster

    @property
    def piece(self) -> int:
        return -(-self.width // (self.pieces * CHUNK)) * CHUNK

    @property
    def ragged(self) -> bool:
        """Whether the pieces cover more than a row (the last ones are masked; a piece wholly past the row's end
        loads its fill and stores nothing: an idle warp)."""
        return self.piece * self.pieces != self.width

    @property
    def split_name(self) -> str:
        return f"s{self.warps_per_row}g{self.rows_per_block}c{self.cluster}"


# -- in the bodies --------------------------------------------------------------------------------------------------

def layout(c: RowSplit):
    """(the piece of a row this warp holds, the row it holds at step `step`) as functions."""
    s, g = c.warps_per_row, c.rows_per_block

    def part():
        return (tk.cluster.rank() * s if c.cluster > 1 else 0) + tk.warp_id() % s

    def row(step):
        return tk.let(step * g + tk.warp_id() // s, "row")
    return part, row


def first_step(c: RowSplit):
    """This block's (cluster's) first row group."""
    return tk.block_idx.x // c.cluster if c.cluster > 1 else tk.block_idx.x


def stride(c: RowSplit):
    """Row groups from one of this block's (cluster's) to its next."""
    return tk.grid_dim.x // c.cluster if c.cluster > 1 else tk.grid_dim.x


def steps(c: RowSplit, rows):
    """The persistent loop over this cluster's (block's) row groups."""
    return tk.range(first_step(c), tk.cdiv(rows, c.rows_per_block) if c.rows_per_block > 1 else rows, stride(c))


def row_sum(c: RowSplit, *values):
    """The sums of the vectors (or of each warp's scalar partials) over a row's warps (and blocks)."""
    scope = tk.cluster if c.cluster > 1 else tk.block
    return scope.sum(*values, warps=c.warps_per_row)


def row_max(c: RowSplit, *vectors):
    """The largest elements of the vectors over a row's warps (and blocks)."""
    scope = tk.cluster if c.cluster > 1 else tk.block
    return scope.amax(*vectors, warps=c.warps_per_row)


# -- tensors a config does not have ---------------------------------------------------------------------------------

PLACEHOLDER = 16                            # bytes of an absent tensor's placeholder


def placeholder(dtype):
    """The annotation of an absent tensor: PLACEHOLDER bytes of `dtype` (the body never reads it)."""
    return tk.gl[dtype, PLACEHOLDER // dtype.nbytes]


_PLACEHOLDERS: dict = {}     # (torch dtype, device) -> a 16-byte tensor standing for an absent one


def placeholder_tensor(dtype, device):
    """The tensor a launch passes for an absent one: PLACEHOLDER bytes of torch dtype `dtype` on `device`."""
    key = (dtype, device)
    t = _PLACEHOLDERS.get(key)
    if t is None:
        import torch
        t = _PLACEHOLDERS[key] = torch.zeros(PLACEHOLDER // torch.empty(0, dtype=dtype).element_size(), dtype=dtype,
                                             device=device)
    return t


# -- in the launches ------------------------------------------------------------------------------------------------

def grid_for(c: RowSplit, rows: int, resident: int) -> int:
    """Blocks of the persistent grid: clusters enough for every row group, at most `resident` clusters (what the
    GPU runs at once: SMs x blocks an SM, or the active clusters, from the occupancy queries)."""
    groups = -(-rows // c.rows_per_block)
    return max(1, min(groups, resident)) * c.cluster


def grid(kernel, c: RowSplit, rows: int, args) -> int:
    """The persistent grid of `kernel` (config `c`) over `rows` rows of args[0]: as many blocks (clusters) as the GPU
    runs at once, or INTERPRETER_SMS SMs' worth in the interpreter (a few blocks, each looping over several row
    groups)."""
    if c.cluster > 1:
        return grid_for(c, rows, resident_clusters(kernel, c, args, INTERPRETER_SMS))
    return grid_for(c, rows, resident_blocks(kernel, c, args, INTERPRETER_SMS))


# -- elementwise kernels: (row, piece) tasks --------------------------------------------------------------------------

MAX_CHUNKS = 8                              # chunks of a piece, at most (64 fp32 values a lane a vector)


@dataclass(frozen=True, kw_only=True)
class PieceSplit:
    """How an elementwise kernel's warps take the rows (a config's fields, after what it computes; `width` is the
    config's): a row is cut into pieces of `chunks` x 256 elements (contig vectors, 16-byte copies), one (row,
    piece) a warp at a time; the `warps` warps of each of the blocks (`blocks_per_sm` an SM) loop over them, a
    persistent grid (piece_tasks)."""

    chunks: int = 2
    warps: int = 8
    blocks_per_sm: int = 2

    def check_split(self, fail, most_chunks: int = MAX_CHUNKS) -> None:
        """fail(reason) where the split cannot run (each config calls it from its __post_init__)."""
        if self.chunks not in range(1, most_chunks + 1):
            fail(f"chunks must be 1 to {most_chunks}, got {self.chunks!r}")
        for option, most in (("warps", MAX_WARPS), ("blocks_per_sm", 16)):
            value = getattr(self, option)
            if not isinstance(value, int) or not 1 <= value <= most:
                fail(f"{option} must be an int from 1 to {most}, got {value!r}")

    @property
    def piece(self) -> int:
        """Elements of a row a warp takes at a time."""
        return self.chunks * CHUNK

    @property
    def pieces(self) -> int:
        """Pieces a row: the last one masked where the width is not a multiple of the piece."""
        return -(-self.width // self.piece)

    @property
    def split_name(self) -> str:
        return f"p{self.chunks}w{self.warps}b{self.blocks_per_sm}"


def piece_tasks(c: PieceSplit, rows):
    """This warp's (row, piece) tasks, every warp of the grid's in turn."""
    return tk.range(tk.block_idx.x * c.warps + tk.warp_id(), rows * c.pieces, tk.grid_dim.x * c.warps)


def piece_place(c: PieceSplit, task):
    """(row, piece) of a task."""
    if c.pieces == 1:
        return task, 0
    return tk.let(task // c.pieces, "row"), tk.let(task % c.pieces, "part")


def piece_grid(c: PieceSplit, rows: int, resident: int) -> int:
    """Blocks of an elementwise kernel's persistent grid: enough warps for every (row, piece), at most `resident`."""
    return max(1, min(-(-rows * c.pieces // c.warps), resident))
