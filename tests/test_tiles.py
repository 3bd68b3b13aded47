"""Tile layout math against the PTX ISA's fragment tables and ThunderKittens' shared layouts (CPU only)."""
from __future__ import annotations

import numpy as np
import pytest

from tkpy.tiles import RT, RV, ST, GL, bf16, f32, fp16, layouts, swizzle


def ptx_a_fragment(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 A (16-bit): element a_i of a lane. groupID = lane>>2, threadID_in_group = lane%4."""
    g, t = lane >> 2, lane % 4
    row = g if i in (0, 1, 4, 5) else g + 8
    col = t * 2 + (i & 1) + (8 if i >= 4 else 0)
    return row, col


def ptx_b_fragment(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 B (16-bit): element b_i is (row=k, col=n)."""
    g, t = lane >> 2, lane % 4
    return t * 2 + (i & 1) + (8 if i >= 2 else 0), g


def ptx_c_fragment(lane: int, i: int) -> tuple[int, int]:
    """PTX ISA, mma.m16n8k16 C/D (fp32): element c_i."""
    g, t = lane >> 2, lane % 4
    return (g if i < 2 else g + 8), t * 2 + (i & 1)


def test_row_layout_is_the_mma_A_fragment():
    for lane in range(32):
        for reg in range(4):
            for half in range(2):
                assert layouts.row_layout_position(lane, reg, half) == ptx_a_fragment(lane, 2 * reg + half)


def test_col_layout_registers_0_2_and_1_3_are_the_mma_B_fragments_of_the_two_n_tiles():
    for lane in range(32):
        for half in range(2):
            for n_tile, regs in ((0, (0, 2)), (1, (1, 3))):
                for bi, reg in enumerate(regs):
                    k, n = ptx_b_fragment(lane, 2 * bi + half)
                    assert layouts.col_layout_position(lane, reg, half) == (k, n + 8 * n_tile)


def test_row_layout_registers_are_the_mma_C_fragments_of_the_two_n_tiles():
    for lane in range(32):
        for half in range(2):
            for n_tile, regs in ((0, (0, 1)), (1, (2, 3))):
                for ci, reg in enumerate(regs):
                    r, c = ptx_c_fragment(lane, 2 * ci + half)
                    assert layouts.row_layout_position(lane, reg, half) == (r, c + 8 * n_tile)


@pytest.mark.parametrize("layout", ["row", "col"])
def test_fragment_maps_cover_each_element_once(layout):
    lane, reg, half = np.meshgrid(np.arange(32), np.arange(4), np.arange(2), indexing="ij")
    r, c = layouts.fragment_position(layout, lane, reg, half)   # vectorised, as the interpreter uses them
    seen = np.zeros((16, 16), dtype=int)
    np.add.at(seen, (r.ravel(), c.ravel()), 1)
    assert (seen == 1).all()


@pytest.mark.parametrize("tile_layout,axis", [("row", "row"), ("row", "col"), ("col", "row"), ("col", "col")])
def test_reduction_vectors_hold_what_the_lane_holds_along_the_other_dim(tile_layout, axis):
    """A lane's vector values are exactly the rows (or cols) its tile fragment touches."""
    vlayout = layouts.reduction_vector_layout(tile_layout, axis)
    for lane in range(32):
        touched = {layouts.fragment_position(tile_layout, lane, reg, half)[0 if axis == "row" else 1]
                   for reg in range(4) for half in range(2)}
        held = {layouts.vector_index(vlayout, lane, k) for k in range(layouts.VECTOR_VALUES_PER_16[vlayout])}
        assert held == touched


def test_rt_types_and_vectors():
    t = RT(f32, 32, 64)
    assert (t.height, t.width, t.registers_per_lane) == (2, 4, 64)
    assert RT(bf16, 16, 16).registers_per_lane == 4
    assert t.col_vec() == RV(f32, 32, "ortho") and t.row_vec() == RV(f32, 64, "align")
    tc = RT(bf16, 32, 64, "col")
    assert tc.col_vec() == RV(bf16, 32, "align") and tc.row_vec() == RV(bf16, 64, "ortho")
    with pytest.raises(ValueError, match="multiple of 16"):
        RT(f32, 24, 16)
    with pytest.raises(ValueError, match="layout"):
        RT(f32, 16, 16, "diag")


@pytest.mark.parametrize("dtype,cols,expected", [(bf16, 64, 128), (bf16, 128, 128), (bf16, 32, 64), (bf16, 16, 32),
                                                 (f32, 32, 128), (f32, 16, 64), (fp16, 48, 32), (f32, 48, 64)])
def test_swizzle_is_chosen_from_the_row_width(dtype, cols, expected):
    assert ST(dtype, 16, cols).swizzle == expected


def test_swizzle_override_and_errors():
    assert ST(bf16, 16, 64, swizzle=0).swizzle == 0
    with pytest.raises(ValueError, match="multiple of 128 bytes"):
        ST(bf16, 16, 16, swizzle=128)


@pytest.mark.parametrize("swz", [32, 64, 128])
def test_swizzle_matches_cute_Swizzle_b_4_3(swz):
    """CuTe's Swizzle<B,4,3> (what TMA's SWIZZLE_{32,64,128}B do): XOR bits [4, 4+B) with bits [7, 7+B)."""
    bits = {32: 1, 64: 2, 128: 3}[swz]
    rows, cols = 16, swz // 2               # one bf16 panel
    s = ST(bf16, rows, cols, swizzle=swz)
    for r in range(rows):
        for c in range(cols):
            linear = (r * cols + c) * 2
            mask = ((1 << bits) - 1) << 4
            expected = linear ^ ((linear >> 3) & mask)
            assert s.byte_offset(r, c) == expected


@pytest.mark.parametrize("dtype,cols,swz", [(bf16, 64, 128), (bf16, 256, 128), (f32, 64, 64), (bf16, 16, 32),
                                            (bf16, 48, 0)])
def test_shared_layout_is_a_permutation_in_16_byte_chunks(dtype, cols, swz):
    s = ST(dtype, 64, cols, swizzle=swz)
    r, c = np.meshgrid(np.arange(64), np.arange(cols), indexing="ij")
    offs = s.byte_offset(r, c)
    assert sorted(offs.ravel().tolist()) == list(range(0, s.nbytes, dtype.nbytes))
    per_chunk = 16 // dtype.nbytes        # 16-byte chunks stay contiguous: ldmatrix rows and vector copies
    chunk_starts = offs[:, ::per_chunk]
    for k in range(per_chunk):
        assert (offs[:, k::per_chunk] == chunk_starts + k * dtype.nbytes).all()


@pytest.mark.parametrize("swz,cols", [(32, 16), (64, 32), (128, 64), (128, 128), (64, 96)])
def test_swizzle_makes_ldmatrix_phases_bank_conflict_free(swz, cols):
    """The 8 row addresses of one 8x8 ldmatrix phase land in 8 distinct 16-byte bank groups."""
    s = ST(bf16, 64, cols, swizzle=swz)
    for row0 in range(0, 64, 8):
        for col in range(0, cols, 8):
            groups = {(s.byte_offset(row0 + r, col) % 128) // 16 for r in range(8)}
            assert len(groups) == 8


def test_unswizzled_wide_rows_do_conflict():
    s = ST(bf16, 64, 64, swizzle=0)
    assert len({(s.byte_offset(r, 0) % 128) // 16 for r in range(8)}) == 1


def test_gl_dims_right_aligned():
    g = GL(bf16, ("M", 64))
    assert g.dims == (1, 1, "M", 64) and g.rank == 2 and g.dynamic_dims == ("M",)
    assert str(g) == "gl<bf16, M, 64>"
    with pytest.raises(ValueError):
        GL(bf16, (1, 2, 3, 4, 5, 6))   # 5 dims are allowed (outer, batch, depth, rows, cols)
    with pytest.raises(ValueError):
        GL(bf16, ("not an identifier",))


def test_tensor_map_geometry_is_4d_innermost_first():
    from tkpy.runtime.tensor_map import geometry
    g = geometry((100, 72), (72, 1), 2, ST(bf16, 64, 64))
    assert g.dims == (72, 100, 1, 1) and g.box == (64, 64, 1, 1)
    assert g.strides == (144, 144 * 100, 144 * 100)
    g3 = geometry((3, 64, 256), (64 * 512, 512, 1), 2, ST(bf16, 64, 256))   # strided rows, 4 panels of 64
    assert g3.dims == (256, 64, 3, 1) and g3.strides == (1024, 64 * 1024, 3 * 64 * 1024) and g3.box == (64, 64, 1, 1)


def test_tensor_map_l2_promotion_is_the_box_row():
    """L2 promotion fetches what one row of the box reads (a swizzle panel), not the neighbouring panel too."""
    from tkpy.runtime.tensor_map import geometry, l2_promotion
    box_bytes = [geometry((256, 256), (256, 1), 2, tile).box[0] * 2
                 for tile in (ST(bf16, 64, 128), ST(bf16, 64, 32), ST(bf16, 64, 16))]
    assert box_bytes == [128, 64, 32]           # 128-, 64- and 32-byte swizzle panels
    assert [l2_promotion(b) for b in box_bytes] == ["CU_TENSOR_MAP_L2_PROMOTION_L2_128B",
                                                    "CU_TENSOR_MAP_L2_PROMOTION_L2_64B",
                                                    "CU_TENSOR_MAP_L2_PROMOTION_NONE"]
    assert l2_promotion(512) == "CU_TENSOR_MAP_L2_PROMOTION_L2_256B"


def test_tensor_map_geometry_of_5d_tensors_is_5d():
    from tkpy.runtime.tensor_map import geometry
    shape = (2, 3, 4, 64, 128)
    strides = (3 * 4 * 64 * 128, 4 * 64 * 128, 64 * 128, 128, 1)
    g = geometry(shape, strides, 2, ST(bf16, 64, 128))
    assert g.dims == (128, 64, 4, 3, 2) and g.box == (64, 64, 1, 1, 1)
    assert g.strides == tuple(2 * s for s in reversed(strides[:-1]))
    g1 = geometry((5, 1, 1, 16, 64), (2 * 16 * 64, 16 * 64, 16 * 64, 64, 1), 4, ST(f32, 16, 64))  # size-1 dims
    assert g1.dims == (64, 16, 1, 1, 5) and g1.strides == (256, 256 * 16, 256 * 16, 2 * 16 * 64 * 4)
    with pytest.raises(ValueError, match="1 to 5 dims"):
        geometry((1,) * 6, (1,) * 6, 2, ST(bf16, 16, 16))


def test_gl_takes_up_to_5_dims_right_aligned():
    g5 = GL(bf16, (2, "B", 4, 64, 64))
    assert g5.rank == 5 and g5.outer == 2 and g5.dims == ("B", 4, 64, 64) and g5.shown == (2, "B", 4, 64, 64)
    assert g5.dynamic_dims == ("B",) and str(g5) == "gl<bf16, 2, B, 4, 64, 64>"
    g2 = GL(bf16, (64, "C"))
    assert g2.outer == 1 and g2.dims == (1, 1, 64, "C") and g2.shown == (64, "C")
    with pytest.raises(ValueError, match="1 to 5 dims"):
        GL(bf16, (1, 2, 3, 4, 5, 6))


def test_tensor_map_strides_of_size_1_dims_stay_multiples_of_16_bytes():
    """A single row narrower than 16 bytes (matmul of M = 1, K = 1: found by tests/test_randomized.py on the H200,
    where the driver refused a 2-byte stride): the stride of each size-1 dim is any valid one, a multiple of 16."""
    from tkpy.runtime.tensor_map import geometry
    g = geometry((1, 1), (8, 1), 2, ST(bf16, 64, 64))
    assert g.dims == (1, 1, 1, 1) and all(s % 16 == 0 for s in g.strides)
    g = geometry((1, 5), (8, 1), 4, ST(f32, 64, 32))
    assert all(s % 16 == 0 for s in g.strides)
