"""Barriers between the threads of a block or a warp."""
from __future__ import annotations

from ._checks import emit


def sync():
    """Block-wide barrier (__syncthreads): orders shared-memory accesses across all warps."""
    return emit("sync", scope="block")


def warp_sync():
    """Warp barrier (__syncwarp): orders shared-memory accesses among the lanes of a warp."""
    return emit("sync", scope="warp")
