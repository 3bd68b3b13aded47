"""Kernel timelines: where each warp spends its cycles, from `tk.mark("label")` points in a kernel.

With ``TKPY_TIMELINE=1`` (read when a kernel is traced) every `tk.mark` becomes a record, by lane 0 of each warp of
the first BLOCKS blocks, of the SM's cycle counter and the mark, into a ring of RECORDS per warp in a __device__
array of the kernel's module; without it a mark generates nothing. After a run, `records(kernel)` reads them
back and `phases(...)` turns them into the cycles from each mark to the next.

    TKPY_TIMELINE=1 python3 my_script.py       # the kernels traced in it record their marks
    t = tkpy.runtime.timeline.records(kernel)   # {(block, warp): [(cycle, label), ...]}
    print(tkpy.runtime.timeline.table(t))

A record costs the warp a clock read and a global store (about 90 cycles on an H200, RESULTS.md runs 74-76), and the
scheduler does not move instructions across it freely: read the phases as proportions, not exact costs. The device
side (the buffer, the macro a mark expands to, the labels' ids) is the code generator's: tkpy/codegen/timeline.py.
"""
from __future__ import annotations

import os
import statistics

from ..codegen.timeline import BLOCKS, BUFFER, MAX_LABELS, RECORDS, labels_of  # noqa: F401 - the format, here too

ENV = "TKPY_TIMELINE"


def enabled() -> bool:
    """True when ``TKPY_TIMELINE`` is 1/true/yes/on."""
    return os.environ.get(ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def _recording(kernel):
    """The (compiled specialization, loaded module) pairs of a kernel traced with the timeline on."""
    from . import launching

    found = []
    for compiled in kernel._compiled.values():
        if not compiled.lowered.traced.ir.timeline:
            continue
        for (key, _), loaded in list(launching._loaded.items()):
            if key == compiled.module.key:
                found.append((compiled, loaded))
    if not found:
        raise RuntimeError(f"kernel {kernel.name} has no loaded specialization traced with {ENV}=1: set it before "
                           f"the kernel is first traced (and launch it)")
    return found


def reset(kernel) -> None:
    """Zero the records of every loaded specialization of `kernel` (e.g. after warm-up launches)."""
    from . import driver

    d = driver._driver()
    for _, loaded in _recording(kernel):
        with driver.device_context(loaded.device_index):
            ptr, size = driver.check(d.cuModuleGetGlobal(loaded.module, BUFFER.encode()), "cuModuleGetGlobal")
            driver.check(d.cuMemsetD8(ptr, 0, size), "cuMemsetD8")


def records(kernel) -> dict:
    """{(block, warp): [(cycle, label), ...]} in time order, from the kernel's first loaded specialization traced
    with the timeline on (synchronizes the device)."""
    import numpy as np

    from . import driver

    compiled, loaded = _recording(kernel)[0]
    d = driver._driver()
    with driver.device_context(loaded.device_index):
        driver.check(d.cuCtxSynchronize(), "cuCtxSynchronize")
        ptr, size = driver.check(d.cuModuleGetGlobal(loaded.module, BUFFER.encode()), "cuModuleGetGlobal")
        raw = np.zeros(size // 8, np.uint64)
        driver.check(d.cuMemcpyDtoH(raw.ctypes.data, ptr, size), "cuMemcpyDtoH")
    labels = labels_of(compiled.lowered.traced.ir)
    warps = compiled.lowered.traced.ir.warps
    out = {}
    for index, row in enumerate(raw.reshape(-1, RECORDS)):
        marks = sorted((int(x) >> 8, labels[int(x) & 0xFF]) for x in row if x)
        if marks:
            out[divmod(index, warps)] = marks
    return out


def phases(recs: dict) -> dict:
    """{(label, next label): [cycles, ...]} over every warp: the time from each mark to the warp's next."""
    out: dict = {}
    for marks in recs.values():
        for (c0, a), (c1, b) in zip(marks, marks[1:]):
            out.setdefault((a, b), []).append(c1 - c0)
    return out


def table(recs: dict, top: int = 30) -> str:
    """The phases, most total cycles first: count, median and 90th percentile cycles."""
    rows = sorted(phases(recs).items(), key=lambda kv: -sum(kv[1]))[:top]
    width = max((len(f"{a} -> {b}") for (a, b), _ in rows), default=10)
    lines = [f"{'from -> to':<{width}} {'count':>7} {'median':>7} {'p90':>7}"]
    for (a, b), v in rows:
        v = sorted(v)
        lines.append(f"{a + ' -> ' + b:<{width}} {len(v):>7} {statistics.median(v):>7.0f} {v[int(len(v) * 0.9)]:>7}")
    return "\n".join(lines)
