"""Compiles that run off the caller's thread, and callers that will not wait for NVRTC.

A tuned kernel can take NVRTC 1-2.5 s (attention's forward at D128 on the H200 host, RESULTS.md run 287), a plain
one 0.15-0.45 s. tkpy.QuickFirstCall (frontend/quick_first_call.py) lets an op's first call run a plain kernel while
its tuned kernel compiles in a background thread (NVRTC releases the GIL). This module holds the two runtime pieces:

- `refusing_waits()`: within it, on this thread, compile_cuda raises CompilePending instead of running NVRTC on a
  miss of the memory and disk caches (a hit returns as always);
- `start(job)` runs a compile job on a daemon thread of its own (a process that exits does not wait for it: a disk
  cache entry it has not written is simply not there; entries are written whole or not at all), and `wait()`
  joins every job started, which timing (tkpy.runtime.timing, autotuning, benchmarks) does before it times;
- `start_after_launch(job)` starts it once the calling thread's next kernel launch is made (`launched()`, which
  the kernels' first launches call), or after LAUNCH_WAIT_S: the tuned kernel's trace and prelude choice (70-90 ms of
  Python) then do not take the GIL from the quick kernel's load and launch (the interpreter hands the GIL over at
  most every 5 ms).
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable

LAUNCH_WAIT_S = 0.1

_refusing = threading.local()
_launch_waits = threading.local()     # .events: what this thread's next launch sets
_jobs_lock = threading.Lock()
_jobs: list[threading.Thread] = []


class CompilePending(Exception):
    """compile_cuda within refusing_waits(): the kernel is in neither cache and would need NVRTC now."""

    def __init__(self, kernel_name: str):
        super().__init__(f"tkpy kernel '{kernel_name}' is not compiled yet (refusing_waits: NVRTC not run)")
        self.kernel_name = kernel_name


@contextlib.contextmanager
def refusing_waits():
    """On this thread, compile_cuda raises CompilePending where it would run NVRTC (nesting allowed)."""
    before = getattr(_refusing, "depth", 0)
    _refusing.depth = before + 1
    try:
        yield
    finally:
        _refusing.depth = before


def waits_refused() -> bool:
    """Whether this thread is within refusing_waits()."""
    return getattr(_refusing, "depth", 0) > 0


def start(job: Callable[[], None], name: str) -> threading.Thread:
    """Run `job` on a new daemon thread named `name`; wait() joins it. The job runs outside refusing_waits()."""
    thread = threading.Thread(target=job, name=name, daemon=True)
    with _jobs_lock:
        _jobs[:] = [t for t in _jobs if t.is_alive()]
        _jobs.append(thread)
    thread.start()
    return thread


def start_after_launch(job: Callable[[], None], name: str) -> threading.Thread:
    """start(job), the job waiting first until this thread has made its next launch (launched()) or LAUNCH_WAIT_S
    seconds have passed (an op that does not launch after all)."""
    launch = threading.Event()
    events = getattr(_launch_waits, "events", None)
    if events is None:
        events = _launch_waits.events = []
    events.append(launch)
    timeout = LAUNCH_WAIT_S

    def after_the_launch():
        launch.wait(timeout)
        job()
    return start(after_the_launch, name)


def launched() -> None:
    """This thread has made a launch: the jobs start_after_launch started on it go."""
    events = getattr(_launch_waits, "events", None)
    while events:
        events.pop().set()


def wait(timeout: float | None = None) -> bool:
    """Join every compile job started so far (each up to `timeout` seconds); True if none is still running."""
    with _jobs_lock:
        running = [t for t in _jobs if t.is_alive()]
    for thread in running:
        thread.join(timeout)
    return not any(t.is_alive() for t in running)


__all__ = ["CompilePending", "launched", "refusing_waits", "start", "start_after_launch", "wait", "waits_refused"]
