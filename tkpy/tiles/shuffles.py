"""Warp shuffles that move register data between layouts, as expressions shared with C++.

Like the fragment maps in layouts.py, each expression means the same in Python
(on ints or numpy arrays) and in C++; the prelude pastes them in and the CPU
tests run them through a simulated `__shfl_sync`.

**Vector layout conversions** (`tk.copy` between ortho, align and naive vectors)
take one shuffle per destination value. Value `k` of destination chunk `c`
(16 elements, 32 for naive) is read from lane `src_lane`. Every source lane sends
its value number `send_base + send_offset` of its own flat array (chunk *
values-per-chunk + value). A source value is held by several lanes (4 for ortho,
8 for align); the reader picks the replica whose lane bits encode which value it
needs, so the sent value depends only on the sender (`send_offset` spans
`span` values, picked with selects rather than a register-indexed load).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class VectorShuffle:
    src_lane: str     # f(lane, c, k): the lane a reader takes its value k of chunk c from
    send_base: str    # f(c, k): compile-time start of the values a sender picks from
    send_offset: str  # f(lane): which of the `span` values this sender sends
    span: int


# (destination layout, source layout) -> shuffle; see the module docstring.
VECTOR_SHUFFLES = {
    ("align", "ortho"): VectorShuffle("4 * (2 * (lane & 3) + (k & 1))", "2 * c + (k >> 1)", "0", 1),
    ("ortho", "align"): VectorShuffle("4 * ((lane >> 2) & 1) + (lane >> 3)", "4 * c + 2 * k", "(lane >> 2) & 1", 2),
    ("ortho", "naive"): VectorShuffle("16 * (c & 1) + 8 * k + (lane >> 2)", "c >> 1", "0", 1),
    ("align", "naive"): VectorShuffle("16 * (c & 1) + 8 * (k >> 1) + 2 * (lane & 3) + (k & 1)", "c >> 1", "0", 1),
    ("naive", "ortho"): VectorShuffle("4 * (lane & 7) + (lane >> 3)", "4 * c", "lane & 3", 4),
    ("naive", "align"): VectorShuffle("(lane & 24) + 4 * (lane & 1) + ((lane >> 1) & 3)", "8 * c", "(lane >> 2) & 7", 8),
}

# Which lane of those holding the same vector values stores them: ortho values repeat across lane
# bits 0-1, align values across bits 2-4, naive and contig values do not repeat.
VECTOR_OWNER = {"ortho": "(lane & 3) == 0", "align": "(lane >> 2) == 0", "naive": "lane < 32", "contig": "lane < 32"}

# Transposing the 8x8 block that one fp32 register pair of a fragment holds (swap_layout and
# transpose of f32 tiles; 16-bit tiles use movmatrix). Lane (g, t) = (lane >> 2, lane & 3) holds
# M[g][2t], M[g][2t+1] and wants M[2t][g], M[2t+1][g]: rows 2t and 2t+1 live in lanes 8t + g/2 and
# 8t + 4 + g/2, element g & 1. Each lane sends .x or .y by its own row parity, so that two shuffles
# serve both readers of every lane: the first reads from TRANSPOSE8_LANE_A, the second from
# TRANSPOSE8_LANE_B; lanes of odd g send (.y, .x) instead of (.x, .y) and swap what they receive.
TRANSPOSE8_ODD = "(lane >> 2) & 1"
TRANSPOSE8_LANE_A = "8 * (lane & 3) + (lane >> 3) + 4 * ((lane >> 2) & 1)"
TRANSPOSE8_LANE_B = "8 * (lane & 3) + (lane >> 3) + 4 * (1 - ((lane >> 2) & 1))"


def _eval(expr: str, **env):
    return eval(expr, {"__builtins__": {}}, env)  # the expressions above are trusted constants


def vector_shuffle_source(dst_layout: str, src_layout: str, lane, c, k):
    """(source lane, flat index of the sent value in that lane's array) for a reader's value k of chunk c."""
    s = VECTOR_SHUFFLES[(dst_layout, src_layout)]
    src = _eval(s.src_lane, lane=lane, c=c, k=k)
    return src, _eval(s.send_base, c=c, k=k) + _eval(s.send_offset, lane=src)


def transpose8_sources(lane):
    """((lane, component) of the first shuffle, (lane, component) of the second) for a reader, before its swap."""
    def sent(src, second):
        odd = _eval(TRANSPOSE8_ODD, lane=src)
        return odd ^ second  # component: .x (0) or .y (1)
    a = _eval(TRANSPOSE8_LANE_A, lane=lane)
    b = _eval(TRANSPOSE8_LANE_B, lane=lane)
    return (a, sent(a, 0)), (b, sent(b, 1))
