"""CPU semantics of the signals between GPUs and blocks (tk.signal, tk.wait_signal): a signal writes its flag at once
(the interpreter's memory is sequentially consistent) and wakes the simulated ranks (ranks.py); a wait blocks the
warp until the flag reaches its value. Such a wait is `external`: another rank or block may still give the signal,
so a launch whose warps all wait does not deadlock at once but stalls its rank (machine.run_together)."""
from __future__ import annotations

import numpy as np

from . import ranks
from .numerics import wrap_int32
from .registry import semantics
from .sync import Wait


def _flag(warp, op, what: str) -> np.ndarray:
    """The flag's element as a 1x1 int32 view of its tensor, bounds-checked."""
    g, *coord = op.args[:5]
    cell = warp.global_tensor(g).box(tuple(warp.value(c) for c in coord), 1, 1, f"{what} on `{g.name}`", op.loc)
    return cell.view(np.int32)


@semantics("signal", attrs=("op",))
def signal(warp, op):
    flag = _flag(warp, op, "signal")
    value = int(warp.value(op.args[5]))
    old = int(flag[0, 0])
    flag[0, 0] = value if op.attrs["op"] == "set" else wrap_int32(old + value)
    ranks.signalled()


class SignalWait(Wait):
    """A warp waiting for a flag to reach a value."""

    external = True

    def __init__(self, flag: np.ndarray, value: int, name: str):
        self.flag, self.value, self.name = flag, value, name

    def ready(self) -> bool:
        return int(self.flag[0, 0]) >= self.value

    def describe(self) -> str:
        return (f"the signal flag `{self.name}`, which holds {int(self.flag[0, 0])}: waiting for it to reach "
                f"{self.value} (a tk.signal of another GPU, block or launch)")


@semantics("wait_signal")
def wait_signal(warp, op):
    return SignalWait(_flag(warp, op, "wait_signal"), int(warp.value(op.args[5])), op.args[0].name)
