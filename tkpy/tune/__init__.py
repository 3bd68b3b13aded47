"""Autotuning: `@tk.autotune(configs=[tk.Config(...)], key=[...])` (autotuner.py) picks the fastest configuration
of a kernel or template per key and GPU, and keeps the winner in memory and on disk; `run_all` compiles many kernels
on a pool of threads (what `python -m tkpy.warmup` uses); `median_ms` times a launch as the tuner does; tables.py
keeps a library's policy tables re-measured per GPU (`store_table`, `tuned_rows`); `first_clean` picks the first of
some kernels that compiles without spills, the verdict kept for new processes (clean.py)."""
from ..runtime.timing import median_ms
from .autotuner import AutotuneWarning, Autotuner, autotune
from .clean import compiles_clean, first_clean
from .config import Config
from .parallel import run_all
from .tables import TunedTable, current_gpu, load_table, store_table, tuned_rows
from .timer import GpuTimer

__all__ = ["AutotuneWarning", "Autotuner", "Config", "GpuTimer", "TunedTable", "autotune", "compiles_clean",
           "current_gpu", "first_clean", "load_table", "median_ms", "run_all", "store_table", "tuned_rows"]
