"""The device side of kernel timelines (tk.mark; tkpy/runtime/timeline.py reads them back): the record buffer, the
macro a mark expands to, and which label each mark records.

A record is clock64 << 8 | mark, by lane 0 of each warp of the first BLOCKS blocks, into a ring of RECORDS per warp
in the __device__ array BUFFER of the kernel's module.
"""
from __future__ import annotations

from ..errors import UnsupportedError
from ..ir.core import Op, walk

BLOCKS = 8             # blocks that record (blockIdx.x < BLOCKS)
RECORDS = 4096         # records per warp (a ring: the last RECORDS remain)
BUFFER = "tkpy_timeline"
MAX_LABELS = 256       # a record is clock64 << 8 | mark


def cpp(warps: int) -> str:
    """The record buffer and the macro a mark expands to (the per-thread count is declared in the kernel)."""
    return (f"// ---- timeline (TKPY_TIMELINE=1, tkpy/runtime/timeline.py): lane 0 of each warp of blocks < {BLOCKS}"
            f" records (clock64 << 8 | mark) ----\n"
            f"__device__ unsigned long long {BUFFER}[{BLOCKS * warps * RECORDS}];\n"
            f"#define TKPY_MARK(id) do {{ if (tkpy_marks_on) {BUFFER}[tkpy_marks_base + tkpy_marks++ % {RECORDS}] = "
            f"((unsigned long long)clock64() << 8) | (id); }} while (0)\n")


def kernel_state(warps: int) -> list[str]:
    """The per-thread declarations at the top of a recording kernel."""
    return ["unsigned tkpy_marks = 0;  // the timeline's records so far (lane 0 of each warp)",
            f"const bool tkpy_marks_on = threadIdx.x % 32 == 0 && blockIdx.x < {BLOCKS};",
            f"const unsigned tkpy_marks_base = (blockIdx.x * {warps} + threadIdx.x / 32) * {RECORDS};"]


def labels_of(kernel_ir) -> list[str]:
    """The kernel's mark labels in order of first appearance: mark i records id i."""
    labels: list[str] = []
    for s in walk(kernel_ir.body):
        if isinstance(s, Op) and s.name == "mark" and s.attrs["label"] not in labels:
            labels.append(s.attrs["label"])
            if len(labels) > MAX_LABELS:
                raise UnsupportedError(f"a timeline records at most {MAX_LABELS} distinct mark labels per kernel (a "
                                       f"record keeps the mark in 8 bits); {kernel_ir.name} has more", s.loc)
    return labels
