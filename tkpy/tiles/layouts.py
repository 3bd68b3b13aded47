"""Register fragment maps: which lane and register hold which element of a tile.

Each map is written once, as an integer expression that means the same thing in
Python (on ints or numpy arrays) and in C++ (`>>`, `&`, `*`, `+` on non-negative
ints). The code generator pastes the expressions into the C++ prelude and the
interpreter evaluates them, so both read one source of truth.

A register tile is a grid of 16x16 *base tiles*. In each base tile a lane holds
four registers, each a packed pair of consecutive elements (``half`` 0 and 1),
so eight elements per lane. In the **row layout** this is exactly the A operand
(and, for two adjacent n8 tiles, the C/D accumulator) of ``mma.m16n8k16``
(PTX ISA, "Matrix Fragments for mma.m16n8k16"): lane = 4*groupID + threadID_in_group,

    reg 0: row g,   cols 2t, 2t+1        reg 2: row g,   cols 2t+8, 2t+9
    reg 1: row g+8, cols 2t, 2t+1        reg 3: row g+8, cols 2t+8, 2t+9

The **col layout** is its transpose: register `reg` of lane `lane` holds the
element at (col, row) of the row-layout position. A 16x16 K x N tile in col
layout is two B operands of ``mma.m16n8k16``: regs {0, 2} for n-tile 0 and
{1, 3} for n-tile 1.
"""
from __future__ import annotations

BASE_ROWS = 16
BASE_COLS = 16
REGS_PER_BASE = 4      # packed pairs per lane per base tile
ELEMS_PER_BASE = 8     # elements per lane per base tile
WARP_SIZE = 32

# Row layout, position of (lane, reg, half) inside a 16x16 base tile.
ROW_LAYOUT_ROW = "(lane >> 2) + 8 * (reg & 1)"
ROW_LAYOUT_COL = "2 * (lane & 3) + 8 * (reg >> 1) + half"

# Vector layouts. A vector holds one value per row (col_vec) or per column
# (row_vec) of a tile; how lanes share it depends on the tile's layout:
#   ortho: per 16 elements a lane holds 2 values, idx = (lane >> 2) + 8 * k, k in {0, 1}
#          (the rows of a row-layout tile, the columns of a col-layout tile)
#   align: per 16 elements a lane holds 4 values, idx = 2 * (lane & 3) + 8 * (k >> 1) + (k & 1)
#          (the columns of a row-layout tile, the rows of a col-layout tile)
#   naive: one value per lane per 32 elements, idx = lane + 32 * k (for memory and scalars)
#   contig: 8 consecutive values per lane per 256 elements, idx = 8 * lane + k: a lane's 8 values are one
#           16-byte copy of 16-bit elements (two of fp32), a warp's chunk 512 contiguous bytes (rows of memory-bound
#           kernels: norms, softmax over wide rows); no tile reduces to it or broadcasts it
ORTHO_INDEX = "(lane >> 2) + 8 * k"
ALIGN_INDEX = "2 * (lane & 3) + 8 * (k >> 1) + (k & 1)"
NAIVE_INDEX = "lane + 32 * k"
CONTIG_INDEX = "8 * lane + k"
VECTOR_VALUES_PER_16 = {"ortho": 2, "align": 4}
# Per layout: (elements per chunk, values a lane holds per chunk, the lane bits across which the values differ (a
# value is repeated in the lanes that differ only in the other bits), the index expression).
VECTOR_LAYOUTS = {
    "ortho": (16, 2, 0b11100, ORTHO_INDEX),
    "align": (16, 4, 0b00011, ALIGN_INDEX),
    "naive": (32, 1, 0b11111, NAIVE_INDEX),
    "contig": (256, 8, 0b11111, CONTIG_INDEX),
}

# A lane's own numbering of the elements it holds (what per-element choices such as tk.exp2's emulated
# share go by): element `half` of register `reg` of base tile (i, j) of a tile `width` base tiles wide;
# value k of chunk c of a vector holding `per_chunk` values per chunk.
TILE_ELEMENT = "((i * width + j) * 4 + reg) * 2 + half"
VECTOR_ELEMENT = "c * per_chunk + k"


def _eval(expr: str, **env):
    return eval(expr, {"__builtins__": {}}, env)  # the expressions above are trusted constants


def row_layout_position(lane, reg, half):
    """(row, col) in a 16x16 base tile held by lane/reg/half in the row layout (ints or numpy arrays)."""
    return _eval(ROW_LAYOUT_ROW, lane=lane, reg=reg), _eval(ROW_LAYOUT_COL, lane=lane, reg=reg, half=half)


def col_layout_position(lane, reg, half):
    """(row, col) in a 16x16 base tile held by lane/reg/half in the col layout: the transpose of the row layout."""
    r, c = row_layout_position(lane, reg, half)
    return c, r


def fragment_position(layout: str, lane, reg, half):
    if layout == "row":
        return row_layout_position(lane, reg, half)
    if layout == "col":
        return col_layout_position(lane, reg, half)
    raise ValueError(f"unknown register tile layout {layout!r}")


def vector_index(layout: str, lane, k):
    """Element index (within its chunk: 16 elements, 32 for naive, 256 for contig) of a lane's k-th value."""
    return _eval(VECTOR_LAYOUTS[layout][3], lane=lane, k=k)


def vector_chunk(layout: str) -> int:
    """Elements per chunk of a vector layout."""
    return VECTOR_LAYOUTS[layout][0]


def vector_values_per_chunk(layout: str) -> int:
    """Values each lane holds per chunk of a vector layout."""
    return VECTOR_LAYOUTS[layout][1]


def vector_lane_bits(layout: str) -> int:
    """The lane bits across which a vector layout's values differ: a reduction over the vector combines the lanes
    across these bits (shuffles with these xor masks); lanes differing only in the others hold copies."""
    return VECTOR_LAYOUTS[layout][2]


def tile_element_numbers(layout: str, rows: int, cols: int):
    """The TILE_ELEMENT number of each element of a rows x cols register tile (a numpy int array)."""
    import numpy as np

    lane, reg, half = np.meshgrid(np.arange(WARP_SIZE), np.arange(REGS_PER_BASE), np.arange(2), indexing="ij")
    r, c = fragment_position(layout, lane, reg, half)
    width = cols // BASE_COLS
    numbers = np.empty((rows, cols), np.int64)
    for i in range(rows // BASE_ROWS):
        for j in range(width):
            numbers[i * BASE_ROWS + r, j * BASE_COLS + c] = _eval(TILE_ELEMENT, i=i, j=j, width=width, reg=reg,
                                                                  half=half)
    return numbers


def vector_element_numbers(layout: str, length: int):
    """The VECTOR_ELEMENT number of each element of a register vector (a numpy int array)."""
    import numpy as np

    chunk, per_chunk = vector_chunk(layout), vector_values_per_chunk(layout)
    lane, k = np.meshgrid(np.arange(WARP_SIZE), np.arange(per_chunk), indexing="ij")
    numbers = np.empty(length, np.int64)
    for c in range(length // chunk):
        numbers[c * chunk + vector_index(layout, lane, k)] = _eval(VECTOR_ELEMENT, c=c, per_chunk=per_chunk, k=k)
    return numbers


def reduction_vector_layout(tile_layout: str, axis: str) -> str:
    """Layout of the vector a row reduction (axis='row': one value per row) or column
    reduction (axis='col') of a tile in `tile_layout` produces and broadcasts consume."""
    per_row = (tile_layout == "row") == (axis == "row")
    return "ortho" if per_row else "align"
