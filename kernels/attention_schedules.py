"""The task orders of kernels/attention_kernel.py's persistent blocks: (query tile, batch * head) of task `index`,
in ints or traced expressions alike."""
from __future__ import annotations

from tkpy import call


def causal_task(index, row_tiles: int, col_tiles: int, blocks: int):
    """(query tile, batch * head) of causal task `index`, the persistent block `index % blocks` taking
    `index`, `index + blocks`, ... (ints or traced expressions alike). Below, R = row_tiles, G = blocks.

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


def section_task(index, row_tiles: int, col_tiles: int, heads: int):
    """(query tile, batch * head) of non-causal task `index` (ints or traced expressions alike): sections of
    `heads` columns (the last may have fewer), in each the last query tiles first, heads inner. Every division is
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

