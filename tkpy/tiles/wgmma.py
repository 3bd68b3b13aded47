"""wgmma shared-memory matrix descriptors, as data: what the prelude's `tk::descriptor` encodes per
instruction, and how the hardware reads a tile through one (PTX ISA, "Asynchronous Warpgroup Level
Matrix Shared Memory Layout": the matrix descriptor and the canonical swizzled layouts).

One wgmma instruction reads K = 32 bytes of each row of a K-major operand, whatever the element
type: 16 bf16/fp16 elements (m64nNk16) or 32 fp8 elements (m64nNk32). In the canonical K-major
swizzled layout (CUTLASS: Swizzle<b,4,3> o ((8,m),(T,2)):((W/16 T,SBO),(1,T)) in 16-byte units T)
row r, byte kb < 32 of an instruction's K slice sits at

    swizzle(start + (r % 8) * W + (r // 8) * SBO + kb)

with W the swizzle width in bytes (32/64/128) and the swizzle the XOR of address bits 7.. into
bits 4.. (tkpy/tiles/swizzle.py), applied to the absolute shared address (tiles are 1024-byte
aligned). The leading byte offset is unused by swizzled K-major layouts (set to 16, encoded 1).
An MN-major operand (only 16-bit types: PTX transposes .f16/.bf16 only) is
((T,W/16,m),(8,k)):((1,T,LBO),(W/16 T,SBO)): W bytes of M/N contiguous, the next W bytes LBO
further, 8 K rows W apart, the next 8 K rows SBO further; an instruction reads 16 K rows.

tkpy's shared tiles store column panels W bytes wide, rows contiguous inside a panel, so for
both majors SBO = 8 * W (8 rows of a panel), LBO = rows * W (one panel) for MN-major, and the
start address of instruction step k moves by 32 bytes inside a panel (K-major) or by 16 rows
(MN-major). `descriptor` computes these; tests check `address` against `ST.byte_offset` for every
element an instruction reads.
"""
from __future__ import annotations

from dataclasses import dataclass

from . import swizzle as swz
from .types import ST

K_BYTES = 32                          # bytes of K per wgmma instruction in a K-major row
MODE = {128: 1, 64: 2, 32: 3}         # the descriptor's swizzle field (bits 62-63)


def k_per_instruction(dtype) -> int:
    """K of one wgmma instruction: 16 for bf16/fp16, 32 for fp8."""
    return K_BYTES // dtype.nbytes


@dataclass(frozen=True)
class Descriptor:
    """The fields of one instruction's descriptor, in bytes; `start` is relative to the tile base."""

    start: int
    leading: int      # LBO
    stride: int       # SBO
    swizzle: int      # W: 32, 64 or 128

    def encode(self, base: int) -> int:
        """The 64-bit descriptor for a tile at shared address `base` (fields >> 4, 14 bits each)."""
        def enc(x):
            return (x & 0x3FFFF) >> 4
        return enc(base + self.start) | enc(self.leading) << 16 | enc(self.stride) << 32 | MODE[self.swizzle] << 62


def descriptor(tile: ST, step: int, mn_major: bool) -> Descriptor:
    """The descriptor of instruction `step` (0, 1, ... along K) over shared tile `tile`, as the prelude's
    tk::descriptor<S, MN_MAJOR>(s, step) builds it."""
    w = tile.swizzle
    if w not in MODE:
        raise ValueError(f"wgmma reads swizzled tiles; {tile} is not")
    panel_bytes = tile.rows * w
    if mn_major:
        return Descriptor(step * 16 * w, panel_bytes, 8 * w, w)
    per_panel = w // K_BYTES
    return Descriptor((step % per_panel) * K_BYTES + (step // per_panel) * panel_bytes, 16, 8 * w, w)


def address(d: Descriptor, base: int, mn: int, k: int, mn_major: bool) -> int:
    """The shared address the hardware reads for byte `k` of K (K-major: 0..31; MN-major: the K row,
    0..15) and byte `mn` of M/N (K-major: the row; MN-major: a byte offset along M/N) through `d`."""
    w = d.swizzle
    if mn_major:
        a = base + d.start + (mn % w) + (mn // w) * d.leading + (k % 8) * w + (k // 8) * d.stride
    else:
        a = base + d.start + (mn % 8) * w + (mn // 8) * d.stride + k
    return eval(swz.SWIZZLE_EXPR, {"__builtins__": {}}, {"byte": a, "swizzle": w})
