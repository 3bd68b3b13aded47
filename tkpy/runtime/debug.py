"""Debug mode for the GPU: waits that time out, name themselves and stop the kernel, instead of hanging; and
memory accesses checked against their bounds, which stop the kernel naming the access instead of corrupting memory.

With ``TKPY_DEBUG=1`` (read when a kernel is traced: it is part of the specialization key, so debug and normal
builds never mix) or ``@tk.kernel(..., debug=True)`` (``debug=False`` keeps a kernel out of it whatever the
environment says), a kernel is generated with bounded waits (tkpy/codegen/debug.py): each wait polls with
``mbarrier.try_wait`` and reads ``%globaltimer``; past ``TKPY_DEBUG_TIMEOUT_S`` seconds (default 4) lane 0 of the
waiting warp prints one line (printf) naming the kernel, the block, the warp, the barrier, the phase and the
Python line of the wait, records the same facts in this module's record, and executes ``__trap()``. (Kernels that
issue wgmma only record, unless ``TKPY_DEBUG_PRINTF=1``: see Settings.prints.)

    wait         how it is bounded in debug mode
    tk.wait      mbarrier.try_wait.parity in a loop (the normal build's loop, with a clock)
    tk.sync()    an mbarrier of the block stands in for __syncthreads (each warp arrives, then waits on its arrival)
    named_sync   named barriers 0..15 become mbarriers (named_arrive arrives on them); warpgroup.any/any_greater
                 meet on that mbarrier first (bounded), then vote with bar.red.or, which all of them then reach
    cluster.sync two mbarriers per block, used in turn: each warp arrives on every block's, then waits on its own
    wgmma        the warpgroup meets on an mbarrier before each wgmma, so that a wgmma wait cannot hang on a warp
                 of the warpgroup that never issues the op (wgmma.wait_group itself has no try form)

Bounds checks (same mode): before each tk.load / tk.store / tk.load_async between a global tensor and a tile, each
tk.atomic_add, each op that indexes an array of shared tiles or semaphores at a run-time index, and each shared
subtile at run-time coordinates, the debug build checks the access (tkpy/codegen/debug.py lists what and why TMA
copies are left to the hardware); one that fails is recorded, printed and trapped the same way, and the launch
raises :class:`tkpy.GpuBoundsError` naming the access, its Python line, the axis and the range against its bound.

Not bounded: ``setmaxnreg`` (``tk.consumer_registers``: it blocks in hardware until registers are free, no try
form) and, where the kernel's named barriers cannot be mapped to mbarriers (one barrier id used with two warp
counts, or run-time ids with different counts), its named barriers. For those the host side bounds the whole
kernel instead (``TKPY_DEBUG_KERNEL_TIMEOUT_S``, below).

The record is mapped pinned host memory (cuMemHostAlloc with DEVICEMAP), one per loaded module, whose device
address is set into the module's ``tkpy_debug_record`` pointer when it is loaded: after a ``__trap()`` the CUDA
context is unusable and device memory cannot be read back, but host memory can. Every debug launch synchronizes
its stream (unless the stream is being captured into a CUDA graph; polling, up to ``TKPY_DEBUG_KERNEL_TIMEOUT_S``
seconds, default 30 or more than twice the wait timeout); a failure then raises :class:`tkpy.GpuTimeoutError` naming the wait, its Python line, the block, the
warp and the barrier (the CUDA context stays broken: end the process), and a kernel that does not finish in time
raises it too, listing the kernel's unbounded waits.

Launches of debug builds skip the fast launch path (each goes through the checks and the synchronization). A
kernel that has already launched without debug mode keeps its fast path for the arguments it has seen: set
``TKPY_DEBUG`` before a process's first launch, or use ``debug=True`` on the kernel.
"""
from __future__ import annotations

import ctypes
import os
import threading
from dataclasses import dataclass
from typing import Optional

from ..codegen.debug import plan_for
from ..codegen.prelude.debug import BOUNDS, RECORD_SYMBOL, SLOT, SLOTS, WAIT   # the device record's layout
from .errors import GpuBoundsError, GpuTimeoutError

ENV = "TKPY_DEBUG"
TIMEOUT_ENV = "TKPY_DEBUG_TIMEOUT_S"
KERNEL_TIMEOUT_ENV = "TKPY_DEBUG_KERNEL_TIMEOUT_S"
PRINTF_ENV = "TKPY_DEBUG_PRINTF"
DEFAULT_TIMEOUT_S = 4.0
DEFAULT_KERNEL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class Settings:
    """What a debug build bakes in (part of the specialization key and of the generated code)."""

    timeout_ns: int
    printf: Optional[bool] = None    # None: printf unless the kernel issues wgmma (see `prints`)

    def prints(self, uses_wgmma: bool) -> bool:
        """Whether the timeout line is printed on the device. A printf is a function call, and ptxas serializes
        every wgmma of a function that holds a call (C7510, "wgmma pipeline crossing function boundary"): that
        would change how a debug build's wgmmas overlap and could hide the very missing wait one is looking for.
        So kernels with wgmma only record (the host's error says the same), unless TKPY_DEBUG_PRINTF=1."""
        return (not uses_wgmma) if self.printf is None else self.printf

    @property
    def timeout_s(self) -> float:
        return self.timeout_ns / 1e9


def enabled() -> bool:
    """True when ``TKPY_DEBUG`` is 1/true/yes/on."""
    return os.environ.get(ENV, "0").strip().lower() in ("1", "true", "yes", "on")


def timeout_s() -> float:
    """The wait timeout in seconds: ``TKPY_DEBUG_TIMEOUT_S`` (default 4)."""
    return _seconds(TIMEOUT_ENV, DEFAULT_TIMEOUT_S)


def kernel_timeout_s(settings: Settings) -> float:
    """How long the host waits for a debug launch to finish (0: for ever): ``TKPY_DEBUG_KERNEL_TIMEOUT_S``, by
    default 30 s, and never less than twice the wait timeout plus 5 s (a bounded wait reports first)."""
    limit = _seconds(KERNEL_TIMEOUT_ENV, DEFAULT_KERNEL_TIMEOUT_S, allow_zero=True)
    return 0.0 if limit == 0 else max(limit, 2 * settings.timeout_s + 5)


def _seconds(env: str, default: float, allow_zero: bool = False) -> float:
    text = os.environ.get(env, "").strip()
    if not text:
        return default
    try:
        value = float(text)
    except ValueError:
        raise ValueError(f"{env} must be a number of seconds, got {text!r}") from None
    if value < 0 or (value == 0 and not allow_zero) or value != value:
        raise ValueError(f"{env} must be a positive number of seconds, got {text!r}")
    return value


def settings(option: Optional[bool] = None) -> Optional[Settings]:
    """The debug settings of a kernel being traced: its `debug=` option, or where that is None, ``TKPY_DEBUG``;
    None for a normal build."""
    on = enabled() if option is None else bool(option)
    if not on:
        return None
    text = os.environ.get(PRINTF_ENV, "").strip().lower()
    printf = None if not text else text in ("1", "true", "yes", "on")
    return Settings(int(round(timeout_s() * 1e9)), printf)


# ---------------------------------------------------------------------------------------------------------------
# host side: the record, launching, reporting
# ---------------------------------------------------------------------------------------------------------------

class Record:
    """One loaded module's record: SLOTS slots in mapped pinned host memory (readable after the context broke)."""

    def __init__(self, loaded):
        from . import driver

        self.size = SLOT.size * SLOTS
        self.host, self.device = driver.host_mapped_alloc(self.size, loaded.device_index)
        self.loaded = loaded
        self.clear()
        driver.set_module_pointer(loaded, RECORD_SYMBOL, self.device)

    def clear(self) -> None:
        ctypes.memset(self.host, 0, self.size)

    def entries(self) -> list[tuple]:
        """The timed-out waits, as (site, (block x, y, z), warp, index, phase, waited ns), in the order written."""
        return [(site, block, warp, index, phase, waited) for kind, site, block, warp, index, phase, waited, *_
                in self._slots() if kind == WAIT]

    def bounds_entries(self) -> list[tuple]:
        """The failed bounds checks, as (check, (block x, y, z), warp, which, first, last, limit)."""
        return [(check, block, warp, which, first, last, limit) for kind, check, block, warp, which, _, _, first,
                last, limit in self._slots() if kind == BOUNDS]

    def _slots(self) -> list[tuple]:
        raw = ctypes.string_at(self.host, self.size)
        out = []
        for i in range(SLOTS):
            valid, site, bx, by, bz, *rest = SLOT.unpack_from(raw, i * SLOT.size)
            if valid in (WAIT, BOUNDS):
                out.append((valid, site, (bx, by, bz), *rest))     # warp, index, phase, waited, first, last, limit
        return out


_records: dict = {}   # LoadedKernel -> Record
_records_lock = threading.Lock()


def record_of(loaded) -> Record:
    """The record of a loaded debug module, made (and its pointer set) once, on first use."""
    r = _records.get(loaded)
    if r is None:
        with _records_lock:
            r = _records.get(loaded)
            if r is None:
                r = _records[loaded] = Record(loaded)
    return r


def launch(ready, grid, args, slots, kernel, compiled) -> None:
    """One launch of a debug build: clear its record, launch, wait for the stream and explain a failure."""
    from .driver import DriverError, stream_is_capturing, synchronize_stream

    stream_of, device, launcher = ready.entry[2], ready.entry[3], ready.entry[5]
    record = record_of(launcher.kernel)
    record.clear()
    settings_ = compiled.lowered.traced.ir.debug
    stream = stream_of(device)
    try:
        ready.launch_once(grid, args, slots, kernel)
        if stream_is_capturing(stream, device):   # into a CUDA graph: nothing runs yet, so nothing to wait for
            return
        finished = synchronize_stream(stream, kernel_timeout_s(settings_), device)
    except DriverError as e:
        report = _bounds_error(compiled, record, e) or _timeout_error(compiled, record, e)
        if report is None:
            raise
        raise report from e
    if not finished:
        raise _still_running_error(compiled, kernel_timeout_s(settings_))


def _timeout_error(compiled, record: Record, error):
    """The GpuTimeoutError that a failed debug launch's record explains, or None (no wait timed out)."""
    entries = record.entries()
    if not entries:
        return None
    ir = compiled.lowered.traced.ir
    plan = plan_for(ir)
    site, block, warp, index, phase, waited = entries[0]
    where = plan.sites[site] if site < len(plan.sites) else None
    blocks = f"block ({block[0]}, {block[1]}, {block[2]})"
    lines = [f"a wait timed out on the GPU (debug mode: {TIMEOUT_ENV}={ir.debug.timeout_s:g}) in {blocks} of "
             f"kernel {ir.name}:"]
    if where is None:
        lines.append(f"  warp {warp} waited at an unknown site {site}")
    else:
        lines.append(f"  warp {warp} waits at {where.source}{_roles(where)}")
        lines.append(f"    on {where.describe(block, index, phase)}: not done after {waited / 1e9:.1f} s")
    return GpuTimeoutError(_report(lines, entries, plan.sites, "timed out", error, ""), kernel=ir.name, block=block,
                           warp=warp, loc=where.loc if where else None, site=where, index=index, phase=phase,
                           waited_s=waited / 1e9)


def _bounds_error(compiled, record: Record, error):
    """The GpuBoundsError that a failed debug launch's record explains, or None (no bounds check failed)."""
    entries = record.bounds_entries()
    if not entries:
        return None
    ir = compiled.lowered.traced.ir
    plan = plan_for(ir)
    check, block, warp, which, first, last, limit = entries[0]
    where = plan.checks[check] if check < len(plan.checks) else None
    lines = [f"an out-of-bounds access on the GPU (debug mode) in block ({block[0]}, {block[1]}, {block[2]}) of "
             f"kernel {ir.name}:"]
    if where is None:
        lines.append(f"  warp {warp} failed an unknown check {check}")
    else:
        lines.append(f"  warp {warp} at {where.source}{_roles(where)}")
        lines.append(f"    {where.describe(which, first, last, limit)}")
    return GpuBoundsError(_report(lines, entries, plan.checks, "failed a check", error, " before the access"),
                          kernel=ir.name, block=block, warp=warp, loc=where.loc if where else None, check=where,
                          axis=which, first=first, last=last, limit=limit)


def _report(lines: list, entries, places, what: str, error, when: str) -> str:
    """The message of a trapped debug launch: its first entry's `lines`, the other warps' entries (which `what`
    too, 8 shown; `places` their sites or checks), and the trap."""
    others = entries[1:]
    if others:
        shown = ", ".join(f"block ({b[0]}, {b[1]}, {b[2]}) warp {w} at "
                          f"{places[p].loc.short if p < len(places) else p}" for p, b, w, *_ in others[:8])
        more = f" and {len(others) - 8} more" if len(others) > 8 else ""
        lines = lines + [f"  {len(others)} more warp(s) {what} too: {shown}{more}"]
    return "\n".join(lines + [f"The kernel stopped with __trap() ({getattr(error, 'name', '') or error}){when}; the "
                              f"CUDA context cannot be used again: end the process."])


def _roles(site) -> str:
    return "".join(f", inside the branch at {loc.short}" for loc in site.branches)


def _still_running_error(compiled, limit: float):
    ir = compiled.lowered.traced.ir
    plan = plan_for(ir)
    lines = [f"kernel {ir.name} did not finish within {limit:g} s ({KERNEL_TIMEOUT_ENV}) and none of its bounded "
             f"waits timed out (debug mode, {TIMEOUT_ENV}={ir.debug.timeout_s:g})"]
    if plan.unbounded:
        lines.append("  it may be stuck at one of its waits that debug mode cannot bound:")
        lines += [f"    {u.source}: {u.why}" for u in plan.unbounded]
    else:
        lines.append("  every wait it has is bounded: it may loop for a very long time, or wait on a barrier that "
                     "another kernel must complete")
    lines.append("The kernel is still running: the CUDA context cannot be used again; end the process.")
    return GpuTimeoutError("\n".join(lines), kernel=ir.name)


def sites(kernel, *args) -> list:
    """The bounded waits of `kernel`'s debug build for `args` (tkpy/codegen/debug.py's Site), in site order."""
    return list(plan_for(kernel.trace(*args).ir).sites)


__all__ = ["DEFAULT_TIMEOUT_S", "ENV", "KERNEL_TIMEOUT_ENV", "Record", "Settings", "TIMEOUT_ENV", "enabled",
           "kernel_timeout_s", "launch", "record_of", "settings", "sites", "timeout_s"]
