"""Compile many kernels at once: NVRTC releases the GIL (cuda-bindings calls it without holding it), so threads
compile in parallel while tracing and code generation, which are Python, take turns."""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor, as_completed

from .progress import bar


def workers(jobs: int, limit: int | None = None) -> int:
    """Threads for `jobs` compiles: one per CPU core (at most `limit`), no more than the jobs."""
    return max(1, min(jobs, limit or os.cpu_count() or 1))


def run_all(jobs: list, what: str, keep: tuple = (), limit: int | None = None) -> list:
    """Run each job (a callable) on a pool of threads, with a progress bar labelled `what`; returns, in order, each
    job's result or the exception of a `keep` class it raised (e.g. a kernel that does not trace or compile).
    Other exceptions propagate."""
    results: list = [None] * len(jobs)
    with bar(len(jobs), what) as b, ThreadPoolExecutor(workers(len(jobs), limit)) as pool:
        futures = {pool.submit(job): i for i, job in enumerate(jobs)}
        for done in as_completed(futures):
            try:
                results[futures[done]] = done.result()
            except keep as e:
                results[futures[done]] = e
            b.update()
    return results
