"""The benchmarks' timing: tkpy.runtime.timing's median of CUDA-graph replays (median_ms, graph_of, shared with
autotuning), and the orders in which the benchmarks time functions side by side."""
from __future__ import annotations

from tkpy.runtime.timing import BUDGET_MS, MAX_CALLS, MIN_REPLAYS, TARGET_REPLAY_MS, WARMUP_CALLS, graph_of, median_ms

__all__ = ["BUDGET_MS", "MAX_CALLS", "MIN_REPLAYS", "TARGET_REPLAY_MS", "WARMUP_CALLS", "balanced_orders", "graph_of",
           "median_ms", "paired_ms"]


def paired_ms(first, second) -> tuple[float, float]:
    """median_ms of two functions timed first, second, second, first, each the mean of its two: the one timed
    right after the other gains (a warmed card: the 8192^3 GEMM ratio moved by up to 8% with the order,
    RESULTS.md run 61), and this order cancels that drift."""
    a, b = median_ms(first), median_ms(second)
    b += median_ms(second)
    a += median_ms(first)
    return a / 2, b / 2


def balanced_orders(n: int) -> list[list[int]]:
    """Orders in which to time n functions round after round so that each follows every other equally often
    (a Williams design: n orders for even n, 2n for odd; every ordered pair adjacent once, or twice). The one
    timed right after another is not timed alike (paired_ms); with a plain rotation each function keeps one
    predecessor, and two kernels with identical code measured 2.5% apart (RESULTS.md run 170)."""
    first, low, high = [0], 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    orders = [[(x + shift) % n for x in first] for shift in range(n)]
    return orders if n % 2 == 0 or n == 1 else orders + [order[::-1] for order in orders]
