"""The task orders of tkpy/templates/schedule.py that attention's persistent blocks walk: on ints, each is a
permutation of the tiles with the structure its docstring promises (traced, the same expressions run on the GPU and
in the interpreter: tests/test_attention_cpu.py)."""
from __future__ import annotations

import pytest

from tkpy.templates import Grouped, causal_pairs_order, head_sections_order


@pytest.mark.parametrize("rows", [1, 3, 8, 32])
@pytest.mark.parametrize("cols", [1, 5, 8, 16, 19, 256])
@pytest.mark.parametrize("heads", [1, 2, 3, 8])
def test_head_sections_order(rows, cols, heads):
    """head_sections_order (attention's non-causal order) visits every (query tile, batch * head) once: sections of
    `heads` columns, the last partial, each taking its last query tiles first with the columns inner."""
    def value(x):
        return int(getattr(x, "value", x))
    tasks = [tuple(value(x) for x in head_sections_order(i, rows, cols, heads)) for i in range(rows * cols)]
    assert sorted(tasks) == [(r, c) for r in range(rows) for c in range(cols)]
    for i, (r, c) in enumerate(tasks):
        first = i // (heads * rows) * heads                     # the section's first column, and its width
        width = min(heads, cols - first)
        assert (r, c) == (rows - 1 - (i - first * rows) // width, first + (i - first * rows) % width)


def _causal_tasks(rows, heads, blocks):
    return [tuple(int(getattr(x, "value", x)) for x in causal_pairs_order(i, rows, heads, blocks))
            for i in range(rows * heads)]


@pytest.mark.parametrize("rows", [1, 2, 5, 8, 32])
@pytest.mark.parametrize("heads", [1, 2, 3, 16])
@pytest.mark.parametrize("blocks", [1, 3, 7, 132])
def test_causal_pairs_order_is_a_permutation_of_balanced_pairs(rows, heads, blocks):
    """causal_pairs_order visits every (query tile, head) once, and in every full pair of rounds each block takes two
    tiles of about rows + 1 key tiles together (r and rows-1-r of one head, or two middle tiles), long first;
    the heads of a pair of rounds lie within a window of about 2 * blocks / rows heads (+ 2)."""
    tasks = _causal_tasks(rows, heads, blocks)
    assert sorted(tasks) == [(r, c) for r in range(rows) for c in range(heads)]
    for start in range(0, len(tasks) - 2 * blocks + 1, 2 * blocks):
        window = tasks[start:start + 2 * blocks]
        for (long_row, long_col), (short_row, short_col) in zip(window[:blocks], window[blocks:]):
            assert long_row + short_row == rows - 1 or long_row == short_row == rows // 2
            assert long_row >= short_row and (long_col == short_col or long_row == rows // 2)
        cols = [c for _, c in window]
        if rows % 2 == 0 or min(r for r, _ in window[:blocks]) > rows // 2:   # not the middle pairs (at the end)
            assert max(cols) - min(cols) <= 2 * blocks // max(1, rows // 2) + 2


def test_causal_pairs_keep_blocks_in_step_on_few_heads():
    """The point of causal_pairs_order (RESULTS.md run 91): at B16 H16 N4096 D128 (32 query tiles a head, 132 blocks)
    every block's tasks add up to the same key tiles per pair of rounds, and each pair of rounds touches at most
    10 heads (the order it replaced had dozens in flight)."""
    rows, heads, blocks = 32, 256, 132
    tasks = _causal_tasks(rows, heads, blocks)
    work = [0] * blocks
    for i, (r, _) in enumerate(tasks):
        work[i % blocks] += r + 1
    assert max(work) - min(work) <= rows + 1
    for start in range(0, len(tasks), 2 * blocks):
        assert len({c for _, c in tasks[start:start + 2 * blocks]}) <= 10


@pytest.mark.parametrize("blocks,tasks", [(132, 2048), (132, 264), (132, 100), (5, 23), (4, 8), (3, 7)])
def test_the_snake_deals_every_task_once(blocks, tasks):
    """Grouped(snake=True).dealt over a persistent grid's loop indices (block b: b, b + blocks, ...): every task
    once, each full odd round reversed, a last partial round as it is."""
    dealt = [Grouped(snake=True).dealt(i, blocks, tasks) for i in range(tasks)]
    assert sorted(dealt) == list(range(tasks))
    full = tasks // blocks
    for i, t in enumerate(dealt):
        rnd = i // blocks
        assert t == (rnd * blocks + blocks - 1 - i % blocks if rnd % 2 and rnd < full else i)
    assert [Grouped().dealt(i, blocks, tasks) for i in range(tasks)] == list(range(tasks))
