"""Tile schedulers of the block templates: which task a persistent block runs next.

A template's tasks are the output tiles of `tasks(g)` -> (row_tiles, col_tiles), walked by index: block b
of a persistent grid (one block per SM) runs tasks b, b + grid, b + 2 grid, ... The scheduler maps an index
to a tile and, for split-K, to a range of the tile's steps:

- `Grouped(group=8)` (the default): one task per tile, in L2-friendly groups of `group` tile rows
  (`grouped_order`); the template class's `order(g, index, row_tiles, col_tiles)` replaces that order.
  `snake=True`: a persistent grid's every other full round of tasks dealt to the blocks in reverse (`dealt`), so
  that where the tasks' lengths vary along the order (causal attention's key tiles) a block's long task in one
  round meets a short one in the next; the rounds hold the same tasks, so the L2 sees the same ones together.
- `SplitK(splits, group=8)`: each tile is `splits` tasks, each taking a contiguous share of the tile's
  `iters` steps (the shares differ by at most one step). For shapes with few tiles next to the SMs (e.g. a
  GEMM of 128 x 8192 x 8192: 32 tiles of 128 x 256 for 132 SMs), `splits` tasks per tile fill the machine;
  the author's `finish`/`store` then write partial results (task.split of task.splits) that something
  combines, e.g. a deterministic reduction over an fp32 workspace (see kernels/gemm_kernel.py).
  Task indices run split-major (all tiles of split 0 first), so the blocks running together read the
  same K range of the operands.

Orders a template class's `order` may return instead of grouped_order's (kernels/attention_kernel.py uses both):

- `causal_pairs_order`: for tiles whose work grows with the row (causal attention's query tiles), a long tile
  and its complement in consecutive rounds, so that every block does the same work every two rounds.
- `head_sections_order`: sections of a few columns (heads) at a time, the last rows first.
"""
from __future__ import annotations

from ..frontend.control import let
from ..ir.expr import Const, call


def grouped_order(index, row_tiles, col_tiles, group: int, per_group=None) -> tuple:
    """(row, col) of task `index` walking `group` rows of tiles at a time, column by column, so the blocks running
    together share A row panels and B column panels in L2 (ints or traced expressions alike). Traced values are
    named constants (tk.let), each computed once; `per_group`: the tasks of a group, group * col_tiles, where the
    caller made it already."""
    per_group = group * col_tiles if per_group is None else per_group
    first_row = _named(index // per_group * group, "group_row")
    rows_here = _named(call("min", row_tiles - first_row, group), "group_rows")
    within = _named(index % per_group, "in_group")
    return first_row + within % rows_here, within // rows_here


def _named(value, name: str):
    """`value` bound to a name (tk.let) where it is a runtime value; a number as it is."""
    return value if isinstance(value, (int, Const)) else let(value, name)


class Grouped:
    """One task per output tile, `group` rows of tiles at a time (see the module docstring)."""

    splits_k = False

    def __init__(self, group: int = 8, snake: bool = False):
        if not (isinstance(group, int) and group >= 1):
            raise ValueError(f"group must be a positive int, got {group!r}")
        if snake not in (True, False):
            raise ValueError(f"snake must be True or False, got {snake!r}")
        self.group, self.snake = group, snake

    def dealt(self, index, blocks, tasks):
        """The task a persistent block runs at loop index `index` (of `tasks`, `blocks` a round): the index itself,
        or with `snake` the index's mirror within its round in every odd round that is full (a last, partial
        round as it is: the mapping stays one to one)."""
        if not self.snake:
            return index
        rnd = _named(index // blocks, "task_round")
        mirrored = rnd % 2 * ((rnd + 1) * blocks <= tasks)          # 1 in a full odd round, else 0
        return _named(index + mirrored * ((2 * rnd + 1) * blocks - 1 - 2 * index), "dealt_task")

    def bind(self, row_tiles, col_tiles):
        """The kernel's order, index -> (row, col), its values fixed for the kernel made here (the template binds
        it at the kernel's top, before its roles branch: each role's task loop uses them)."""
        per_group = let(self.group * col_tiles, "group_tasks")
        return lambda index: grouped_order(index, row_tiles, col_tiles, self.group, per_group)

    def splits(self, g):
        """Tasks per tile: an int, or a runtime value of the kernel's parameters."""
        return 1

    def __repr__(self) -> str:
        return f"{type(self).__name__}(group={self.group}{', snake=True' if self.snake else ''})"


class SplitK(Grouped):
    """`splits` tasks per output tile, each over a share of its steps: `splits` is an int, or a function of
    the kernel's parameters `g` (e.g. `lambda g: g.W.depth`, the depth of a workspace of partial sums),
    evaluated on the host too to size the grid."""

    splits_k = True

    def __init__(self, splits, group: int = 8, snake: bool = False):
        super().__init__(group, snake)
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
        return f"SplitK({self._splits!r}, group={self.group}{', snake=True' if self.snake else ''})"


def causal_pairs_order(index, row_tiles: int, col_tiles: int, blocks: int):
    """(row tile, column) of task `index` for causal attention's tiles (rows: query tiles, columns: batch * heads),
    the persistent block `index % blocks` taking `index`, `index + blocks`, ... (ints or traced expressions
    alike). Below, R = row_tiles, G = blocks.

    A causal query tile r of R has about r + 1 key tiles, so tile r and tile R-1-r of one head together
    have about R + 1 whatever r: the tasks go in such pairs, the long one in one round and the short one in
    the next, each block taking both tiles of one pair. So every block does the same work in every two
    rounds and the blocks stay in step, which keeps the tasks in flight within one window of the pairs'
    order (head-major: G blocks work on about 2G / R heads, whose K and V stay in the L2). The round-robin
    snake over sections of heads that this replaced let the blocks drift apart (dozens of heads in flight,
    half the L2 reads missing at N4096; RESULTS.md run 91). With R odd, the middle tiles of heads 2k and 2k+1
    pair up after all the others (and the last one is alone when R * heads is odd); a last, partial pair of
    rounds takes its pairs' long tiles first."""
    rows, heads = row_tiles, col_tiles
    total = rows * heads
    half = rows // 2
    inner = heads * half                                 # pairs within a head (tiles r, rows-1-r), head-major
    pairs = (total + 1) // 2                             # then the middle pairs; the very last may be alone
    first = index // (2 * blocks) * blocks               # the first pair of this pair of rounds
    here = call("min", blocks, pairs - first)            # pairs in it (fewer in the last)
    j = index - 2 * first                                # slot in it: long tiles first, then short ones
    short = j >= here
    pair = first + j - short * here
    middle = pair >= inner
    per_head = call("max", 1, half)
    p = pair % per_head
    row = rows - 1 - p + short * (2 * p + 1 - rows)      # inner pair p: tiles rows-1-p (long), p (short)
    row = row + middle * (half - row)                    # middle pair k: tile rows // 2 of heads 2k and 2k+1
    col = pair // per_head
    col = col + middle * (2 * (pair - inner) + short - col)
    return row, col


def head_sections_order(index, row_tiles: int, col_tiles: int, heads: int):
    """(row tile, column) of task `index` in sections of `heads` columns (the last may have fewer), in each the last
    row tiles first, columns inner (ints or traced expressions alike): attention's non-causal order, where a
    column is a head and the blocks running together share a few heads' K and V in L2. Every division is
    by a value fixed for the kernel (heads, and the last section's, at least 1), which a kernel with fast_division
    makes once (codegen/divisors.py): a task switch's index math is then a few multiply-highs."""
    per_section = heads * row_tiles
    first_col = index // per_section * heads
    within = index % per_section
    last_heads = call("max", 1, col_tiles % heads)       # (the last section's, where it is partial)
    partial = first_col + heads > col_tiles
    row, col = within // heads, within % heads
    row = row + partial * (within // last_heads - row)
    col = col + partial * (within % last_heads - col)
    return row_tiles - 1 - row, first_col + col

