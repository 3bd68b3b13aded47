"""Autotuning: `@tk.autotune(configs=[tk.Config(...)], key=[...])` (autotuner.py) picks the fastest configuration
of a kernel or template per key and GPU, and keeps the winner in memory and on disk; `run_all` compiles many kernels
on a pool of threads (what `python -m tkpy.warmup` uses); `median_ms` times a launch as the tuner does."""
from ..runtime.timing import median_ms
from .autotuner import AutotuneWarning, Autotuner, autotune
from .config import Config
from .parallel import run_all
from .timer import GpuTimer

__all__ = ["AutotuneWarning", "Autotuner", "Config", "GpuTimer", "autotune", "median_ms", "run_all"]
