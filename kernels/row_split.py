"""Rows split over warps, blocks and clusters: what the row kernels share (the norms', kernels/norm_*.py, and the
softmax's, kernels/softmax_*.py).

A row lies in registers, split into pieces: warp `w` of a block holds piece `rank * S + w % S` of row
`step * G + w // S` (S warps a row, G rows a block at a time, `rank` the block's in its cluster of C), a contig
vector of `piece` elements (8 consecutive elements a lane per chunk of 256: one 16-byte load or store each, two of
fp32). The blocks (clusters) loop over the row groups, a persistent grid of as many as the GPU runs at once. A
row's statistics reduce over its warps with tk.block.* (tk.cluster.* when C > 1): one barrier (or semaphore wait) a
reduction.

    RowSplit       the split's fields checked and its derived sizes, a mixin of the kernels' configs
    part_of, row_of, steps, first_step, stride, scope   the layout inside a kernel (at trace time)
    warps_for, grid_for, grid                            the policy's and the launch's arithmetic
"""
from __future__ import annotations

import tkpy as tk

from .op_support import resident_blocks

CHUNK = 256                                 # a contig vector's chunk: 8 elements a lane, one 16-byte copy
CLUSTERS = (1, 2, 4, 8)
MAX_WARPS = 32                              # 1024 threads a block
MAX_VALUES_PER_LANE = 64                    # a row's piece in one lane's registers, at most (fp32 values)
PIECE = 512                                 # elements a warp's piece aims at: 16 values a lane
INTERPRETER_SMS = 2                         # the "SMs" the interpreter's grids are sized for: a few blocks, each looping


class RowSplit:
    """The split of a config (a frozen dataclass with the fields `width`, `warps_per_row`, `rows_per_block`,
    `cluster` and `blocks_per_sm`): each row over `warps_per_row` warps of a block and `cluster` blocks of a
    cluster, each warp holding a piece of `piece` elements (width / (warps_per_row * cluster) rounded up to 256); a
    block holds `rows_per_block` rows at a time and loops over the rows (a persistent grid of `blocks_per_sm`
    blocks an SM)."""

    def check_split(self, fail) -> None:
        """fail(message) where the split is not one the kernels take."""
        if self.cluster not in CLUSTERS:
            fail(f"cluster must be one of {CLUSTERS}, got {self.cluster!r}")
        for option in ("warps_per_row", "rows_per_block", "blocks_per_sm"):
            value = getattr(self, option)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                fail(f"{option} must be a positive int, got {value!r}")
        if self.warps > MAX_WARPS:
            fail(f"{self.warps_per_row} warps a row x {self.rows_per_block} rows is {self.warps} warps, more than "
                 f"{MAX_WARPS} a block")
        if self.warps_per_row > 1 and self.rows_per_block > 15:
            fail("rows of several warps take a named barrier each: at most 15 rows a block")
        if self.values_per_lane > MAX_VALUES_PER_LANE:
            fail(f"a piece of {self.piece} elements is {self.values_per_lane} values a lane, more than "
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
    def values_per_lane(self) -> int:
        return self.piece // 32

    @property
    def ragged(self) -> bool:
        """Whether the pieces cover more than a row (the last ones are masked; a piece wholly past the row's end
        loads its fill and stores nothing: an idle warp)."""
        return self.piece * self.pieces != self.width

    @property
    def split_tag(self) -> str:
        """The split's part of a kernel's name: s<warps a row>g<rows a block>c<cluster>."""
        return f"s{self.warps_per_row}g{self.rows_per_block}c{self.cluster}"

    def kernel_options(self) -> dict:
        """@tk.kernel's warps, cluster and blocks_per_sm for the split."""
        return dict(warps=self.warps, cluster=(self.cluster, 1, 1) if self.cluster > 1 else None,
                    blocks_per_sm=self.blocks_per_sm)


# -- inside a kernel (at trace time) --------------------------------------------------------------------------

def part_of(c: RowSplit):
    """The piece of its rows this warp holds (a runtime scalar)."""
    return (tk.cluster.rank() * c.warps_per_row if c.cluster > 1 else 0) + tk.warp_id() % c.warps_per_row


def row_of(c: RowSplit, step):
    """The row this warp holds at step `step` of the loop."""
    return tk.let(step * c.rows_per_block + tk.warp_id() // c.warps_per_row, "row")


def first_step(c: RowSplit):
    """This cluster's (block's) first row group."""
    return tk.block_idx.x // c.cluster if c.cluster > 1 else tk.block_idx.x


def stride(c: RowSplit):
    """The row groups between a cluster's (block's) steps: the grid's clusters."""
    return tk.grid_dim.x // c.cluster if c.cluster > 1 else tk.grid_dim.x


def steps(c: RowSplit, rows):
    """The persistent loop over this cluster's (block's) row groups."""
    return tk.range(first_step(c), tk.cdiv(rows, c.rows_per_block) if c.rows_per_block > 1 else rows, stride(c))


def scope(c: RowSplit):
    """Where a row's reductions run: tk.cluster when it spans blocks, else tk.block (their `warps=` the row's)."""
    return tk.cluster if c.cluster > 1 else tk.block


# -- the policy's and the launch's arithmetic ----------------------------------------------------------------

def warps_for(width: int, most: int, cluster: int) -> int:
    """Warps a row: as many as pieces of PIECE elements cover a block's share of it, at most `most`; capped, as few
    as pieces of the capped count's size cover the row (50257 over 4 blocks of 16 warps: pieces of 1024 elements,
    13 warps a block cover it, 16 would hang 15279 elements past its end)."""
    warps = max(1, min(most, -(-width // (cluster * PIECE))))
    piece = -(-width // (cluster * warps * CHUNK)) * CHUNK
    return -(-width // (cluster * piece))


def grid_for(c: RowSplit, rows: int, resident: int) -> int:
    """Blocks of the persistent grid: clusters enough for every row group, at most what `resident` blocks hold."""
    groups = -(-rows // c.rows_per_block)
    return max(1, min(groups, resident // c.cluster)) * c.cluster


def grid(kernel, c: RowSplit, rows: int, args) -> int:
    """The persistent grid of `kernel` (of config `c`) over `rows` rows: as many clusters as the GPU runs at once
    (the occupancy queries), or INTERPRETER_SMS SMs' worth in the interpreter (a few blocks, each looping)."""
    return grid_for(c, rows, resident_blocks(kernel, c, args, INTERPRETER_SMS))
