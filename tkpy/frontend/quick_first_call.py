"""An op's first call without waiting for its tuned kernel's compile: QuickFirstCall.

An op whose tuned kernel takes NVRTC seconds (attention's forward: 1.8-2.3 s at D128 on the H200 host) runs, on a
cold cache, a plain kernel that compiles in a fraction of that (0.4 s), while the tuned one compiles in a background
thread; the first call after that compile is done runs the tuned kernel, and every call from then on. With a warm
disk cache (a second process, or `python -m tkpy.warmup` ahead) the tuned kernel is there at once and the plain one
is never compiled.

    quick_first = tk.QuickFirstCall("attention")
    plan = quick_first.pick(key, tuned=lambda: plan_compiled(...), quick=lambda: plan_compiled(..., **PLAIN))

`tuned()` and `quick()` return a plan whose kernels are compiled (e.g. Kernel.compile(*args) called): pick calls
tuned() within runtime.background.refusing_waits(), so that a kernel missing from both caches raises
CompilePending instead of running NVRTC; then it makes quick() and runs tuned() again on a background thread (which
compiles) once the caller has launched the quick plan (runtime.background.start_after_launch), returning quick()'s
plan meanwhile. It returns (plan, final): final when the plan is tuned()'s, which the op may keep.

The quick kernel computes the same function with other tiles or schedules, so its results can differ from the
tuned kernel's in the last bits (a float sum in another order). Where that matters, the tuned kernel is waited for:
- TKPY_QUICK_FIRST_CALL=0 in the environment (every first call waits, as before);
- torch.use_deterministic_algorithms(True);
- while a CUDA graph is captured (a graph keeps the kernel it recorded), under compile_only() (python -m
  tkpy.warmup compiles the tuned kernels) and in the interpreter;
- timing (tkpy.runtime.timing, autotuning, the benchmarks) joins the background compiles before it times.
tk.wait_for_compiles() joins them too.
"""
from __future__ import annotations

import os
import threading
from typing import Callable, Hashable, TypeVar

from ..interpret.launch import interpret_requested
from ..runtime import background
from . import kernel as _kernel

Plan = TypeVar("Plan")
ENV = "TKPY_QUICK_FIRST_CALL"


def quick_first_calls_allowed() -> bool:
    """Whether a first call may run a quick kernel now (the module docstring lists when it may not)."""
    if os.environ.get(ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return False
    if _kernel.compiling_only() or interpret_requested():
        return False
    import torch
    if torch.are_deterministic_algorithms_enabled():
        return False
    return not (torch.cuda.is_available() and torch.cuda.is_current_stream_capturing())


class QuickFirstCall:
    """Per key (what determines an op's kernels: shapes, dtypes, options), the tuned plan once its kernels are
    compiled, a quick plan until then (the module docstring)."""

    def __init__(self, name: str):
        self.name = name
        self._lock = threading.Lock()
        self._compiling: dict = {}          # key -> the background thread compiling tuned()'s kernels

    def pick(self, key: Hashable, tuned: Callable[[], Plan], quick: Callable[[], Plan] | None) -> tuple[Plan, bool]:
        """(tuned(), True) where its kernels are compiled or quick first calls are not allowed (then after its
        background compile, if one runs, and compiling on this thread if need be); else (quick(), False) with
        tuned()'s compile started in the background, or quick None: (tuned(), True) compiled here."""
        with self._lock:
            compiling = self._compiling.get(key)
            if compiling is not None and not compiling.is_alive():
                del self._compiling[key]    # done: tuned() below finds its kernels (or raises what it raised)
                compiling = None
        allowed = quick is not None and quick_first_calls_allowed()
        if compiling is not None:
            if allowed:
                return quick(), False
            compiling.join()
            return tuned(), True
        if not allowed:
            return tuned(), True
        try:
            with background.refusing_waits():
                return tuned(), True
        except background.CompilePending:
            pass
        plan = quick()      # first, and the tuned plan's compile after its launch: its trace holds the GIL
        with self._lock:
            if key not in self._compiling:
                self._compiling[key] = background.start_after_launch(lambda: _quietly(tuned),
                                                                     f"tkpy {self.name}: compiling {key!r}"[:120])
        return plan, False


def _quietly(tuned: Callable) -> None:
    """tuned() on the background thread, its result dropped (the kernels it compiled stay in the caches) and an
    error too: the caller's next tuned() raises it where the user sees it."""
    try:
        tuned()
    except Exception:   # noqa: BLE001 - re-raised by the caller's own tuned()
        pass


def wait_for_compiles(timeout: float | None = None) -> bool:
    """Join the background compiles QuickFirstCall started (each up to `timeout` s); True if none still runs."""
    return background.wait(timeout)


__all__ = ["QuickFirstCall", "quick_first_calls_allowed", "wait_for_compiles"]
