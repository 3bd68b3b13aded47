"""Barriers between the threads of a block or a warp, and timeline marks."""
from __future__ import annotations

from ._checks import emit, fail


def sync():
    """Block-wide barrier (__syncthreads): orders shared-memory accesses across all warps."""
    return emit("sync", scope="block")


def warp_sync():
    """Warp barrier (__syncwarp): orders shared-memory accesses among the lanes of a warp."""
    return emit("sync", scope="warp")


def mark(label: str):
    """A timeline point: with TKPY_TIMELINE=1 (tkpy/runtime/timeline.py) lane 0 of each warp records the SM's
    cycle counter and `label` here; otherwise nothing is generated. Up to 256 labels per kernel."""
    if not isinstance(label, str) or not label or len(label) > 64 or "\n" in label:
        fail(f"mark: the label is a short one-line string, got {label!r}")
    return emit("mark", label=label)
