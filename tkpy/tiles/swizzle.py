"""Shared-memory tile layouts: 32/64/128-byte swizzles, as ThunderKittens and the TMA unit use them.

A shared tile of `cols` elements per row is stored as column *panels*, each
`swizzle_bytes` wide (so a panel row is one swizzle row), rows contiguous inside
a panel. Inside a panel the 16-byte chunk index of each byte address is XORed
with address bits 7 and up (`Swizzle<b,4,3>` in CuTe terms), which is what TMA's
CU_TENSOR_MAP_SWIZZLE_{32,64,128}B and wgmma's descriptors expect when the tile
base is 1024-byte aligned. With no swizzle a tile is one plain row-major panel.

`SWIZZLE_EXPR` is written to mean the same in Python and C++.
"""
from __future__ import annotations

SWIZZLE_MODES = (0, 32, 64, 128)
SWIZZLE_ALIGNMENT = 1024  # bytes: a swizzle atom is 8 rows x 128 B at most

SWIZZLE_EXPR = "byte ^ (((byte % (swizzle * 8)) >> 7) << 4)"


def choose_swizzle(cols: int, elem_bytes: int) -> int:
    """The widest swizzle whose row width divides the tile's row, as ThunderKittens picks it."""
    row_bytes = cols * elem_bytes
    for mode in (128, 64, 32):
        if row_bytes % mode == 0:
            return mode
    return 0


def panel_cols(cols: int, elem_bytes: int, swizzle: int) -> int:
    return swizzle // elem_bytes if swizzle else cols


def byte_offset(row, col, *, rows: int, cols: int, elem_bytes: int, swizzle: int):
    """Byte offset of element (row, col) from the tile base (ints or numpy int arrays)."""
    pc = panel_cols(cols, elem_bytes, swizzle)
    panel, pcol = col // pc, col % pc
    byte = (panel * rows * pc + row * pc + pcol) * elem_bytes
    if swizzle:
        byte = eval(SWIZZLE_EXPR, {"__builtins__": {}}, {"byte": byte, "swizzle": swizzle})
    return byte
