"""tkpy/tiles/exp2_emulation.py, the software exp2 of tk.exp2(x, emulated=...), on the CPU: its accuracy over the
whole range, its special values, and which elements take it. (The GPU twin: tests/test_gpu_ops_extra.py.)"""
from __future__ import annotations

import numpy as np

from tkpy.tiles import exp2_emulation as emu
from tkpy.tiles.layouts import tile_element_numbers, vector_element_numbers


def test_relative_error_over_the_normal_range():
    x = np.linspace(-126.0, 127.0, 2_000_003, dtype=np.float32)
    got = emu.exp2_poly(x).astype(np.float64)
    assert np.abs(got / np.exp2(x.astype(np.float64)) - 1).max() < emu.MAX_RELATIVE_ERROR


def test_integers_are_exact_and_the_ends_saturate_as_mufu_does():
    ints = np.arange(-126, 128, dtype=np.float32)
    assert (emu.exp2_poly(ints) == np.exp2(ints.astype(np.float64))).all()      # (float32 np.exp2(127) is not)
    special = emu.exp2_poly(np.array([-np.inf, -200.0, -127.0, 128.0, 500.0, np.inf], np.float32))
    assert special.tolist() == [0.0, 0.0, 0.0, np.inf, np.inf, np.inf]
    assert np.isnan(emu.exp2_poly(np.array([np.nan], np.float32))).all()


def test_emulated_elements_are_n_of_every_8_spread_evenly():
    e = np.arange(64)
    for n in range(9):
        mask = emu.emulated_mask(e, n)
        assert mask.sum() == 8 * n and all(mask[i:i + 8].sum() == n for i in range(0, 64, 8))
    assert np.flatnonzero(emu.emulated_mask(np.arange(8), 2)).tolist() == [3, 7]


def test_lane_element_numbers_cover_each_lanes_elements_once():
    """Per lane, the tile numbering is 0..(elements per lane - 1), each once: the emulated share is exact per lane."""
    for layout in ("row", "col"):
        numbers = tile_element_numbers(layout, 32, 48)
        assert sorted(np.bincount(numbers.ravel())) == [32] * (32 * 48 // 32)
    for layout, per_lane in (("ortho", 2), ("align", 4), ("naive", 1)):
        numbers = vector_element_numbers(layout, 64)
        assert numbers.max() == 64 // (32 if layout == "naive" else 16) * per_lane - 1
