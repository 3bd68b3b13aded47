"""The rotary embedding's two ops: rotate_half (the partner of each element, signed) and load_rotary_table (a row of
angles' cos or sin spread over each head's columns), so that a rotation reads as Hugging Face's

    tk.load_rotary_table(cs, cos, pos, head_dim, fill=1.0)          # once a position: cos of each column
    tk.load_rotary_table(sn, sin, pos, head_dim)
    tk.load(x, q, (row, part))                                      # heads of head_dim elements
    tk.rotate_half(t, x, rotary_dim, head_dim)                      # t = cat(-x2, x1) per head, 0 past rotary_dim
    tk.map(x, lambda x, t, c, s: x * c + t * s, x, t, cs, sn)      # x' = x cos + rotate_half(x) sin

Both treat an operand as heads of `head_dim` elements from its first (a contig vector: along it; a row-layout tile:
along each row; a head that the end cuts short is read as if its missing elements were 0), of which the first
`rotary_dim` rotate in pairs: GPT-NeoX's halves (j, j + rotary_dim / 2), or with `interleaved` GPT-J's neighbours
(2i, 2i + 1).
"""
from __future__ import annotations

from ..ir.core import GlobalVar
from ..tiles.types import RV
from ._checks import describe, emit, fail, register_operand, register_vector, scalar
from .scalar_memory import element_coord


def rotate_half(dst, src, rotary_dim: int, head_dim: int | None = None, interleaved: bool = False):
    """dst = rotate_half(src) in each head of `head_dim` elements (default: the whole vector or row), as Hugging
    Face's `rotate_half`: cat(-x[r/2:r], x[:r/2]) over the head's first r = rotary_dim elements, and with
    `interleaved` GPT-J's `rotate_every_two`: (x[2i], x[2i + 1]) -> (-x[2i + 1], x[2i]); the head's elements past
    rotary_dim are zeroed (so `x * cos + rotate_half(x) * sin` passes them through where cos is 1). dtype converted;
    dst may be src.

    Contig vectors (`tk.rv(dtype, n, "contig")`): a lane's partners sit rotary_dim / 16 lanes away (lane shuffles of
    its packed 16-bit pairs or fp32 values; a head crossing a 256-element chunk, when head_dim does not divide 256,
    takes the neighbouring chunk's too); interleaved pairs are within a lane. Row-layout tiles: a permutation of each
    lane's registers, no shuffles."""
    d, s = register_operand(dst, "rotate_half destination"), register_operand(src, "rotate_half source")
    length = _head_operands(d, s, "rotate_half")
    head_dim = _sizes(rotary_dim, head_dim, length, interleaved, "rotate_half")
    if isinstance(d.type, RV) and not interleaved and rotary_dim > 512:
        fail(f"rotate_half: rotary_dim {rotary_dim} is over 512 for a contig vector (a partner more than a "
             "256-element chunk away)")
    return emit("rotate_half", d, s, rotary_dim=rotary_dim, head_dim=head_dim, interleaved=bool(interleaved))


def load_rotary_table(dst, table, coord, head_dim: int | None = None, interleaved: bool = False, fill=0.0):
    """dst = the row `coord` of `table` (a global tensor of rotary_dim / 2 angles' cos or sin a row, its columns
    static; coordinates element indices right-aligned to (batch, depth, row)) spread over each head of `head_dim`
    elements of the contig vector dst (default: the whole vector): head column j takes angle j % (rotary_dim / 2)
    (GPT-NeoX: cat(t, t), Hugging Face's tables), with `interleaved` angle j // 2 (GPT-J: each twice), and `fill`
    past rotary_dim (1.0 for cos, 0 for sin, so that the head's other elements pass through). dtype converted. A
    lane reads its 8 values as one or two 16-byte loads (interleaved: 4 values, one load of 8 or 16 bytes); when
    head_dim divides 256 every chunk of dst holds the same values, loaded once. The row must lie in the table (the
    interpreter and debug mode check it)."""
    d = register_vector(dst, "load_rotary_table destination")
    if d.type.layout != "contig":
        fail(f"load_rotary_table: {describe(d)} must be a contig vector (tk.rv(dtype, n, \"contig\")), whose lanes "
             "hold 8 consecutive elements")
    if not isinstance(table, GlobalVar):
        fail(f"load_rotary_table: the table must be a global tensor (a tk.gl parameter), got {describe(table)}")
    angles = table.type.dims[3]
    if not isinstance(angles, int):
        fail(f"load_rotary_table: {describe(table)} needs static columns (the rotary_dim / 2 angles, an int in its "
             "tk.gl annotation): they fix which angle each column takes")
    head_dim = _sizes(2 * angles, head_dim, d.type.length, interleaved, "load_rotary_table",
                      f" (twice {describe(table)}'s {angles} columns)")
    coord = tuple(coord) if isinstance(coord, (tuple, list)) else (coord,)
    if not 1 <= len(coord) <= 3:
        fail(f"load_rotary_table: coordinates take 1 to 3 element indices (batch, depth, row: the columns are the "
             f"angles), got {len(coord)}")
    b, dd, row, _ = element_coord((*coord, 0), table, "load_rotary_table")
    return emit("load_rotary_table", d, table, b, dd, row, scalar(fill, "load_rotary_table fill"),
                head_dim=head_dim, interleaved=bool(interleaved))


def _head_operands(d, s, what: str) -> int:
    """The length along which the heads lie (a vector's, a tile's columns), both operands checked alike."""
    if type(d.type) is not type(s.type):
        fail(f"{what}: {describe(d)} and {describe(s)} are not both tiles or both vectors")
    if isinstance(d.type, RV):
        if d.type.layout != "contig" or s.type.layout != "contig":
            fail(f"{what}: {describe(d)} <- {describe(s)}: vectors must be contig (tk.rv(dtype, n, \"contig\")); "
                 "a row's heads are copied from memory in that layout")
        if d.type.length != s.type.length:
            fail(f"{what}: lengths differ: {describe(d)} vs {describe(s)}")
        return d.type.length
    if d.type.layout != "row" or s.type.layout != "row":
        fail(f"{what}: {describe(d)} <- {describe(s)}: both must be row-layout tiles (a lane holds pieces of rows "
             "there); tk.swap_layout first")
    if (d.type.rows, d.type.cols) != (s.type.rows, s.type.cols):
        fail(f"{what}: shapes differ: {describe(d)} vs {describe(s)}")
    return d.type.cols


def _sizes(rotary_dim, head_dim, length: int, interleaved, what: str, whence: str = "") -> int:
    """head_dim (default: `length`), checked with rotary_dim: a lane's 8 consecutive elements (a contig vector's; a
    row-layout tile's 8-column blocks) must lie in one head, on one side of rotary_dim and (half-split) of its
    middle."""
    head_dim = length if head_dim is None else head_dim
    unit = 8 if interleaved else 16
    for name, value in (("rotary_dim", rotary_dim), ("head_dim", head_dim)):
        if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
            fail(f"{what}: {name} must be a positive int, got {value!r}")
    if head_dim % 8:
        fail(f"{what}: head_dim {head_dim} must be a multiple of 8 (a lane's 8 consecutive elements lie in one head)")
    if rotary_dim > head_dim or rotary_dim % unit:
        fail(f"{what}: rotary_dim {rotary_dim}{whence} must be a multiple of {unit} up to head_dim {head_dim} (a "
             f"lane's 8 elements lie on one side of {'it' if interleaved else 'it and of its middle'})")
    return head_dim
