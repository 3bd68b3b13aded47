"""GPU time per call of a function, from CUDA-graph replays: what the benchmarks report and what autotuning
(tkpy.tune) compares.

Timing calls one by one with CUDA events measures the host's launch work as well when a kernel is short
(tkpy's launch takes about 6 us on the host, torch.matmul's as much or more, a 1024^3 GEMM about 7 us on
the GPU). So `median_ms` warms the function up, captures a CUDA graph of `calls` back-to-back calls
(enough that one replay lasts TARGET_REPLAY_MS or more), replays it between CUDA events, and returns
the median of the replays' milliseconds divided by `calls`: the GPU time per call with the kernels
back to back, as in a model's forward pass.

The function must be capturable: no host synchronisation, and no allocation the graph cannot own (torch
allocations are fine, they come from the graph's pool). Its inputs stay where they are: every call of a
graph reads the same tensors (and a kernel that writes one of its inputs sees its own results on the next call).
"""
from __future__ import annotations

import math

from . import background

TARGET_REPLAY_MS = 1.0     # one replay lasts at least this long (so the graph launch's own cost is noise)
BUDGET_MS = 300            # replays of one measurement last about this long in all
MIN_REPLAYS = 5
MAX_CALLS = 2000           # calls in one graph at most (for functions of a microsecond or less)
WARMUP_CALLS = 3


def median_ms(fn, budget_ms: float = BUDGET_MS) -> float:
    """Median GPU milliseconds per call of `fn` over CUDA-graph replays (see the module docstring), the replays
    lasting about `budget_ms` in all (at least MIN_REPLAYS of them). Background compiles (QuickFirstCall's tuned
    kernels) finish first, so that what is timed is what a warm process runs."""
    background.wait()
    graph, calls, replay_ms = graph_of(fn)
    replays = max(MIN_REPLAYS, round(budget_ms / replay_ms))
    times = sorted(_timed_replays(graph, replays))
    return times[len(times) // 2] / calls


def graph_of(fn, target_ms: float = TARGET_REPLAY_MS):
    """(graph, calls, milliseconds of one replay): `fn` warmed up, then a CUDA graph of `calls` back-to-back calls
    of it, enough that a replay lasts target_ms or more (up to MAX_CALLS)."""
    import torch

    # Warm up outside the capture (compiles, caches, library handles), on a side stream as torch recommends.
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUP_CALLS):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()

    calls = 1
    while True:
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        graph.replay()                           # the first replay uploads the graph: not timed
        replay_ms = _timed_replays(graph, 1)[0]
        if replay_ms >= target_ms or calls >= MAX_CALLS:
            return graph, calls, replay_ms
        # Too short: as many calls as make target_ms by this replay's time per call, and a fifth more.
        calls = min(MAX_CALLS, math.ceil(calls * 1.2 * target_ms / max(replay_ms, 1e-4)))
        del graph


def _timed_replays(graph, replays: int) -> list[float]:
    """Milliseconds of each of `replays` back-to-back replays, each between its own pair of CUDA events."""
    import torch

    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) for start, end in events]
