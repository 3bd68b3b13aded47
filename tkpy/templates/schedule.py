"""Tile schedulers of the block templates: which task a persistent block runs next.

A template's tasks are the output tiles of `tasks(g)` -> (row_tiles, col_tiles), walked by index: block b
of a persistent grid (one block per SM) runs tasks b, b + grid, b + 2 grid, ... The scheduler maps an index
to a tile and, for split-K, to a range of the tile's steps:

- `Grouped(group=8)` (the default): one task per tile, in L2-friendly groups of `group` tile rows
  (`grouped_order`); the template class's `order(g, index, row_tiles, col_tiles)` replaces that order.
- `SplitK(splits, group=8)`: each tile is `splits` tasks, each taking a contiguous share of the tile's
  `iters` steps (the shares differ by at most one step). For shapes with few tiles next to the SMs (e.g. a
  GEMM of 128 x 8192 x 8192: 32 tiles of 128 x 256 for 132 SMs), `splits` tasks per tile fill the machine;
  the author's `finish`/`store` then write partial results (task.split of task.splits) that something
  combines, e.g. a deterministic reduction over an fp32 workspace (see kernels/gemm.py).
  Task indices run split-major (all tiles of split 0 first), so the blocks running together read the
  same K range of the operands.
"""
from __future__ import annotations

from ..ir.expr import call


def grouped_order(index, row_tiles, col_tiles, group: int) -> tuple:
    """(row, col) of task `index` walking `group` rows of tiles at a time, column by column, so the
    blocks running together share A row panels and B column panels in L2."""
    per_group = group * col_tiles
    first_row = (index // per_group) * group
    rows_here = call("min", row_tiles - first_row, group)
    within = index % per_group
    return first_row + within % rows_here, within // rows_here


class Grouped:
    """One task per output tile, `group` rows of tiles at a time (see the module docstring)."""

    splits_k = False

    def __init__(self, group: int = 8):
        if not (isinstance(group, int) and group >= 1):
            raise ValueError(f"group must be a positive int, got {group!r}")
        self.group = group

    def order(self, g, index, row_tiles, col_tiles) -> tuple:
        return grouped_order(index, row_tiles, col_tiles, self.group)

    def splits(self, g):
        """Tasks per tile: an int, or a runtime value of the kernel's parameters."""
        return 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}(group={self.group})"


class SplitK(Grouped):
    """`splits` tasks per output tile, each over a share of its steps: `splits` is an int, or a function of
    the kernel's parameters `g` (e.g. `lambda g: g.W.depth`, the depth of a workspace of partial sums),
    evaluated on the host too to size the grid."""

    splits_k = True

    def __init__(self, splits, group: int = 8):
        super().__init__(group)
        if not (callable(splits) or (isinstance(splits, int) and splits >= 1)):
            raise ValueError(f"splits must be a positive int or a function of the kernel's parameters, got {splits!r}")
        self._splits = splits

    def splits(self, g):
        return self._splits(g) if callable(self._splits) else self._splits

    @staticmethod
    def share(total, split, splits) -> tuple:
        """(first step, end) of share `split` of `total` steps cut in `splits` nearly equal parts."""
        return split * total // splits, (split + 1) * total // splits

    def __repr__(self) -> str:
        return f"SplitK({self._splits!r}, group={self.group})"
