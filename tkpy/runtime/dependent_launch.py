"""Programmatic dependent launch (Hopper): kernels on one stream overlap their boundaries.

Launched with the driver's programmatic-stream-serialization attribute, a kernel may begin before the
previous kernel on its stream has finished: its blocks start as soon as every block of the previous one
has signalled (`griddepcontrol.launch_dependents`) and an SM has room, and they wait
(`griddepcontrol.wait`) until the previous kernel has completed and its writes are visible before they
touch global memory. tkpy kernels signal and wait right after their own set-up (shared memory carve-out,
tensor-map prefetch), so the launch latency and that set-up of kernel i+1 overlap the tail of kernel i;
what the kernels compute is unchanged. Kernels are generated and launched with it unless
``TKPY_DEPENDENT_LAUNCH=0`` (read when a kernel is traced; both the code and the launch follow that trace).
"""
from __future__ import annotations

import os

ENV = "TKPY_DEPENDENT_LAUNCH"


def enabled() -> bool:
    """False when ``TKPY_DEPENDENT_LAUNCH`` is 0/false/no/off."""
    return os.environ.get(ENV, "1").strip().lower() not in ("0", "false", "no", "off")
