"""A progress bar while tuning: tqdm's on a terminal (stderr), nothing otherwise."""
from __future__ import annotations

import contextlib
import sys


class _Silent:
    def update(self, n: int = 1) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass


@contextlib.contextmanager
def bar(total: int, what: str):
    """A bar of `total` steps labelled `what` (tqdm, where stderr is a terminal and tqdm is installed)."""
    try:
        from tqdm import tqdm
    except ImportError:
        tqdm = None
    if tqdm is None or not sys.stderr.isatty():
        yield _Silent()
        return
    with tqdm(total=total, desc=what, unit="config", file=sys.stderr, leave=False, dynamic_ncols=True) as b:
        yield b
