"""matplotlib for the benchmarks' plots, when it is installed."""
from __future__ import annotations


def pyplot(what: str):
    """matplotlib.pyplot on the file-only Agg backend, or None (saying that `what` is not drawn) without
    matplotlib."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print(f"matplotlib is not installed: no {what}")
        return None
    return plt
